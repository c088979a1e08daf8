"""Multi-turn text environments: the protocol, task sets, the grouped manager, and the families.

Each family is described by a ``FamilySpec`` in the registry of ``gigpo.envs.spec``: the built-ins,
registered below by one explicit call each, then entry points and ``register_family``. A family's
module is imported only when used, so a user without the ``alfworld`` extra can still run WebShop
and search.

Each family module exposes:
    ``make_env(**kwargs) -> TextEnv``
    ``make_tasks(split, n=None, seed=0, **kwargs) -> list[Task]``  (``n=None``: the whole split)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator

from gigpo.envs import builtin as _builtin
from gigpo.envs.base import SPLITS, Task, TextEnv
from gigpo.envs.spec import (
    FamilySpec,
    broken_plugins,
    builtin_families,
    families,
    family_origin,
    get_family,
    is_builtin,
    load_family_module,
    register_builtin,
    register_family,
)

# The built-in families, in the order ``families()`` lists them (and the ``tiny`` corpus reads them).
register_builtin(_builtin.ALFWORLD)
register_builtin(_builtin.WEBSHOP)
register_builtin(_builtin.SEARCH)
register_builtin(_builtin.SOKOBAN)


class _FamilyModules(Mapping):
    """Read-only ``name -> module path`` view of the family registry."""

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str):
            raise KeyError(name)
        try:
            return get_family(name).module
        except ValueError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter(families())

    def __len__(self) -> int:
        return len(families())

    def __repr__(self) -> str:
        return repr(dict(self.items()))


FAMILIES: Mapping[str, str] = _FamilyModules()


def family_module(family: str):
    """Import and return the module implementing ``family``."""
    return get_family(family).load()


def make_env(family: str, **kwargs: Any) -> TextEnv:
    """Build one environment of ``family`` (kwargs are the family's env options, over the spec's
    ``env_kwargs`` defaults)."""
    spec = get_family(family)
    return spec.load().make_env(**{**spec.env_kwargs, **kwargs})


def make_env_from_module(module: str, **kwargs: Any) -> TextEnv:
    """``make_env`` by module path: a worker process may not have the family registered."""
    import importlib

    return importlib.import_module(module).make_env(**kwargs)


def make_tasks(family: str, split: str, n: int | None = None, seed: int = 0, **kwargs: Any) -> list[Task]:
    """Tasks of ``family`` for ``split`` (``train``/``eval``), deterministic in ``seed``."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return family_module(family).make_tasks(split, n=n, seed=seed, **kwargs)


__all__ = [
    "FAMILIES",
    "SPLITS",
    "FamilySpec",
    "Task",
    "TextEnv",
    "broken_plugins",
    "builtin_families",
    "families",
    "family_module",
    "family_origin",
    "get_family",
    "is_builtin",
    "load_family_module",
    "make_env",
    "make_tasks",
    "register_family",
]
