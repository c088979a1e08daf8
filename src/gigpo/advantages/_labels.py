"""Dense group labels from per-row keys: the helpers exact and similarity grouping share.

A leaf module (numpy only), so ``grouping.py`` and ``similarity.py`` both build on it without
importing each other.
"""

from __future__ import annotations

import numpy as np


def first_rows(keys: list) -> np.ndarray:
    """Row index of each key's first occurrence, int64 [N]: one ``dict.setdefault`` per row in C.

    ``setdefault(key, i)`` inserts i for a new key and returns the stored first row otherwise.
    """
    table: dict = {}
    return np.fromiter(map(table.setdefault, keys, range(len(keys))), dtype=np.int64, count=len(keys))


def rank_reps(rep: np.ndarray) -> np.ndarray:
    """Dense labels 0.. in first-appearance order from representative rows [N] (rep[rep] == rep,
    rep[i] <= i): a cumulative count of representatives, O(N), no sort."""
    is_rep = np.zeros(len(rep), bool)
    is_rep[rep] = True
    return (np.cumsum(is_rep) - 1)[rep]


def dict_codes(keys: list) -> np.ndarray:
    """Code per key, 0.. in first-appearance order (dense), from ``first_rows``."""
    return rank_reps(first_rows(keys))


def first_appearance_labels(keys: np.ndarray) -> np.ndarray:
    """Relabel int keys [N] to 0, 1, ... in order of first appearance."""
    if len(keys) == 0:
        return np.zeros(0, np.int64)
    uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(len(uniq), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[inverse.reshape(-1)]
