"""GraphGPO (gigpo.advantages.graph): the recipe's own outputs (tests/data, made by
scripts/graphgpo_reference_vectors.py), a plain-loop restatement on shuffled uneven groups, and a
hand-made graph."""

from __future__ import annotations

import json
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import pytest

from gigpo.advantages import compute_advantages, estimator_options, graph_step_returns, graphgpo, runtime_inputs

DATA = json.loads((Path(__file__).parent / "data" / "graphgpo_reference_vectors.json").read_text())
CASES = DATA["cases"]
TOL = 1e-4


def inputs(case):
    """The estimator's inputs from a reference case: penalised row scores, penalties, ids, anchors."""
    rows, p = case["rows"], case["params"]
    pen = np.array([0.0 if r["valid"] else p["invalid_action_penalty_coef"] for r in rows])
    scores = np.array([r["episode_reward"] for r in rows]) - pen
    col = lambda k: [r[k] for r in rows]  # noqa: E731
    return scores, pen, col("uid"), col("traj_uid"), col("anchor_obs")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_recipe_outputs(case):
    p = case["params"]
    scores, pen, uid, traj, anchors = inputs(case)
    res = compute_advantages(
        "graphgpo",
        scores=scores,
        episode_ids=uid,
        traj_ids=traj,
        anchors=anchors,
        penalties=pen,
        mode=p["mode"],
        step_weight=p["step_advantage_w"],
        episode_weight=p["episode_advantage_w"],
        distance_decay=p["gamma"],
        normalize_distance=p["normalize_distance"],
        similarity_threshold=p["similarity_thresh"] if p["enable_similarity"] else None,
        epsilon=p["epsilon"],
    )
    returns, _, _ = graph_step_returns(
        uid,
        traj,
        anchors,
        scores + pen > 0,
        decay=p["gamma"],
        normalize_distance=p["normalize_distance"],
        similarity_threshold=p["similarity_thresh"] if p["enable_similarity"] else None,
    )
    out = case["outputs"]
    np.testing.assert_allclose(returns, out["graph_returns"], atol=TOL, rtol=0)
    np.testing.assert_allclose(res.advantages, out["advantage_per_sample"], atol=TOL, rtol=0)


def test_reference_file_covers_the_options():
    params = [c["params"] for c in CASES]
    assert any(p["enable_similarity"] for p in params) and any(p["normalize_distance"] for p in params)
    assert any(p["mode"] == "mean_norm" for p in params) and any(p["episode_advantage_w"] == 0 for p in params)
    assert any(p["invalid_action_penalty_coef"] for p in params)
    # similarity merges graph nodes in the reference: same rows, other outputs
    by = {c["name"]: c["outputs"]["advantage_per_sample"] for c in CASES}
    assert not np.allclose(by["similarity_0.9"], by["similar_texts_exact"])
    assert "recipe/GraphGPO" in DATA["source"]["reference"]


def loop_graphgpo(scores, pen, ep, traj, anchors, decay, normalize, mode, w_s, w_e, eps=1e-6):
    """A plain restatement: dict graphs per episode group, BFS from the goal, per-group loops."""
    n = len(scores)
    rows_of = defaultdict(list)
    for i in range(n):
        rows_of[traj[i]].append(i)  # batch order = time order within a trajectory
    edges = defaultdict(set)  # (episode, node) -> predecessors
    nodes = defaultdict(set)
    step_to = {}
    for t, rows in rows_of.items():
        won = scores[rows[-1]] + pen[rows[-1]] > 0
        for k, i in enumerate(rows):
            here = ("s", anchors[i])
            there = ("s", anchors[rows[k + 1]]) if k + 1 < len(rows) else (("goal",) if won else ("end", t))
            edges[(ep[i], there)].add(here)
            nodes[ep[i]].update([here, there])
            step_to[i] = (here, there)
    dist = {}
    for e, ns in nodes.items():
        d = {("goal",): 0}
        q = deque([("goal",)])
        while q:
            u = q.popleft()
            for v in edges[(e, u)]:
                if v not in d:
                    d[v] = d[u] + 1
                    q.append(v)
        far = max(d.values())
        for v in ns:
            dist[(e, v)] = d.get(v, far + 1)
    g = np.zeros(n)
    for i in range(n):
        here, there = step_to[i]
        dt, dh = dist[(ep[i], there)], dist[(ep[i], here)]
        g[i] = np.float32(10 * decay ** (dt - dh + 1 if normalize else dt)) - pen[i]

    def norm(x, key, single_mean_is_value):
        out = np.zeros(n)
        groups = defaultdict(list)
        for i in range(n):
            groups[key(i)].append(i)
        for idx in groups.values():
            v = x[idx]
            if len(idx) == 1:
                mean, std = (v[0] if single_mean_is_value else 0.0), 1.0
            else:
                mean, std = v.mean(), v.std(ddof=1)
            out[idx] = v - mean if mode == "mean_norm" else (v - mean) / (std + eps)
        return out

    a_s = norm(g, lambda i: (ep[i], anchors[i]), True)
    a_e = norm(np.asarray(scores, float), lambda i: ep[i], False)
    return w_s * a_s + w_e * a_e


