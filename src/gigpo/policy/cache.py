"""Where gigpo keeps the models it builds or converts, and atomic directory writes
(``build_atomic``: write once; ``replace_dir_atomic``: rewrite, e.g. a run's trained model).

Layout: ``$GIGPO_CACHE/models/<name>`` when ``GIGPO_CACHE`` is set, else
``~/.cache/gigpo/models/<name>``. A model directory appears only complete: it is written into a
temporary sibling and renamed into place, so a crash or a concurrent builder never leaves a
half-written directory under the final name.

Each write holds an exclusive ``flock`` on ``.<name>.tmp-XXXX.lock`` (made before its temporary
dir ``.<name>.tmp-XXXX``) for as long as it runs; the next write of the same ``<name>`` removes
the temporaries whose lock nobody holds (left by a killed write), never those of a live one.
A full disk is reported as ``OSError(ENOSPC)`` naming the target, whatever the writer raised
(``disk_full``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

_MIB = 1 << 20


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding gigpo's built/converted models (``cache_dir`` overrides the default)."""
    if cache_dir is not None:
        root = Path(cache_dir)
    elif os.environ.get("GIGPO_CACHE"):
        root = Path(os.environ["GIGPO_CACHE"])
    else:
        root = Path.home() / ".cache" / "gigpo"
    return root / "models"


def _says_enospc(exc: BaseException) -> bool:
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return True
        text = str(e)
        if "No space left on device" in text or "os error 28" in text:  # safetensors' SafetensorError
            return True
        e = e.__cause__ or e.__context__
    return False


def disk_full(exc: BaseException, where: str | os.PathLike, *, need: int = 0) -> bool:
    """Whether ``exc``, raised while writing under the directory ``where``, means the disk is full.

    True for an ``ENOSPC`` anywhere in its chain or a message naming it (safetensors raises
    ``SafetensorError: ... No space left on device (os error 28)``), and for any error while
    ``where``'s file system has less than ``need`` bytes (at least 1 MiB) free: torch's zip writer
    hides the errno behind ``RuntimeError: [enforce fail at inline_container.cc] unexpected pos``.
    Ask before removing the partial files (they hold the space that ran out).
    """
    if isinstance(exc, (KeyboardInterrupt, SystemExit)):
        return False
    if _says_enospc(exc):
        return True
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        free = shutil.disk_usage(path).free
    except OSError:
        return False
    return free < max(need, _MIB)


def enospc(target: str | os.PathLike) -> OSError:
    """The ``OSError(ENOSPC)`` a full disk while writing ``target`` is reported as."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(target))


def _prefix(target: Path) -> str:
    return f".{target.name}.tmp-"


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive flock on ``path`` (which must exist), or None if someone holds it."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _age(p: Path) -> float:
    try:
        return time.time() - p.stat().st_mtime
    except OSError:
        return 0.0


def _rm(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def remove_stale_temporaries(target: Path) -> list[Path]:
    """Remove the temporaries of writes of ``target`` that were killed (their lock is free, or they
    have none: made by an older gigpo); returns what was removed. A live write's are kept. A write
    killed between moving the old copy aside and renaming the new one in gets the old copy back."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    removed = []
    for p in sorted(target.parent.glob(_prefix(target) + "*")):
        if p.name.endswith((".lock", ".old")) or not p.exists():
            continue
        lock = p.with_name(p.name + ".lock")
        fd = _try_lock(lock) if lock.exists() else None
        if lock.exists() and fd is None:
            continue  # a live write
        try:
            old = p.with_name(p.name + ".old")
            if (old / target.name).is_dir() and not target.exists():
                os.replace(old / target.name, target)
            for q in (p, old, lock):
                if q.exists() or q.is_symlink():
                    _rm(q)
                    removed.append(q)
        finally:
            if fd is not None:
                os.close(fd)
    for lock in target.parent.glob(_prefix(target) + "*.lock"):  # a write killed before its dir existed
        # (not a young one: its write may be between making the lock and taking it)
        if not lock.with_name(lock.name.removesuffix(".lock")).exists() and _age(lock) > 60:
            fd = _try_lock(lock)
            if fd is not None:
                _rm(lock)
                os.close(fd)
                removed.append(lock)
    # a write killed before its lock existed (an older gigpo): old-style ``.<name>.old-*`` dirs
    for p in target.parent.glob(f".{target.name}.old-*"):
        if (p / target.name).is_dir() and not target.exists():
            os.replace(p / target.name, target)
        _rm(p)
        removed.append(p)
    return removed


@contextlib.contextmanager
def _locked_tmp(target: Path) -> Iterator[Path]:
    """A fresh temporary sibling dir of ``target``, its lock held while the block runs; the
    temporary (and an ``.old`` beside it) are removed when the block ends, however it ends."""
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(target)
    fd, lock_name = tempfile.mkstemp(prefix=_prefix(target), suffix=".lock", dir=target.parent)
    lock = Path(lock_name)
    tmp = lock.with_name(lock.name.removesuffix(".lock"))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # before the dir exists: a dir without a held lock is stale
        tmp.mkdir()
        yield tmp
    finally:
        for p in (tmp, tmp.with_name(tmp.name + ".old")):
            if p.exists():
                shutil.rmtree(p, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            lock.unlink()
        os.close(fd)


def _write(tmp: Path, target: Path, write: Callable[[Path], None], need: int) -> None:
    """``write(tmp)``; a full disk becomes ``OSError(ENOSPC)`` naming ``target``."""
    try:
        write(tmp)
    except BaseException as e:
        if disk_full(e, tmp, need=need):
            raise enospc(target) from e
        raise


def build_atomic(target: Path, build: Callable[[Path], None]) -> Path:
    """Return ``target``, first calling ``build(tmp_dir)`` and renaming it there if it is missing.

    If another process finishes the same ``target`` first, its copy wins and ours is discarded
    (both are built from the same inputs, so they are interchangeable). Temporaries of killed
    builds of ``target`` are removed first; a full disk is ``OSError(ENOSPC)`` naming ``target``.
    """
    if target.is_dir():
        return target
    with _locked_tmp(target) as tmp:
        _write(tmp, target, build, 0)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            # Lost a race with a concurrent builder: keep theirs.
    return target


def replace_dir_atomic(target: Path, write: Callable[[Path], None], *, need: int = 0) -> Path:
    """Write a new ``target`` directory with ``write(tmp_dir)``, then swap it in for any old copy.

    Unlike ``build_atomic`` this always rewrites (a newer model replaces the older one). If
    ``write`` fails, the old copy stays untouched and the temporary directory is removed; the old
    copy is deleted only after the new one has its final name. A full disk (``need``: the bytes
    the write takes, when known) is ``OSError(ENOSPC)`` naming ``target``.
    """
    target = Path(target)
    with _locked_tmp(target) as tmp:
        _write(tmp, target, write, need)
        old = tmp.with_name(tmp.name + ".old")
        if target.exists():
            old.mkdir()
            os.replace(target, old / target.name)
        try:
            os.replace(tmp, target)
        finally:
            if not target.exists() and (old / target.name).exists():  # the swap failed: put it back
                os.replace(old / target.name, target)
    return target
