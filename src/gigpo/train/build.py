"""The trainer's wiring that builds on the factories (``gigpo.train.factories``): the start model
(``tiny`` and the SFT warm start), the generator, the logger (the models: ``gigpo.train.models``).
"""

from __future__ import annotations

import time
from typing import Callable

from gigpo.train.config import Config
from gigpo.train.factories import load_kwargs
from gigpo.policy.tiny import TinyCorpusError  # noqa: F401 - the CLI names it through train (layering)


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


def build_generator(cfg: Config, models, run_dir, make_generator=None):
    """(generator, vLLM server backend or None): what samples the rollouts on rank 0."""
    if make_generator is None and cfg.rollout.backend == "server":
        from gigpo.train.serving import ServerBackend

        server = ServerBackend(cfg, models.model, models.tokenizer, run_dir / "serving", version=models.version)
        return server.generator, server
    if make_generator is None:
        from gigpo.policy.generate import HFGenerator

        make_generator = HFGenerator
    return make_generator(models.full_model, models.tokenizer), None


def off_policy_pipeline(cfg: Config, models, trainer, state: dict | None):
    """The ``Pipeline`` that samples ``train.off_policy_steps`` iterations ahead of the learner
    (``gigpo.train.offpolicy``): a sampler process (hf backend) or a collect thread (server);
    ``state``: a checkpoint's, whose collects in flight it submits again."""
    import copy

    from gigpo.train.offpolicy import Pipeline, SamplerProcess, SamplerThread

    if trainer.make_generator is not None:
        raise ValueError("train.off_policy_steps needs the built-in generator (make_generator is set)")
    k, last, model = cfg.train.off_policy_steps, cfg.train.iterations, models.full_model
    if cfg.rollout.backend == "server":
        mirror = copy.deepcopy(model).eval().requires_grad_(False)
        gen, collect = trainer.generator, trainer.collector.collect
        pipeline = Pipeline(k, last, model, lambda slots: SamplerThread(collect, gen, mirror, slots))
    else:
        pipeline = Pipeline(k, last, model, lambda slots: SamplerProcess(cfg, trainer.model_path, slots))
    if state is not None:
        pipeline.load_state_dict(state)
    return pipeline


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
