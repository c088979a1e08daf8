"""Offline generator of ALFRED-style PDDL games for the real ALFWorld TextWorld engine.

A game is what ALFWorld's own ``json_2.1.1/<split>/<task>/<trial>/`` directories hold:
``game.tw-pddl`` (JSON: ``pddl_domain``, ``grammar`` with the goal sentence filled in,
``pddl_problem``, ``solvable``) and ``traj_data.json`` (``task_type``, ``pddl_params``), which
the handcoded expert reads. Everything comes from the installed ``alfworld`` package:
rooms from the receptacle lists of ALFRED's FloorPlan scenes (``alfworld/gen/layouts``), what can
hold what and which objects are heatable/coolable/cleanable from ``alfworld/gen/constants.py``,
goals and goal sentences from ``alfworld/gen/goal_library.py``. No THOR simulator is involved:
locations are abstract, one per receptacle (as in the official problems, where the agent walks
between receptacle locations).

A task is fully described by a :class:`GameSpec`; :func:`build_game` is a pure function of it
(its RNG is seeded from the spec's id), so the same spec always yields the byte-identical game.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import alfworld
import alfworld.gen.constants as C
import alfworld.gen.goal_library as glib

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

ALFWORLD_DIR = Path(alfworld.__file__).parent
LAYOUT_DIR = ALFWORLD_DIR / "gen" / "layouts"
DOMAIN_PATH = ALFWORLD_DIR / "data" / "alfred.pddl"
GRAMMAR_PATH = ALFWORLD_DIR / "data" / "alfred.twl2"

# ALFRED scene numbering: 1-30 kitchens, 201-230 living rooms, 301-330 bedrooms, 401-430 bathrooms.
ROOM_OF_HUNDREDS = {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}

LAMPS = ("DeskLamp", "FloorLamp")
# Static (non-movable) receptacle types; movable ones (bowls, mugs, ...) are objects here, as in
# the official TextWorld problems, where they are `isReceptacleObject` objects.
STATIC_RECEPTACLES = sorted((set(C.RECEPTACLES) | {"SinkBasin", "BathtubBasin"}) - C.MOVABLE_RECEPTACLES_SET)
CAN_CONTAIN = {r: set(objs) for r, objs in C.VAL_RECEPTACLE_OBJECTS.items()}
# Objects the agent can pick up: anything some static receptacle can hold (no slices, no lamps).
PICKUPABLE = sorted(
    {o for r in STATIC_RECEPTACLES for o in CAN_CONTAIN.get(r, ())}
    - set(LAMPS)
    - {o for o in C.OBJECTS_WSLICED if o.endswith("Sliced")}
)
# Where lamps stand (ToggleObject needs the lamp `inReceptacle` of a receptacle at the agent's place).
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable", "DiningTable")
# Copies of one non-openable receptacle type per room (openable ones come from the layout).
MAX_COPIES = {"CounterTop": 2, "Shelf": 3, "SideTable": 2, "StoveBurner": 4, "Cabinet": 6, "Drawer": 6}
MAX_RECEPTACLES = 16
MAX_DISTRACTORS = 20


@dataclass(frozen=True)
class GameSpec:
    """What a generated game is made of; JSON-serialisable (stored in ``Task.data``).

    Attributes:
        scene: ALFRED FloorPlan number (room type from its hundreds digit).
        task_type: one of :data:`TASK_TYPES`.
        obj: target object type (ALFRED class name, e.g. ``Apple``).
        recep: target receptacle type (``Fridge``); for ``look_at_obj_in_light`` the lamp type.
        variant: layout variant; different variants place objects differently.
        max_receptacles: room size cap (the task's own receptacles are always placed).
        max_distractors: upper bound on distractor objects (drawn from [min(8, d), d]).
    Smaller rooms (fewer receptacles and distractors) make short CPU runs learnable; the defaults
    are the ALFWorld-like sizes.
    """

    scene: int
    task_type: str
    obj: str
    recep: str
    variant: int = 0
    max_receptacles: int = MAX_RECEPTACLES
    max_distractors: int = MAX_DISTRACTORS

    def __post_init__(self) -> None:
        if self.max_receptacles < 1 or self.max_distractors < 0:
            raise ValueError(
                f"GameSpec: max_receptacles must be >= 1 and max_distractors >= 0, got "
                f"{self.max_receptacles} and {self.max_distractors}"
            )

    @property
    def task_id(self) -> str:
        # Mirrors the official directory names, e.g. pick_two_obj_and_place-Pen-None-Dresser-327.
        tid = f"{self.task_type}-{self.obj}-None-{self.recep}-{self.scene}-v{self.variant}"
        if (self.max_receptacles, self.max_distractors) != (MAX_RECEPTACLES, MAX_DISTRACTORS):
            tid += f"-r{self.max_receptacles}d{self.max_distractors}"
        return tid

    @property
    def combo(self) -> tuple[str, str, str]:
        """(task type, object, receptacle): the unit that train and eval never share."""
        return (self.task_type, self.obj, self.recep)


def room_type(scene: int) -> str:
    return ROOM_OF_HUNDREDS[scene // 100]


@functools.lru_cache(maxsize=None)
def scene_catalog() -> dict[int, dict]:
    """Per FloorPlan: room type, static receptacle types, openable instance counts, object types."""
    out = {}
    for path in sorted(LAYOUT_DIR.glob("FloorPlan*-objects.json")):
        scene = int(path.name[len("FloorPlan") :].split("-")[0])
        types = set(json.loads(path.read_text()))
        openable_path = LAYOUT_DIR / f"FloorPlan{scene}-openable.json"
        openable = json.loads(openable_path.read_text()) if openable_path.exists() else {}
        n_open: dict[str, int] = {}
        for key in openable:
            n_open[key.split("|")[0]] = n_open.get(key.split("|")[0], 0) + 1
        receps = sorted(t for t in types if t in STATIC_RECEPTACLES)
        out[scene] = {
            "room": room_type(scene),
            "receptacles": receps,
            "n_openable": n_open,
            "objects": sorted(t for t in types if t in PICKUPABLE),
            "lamps": sorted(t for t in types if t in LAMPS),
        }
    return out


def _holders(obj: str, receps) -> list[str]:
    return [r for r in receps if obj in CAN_CONTAIN.get(r, ())]


def scene_combos(scene: int) -> list[tuple[str, str, str]]:
    """All (task type, obj, recep) goals that are valid and solvable in ``scene`` (sorted)."""
    info = scene_catalog()[scene]
    receps, objs, room = info["receptacles"], info["objects"], info["room"]
    combos = []
    for tt in TASK_TYPES:
        if room not in C.GOALS_VALID[tt]:
            continue
        if tt == "look_at_obj_in_light":
            holders = [r for r in receps if r in LAMP_HOLDERS]
            if not holders:
                continue
            for lamp in info["lamps"]:
                for o in objs:
                    if _holders(o, receps):
                        combos.append((tt, o, lamp))
            continue
        tool = {
            "pick_clean_then_place_in_recep": ("SinkBasin", "Cleanable"),
            "pick_heat_then_place_in_recep": ("Microwave", "Heatable"),
            "pick_cool_then_place_in_recep": ("Fridge", "Coolable"),
        }.get(tt)
        for o in objs:
            if tool and (tool[0] not in receps or o not in C.VAL_ACTION_OBJECTS[tool[1]]):
                continue
            for r in _holders(o, receps):
                # The object must start somewhere other than a target receptacle.
                if tool and r == tool[0] or len(_holders(o, receps)) < 2:
                    continue
                combos.append((tt, o, r))
    return combos


def _coord(rng: random.Random) -> str:
    def one():
        v = rng.uniform(-3, 3)
        s = f"{abs(v):05.2f}".replace(".", "_dot_")
        return ("_plus_" if v >= 0 else "_minus_") + s

    return "_bar_".join([""] + [one() for _ in range(3)])


def _recep_id(rtype: str, rng: random.Random) -> str:
    # ALFRED ids basins as "Sink|x|y|z|SinkBasin"; ALFWorld's Demangler relies on that to name
    # them "sinkbasin 1" (it appends "basin" to the part before the first "|").
    if rtype.endswith("Basin"):
        return f"{rtype[:-5]}{_coord(rng)}_bar_{rtype}"
    return f"{rtype}{_coord(rng)}"


def _loc(rng: random.Random, used: set) -> str:
    while True:
        x, z, rot, hor = rng.randint(-12, 12), rng.randint(-12, 12), rng.randint(0, 3), rng.choice((0, 15, 30, 45, 60))
        name = "loc" + "".join("_bar_" + (f"_minus_{-v}" if v < 0 else str(v)) for v in (x, z, rot, hor))
        if name not in used:
            used.add(name)
            return name


def _task_sentence(spec: GameSpec, rng: random.Random) -> str:
    # As alfworld.agents.utils.misc.get_templated_task_desc: a random template, lower-cased names.
    template = rng.choice(glib.gdict[spec.task_type]["templates"])
    return template.format(obj=spec.obj.lower(), recep=spec.recep.lower(), toggle=spec.recep.lower(), mrecep="")


def _goal_pddl(spec: GameSpec) -> str:
    goal = glib.gdict[spec.task_type]["pddl"]
    goal = goal.format(obj=spec.obj, recep=spec.recep, toggle=spec.recep, mrecep="")
    return goal.replace("#", "-")  # goal_library writes '#' for PDDL's '-' (see PlannedGameState)


def build_layout(spec: GameSpec) -> dict:
    """Receptacle instances and object placements for ``spec`` (deterministic in its id).

    Returns ``{"receptacles": [(id, type, location)], "objects": [(id, type, recep_id)],
    "agent_loc": str}``.
    """
    info = scene_catalog()[spec.scene]
    rng = random.Random(int(hashlib.sha256(spec.task_id.encode()).hexdigest()[:16], 16))
    # Receptacles: always the task's tools and target, then others until MAX_RECEPTACLES.
    needed = {spec.recep} if spec.task_type != "look_at_obj_in_light" else set()
    needed |= {
        "pick_clean_then_place_in_recep": {"SinkBasin"},
        "pick_heat_then_place_in_recep": {"Microwave"},
        "pick_cool_then_place_in_recep": {"Fridge"},
    }.get(spec.task_type, set())
    first = set(needed)
    if spec.max_receptacles < MAX_RECEPTACLES:
        # A small room must still hold the target somewhere it may start (and a lamp holder).
        rtypes = sorted(info["receptacles"])
        first |= set([t for t in rtypes if spec.obj in CAN_CONTAIN.get(t, ()) and t not in needed][:1])
        if spec.task_type == "look_at_obj_in_light":
            first |= set([t for t in rtypes if t in LAMP_HOLDERS][:1])
    types = sorted(info["receptacles"], key=lambda t: (t not in first, rng.random()))
    receps, used_locs = [], set()
    for t in types:
        n = info["n_openable"].get(t, 1)
        n = min(n, MAX_COPIES.get(t, 1))
        n = rng.randint(1, n) if n > 1 else 1
        room_left = spec.max_receptacles - len(receps)
        if room_left <= 0 and t not in first:
            continue
        for _ in range(max(1, min(n, room_left))):
            receps.append((_recep_id(t, rng), t, _loc(rng, used_locs)))
    recep_types = {t for _, t, _ in receps}
    by_type: dict[str, list[str]] = {}
    for rid, t, _ in receps:
        by_type.setdefault(t, []).append(rid)

    objects = []

    def place(otype: str, forbidden: set[str]):
        options = [rid for rid, t, _ in receps if otype in CAN_CONTAIN.get(t, ()) and t not in forbidden]
        if otype == spec.obj and spec.task_type == "pick_two_obj_and_place":
            # ALFWorld's handcoded expert never opens a receptacle to look for the second object
            # once it has seen the class elsewhere; keep targets in open view so it can finish.
            options = [rid for rid in options if rid.split("_bar_")[0] not in C.OPENABLE_CLASS_SET] or options
        if not options:
            return False
        objects.append((f"{otype}{_coord(rng)}", otype, rng.choice(options)))
        return True

    # Target objects never start in a target (or tool) receptacle, so the goal starts unmet.
    forbidden = needed | ({spec.recep} if spec.task_type != "look_at_obj_in_light" else set())
    n_target = rng.randint(2, 3) if spec.task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
    for _ in range(n_target):
        assert place(spec.obj, forbidden), f"cannot place {spec.obj} in scene {spec.scene}: {spec}"
    if spec.task_type == "look_at_obj_in_light":
        holders = [rid for rid, t, _ in receps if t in LAMP_HOLDERS]
        objects.append((f"{spec.recep}{_coord(rng)}", spec.recep, rng.choice(holders)))
    distractors = [o for o in info["objects"] if o != spec.obj and _holders(o, recep_types)]
    # Objects of the target type in the target receptacle would make the goal true at start.
    for _ in range(rng.randint(min(8, spec.max_distractors), spec.max_distractors)):
        if distractors:
            place(rng.choice(distractors), set())
    return {"receptacles": receps, "objects": objects, "agent_loc": _loc(rng, used_locs)}


def build_problem(spec: GameSpec, layout: dict) -> str:
    """The PDDL problem text in the official game files' layout (see module docstring)."""
    receps, objects = layout["receptacles"], layout["objects"]
    # Only the types present (the official files list all ~110): grounding in Fast Downward
    # scales with the object count, and absent types can match nothing anyway.
    otypes = sorted({t for _, t, _ in objects})
    lines = [
        "(define (problem plan_gigpo_%s)" % spec.task_id.replace("-", "_"),
        "(:domain alfred)",
        "(:objects",
        "agent1 - agent",
    ]
    lines += [f"        {t}Type - otype" for t in otypes]
    lines += [f"        {t}Type - rtype" for t in sorted({t for _, t, _ in receps})]
    lines += [f"        {oid} - object" for oid, _, _ in objects]
    lines += [f"        {rid} - receptacle" for rid, _, _ in receps]
    locs = sorted({loc for _, _, loc in receps} | {layout["agent_loc"]})
    lines += [f"        {loc} - location" for loc in locs] + ["        )", "(:init"]
    loc_of = {rid: loc for rid, _, loc in receps}
    type_of = {rid: t for rid, t, _ in receps}
    init = [f"(receptacleType {rid} {t}Type)" for rid, t, _ in receps]
    init += [f"(objectType {oid} {t}Type)" for oid, t, _ in objects]
    present = {t for _, t, _ in objects}
    for rt in sorted({t for _, t, _ in receps}):
        init += [f"(canContain {rt}Type {ot}Type)" for ot in sorted(CAN_CONTAIN.get(rt, set()) & present)]
    for oid, t, rid in objects:
        if t not in LAMPS:
            init.append(f"(pickupable {oid})")
        if t in C.MOVABLE_RECEPTACLES_SET:
            init.append(f"(isReceptacleObject {oid})")
        for flag, group in (
            ("cleanable", "Cleanable"),
            ("heatable", "Heatable"),
            ("coolable", "Coolable"),
            ("toggleable", "Toggleable"),
        ):
            if t in C.VAL_ACTION_OBJECTS[group]:
                init.append(f"({flag} {oid})")
        init.append(f"(inReceptacle {oid} {rid})")
        init.append(f"(objectAtLocation {oid} {loc_of[rid]})")
    init += [f"(openable {rid})" for rid, t, _ in receps if t in C.OPENABLE_CLASS_SET]
    init += [f"(receptacleAtLocation {rid} {loc})" for rid, _, loc in receps]
    init.append(f"(atLocation agent1 {layout['agent_loc']})")
    del type_of
    lines += [f"        {f}" for f in init] + ["        )", _goal_pddl(spec)]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=1)
