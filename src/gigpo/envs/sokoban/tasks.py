"""Sokoban task sets: generated rooms, certified by the solver, train and eval disjoint.

Task ``i`` of a split is drawn from ``numpy.random.default_rng([seed, split_code, i, attempt])``,
so it does not depend on ``n`` (``make_tasks(n=10)`` is a prefix of ``make_tasks(n=100)``).
The splits are disjoint by construction: a layout (walls and targets, fixed before reverse play)
belongs to eval when a stable hash of it falls in the eval fifth, else to train; two rooms of
different splits thus differ in walls or targets. A room is redrawn (next ``attempt``) when the
solver finds no plan, when it is already solved, or when it repeats an earlier room of the split.
"""

from __future__ import annotations

import hashlib

import numpy as np

from gigpo.envs.base import SPLITS, Task
from gigpo.envs.sokoban.room import generate_level
from gigpo.envs.sokoban.solver import solve

DEFAULT_SIZES = {"train": 1000, "eval": 200}
EVAL_FRACTION = 5  # one layout in five belongs to eval
_SPLIT_CODE = {"train": 0, "eval": 1}
_MAX_ATTEMPTS = 1000


def layout_split(floor: frozenset[int], targets, width: int) -> str:
    """The split a layout (floor cells and target cells) belongs to: a stable hash, not Python's."""
    key = f"{width}|{','.join(map(str, sorted(floor)))}|{','.join(map(str, sorted(targets)))}"
    h = int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")
    return "eval" if h % EVAL_FRACTION == 0 else "train"


def _int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _dims(dim) -> tuple[int, int]:
    """``dim`` as (height, width); ``ValueError`` unless it is one int or two, each at least 3."""
    hw = (dim, dim) if _int(dim) else tuple(dim) if isinstance(dim, (list, tuple)) else ()
    if len(hw) != 2 or not all(_int(x) for x in hw):
        raise ValueError(f"sokoban dim must be an int or [height, width] (border included, e.g. 6), got {dim!r}")
    h, w = int(hw[0]), int(hw[1])
    if h < 3 or w < 3:
        raise ValueError(f"sokoban dim must be at least 3x3 (a walled border around floor), got {dim!r}")
    return (h, w)


def _check_options(h: int, w: int, num_boxes, search_depth, num_gen_steps, solver_max_nodes) -> None:
    """``ValueError`` naming the option a room of ``h`` x ``w`` cannot be generated with."""
    inner = (h - 2) * (w - 2)  # floor cells at most: the border is wall
    if not _int(num_boxes) or not 1 <= num_boxes <= inner - 1:
        raise ValueError(
            f"sokoban num_boxes must be an int from 1 to {inner - 1} in a {h}x{w} room ({inner} floor cells "
            f"at most, one is the player's), got {num_boxes!r}"
        )
    for name, v in (("search_depth", search_depth), ("solver_max_nodes", solver_max_nodes)):
        if not _int(v) or v < 1:
            raise ValueError(f"sokoban {name} must be an int >= 1, got {v!r}")
    if num_gen_steps is not None and (not _int(num_gen_steps) or num_gen_steps < 1):
        raise ValueError(f"sokoban num_gen_steps must be an int >= 1 or null (the default), got {num_gen_steps!r}")


def make_tasks(
    split: str,
    n: int | None = None,
    seed: int = 0,
    dim: int | tuple[int, int] = 6,
    num_boxes: int = 1,
    search_depth: int = 300,
    num_gen_steps: int | None = None,
    solver_max_nodes: int = 1_000_000,
) -> list[Task]:
    """``n`` generated rooms of ``split`` (default 1000 train / 200 eval), deterministic in ``seed``.

    Args:
        dim: room size, border included: ``6`` (6x6) or ``(height, width)``.
        num_boxes: boxes per room (1; 2 is much harder, about twice the optimal steps).
        search_depth: the reverse play's depth (``room.generate_level``).
        num_gen_steps: the topology walk's steps (default ``1.7 * (h + w)``, as gym-sokoban).
        solver_max_nodes: the certifying BFS's node cap.

    ``Task.data``: ``room`` (the grid as row strings), ``optimal_steps``, ``seed``, ``dim``,
    ``num_boxes``. ``task_type``: e.g. ``"6x6-1box"``.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    n = DEFAULT_SIZES[split] if n is None else n
    if n < 0:
        raise ValueError(f"n must be >= 0 (or None for the default {DEFAULT_SIZES[split]}), got {n}")
    h, w = _dims(dim)
    _check_options(h, w, num_boxes, search_depth, num_gen_steps, solver_max_nodes)
    task_type = f"{h}x{w}-{num_boxes}box"
    accept = lambda floor, targets: layout_split(floor, targets, w) == split  # noqa: E731
    tasks, seen = [], set()
    for i in range(n):
        for attempt in range(_MAX_ATTEMPTS):
            rng = np.random.default_rng([seed, _SPLIT_CODE[split], i, attempt])
            try:
                level = generate_level(rng, (h, w), num_boxes, search_depth, num_gen_steps, accept_layout=accept)
            except RuntimeError as e:  # no layout fits these options: theirs to change
                raise ValueError(f"sokoban task options dim={dim!r}, num_boxes={num_boxes}: {e}") from None
            grid = level.render()
            if grid in seen or level.boxes == level.targets:
                continue
            plan = solve(level, max_nodes=solver_max_nodes)
            if not plan:  # None: unsolvable; []: already solved
                continue
            break
        else:
            raise ValueError(
                f"no new solvable {task_type} room for {split} task {i} after {_MAX_ATTEMPTS} "
                f"attempts; the split may be exhausted: ask for fewer tasks or a larger dim"
            )
        seen.add(grid)
        tasks.append(
            Task(
                "sokoban",
                f"{split}:{task_type}:{seed}:{i}",
                split,
                task_type,
                {
                    "room": grid.split("\n"),
                    "optimal_steps": len(plan),
                    "seed": seed,
                    "dim": [h, w],
                    "num_boxes": num_boxes,
                },
            )
        )
    return tasks
