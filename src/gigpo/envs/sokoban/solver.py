"""An optimal Sokoban solver: breadth-first search over (player cell, box cells).

Every move costs one step (walks and pushes alike, as the env counts them), so BFS gives the
fewest steps. Boxes in a dead corner (``is_corner_deadlock``) are pruned: such a state can never
be solved, so pruning keeps optimality. ``max_nodes`` caps the search so a large room raises
``SolverError`` instead of hanging.
"""

from __future__ import annotations

from collections import deque

from gigpo.envs.sokoban.room import ACTIONS, Level


class SolverError(RuntimeError):
    """The search hit its node cap before finding a plan or proving there is none."""


def is_corner_deadlock(level: Level, boxes: frozenset[int]) -> bool:
    """Some box off a target has a wall on two orthogonal sides (up or down, and left or right).

    Such a box can never move again (every push needs the player on a wall cell or moves it into
    one), so the room can no longer be solved.
    """
    w, floor = level.width, level.floor
    for b in boxes:
        if b in level.targets:
            continue
        vertical = (b - w) not in floor or (b + w) not in floor
        horizontal = (b - 1) not in floor or (b + 1) not in floor
        if vertical and horizontal:
            return True
    return False


def solve(
    level: Level, player: int | None = None, boxes: frozenset[int] | None = None, max_nodes: int = 1_000_000
) -> list[str] | None:
    """The shortest action list (``up/down/left/right``) solving ``level`` from the given state.

    Returns ``[]`` when already solved and ``None`` when the search proves no solution exists.
    Raises ``SolverError`` after ``max_nodes`` states without either.
    """
    player = level.player if player is None else player
    boxes = level.boxes if boxes is None else frozenset(boxes)
    targets, floor = level.targets, level.floor
    if boxes == targets:
        return []
    moves = [(a, level.delta(a)) for a in ACTIONS]
    start = (player, boxes)
    parent: dict[tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        pl, bx = state
        for action, d in moves:
            nxt = pl + d
            if nxt not in floor:
                continue
            if nxt in bx:
                beyond = nxt + d
                if beyond not in floor or beyond in bx:
                    continue  # a blocked push changes nothing: never on a shortest path
                new_boxes = (bx - {nxt}) | {beyond}
                child = (nxt, new_boxes)
                if child in parent:
                    continue
                if beyond not in targets and is_corner_deadlock(level, frozenset((beyond,))):
                    continue
            else:
                child = (nxt, bx)
                if child in parent:
                    continue
            parent[child] = (state, action)
            if child[1] == targets:
                plan = []
                node = child
                while parent[node] is not None:
                    node, a = parent[node]
                    plan.append(a)
                return plan[::-1]
            if len(parent) >= max_nodes:
                raise SolverError(
                    f"Sokoban solver gave up after {max_nodes} states ({level.height}x{level.width} "
                    f"room, {len(boxes)} boxes); pass a larger max_nodes or use a smaller room"
                )
            queue.append(child)
    return None
