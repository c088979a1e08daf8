"""Atomic, verified checkpoints: everything needed to continue a run exactly.

Layout under ``<run_dir>/checkpoints/``::

    iter_000012/state.pt     model, optimizer, scheduler state dicts; RNG states (python, numpy,
                             torch) as plain lists/ints/tensors; iteration; task sampler state
    iter_000012/state.sha256 sha256 of state.pt
    latest                   text file naming the newest complete checkpoint directory

A checkpoint is written into a temporary directory and renamed into place, then ``latest`` is
replaced with ``os.replace``; a run killed at any moment leaves either the old or the new
checkpoint, never a half-written one. Loading verifies the checksum and unpickles with
``weights_only=True``, so a damaged or planted ``state.pt`` is refused instead of trusted; a
corrupt newest checkpoint falls back to the previous one (``keep=2`` retains one).
"""

from __future__ import annotations

import hashlib
import contextlib
import os
import random
import re
import shutil
import signal
import threading
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch

from gigpo.learner.distributed import Dist
from gigpo.policy.cache import disk_full, enospc

_NAME = re.compile(r"iter_\d{6}")


class CheckpointError(RuntimeError):
    """No usable checkpoint (corrupt, tampered with, or missing); the message says which and why."""


def rng_state() -> dict:
    # Plain ints/lists/tensors only: ``torch.load(weights_only=True)`` refuses numpy arrays.
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": list(internal), "gauss": gauss},
        "numpy": {
            "kind": kind,
            "keys": np.asarray(keys).tolist(),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    py, nps = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss"]))
    np.random.set_state(
        (nps["kind"], np.asarray(nps["keys"], dtype=np.uint32), nps["pos"], nps["has_gauss"], nps["cached_gaussian"])
    )
    torch.set_rng_state(state["torch"])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends: a Ctrl-C during a checkpoint write then stops the
    run right after a complete checkpoint, instead of inside torch's zip writer. (Blocking the
    signal mask is not enough: the kernel hands the signal to another thread.)"""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if held:
            signal.raise_signal(held[0])  # now handled as it would have been


def save_checkpoint(
    run_dir: str | Path, iteration: int, state: dict[str, Any], keep: int = 2, best: bool = False
) -> Path:
    """Write ``state`` (plus RNG states) as the checkpoint after ``iteration``; returns its dir.
    ``best``: also pin it as the best checkpoint (``pin_best``). Ctrl-C waits for it to finish."""
    with _signals_deferred():
        return _save_checkpoint(run_dir, iteration, state, keep, best)


def _save_checkpoint(run_dir, iteration: int, state: dict[str, Any], keep: int, best: bool) -> Path:
    ckdir = Path(run_dir) / "checkpoints"
    ckdir.mkdir(parents=True, exist_ok=True)
    final = ckdir / f"iter_{iteration:06d}"
    tmp = ckdir / f".tmp-iter_{iteration:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    payload = dict(state, iteration=iteration, rng=rng_state())
    try:
        with open(tmp / "state.pt", "wb") as f:
            torch.save(payload, f)
        (tmp / "state.sha256").write_text(_sha256(tmp / "state.pt") + "\n")
        for name in ("state.pt", "state.sha256"):  # on disk before `latest` can name them
            _fsync(tmp / name)
    except BaseException as e:
        # torch's zip writer hides a full disk's ENOSPC (even given a file object): RuntimeError
        # "[enforce fail at inline_container.cc] unexpected pos". Ask the file system before the
        # half-written file is removed, and report it as the OSError it is.
        full = disk_full(e, tmp, need=_nbytes(payload))
        shutil.rmtree(tmp, ignore_errors=True)  # frees the space a half-written file took
        if full:
            raise enospc(final) from e
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    if best:
        pin_best(run_dir, final.name)
    _write_pointer(ckdir / f".latest-{os.getpid()}", final.name, ckdir / "latest")
    _fsync(ckdir)
    # Drop old complete checkpoints beyond ``keep`` (never the one just written, never the best).
    pinned = best_checkpoint(run_dir)
    done = sorted(p for p in ckdir.glob("iter_*") if p.is_dir() and p != pinned)
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def pin_best(run_dir: str | Path, name: str) -> None:
    """Name ``checkpoints/<name>`` (an ``iter_NNNNNN`` dir) in ``checkpoints/best``: the rollback
    target of the collapse watchdog and the model best-model selection delivers; pruning keeps it."""
    ckdir = Path(run_dir) / "checkpoints"
    if not _NAME.fullmatch(name) or not (ckdir / name).is_dir():
        raise CheckpointError(f"cannot pin {name!r}: not a checkpoint dir of {ckdir}")
    _write_pointer(ckdir / f".best-{os.getpid()}", name, ckdir / "best")


def _write_pointer(tmp: Path, name: str, dest: Path) -> None:
    """Replace the pointer file ``dest`` by one naming ``name``, via ``tmp`` (removed if it fails)."""
    try:
        tmp.write_text(name)
        _fsync(tmp)
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _nbytes(obj) -> int:
    """The bytes of the tensors in ``obj`` (nested dicts, lists, tuples): what saving it takes."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