def _domain_and_grammar() -> tuple[str, str]:
    return DOMAIN_PATH.read_text(), GRAMMAR_PATH.read_text()


def build_game(spec: GameSpec) -> tuple[dict, dict]:
    """(game.tw-pddl JSON, traj_data.json JSON) for ``spec``; pure function of the spec."""
    if spec.task_type not in TASK_TYPES:
        raise ValueError(f"task_type {spec.task_type!r} is not one of {TASK_TYPES}")
    if spec.scene not in scene_catalog():
        raise ValueError(f"scene {spec.scene} has no layout in {LAYOUT_DIR}")
    layout = build_layout(spec)
    rng = random.Random(spec.task_id)
    domain, grammar = _domain_and_grammar()
    game = {
        "pddl_domain": domain,
        "grammar": grammar.replace("UNKNOWN GOAL", _task_sentence(spec, rng)),
        "pddl_problem": build_problem(spec, layout),
        "solvable": True,
    }
    is_look = spec.task_type == "look_at_obj_in_light"
    traj = {
        "task_type": spec.task_type,
        "task_id": spec.task_id,
        "scene": {"floor_plan": f"FloorPlan{spec.scene}", "scene_num": spec.scene},
        "pddl_params": {
            "object_target": spec.obj,
            "parent_target": "" if is_look else spec.recep,
            "toggle_target": spec.recep if is_look else "",
            "mrecep_target": "",
            "object_sliced": False,
        },
        "gigpo_spec": asdict(spec),
    }
    return game, traj


def write_game(spec: GameSpec, game_dir: str | os.PathLike) -> Path:
    """Write ``spec``'s game into ``game_dir`` (atomically); returns the ``game.tw-pddl`` path."""
    game_dir = Path(game_dir)
    game_file = game_dir / "game.tw-pddl"
    if game_file.exists() and (game_dir / "traj_data.json").exists():
        return game_file
    game, traj = build_game(spec)
    game_dir.mkdir(parents=True, exist_ok=True)
    for name, payload in (("traj_data.json", traj), ("game.tw-pddl", game)):
        tmp = game_dir / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(payload))
        os.replace(tmp, game_dir / name)
    return game_file
