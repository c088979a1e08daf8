"""Expert demonstrations for the SFT warm start, built with the rollout's own prompts."""

from __future__ import annotations

import random
import zlib
from functools import partial
from typing import Sequence

import numpy as np

from gigpo.agent import Agent, History, format_expert_response
from gigpo.text import clean_text
from gigpo.agent.relabel import holds_task_object, relabel_step
from gigpo.envs import make_env
from gigpo.envs.base import Task


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
) -> list[tuple]:
    """(prompt_ids, response_ids) pairs of the env expert playing ``tasks``.

    Each step's prompt is built exactly as ``rollout`` builds it (same agent, same history of
    (observation, parsed action) pairs); the response is ``format_expert_response`` tokenized
    without special tokens, plus the tokenizer's EOS so the model learns to stop.
    Episodes the expert does not win within ``max_steps`` are left out when ``only_won``.

    Returns a list of (int32 [P], int32 [R]) arrays, episodes in task order, steps in time order.
    ``with_allowed``: triples instead, the third item the restricted positions an action-constrained
    sampler would have used for that response (``agent.action_constraint``; None when off), so the
    SFT loss can use the same renormalised distribution the rollout samples from.
    ``think``: the ``<think>`` style of the responses (``format_expert_response``).
    ``seed``: ALFWorld's handcoded expert draws from the global ``random`` module (which of several
    objects of interest to fetch); it is seeded per task from ``seed`` and the task id, and the
    caller's ``random`` state is restored, so the demos are a function of the tasks and ``seed``.
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
    env = make_env(family, **(env_kwargs or {}))
    demos: list[tuple[np.ndarray, np.ndarray]] = []
    outer_random = random.getstate()
    try:
        for task in tasks:
            random.seed(zlib.crc32(f"{seed}:{task.task_id}".encode()))
            obs, info = env.reset(task)
            task_text = info.get("instruction") or obs
            hist = History()
            episode = []
            won = False
            actions: list[str] = []
            for _ in range(max_steps):
                admissible = info.get("admissible_actions")
                prompt_for = partial(
                    agent.build_prompt,
                    observation=obs,
                    history=hist.entries,
                    step=len(hist),
                    admissible_actions=admissible,
                )
                text = format_expert_response(agent.spec, env.expert_action(), think=think)
                action = agent.parse(text).action
                episode.append(_demo_row(prompt_for(task_text), text, tokenizer, agent, admissible, with_allowed))
                if relabel and agent.spec.sft_relabel and admissible:
                    for task_v, action_v in relabel_step(
                        task_text, action, admissible, holds_task_object(task_text, actions), relabel
                    ):
                        text_v = format_expert_response(agent.spec, action_v, think=think)
                        episode.append(
                            _demo_row(prompt_for(task_v), text_v, tokenizer, agent, admissible, with_allowed)
                        )
                actions.append(action)
                hist.add(obs, action)
                obs, _reward, done, info = env.step(action)
                if done:
                    won = bool(info.get("won", False))
                    break
            if won or not only_won:
                demos.extend(episode)
    finally:
        random.setstate(outer_random)
        env.close()
    return demos


def _demo_row(prompt, text: str, tokenizer, agent: Agent, admissible, with_allowed: bool) -> tuple:
    """(prompt_ids, response_ids[, allowed]) for one expert response ``text``; the response ends with EOS."""
    resp = list(tokenizer(clean_text(text), add_special_tokens=False)["input_ids"]) + [tokenizer.eos_token_id]
    row = (np.asarray(prompt.ids, dtype=np.int32), np.asarray(resp, dtype=np.int32))
    if with_allowed:
        c = agent.action_constraint(admissible)
        row += (c.positions(resp, [tokenizer.eos_token_id]) if c is not None else None,)
    return row
