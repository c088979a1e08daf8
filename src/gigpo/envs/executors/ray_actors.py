"""``RayExecutor`` (protocol in ``gigpo.envs.executors``): one Ray actor per slot, each building
its slot's env from the pickled factory (``_EnvActor``); ``import_ray`` and ``init_ray`` (connect
to a running cluster, else start a local Ray).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import re
from typing import Any, Callable, Mapping

from gigpo.envs.executors.base import _ONE_THREAD_ENV, Outcome, _call, _close_quietly, _describe, _environ


def import_ray() -> Any:
    """``ray``, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError(
            'executor="ray" needs Ray: pip install "gigpo[ray]" (or pick executor="process" on one machine)'
        ) from exc
    return ray


def init_ray() -> Any:
    """Connect to the running Ray cluster, else start a local Ray; a no-op when Ray is initialized.

    A cluster counts as running when ``RAY_ADDRESS`` is set or ``ray start`` left its address on
    this node (``ray.init(address="auto")`` finds it); with ``RAY_ADDRESS`` set, failing to connect
    is an error rather than a silent local Ray. On a cluster every node must be able to import the
    env factory (gigpo and the family module). A local Ray gets this machine's CPUs, no dashboard
    and the caller's import path, and stays up until the process exits (the train and eval envs
    share it).
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if os.environ.get("RAY_ADDRESS"):  # ray.init reads it (a ray:// client address too)
        ray.init()
        return ray
    try:
        ray.init(address="auto")
    except ConnectionError:  # no cluster on this node
        # Local workers inherit the raylet's environment: one thread each, like process workers,
        # and the driver's own import path (a family module given by path, a test directory).
        path = os.pathsep.join([*_driver_paths(), os.environ.get("PYTHONPATH", "")]).strip(os.pathsep)
        with _environ({**_ONE_THREAD_ENV, "PYTHONPATH": path}):
            ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False)
    return ray


def _driver_paths() -> list[str]:
    """``sys.path`` entries outside the Python installation (which every worker has anyway)."""
    import sys

    install = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for p in sys.path:
        real = os.path.realpath(p or os.getcwd())
        if os.path.isdir(real) and not any(real == i or real.startswith(i + os.sep) for i in install):
            out.append(real)
    return list(dict.fromkeys(out))


class _EnvActor:
    """The body of one env actor: holds at most one env, built at its first reset."""

    def __init__(self, factory_pickle: bytes):
        os.environ.update(_ONE_THREAD_ENV)  # before the factory's imports load torch or OpenMP
        import sys

        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
        self._factory = pickle.loads(factory_pickle)
        self._env: Any = None

    def ready(self) -> int:
        return os.getpid()

    def call(self, cmd: str, payload: Any) -> Outcome:
        try:
            if cmd == "reset" and self._env is None:
                self._env = self._factory()
            if self._env is None:
                return ("err", "no env; reset it first")
            return ("ok", _call(self._env, cmd, payload))
        except Exception as exc:  # env fault: its state is undefined now, rebuild at next reset
            if self._env is not None:
                _close_quietly(self._env)
            self._env = None
            return ("err", f"env raised {_describe(exc)}")

    def close(self) -> None:
        if self._env is not None:
            _close_quietly(self._env)
        self._env = None


def _actor_death(exc: BaseException) -> str:
    """Ray's actor-death message cut to its reason (the full text is a screenful)."""
    lines = [ln.strip() for ln in re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).splitlines() if ln.strip()]
    for line in lines:
        if line.startswith("The actor is dead because"):
            reason = line.removeprefix("The actor is dead because").strip()
            return reason.split(" Some common causes")[0][:300]  # cut Ray's generic advice
    if lines and "creation task" in lines[0]:  # __init__ raised: the traceback's last line says what
        return f"its __init__ raised {lines[-1]}"[:300]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


