"""Anchor definitions (docs/algorithm.md#anchor-definitions): the key each row's step group is formed by.

The estimators group rows by whatever ``anchors`` they are given; this module builds those keys
from the rollout's row columns, so the estimators stay pure functions of arrays and the default
(``observation``) hands them the observation anchors unchanged.

- ``observation``: the env's observation anchor (paper Eq. 6, the reference's choice).
- ``state``: the env's canonical state key (``info["state_anchor"]``, recorded by the rollout as
  ``StepBatch.state_anchor``) where a row has one, else its observation anchor.
- ``context-k``: the observation anchor plus the last k (action, observation) pairs of the
  trajectory, hierarchical after HGPO (arXiv:2602.22817): each row takes the deepest level
  ``0..k`` whose group in its episode group has more than one row (``hierarchical_anchors``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Sequence

import numpy as np

from .grouping import hashable_anchor

ANCHORS = ("observation", "state", "context-<k>")


def parse_anchor(value) -> tuple[str, int]:
    """``observation`` -> ("observation", 0), ``state`` -> ("state", 0), ``context-2`` -> ("context", 2).

    Anything else raises ``ValueError`` naming the value and the allowed ones.
    """
    if value in ("observation", "state"):
        return str(value), 0
    if isinstance(value, str) and value.startswith("context-"):
        k = value[len("context-") :]
        if k.isdigit() and int(k) >= 1:
            return "context", int(k)
    raise ValueError(
        f"{value!r} is not an anchor definition; allowed: observation, state, context-<k> with an integer "
        "k >= 1 (e.g. context-2)"
    )


def _rows(x, n: int | None, name: str) -> list:
    items = x.tolist() if isinstance(x, np.ndarray) else list(x)
    if n is not None and len(items) != n:
        raise ValueError(f"{name} has {len(items)} rows but the other inputs have {n}; pass row-aligned arrays")
    return items


def _key(x):
    return x if isinstance(x, str) else hashable_anchor(x)


def context_levels(traj_ids, anchors, actions, k: int) -> list[list[tuple]]:
    """Per-level context keys: ``levels[j][i]`` for j = 0..k is row i's observation anchor with the
    last ``min(j, t)`` (observation anchor, action) pairs before it (t = the row's step).

    Rows of a trajectory must come in time order (``StepBatch``'s contract); trajectories may
    interleave. A row with fewer than j earlier steps keeps its whole history at level j, as its
    prompt did. Keys are nested: equal level-j keys imply equal level-i keys for i < j.
    """
    tr = _rows(traj_ids, None, "traj_ids")
    n = len(tr)
    obs = [_key(a) for a in _rows(anchors, n, "anchors")]
    act = [_key(a) for a in _rows(actions, n, "actions")]
    history: dict = {}  # trajectory -> flat [o_0, a_0, o_1, a_1, ...] of its earlier rows
    levels: list[list[tuple]] = [[] for _ in range(k + 1)]
    for i in range(n):
        h = history.setdefault(tr[i], [])
        for j in range(k + 1):
            levels[j].append((*h[max(len(h) - 2 * j, 0) :], obs[i]))
        h += (obs[i], act[i])
        if len(h) > 2 * k:
            del h[: len(h) - 2 * k]
    return levels


def hierarchical_anchors(episode_ids, levels: Sequence[Sequence]) -> tuple[np.ndarray, list]:
    """One key per row from nested per-level keys (shallowest first): HGPO's hierarchy as one partition.

    Row i takes the deepest level L whose group (rows of its episode group with its level-L key)
    has more than one row, or level 0 when none has; its key is ``(L, levels[L][i])``. Rows whose
    deepest shared level is the same group therefore share a step group; a row whose level-L
    peers all found a deeper shared level stays alone (docs/algorithm.md#anchor-definitions).
    Returns (level int64 [N], keys list [N]).
    """
    ep = _rows(episode_ids, None, "episode_ids")
    n = len(ep)
    chosen = np.zeros(n, np.int64)
    for lvl, keys in enumerate(levels):
        keys = _rows(keys, n, f"levels[{lvl}]")
        counts = Counter(zip(ep, keys))
        shared = np.fromiter((counts[(e, key)] > 1 for e, key in zip(ep, keys)), bool, count=n)
        chosen[shared] = lvl  # deeper levels come later and overwrite
    lv = chosen.tolist()
    return chosen, [(lv[i], levels[lv[i]][i]) for i in range(n)]


def context_anchors(episode_ids, traj_ids, anchors, actions, k: int) -> np.ndarray:
    """The ``context-k`` anchor of every row, object [N].

    Keys are the JSON text ``[L, o_{t-L}, a_{t-L}, ..., o_{t-1}, a_{t-1}, o_t]`` (L = the level
    ``hierarchical_anchors`` chose) when every anchor and action is a string, so exact grouping
    compares them unambiguously and similarity grouping compares that text; otherwise tuples
    (exact grouping only).
    """
    if k < 1:
        raise ValueError(f"context-k needs k >= 1, got {k}")
    tr = _rows(traj_ids, None, "traj_ids")
    n = len(tr)
    obs = [_key(a) for a in _rows(anchors, n, "anchors")]
    act = [_key(a) for a in _rows(actions, n, "actions")]
    # The same keys as context_levels, interned: level j's id of row i is the id of (o, a, level
    # j-1's id) one step further back, so no level tuple is built (building them dominated
    # the time on large batches).
    intern: dict = {}
    prev = [-1] * n  # the trajectory's previous row
    last: dict = {}
    for i in range(n):
        prev[i] = last.get(tr[i], -1)
        last[tr[i]] = i
    ids = [[intern.setdefault(("o", o), len(intern)) for o in obs]]
    back = list(range(n))  # row j steps back, or -1 before the trajectory's start
    for _ in range(k):
        back = [prev[b] if b >= 0 else -1 for b in back]
        up = ids[-1]
        ids.append(
            [up[i] if b < 0 else intern.setdefault((obs[b], act[b], up[i]), len(intern)) for i, b in enumerate(back)]
        )
    chosen, _ = hierarchical_anchors(episode_ids, ids)
    as_text = all(isinstance(x, str) for x in obs) and all(isinstance(x, str) for x in act)
    out = []
    for i, lvl in enumerate(chosen.tolist()):
        key, b = [obs[i]], prev[i]
        for _ in range(lvl):
            if b < 0:
                break
            key[:0] = (obs[b], act[b])
            b = prev[b]
        out.append(json.dumps([lvl, *key], ensure_ascii=False) if as_text else (lvl, tuple(key)))
    return _obj(out)


def state_or_observation(anchors, state_anchors) -> np.ndarray:
    """The ``state`` anchor of every row: its state key, or its observation anchor where it has none.

    ``state_anchors`` None (the family gives no state) means every row falls back.
    """
    obs = _rows(anchors, None, "anchors")
    if state_anchors is None:
        return _obj(obs)
    st = _rows(state_anchors, len(obs), "state_anchors")
    return _obj([o if s is None else s for o, s in zip(obs, st)])


def step_anchors(anchor: str, *, episode_ids, traj_ids, anchors, actions=None, state_anchors=None) -> np.ndarray:
    """The anchors that definition ``anchor`` (``parse_anchor``) gives the rows; ``observation``
    returns ``anchors`` itself, untouched."""
    kind, k = parse_anchor(anchor)
    if kind == "observation":
        return anchors
    if kind == "state":
        return state_or_observation(anchors, state_anchors)
    if actions is None:
        raise ValueError(f"anchor {anchor!r} needs the rows' actions")
    return context_anchors(episode_ids, traj_ids, anchors, actions, k)


def state_mixing(episode_ids, anchors, state_anchors) -> dict:
    """How often observation anchors mix engine states (docs/metrics.md, ``anchor/*``).

    Over the exact observation step groups (same episode group, equal observation anchor) with
    more than one row: ``groups`` (their number), ``mixed_groups`` (those whose rows carry two
    or more different state keys; rows without a state key are not compared), ``mixed_share``
    (mixed_groups / groups, 0 without groups) and ``mixed_rows_share`` (rows of mixed groups /
    rows of groups > 1). ``state_anchors`` None gives {}.
    """
    if state_anchors is None:
        return {}
    ep = _rows(episode_ids, None, "episode_ids")
    obs = [_key(a) for a in _rows(anchors, len(ep), "anchors")]
    st = _rows(state_anchors, len(ep), "state_anchors")
    members: dict = {}
    for e, o, s in zip(ep, obs, st):
        members.setdefault((e, o), []).append(s)
    big = [m for m in members.values() if len(m) > 1]
    mixed = [m for m in big if len({_key(s) for s in m if s is not None}) > 1]
    rows_big = sum(map(len, big))
    return {
        "groups": len(big),
        "mixed_groups": len(mixed),
        "mixed_share": len(mixed) / len(big) if big else 0.0,
        "mixed_rows_share": sum(map(len, mixed)) / rows_big if rows_big else 0.0,
    }


def _obj(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):  # element-wise: tuples must stay scalars, not become rows
        out[i] = v
    return out
