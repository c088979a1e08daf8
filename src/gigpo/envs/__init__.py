"""Multi-turn text environments: the protocol, task sets, the grouped manager, and the families.

Families register here by name; each module is imported only when used, so a user without the
``alfworld`` extra can still run WebShop and search.

Each family module exposes:
    ``make_env(**kwargs) -> TextEnv``
    ``make_tasks(split, n=None, seed=0, **kwargs) -> list[Task]``  (``n=None``: the whole split)
"""

from __future__ import annotations

import importlib
from typing import Any

from gigpo.envs.base import SPLITS, Task, TextEnv

FAMILIES: dict[str, str] = {
    "alfworld": "gigpo.envs.alfworld",
    "webshop": "gigpo.envs.webshop",
    "search": "gigpo.envs.search",
    "sokoban": "gigpo.envs.sokoban",
}


def family_module(family: str):
    """Import and return the module implementing ``family``."""
    if family not in FAMILIES:
        import difflib

        close = difflib.get_close_matches(family, FAMILIES, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown env family {family!r}; known: {sorted(FAMILIES)}.{hint}")
    return importlib.import_module(FAMILIES[family])


def make_env(family: str, **kwargs: Any) -> TextEnv:
    """Build one environment of ``family`` (kwargs are the family's env options)."""
    return family_module(family).make_env(**kwargs)


def make_tasks(family: str, split: str, n: int | None = None, seed: int = 0, **kwargs: Any) -> list[Task]:
    """Tasks of ``family`` for ``split`` (``train``/``eval``), deterministic in ``seed``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return family_module(family).make_tasks(split, n=n, seed=seed, **kwargs)


__all__ = ["FAMILIES", "SPLITS", "Task", "TextEnv", "family_module", "make_env", "make_tasks"]
