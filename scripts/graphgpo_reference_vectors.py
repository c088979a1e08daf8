"""Write tests/data/graphgpo_reference_vectors.json: GraphGPO outputs of the recipe's own code.

    python scripts/graphgpo_reference_vectors.py VERL_AGENT_CHECKOUT [OUT.json]

VERL_AGENT_CHECKOUT is a verl-agent tree holding ``recipe/GraphGPO/core_graph.py`` and
``gigpo/core_gigpo.py`` (upstream commit 234a913, "Add recipe/GraphGPO", unchanged at 20bd331;
read from the fork zzj1111/alfworldauto at 37aec78). Only the needed top-level functions and
classes are taken from those files (``ast``) and run unmodified with numpy and torch; ``verl``'s
``DataProto`` is a two-dict stand-in. The two glue steps of the recipe's trainer and rollout that
are not functions are restated here: ``next_obs`` is the next step's ``anchor_obs``, or
``'success'`` at a won trajectory's last step (``TrajectoryCollector.gather_rollout_data``), and the
invalid-action penalty is subtracted from the last response token's reward and from
``step_rewards`` (``apply_invalid_action_penalty`` of ``graphgpo_ray_trainer.py``). A failed
trajectory's last ``next_obs`` is a random string of its own (docs/algorithm.md#graphgpo).
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
import uuid
from collections import Counter, defaultdict
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import torch

GRAPH_FILE = "recipe/GraphGPO/core_graph.py"
GIGPO_FILE = "gigpo/core_gigpo.py"
GRAPH_NAMES = (
    "to_hashable",
    "StateCanonicalizer",
    "nested_defaultdict",
    "ComplexGraph",
    "compute_graph_path_returns",
    "compute_graphgpo_outcome_advantage",
)
GIGPO_NAMES = ("are_similar", "summarize_group_size", "episode_norm_reward", "build_step_group", "step_norm_reward")


class DataProto:
    """The two fields of verl's DataProto the recipe's functions read."""

    def __init__(self, batch: dict, non_tensor_batch: dict):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch


def load(path: Path, names: tuple[str, ...], namespace: dict) -> None:
    """Execute only the named top-level definitions of ``path`` in ``namespace``."""
    tree = ast.parse(path.read_text())
    nodes = [n for n in tree.body if getattr(n, "name", None) in names]
    missing = set(names) - {n.name for n in nodes}  # type: ignore[attr-defined]
    if missing:
        raise SystemExit(f"{path}: no top-level {sorted(missing)}; is this the recipe at 234a913?")
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)


def recipe(root: Path) -> dict:
    ns: dict[str, Any] = dict(
        np=np, torch=torch, defaultdict=defaultdict, Counter=Counter, SequenceMatcher=SequenceMatcher,
        DataProto=DataProto, uuid=uuid, List=List, Dict=Dict, Any=Any,
    )  # fmt: skip
    load(root / GIGPO_FILE, GIGPO_NAMES, ns)
    load(root / GRAPH_FILE, GRAPH_NAMES, ns)
    ns["print"] = lambda *a, **k: None  # build_step_group prints the mean group size
    return ns


def observations(rng, n_states: int, similar: bool) -> list[str]:
    rooms = [
        f"You are in room {i}. You see a {['key', 'lamp', 'box', 'cup'][i % 4]} and a door." for i in range(n_states)
    ]
    if similar:  # near-duplicates (ratio ~0.97-0.99) that a 0.9 threshold merges and exact equality does not
        rooms += [r.replace(" and a door.", " and a door!") for r in rooms[: n_states // 2]]
    return rooms


def make_case(rng, name: str, *, groups: int, similar: bool, params: dict) -> dict:
    """Random walks over a small state graph per group: revisits, loops, shared states, wins and fails."""
    rows: list[dict] = []
    for g in range(groups):
        obs = observations(rng, int(rng.integers(3, 6)), similar)
        goal_from = set(rng.choice(len(obs), size=2, replace=False).tolist())  # states whose action can win
        uid = f"task-{g}"
        for t in range(int(rng.integers(1, 6))):  # 1..5 trajectories, uneven groups
            traj = f"{uid}-traj-{t}"
            state, steps, won = int(rng.integers(len(obs))), [], False
            start = obs[0] if rng.random() < 0.8 else obs[int(rng.integers(len(obs)))]
            for k in range(int(rng.integers(1, 7))):
                here = start if k == 0 else obs[state]
                valid = bool(rng.random() > 0.2)
                won = valid and obs.index(here) in goal_from and rng.random() < 0.5
                steps.append(dict(uid=uid, traj_uid=traj, anchor_obs=here, valid=valid, won=won))
                if won:
                    break
                state = int(rng.integers(len(obs)))
            for k, s in enumerate(steps):  # gather_rollout_data: next_obs, 'success' at a won last step
                last = k == len(steps) - 1
                if not last:
                    s["next_obs"] = steps[k + 1]["anchor_obs"]
                else:
                    s["next_obs"] = "success" if won else f"end-{uuid.UUID(int=int(rng.integers(2**62))).hex}"
                s["reward"] = 10.0 if (won and last) else 0.0
            ep_reward = 10.0 if won else 0.0
            for s in steps:
                s["episode_reward"] = ep_reward
            rows.append(steps)
    # Interleave trajectories in the batch, each one's steps kept in time order.
    queues = [list(r) for r in rows]
    batch = []
    while any(queues):
        q = queues[int(rng.choice([i for i, q in enumerate(queues) if q]))]
        batch.append(q.pop(0))
    return dict(name=name, params=params, rows=batch)


def run(ns: dict, case: dict) -> dict:
    p, rows = case["params"], case["rows"]
    n, width = len(rows), 4
    col = lambda k: np.array([r[k] for r in rows], dtype=object)  # noqa: E731
    mask = torch.ones(n, width)
    mask[:, -1] = 0.0  # padding after the response
    tls = torch.zeros(n, width)
    tls[:, width - 2] = torch.tensor([r["episode_reward"] for r in rows])  # reward at the last response token
    nt = dict(
        uid=col("uid"), traj_uid=col("traj_uid"), anchor_obs=col("anchor_obs"), next_obs=col("next_obs"),
        rewards=np.array([r["reward"] for r in rows], dtype=object), active_masks=np.ones(n, dtype=object),
        is_action_valid=np.array([r["valid"] for r in rows], dtype=object), text_actions=col("traj_uid"),
        episode_rewards=np.array([r["episode_reward"] for r in rows], dtype=np.float32),
    )  # fmt: skip
    batch = DataProto(dict(input_ids=torch.zeros(n, 1, dtype=torch.long)), nt)
    Gs = ns["ComplexGraph"].from_data(
        batch, enable_similarity=p["enable_similarity"], similarity_thresh=p["similarity_thresh"]
    )
    ns["ComplexGraph"].Calculate_all_shortest_path(Gs)
    graph_returns = ns["compute_graph_path_returns"](batch, Gs, p["gamma"], p["normalize_distance"])
    step_rewards = graph_returns.clone()
    invalid = torch.tensor([0.0 if r["valid"] else 1.0 for r in rows])
    tls[:, width - 2] -= p["invalid_action_penalty_coef"] * invalid
    step_rewards -= p["invalid_action_penalty_coef"] * invalid
    adv, _ = ns["compute_graphgpo_outcome_advantage"](
        token_level_rewards=tls, step_rewards=step_rewards, response_mask=mask, anchor_obs=nt["anchor_obs"],
        index=nt["uid"], traj_index=nt["traj_uid"], epsilon=p["epsilon"], step_advantage_w=p["step_advantage_w"],
        episode_advantage_w=p["episode_advantage_w"], mode=p["mode"],
    )  # fmt: skip
    return dict(
        graph_returns=graph_returns.tolist(),
        step_rewards=step_rewards.tolist(),
        advantage_per_sample=adv[:, 0].tolist(),
    )


def main(argv: list[str]) -> None:
    if len(argv) not in (2, 3):
        raise SystemExit(__doc__)
    root = Path(argv[1])
    out = Path(argv[2]) if len(argv) == 3 else Path(__file__).parents[1] / "tests/data/graphgpo_reference_vectors.json"
    ns = recipe(root)
    base = dict(gamma=0.1, normalize_distance=False, enable_similarity=False, similarity_thresh=0.95,
                mode="mean_std_norm", step_advantage_w=1.0, episode_advantage_w=1.0,
                invalid_action_penalty_coef=0.1, epsilon=1e-6)  # fmt: skip
    specs = [
        ("recipe_defaults", 0, 4, False, {}),
        ("no_penalty", 1, 3, False, dict(invalid_action_penalty_coef=0.0)),
        ("normalize_distance", 2, 4, False, dict(normalize_distance=True)),
        ("mean_norm_gamma_0.5", 3, 5, False, dict(mode="mean_norm", gamma=0.5)),
        ("step_only_w2", 4, 3, False, dict(episode_advantage_w=0.0, step_advantage_w=2.0)),
        ("similarity_0.9", 5, 4, True, dict(enable_similarity=True, similarity_thresh=0.9)),
        ("similar_texts_exact", 5, 4, True, {}),
        ("similarity_0.9_normalize", 6, 3, True,
         dict(enable_similarity=True, similarity_thresh=0.9, normalize_distance=True)),
        ("many_groups", 7, 12, False, dict(gamma=0.3)),
    ]  # fmt: skip
    cases = []
    for name, seed, groups, similar, over in specs:
        case = make_case(np.random.default_rng(seed), name, groups=groups, similar=similar, params=base | over)
        case["outputs"] = run(ns, case)
        cases.append(case)
    digest = {f: hashlib.sha256((root / f).read_bytes()).hexdigest() for f in (GRAPH_FILE, GIGPO_FILE)}
    source = dict(
        reference="verl-agent recipe/GraphGPO/core_graph.py and gigpo/core_gigpo.py, upstream commit 234a913 "
        "(unchanged at 20bd331), read from the fork zzj1111/alfworldauto at 37aec78",
        sha256=digest,
        script="scripts/graphgpo_reference_vectors.py",
        note="outputs were produced by running the recipe's functions on these inputs",
    )
    out.write_text(json.dumps(dict(source=source, schema_version=1, cases=cases), indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {out}")


if __name__ == "__main__":
    main(sys.argv)
