"""Advantage estimators over plain row arrays: GiGPO (paper Eqs. 3-8), GRPO, RLOO.

Rows are agent steps (length N). Ids are any 1-D arrays of ints/strings (only equality matters).
All outputs are float32 [N], like the official implementation (docs/algorithm.md#normalisation);
statistics are computed in float64 and cast, which matches the reference to ~1e-6.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._checks import as_codes, as_float, check_epsilon, check_mode, n_rows
from ._types import AnchorKey, Anchors, ArrayLike, FloatArray, LabelArray
from .grouping import exact_step_groups, first_appearance_labels, similarity_step_groups


@dataclass
class AdvantageResult:
    """Per-row output of an estimator (all arrays length N, row-aligned with the inputs).

    advantages          float32 [N]  what the policy loss uses (A = A^E + w * A^S for GiGPO).
    episode_advantages  float32 [N]  episode-level part A^E (GRPO/RLOO: equals ``advantages``).
    step_advantages     float32 [N]  step-level part A^S before the weight w (GRPO/RLOO: zeros).
    step_groups         int64 [N]    step-group label, 0.. in first-appearance order; -1 for
                                     estimators without step groups (GRPO/RLOO/GAE).
    token_advantages    N float32 arrays or None: per response token, for estimators whose
                                     advantage varies over a row's tokens (GAE); the policy loss
                                     then uses these and ``advantages`` holds each row's mean.
    token_returns       N float32 arrays or None: the critic's targets per token (GAE).
    """

    advantages: FloatArray
    episode_advantages: FloatArray
    step_advantages: FloatArray
    step_groups: LabelArray
    token_advantages: list[np.ndarray] | None = field(default=None)
    token_returns: list[np.ndarray] | None = field(default=None)


def group_stats(x: np.ndarray, codes: np.ndarray, with_std: bool = True):
    """Per-row group count, mean and unbiased std (n-1) of ``x`` [N] grouped by ``codes`` [N].

    ``with_std=False`` skips the variance pass (mean_norm does not use it) and returns std None.
    """
    count = np.bincount(codes)
    mean = np.bincount(codes, weights=x) / np.maximum(count, 1)
    if not with_std:
        return count[codes], mean[codes], None
    dev = x - mean[codes]
    var = np.bincount(codes, weights=dev * dev) / np.maximum(count - 1, 1)
    return count[codes], mean[codes], np.sqrt(var)[codes]


def _normalise(x, count, mean, std, mode: str, epsilon: float) -> np.ndarray:
    if mode == "mean_norm":  # F(x) = x - mean (docs/algorithm.md#normalisation)
        return x - mean
    return (x - mean) / (std + epsilon)  # epsilon added to the std, not the variance (docs/algorithm.md#normalisation)


def episode_advantage(scores, codes, mode: str, epsilon: float) -> np.ndarray:
    """A^E (Eq. 3) with statistics over every row of the episode group (docs/algorithm.md#episode-advantage).

    A group with exactly one row uses mean 0, std 1 (the reference's singleton rule).
    """
    count, mean, std = group_stats(scores, codes, mode != "mean_norm")
    single = count == 1
    mean = np.where(single, 0.0, mean)
    std = None if std is None else np.where(single, 1.0, std)
    return _normalise(scores, count, mean, std, mode, epsilon)


def step_advantage(step_returns, groups, mode: str, epsilon: float) -> np.ndarray:
    """A^S (Eq. 7): normalise returns within each step group; a size-1 group gives 0.

    docs/algorithm.md#step-advantage.
    """
    count, mean, std = group_stats(step_returns, groups, mode != "mean_norm")
    single = count == 1
    mean = np.where(single, step_returns, mean)  # reference: mean := the value itself, std := 1
    std = None if std is None else np.where(single, 1.0, std)
    return _normalise(step_returns, count, mean, std, mode, epsilon)


def gigpo_inputs(
    scores, step_returns, episode_ids, anchors, mode, step_weight, similarity_threshold, epsilon, anchor_key
):
    """``gigpo``'s inputs checked, as (scores, step_returns, episode codes, step-group labels) arrays;
    the arguments are ``gigpo``'s. Estimators that build on GiGPO's step groups share it."""
    n = n_rows(scores, "scores")
    s = as_float(scores, "scores")
    g = as_float(step_returns, "step_returns", n)
    ep = as_codes(episode_ids, "episode_ids", n, dense=False)
    check_mode(mode)
    check_epsilon(epsilon)
    if not np.isfinite(step_weight):
        raise ValueError(f"step_weight must be a finite number (paper's omega, default 1.0), got {step_weight!r}")
    if anchors is None:
        raise ValueError("anchors is required for GiGPO step groups (the observation each row acted in)")
    if similarity_threshold is None:
        groups = exact_step_groups(ep, anchors, anchor_key)
    else:
        groups = similarity_step_groups(ep, anchors, similarity_threshold)
    return s, g, ep, groups


def gigpo(
    scores: ArrayLike,
    step_returns: ArrayLike,
    episode_ids: ArrayLike,
    anchors: Anchors,
    *,
    mode: str = "mean_norm",
    step_weight: float = 1.0,
    similarity_threshold: float | None = None,
    epsilon: float = 1e-6,
    anchor_key: AnchorKey | None = None,
) -> AdvantageResult:
    """GiGPO advantages A = A^E + step_weight * A^S (paper Eq. 8, docs/algorithm.md#combined-advantage).

    scores        float [N]  episode score of each row's trajectory, after the invalid-action
                             penalty (see ``apply_invalid_action_penalty``).
    step_returns  float [N]  the row's discounted return, after the penalty.
    episode_ids   any [N]    episode-group id (all rollouts of one task this iteration).
    anchors       [N]        the raw observation each step acted in (docs/algorithm.md#anchors).
    mode          "mean_norm" (x - mean) or "mean_std_norm" ((x - mean) / (std + epsilon),
                  unbiased std).
    similarity_threshold  None → exact anchor grouping; a float in (0, 1) → greedy difflib
                  similarity grouping in batch order (anchors must be str).
    anchor_key    optional callable anchor → hashable key for exact grouping, replacing the
                  reference's conversion (e.g. ``str.strip`` to ignore whitespace); rows whose
                  keys are equal share a step group. Ignored in similarity mode.
    Step groups never cross episode groups. Duplicated rows count twice, as in the reference.
    """
    s, g, ep, groups = gigpo_inputs(
        scores, step_returns, episode_ids, anchors, mode, step_weight, similarity_threshold, epsilon, anchor_key
    )
    a_e = episode_advantage(s, ep, mode, epsilon)
    a_s = step_advantage(g, groups, mode, epsilon)
    return AdvantageResult(
        advantages=(a_e + step_weight * a_s).astype(np.float32),
        episode_advantages=a_e.astype(np.float32),
        step_advantages=a_s.astype(np.float32),
        step_groups=groups,
    )


def _trajectory_scores(s: np.ndarray, ep: np.ndarray, traj_ids, n: int):
    """One score per trajectory = the score of its first row in batch order.

    Returns (traj code per row [N], first row of each trajectory [T]). A trajectory id that
    appears under two episode ids is an error.
    """
    tr = as_codes(traj_ids, "traj_ids", n)
    uniq, first = np.unique(tr, return_index=True)
    if n and (ep[first][tr] != ep).any():
        row = int(np.flatnonzero(ep[first][tr] != ep)[0])
        raise ValueError(
            f"traj_ids: row {row}'s trajectory also appears under another episode id; "
            "a trajectory must belong to one episode group"
        )
    return tr, first


def grpo(
    scores: ArrayLike,
    episode_ids: ArrayLike,
    traj_ids: ArrayLike | None = None,
    *,
    mode: str = "mean_std_norm",
    epsilon: float = 1e-6,
    cross_steps: bool = True,
) -> AdvantageResult:
    """GRPO: each row's score normalised by its episode group's statistics.

    scores float [N] (episode score per row, after any penalty), episode_ids any [N],
    traj_ids any [N] or None (None: every row is its own trajectory; used only when
    ``cross_steps=False``).
    ``mode``: ``mean_std_norm`` (default, GRPO's std division) or ``mean_norm`` (x - mean).
    ``cross_steps=True`` (default, as the reference's ``compute_mean_std_cross_steps=True``):
    the statistics run over every row of the episode group, exactly GiGPO's episode part
    (docs/algorithm.md#baselines), so a group with one row uses mean 0, std 1.
    ``cross_steps=False``: ONE score per trajectory (its first row's) forms the statistics, the
    textbook GRPO; a group with one trajectory uses mean 0, std 1. Every row is still normalised
    with its own score, so when all trajectories tie but a row carries the invalid-action penalty,
    that row is divided by ``std + epsilon`` = epsilon (|A| ~ coef / 1e-6): prefer the default
    wherever scores vary within a trajectory.
    Unbiased std (n-1); epsilon added to it. step_advantages are zeros and step_groups -1.
    """
    n = n_rows(scores, "scores")
    s = as_float(scores, "scores")
    ep = as_codes(episode_ids, "episode_ids", n)
    check_epsilon(epsilon)
    check_mode(mode)
    if cross_steps:  # the same statistics as GiGPO's episode part
        return _no_steps(episode_advantage(s, ep, mode, epsilon), n)
    tr, first = _trajectory_scores(s, ep, np.arange(n) if traj_ids is None else traj_ids, n)
    count, mean, std = group_stats(s[first], ep[first])  # per trajectory [T]
    single = count == 1
    mean = np.where(single, 0.0, mean)[tr]
    std = np.where(single, 1.0, std)[tr]
    adv = (s - mean) / (std + epsilon) if mode == "mean_std_norm" else s - mean
    return _no_steps(adv, n)


def rloo(scores: ArrayLike, episode_ids: ArrayLike, traj_ids: ArrayLike) -> AdvantageResult:
    """RLOO: row score minus the mean score of the OTHER trajectories of its episode group.

    scores float [N], episode_ids any [N], traj_ids any [N]. One score per trajectory, the score
    of its first row in batch order, forms the baseline; each row subtracts the leave-one-out
    mean of its trajectory (b_i = (sum_j s_j - s_i) / (k - 1) over the k trajectories). A group
    with one trajectory has no baseline: the advantage is the raw score (verl's convention).
    """
    n = n_rows(scores, "scores")
    s = as_float(scores, "scores")
    ep = as_codes(episode_ids, "episode_ids", n)
    tr, first = _trajectory_scores(s, ep, traj_ids, n)
    traj_s, traj_ep = s[first], ep[first]  # [T]
    k = np.bincount(traj_ep)[traj_ep]
    total = np.bincount(traj_ep, weights=traj_s)[traj_ep]
    baseline = np.where(k > 1, (total - traj_s) / np.maximum(k - 1, 1), 0.0)  # [T]
    return _no_steps(s - baseline[tr], n)


def _no_steps(adv: np.ndarray, n: int) -> AdvantageResult:
    adv = adv.astype(np.float32)
    return AdvantageResult(
        advantages=adv,
        episode_advantages=adv.copy(),
        step_advantages=np.zeros(n, np.float32),
        step_groups=np.full(n, -1, np.int64),
    )


__all__ = ["AdvantageResult", "gigpo", "grpo", "rloo", "first_appearance_labels"]