def best_checkpoint(run_dir: str | Path) -> Path | None:
    """The pinned best checkpoint dir, or None."""
    ckdir = Path(run_dir) / "checkpoints"
    ptr = ckdir / "best"
    if not ptr.is_file():
        return None
    name = ptr.read_text(errors="replace").strip()
    return ckdir / name if _NAME.fullmatch(name) and (ckdir / name).is_dir() else None


def _pointer(ckdir: Path) -> Path | None:
    """The dir ``latest`` names, or None (absent, or not an ``iter_NNNNNN`` dir inside ``ckdir``)."""
    ptr = ckdir / "latest"
    if not ptr.exists():
        return None
    name = ptr.read_text(errors="replace").strip()
    if not _NAME.fullmatch(name):
        warnings.warn(f"{ptr} names {name!r}, not an iter_NNNNNN directory of {ckdir}; ignoring it", stacklevel=3)
        return None
    return ckdir / name


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint dir ``latest`` names, if it holds a ``state.pt`` (not yet verified)."""
    path = _pointer(Path(run_dir) / "checkpoints")
    return path if path is not None and (path / "state.pt").exists() else None


def load_checkpoint(path: str | Path) -> dict:
    """Load a checkpoint dir's state after checking its sha256 (RNG states are restored separately,
    see ``set_rng_state``). Raises ``CheckpointError`` for a missing, damaged or unsafe file."""
    path = Path(path)
    f, digest = path / "state.pt", path / "state.sha256"
    if not f.exists():
        raise CheckpointError(f"no checkpoint at {str(path)!r} (expected {str(f)!r})")
    if not digest.exists():
        raise CheckpointError(f"{digest} is missing (the checkpoint is incomplete or was written by an older gigpo)")
    want = digest.read_text(errors="replace").strip()
    got = _sha256(f)
    if got != want:
        raise CheckpointError(
            f"{f} does not match its checksum ({f.stat().st_size} bytes, sha256 "
            f"{got[:12]}..., expected {want[:12]}...): the file is truncated or damaged"
        )
    try:
        state = torch.load(f, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling failure means the file is not ours
        raise CheckpointError(
            f"{f} could not be loaded safely ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        ) from e
    if not isinstance(state, dict) or not {"model", "iteration", "rng"} <= set(state):
        raise CheckpointError(f"{f} is not a gigpo checkpoint (no model/iteration/rng entries)")
    return state


def load_latest(run_dir: str | Path) -> tuple[Path, dict] | None:
    """The newest usable checkpoint of ``run_dir`` as ``(dir, state)``; None when there is none at all.

    ``latest`` is tried first, then the other ``iter_NNNNNN`` dirs newest first; each unusable
    one is reported with a warning. Raises ``CheckpointError`` when checkpoints exist but none loads.
    """
    ckdir = Path(run_dir) / "checkpoints"
    if not ckdir.is_dir():
        return None
    first = _pointer(ckdir)
    dirs = sorted((p for p in ckdir.iterdir() if p.is_dir() and _NAME.fullmatch(p.name)), reverse=True)
    order = ([first] if first is not None else []) + [p for p in dirs if p != first]
    errors: list[tuple[Path, str]] = []
    for p in order:
        try:
            state = load_checkpoint(p)
        except CheckpointError as e:
            errors.append((p, str(e)))
            warnings.warn(f"skipping checkpoint {p.name}: {e}", stacklevel=2)
            continue
        if errors:
            warnings.warn(
                f"resuming from {p.name} (iteration {state['iteration']}): {_unusable(errors, p, dirs)}", stacklevel=2
            )
        return p, state
    if not order:
        return None
    raise CheckpointError(f"no usable checkpoint in {ckdir}: " + "; ".join(e for _, e in errors))


def _unusable(errors: list[tuple[Path, str]], used: Path, dirs: list[Path]) -> str:
    """The skipped checkpoints, each named for what it is next to ``used``: "the newest checkpoint
    iter_000002 is unusable: <why>" (newer than ``used``, or older but named by ``latest``)."""
    newest = dirs[0].name if dirs else None
    parts = []
    for p, why in errors:
        if p.name == newest:
            parts.append(f"the newest checkpoint {p.name} is unusable: {why}")
        elif p.name > used.name:
            parts.append(f"the newer checkpoint {p.name} is unusable: {why}")
        else:  # older than the one used: tried first because `latest` named it
            parts.append(f"checkpoint {p.name}, which checkpoints/latest names, is unusable: {why}")
    return "; ".join(parts)


def check_world(saved: int | None, dist: Dist, path) -> None:
    """A checkpoint resumes exactly only on the world size it was written with."""
    saved = 1 if saved is None else int(saved)
    if saved != dist.world:
        raise CheckpointError(
            f"checkpoint {str(path)!r} was written by a run on {saved} process(es), this one has {dist.world}; "
            f"resume with torchrun --nproc-per-node {saved} (a run continues exactly only on its own world size)"
        )
