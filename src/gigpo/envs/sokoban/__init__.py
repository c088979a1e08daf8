"""Sokoban: push every box onto a target in a small generated room (the family where states repeat).

    make_env(**kwargs) -> SokobanEnv
    make_tasks(split, n=None, seed=0, dim=6, num_boxes=1, search_depth=300, ...) -> list[Task]

Text and rules follow verl-agent's Sokoban (``agent_system/environments/env_package/sokoban``,
itself RAGEN's), built on gym-sokoban's rules and room generator:
    Observation: the grid as text rows, rows ``\\n``-joined, each cell written ``" # \\t"`` as in
        verl-agent's text render (``make_env(grid_style="compact")``: one character a cell, the
        format of ``Task.data["room"]`` and ``parse_level``; ``grid_style="annotated"``: the grid,
        then a line for the player and one per box naming their cells, the four neighbours, the
        box's offset from the player and its nearest target's offset from it, ``Level.describe``).
        Legend (verl-agent's): ``#`` wall, ``_`` floor, ``O`` target, ``X`` box, ``√`` box on target, ``P`` player,
        ``S`` player on target. verl-agent's prompt template (the legend, the goal, the rules) is
        the prompt side's business; ``INSTRUCTION`` is a one-paragraph version of it.
    Actions: ``up``, ``down``, ``left``, ``right`` (case-insensitive, surrounding whitespace
        ignored). Any other text is invalid: the state stays, the observation is
        ``INVALID_ACTION_MESSAGE`` (naming the valid actions) above the grid, the step costs
        the step penalty and ``info["invalid_action"]`` is True.
    Rewards (gym-sokoban's): -0.1 a step (``make_env(step_penalty=...)``), +1 for pushing a box
        onto a target, -1 for pushing one off, +10 when all boxes are on targets (the episode
        ends, ``won``). Walking into a wall or pushing a box into a wall or another box is a valid
        step that changes nothing.
    ``info`` (see ``gigpo.envs.base``): ``won``, ``score`` (1.0 solved, else 0.0), ``anchor`` (the
        grid: the whole state, so GiGPO's anchor groups are true states; an invalid action's anchor
        is the unchanged grid), ``state_anchor`` (``"player <cell>; boxes [<cell>, ...]"``, the same
        state as a key), ``instruction``, ``task_type`` (``"6x6-1box"``),
        ``admissible_actions`` (the four moves), ``invalid_action``, ``optimal_steps`` (the
        task's shortest solution), ``deadlock`` (now: some box off a target has walls on two
        orthogonal sides, a corner it can never leave), ``deadlocked`` (a deadlock happened this
        episode; since a cornered box never moves, the two agree), ``steps``, ``boxes_on_target``.
    ``expert_action()``: the first move of a shortest plan from the current state (BFS,
        ``solver.solve``), so following it solves a task in exactly ``optimal_steps`` steps.
The step limit is the episode manager's concern (verl-agent sets it in its env config).

Pieces: ``room`` (legend, parsing, the reverse-play generator), ``solver`` (BFS, deadlock
check), ``env`` (the env), ``tasks`` (generated, solver-certified, disjoint task sets).
"""

from __future__ import annotations

from gigpo.envs.sokoban.env import (
    BOX_OFF_TARGET_PENALTY,
    BOX_ON_TARGET_REWARD,
    INSTRUCTION,
    INVALID_ACTION_MESSAGE,
    SOLVED_REWARD,
    STEP_PENALTY,
    SokobanEnv,
    parse_action,
)
from gigpo.envs.sokoban.room import ACTIONS, GRID_STYLES, LEGEND, Level, generate_level, parse_level
from gigpo.envs.sokoban.solver import SolverError, is_corner_deadlock, solve
from gigpo.envs.sokoban.tasks import DEFAULT_SIZES, layout_split, make_tasks


def make_env(
    grid_style: str = "verl-agent", solver_max_nodes: int = 1_000_000, step_penalty: float = STEP_PENALTY
) -> SokobanEnv:
    """A ``SokobanEnv`` (rooms come with the tasks).

    Args:
        grid_style: ``verl-agent`` (spaced cells, verl-agent's text), ``compact`` or ``annotated``.
        solver_max_nodes: the node cap of the expert's BFS.
        step_penalty: the reward of every step (default -0.1; 0 for none, see ``SokobanEnv``).
    """
    return SokobanEnv(grid_style=grid_style, solver_max_nodes=solver_max_nodes, step_penalty=step_penalty)


__all__ = [
    "ACTIONS",
    "BOX_OFF_TARGET_PENALTY",
    "BOX_ON_TARGET_REWARD",
    "DEFAULT_SIZES",
    "GRID_STYLES",
    "INSTRUCTION",
    "INVALID_ACTION_MESSAGE",
    "LEGEND",
    "Level",
    "SOLVED_REWARD",
    "STEP_PENALTY",
    "SokobanEnv",
    "SolverError",
    "generate_level",
    "is_corner_deadlock",
    "layout_split",
    "make_env",
    "make_tasks",
    "parse_action",
    "parse_level",
    "solve",
]
