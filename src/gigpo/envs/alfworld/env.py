"""ALFWorld on its real engine: TextWorld's PDDL backend with ALFWorld's wrappers and expert.

:class:`AlfworldEnv` plays one game directory at a time (a generated one, or an official
``json_2.1.1/.../game.tw-pddl``), the way ``alfworld.agents.environment.AlfredTWEnv`` does:
``textworld.envs.pddl.PddlEnv`` wrapped by ``AlfredDemangler`` (receptacle/object names like
"drawer 1") and ``AlfredInfos``, requesting ``won``, ``admissible_commands`` and ``facts``
(for the handcoded expert). We drive the engine in-process instead of through ``textworld.gym``
so one engine object is reused across resets (no process per env) and the expert is ours to
recover: ALFWorld's handcoded expert can loop or raise on games it cannot handle (the official
data drops those games as unsolvable); here the env then falls back to the PDDL planner's plan
(Fast Downward, ``PddlState.replan``), which always solves a solvable game.
"""

from __future__ import annotations

import os
from pathlib import Path

import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
from alfworld.agents.expert import HandCodedTWAgent
from textworld.envs.pddl import PddlEnv

from gigpo.envs.alfworld import _speedups
from gigpo.envs.alfworld.generator import GameSpec, write_game
from gigpo.envs.base import Task

GENERATOR_VERSION = "v1"  # bump when generated games change, so caches do not mix versions


# PDDL predicates of the physical state (alfworld/data/alfred.pddl): where the agent is, what it
# holds, which receptacles are open, where objects are, and object states (hot, cool, clean,
# sliced, on). Left out: bookkeeping of what was seen (checked, examined, wasInReceptacle), facts
# derived from the kept ones (holdsAny, full, ...) and the constants of the game, equal in a group.
STATE_PREDICATES = frozenset(
    {
        "atlocation",
        "holds",
        "opened",
        "inreceptacle",
        "inreceptacleobject",
        "objectatlocation",
        "ishot",
        "iscool",
        "isclean",
        "issliced",
        "ison",
        "istoggled",
    }
)


def state_key(facts) -> str:
    """The canonical ``state_anchor`` of an ALFWorld state: its physical facts (``STATE_PREDICATES``),
    each ``name(arg, arg)``, sorted and joined by ``"; "`` (docs/algorithm.md#anchor-definitions)."""
    return "; ".join(
        sorted(f"{f.name}({', '.join(a.strip() for a in f.names)})" for f in facts if f.name in STATE_PREDICATES)
    )


