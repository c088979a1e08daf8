"""GiGPO with empirical-Bayes anchor baselines (``gigpo_eb``): each step group's baseline trusts
the group as far as its count and spread allow.

GiGPO's step advantage (paper Eq. 7) compares a row's discounted return with the mean return of
its anchor-state group. That mean is the state's value estimated from n rows: with n = 2 or 3
and noisy continuations it is a poor baseline, and a singleton group gets no step signal at all.
``gigpo_eb`` replaces the group mean by a James-Stein (empirical-Bayes) estimate of the state's
value, the group mean shrunk toward the mean return of the whole episode group (the task):

    b_g = mu_e + kappa_g * (m_g - mu_e),   kappa_g = tau^2 / (tau^2 + sigma^2 / n_g)

- ``m_g``, ``n_g``: the step group's mean return and row count; ``mu_e``: the mean step return
  over every row of the group's episode group;
- ``sigma^2``: the noise of one return around its state's value, pooled over the batch's step
  groups of two or more rows (their unbiased within-group variances, weighted by n_g - 1);
- ``tau^2``: how much state values differ within a task, by moments over the batch's step
  groups: mean (m_g - mu_e)^2 less the mean noise sigma^2 / n_g, floored at 0.

Then ``A^S_i = F(R_i - b_g)`` (``mean_norm``: as is; ``mean_std_norm``: divided by the group's
std + epsilon, a singleton's std being 1, as in GiGPO) and ``A = A^E + step_weight * A^S``.

A large group whose mean stands clear of its task's (kappa -> 1) gets GiGPO's step advantage;
where state values do not differ beyond noise (kappa -> 0) every row of the task is compared with
the task's mean return, and a singleton gets ``(1 - kappa) * (R_i - mu_e)`` where GiGPO gives 0.
With no step group of two rows in the batch there is no noise estimate and the result is GiGPO's.
ECPO (arXiv:2606.05885) is reported to shrink small or noisy groups' step advantages; this is
the textbook James-Stein form of trusting a group by its count and spread, not that paper's.
"""

from __future__ import annotations

import numpy as np

from ._types import AnchorKey, Anchors, ArrayLike
from .estimators import AdvantageResult, episode_advantage, gigpo_inputs, group_stats


def shrinkage_weights(step_returns: np.ndarray, groups: np.ndarray, episode_codes: np.ndarray):
    """Per step group: (kappa [G], mu_e [G], mean [G], count [G]); see the module docstring.

    ``groups`` are step-group labels 0..G-1 that never cross ``episode_codes`` (non-negative ints).
    """
    count = np.bincount(groups).astype(np.float64)
    mean = np.bincount(groups, weights=step_returns) / np.maximum(count, 1)
    dev = step_returns - mean[groups]
    ss = np.bincount(groups, weights=dev * dev)  # within-group sum of squares
    dof = np.maximum(count - 1, 0).sum()
    ep_count = np.bincount(episode_codes).astype(np.float64)
    ep_mean = np.bincount(episode_codes, weights=step_returns) / np.maximum(ep_count, 1)
    # each group's episode group (groups never cross episode groups: any of its rows will do)
    row = np.zeros(len(count), np.int64)
    row[groups] = np.arange(len(groups))
    mu = ep_mean[episode_codes[row]]
    if dof == 0:  # no group of two rows: no noise estimate, trust every group (GiGPO)
        return np.ones(len(count)), mu, mean, count
    sigma2 = ss.sum() / dof
    if sigma2 == 0.0:  # returns never differ within a state: the group means are exact
        return np.ones(len(count)), mu, mean, count
    noise = sigma2 / count
    tau2 = max(float(np.mean((mean - mu) ** 2) - np.mean(noise)), 0.0)
    return tau2 / (tau2 + noise), mu, mean, count


def gigpo_eb(
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
    """GiGPO whose step baseline is each anchor group's mean return shrunk toward its task's mean
    by the group's count and the batch's spread (module docstring). Inputs and options as
    ``gigpo``; ``episode_advantages`` is GiGPO's A^E, ``step_advantages`` the shrunk A^S."""
    s, g, ep, groups = gigpo_inputs(
        scores, step_returns, episode_ids, anchors, mode, step_weight, similarity_threshold, epsilon, anchor_key
    )
    a_e = episode_advantage(s, ep, mode, epsilon)
    if len(g) == 0:
        a_s = np.zeros(0)
    else:
        kappa, mu, mean, count = shrinkage_weights(g, groups, ep)
        base = mu + kappa * (mean - mu)
        a_s = g - base[groups]
        if mode != "mean_norm":
            count_r, _, std = group_stats(g, groups)
            std = np.where(count_r == 1, 1.0, std)  # a singleton's std is 1, as GiGPO's
            a_s = a_s / (std + epsilon)
    return AdvantageResult(
        advantages=(a_e + step_weight * a_s).astype(np.float32),
        episode_advantages=a_e.astype(np.float32),
        step_advantages=a_s.astype(np.float32),
        step_groups=groups,
    )
