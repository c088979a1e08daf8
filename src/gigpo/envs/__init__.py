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

import json
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
    """Tasks of ``family`` for ``split`` (``train``/``eval``), deterministic in ``seed``.

    The family's ``make_tasks`` contract (docs/extending.md#the-module) is checked where that
    costs nothing: a list of ``Task`` of this family and split with distinct ids, at most ``n`` of
    them, and the same first tasks as an earlier call in this process with another ``n`` (not None).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    tasks = family_module(family).make_tasks(split, n=n, seed=seed, **kwargs)
    _check_tasks(family, split, n, tasks)
    _check_prefix(family, split, n, seed, kwargs, tasks)
    return tasks


class FamilyContractError(ValueError):
    """A family's ``make_tasks`` broke its contract (a bug in the family, not in the run's options)."""


def _contract_error(family: str, what: str) -> FamilyContractError:
    return FamilyContractError(f"env family {family!r}: make_tasks {what} (the contract: docs/extending.md#the-module)")


def _check_tasks(family: str, split: str, n: int | None, tasks: Any) -> None:
    call = f"make_tasks({split!r}, n={n})"
    if not isinstance(tasks, list):
        raise _contract_error(family, f"must return a list of Task, {call} returned a {type(tasks).__name__}")
    if n is not None and len(tasks) > n:
        raise _contract_error(family, f"{call} returned {len(tasks)} tasks, more than n")
    bad = next((t for t in tasks if not (isinstance(t, Task) and t.family == family and t.split == split)), None)
    if bad is not None:
        raise _contract_error(family, f"{call} returned {bad!r}, not a Task of family {family!r} and split {split!r}")
    if len({t.task_id for t in tasks}) != len(tasks):
        raise _contract_error(family, f"{call} returned tasks with the same task_id")


# (family, split, seed, kwargs) -> the longest list of task ids made so far in this process
_SEEN: dict[tuple[str, str, int, str], list[str]] = {}


def _check_prefix(family: str, split: str, n: int | None, seed: int, kwargs: dict, tasks: list[Task]) -> None:
    """The first k tasks must not depend on ``n``: train holds out the first ``eval_tasks`` of
    ``eval_tasks + val_tasks`` eval tasks, ``gigpo eval`` makes ``eval_tasks`` of them.
    ``n=None`` (the whole split, in the family's own order) is not compared."""
    if n is None:
        return
    try:
        key = (family, split, seed, json.dumps(kwargs, sort_keys=True, default=repr))
    except (TypeError, ValueError):  # unorderable keys or a value without a stable text: no memo
        return
    ids = [t.task_id for t in tasks]
    seen = _SEEN.get(key)
    k = min(len(ids), len(seen)) if seen is not None else 0
    if seen is not None and ids[:k] != seen[:k]:
        raise _contract_error(
            family,
            f"gave other first tasks for {split!r} with n={n} ({ids[:3]}...) than with n={len(seen)} "
            f"({seen[:3]}...): the first k tasks must not depend on n, or the held-out set changes with "
            "env.val_tasks",
        )
    if seen is None or len(ids) > len(seen):
        _SEEN[key] = ids


def check_family(family: str, n: int = 6, seed: int = 0, **task_kwargs: Any) -> None:
    """Check ``family``'s ``make_tasks`` contract on ``n`` tasks per split (raises ``ValueError``):
    the eval split's first ``n // 2`` tasks are the same for ``n`` and ``n // 2``, each split's
    tasks are distinct, and the two splits share no ``task_id``. For a plug-in's own tests."""
    if n < 2:
        raise ValueError(f"check_family needs n >= 2, got {n}")
    got = {}
    for split in SPLITS:
        mod = family_module(family)
        full = mod.make_tasks(split, n=n, seed=seed, **task_kwargs)
        _check_tasks(family, split, n, full)
        half = mod.make_tasks(split, n=n // 2, seed=seed, **task_kwargs)
        _check_tasks(family, split, n // 2, half)
        if [t.task_id for t in half] != [t.task_id for t in full[: n // 2]]:
            raise _contract_error(
                family,
                f"gave other first tasks for {split!r} with n={n // 2} than with n={n}: the first k tasks "
                "must not depend on n",
            )
        got[split] = {t.task_id for t in full}
    both = got["train"] & got["eval"]
    if both:
        raise _contract_error(family, f"gave task ids in both splits: {sorted(both)[:3]}; the splits must be disjoint")


__all__ = [
    "FAMILIES",
    "FamilyContractError",
    "SPLITS",
    "FamilySpec",
    "Task",
    "TextEnv",
    "broken_plugins",
    "builtin_families",
    "check_family",
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