def default_cache_dir() -> Path:
    root = os.environ.get("GIGPO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "gigpo")
    return Path(root) / "alfworld"


class AlfworldEnv:
    """One ALFWorld game at a time; see ``gigpo.envs.base`` for the protocol and ``info`` keys.

    Args:
        reward_scale: reward on the winning step (10 * won, docs/algorithm.md#anchors).
        cache_dir: where generated games are written (default ``$GIGPO_CACHE/alfworld`` or
            ``~/.cache/gigpo/alfworld``).
        expert: ``handcoded`` (ALFWorld's TW expert, planner fallback) or ``planner``.
    """

    family = "alfworld"

    def __init__(
        self,
        reward_scale: float = 10.0,
        cache_dir: str | os.PathLike | None = None,
        expert: str = "handcoded",
        data_dir: str | os.PathLike | None = None,
    ) -> None:
        if expert not in ("handcoded", "planner"):
            raise ValueError(f"expert must be 'handcoded' or 'planner', got {expert!r}")
        _speedups.apply()
        self.reward_scale = float(reward_scale)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.data_dir = data_dir  # accepted for symmetry with make_tasks; tasks carry their paths
        self.expert_type = expert
        infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile"])
        self._engine = AlfredInfos(AlfredDemangler(PddlEnv(infos)))
        self._loaded: str | None = None
        self._state = None
        self._task: Task | None = None
        self._instruction = ""

    # -- helpers -------------------------------------------------------------------------------
    def game_file(self, task: Task) -> Path:
        """The ``game.tw-pddl`` for ``task``, writing a generated game into the cache if needed."""
        if task.family != "alfworld":
            raise ValueError(f"AlfworldEnv got a {task.family!r} task; make it with make_tasks('alfworld', ...)")
        data = dict(task.data)
        if "game_file" in data:
            path = Path(data["game_file"])
            if not path.exists():
                raise FileNotFoundError(f"ALFWorld game file {path} does not exist; check data_dir/ALFWORLD_DATA")
            return path
        if "spec" not in data:
            raise ValueError(f"task {task.task_id!r} data needs 'spec' (generated) or 'game_file' (official)")
        spec = GameSpec(**data["spec"])
        return write_game(spec, self.cache_dir / GENERATOR_VERSION / task.split / spec.task_id)

    def _info(self) -> dict:
        st = self._state
        won = bool(st["won"])
        return {
            "won": won,
            "score": 1.0 if won else 0.0,
            # The official verl-agent wrapper drops 'help' from the list shown to the agent.
            "admissible_actions": [c for c in st["admissible_commands"] if c != "help"],
            "task_type": self._task.task_type if self._task else "",
            "instruction": self._instruction,
            "anchor": self._obs,
            "state_anchor": state_key(st["facts"]),
            "gamefile": self._loaded,
        }

    # -- protocol --------------------------------------------------------------------------------
    def reset(self, task: Task) -> tuple[str, dict]:
        path = str(self.game_file(task))
        if path != self._loaded:  # same game again (a GiGPO group): skip re-parsing the problem
            self._engine.load(path)
            self._loaded = path
        self._state = self._engine.reset()
        self._task = task
        self._obs = str(self._state.feedback).strip()
        self._instruction = self._obs.partition("Your task is to: ")[2].strip()
        self._hc = HandCodedTWAgent(max_steps=200)
        self._hc.reset(path)
        self._hc_ok = self.expert_type == "handcoded"
        self._prev = ""
        self._next_expert: str | None = None
        self._update_expert()
        return self._obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self._state is None:
            raise RuntimeError("call reset(task) before step(action)")
        action = action if isinstance(action, str) else str(action)
        # PddlEnv answers any command it cannot match with "Nothing happens."; NUL bytes are the
        # only thing it could choke on, so drop them.
        self._state, _, _ = self._engine.step(action.replace("\x00", ""))
        self._obs = str(self._state.feedback).strip()
        self._prev = action
        self._update_expert()
        won = bool(self._state["won"])
        return self._obs, self.reward_scale * won, won, self._info()

    def _update_expert(self) -> None:
        """Feed the handcoded expert every transition (it tracks what it has seen)."""
        self._next_expert = None
        if not self._hc_ok:
            return
        try:
            if not self._prev:
                self._hc.observe(self._state["feedback"])
                self._next_expert = "look" if self._hc_first_look() else None
            else:
                act = self._hc.act(self._state, 0, self._state["won"], self._prev)
                if act in self._state["admissible_commands"]:
                    self._next_expert = act
                else:
                    self._hc_ok = False  # it lost track (walks to where it already is): give up on it
        except Exception:  # HandCodedAgentFailed/Timeout, or odd agent actions it cannot parse
            self._hc_ok = False

    @staticmethod
    def _hc_first_look() -> bool:
        # AlfredExpert's plan before the first action is ["look"]; the expert acts from step 1.
        return True

    def expert_action(self) -> str:
        """ALFWorld's handcoded expert's next action; the PDDL planner's once it has lost track."""
        if self._state is None:
            raise RuntimeError("call reset(task) before expert_action()")
        if self._next_expert is not None:
            return self._next_expert
        self._hc_ok = False
        pddl = self._engine.unwrapped
        plan = pddl._pddl_state.replan(pddl._entity_infos)
        return plan[0] if plan else "look"

    def close(self) -> None:
        self._state = None
        self._loaded = None
