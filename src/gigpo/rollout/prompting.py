"""Prompting-agent evaluation (``agent.mode=react|reflexion``): few-shot examples from the env
expert, and the trial loop of Reflexion, over the ordinary rollout loop.

``collect_fewshot`` plays the env expert on generated train-split tasks and keeps the won
episodes as ``FewShotExample`` (offline, deterministic in the tasks and the seed).
``prompting_eval`` runs one rollout per task with each task's preamble (its examples, and under
``reflexion`` its reflections); under ``reflexion`` a task that fails is tried again, up to
``trials`` times, after the model has written a reflection on the failed trial
(``gigpo.agent.prompting``). Any generator works: an id ``Generator`` (``hf``, ``server``) or a
text-only one (``api``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from gigpo.agent import Agent
from gigpo.agent.prompting import (
    MODES,
    FewShotExample,
    build_reflection_prompt,
    parse_reflection,
    react_preamble,
    reflection_part,
)
from gigpo.batch import StepBatch, concat_batches, select_trajectories
from gigpo.envs.base import Task
from gigpo.policy.base import SamplingParams
from gigpo.rollout.demos import expert_episodes
from gigpo.rollout.loop import generate_texts, rollout
from gigpo.rollout.metrics import rollout_metrics

# Trial k (from 0) samples with seed + k * TRIAL_SEED_STRIDE, so trials differ and repeat per seed.
TRIAL_SEED_STRIDE = 100_003


def collect_fewshot(
    family: str,
    tasks: Sequence[Task],
    agent: Agent,
    *,
    max_steps: int,
    env_kwargs: dict | None = None,
    seed: int = 0,
) -> list[FewShotExample]:
    """The env expert's won episodes on ``tasks``, as ReAct examples (pool order = task order).

    Each step's response is ``format_expert_response(spec, action)``: the family's reason
    template as the thought, then the action. Episodes come from ``expert_episodes`` (seeded per
    task), so the examples are a function of the tasks and ``seed``.
    """
    out: list[FewShotExample] = []
    for ep in expert_episodes(family, tasks, agent, max_steps=max_steps, env_kwargs=env_kwargs, seed=seed):
        if ep.won:
            steps = tuple((st.observation, st.response) for st in ep.steps)
            out.append(FewShotExample(ep.task_text, ep.task.task_type or str(ep.info.get("task_type", "")), steps))
    return out


@dataclass
class PromptingResult:
    """What ``prompting_eval`` returns.

    batch: one trajectory per task, the one that counts (its won trial, else its last).
    metrics: ``rollout_metrics(batch)``, and under ``reflexion`` ``reflexion/success@k`` (share
        of tasks won within the first k trials, k = 1..trials) and ``reflexion/trials`` (mean
        trials run per task).
    trials: the rollout of each trial (trial k holds the tasks still unsolved before it).
    reflections: per task, the reflections written after its failed trials, in order.
    """

    batch: StepBatch
    metrics: dict
    trials: list[StepBatch] = field(default_factory=list)
    reflections: list[list[str]] = field(default_factory=list)


def _outcome(batch: StepBatch, t: int) -> str:
    if batch.traj_failed[t]:
        return "the environment failed during the attempt."
    if batch.traj_truncated[t]:
        return f"the task was not completed within the step limit ({int(batch.traj_length[t])} steps)."
    return "the episode ended without completing the task."


def reflection_prompts(batch: StepBatch, trajs: Sequence[int], agent: Agent) -> list:
    """The reflection prompt of each trajectory ``trajs`` of ``batch`` (a ``rollout`` with
    ``preambles``, which records each trajectory's task text and first observation)."""
    prompts = []
    for t in trajs:
        rows = np.flatnonzero(batch.traj_id == t)
        obs = [batch.meta["traj_first_observation"][t], *[str(batch.observation[r]) for r in rows]]
        steps = [(obs[j], str(batch.response_text[r])) for j, r in enumerate(rows)]
        final = obs[-1] if len(rows) else obs[0]
        prompts.append(
            build_reflection_prompt(agent, batch.meta["traj_task_text"][t], steps, final, _outcome(batch, t))
        )
    return prompts


def prompting_eval(
    envs,
    tasks: Sequence[Task],
    generator,
    tokenizer,
    agent: Agent,
    params: SamplingParams,
    *,
    mode: str,
    examples: Sequence[FewShotExample] = (),
    fewshot: int = 2,
    trials: int = 1,
    reflection_tokens: int = 128,
    max_steps: int | None = None,
    progress: bool = False,
) -> PromptingResult:
    """Evaluate a prompting agent, one rollout per task per trial (``envs`` with ``group_size=1``).

    ``mode``: ``policy`` (the training prompt, one trial: the text-only backend's path for the
    policy agent), ``react`` (one trial, each prompt led by ``fewshot`` of ``examples``, those of
    the task's type first) or ``reflexion`` (the same, up to ``trials`` trials; after a failed trial
    the model writes a reflection of at most ``reflection_tokens`` tokens at ``params``'
    temperature, which the task's later trials carry). ``params.seed`` is offset per trial.
    """
    if mode not in MODES:
        raise ValueError(f"prompting_eval: mode must be one of {MODES}, got {mode!r}")
    if getattr(envs, "group_size", 1) != 1:
        raise ValueError("prompting_eval wants one rollout per task: build GroupedEnvs with group_size=1")
    if trials < 1 or (mode != "reflexion" and trials != 1):
        raise ValueError(f"prompting_eval: trials must be >= 1 (and 1 unless mode is reflexion), got {trials}")
    n = len(tasks)
    shots = fewshot if mode != "policy" else 0
    pre = [react_preamble(agent.spec, examples, t.task_type, shots) for t in tasks]
    reflections: list[list[str]] = [[] for _ in range(n)]
    won_at: list[int | None] = [None] * n
    pending = list(range(n))
    batches: list[StepBatch] = []
    finals: list[StepBatch] = []
    for k in range(trials):
        sub = [tasks[i] for i in pending]
        preambles = [pre[i] + [reflection_part(j + 1, r) for j, r in enumerate(reflections[i])] for i in pending]
        p_k = params if params.seed is None else dataclasses.replace(params, seed=params.seed + k * TRIAL_SEED_STRIDE)
        b = rollout(
            envs, sub, generator, tokenizer, agent, p_k, max_steps=max_steps, progress=progress, preambles=preambles
        )
        batches.append(b)
        for t, i in enumerate(pending):  # group_size 1: trajectory t is task pending[t]
            if b.traj_won[t]:
                won_at[i] = k + 1
        failed = [t for t, i in enumerate(pending) if won_at[i] is None]
        last = k == trials - 1 or not failed
        finals.append(select_trajectories(b, np.asarray([bool(b.traj_won[t]) or last for t in range(len(pending))])))
        if last:
            break
        prompts = reflection_prompts(b, failed, agent)
        rp = dataclasses.replace(p_k, max_new_tokens=reflection_tokens)
        _, texts = generate_texts(generator, tokenizer, prompts, rp)
        for t, text in zip(failed, texts):
            reflections[pending[t]].append(parse_reflection(text))
        pending = [pending[t] for t in failed]
    final = concat_batches([f for f in finals if f.num_trajectories])
    metrics = rollout_metrics(final)
    if mode == "reflexion":
        for k in range(1, trials + 1):
            metrics[f"reflexion/success@{k}"] = sum(w is not None and w <= k for w in won_at) / n
        metrics["reflexion/trials"] = float(sum(b.num_trajectories for b in batches)) / n
    return PromptingResult(final, metrics, batches, reflections)
