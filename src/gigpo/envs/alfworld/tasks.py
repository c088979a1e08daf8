"""ALFWorld task sets: generated train/eval splits, and the official game directories.

Generated splits (the default): every (task type, object, receptacle) goal that is valid in an
ALFRED FloorPlan scene is a *combo*; a fixed hash puts ~1 in 8 combos in ``eval`` and the rest in
``train``, so eval goals are never seen in training (in any room). Each (combo, scene) pair gives
``variants`` layouts. The split's content is fixed; ``seed`` only shuffles its order.
``eval_split`` picks what ``eval`` holds out, in the spirit of ALFWorld's two validation sets:
``valid_unseen`` (default) the held-out goals above; ``valid_seen`` new games of the training
goals in their training scenes (layout variants from ``SEEN_VARIANT_OFFSET`` on, which no
training game uses): generalising there needs no reading of goals never trained on.

Official data (``data_dir=`` or ``$ALFWORLD_DATA``, as ALFWorld's own tools): games under
``json_2.1.1/<split>/<task>/<trial>/game.tw-pddl``; ``train`` reads ``train``, ``eval`` reads
``valid_unseen`` (or ``eval_split=``). Like ``AlfredTWEnv.collect_game_files`` we skip
``movable``/``Sliced`` tasks, games without ``traj_data.json`` and games not marked solvable.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Sequence

from gigpo.envs.alfworld.generator import TASK_TYPES, GameSpec, scene_catalog, scene_combos
from gigpo.envs.base import SPLITS, Task

EVAL_ONE_IN = 8  # fraction of goal combos held out for eval
OFFICIAL_SPLITS = ("train", "valid_seen", "valid_unseen")
EVAL_SPLITS = ("valid_seen", "valid_unseen")  # what ``eval`` holds out (see the module docstring)
SEEN_VARIANT_OFFSET = 1000  # generated valid_seen games: layout variants from here on


def is_eval_combo(combo: tuple[str, str, str]) -> bool:
    """Fixed, seed-independent assignment of a goal combo to eval (stable across versions)."""
    return int(hashlib.sha256("|".join(combo).encode()).hexdigest(), 16) % EVAL_ONE_IN == 0


@functools.lru_cache(maxsize=8)
def generated_specs(split: str, variants: int = 1) -> tuple[GameSpec, ...]:
    """All generated game specs of ``split`` in canonical order (scene, combo, variant)."""
    want_eval = split == "eval"
    out = []
    for scene in sorted(scene_catalog()):
        for combo in scene_combos(scene):
            if is_eval_combo(combo) == want_eval:
                out.extend(GameSpec(scene, *combo, variant=v) for v in range(variants))
    return tuple(out)


def _check_types(task_types: Sequence[str] | None) -> tuple[str, ...]:
    if task_types is None:
        return TASK_TYPES
    bad = [t for t in task_types if t not in TASK_TYPES]
    if bad or not task_types:
        raise ValueError(f"task_types {list(task_types)!r}: unknown {bad}; choose from {list(TASK_TYPES)}")
    return tuple(task_types)


def _select(items: list, types: Sequence[str], type_of, n, seed, weights, what: str) -> list:
    """Shuffle ``items`` with ``seed``; with ``weights``, interleave types in those proportions."""
    rng = random.Random(seed)
    items = list(items)
    rng.shuffle(items)
    if weights is not None:
        if len(weights) != len(types) or any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(
                f"task_weights must be {len(types)} non-negative numbers (one per task type "
                f"{list(types)}), got {weights!r}"
            )
        pools = {t: [x for x in items if type_of(x) == t] for t in types}
        total = n if n is not None else sum(len(p) for p in pools.values())
        picked = []
        w = [float(x) for x in weights]
        while len(picked) < total and any(pools[t] and w[i] > 0 for i, t in enumerate(types)):
            live = [i for i, t in enumerate(types) if pools[t] and w[i] > 0]
            i = rng.choices(live, weights=[w[j] for j in live])[0]
            picked.append(pools[types[i]].pop())
        items = picked
    if n is not None:
        if n < 0:
            raise ValueError(f"n must be >= 0 or None, got {n}")
        if n > len(items):
            raise ValueError(
                f"asked for n={n} {what} tasks but the split has only {len(items)}; "
                f"lower n, widen task_types, or raise variants"
            )
        items = items[:n]
    return items


def generated_tasks(
    split: str,
    n: int | None = None,
    seed: int = 0,
    task_types=None,
    task_weights=None,
    variants: int = 1,
    max_receptacles: int | None = None,
    max_distractors: int | None = None,
    eval_split: str = "valid_unseen",
) -> list[Task]:
    from dataclasses import asdict, replace

    if eval_split not in EVAL_SPLITS:
        raise ValueError(f"eval_split must be one of {EVAL_SPLITS} for generated ALFWorld tasks, got {eval_split!r}")
    types = _check_types(task_types)
    seen = split == "eval" and eval_split == "valid_seen"
    specs = [s for s in generated_specs("train" if seen else split, variants) if s.task_type in types]
    if seen:
        specs = [replace(s, variant=s.variant + SEEN_VARIANT_OFFSET) for s in specs]
    specs = _select(specs, types, lambda s: s.task_type, n, seed, task_weights, f"generated {split}")
    size = {
        k: v for k, v in (("max_receptacles", max_receptacles), ("max_distractors", max_distractors)) if v is not None
    }
    if size:
        specs = [replace(s, **size) for s in specs]

    return [
        Task(family="alfworld", task_id=s.task_id, split=split, task_type=s.task_type, data={"spec": asdict(s)})
        for s in specs
    ]


def official_root(data_dir: str | os.PathLike) -> Path:
    root = Path(os.path.expandvars(os.path.expanduser(str(data_dir))))
    for cand in (root / "json_2.1.1", root):
        if any((cand / s).is_dir() for s in OFFICIAL_SPLITS):
            return cand
    raise FileNotFoundError(
        f"no ALFWorld games under {root}: expected {root}/json_2.1.1/{{train,valid_seen,"
        f"valid_unseen}}/<task>/<trial>/game.tw-pddl (run alfworld-download there)"
    )


def _has_official_games(data_dir: str) -> bool:
    if not data_dir:
        return False
    try:
        official_root(data_dir)
        return True
    except FileNotFoundError:
        return False


def official_tasks(
    split: str, data_dir, n=None, seed=0, task_types=None, task_weights=None, eval_split: str = "valid_unseen"
) -> list[Task]:
    if eval_split not in OFFICIAL_SPLITS:
        raise ValueError(f"eval_split must be one of {OFFICIAL_SPLITS}, got {eval_split!r}")
    types = _check_types(task_types)
    base = official_root(data_dir) / ("train" if split == "train" else eval_split)
    found = []
    for traj_path in sorted(base.glob("*/*/traj_data.json")):
        game = traj_path.parent / "game.tw-pddl"
        if "movable" in str(traj_path.parent) or "Sliced" in str(traj_path.parent) or not game.exists():
            continue
        task_type = json.loads(traj_path.read_text())["task_type"]
        if task_type not in types or not json.loads(game.read_text()).get("solvable", False):
            continue
        rel = traj_path.parent.relative_to(base)
        found.append(
            Task(
                family="alfworld",
                task_id=str(rel),
                split=split,
                task_type=task_type,
                data={"game_file": str(game.resolve())},
            )
        )
    if not found:
        raise FileNotFoundError(f"no solvable games of types {list(types)} under {base}")
    return _select(found, types, lambda t: t.task_type, n, seed, task_weights, f"official {split}")


def make_tasks(
    split: str,
    n: int | None = None,
    seed: int = 0,
    task_types=None,
    data_dir=None,
    task_weights=None,
    variants: int = 1,
    eval_split: str = "valid_unseen",
    max_receptacles: int | None = None,
    max_distractors: int | None = None,
) -> list[Task]:
    """ALFWorld tasks of ``split``; official games when ``data_dir`` or ``$ALFWORLD_DATA`` is set.

    ``eval_split``: which games ``eval`` means, ``valid_unseen`` (default) or ``valid_seen`` (the
    official directories of those names; for generated tasks see the module docstring).

    ``max_receptacles`` / ``max_distractors`` shrink generated rooms (defaults: 16 and 20, ALFWorld-like
    sizes); they do not apply to official games.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if not data_dir and _has_official_games(os.environ.get("ALFWORLD_DATA", "")):
        # The env var is often set (e.g. by alfworld's installer) without the download done;
        # only a directory that really holds games switches to official data.
        data_dir = os.environ["ALFWORLD_DATA"]
    if data_dir:
        return official_tasks(split, data_dir, n, seed, task_types, task_weights, eval_split)
    return generated_tasks(
        split, n, seed, task_types, task_weights, variants, max_receptacles, max_distractors, eval_split
    )
