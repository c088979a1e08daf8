"""GraphGPO (Cheng et al., ICML 2026, arXiv:2605.26684): step advantages from a state graph.

Per episode group, the rollouts' steps form a directed graph: a node is an anchor state (the
same identity as GiGPO's exact step groups, or merged by text similarity), an edge runs from the
state a step acted in to the state it reached, and every successful trajectory's last step
reaches the group's goal node. A breadth-first search from the goal over reversed edges gives
each node its shortest-path distance d to the goal; a node that cannot reach it gets the largest
finite distance in its group plus one. A step's graph return is ``10 * decay^d(reached state)``
(or ``10 * decay^(d(reached) - d(current) + 1)`` with ``normalize_distance``), less the row's
invalid-action penalty, and is normalised within GiGPO's exact step groups; the advantage is
``step_weight * A^S + episode_weight * A^E``.

This follows ``recipe/GraphGPO/core_graph.py`` of verl-agent (upstream commit 234a913, unchanged
at 20bd331): ``ComplexGraph.from_data``, ``all_to_target_shortest_paths``,
``compute_graph_path_returns`` and ``compute_graphgpo_outcome_advantage``. Differences are in
docs/algorithm.md#graphgpo (the node a failed trajectory's last step reaches, the goal sentinel).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_codes, as_float, check_epsilon, check_mode, n_rows
from ._types import AnchorKey, Anchors, ArrayLike
from .estimators import AdvantageResult, episode_advantage, step_advantage
from .grouping import exact_step_groups, similarity_step_groups
from .returns import _traj_order

# The recipe's constant: a step's graph return is 10 * decay^d (compute_graph_path_returns).
GOAL_RETURN = 10.0


def _check_weight(value, name: str) -> float:
    if isinstance(value, bool) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number (GraphGPO default 1.0), got {value!r}")
    return float(value)


def _check_decay(decay) -> float:
    if isinstance(decay, bool) or not (np.isfinite(decay) and 0.0 < decay <= 1.0):
        raise ValueError(
            f"decay must be a number in (0, 1] (the recipe's algorithm.gamma, default 0.1): the graph return "
            f"is 10 * decay^distance; got {decay!r}"
        )
    return float(decay)


def state_graph(
    episode_codes: np.ndarray,
    traj_ids: ArrayLike,
    anchors: Anchors,
    success: np.ndarray,
    *,
    similarity_threshold: float | None = None,
    anchor_key: AnchorKey | None = None,
    exact_nodes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The graph's edges and nodes: one edge per row, from the state it acted in to the state it reached.

    episode_codes int [N] >= 0; traj_ids any [N] (rows of one trajectory in time order relative to
    each other); anchors [N]; success bool [N] (the row's trajectory succeeded; read at its last row).
    ``exact_nodes``: the rows' exact step groups when already built (``exact_step_groups``).
    Node ids: the rows' states first, then one goal node per episode group, then one end node per
    trajectory (what a failed trajectory's last step reaches; it has no way on).
    Returns (src int64 [N], dst int64 [N], node_episode int64 [V], goal int64 [N]: each row's
    episode group's goal node).
    """
    n = len(episode_codes)
    ep = np.asarray(episode_codes, np.int64)
    tr = as_codes(traj_ids, "traj_ids", n)
    order, pos, length = _traj_order(tr)
    is_last = np.zeros(n, bool)
    is_last[order] = pos == length - 1
    nxt = np.full(n, -1, np.int64)  # row of the next step of the same trajectory, -1 at its last row
    inner = order[:-1][~is_last[order[:-1]]]
    nxt[inner] = order[1:][~is_last[order[:-1]]]
    if similarity_threshold is None:
        node = exact_step_groups(ep, anchors, anchor_key) if exact_nodes is None else exact_nodes
        src, reached = node, np.where(nxt >= 0, node[np.maximum(nxt, 0)], -1)
    else:
        # The recipe canonicalises anchor_obs[i] then next_obs[i] for each row in batch order
        # (StateCanonicalizer: the first cluster whose representative is similar enough), so the
        # states are clustered in that interleaved order; goal and end nodes are not text.
        items = anchors.tolist() if isinstance(anchors, np.ndarray) else list(anchors)
        seq_row = np.repeat(np.arange(n), 2)
        seq_row[1::2] = nxt
        keep = seq_row >= 0
        rows = seq_row[keep]
        labels = similarity_step_groups(ep[rows], [items[r] for r in rows], similarity_threshold)
        lab = np.full(2 * n, -1, np.int64)
        lab[keep] = labels
        src, reached = lab[0::2], lab[1::2]
    n_states = int(src.max()) + 1 if n else 0
    n_ep = int(ep.max()) + 1 if n else 0
    n_traj = int(tr.max()) + 1 if n else 0
    goal = n_states + ep
    end = n_states + n_ep + tr
    dst = np.where(reached >= 0, reached, np.where(success, goal, end))
    node_episode = np.zeros(n_states + n_ep + n_traj, np.int64)
    node_episode[src] = ep
    node_episode[n_states : n_states + n_ep] = np.arange(n_ep)
    node_episode[end] = ep
    return src, dst, node_episode, goal


