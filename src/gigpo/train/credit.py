"""The credit phase of an iteration: anchors, returns, the invalid-action penalty and the
estimator's advantages for the rows to train on (docs/algorithm.md#iteration, steps 3-4).

Pure over (config, batch, critic values): the same batch gives the same advantages, which is what
dynamic sampling's signal test and the update both rely on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Credit:
    """The advantages of one batch and what they were computed from."""

    result: Any  # gigpo.advantages.AdvantageResult
    step_returns: np.ndarray  # discounted returns after the invalid-action penalty
    scores: np.ndarray  # episode scores after the penalty
    anchors: np.ndarray  # the rows' anchors under algorithm.anchor
    values: list | None = None  # the critic's token values (estimators with a critic)


def row_anchors(cfg, batch) -> np.ndarray:
    """The rows' anchors under ``algorithm.anchor`` (docs/algorithm.md#anchor-definitions).

    Built on the batch that is trained on, after faulted episodes are left out, so the
    ``context-k`` fallback sees the groups the estimator sees.
    """
    from gigpo.advantages import step_anchors

    return step_anchors(
        cfg.algorithm.anchor,
        episode_ids=batch.episode_id,
        traj_ids=batch.traj_id,
        anchors=batch.anchor,
        actions=batch.action,
        state_anchors=batch.state_anchor,
    )


def critic_values(cfg, critic, batch, pad_token_id: int) -> list[np.ndarray]:
    """The critic's value of every response token of ``batch``'s rows (per-row float32 arrays)."""
    from gigpo.learner.critic import batched_values

    t = cfg.train
    return batched_values(
        critic,
        batch.prompt_ids,
        batch.response_ids,
        pad_token_id=pad_token_id,
        token_budget=t.micro_token_budget,
        autocast=t.autocast,
        pad_multiple=t.pad_multiple,
    )


def batch_credit(cfg, batch, anchors=None, values=None) -> Credit:
    """Returns, penalty and estimator for ``batch``.

    ``anchors``: the rows' anchors when already built (``row_anchors``); ``values``: the critic's
    token values (estimators with a critic only, ``critic_values``)."""
    from gigpo.advantages import (
        apply_invalid_action_penalty,
        compute_advantages,
        discounted_returns,
        episode_scores,
        runtime_inputs,
    )

    a = cfg.algorithm
    options = a.estimator_options()
    if values is not None:
        options |= {"gamma": cfg.critic.gamma, "lam": cfg.critic.lam}
    anchors = row_anchors(cfg, batch) if anchors is None else anchors
    returns = discounted_returns(batch.reward, batch.traj_id, a.gamma)
    scores = episode_scores(batch.reward, batch.traj_id)
    scores, step_returns = apply_invalid_action_penalty(scores, returns, batch.valid, a.invalid_action_penalty)
    # Estimators that build their own step returns (graphgpo) subtract the same penalty there.
    penalties = None
    if "penalties" in runtime_inputs(a.estimator):
        penalties = np.where(np.asarray(batch.valid, bool), 0.0, float(a.invalid_action_penalty or 0.0))
    res = compute_advantages(
        a.estimator,
        scores=scores,
        step_returns=step_returns,
        episode_ids=batch.episode_id,
        traj_ids=batch.traj_id,
        anchors=anchors,
        values=values,
        penalties=penalties,
        **options,
    )
    return Credit(res, step_returns, scores, anchors, values)


@dataclass
class Rows:
    """The rows one policy update trains on."""

    prompts: list
    responses: list
    advantages: np.ndarray
    sampled_logprobs: list
    allowed: list | None
    token_advantages: list | None

    def __len__(self) -> int:
        return len(self.prompts)


def update_rows(batch, result, skip_zero_advantage: bool) -> Rows:
    """``batch``'s rows with their advantages; with ``skip_zero_advantage``, rows with A = 0 are
    left out: they give -A * ratio = 0, no gradient, only a smaller token mean, so leaving them
    out skips their forward and backward (config validation ensures no KL or entropy term)."""
    rows = Rows(
        list(batch.prompt_ids),
        list(batch.response_ids),
        np.asarray(result.advantages),
        list(batch.logprobs),
        batch.allowed,
        result.token_advantages,
    )
    if not skip_zero_advantage:
        return rows
    keep = np.flatnonzero(np.abs(rows.advantages) > 1e-8)

    def pick(xs: list) -> list:
        return [xs[i] for i in keep]

    return Rows(
        pick(rows.prompts),
        pick(rows.responses),
        rows.advantages[keep],
        pick(rows.sampled_logprobs),
        None if rows.allowed is None else pick(rows.allowed),
        None if rows.token_advantages is None else pick(rows.token_advantages),
    )


def write_trajectories(batch, credit: Credit, path) -> None:
    """The batch's trajectories with every row's advantages (``trajectories/iter_*.jsonl``)."""
    from gigpo.rollout import write_trajectories_jsonl

    res = credit.result
    advantages = {
        "A": res.advantages,
        "A_E": res.episode_advantages,
        "A_S": res.step_advantages,
        "step_group": res.step_groups,
        "step_return": credit.step_returns,
    }
    write_trajectories_jsonl(batch, path, advantages=advantages)
