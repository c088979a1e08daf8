"""Anchor-state step groups (paper Eq. 6; docs/algorithm.md#step-groups): exact grouping and anchor keys.

Exact and similarity grouping (``similarity.py``, re-exported here) both return one int label
per row, numbered 0, 1, 2, ... in order of first appearance. Step groups never cross episode
groups.
"""

from __future__ import annotations

import numpy as np

from ._labels import dict_codes, first_appearance_labels, first_rows, rank_reps
from ._types import AnchorKey, Anchors, ArrayLike, LabelArray
from .similarity import similarity_step_groups


def hashable_anchor(anchor, name: str = "anchors"):
    """The reference's exact-grouping key of one anchor (docs/algorithm.md#step-groups).

    str/int/float/bool as is; numpy scalars → Python scalar; ndarray → tuple of its flattened
    values (shape discarded, as the reference does); list/tuple → tuple of converted elements;
    dict → sorted tuple of (key, converted value); None is not accepted.
    """
    if isinstance(anchor, (str, int, float, bool)):
        return anchor
    if isinstance(anchor, np.generic):
        return anchor.item()
    if isinstance(anchor, np.ndarray):
        return tuple(anchor.ravel().tolist())
    if isinstance(anchor, (list, tuple)):
        return tuple(hashable_anchor(a, name) for a in anchor)
    if isinstance(anchor, dict):
        return tuple(sorted((k, hashable_anchor(v, name)) for k, v in anchor.items()))
    raise TypeError(
        f"{name}: cannot build an exact-grouping key from a {type(anchor).__name__}; use str, numbers, "
        "numpy arrays, lists/tuples/dicts of those, or pass anchor_key=<function returning a hashable>"
    )


def _anchor_codes(anchors, n: int, anchor_key) -> np.ndarray:
    """First-occurrence row per row: ``codes[i]`` = the first row whose anchor key equals row i's.

    Equal keys ↔ equal codes, and every code is a row index in [0, N) that holds its own code.
    One C-level dict pass (hashing), no Python loop per row.
    """
    if len(anchors) != n:
        raise ValueError(f"anchors has {len(anchors)} rows but the other inputs have {n}; pass row-aligned arrays")
    if isinstance(anchors, np.ndarray) and anchors.dtype != object and anchors.ndim == 1:
        _, first, inverse = np.unique(anchors, return_index=True, return_inverse=True)
        return first[inverse.reshape(-1)].astype(np.int64)
    if isinstance(anchors, np.ndarray) and anchors.dtype == object:
        items = anchors.tolist()
    else:
        items = anchors if type(anchors) is list else list(anchors)  # read only: no copy needed
    if anchor_key is not None:
        keys = [anchor_key(a) for a in items]
    # the common case: observation text, used as is (docs/algorithm.md#step-groups)
    elif set(map(type, items)) <= {str}:
        keys = items
    else:
        keys = [hashable_anchor(a) for a in items]
    try:
        return first_rows(keys)
    except TypeError:
        bad = next(k for k in keys if not _is_hashable(k))
        raise TypeError(
            f"anchors: anchor_key returned an unhashable {type(bad).__name__}; return a hashable key"
        ) from None


def _is_hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def exact_step_groups(episode_codes: ArrayLike, anchors: Anchors, anchor_key: AnchorKey | None = None) -> LabelArray:
    """Rows with the same episode group and the same anchor key share a step group.

    episode_codes int [N] (0..G-1), anchors [N] (see ``hashable_anchor``), anchor_key: optional
    callable anchor → hashable, used instead of ``hashable_anchor`` (e.g. ``lambda s: s.strip()``).
    Returns int64 labels [N], 0.. in first-appearance order. Order of rows does not matter.
    """
    codes = np.asarray(episode_codes)
    n = len(codes)
    first = _anchor_codes(anchors, n, anchor_key)  # first row with the same anchor, batch-wide
    if n == 0:
        return np.zeros(0, np.int64)
    ep = codes.astype(np.int64, copy=False)
    # A row whose anchor first occurred in its own episode group belongs to that row's group (the
    # first occurrence is then also the group's first row). Anchors seen earlier in ANOTHER
    # episode group (rare: e.g. a shared "Nothing happens.") are grouped by (episode, first row).
    rep = first.copy()
    other = np.flatnonzero(ep[first] != ep)
    if len(other):
        _, first_in, inverse = np.unique(ep[other] * n + first[other], return_index=True, return_inverse=True)
        rep[other] = other[first_in][inverse.reshape(-1)]
    return rank_reps(rep)


__all__ = [
    "dict_codes",
    "exact_step_groups",
    "first_appearance_labels",
    "first_rows",
    "hashable_anchor",
    "similarity_step_groups",
]
