"""Importing a user's module named in a config (a leaf: imports nothing of gigpo)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType


def import_ref(ref: str, key: str) -> ModuleType:
    """Import ``ref``: a dotted module name (importable from ``sys.path``) or a path to a ``.py``
    file or a package directory, whose parent directory is put first on ``sys.path`` (worker
    processes inherit it), so a plug-in in a local directory needs no packaging. Errors are
    ``ValueError``s that start with the config ``key``."""
    if not isinstance(ref, str) or not ref:
        raise ValueError(f"{key} must be a module name or a path, got {ref!r}")
    name = ref
    if "/" in ref or "\\" in ref or ref.endswith(".py"):
        path = Path(ref).expanduser().resolve()
        if not path.exists():
            raise ValueError(
                f"{key}: {ref!r} does not exist (give a .py file, a package directory, or a dotted module name)"
            )
        name = path.stem if path.suffix == ".py" else path.name
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
    try:
        return importlib.import_module(name)
    except Exception as e:  # noqa: BLE001 -- any import failure gets the same actionable message
        raise ValueError(
            f"{key}: cannot import {name!r} ({type(e).__name__}: {e}); put its directory on PYTHONPATH or give its path"
        ) from e
