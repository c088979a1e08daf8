"""Checks of a loaded config against this machine and this launch: everything that can fail
before a run directory is touched or a model is loaded, in one call, ``check_run``.

``load_config`` already checked each key and the rules between keys (``gigpo.train.config``);
what is left needs the machine (the model directory, the device, an env built and reset) or the
launch (how many processes torchrun started).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from gigpo.train.config import Config, ConfigError


def check_run(cfg: Config, *, world_size: int = 1, train: bool = True) -> None:
    """Raise ``ConfigError`` (one line naming the key and the fix) unless ``cfg`` can run here.

    ``world_size``: processes of the job (torchrun's ``WORLD_SIZE``); ``train``: for ``gigpo
    train`` (the agent and backend must be trainable, ``Config.check_trainable``), else for
    ``gigpo eval`` (the api backend loads no model, so no device is checked).
    """
    if train:
        from gigpo.train.logging import check_loggers, say_once

        cfg.check_trainable()
        warn_precision(cfg)
        for note in check_loggers(cfg.log):  # W&B asked for but missing raises here
            say_once("tensorboard", note)
    check_launch(cfg, world_size)
    check_model_path(cfg.model.name_or_path)
    if train or cfg.rollout.backend != "api":
        check_device(cfg.model.device)
    check_env(cfg)


def warn_precision(cfg: Config) -> None:
    """``train.autocast=bf16`` where bfloat16 matmuls are not native runs, but many times slower."""
    import torch

    from gigpo.learner.precision import native_bf16

    device = cfg.model.device
    if cfg.train.autocast == "bf16" and device != "auto" and not native_bf16(torch.device(device).type):
        warnings.warn(
            f"train.autocast=bf16 on {device}, which has no native bfloat16 matmuls (a CPU without "
            "AVX512): the update runs many times slower than in float32; set train.autocast=auto",
            stacklevel=3,
        )


def check_launch(cfg: Config, world_size: int) -> None:
    """Features that run in one trainer process only are refused in a job of more processes."""
    if world_size <= 1:
        return
    if cfg.rollout.backend == "server":
        raise ConfigError(
            f"rollout.backend: server runs in one trainer process only, but {world_size} were started; "
            "launch it without torchrun (or use rollout.backend=hf)"
        )
    if cfg.needs_critic():
        raise ConfigError(
            f"algorithm.estimator: {cfg.algorithm.estimator!r} trains a critic, which runs in one process "
            f"only, but {world_size} were started; launch it without torchrun (or pick a critic-free "
            "estimator: gigpo, grpo, rloo)"
        )


def check_model_path(name_or_path: str) -> None:
    """A local model dir must exist and hold a config, weights and a tokenizer file; aliases and
    hub ids (``org/name``) pass (they are built or downloaded later)."""
    if name_or_path in ("tiny", "smollm2-135m"):
        return
    p = Path(name_or_path).expanduser()
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or p.is_dir()
    if not looks_local:
        return
    key = "model.name_or_path"
    if not p.is_dir():
        raise ConfigError(
            f"{key}: model directory {name_or_path!r} does not exist (give a local dir with "
            "config.json, weights and tokenizer, a hub id like 'org/name', or 'tiny')"
        )
    from gigpo.policy.load import model_dir_problems

    missing = model_dir_problems(p)
    if missing:
        raise ConfigError(f"{key}: {name_or_path!r} is not a model directory: missing {', '.join(missing)}")


def check_device(device: str) -> None:
    import torch

    if device == "auto":
        return
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ConfigError(f"model.device: {device!r} is not a torch device ({e}); use cpu, cuda or cuda:0") from None
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"model.device: {device!r} but CUDA is not available here; use model.device=cpu")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ConfigError(f"model.device: {device!r} but only {torch.cuda.device_count()} CUDA device(s)")
    elif d.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model.device: {device!r} but MPS is not available here; use model.device=cpu")


def check_env(cfg: Config) -> None:
    """Build one env of ``env.family`` with ``env.kwargs`` and reset it on one train task."""
    from gigpo.envs import make_env, make_tasks

    e = cfg.env
    try:
        tasks = make_tasks(e.family, "train", n=1, seed=e.task_seed, **e.task_kwargs)
    except TypeError as exc:
        raise ConfigError(f"env.task_kwargs: {e.family} tasks cannot be made with {e.task_kwargs}: {exc}") from None
    if not tasks:
        raise ConfigError(f"env.task_kwargs: {e.family} has no train tasks with {e.task_kwargs}")
    try:
        env = make_env(e.family, **e.kwargs)
    except TypeError as exc:
        raise ConfigError(f"env.kwargs: a {e.family} env cannot be built with {e.kwargs}: {exc}") from None
    try:
        env.reset(tasks[0])
    except Exception as exc:  # noqa: BLE001 - surfaced as a config problem, with its cause
        raise ConfigError(
            f"env: a {e.family} env built with env.kwargs={e.kwargs} failed to reset on a "
            f"train task: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        getattr(env, "close", lambda: None)()
