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
    ``gigpo eval`` (the api backend loads no model, so no device and no weights are checked).
    """
    loads_model = train or cfg.rollout.backend != "api"
    if loads_model:
        check_device(cfg.model.device)  # first: warn_precision reads it
    if train:
        from gigpo.train.logging import check_loggers, say_once

        cfg.check_trainable()
        warn_precision(cfg)
        for note in check_loggers(cfg.log):  # W&B asked for but missing raises here
            say_once("tensorboard", note)
        check_output_dir(cfg)
    check_launch(cfg, world_size)
    check_model_path(cfg.model.name_or_path, weights=loads_model)
    check_env(cfg, train=train)


def check_output_dir(cfg: Config) -> None:
    """The run dir ``<output_dir>/<name>`` can be made: no part of the path is a file and no part's
    name is longer than the file system takes (``name`` itself is bounded by the config)."""
    import errno
    import os

    run_dir = Path(cfg.output_dir).expanduser() / cfg.name
    for part in run_dir.parts:
        if len(os.fsencode(part)) > 255:
            raise ConfigError(
                f"output_dir: {part[:40]!r}... is {len(os.fsencode(part))} bytes, longer than a file name may "
                "be (255); choose a shorter output_dir"
            )
    p = run_dir
    while True:  # up to the first part that exists
        try:
            p.stat()
            break
        except OSError as e:
            if e.errno == errno.ENAMETOOLONG:
                raise ConfigError(
                    f"output_dir: the run directory's path {str(run_dir)[:60]!r}... is too long"
                ) from None
            if e.errno not in (errno.ENOENT, errno.ENOTDIR) or p.parent == p:
                return  # unreadable (EACCES...): the write itself reports it
            p = p.parent
    if not p.is_dir():
        key = "name" if p == run_dir else "output_dir"
        raise ConfigError(
            f"{key}: {str(p)!r} is a file, not a directory, so the run directory {str(run_dir)!r} cannot be "
            "made there; choose another output_dir=... (or name=...)"
        )


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


def check_model_path(name_or_path: str, *, weights: bool = True) -> None:
    """A local model dir must exist and hold a config, whole weight files whose names fit the
    config's architecture, and a tokenizer that loads; a hub id (``org/name``) must be in the local
    Hugging Face cache (nothing is downloaded at run time), and its snapshot is checked the same
    way. The aliases pass (they are built later). ``weights=False``: the weights are not read (the
    api backend loads the tokenizer only)."""
    if name_or_path in ("tiny", "smollm2-135m"):
        return
    from gigpo.policy.load import ModelDirError, _hub_path, check_model_files, load_tokenizer, model_dir_problems

    key = "model.name_or_path"
    p = Path(name_or_path).expanduser()
    looks_local = name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1 or p.is_dir()
    if not looks_local:
        try:
            p = Path(_hub_path(name_or_path, None))
        except FileNotFoundError:
            from huggingface_hub import constants

            raise ConfigError(
                f"{key}: {name_or_path!r} is not a local directory and not in the local Hugging Face cache "
                f"({constants.HF_HUB_CACHE}), and gigpo downloads nothing at run time; fetch it once with "
                f"`hf download {name_or_path}` on a machine with network (then copy the cache here), or give "
                "a local model directory or 'tiny'"
            ) from None
    elif not p.is_dir():
        raise ConfigError(
            f"{key}: model directory {name_or_path!r} does not exist (give a local dir with "
            "config.json, weights and tokenizer, a hub id like 'org/name', or 'tiny')"
        )
    missing = model_dir_problems(p)
    if missing:
        raise ConfigError(f"{key}: {name_or_path!r} is not a model directory: missing {', '.join(missing)}")
    try:
        if weights:
            check_model_files(p, name_or_path)
        else:
            load_tokenizer(p, name_or_path)
    except ModelDirError as e:
        raise ConfigError(f"{key}: {e}") from None


DEVICE_TYPES = ("cpu", "cuda", "mps")  # and "auto"


def check_device(device: str) -> None:
    """``model.device`` must be ``auto``, ``cpu``, ``cuda``/``cuda:<i>`` or ``mps``, and there."""
    import torch

    if device == "auto":
        return
    use = "use model.device=auto, cpu, cuda, cuda:<i> or mps"
    try:
        d = torch.device(device)
    except (RuntimeError, ValueError, TypeError) as e:
        raise ConfigError(f"model.device: {device!r} is not a torch device ({e}); {use}") from None
    if d.type not in DEVICE_TYPES:
        raise ConfigError(f"model.device: {device!r} is not a device gigpo trains or evaluates on; {use}")
    if d.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"model.device: {device!r} but CUDA is not available here; use model.device=cpu")
        if d.index is not None and d.index >= torch.cuda.device_count():
            raise ConfigError(f"model.device: {device!r} but only {torch.cuda.device_count()} CUDA device(s)")
    elif d.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"model.device: {device!r} but MPS is not available here; use model.device=cpu")


# What a family's make_tasks raises for task options it rejects (a plug-in's may raise any of them).
_TASK_ERRORS = (TypeError, ValueError, LookupError, OSError)


def _make(cfg: Config, split: str, n: int | None) -> list:
    """``make_tasks`` of ``env.family`` as the run calls it; a rejected ``env.task_kwargs`` is a
    ``ConfigError``. Asking for more tasks than the split has is left to ``check_tasks`` (the
    families that refuse it raise here; the list of the whole split then says how many there are)."""
    from gigpo.envs import FamilyContractError, make_tasks

    e = cfg.env
    try:
        return make_tasks(e.family, split, n=n, seed=e.task_seed, **e.task_kwargs)
    except FamilyContractError as exc:
        raise ConfigError(f"env.family: {exc}") from None
    except _TASK_ERRORS as exc:
        cause = exc
    if n is not None:
        try:  # the count, or the options? The whole split answers.
            whole = make_tasks(e.family, split, n=None, seed=e.task_seed, **e.task_kwargs)
        except _TASK_ERRORS:
            whole = None
        if whole is not None and len(whole) < n:
            return whole
    msg = " ".join(str(cause).split()) or type(cause).__name__
    raise ConfigError(f"env.task_kwargs: {e.family} {split} tasks cannot be made with {e.task_kwargs}: {msg}")


def check_tasks(cfg: Config, *, train: bool = True) -> tuple[list, list]:
    """The run's task counts against its family's splits, as ``gigpo.train.build.task_pools``
    (``train``) or ``gigpo eval`` (not ``train``) draw them: ``env.train_tasks`` train tasks,
    ``env.eval_tasks`` held-out eval tasks plus ``guard.val_tasks`` validation tasks after them
    when ``guard.val_every`` is on (0 = the whole split). Returns (train tasks, eval-split tasks)
    (no train tasks when not ``train``); raises ``ConfigError`` naming the keys and the count
    there is."""
    e, g = cfg.env, cfg.guard
    where = f"{e.family}" + (f" (env.task_kwargs={e.task_kwargs})" if e.task_kwargs else "")
    train_pool: list = []
    if train:
        n = e.train_tasks or None
        train_pool = _make(cfg, "train", n)
        if not train_pool:
            raise ConfigError(f"env.task_kwargs: {where} has no train tasks")
        if n is not None and len(train_pool) < n:
            raise ConfigError(
                f"env.train_tasks: {n} train tasks asked for, but {where} has {len(train_pool)} in its train "
                f"split; set env.train_tasks <= {len(train_pool)} (0 = all of them)"
            )
        train_pool = train_pool[:n]
    n_val = g.val_tasks if train and g.val_every else 0
    val = f"guard.val_tasks={n_val} validation tasks (guard.val_every={g.val_every})"
    if e.eval_tasks:
        want = e.eval_tasks + n_val
        if n_val:  # the held-out tasks as `gigpo eval` makes them: make_tasks remembers them and compares
            _make(cfg, "eval", e.eval_tasks)
        pool = _make(cfg, "eval", want)
        if len(pool) < want and n_val:
            raise ConfigError(
                f"env.eval_tasks + guard.val_tasks: the run holds out env.eval_tasks={e.eval_tasks} eval tasks "
                f"and, after them, {val}: {want} eval-split tasks, but {where} has {len(pool)}; lower "
                "env.eval_tasks or guard.val_tasks (or set guard.val_every=0)"
            )
        if len(pool) < want:
            raise ConfigError(
                f"env.eval_tasks: {want} eval tasks asked for, but {where} has {len(pool)} in its eval split; "
                f"set env.eval_tasks <= {len(pool)} (0 = all of them)"
            )
        return train_pool, pool[:want]
    pool = _make(cfg, "eval", None)
    if not pool:
        raise ConfigError(f"env.task_kwargs: {where} has no eval tasks")
    if len(pool) <= n_val:
        raise ConfigError(
            f"guard.val_tasks: env.eval_tasks=0 holds out the eval split less its last {val}, but {where} has "
            f"{len(pool)} eval-split task(s), which leaves none to hold out; set guard.val_tasks < {len(pool)} "
            "(or guard.val_every=0)"
        )
    return train_pool, pool


def check_env(cfg: Config, *, train: bool = True) -> None:
    """The task counts (``check_tasks``); then one env of ``env.family`` built with ``env.kwargs``
    and reset on the run's first task, its expert asked once when the run starts with SFT."""
    from gigpo.envs import make_env

    e = cfg.env
    train_pool, eval_pool = check_tasks(cfg, train=train)
    task = (train_pool or eval_pool)[0]
    try:
        env = make_env(e.family, **e.kwargs)
    except TypeError as exc:
        raise ConfigError(f"env.kwargs: a {e.family} env cannot be built with {e.kwargs}: {exc}") from None
    try:
        try:
            env.reset(task)
        except Exception as exc:  # noqa: BLE001 - surfaced as a config problem, with its cause
            raise ConfigError(
                f"env: a {e.family} env built with env.kwargs={e.kwargs} failed to reset on a "
                f"{task.split} task: {type(exc).__name__}: {exc}"
            ) from None
        try:  # the SFT warm start plays the expert: a failing one stops a run here
            if train and cfg.sft.enabled:
                env.expert_action()
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(
                f"sft.enabled: the {e.family} env's expert_action failed on a {task.split} task "
                f"({type(exc).__name__}: {exc}); fix it, or set sft.enabled=false"
            ) from None
    finally:
        getattr(env, "close", lambda: None)()
