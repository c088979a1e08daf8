"""Per-row return glue: discounted returns, episode scores, the invalid-action penalty.

All functions take row-aligned 1-D arrays (one entry per agent step, length N) and return new
float32 arrays of length N (as the official implementation does, docs/algorithm.md#step-returns).
"""

from __future__ import annotations

import numpy as np

from ._checks import as_codes, as_float, n_rows
from ._types import ArrayLike, FloatArray


def _traj_order(codes: np.ndarray):
    """Stable sort by trajectory code: rows of a trajectory become contiguous, time order kept.

    Returns (order [N], position of each sorted row inside its trajectory [N],
    trajectory length of each sorted row [N]).
    """
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    n = len(codes)
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]]) if n else np.zeros(0, np.int64)
    lengths = np.diff(np.r_[starts, n])
    seg_start = np.repeat(starts, lengths)
    pos = np.arange(n) - seg_start
    return order, pos, np.repeat(lengths, lengths)


def discounted_returns(rewards: ArrayLike, traj_ids: ArrayLike, gamma: float) -> FloatArray:
    """Discounted return R_t = r_t + gamma * R_{t+1} of each row within its trajectory (paper Eq. 5).

    rewards  float [N]  env reward of each step.
    traj_ids any  [N]   trajectory id of each row. Rows of one trajectory must be in time order
                        relative to each other; trajectories may be interleaved in any order.
    gamma    float in [0, 1].
    Returns float32 [N]; the return after a trajectory's last row is 0 (docs/algorithm.md#step-returns).

    O(N) numpy work plus one vector step per time index (max trajectory length), not per row.
    """
    n = n_rows(rewards, "rewards")
    r = as_float(rewards, "rewards")
    codes = as_codes(traj_ids, "traj_ids", n, dense=False)
    if not (0.0 <= gamma <= 1.0):
        raise ValueError(f"gamma must be in [0, 1] (gamma > 1 makes returns diverge), got {gamma!r}")
    if n == 0:
        return np.zeros(0, np.float32)
    order, pos, length = _traj_order(codes)
    r_sorted = r[order]
    n_traj = int(np.count_nonzero(pos == 0))
    width = int(pos.max()) + 1
    if n_traj * width <= 4 * n:
        # Usual case (similar lengths): a zero-padded [trajectories, max length] matrix, one column
        # update per time step. Padding rewards are 0, so a return past a trajectory's end is 0.
        traj = np.cumsum(pos == 0) - 1  # trajectory rank of each sorted row
        mat = np.zeros((n_traj, width + 1), np.float64)
        mat[traj, pos] = r_sorted
        for t in range(width - 1, -1, -1):
            mat[:, t] += gamma * mat[:, t + 1]
        out = mat[traj, pos]
    else:  # a few very long trajectories: vector updates over the rows at each position instead
        out = np.zeros(n + 1, np.float64)  # out[n] stays 0: R after the last row of the last trajectory
        is_last = pos == length - 1
        by_pos = np.argsort(pos, kind="stable")
        bounds = np.searchsorted(pos[by_pos], np.arange(pos.max() + 2))
        for t in range(pos.max(), -1, -1):
            sel = by_pos[bounds[t] : bounds[t + 1]]
            nxt = np.where(is_last[sel], 0.0, out[np.minimum(sel + 1, n)])
            out[sel] = r_sorted[sel] + gamma * nxt
    result = np.empty(n, np.float32)
    result[order] = out[:n]
    return result


def episode_scores(rewards: ArrayLike, traj_ids: ArrayLike) -> FloatArray:
    """Sum of each trajectory's rewards, broadcast to its rows.

    rewards float [N], traj_ids any [N] → float32 [N] (the reference's ``episode_rewards``).
    """
    n = n_rows(rewards, "rewards")
    r = as_float(rewards, "rewards")
    codes = as_codes(traj_ids, "traj_ids", n, dense=False)
    if n == 0:
        return np.zeros(0, np.float32)
    return np.bincount(codes, weights=r)[codes].astype(np.float32)


def apply_invalid_action_penalty(
    scores: ArrayLike, step_returns: ArrayLike, valid: ArrayLike, coef: float | None
) -> tuple[FloatArray, FloatArray]:
    """Subtract ``coef`` from both the score and the step return of every invalid row.

    docs/algorithm.md#invalid-action-penalty.

    scores       float [N]  episode score of each row's trajectory.
    step_returns float [N]  discounted return of each row.
    valid        bool  [N]  the row's response parsed to a valid action (0/1 ints accepted).
    coef         float >= 0, or None / 0 for no penalty.
    Returns (scores, step_returns) as new float32 arrays. The penalty is applied after discounting,
    so earlier steps' returns are not affected, and it lowers only that row's episode score
    (the reference's score is a per-row token sum), exactly as the reference trainer does.
    """
    n = n_rows(scores, "scores")
    s = as_float(scores, "scores")
    g = as_float(step_returns, "step_returns", n)
    v = np.asarray(valid)
    if v.shape != (n,):
        raise ValueError(f"valid must be 1-D with {n} rows (one flag per row), got shape {v.shape}")
    if v.dtype != bool:
        if not np.isin(v, (0, 1)).all():
            raise ValueError("valid must be booleans (or 0/1 ints): True where the action parsed")
        v = v.astype(bool)
    if coef is None or coef == 0:
        return s.astype(np.float32), g.astype(np.float32)
    if not (np.isfinite(coef) and coef > 0):
        raise ValueError(f"coef (invalid-action penalty) must be a finite number >= 0 or None, got {coef!r}")
    pen = np.where(v, 0.0, float(coef))
    return (s - pen).astype(np.float32), (g - pen).astype(np.float32)
