"""Sokoban rooms: the text grid, parsing it, and generating rooms by reverse play.

The generator is gym-sokoban's (``gym_sokoban/envs/room_utils.py``, ``generate_room``) rewritten
on ``numpy.random.Generator`` so a room is a pure function of its seed (gym-sokoban draws from the
global ``random`` and ``numpy.random`` state, and pulls in the unmaintained ``gym`` 0.26):

    1. topology: a random walk stamps 3x3 floor masks into a wall-filled grid (border kept walls);
    2. placement: the player and ``num_boxes`` targets on random floor cells, each box on its target;
    3. reverse play: a depth-first search (depth ``search_depth``, at most ``max_states`` states)
       where the player moves or *pulls* a box; the state with the highest score
       ``pulls * sum(Manhattan(box, its target))`` is the room, and a state scores 0 unless every
       target is uncovered (no box on a target, nor the player, as in gym-sokoban).
A pull is the inverse of a push, so the start state is solvable by construction; the solver
certifies it anyway (``tasks.py``).

Cells are indexed ``r * width + c``; a direction is a cell offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

# The text legend (verl-agent / RAGEN's Sokoban text render).
WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = "#", "_", "O", "X", "√", "P", "S"
LEGEND = {
    WALL: "wall",
    FLOOR: "floor",
    TARGET: "target",
    BOX: "box",
    BOX_ON_TARGET: "box on target",
    PLAYER: "player",
    PLAYER_ON_TARGET: "player on target",
}
# A neighbour in ``Level.describe``: what stands there, whether or not on a target.
_NEIGHBOUR = {
    WALL: "wall",
    FLOOR: "floor",
    TARGET: "target",
    BOX: "box",
    BOX_ON_TARGET: "box",
    PLAYER: "player",
    PLAYER_ON_TARGET: "player",
}
ACTIONS = ("up", "down", "left", "right")
GRID_STYLES = ("verl-agent", "compact", "annotated")
_DELTAS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

# gym-sokoban's five floor masks (room_topology_generation).
_MASKS = np.array(
    [
        [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
        [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
        [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
        [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
    ],
    dtype=bool,
)
_WALK_DIRS = ((1, 0), (0, 1), (-1, 0), (0, -1))


@dataclass(frozen=True)
class Level:
    """The fixed part of a room (walls, targets) and its start state (player, boxes).

    ``floor`` holds every non-wall cell (targets included); cells are ``r * width + c``.
    """

    height: int
    width: int
    floor: frozenset[int]
    targets: frozenset[int]
    player: int
    boxes: frozenset[int]

    def delta(self, action: str) -> int:
        dr, dc = _DELTAS[action]
        return dr * self.width + dc

    def render(self, player: int | None = None, boxes: frozenset[int] | None = None, style: str = "compact") -> str:
        """The grid as text rows (``\\n``-joined), for the given state (default: the start).

        ``style``: ``compact`` (one character a cell, ``parse_level``'s format), ``verl-agent``
        (each cell as ``" # \\t"``, verl-agent/RAGEN's text render, ``GRID_LOOKUP``) or
        ``annotated`` (the ``verl-agent`` grid, then ``describe``'s lines).
        """
        if style not in GRID_STYLES:
            raise ValueError(f"grid style must be one of {GRID_STYLES}, got {style!r}")
        player = self.player if player is None else player
        boxes = self.boxes if boxes is None else boxes
        rows = []
        for r in range(self.height):
            row = [self._cell(r * self.width + c, player, boxes) for c in range(self.width)]
            rows.append("".join(f" {ch} \t" for ch in row) if style != "compact" else "".join(row))
        if style == "annotated":
            rows.append(self.describe(player, boxes))
        return "\n".join(rows)

    def _cell(self, i: int, player: int, boxes: frozenset[int]) -> str:
        """The legend symbol of cell ``i`` in the state (player, boxes)."""
        on_target = i in self.targets
        if i not in self.floor:
            return WALL
        if i in boxes:
            return BOX_ON_TARGET if on_target else BOX
        if i == player:
            return PLAYER_ON_TARGET if on_target else PLAYER
        return TARGET if on_target else FLOOR

    def describe(self, player: int, boxes: frozenset[int]) -> str:
        """The state in words: the player's cell and its four neighbours, then each box's cell, its
        offset from the player, its neighbours and the offset of its nearest target.

        The grid asks a model to relate cells a row apart, ~6 x 4 tokens away in the text; these lines
        name the relations a move depends on, so a small model trained from scratch need not learn to
        read them off the grid first. Rows and columns count from 0 at the top left.
        """
        w = self.width

        def cell(i: int) -> str:
            return f"row {i // w} col {i % w}"

        def offset(frm: int, to: int) -> str:
            dr, dc = to // w - frm // w, to % w - frm % w
            v = f"{dr} down" if dr > 0 else f"{-dr} up" if dr < 0 else "same row"
            h = f"{dc} right" if dc > 0 else f"{-dc} left" if dc < 0 else "same column"
            return f"{v}, {h}"

        def around(i: int) -> str:
            return ", ".join(f"{a} {_NEIGHBOUR[self._cell(i + self.delta(a), player, boxes)]}" for a in ACTIONS)

        lines = [f"player: {cell(player)}; {around(player)}"]
        for b in sorted(boxes):
            t = min(self.targets, key=lambda t: (abs(t // w - b // w) + abs(t % w - b % w), t))
            goal = "on a target" if b in self.targets else f"nearest target {offset(b, t)}"
            lines.append(f"box: {cell(b)}, {offset(player, b)} of you; {around(b)}; {goal}")
        return "\n".join(lines)

    def rows(self) -> list[str]:
        return self.render().split("\n")


def parse_level(rows: list[str] | tuple[str, ...] | str) -> Level:
    """A ``Level`` from text rows in the legend (a list of strings, or one ``\\n``-joined string)."""
    if isinstance(rows, str):
        rows = rows.split("\n")
    rows = list(rows)
    if not rows or any(len(r) != len(rows[0]) for r in rows) or not rows[0]:
        raise ValueError(f"a Sokoban room needs equal-length, non-empty rows; got row lengths {[len(r) for r in rows]}")
    height, width = len(rows), len(rows[0])
    floor, targets, boxes, players = set(), set(), set(), []
    for r, row in enumerate(rows):
        for c, ch in enumerate(row):
            i = r * width + c
            if ch not in LEGEND:
                raise ValueError(
                    f"row {r} col {c}: unknown cell {ch!r}; the legend is "
                    + ", ".join(f"{k!r} {v}" for k, v in LEGEND.items())
                )
            if ch == WALL:
                continue
            if r in (0, height - 1) or c in (0, width - 1):
                # The move code never bounds-checks: a walled border keeps every move in the grid.
                raise ValueError(f"row {r} col {c}: the room's border must be walls ({WALL!r}), got {ch!r}")
            floor.add(i)
            if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(i)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.add(i)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                players.append(i)
    if len(players) != 1:
        raise ValueError(
            f"a Sokoban room needs exactly one player ({PLAYER!r} or {PLAYER_ON_TARGET!r}), got {len(players)}"
        )
    if not boxes or len(boxes) != len(targets):
        raise ValueError(
            f"a Sokoban room needs as many targets as boxes (at least one); got "
            f"{len(boxes)} boxes, {len(targets)} targets"
        )
    return Level(height, width, frozenset(floor), frozenset(targets), players[0], frozenset(boxes))


def room_topology(
    rng: np.random.Generator, dim: tuple[int, int], p_change_directions: float = 0.35, num_steps: int = 15
) -> np.ndarray:
    """A boolean floor mask: a random walk of ``num_steps`` stamping gym-sokoban's 3x3 masks."""
    h, w = dim
    direction = _WALK_DIRS[rng.integers(4)]
    pos = [int(rng.integers(1, h)), int(rng.integers(1, w))]
    floor = np.zeros(dim, dtype=bool)
    for _ in range(num_steps):
        if rng.random() < p_change_directions:
            direction = _WALK_DIRS[rng.integers(4)]
        pos = [min(max(pos[0] + direction[0], 1), h - 2), min(max(pos[1] + direction[1], 1), w - 2)]
        floor[pos[0] - 1 : pos[0] + 2, pos[1] - 1 : pos[1] + 2] |= _MASKS[rng.integers(len(_MASKS))]
    floor[[0, h - 1], :] = False
    floor[:, [0, w - 1]] = False
    return floor


def reverse_play(
    floor: frozenset[int],
    targets: tuple[int, ...],
    player: int,
    width: int,
    search_depth: int = 300,
    max_states: int = 300_000,
) -> tuple[int, int, tuple[int, ...]]:
    """gym-sokoban's reverse play from boxes on ``targets``: ``(score, player, boxes)`` of the best state.

    ``boxes[i]`` is the box pulled away from ``targets[i]``. Iterative, in the recursion's order
    (actions 0-3 pull, 4-7 move; up, down, left, right), so deep searches need no recursion limit.
    """
    deltas = (-width, width, -1, 1)
    target_set = set(targets)
    tr = [(t // width, t % width) for t in targets]
    best = (-1, player, targets)
    explored: set[tuple[int, frozenset[int]]] = set()
    stack = [(player, targets, 0, search_depth)]
    while stack and len(explored) < max_states:
        pl, boxes, pulls, ttl = stack.pop()
        ttl -= 1
        if ttl <= 0:
            continue
        key = (pl, frozenset(boxes))
        if key in explored:
            continue
        explored.add(key)
        if pl in target_set or target_set.intersection(boxes):
            score = 0
        else:
            score = pulls * sum(abs(b // width - r) + abs(b % width - c) for b, (r, c) in zip(boxes, tr))
        if score > best[0]:
            best = (score, pl, boxes)
        children = []
        for action in range(8):
            d = deltas[action % 4]
            nxt = pl + d
            if nxt not in floor or nxt in boxes:
                continue  # blocked: the same state, already explored
            behind = pl - d
            if action < 4 and behind in boxes:
                children.append((nxt, tuple(pl if b == behind else b for b in boxes), pulls + 1, ttl))
            else:
                children.append((nxt, boxes, pulls, ttl))
        stack.extend(reversed(children))  # first action on top: explored first, as in the recursion
    return best


def generate_level(
    rng: np.random.Generator,
    dim: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    search_depth: int = 300,
    num_gen_steps: int | None = None,
    p_change_directions: float = 0.35,
    max_tries: int = 100,
    accept_layout: Callable[[frozenset[int], tuple[int, ...]], bool] | None = None,
) -> Level:
    """One room by reverse play (see the module docstring); deterministic in ``rng``'s state.

    Args:
        dim: (height, width), border included.
        num_boxes: boxes (= targets).
        search_depth: the reverse play's depth limit (RAGEN/verl-agent's ``search_depth``).
        num_gen_steps: random-walk steps of the topology (default gym-sokoban's ``1.7 * (h + w)``).
        max_tries: layouts to try before giving up (a layout fails when it has too few floor cells
            or no reverse play moves a box off its target).
        accept_layout: optional ``f(floor, targets) -> bool``; layouts it refuses are redrawn
            before the (costly) reverse play. ``make_tasks`` splits train/eval with it.
    """
    h, w = dim
    if h < 3 or w < 3:
        raise ValueError(f"dim must be at least 3x3 (a walled border around floor), got {dim}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    steps = int(1.7 * (h + w)) if num_gen_steps is None else num_gen_steps
    for _ in range(max_tries):
        mask = room_topology(rng, dim, p_change_directions, steps)
        cells = np.flatnonzero(mask)
        if len(cells) <= num_boxes + 1:
            continue
        picks = rng.choice(len(cells), size=num_boxes + 1, replace=False)
        player, targets = int(cells[picks[0]]), tuple(int(cells[i]) for i in picks[1:])
        floor = frozenset(int(i) for i in cells)
        if accept_layout is not None and not accept_layout(floor, targets):
            continue
        score, pl, boxes = reverse_play(floor, targets, player, w, search_depth)
        if score <= 0:
            continue
        return Level(h, w, floor, frozenset(targets), pl, frozenset(boxes))
    raise RuntimeError(
        f"no {h}x{w} room with {num_boxes} boxes after {max_tries} layouts; "
        "use a larger dim, fewer boxes or more num_gen_steps"
    )
