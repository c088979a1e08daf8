"""``SokobanEnv``: one Sokoban room at a time, text grid in, one move out.

Rules and rewards are gym-sokoban's (as used by RAGEN and verl-agent): each step costs 0.1,
pushing a box onto a target gives +1, off a target -1, and the step that puts the last box on
its target gives +10 and ends the episode. A move into a wall, or a push into a wall or another
box, is a valid no-op step (penalised like any step). Any other text is an invalid action: the
state does not change, the observation says so and lists the valid actions, the step costs the
same 0.1 (verl-agent maps it to gym-sokoban's no-op action) and ``info["invalid_action"]`` is True.
"""

from __future__ import annotations

from gigpo.envs.base import Task
from gigpo.envs.sokoban.room import ACTIONS, GRID_STYLES, LEGEND, Level, parse_level
from gigpo.envs.sokoban.solver import is_corner_deadlock, solve

STEP_PENALTY, BOX_ON_TARGET_REWARD, BOX_OFF_TARGET_PENALTY, SOLVED_REWARD = -0.1, 1.0, -1.0, 10.0

INVALID_ACTION_MESSAGE = (
    "Invalid action: the action must be exactly one of " + ", ".join(ACTIONS) + ". The room did not change."
)

INSTRUCTION = (
    "Push every box (X) onto a target (O); you win when all boxes are on targets. "
    "You can only push boxes, not pull them, and only one at a time. Legend: "
    + ", ".join(f"{k} {v}" for k, v in LEGEND.items())
    + ". Actions: "
    + ", ".join(ACTIONS)
    + "."
)


def parse_action(text: str) -> str | None:
    """The move named by ``text`` (case-insensitive, surrounding whitespace ignored), else None."""
    if not isinstance(text, str):
        return None
    a = text.strip()
    if len(a) > 5:
        return None  # no move is longer: no need to lower-case 100 KB of garbage
    a = a.lower()
    return a if a in ACTIONS else None


class SokobanEnv:
    """One Sokoban episode at a time; see ``gigpo.envs.sokoban`` for the observation and ``info``.

    Args:
        grid_style: ``verl-agent`` (default: each cell as ``" # \\t"``, verl-agent's text render;
            spaced cells keep a tokenizer from merging runs such as ``####`` into one token),
            ``compact`` (one character a cell, the format of ``Task.data["room"]``) or
            ``annotated`` (the ``verl-agent`` grid, then ``Level.describe``'s lines in words).
        solver_max_nodes: the BFS node cap for ``expert_action`` (raises ``SolverError`` past it).
        step_penalty: the reward every step adds (default -0.1, gym-sokoban's; <= 0). With a
            penalty and a step budget a lost episode's return from a state grows with the step it
            is reached at, which GiGPO's step groups (keyed on the state alone) read as credit
            for late visits; 0 leaves lost episodes' returns at 0 (docs/algorithm.md).
    """

    family = "sokoban"

    def __init__(
        self, grid_style: str = "verl-agent", solver_max_nodes: int = 1_000_000, step_penalty: float = STEP_PENALTY
    ) -> None:
        if grid_style not in GRID_STYLES:
            raise ValueError(f"grid_style must be one of {GRID_STYLES}, got {grid_style!r}")
        if isinstance(step_penalty, bool) or not isinstance(step_penalty, (int, float)) or not step_penalty <= 0:
            raise ValueError(
                f"step_penalty must be a number <= 0 (added to every step's reward; 0 for none), got {step_penalty!r}"
            )
        self.step_penalty = float(step_penalty)
        self.grid_style = grid_style
        self.solver_max_nodes = int(solver_max_nodes)
        self.task: Task | None = None
        self.level: Level | None = None
        self.done = True
        # Expert cache: state -> next optimal move. Every state on a computed plan gets its move,
        # so following the expert runs one BFS per episode, not one per step.
        self._expert: dict[tuple[int, frozenset[int]], str] = {}

    def reset(self, task: Task) -> tuple[str, dict]:
        if task.family != "sokoban":
            raise ValueError(
                f"SokobanEnv got a task of family {task.family!r}; make it with make_tasks('sokoban', ...)"
            )
        room = task.data.get("room")
        if not room:
            raise ValueError(f"sokoban task {task.task_id!r} needs data['room'] (the grid as a list of row strings)")
        level = parse_level(room)
        if self.level != level:
            self._expert = {}
        self.task, self.level = task, level
        self.player, self.boxes = level.player, level.boxes
        self.steps, self.done, self.won, self.deadlocked = 0, False, False, False
        self.optimal_steps = task.data.get("optimal_steps")
        grid = self.render()
        return grid, self._info(grid, invalid=False)

    def render(self) -> str:
        """The current grid in this env's ``grid_style``."""
        if self.level is None:
            raise RuntimeError("SokobanEnv.render called before reset(task)")
        return self.level.render(self.player, self.boxes, self.grid_style)

    def _info(self, grid: str, invalid: bool) -> dict:
        deadlock = is_corner_deadlock(self.level, self.boxes)
        self.deadlocked = self.deadlocked or deadlock
        t = self.task
        return {
            "won": self.won,
            "score": 1.0 if self.won else 0.0,
            "anchor": grid,
            # the grid already is the whole state; the key names it without the render
            "state_anchor": f"player {self.player}; boxes {sorted(self.boxes)}",
            "instruction": INSTRUCTION,
            "task_type": t.task_type if t else "",
            "admissible_actions": list(ACTIONS),
            "invalid_action": invalid,
            "deadlock": deadlock,
            "deadlocked": self.deadlocked,
            "optimal_steps": self.optimal_steps,
            "steps": self.steps,
            "boxes_on_target": len(self.boxes & self.level.targets),
        }

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.level is None:
            raise RuntimeError("SokobanEnv.step called before reset(task)")
        if self.done:
            grid = self.render()
            return grid, 0.0, True, self._info(grid, invalid=False)
        self.steps += 1
        move = parse_action(action)
        if move is None:
            grid = self.render()
            return f"{INVALID_ACTION_MESSAGE}\n{grid}", self.step_penalty, False, self._info(grid, invalid=True)
        level, reward = self.level, self.step_penalty
        d = level.delta(move)
        nxt = self.player + d
        if nxt in level.floor:
            if nxt not in self.boxes:
                self.player = nxt
            elif (beyond := nxt + d) in level.floor and beyond not in self.boxes:
                self.boxes = (self.boxes - {nxt}) | {beyond}
                self.player = nxt
                reward += (beyond in level.targets) - (nxt in level.targets)  # +1 on, -1 off, 0 both/neither
        if self.boxes == level.targets:
            self.won = self.done = True
            reward += SOLVED_REWARD
        grid = self.render()
        return grid, reward, self.done, self._info(grid, invalid=False)

    def expert_action(self) -> str:
        """The first move of a shortest plan from the current state (BFS, cached by state).

        From a state with no solution (a deadlock) the expert returns ``"up"``: any move is as
        good, and the protocol wants an action.
        """
        if self.level is None:
            raise RuntimeError("SokobanEnv.expert_action called before reset(task)")
        state = (self.player, self.boxes)
        if state not in self._expert:
            plan = solve(self.level, self.player, self.boxes, max_nodes=self.solver_max_nodes)
            if not plan:
                return ACTIONS[0]
            pl, bx = state
            for a in plan:
                self._expert[(pl, bx)] = a
                d = self.level.delta(a)
                pl += d
                if pl in bx:
                    bx = (bx - {pl}) | {pl + d}
        return self._expert[state]

    def close(self) -> None:
        pass