class RayExecutor:
    """One Ray actor per slot; slot ``s``'s env lives in actor ``s`` for as long as it is healthy.

    Actors are created at the first reset of their slot and kept across batches. After a crash or
    a timeout the actor is killed (``ray.kill``) and a new one is created at once, so it boots
    while the batch goes on and serves the slot's next reset. Ray's own actor restarts are off
    (``max_restarts=0``): a restarted actor would have lost the env anyway, and the executor must
    see the failure to fail the episode.

    Args:
        factory: builds one env; pickled with ``pickle`` (a module-level callable or a
            ``functools.partial`` of one) and unpickled inside each actor.
        num_cpus: CPUs Ray reserves per actor; ``None`` keeps Ray's actor default (placed on a node
            with a CPU, holding none while it runs, so any number fit).
        boot_timeout: seconds to wait for new actors to start (a Ray worker process plus the
            factory's imports), kept apart from the reset timeout.
    """

    def __init__(self, factory: Callable[[], Any], num_cpus: float | None = None, boot_timeout: float = 300.0):
        import_ray()
        try:
            self._factory_pickle = pickle.dumps(factory)
        except Exception as exc:
            raise ValueError(
                "executor='ray' builds envs inside Ray actors from a pickled env_factory, so it must be "
                "picklable: use a module-level function or functools.partial of one, not a lambda or closure "
                f"({_describe(exc)})"
            ) from exc
        if num_cpus is not None and not num_cpus >= 0:
            raise ValueError(f"num_cpus must be >= 0 or None (Ray's default), got {num_cpus!r}")
        self._num_cpus = num_cpus
        self._boot_timeout = boot_timeout
        self._actor_cls: Any = None
        self._actors: dict[int, Any] = {}  # slot -> actor handle
        self._pids: dict[int, int] = {}
        self._booting: set[int] = set()  # slots whose actor has not answered ready() yet
        self._has_env: set[int] = set()  # slots whose actor holds a reset env

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the actors, by slot (None for a slot without a started actor)."""
        n = max(self._actors, default=-1) + 1
        return [self._pids.get(s) for s in range(n)]

    def _new_actor(self, slot: int) -> None:
        ray = init_ray()
        if self._actor_cls is None:
            opts: dict[str, Any] = {"max_restarts": 0, "max_task_retries": 0}
            if self._num_cpus is not None:
                opts["num_cpus"] = self._num_cpus
            self._actor_cls = ray.remote(_EnvActor).options(**opts)
        self._actors[slot] = self._actor_cls.remote(self._factory_pickle)
        self._pids.pop(slot, None)
        self._booting.add(slot)
        self._has_env.discard(slot)

    def _kill(self, slot: int, recreate: bool = True) -> None:
        import ray

        actor = self._actors.pop(slot, None)
        if actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        self._pids.pop(slot, None)
        self._booting.discard(slot)
        self._has_env.discard(slot)
        if recreate:  # boots while the batch goes on; serves the slot's next reset
            self._new_actor(slot)

    def _await_ready(self, slots: list[int]) -> None:
        """Wait for the ``ready()`` of the given slots' actors; recreate those that died idle."""
        ray = init_ray()
        for attempt in range(2):
            refs = {self._actors[s].ready.remote(): s for s in slots}
            done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=self._boot_timeout)
            if pending:
                cpus = "Ray's actor default" if self._num_cpus is None else f"{self._num_cpus:g} CPU(s) each"
                raise RuntimeError(
                    f"{len(pending)} env actor(s) did not start within {self._boot_timeout:g} s "
                    f"({cpus}; Ray reports {ray.available_resources().get('CPU', 0):g} CPUs free): "
                    "give each fewer CPUs (env.ray_num_cpus) or add nodes"
                )
            dead: list[int] = []
            for ref in done:
                s = refs[ref]
                try:
                    self._pids[s] = ray.get(ref)
                    self._booting.discard(s)
                except ray.exceptions.RayActorError as exc:
                    if s in self._booting or attempt:  # a fresh actor that cannot start: not one slot's fault
                        raise RuntimeError(
                            f"env actor of slot {s} died while starting ({_actor_death(exc)}); check that the env "
                            "factory can be imported on every Ray node (same gigpo and family modules)"
                        ) from exc
                    dead.append(s)  # died between calls: its env is gone, a new actor serves the reset
            if not dead:
                return
            for s in dead:
                self._kill(s)
            slots = dead

    def run(self, cmd: str, jobs: Mapping[int, Any], timeout: float | None = None):
        ray = init_ray()
        results: dict[int, Outcome] = {}
        if cmd == "reset":
            for s in jobs:
                if s not in self._actors:
                    self._new_actor(s)
            self._await_ready(list(jobs))
        else:  # a job on a slot without an env fails without being sent
            for s in jobs:
                if s not in self._has_env:
                    results[s] = ("err", f"slot {s} has no env; reset it first")
        refs = {self._actors[s].call.remote(cmd, p): s for s, p in jobs.items() if s not in results}
        # One actor per slot: every job starts now and runs in parallel, so one deadline serves all.
        done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
        for ref in done:
            s = refs[ref]
            try:
                res = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                pid = self._pids.get(s)
                results[s] = (
                    "err",
                    f"env actor of slot {s} (pid {pid}) died before finishing {cmd}: {_actor_death(exc)}",
                )
                self._kill(s)
                continue
            except ray.exceptions.RayError as exc:  # e.g. a result Ray cannot serialize
                results[s] = ("err", f"{cmd} of slot {s} failed in Ray: {_describe(exc)}"[:500])
                self._kill(s)
                continue
            results[s] = res
            if res[0] == "ok" and cmd == "reset":
                self._has_env.add(s)
            elif res[0] == "err":
                self._has_env.discard(s)
        for ref in pending:
            s = refs[ref]
            results[s] = ("err", f"{cmd} of slot {s} timed out after {timeout:g} s (env actor killed)")
            self._kill(s)
        return results, {}

    def close(self) -> None:
        if not self._actors:
            return
        import ray

        if ray.is_initialized():
            # Envs close in their actors (a few seconds at most), then the actors go.
            refs = [a.close.remote() for s, a in self._actors.items() if s in self._has_env]
            if refs:
                with contextlib.suppress(Exception):
                    ray.wait(refs, num_returns=len(refs), timeout=5.0)
            for actor in self._actors.values():
                with contextlib.suppress(Exception):
                    ray.kill(actor, no_restart=True)
        self._actors.clear()
        self._pids.clear()
        self._booting.clear()
        self._has_env.clear()
