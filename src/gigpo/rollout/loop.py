"""The step-wise multi-turn rollout loop: envs + agent + generator -> StepBatch.

Per step, for the envs STILL RUNNING only (the reference generates for finished envs too and drops
those rows, docs/algorithm.md#rollout; skipping them saves that compute and gives the same rows):
build each prompt (task + last K (obs, action) pairs + obs + admissible actions), generate all
responses in one batch, decode, parse (docs/algorithm.md#action-parsing), step the envs, record one row per env.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, Sequence

import numpy as np

from gigpo.agent import Agent, Memory, Prompt
from gigpo.batch import OPTIONAL_ROW_FIELDS, ROW_FIELDS, StepBatch
from gigpo.envs.base import Task
from gigpo.policy.base import Generation, Generator, SamplingParams
from gigpo.rollout.metrics import rollout_metrics


def _tool_calls(info: dict, searches: int) -> int:
    """Tool calls of a finished trajectory: the env's count when it reports one, else the parsed
    actions of a ``FamilySpec.tool_call_kinds`` kind."""
    v = info.get("tool_calls")
    return int(v) if v is not None else searches


def _final_info(info: dict, keys: Sequence[str]) -> dict:
    """The ``FamilySpec.traj_info_keys`` entries of a trajectory's last info (absent keys left out)."""
    return {k: info[k] for k in keys if k in info}


def generate_texts(generator, tokenizer, prompts: Sequence[Prompt], params: SamplingParams, constraints=None):
    """``(generations, texts)`` for ``prompts``: the exact ids from a ``Generator``, decoded
    (``skip_special_tokens=True``, as the reference); or, from a text-only generator
    (``text_only``, ``gigpo.policy.api``), its texts, with empty ids and log-probs."""
    if getattr(generator, "text_only", False):
        if constraints is not None and any(c is not None for c in constraints):
            raise ValueError("a text-only generator cannot apply action constraints (rollout.constrain_actions)")
        texts = list(generator.complete([getattr(p, generator.prompt_field) for p in prompts], params))
        empty = [Generation(np.zeros(0, np.int32), np.zeros(0, np.float32), True) for _ in texts]
        if len(texts) != len(prompts):
            raise RuntimeError(f"generator returned {len(texts)} responses for {len(prompts)} prompts")
        return empty, texts
    if constraints is not None and any(c is not None for c in constraints):
        gens = generator.generate([p.ids for p in prompts], params, constraints=constraints)
    else:
        gens = generator.generate([p.ids for p in prompts], params)
    if len(gens) != len(prompts):
        raise RuntimeError(f"generator returned {len(gens)} responses for {len(prompts)} prompts")
    return gens, tokenizer.batch_decode([list(g.token_ids) for g in gens], skip_special_tokens=True)


