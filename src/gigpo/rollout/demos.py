"""Expert demonstrations for the SFT warm start, built with the rollout's own prompts.

``expert_episodes`` plays the env expert on tasks (seeded, optionally after a few random
exploration moves); ``collect_expert_demos`` turns its steps into SFT rows and
``gigpo.rollout.prompting.collect_fewshot`` into ReAct examples.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from functools import partial
from typing import Iterator, Sequence

import numpy as np

from gigpo.agent import Agent, History, format_expert_response
from gigpo.text import clean_text
from gigpo.agent.relabel import holds_task_object, relabel_step
from gigpo.envs import make_env
from gigpo.envs.base import Task


@dataclass(frozen=True)
class ExpertStep:
    """One step of an expert episode: what the agent saw and what was played.

    ``expert`` is False for an exploration move (a random admissible action played before the
    expert takes over); such steps are history, never demonstrations.
    """

    observation: str
    admissible: list[str] | None
    response: str
    action: str
    expert: bool = True


@dataclass(frozen=True)
class ExpertEpisode:
    task: Task
    task_text: str
    steps: tuple[ExpertStep, ...]
    won: bool
    info: dict  # the env's info after the last step (after reset when there was none)


def expert_episodes(
    family: str,
    tasks: Sequence[Task],
    agent: Agent,
    *,
    max_steps: int,
    env_kwargs: dict | None = None,
    think: str = "reason",
    seed: int = 0,
    explore_steps: int = 0,
) -> Iterator[ExpertEpisode]:
    """The env expert's episode on each task, in task order.

    ALFWorld's handcoded expert draws from the global ``random`` module (which of several objects
    of interest to fetch); it is seeded per task from ``seed`` and the task id, and the caller's
    ``random`` state is restored, so the episodes are a function of the tasks and ``seed``.

    ``explore_steps`` > 0: each episode first plays k random admissible actions, k drawn
    uniformly from 0..explore_steps (own RNG per task, so the expert's draws are unchanged), then
    the expert plays up to ``max_steps`` moves from wherever that left it. The expert then shows
    how to act from states off its own path, which demonstrations from the start alone never
    visit (DART, Laskey et al. 2017, perturbs demonstrations for the same reason). An exploration
    move that ends the episode leaves an episode without expert steps.
    """
    env = make_env(family, **(env_kwargs or {}))
    outer_random = random.getstate()
    try:
        for task in tasks:
            random.seed(zlib.crc32(f"{seed}:{task.task_id}".encode()))
            explore = random.Random(zlib.crc32(f"explore:{seed}:{task.task_id}".encode()))
            obs, info = env.reset(task)
            task_text = info.get("instruction") or obs
            steps: list[ExpertStep] = []
            won = done = False
            n_explore = explore.randint(0, explore_steps) if explore_steps > 0 else 0
            for k in range(n_explore + max_steps):
                admissible = info.get("admissible_actions")
                if k < n_explore:
                    if not admissible:
                        continue  # nothing to explore with: hand over to the expert
                    text = format_expert_response(agent.spec, explore.choice(list(admissible)), think=think)
                else:
                    text = format_expert_response(agent.spec, env.expert_action(), think=think)
                action = agent.parse(text).action
                steps.append(ExpertStep(obs, admissible, text, action, expert=k >= n_explore))
                obs, _reward, done, info = env.step(action)
                if done:
                    won = bool(info.get("won", False))
                    break
            yield ExpertEpisode(task, task_text, tuple(steps), won, info)
    finally:
        random.setstate(outer_random)
        env.close()


def collect_expert_demos(
    family: str,
    tasks: Sequence[Task],
    tokenizer,
    agent: Agent,
    *,
    max_steps: int,
    env_kwargs: dict | None = None,
    only_won: bool = True,
    with_allowed: bool = False,
    think: str = "reason",
    relabel: int = 0,
    seed: int = 0,
    explore_steps: int = 0,
) -> list[tuple]:
    """(prompt_ids, response_ids) pairs of the env expert playing ``tasks`` (``expert_episodes``).

    Each step's prompt is built exactly as ``rollout`` builds it (same agent, same history of
    (observation, parsed action) pairs); the response is ``format_expert_response`` tokenized
    without special tokens, plus the tokenizer's EOS so the model learns to stop.
    Episodes the expert does not win within ``max_steps`` are left out when ``only_won``.

    Returns a list of (int32 [P], int32 [R]) arrays, episodes in task order, steps in time order.
    ``with_allowed``: triples instead, the third item the restricted positions an action-constrained
    sampler would have used for that response (``agent.action_constraint``; None when off), so the
    SFT loss can use the same renormalised distribution the rollout samples from.
    ``think``: the ``<think>`` style of the responses (``format_expert_response``).
    ``seed``, ``explore_steps``: as ``expert_episodes``; exploration moves are history only.
    ``relabel``: families with ``FamilySpec.sft_relabel`` (ALFWorld); up to this many counterfactual
    rows per task-dependent step, the task naming another object / receptacle type in view
    (``gigpo.agent.relabel``), each right after its step's own row.
    """
    if agent.family != family:
        raise ValueError(f"collect_expert_demos: agent is for {agent.family!r}, env family is {family!r}")
    if max_steps < 1:
        raise ValueError(f"collect_expert_demos: max_steps must be >= 1, got {max_steps}")
    if tokenizer.eos_token_id is None:
        raise ValueError("collect_expert_demos: the tokenizer has no eos_token_id; set tokenizer.eos_token")
    demos: list[tuple[np.ndarray, np.ndarray]] = []
    for ep in expert_episodes(
        family,
        tasks,
        agent,
        max_steps=max_steps,
        env_kwargs=env_kwargs,
        think=think,
        seed=seed,
        explore_steps=explore_steps,
    ):
        if only_won and not ep.won:
            continue
        hist = History()
        actions: list[str] = []
        for st in ep.steps:
            if st.expert:
                prompt_for = partial(
                    agent.build_prompt,
                    observation=st.observation,
                    history=hist.entries,
                    step=len(hist),
                    admissible_actions=st.admissible,
                )
                demos.append(
                    _demo_row(prompt_for(ep.task_text), st.response, tokenizer, agent, st.admissible, with_allowed)
                )
                if relabel and agent.spec.sft_relabel and st.admissible:
                    for task_v, action_v in relabel_step(
                        ep.task_text, st.action, st.admissible, holds_task_object(ep.task_text, actions), relabel
                    ):
                        text_v = format_expert_response(agent.spec, action_v, think=think)
                        demos.append(
                            _demo_row(prompt_for(task_v), text_v, tokenizer, agent, st.admissible, with_allowed)
                        )
            actions.append(st.action)
            hist.add(st.observation, st.action)
    return demos


def _demo_row(prompt, text: str, tokenizer, agent: Agent, admissible, with_allowed: bool) -> tuple:
    """(prompt_ids, response_ids[, allowed]) for one expert response ``text``; the response ends with EOS."""
    resp = list(tokenizer(clean_text(text), add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    row = (np.asarray(prompt.ids, dtype=np.int32), np.asarray(resp, dtype=np.int32))
    if with_allowed:
        c = agent.action_constraint(admissible)
        row += (c.positions(resp, [tokenizer.eos_token_id]) if c is not None else None,)
    return row
