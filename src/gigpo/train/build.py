"""What a run is made of, built from its config: task pools, envs, agent, generator, logger (the
models: ``gigpo.train.models``). The trainer calls these in order; each is usable alone (``gigpo eval``
and the SFT build their envs and agent with the same functions).
"""

from __future__ import annotations

import time
from typing import Callable

from gigpo.train.config import Config, EnvConfig


def load_kwargs(cfg: Config, device: str | None = None) -> dict:
    """The keyword arguments of ``gigpo.policy.load_policy`` that ``cfg.model`` and the seed set
    (``device`` overrides ``cfg.model.device``: the trainer's rank decides it)."""
    from gigpo.policy.tiny import tiny_config

    m, e = cfg.model, cfg.env
    tiny = tiny_config(e.family, e.task_kwargs, e.kwargs)  # the `tiny` build of this run's family
    return dict(device=device or m.device, dtype=m.dtype, cache_dir=m.cache_dir or None, seed=cfg.seed, tiny=tiny)


def grouped_envs(e: EnvConfig, group_size: int):
    """The ``GroupedEnvs`` of ``env`` settings with ``group_size`` rollouts per task (training uses
    ``env.group_size``, evaluation 1)."""
    from gigpo.envs.manager import GroupedEnvs

    step_timeout, reset_timeout = e.timeouts()
    return GroupedEnvs(
        e.family,
        group_size=group_size,
        max_steps=e.max_steps,
        env_kwargs=e.kwargs,
        executor=e.executor,
        step_timeout=step_timeout,
        reset_timeout=reset_timeout,
        ray_num_cpus=None if e.ray_num_cpus == -1 else e.ray_num_cpus,
    )


def build_agent(cfg: Config, tokenizer):
    """The ``Agent`` that ``cfg`` describes (prompt format, history, action constraint)."""
    from gigpo.agent import Agent

    return Agent(
        cfg.env.family,
        tokenizer,
        history_length=cfg.env.history_length,
        max_prompt_tokens=cfg.rollout.max_prompt_tokens,
        constrain_actions=cfg.rollout.constrain_actions,
        repeat_task=cfg.rollout.repeat_task,
        prompt_form=cfg.rollout.prompt,
    )


def start_model(cfg: Config, main_first: Callable, phase_times: dict, *, build_it: bool, main: bool) -> str:
    """The model the run starts from: ``model.name_or_path`` (``tiny`` built when not cached), or
    its SFT warm start (``sft.enabled``); ``main_first(fn)`` runs ``fn`` on rank 0 first, then on
    the others (which find it cached). Records ``model_build`` and ``sft`` seconds."""
    path = cfg.model.name_or_path
    t0 = time.perf_counter()
    if build_it:
        from gigpo.policy.load import resolve_path

        tiny = load_kwargs(cfg)["tiny"]
        main_first(lambda: resolve_path(path, cfg.model.cache_dir or None, tiny=tiny))
        phase_times["model_build"] = time.perf_counter() - t0
    if cfg.sft.enabled:
        from gigpo.train.sft import ensure_sft_model

        t0 = time.perf_counter()
        path = main_first(lambda: ensure_sft_model(cfg, progress=cfg.log.progress and main))
        phase_times["sft"] = time.perf_counter() - t0
    return path


def task_pools(cfg: Config) -> tuple[list, list, list]:
    """(train, held-out eval, validation) tasks.

    Validation tasks (best-model selection) come after the held-out ones in the eval split's fixed
    order, so the two sets are disjoint and the held-out eval stays unbiased.
    """
    from gigpo.envs import make_tasks

    e, g = cfg.env, cfg.guard
    train = make_tasks(e.family, "train", n=e.train_tasks or None, seed=e.task_seed, **e.task_kwargs)
    n_val = g.val_tasks if g.val_every else 0
    if e.eval_tasks:
        pool = make_tasks(e.family, "eval", n=e.eval_tasks + n_val, seed=e.task_seed, **e.task_kwargs)
        return train, pool[: e.eval_tasks], pool[e.eval_tasks :]
    pool = make_tasks(e.family, "eval", n=None, seed=e.task_seed, **e.task_kwargs)
    return (train, pool[:-n_val], pool[-n_val:]) if n_val else (train, pool, [])


def build_generator(cfg: Config, models, run_dir, make_generator=None):
    """(generator, vLLM server backend or None): what samples the rollouts on rank 0."""
    if make_generator is None and cfg.rollout.backend == "server":
        from gigpo.train.serving import ServerBackend

        server = ServerBackend(cfg, models.model, models.tokenizer, run_dir / "serving")
        return server.generator, server
    if make_generator is None:
        from gigpo.policy.generate import HFGenerator

        make_generator = HFGenerator
    return make_generator(models.full_model, models.tokenizer), None


class NoLogger:
    """The metrics logger of ranks other than 0: only rank 0 writes the run's metrics."""

    def log(self, metrics: dict, *, iteration: int, tag: str) -> None:
        pass

    def close(self) -> None:
        pass


def build_logger(cfg: Config, run_dir, *, resume_after: int | None, main: bool):
    from gigpo.train.logging import MetricsLogger

    if not main:
        return NoLogger()
    return MetricsLogger(
        run_dir,
        resume_after=resume_after,
        tensorboard=cfg.log.tensorboard,
        wandb_project=cfg.log.wandb_project,
        config=cfg,
    )