@pytest.mark.parametrize("seed", range(6))
def test_matches_plain_loop_on_shuffled_uneven_groups(seed):
    rng = np.random.default_rng(seed)
    states = [f"s{i}" for i in range(5)]
    traj_rows = []
    for e in range(int(rng.integers(1, 5))):
        for t in range(int(rng.integers(1, 6))):
            length = int(rng.integers(1, 8))
            won = rng.random() < 0.4
            pen = np.where(rng.random(length) < 0.25, 0.1, 0.0)
            score = 10.0 if won else 0.0
            traj_rows.append([(score - pen[k], pen[k], e, f"{e}-{t}", str(rng.choice(states))) for k in range(length)])
    queues, rows = [list(r) for r in traj_rows], []
    while any(queues):  # interleave trajectories, each in time order
        rows.append(queues[int(rng.choice([i for i, q in enumerate(queues) if q]))].pop(0))
    scores, pen, ep, traj, anchors = (list(c) for c in zip(*rows))
    decay, normalize = float(rng.choice([0.1, 0.5, 0.9])), bool(seed % 2)
    mode = ["mean_std_norm", "mean_norm"][seed % 3 == 0]
    res = graphgpo(
        scores, ep, traj, anchors, pen, mode=mode, step_weight=0.7, episode_weight=0.5, decay=decay,
        normalize_distance=normalize,
    )  # fmt: skip
    want = loop_graphgpo(np.array(scores), np.array(pen), ep, traj, anchors, decay, normalize, mode, 0.7, 0.5)
    np.testing.assert_allclose(res.advantages, want, atol=1e-4, rtol=0)


def test_hand_made_graph():
    """One group, three trajectories over states A..D; distances and returns worked out by hand.

    t0: A -> B -> goal (won)        edges A>B, B>goal
    t1: A -> C -> B -> goal (won)   edges A>C, C>B, B>goal
    t2: A -> D -> D (failed)        edges A>D, D>D, D>end
    d(goal)=0, d(B)=1, d(A)=2, d(C)=2, D and end cannot reach the goal: largest finite (2) + 1 = 3.
    Returns 10 * 0.1^d(reached): t0 [1, 10], t1 [0.1, 1, 10], t2 [0.01, 0.01, 0.01].
    """
    anchors = ["A", "B", "A", "C", "B", "A", "D", "D"]
    traj = [0, 0, 1, 1, 1, 2, 2, 2]
    won = np.array([True] * 5 + [False] * 3)
    returns, d_from, d_to = graph_step_returns([0] * 8, traj, anchors, won)
    np.testing.assert_allclose(returns, [1, 10, 0.1, 1, 10, 0.01, 0.01, 0.01], rtol=1e-6)
    np.testing.assert_array_equal(d_from, [2, 1, 2, 2, 1, 2, 3, 3])
    # normalize_distance: 10 * 0.1^(d(reached) - d(here) + 1): progress earns 10, a sidestep 1
    progress, _, _ = graph_step_returns([0] * 8, traj, anchors, won, normalize_distance=True)
    np.testing.assert_allclose(progress, [10, 10, 1, 10, 10, 0.1, 1, 1], rtol=1e-6)
    # Step group A = rows 0, 2, 5 with returns 1, 0.1, 0.01 (mean_norm): A>B beats A>C beats A>D.
    res = graphgpo([10] * 5 + [0] * 3, [0] * 8, traj, anchors, mode="mean_norm", episode_weight=0.0)
    mean_a = (1 + 0.1 + 0.01) / 3
    np.testing.assert_allclose(res.step_advantages[[0, 2, 5]], [1 - mean_a, 0.1 - mean_a, 0.01 - mean_a], atol=1e-6)
    # B (rows 1, 4) both reach the goal: 0; D (rows 6, 7) both 0.01: 0; C alone: 0.
    np.testing.assert_allclose(res.step_advantages[[1, 3, 4, 6, 7]], 0, atol=1e-7)
    np.testing.assert_allclose(res.advantages, res.step_advantages)


def test_group_without_success_gives_no_step_signal_and_groups_stay_apart():
    """No goal reached: every state is 'unreachable' at distance 1 (the recipe's far_distance 0 + 1),
    so all returns tie; a second group's success does not leak into the first."""
    anchors = ["A", "B", "A", "B", "A", "B"]
    traj = [0, 0, 1, 1, 2, 2]
    ep = [0, 0, 0, 0, 1, 1]
    returns, _, d_to = graph_step_returns(ep, traj, anchors, np.array([False] * 4 + [True] * 2))
    np.testing.assert_allclose(returns[:4], 1.0, rtol=1e-6)
    np.testing.assert_array_equal(d_to, [1, 1, 1, 1, 1, 0])


def test_invalid_rows_pay_the_penalty_in_the_step_return():
    anchors, traj = ["A", "A"], [0, 1]
    res = graphgpo([0.0, -0.1], [0, 0], traj, anchors, [0.0, 0.1], mode="mean_norm", episode_weight=0.0)
    np.testing.assert_allclose(res.step_advantages, [0.05, -0.05], atol=1e-6)


def test_registry_options_and_errors():
    assert runtime_inputs("graphgpo") == ("penalties",) and runtime_inputs("gigpo") == ()
    opts = estimator_options("graphgpo")
    assert opts["mode"] == "mean_std_norm" and opts["distance_decay"] == 0.1 and opts["normalize_distance"] is False
    kw = dict(scores=[1.0], episode_ids=[0], traj_ids=[0], anchors=["A"])
    with pytest.raises(ValueError, match="penalties"):
        compute_advantages("graphgpo", **kw)
    with pytest.raises(ValueError, match="takes no penalties"):
        compute_advantages("gigpo", step_returns=[0.0], penalties=[0.0], **kw)
    with pytest.raises(ValueError, match=r"decay must be a number in \(0, 1\]"):
        compute_advantages("graphgpo", penalties=[0.0], distance_decay=0.0, **kw)
    with pytest.raises(ValueError, match="episode_weight must be a finite number"):
        compute_advantages("graphgpo", penalties=[0.0], episode_weight=float("nan"), **kw)
    with pytest.raises(ValueError, match="needs traj_ids"):
        compute_advantages("graphgpo", penalties=[0.0], **(kw | {"traj_ids": None}))