def goal_distances(src: np.ndarray, dst: np.ndarray, node_episode: np.ndarray, goals: np.ndarray) -> np.ndarray:
    """Shortest-path steps from every node to its group's goal; unreachable: the group's largest finite distance + 1.

    src, dst int [E] edges; node_episode int [V]; goals int [G] goal nodes. Every edge weighs 1, so
    the recipe's reverse Dijkstra is a breadth-first search: one vector pass over the edges per
    distance level. Returns float64 [V].
    """
    v = len(node_episode)
    dist = np.full(v, np.inf)
    if v == 0:
        return dist
    edges = np.unique(src.astype(np.int64) * v + dst)  # parallel edges change no distance
    s, d = edges // v, edges % v
    frontier = np.zeros(v, bool)
    frontier[goals] = True
    dist[goals] = 0.0
    level = 0
    while True:
        hit = frontier[d] & np.isinf(dist[s])
        if not hit.any():
            break
        level += 1
        new = s[hit]
        dist[new] = level
        frontier[:] = False
        frontier[new] = True
    finite = np.isfinite(dist)
    far = np.zeros(int(node_episode.max()) + 1)
    np.maximum.at(far, node_episode[finite], dist[finite])  # the recipe's far_distance per group (>= 0)
    return np.where(finite, dist, far[node_episode] + 1.0)


def graph_step_returns(
    episode_ids: ArrayLike,
    traj_ids: ArrayLike,
    anchors: Anchors,
    success: ArrayLike,
    *,
    decay: float = 0.1,
    normalize_distance: bool = False,
    similarity_threshold: float | None = None,
    anchor_key: AnchorKey | None = None,
    exact_nodes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's graph return ``10 * decay^d`` before any penalty (float32 [N], as the recipe stores it).

    ``exact_nodes``: as for ``state_graph``.
    Returns (returns float32 [N], distance of the state the row acted in float64 [N], distance
    of the state it reached float64 [N]).
    """
    n = n_rows(episode_ids, "episode_ids")
    ep = as_codes(episode_ids, "episode_ids", n)
    ok = np.asarray(success)
    if ok.shape != (n,) or ok.dtype != bool:
        raise ValueError(f"success must be a bool array with {n} rows (the row's trajectory succeeded)")
    decay = _check_decay(decay)
    src, dst, node_episode, goal = state_graph(
        ep,
        traj_ids,
        anchors,
        ok,
        similarity_threshold=similarity_threshold,
        anchor_key=anchor_key,
        exact_nodes=exact_nodes,
    )
    dist = goal_distances(src, dst, node_episode, np.unique(goal))
    d_from, d_to = dist[src], dist[dst]
    power = d_to - d_from + 1.0 if normalize_distance else d_to
    return (GOAL_RETURN * np.power(decay, power)).astype(np.float32), d_from, d_to


def graphgpo(
    scores: ArrayLike,
    episode_ids: ArrayLike,
    traj_ids: ArrayLike,
    anchors: Anchors,
    penalties: ArrayLike | None = None,
    *,
    mode: str = "mean_std_norm",
    step_weight: float = 1.0,
    episode_weight: float = 1.0,
    decay: float = 0.1,
    normalize_distance: bool = False,
    similarity_threshold: float | None = None,
    epsilon: float = 1e-6,
    anchor_key: AnchorKey | None = None,
) -> AdvantageResult:
    """GraphGPO advantages A = step_weight * A^S + episode_weight * A^E (docs/algorithm.md#graphgpo).

    scores     float [N]  episode score of each row's trajectory, after the row's invalid-action
                          penalty (as for ``gigpo``); a trajectory succeeded when its score before
                          the penalty is > 0 (the recipe's ``episode_rewards > 0``).
    traj_ids   any [N]    rows of one trajectory in time order relative to each other.
    anchors    [N]        each row's state; equal anchors (in one episode group) are one node.
    penalties  float [N] or None (zeros): the invalid-action penalty each row's score carries;
                          subtracted from the row's graph return as well.
    mode       "mean_std_norm" (the recipe's default) or "mean_norm", for both parts.
    decay      in (0, 1]: graph return 10 * decay^d (the recipe's algorithm.gamma, 0.1).
    normalize_distance  the return is 10 * decay^(d(reached) - d(current) + 1) (progress).
    similarity_threshold  None: exact node identity; a float in (0, 1): states whose texts have
                          a difflib ratio >= it are one graph node (step groups stay exact, as in
                          the recipe).
    """
    n = n_rows(scores, "scores")
    s = as_float(scores, "scores")
    pen = np.zeros(n) if penalties is None else as_float(penalties, "penalties", n)
    ep = as_codes(episode_ids, "episode_ids", n)
    check_mode(mode)
    check_epsilon(epsilon)
    step_weight = _check_weight(step_weight, "step_weight")
    episode_weight = _check_weight(episode_weight, "episode_weight")
    if anchors is None:
        raise ValueError("anchors is required for GraphGPO (the state each row acted in: the graph's nodes)")
    if traj_ids is None:
        raise ValueError("traj_ids is required for GraphGPO (a trajectory's steps are the graph's edges)")
    groups = exact_step_groups(ep, anchors, anchor_key)  # the recipe's step groups: exact, also with similarity
    returns, _, _ = graph_step_returns(
        ep,
        traj_ids,
        anchors,
        (s + pen) > 0,
        decay=decay,
        normalize_distance=bool(normalize_distance),
        similarity_threshold=similarity_threshold,
        anchor_key=anchor_key,
        exact_nodes=groups,
    )
    g = (returns.astype(np.float64) - pen).astype(np.float32).astype(np.float64)  # the recipe's float32 step_rewards
    a_s = step_advantage(g, groups, mode, epsilon)
    a_e = episode_advantage(s, ep, mode, epsilon)
    return AdvantageResult(
        advantages=(step_weight * a_s + episode_weight * a_e).astype(np.float32),
        episode_advantages=a_e.astype(np.float32),
        step_advantages=a_s.astype(np.float32),
        step_groups=groups,
    )


__all__ = ["GOAL_RETURN", "goal_distances", "graph_step_returns", "graphgpo", "state_graph"]