def rollout(
    envs,
    tasks: Sequence[Task],
    generator: Generator,
    tokenizer,
    agent: Agent,
    params: SamplingParams,
    *,
    max_steps: int | None = None,
    progress: bool | Callable[[int, int], None] = False,
    record_text: bool = True,
    preambles: Sequence[Sequence[str]] | None = None,
) -> StepBatch:
    """Run B tasks x n rollouts (``envs.group_size`` = n) to the end; one StepBatch row per step.

    Args:
        envs: a ``gigpo.envs.manager.GroupedEnvs``; slot i runs ``tasks[i // n]``.
        tasks: the B tasks of this iteration.
        generator: samples responses with exact token ids and sampling log-probs.
        tokenizer: decodes responses (``skip_special_tokens=True``, as the reference).
        agent: prompt building and parsing for the envs' family.
        params: sampling parameters; with a ``seed``, step t samples with ``seed + t``.
        max_steps: stop after this many steps (default: until every env is done; the envs'
            own ``max_steps`` truncates them). Trajectories cut here are marked truncated.
        progress: print one line per step to stderr; or a callable ``progress(done, total)``
            told after each step how many of the ``total`` episodes have ended.
        record_text: keep ``response_text`` and ``observation`` (otherwise empty strings).
        preambles: per task, prompt parts shown before the task (``Agent.build_prompt``; the
            prompting agents' examples and reflections, ``gigpo.rollout.prompting``).

    A text-only generator (``generate_texts``) gives rows without response token ids or
    log-probs (evaluation only).

    Returns the StepBatch with rows sorted trajectory-major, in time order. ``meta``:
        family, group_size, num_tasks, steps (loop iterations), prompts (prompts built),
        history_dropped (history entries cut for length), observation_truncated and
        prompt_hard_truncated (prompts cut), generated_tokens, traj_tool_calls (per trajectory:
        the env's ``tool_calls`` count, else the number of <search> actions), and with ``preambles``
        preamble_dropped (parts cut for length), traj_task_text and traj_first_observation (per
        trajectory, its task text and reset observation), traj_info (only for a
        family with ``FamilySpec.traj_info_keys``: per trajectory, those keys of its last info),
        traj_policy_version (only for a generator with a ``policy_version``: per trajectory, the
        version that sampled each of its rows, in time order), and seconds spent in
        time_reset_s / time_prompt_s / time_generate_s / time_env_s (decode, parse, env step) /
        time_total_s.
    """
    if not tasks:
        raise ValueError("rollout needs at least one task")
    if preambles is not None and len(preambles) != len(tasks):
        raise ValueError(f"rollout got {len(preambles)} preambles for {len(tasks)} tasks")
    t0 = time.perf_counter()
    reset = envs.reset(list(tasks))
    n_slots = len(reset)
    group = int(getattr(envs, "group_size", n_slots // len(tasks)))
    if n_slots != group * len(tasks):
        raise RuntimeError(f"envs.reset gave {n_slots} slots for {len(tasks)} tasks x group_size {group}")
    cur = {s: reset[s] for s in range(n_slots)}  # slot -> (obs, info) the next action is taken in
    task_text = [info.get("instruction") or obs for obs, info in reset]
    memory = Memory(n_slots)
    searches = [0] * n_slots
    tool_kinds = agent.spec.tool_call_kinds  # parsed kinds that are tool calls (search: "search")
    rows: dict[str, list] = {k: [] for k in ROW_FIELDS + OPTIONAL_ROW_FIELDS}
    meta = {
        "family": agent.family,
        "history_dropped": 0,
        "observation_truncated": 0,
        "prompt_hard_truncated": 0,
        "prompts": 0,
        "generated_tokens": 0,
        "time_reset_s": time.perf_counter() - t0,
        "time_prompt_s": 0.0,
        "time_generate_s": 0.0,
        "time_env_s": 0.0,
    }
    if preambles is not None:
        meta["preamble_dropped"] = 0
    # The weights version that sampled each row, per slot, when the generator names one
    # (``ServerGenerator.policy_version``): the trainer checks it before updating on the rows.
    versions: list[list] = [[] for _ in range(n_slots)]
    t = 0
    while True:
        active = list(envs.active())
        if not active or (max_steps is not None and t >= max_steps):
            break
        tp = time.perf_counter()
        prompts = []
        for s in active:
            obs, info = cur[s]
            p = agent.build_prompt(
                task_text[s],
                obs,
                memory[s].entries,
                step=len(memory[s]),
                admissible_actions=info.get("admissible_actions"),
                preamble=preambles[s // group] if preambles is not None else (),
            )
            if preambles is not None:
                meta["preamble_dropped"] += p.preamble_dropped
            meta["history_dropped"] += p.history_dropped
            meta["observation_truncated"] += int(p.observation_truncated)
            meta["prompt_hard_truncated"] += int(p.hard_truncated)
            prompts.append(p)
        meta["prompts"] += len(prompts)
        step_params = params if params.seed is None else dataclasses.replace(params, seed=params.seed + t)
        tg = time.perf_counter()
        cons = [agent.action_constraint(cur[s][1].get("admissible_actions")) for s in active]
        gens, texts = generate_texts(generator, tokenizer, prompts, step_params, cons)
        te = time.perf_counter()
        version = getattr(generator, "policy_version", None)
        parsed = [agent.parse(x) for x in texts]
        trans = envs.step({s: pa.action for s, pa in zip(active, parsed)})
        meta["time_env_s"] += time.perf_counter() - te
        meta["time_generate_s"] += te - tg
        meta["time_prompt_s"] += tg - tp
        for s, p, g, text, pa in zip(active, prompts, gens, texts, parsed):
            obs, info = cur[s]
            tr = trans[s]
            rows["episode_id"].append(s // group)
            rows["traj_id"].append(s)
            rows["step"].append(len(memory[s]))
            rows["anchor"].append(info.get("anchor", obs))
            rows["state_anchor"].append(info.get("state_anchor"))  # docs/algorithm.md#anchor-definitions
            rows["reward"].append(float(tr.reward))
            rows["done"].append(bool(tr.done))
            rows["valid"].append(bool(pa.valid))
            rows["prompt_ids"].append(np.asarray(p.ids, dtype=np.int32))
            rows["response_ids"].append(np.asarray(g.token_ids, dtype=np.int32))
            rows["logprobs"].append(np.asarray(g.logprobs, dtype=np.float32))
            rows["allowed"].append(g.allowed or None)
            rows["action"].append(pa.action)
            rows["response_text"].append(text if record_text else "")
            rows["observation"].append(tr.observation if record_text else "")
            meta["generated_tokens"] += len(g.token_ids)
            versions[s].append(version)
            searches[s] += pa.kind in tool_kinds
            memory.add(s, obs, pa.action)
            cur[s] = (tr.observation, tr.info)
        t += 1
        if callable(progress):
            progress(n_slots - len(envs.active()), n_slots)
        elif progress:
            print(
                f"[rollout] step {t}: {len(active)} envs stepped, {len(envs.active())} still running", file=sys.stderr
            )
    still_running = set(envs.active())
    results = sorted(envs.results(), key=lambda r: r.slot)
    if len(results) != n_slots:
        raise RuntimeError(f"envs.results() gave {len(results)} episodes for {n_slots} slots")
    lengths = np.bincount(np.asarray(rows["traj_id"], dtype=np.int64), minlength=n_slots).astype(np.int32)
    meta["traj_tool_calls"] = [_tool_calls(cur[s][1], searches[s]) for s in range(n_slots)]
    if any(v is not None for vs in versions for v in vs):
        meta["traj_policy_version"] = versions
    if preambles is not None:  # what a reflection prompt shows (gigpo.rollout.prompting)
        meta["traj_task_text"] = [task_text[s] for s in range(n_slots)]
        meta["traj_first_observation"] = [reset[s][0] for s in range(n_slots)]
    if agent.spec.traj_info_keys:
        meta["traj_info"] = [_final_info(cur[s][1], agent.spec.traj_info_keys) for s in range(n_slots)]
    meta.update(group_size=group, num_tasks=len(tasks), steps=t, time_total_s=time.perf_counter() - t0)
    order = np.lexsort((np.asarray(rows["step"]), np.asarray(rows["traj_id"])))  # trajectory-major, time order
    obj = StepBatch.object_array
    take = lambda k: [rows[k][i] for i in order]  # noqa: E731
    return StepBatch(
        episode_id=np.asarray(take("episode_id"), dtype=np.int64),
        traj_id=np.asarray(take("traj_id"), dtype=np.int64),
        step=np.asarray(take("step"), dtype=np.int32),
        anchor=obj(take("anchor")),
        reward=np.asarray(take("reward"), dtype=np.float32),
        done=np.asarray(take("done"), dtype=bool),
        valid=np.asarray(take("valid"), dtype=bool),
        prompt_ids=take("prompt_ids"),
        response_ids=take("response_ids"),
        logprobs=take("logprobs"),
        action=obj(take("action")),
        response_text=obj(take("response_text")),
        observation=obj(take("observation")),
        traj_episode_id=np.arange(n_slots, dtype=np.int64) // group,
        traj_task_id=obj([tasks[s // group].task_id for s in range(n_slots)]),
        traj_task_type=obj([r.task_type or tasks[s // group].task_type for s, r in enumerate(results)]),
        traj_won=np.asarray([bool(r.won) for r in results], dtype=bool),
        traj_score=np.asarray([float(r.score) for r in results], dtype=np.float32),
        traj_length=lengths,
        traj_failed=np.asarray([bool(r.failed) for r in results], dtype=bool),
        traj_truncated=np.asarray([bool(r.truncated) or r.slot in still_running for r in results], dtype=bool),
        meta=meta,
        allowed=take("allowed") if any(a is not None for a in rows["allowed"]) else None,
        state_anchor=obj(take("state_anchor")) if any(a is not None for a in rows["state_anchor"]) else None,
    )


def eval_rollout(
    envs,
    tasks: Sequence[Task],
    generator: Generator,
    tokenizer,
    agent: Agent,
    params: SamplingParams | None = None,
    *,
    temperature: float = 0.4,
    max_new_tokens: int = 256,
    max_steps: int | None = None,
    progress: bool | Callable[[int, int], None] = False,
) -> tuple[StepBatch, dict]:
    """One rollout per task (``envs`` built with ``group_size=1``), sampled at temperature 0.4
    (the paper's validation setting, docs/algorithm.md#rollout) unless ``params`` is given.

    Returns ``(batch, metrics)``; see ``gigpo.rollout.metrics.rollout_metrics`` for the keys.
    """
    n = getattr(envs, "group_size", 1)
    if n != 1:
        raise ValueError(f"eval_rollout wants one rollout per task: build GroupedEnvs with group_size=1, not {n}")
    if params is None:
        params = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens)
    batch = rollout(envs, tasks, generator, tokenizer, agent, params, max_steps=max_steps, progress=progress)
    return batch, rollout_metrics(batch)


evaluate = eval_rollout
