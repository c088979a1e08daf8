"""The grouped env manager: B tasks x n rollouts, each group reset to the same initial state.

GiGPO (arXiv:2505.10978) compares the n trajectories of a group, so they must start from the same
state; the official implementation once did not (its issue #82, fixed by seeding per
group; docs/algorithm.md#rollout). Here slot ``i`` always runs ``tasks[i // group_size]`` (group-major: the n
slots of a group are consecutive, like the reference's interleaved repeat), and ``reset`` checks
that each group's initial observations and admissible actions agree.

    with GroupedEnvs("webshop", group_size=4, max_steps=15) as envs:
        first = envs.reset(tasks)                    # [(obs, info)] * (len(tasks) * 4)
        while envs.active():
            out = envs.step({s: policy(envs.observation(s)) for s in envs.active()})
        metrics = envs.results()

Only running slots are stepped. A slot ends when its env says done, after ``max_steps`` steps
(``truncated``), or when its env faults (an exception, a dead or hung worker: ``failed``, with
``error`` saying what happened); a fault ends only that episode (with the process executor, every
episode held by the restarted worker; with the ray executor, one actor per slot, only that one),
never the batch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from gigpo.envs import get_family, make_env_from_module
from gigpo.envs.base import Task, TextEnv
from gigpo.envs.executors import EXECUTORS
from gigpo.envs.executors.local import InlineExecutor, ThreadExecutor
from gigpo.envs.executors.process import ProcessExecutor
from gigpo.envs.executors.ray_actors import RayExecutor


@dataclass
class Transition:
    """The result of one env step of one slot."""

    observation: str
    reward: float
    done: bool
    info: dict
    failed: bool = False  # env fault (exception, crash, timeout): the episode ended as failed
    truncated: bool = False  # the slot hit max_steps


@dataclass
class EpisodeResult:
    """Per slot: the episode so far (or finished). ``steps`` counts completed env steps."""

    slot: int
    group: int
    task: Task
    steps: int
    won: bool
    score: float
    task_type: str
    total_reward: float
    done: bool
    failed: bool
    truncated: bool
    error: str | None


@dataclass
class _Slot:
    task: Task
    group: int
    observation: str = ""
    info: dict = field(default_factory=dict)
    steps: int = 0
    total_reward: float = 0.0
    won: bool = False
    score: float = 0.0
    done: bool = False
    failed: bool = False
    truncated: bool = False
    error: str | None = None

    def fail(self, error: str) -> None:
        self.done, self.failed, self.error = True, True, error


def _positive(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be > 0 seconds or None (no limit), got {value!r}")


class GroupedEnvs:
    """``len(tasks) * group_size`` env slots run in groups of ``group_size`` per task.

    Args:
        family: env family name (``alfworld``, ``webshop``, ``search``); or give ``env_factory``.
        group_size: n, rollouts per task (>= 1).
        max_steps: a slot still running after this many steps ends with ``truncated=True``.
        env_kwargs: options passed to the family's ``make_env``.
        env_factory: a zero-argument callable building one env (custom envs); must be picklable
            (a module-level function or ``functools.partial``) for ``executor="process"`` or ``"ray"``.
        executor: ``inline`` (default, sequential in-process), ``thread`` (thread pool, for
            I/O-bound envs; refused for a family whose ``FamilySpec.thread_safe`` or module
            ``THREAD_SAFE`` is False) or
            ``process`` (worker processes, for slow engines like ALFWorld, whose TextWorld PDDL
            parser is shared module state and breaks under threads) or ``ray`` (one Ray actor per
            slot, on a Ray cluster when one is running, else on a local Ray; needs ``gigpo[ray]``).
        num_workers: threads or processes (default: CPU count, at most the number of slots); the
            ray executor has one actor per slot and ignores it.
        ray_num_cpus: CPUs Ray reserves per env actor (``executor="ray"``); ``None`` keeps Ray's
            actor default (none held while running, so any number of actors fit a node).
        step_timeout, reset_timeout: seconds one env may take per step / reset (reset includes
            building the env on first use) before its episode is failed; thread/process/ray only.
    """

    def __init__(
        self,
        family: str | None = None,
        *,
        group_size: int,
        max_steps: int,
        env_kwargs: dict | None = None,
        env_factory: Callable[[], TextEnv] | None = None,
        executor: str = "inline",
        num_workers: int | None = None,
        step_timeout: float | None = None,
        reset_timeout: float | None = None,
        ray_num_cpus: float | None = None,
    ):
        if (family is None) == (env_factory is None):
            raise ValueError(
                "give exactly one of family (e.g. 'alfworld') or env_factory (a callable returning a TextEnv)"
            )
        spec = get_family(family) if family is not None else None  # unknown: ValueError with a hint
        if env_factory is not None and env_kwargs:
            raise ValueError(
                "env_kwargs only apply with family=...; bind options into env_factory instead (e.g. functools.partial)"
            )
        if not isinstance(group_size, int) or group_size < 1:
            raise ValueError(f"group_size must be an int >= 1, got {group_size!r}")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps must be an int >= 1, got {max_steps!r}")
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {EXECUTORS}, got {executor!r}")
        _positive("step_timeout", step_timeout)
        _positive("reset_timeout", reset_timeout)
        if executor == "inline" and (step_timeout or reset_timeout):
            raise ValueError(
                "step_timeout/reset_timeout need executor='thread', 'process' or 'ray' "
                "(an inline env cannot be interrupted)"
            )
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise ValueError(f"num_workers must be an int >= 1 or None, got {num_workers!r}")
        if ray_num_cpus is not None and executor != "ray":
            raise ValueError(f"ray_num_cpus applies only to executor='ray', not {executor!r}")
        if executor == "thread" and spec is not None:
            # The module's THREAD_SAFE attribute still counts (a module may know better than its spec).
            if not (spec.thread_safe and getattr(spec.load(), "THREAD_SAFE", True)):
                raise ValueError(
                    f"{family} envs are not thread-safe (FamilySpec.thread_safe or the family "
                    "module's THREAD_SAFE is False); use executor='process' (or 'inline')"
                )
        import os

        self.family = family
        self.group_size = group_size
        self.max_steps = max_steps
        self.executor_name = executor
        self.step_timeout, self.reset_timeout = step_timeout, reset_timeout
        self.ray_num_cpus = ray_num_cpus
        # By module path, so worker processes need not have the family registered.
        if env_factory is not None:
            factory = env_factory
        else:
            assert spec is not None  # exactly one of family and env_factory, checked above
            factory = functools.partial(make_env_from_module, spec.module, **{**spec.env_kwargs, **(env_kwargs or {})})
        workers = num_workers or os.cpu_count() or 1
        self.num_workers = 1 if executor == "inline" else workers  # process: at most the slot count
        if executor == "inline":
            self._exec: Any = InlineExecutor(factory)
        elif executor == "thread":
            self._exec = ThreadExecutor(factory, workers)
        elif executor == "ray":
            self._exec = RayExecutor(factory, num_cpus=ray_num_cpus)
        else:
            self._exec = ProcessExecutor(factory, workers, preload=[spec.module] if spec else [])
        self._slots: list[_Slot] = []
        self._closed = False

    # ----------------------------------------------------------------------------------- episodes
    @property
    def num_slots(self) -> int:
        """Slots of the current batch: ``len(tasks) * group_size``."""
        return len(self._slots)

    def group(self, slot: int) -> int:
        """The group (index into the tasks given to ``reset``) of ``slot``."""
        return self._slot(slot).group

    def reset(self, tasks: Sequence[Task]) -> list[tuple[str, dict]]:
        """Start a batch: slot ``i`` runs ``tasks[i // group_size]``. Returns (obs, info) per slot.

        A slot whose reset fails (env error, timeout, dead worker) starts done and failed; its
        observation is ``""`` and ``info['error']`` says why.
        """
        self._check_open()
        tasks = list(tasks)
        if not tasks:
            raise ValueError("reset needs at least one Task")
        for i, t in enumerate(tasks):
            if not isinstance(t, Task):
                raise TypeError(f"tasks[{i}] must be a gigpo.envs.Task, got {type(t).__name__}")
            if self.family is not None and t.family != self.family:
                raise ValueError(f"tasks[{i}] is a {t.family!r} task but this manager runs {self.family!r} envs")
        n = self.group_size
        self._slots = [_Slot(task=tasks[i // n], group=i // n) for i in range(len(tasks) * n)]
        results, lost = self._exec.run("reset", {i: s.task for i, s in enumerate(self._slots)}, self.reset_timeout)
        for i, s in enumerate(self._slots):
            kind, value = results[i]
            if kind == "ok":
                s.observation, s.info = value[0], dict(value[1])
                self._score(s)
            else:
                s.fail(f"reset failed: {value}")
                s.info = {"error": s.error}
            if i in lost and not s.failed:
                s.fail(lost[i])
        self._check_groups()
        return [(s.observation, s.info) for s in self._slots]

    def _check_groups(self) -> None:
        """Issue #82 guard: the n envs of a group must start from the same observation/actions."""
        first: dict[int, _Slot] = {}
        for i, s in enumerate(self._slots):
            if s.failed:
                continue
            ref = first.setdefault(s.group, s)
            if ref is s:
                continue
            if s.observation != ref.observation or s.info.get("admissible_actions") != ref.info.get(
                "admissible_actions"
            ):
                raise RuntimeError(
                    f"group {s.group} (task {s.task.task_id!r}): slot {i} reset to a different initial "
                    "observation or admissible actions than the group's first slot; GiGPO needs "
                    "identical initial states per group, so the env's reset(task) must be "
                    "deterministic in the task (see GiGPO issue #82)"
                )

    def active(self) -> list[int]:
        """Slots still running, ascending."""
        return [i for i, s in enumerate(self._slots) if not s.done]

    def observation(self, slot: int) -> tuple[str, dict]:
        """The current (latest) observation and info of ``slot``."""
        s = self._slot(slot)
        return s.observation, s.info

    def step(self, actions: Mapping[int, str]) -> dict[int, Transition]:
        """Step the given running slots (any subset of ``active()``) with their actions.

        Returns a Transition per given slot. Raises ValueError for a slot that is done or out of
        range. With the process executor a fault can also end slots you did not step this call
        (the restarted worker held them): check ``active()`` rather than tracking dones yourself.
        """
        self._check_open()
        if not isinstance(actions, Mapping):
            raise TypeError(f"actions must be a mapping slot -> action string, got {type(actions).__name__}")
        for slot, action in actions.items():
            s = self._slot(slot)
            if s.done:
                why = "failed" if s.failed else "truncated" if s.truncated else "done"
                raise ValueError(f"slot {slot} is already {why}; step only slots in active()")
            if not isinstance(action, str):
                raise TypeError(f"action for slot {slot} must be a str, got {type(action).__name__}")
        results, lost = self._exec.run("step", dict(actions), self.step_timeout)
        out: dict[int, Transition] = {}
        for slot in actions:
            s = self._slots[slot]
            kind, value = results[slot]
            if kind == "err":
                s.fail(f"step {s.steps + 1} failed: {value}")
                out[slot] = Transition("", 0.0, True, {"error": s.error}, failed=True)
                continue
            obs, reward, done, info = value
            s.observation, s.info = obs, dict(info)
            s.steps += 1
            s.total_reward += float(reward)
            s.done = bool(done)
            self._score(s)
            if not s.done and s.steps >= self.max_steps:
                s.done = s.truncated = True
            if slot in lost:
                s.fail(lost[slot])
            out[slot] = Transition(obs, float(reward), s.done, s.info, failed=s.failed, truncated=s.truncated)
        for slot, why in lost.items():
            if slot < len(self._slots) and slot not in actions and not self._slots[slot].done:
                self._slots[slot].fail(why)
        return out

    def expert_actions(self, slots: Sequence[int] | None = None) -> dict[int, str]:
        """``env.expert_action()`` of the given running slots (default: all active). A slot whose
        env faults here is failed and left out."""
        self._check_open()
        slots = self.active() if slots is None else list(slots)
        for slot in slots:
            if self._slot(slot).done:
                raise ValueError(f"slot {slot} is done; ask expert actions only for active() slots")
        results, lost = self._exec.run("expert", {s: None for s in slots}, self.step_timeout)
        out = {}
        for slot in slots:
            kind, value = results[slot]
            if kind == "ok" and slot not in lost:
                out[slot] = value
            else:
                self._slots[slot].fail(f"expert_action failed: {value}" if kind == "err" else lost[slot])
        for slot, why in lost.items():
            if slot < len(self._slots) and not self._slots[slot].done:
                self._slots[slot].fail(why)
        return out

    def results(self) -> list[EpisodeResult]:
        """One EpisodeResult per slot of the current batch (wins, scores, steps for metrics)."""
        return [
            EpisodeResult(
                slot=i,
                group=s.group,
                task=s.task,
                steps=s.steps,
                won=s.won,
                score=s.score,
                task_type=s.task.task_type or str(s.info.get("task_type", "")),
                total_reward=s.total_reward,
                done=s.done,
                failed=s.failed,
                truncated=s.truncated,
                error=s.error,
            )
            for i, s in enumerate(self._slots)
        ]

    # ------------------------------------------------------------------------------------ helpers
    @staticmethod
    def _score(s: _Slot) -> None:
        s.won = bool(s.info.get("won", False))
        s.score = float(s.info.get("score", float(s.won)))

    def _slot(self, slot: int) -> _Slot:
        if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < len(self._slots):
            raise ValueError(
                f"slot {slot!r} is out of range: this batch has {len(self._slots)} slots (call reset(tasks) first)"
                if not self._slots
                else f"slot {slot!r} is out of range 0..{len(self._slots) - 1}"
            )
        return self._slots[slot]

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this GroupedEnvs is closed; create a new one")

    @property
    def worker_pids(self) -> list[int | None]:
        """Worker process ids (process executor: index = slot % num_workers; ray executor: one
        actor per slot, index = slot, None while an actor starts), else []."""
        return list(getattr(self._exec, "pids", []))

    def worker_pid(self, slot: int) -> int | None:
        """Process id of the worker or actor holding ``slot`` (process or ray executor), else None."""
        self._slot(slot)
        pids = self.worker_pids
        return pids[slot % len(pids)] if pids else None

    def close(self) -> None:
        """Close all envs and stop workers. Safe to call twice."""
        if not self._closed:
            self._closed = True
            self._exec.close()

    def __enter__(self) -> "GroupedEnvs":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
