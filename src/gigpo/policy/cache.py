"""Where gigpo keeps the models it builds or converts, and atomic directory writes
(``build_atomic``: write once; ``replace_dir_atomic``: rewrite, e.g. a run's trained model).

Layout: ``$GIGPO_CACHE/models/<name>`` when ``GIGPO_CACHE`` is set, else
``~/.cache/gigpo/models/<name>``. A model directory appears only complete: it is written into a
temporary sibling and renamed into place, so a crash or a concurrent builder never leaves a
half-written directory under the final name.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding gigpo's built/converted models (``cache_dir`` overrides the default)."""
    if cache_dir is not None:
        root = Path(cache_dir)
    elif os.environ.get("GIGPO_CACHE"):
        root = Path(os.environ["GIGPO_CACHE"])
    else:
        root = Path.home() / ".cache" / "gigpo"
    return root / "models"


def build_atomic(target: Path, build: Callable[[Path], None]) -> Path:
    """Return ``target``, first calling ``build(tmp_dir)`` and renaming it there if it is missing.

    If another process finishes the same ``target`` first, its copy wins and ours is discarded
    (both are built from the same inputs, so they are interchangeable).
    """
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        build(tmp)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            # Lost a race with a concurrent builder: keep theirs.
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def replace_dir_atomic(target: Path, write: Callable[[Path], None]) -> Path:
    """Write a new ``target`` directory with ``write(tmp_dir)``, then swap it in for any old copy.

    Unlike ``build_atomic`` this always rewrites (a newer model replaces the older one). If
    ``write`` fails, the old copy stays untouched and the temporary directory is removed; the old
    copy is deleted only after the new one has its final name.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    old = None
    try:
        write(tmp)
        if target.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old / target.name)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            if not target.exists() and (old / target.name).exists():  # the swap failed: put it back
                os.replace(old / target.name, target)
            shutil.rmtree(old, ignore_errors=True)
    return target
