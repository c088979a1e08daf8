"""Input validation shared by the estimators: float columns, id columns, option values.

Every error names the argument and says how to fix it (STYLE habit 2).
"""

from __future__ import annotations

import numpy as np


NORM_MODES = ("mean_norm", "mean_std_norm")


def as_float(values, name: str, n: int | None = None) -> np.ndarray:
    """``values`` as a finite 1-D float64 array of length ``n`` (when given), else ValueError."""
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a 1-D array of numbers; converting it failed: {exc}") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one value per row), got shape {arr.shape}")
    if n is not None and len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} rows but the other inputs have {n}; pass row-aligned arrays")
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = np.flatnonzero(bad)
        raise ValueError(
            f"{name} has {len(idx)} non-finite values (NaN or inf), first at row {idx[0]} "
            f"({arr[idx[0]]}); fix the reward/score that produced it"
        )
    return arr


def n_rows(values, name: str) -> int:
    """Length of a 1-D row column (used to fix N from the first argument)."""
    try:
        return len(values)
    except TypeError:
        raise ValueError(f"{name} must be a sequence with one entry per row, got {type(values).__name__}") from None


def as_codes(ids, name: str, n: int, dense: bool = True) -> np.ndarray:
    """Integer codes 0..G-1 for an id column (ints, strings or any hashable), one per row.

    Equal ids get equal codes; codes follow sorted id order when ids are sortable, else first
    appearance. Only the partition matters to the estimators. ``dense=False`` lets integer ids
    already in [0, 2N) through as they are (no sort): codes are then non-negative and < 2N but
    may have gaps, which ``np.bincount``/sorting callers do not mind.
    """
    if len(ids) != n:
        raise ValueError(f"{name} has {len(ids)} rows but the other inputs have {n}; pass row-aligned arrays")
    arr = np.asarray(ids) if not isinstance(ids, np.ndarray) else ids
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one id per row), got shape {arr.shape}")
    if not dense and arr.dtype.kind in "iu" and n and 0 <= arr.min() and arr.max() < 2 * n:
        return arr.astype(np.int64)
    if arr.dtype != object:
        return np.unique(arr, return_inverse=True)[1].astype(np.int64).reshape(-1)
    # Object ids (e.g. UUID strings mixed with ints): a dict pass hashes them, no numeric work.
    keys = arr.tolist()
    try:
        table = dict.fromkeys(keys)
    except TypeError:
        raise ValueError(f"{name} must hold hashable ids (ints or strings); got an unhashable entry") from None
    for i, k in enumerate(table):  # one iteration per distinct id
        table[k] = i
    return np.fromiter(map(table.__getitem__, keys), dtype=np.int64, count=len(keys))


def check_mode(mode: str) -> None:
    if mode not in NORM_MODES:
        raise ValueError(f"mode must be 'mean_norm' or 'mean_std_norm' (docs/algorithm.md#normalisation), got {mode!r}")


def check_epsilon(epsilon: float) -> None:
    if not (np.isfinite(epsilon) and epsilon >= 0):
        raise ValueError(f"epsilon must be a finite number >= 0 (default 1e-6), got {epsilon!r}")
