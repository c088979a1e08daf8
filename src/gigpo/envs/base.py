"""The text environment contract every family implements, and the task record.

An environment is text in, text out (gymnasium-like):

    obs, info = env.reset(task)
    obs, reward, done, info = env.step(action)

``info`` keys (all families):
    ``won`` (bool)                 the task is solved.
    ``score`` (float in [0, 1])    the family's task score (WebShop's purchase score, search's exact
                                   match, ALFWorld's won as 0/1).
    ``anchor`` (str)               the raw observation used for GiGPO's anchor-state grouping
                                   (docs/algorithm.md#anchors). Absent means the observation itself.
    ``state_anchor`` (str)         optional: a canonical key of the engine state the next action is
                                   taken in (equal keys = equal states), for ``algorithm.anchor=state``
                                   (docs/algorithm.md#anchor-definitions). Absent: that anchor falls
                                   back to ``anchor``.
    ``admissible_actions`` (list[str])  where the family has them (ALFWorld, WebShop).
    ``instruction`` (str)          the task text, set by ``reset`` for prompt building.
    ``task_type`` (str)            the task's type, for per-type metrics.

An env never raises on an action's text: any string (empty, garbage, 100 KB, odd Unicode) is a
legal action, gets an observation such as "Nothing happens." and counts as a step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, runtime_checkable

SPLITS = ("train", "eval")


@dataclass(frozen=True)
class Task:
    """One task instance of an env family.

    Attributes:
        family: env family name (``alfworld``, ``webshop``, ``search``).
        task_id: unique id within the family and split (a seed, a game path, a goal index).
        split: ``train`` or ``eval``; a family's two splits are disjoint.
        task_type: the task's type (ALFWorld's six types, WebShop's category, search's hops).
        data: family-specific payload needed to reset to this task (JSON-serialisable).
    """

    family: str
    task_id: str
    split: str = "train"
    task_type: str = ""
    data: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"Task.split must be one of {SPLITS}, got {self.split!r}")


@runtime_checkable
class TextEnv(Protocol):
    """A multi-turn text environment. See the module docstring for ``info`` keys."""

    family: str

    def reset(self, task: Task) -> tuple[str, dict]:
        """Start ``task``; same task -> identical initial observation and state."""
        ...

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        """Apply ``action`` (any string); returns (observation, reward, done, info)."""
        ...

    def expert_action(self) -> str:
        """The expert's next action in the current state (used for SFT data and tests)."""
        ...

    def close(self) -> None:
        """Release engine resources."""
        ...
