"""Rollout metrics from a StepBatch (training and evaluation rollouts alike).

Keys (fixed names):
    success                 fraction of trajectories won
    success/<task_type>     the same per task type
    score                   mean task score (WebShop purchase score, search EM, ALFWorld won)
    episode_length          mean steps per trajectory
    invalid_action_rate     fraction of steps whose response did not parse (docs/algorithm.md#action-parsing)
    failed_rate, truncated_rate   fraction of trajectories with an env fault / cut at max_steps
    tool_calls_per_question mean tool calls per trajectory (search family only)
    ...                     a family's ``FamilySpec.metrics`` keys (search: tool_calls_per_question;
                            sokoban: deadlock_rate, steps_over_optimal, optimal_rate)
    prompt_history_dropped, prompt_observation_truncated, prompt_hard_truncated
                            prompt-overflow cuts per prompt built
    prompt_preamble_dropped few-shot examples / reflections cut per prompt (prompting agents only)
    num_trajectories, num_steps
"""

from __future__ import annotations

import numpy as np

from gigpo.batch import StepBatch


def rollout_metrics(batch: StepBatch) -> dict:
    """Metrics of ``batch`` (a rollout's output; ``meta`` as ``gigpo.rollout.rollout`` fills it)."""
    T = batch.num_trajectories
    m: dict = {"num_trajectories": T, "num_steps": batch.num_rows}
    if T:
        m["success"] = float(np.mean(batch.traj_won))
        for tt in sorted({str(x) for x in batch.traj_task_type}):
            sel = np.asarray([str(x) == tt for x in batch.traj_task_type])
            m[f"success/{tt or 'unknown'}"] = float(np.mean(batch.traj_won[sel]))
        m["score"] = float(np.mean(batch.traj_score))
        m["episode_length"] = float(np.mean(batch.traj_length))
        m["failed_rate"] = float(np.mean(batch.traj_failed))
        m["truncated_rate"] = float(np.mean(batch.traj_truncated))
    m["invalid_action_rate"] = float(1.0 - np.mean(batch.valid)) if batch.num_rows else 0.0
    hook = _metrics_hook(batch.meta.get("family"))
    if hook is not None:
        m.update(hook(batch))
    prompts = max(1, int(batch.meta.get("prompts", 0)))
    keys = ("history_dropped", "observation_truncated", "prompt_hard_truncated")
    for key in keys + (("preamble_dropped",) if "preamble_dropped" in batch.meta else ()):
        name = key if key.startswith("prompt_") else f"prompt_{key}"
        m[name] = float(batch.meta.get(key, 0)) / prompts
    return m


def _metrics_hook(family):
    """The ``FamilySpec.metrics`` of ``family``; None when it has none or is not registered (a
    batch built outside a rollout)."""
    if not isinstance(family, str):
        return None
    from gigpo.envs.spec import is_family, get_family

    return get_family(family).metrics if is_family(family) else None
