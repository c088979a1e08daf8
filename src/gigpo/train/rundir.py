"""The run directory's guards: one writer at a time, checks before anything on disk changes, and
resumes that record (or refuse) changes to what defines the run.

``<run_dir>/.lock`` is ``flock``-ed exclusively by the trainer that owns the directory, for the
life of that process, and holds its PID; the kernel drops the lock when the process dies, however
it dies, so a stale lock file never blocks a later run.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import time
from pathlib import Path

from gigpo.train.config import Config, ConfigError, to_dict

LOCK_NAME = ".lock"

# Keys whose change on --resume would silently turn the run into a different experiment.
RUN_DEFINING = (
    "env.family",
    "env.family_module",
    "env.kwargs",
    "env.task_kwargs",
    "env.group_size",
    "env.tasks_per_iter",
    "algorithm.estimator",
    "algorithm.mode",
    "algorithm.anchor",
    "model.name_or_path",
    "model.lora",
    "seed",
    "sft.",
)
# Run-defining keys that even --force cannot change: the checkpoint cannot be loaded after it.
RESUME_FIXED = {
    "model.lora": "the checkpoint holds the weights of a model {old_lora} LoRA adapters, which a model {new_lora} "
    "them cannot load",
}


class RunDirLocked(RuntimeError):
    """Another live process owns the run directory."""


class RunDirLock:
    """An exclusive ``flock`` on ``<run_dir>/.lock``; ``release()`` (or process exit) frees it."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path
        self.set_aside: Path | None = None  # a fresh run's open_run_dir: the old run it moved away

    @classmethod
    def acquire(cls, run_dir: str | Path, *, create: bool = True) -> RunDirLock:
        """Lock ``run_dir`` (which must exist); raises ``RunDirLocked`` naming the holder's PID."""
        path = Path(run_dir) / LOCK_NAME
        # O_CLOEXEC: a spawned env worker must not keep the lock alive after the trainer dies.
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirLocked(
                f"run directory {str(run_dir)!r} is in use by process {holder} (another "
                f"gigpo train is writing it); wait for it to finish, stop it, or pick "
                f"another name=..."
            ) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(fd, path)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing drops the flock
            self.fd = -1


def lock_holder(run_dir: str | Path) -> int | None:
    """PID of the live process holding ``run_dir``'s lock, or None when it is free."""
    path = Path(run_dir) / LOCK_NAME
    if not path.exists():
        return None
    try:
        lock = RunDirLock.acquire(run_dir, create=False)
    except RunDirLocked:
        text = path.read_text(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    lock.release()
    return None


def _set_aside_name(run_dir: Path) -> Path:
    return run_dir.with_name(f"{run_dir.name}-{time.strftime('%Y%m%d-%H%M%S')}")


def open_run_dir(run_dir: str | Path, *, resume: bool) -> RunDirLock:
    """Create/lock ``run_dir``. A fresh run sets an existing non-empty dir aside as
    ``<name>-<timestamp>[-k]`` (after locking it, so a live run is never moved); a resumed run
    needs the dir. Stale temporary checkpoint dirs are removed."""
    run_dir = Path(run_dir)
    if resume:
        if not run_dir.is_dir():
            raise FileNotFoundError(f"--resume: run directory {str(run_dir)!r} does not exist")
        lock = RunDirLock.acquire(run_dir)
    elif run_dir.is_dir() and any(p.name != LOCK_NAME for p in run_dir.iterdir()):
        old_lock = RunDirLock.acquire(run_dir)  # refuses while a live run owns it
        try:
            base = _set_aside_name(run_dir)
            old, k = base, 0
            while True:  # two runs set aside in the same second must not collide
                if not old.exists():
                    try:
                        os.rename(run_dir, old)
                        break
                    except OSError as e:
                        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                            raise
                k += 1
                old = base.with_name(f"{base.name}-{k}")
        finally:
            old_lock.release()
        print(f"kept the previous run in {run_dir.name} as {old} (use --resume to continue a run)", flush=True)
        run_dir.mkdir(parents=True)
        lock = RunDirLock.acquire(run_dir)
        lock.set_aside = old
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        lock = RunDirLock.acquire(run_dir)
    ckdir = run_dir / "checkpoints"
    if ckdir.is_dir():
        for p in ckdir.iterdir():
            if p.name.startswith((".tmp-", ".latest-")):  # left by a run killed mid-save
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    return lock


def undo_fresh_start(run_dir: str | Path, lock: RunDirLock) -> bool:
    """Remove the dir of a fresh (not resumed) run that failed before writing anything but its config (and put
    back the run it set aside), so a failed start leaves nothing behind; releases ``lock``. A dir
    holding anything else (a server's log, a checkpoint) is kept. True when it was removed."""
    run_dir = Path(run_dir)
    try:
        only_config = {p.name for p in run_dir.iterdir()} <= {LOCK_NAME, "config.yaml"}
    except OSError:
        only_config = False
    if not only_config:
        lock.release()
        return False
    (run_dir / "config.yaml").unlink(missing_ok=True)
    lock.path.unlink(missing_ok=True)
    lock.release()
    try:
        run_dir.rmdir()
        if lock.set_aside is not None and not run_dir.exists():
            os.rename(lock.set_aside, run_dir)
    except OSError:
        return False
    return True


# --------------------------------------------------------------------------- resume


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in ("env.kwargs", "env.task_kwargs"):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def resume_changes(run_dir: Path, cfg: Config, *, force: bool, record: bool = True) -> list[dict]:
    """Compare ``cfg`` with the run's saved config; run-defining changes need ``force`` and are
    appended to ``config_changes.jsonl`` (unless ``record`` is false: the check alone, made before
    the run dir is locked). Returns every changed key as {key, old, new}."""
    from gigpo.train.config import load_config

    base = run_dir / "config.resumed.yaml"
    base = base if base.exists() else run_dir / "config.yaml"
    old = _flat(to_dict(load_config(base)))
    new = _flat(to_dict(cfg))
    changes = [
        {"key": k, "old": old.get(k), "new": v}
        for k, v in new.items()
        if k not in ("name", "output_dir") and old.get(k) != v
    ]
    for c in changes:
        if c["key"] in RESUME_FIXED:
            why = RESUME_FIXED[c["key"]].format(
                old_lora="with" if c["old"] else "without", new_lora="with" if c["new"] else "without"
            )
            raise ConfigError(
                f"{c['key']}: a resumed run cannot change it ({c['old']!r} -> {c['new']!r}), not even with "
                f"--force: {why}; start a new run (or resume with {c['key']}={json.dumps(c['old'])})"
            )
    defining = [c for c in changes if c["key"] in RUN_DEFINING or c["key"].startswith("sft.")]
    if defining and not force:
        c = defining[0]
        more = f" (and {len(defining) - 1} more)" if len(defining) > 1 else ""
        raise ConfigError(
            f"{c['key']}: a resumed run cannot change it ({c['old']!r} -> {c['new']!r}){more}; "
            "it defines the run. Start a new run, or pass --force to resume anyway (the change "
            "is recorded in config_changes.jsonl)"
        )
    if defining and record:
        with open(run_dir / "config_changes.jsonl", "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "forced": True, "changes": defining}, default=str
                )
                + "\n"
            )
    return changes
