"""Executors: where and how the grouped manager's environments run.

An executor owns one environment per slot and runs a batch of jobs on them:

    results, lost = executor.run(cmd, jobs, timeout)

``cmd`` is ``"reset"`` (payload: a ``Task``), ``"step"`` (payload: the action string) or
``"expert"`` (payload ignored; the env's ``expert_action()``). ``jobs`` maps slot -> payload.
``results`` maps every job slot to an outcome, ``("ok", value)`` or ``("err", message)``; after an
``err`` the slot's env is discarded and rebuilt at its next reset. ``lost`` maps slots whose env
state was lost as a side effect (their worker process was restarted) to a message; a lost slot may
also be in ``results`` with an ``ok`` value computed just before the loss.

Four executors:
    ``inline``   steps envs one after another in the caller's thread. No timeouts.
    ``thread``   a pool of daemon threads; good for I/O-bound envs (an HTTP retriever), wrong for
                 envs with shared module state (ALFWorld: TextWorld's PDDL parser). A hung step
                 is abandoned after ``timeout`` (Python cannot kill a thread): its env is dropped
                 and the thread replaced, so the pool keeps its size.
    ``process``  worker processes (``forkserver`` context, else ``spawn``; pipes), each owning the envs of slots
                 ``slot % num_workers == worker``; for slow engines such as ALFWorld. A worker that
                 dies or exceeds ``timeout`` on one env is killed and restarted; every episode it
                 held is lost, the other workers go on. The official implementation runs one Ray
                 actor per env; a few processes holding several envs each is
                 the same idea without Ray.
    ``ray``      one Ray actor per slot (the official implementation's layout), placed by Ray on
                 any node of a cluster; each actor builds its slot's env from the pickled factory.
                 An actor that raises fails only its slot; one that dies or exceeds ``timeout`` is
                 killed and recreated, losing only its own episode. Needs ``pip install "gigpo[ray]"``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import re
import signal
import threading
import time
import weakref
from collections import deque
from multiprocessing import connection, get_all_start_methods, get_context
from typing import Any, Callable, Mapping, Sequence

Outcome = tuple[str, Any]  # ("ok", value) | ("err", message)
EXECUTORS = ("inline", "thread", "process", "ray")

# Threads in workers and children: one each, since many envs share few cores and more threads than
# cores run far slower.
_ONE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _call(env: Any, cmd: str, payload: Any) -> Any:
    if cmd == "reset":
        return env.reset(payload)
    if cmd == "step":
        return env.step(payload)
    if cmd == "expert":
        return env.expert_action()
    raise ValueError(f"unknown executor command {cmd!r}")


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _close_quietly(env: Any) -> None:
    with contextlib.suppress(Exception):
        env.close()


class InlineExecutor:
    """Runs jobs sequentially in the calling thread; an env exception fails only that slot."""

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._envs: dict[int, Any] = {}

    def run(self, cmd: str, jobs: Mapping[int, Any], timeout: float | None = None):
        results: dict[int, Outcome] = {}
        for slot, payload in jobs.items():
            try:
                if cmd == "reset" and slot not in self._envs:
                    self._envs[slot] = self._factory()
                results[slot] = ("ok", _call(self._envs[slot], cmd, payload))
            except Exception as exc:  # env fault: its state is undefined now, rebuild at next reset
                results[slot] = ("err", f"env raised {_describe(exc)}")
                env = self._envs.pop(slot, None)
                if env is not None:
                    _close_quietly(env)
        return results, {}

    def close(self) -> None:
        for env in self._envs.values():
            _close_quietly(env)
        self._envs.clear()


class ThreadExecutor:
    """Runs jobs on a pool of daemon threads; a job running past ``timeout`` fails its slot."""

    def __init__(self, factory: Callable[[], Any], num_workers: int):
        self._factory = factory
        self._envs: dict[int, Any] = {}
        self._queue: queue.Queue = queue.Queue()
        self._retired: set[threading.Thread] = set()
        self._threads: list[threading.Thread] = []
        for _ in range(num_workers):
            self._spawn()

    def _spawn(self) -> None:
        # Daemon threads, not concurrent.futures: its exit hook joins every thread, so one hung env
        # would hang interpreter exit.
        t = threading.Thread(target=self._loop, daemon=True, name="gigpo-env")
        self._threads.append(t)
        t.start()

    def _loop(self) -> None:
        me = threading.current_thread()
        while True:
            item = self._queue.get()
            if item is None:
                return
            slot, cmd, payload, started, out, abandoned = item
            started[slot] = (time.monotonic(), me)
            try:
                if cmd == "reset" and slot not in self._envs:
                    env = self._factory()
                    if slot in abandoned:  # timed out while building: the slot has moved on
                        _close_quietly(env)
                        return  # this thread was retired when the job was abandoned
                    self._envs[slot] = env
                res: Outcome = ("ok", _call(self._envs[slot], cmd, payload))
            except Exception as exc:
                res = ("err", f"env raised {_describe(exc)}")
            out.put((slot, res))
            if me in self._retired:  # replaced after a timeout; the replacement serves the pool
                return

    def run(self, cmd: str, jobs: Mapping[int, Any], timeout: float | None = None):
        out: queue.Queue = queue.Queue()  # one per call: late results of abandoned jobs land in old ones
        started: dict[int, tuple[float, threading.Thread]] = {}
        abandoned: set[int] = set()
        for slot, payload in jobs.items():
            self._queue.put((slot, cmd, payload, started, out, abandoned))
        results: dict[int, Outcome] = {}
        while len(results) < len(jobs):
            wait = None
            if timeout is not None:
                running = [t0 for s, (t0, _) in list(started.items()) if s not in results]
                wait = max(0.0, min(running) + timeout - time.monotonic()) if running else 0.05
            try:
                slot, res = out.get(timeout=wait)
                if slot not in results:
                    results[slot] = res
                    if res[0] == "err":
                        self._drop(slot)
            except queue.Empty:
                pass
            if timeout is None:
                continue
            now = time.monotonic()
            for slot, (t0, thread) in list(started.items()):
                if slot not in results and now - t0 > timeout:
                    results[slot] = ("err", f"{cmd} of slot {slot} timed out after {timeout:g} s (env abandoned)")
                    # The thread stays blocked in the env; drop the env, retire the thread, and
                    # start a replacement so the pool keeps its size.
                    self._envs.pop(slot, None)
                    abandoned.add(slot)
                    self._retired.add(thread)
                    self._spawn()
        return results, {}

    def _drop(self, slot: int) -> None:
        env = self._envs.pop(slot, None)
        if env is not None:
            _close_quietly(env)

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for env in self._envs.values():
            _close_quietly(env)
        self._envs.clear()


def _worker_main(conn: connection.Connection, factory: Callable[[], Any]) -> None:
    """Worker process: owns the envs of its slots; runs job lists sent over ``conn`` in order and
    answers one ``(slot, outcome)`` message per job, so the parent can time each job."""
    os.environ.update(_ONE_THREAD_ENV)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    envs: dict[int, Any] = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # parent gone
            break
        cmd, items = msg
        if cmd == "close":
            break
        for slot, payload in items:
            try:
                if cmd == "reset" and slot not in envs:
                    envs[slot] = factory()
                res: Outcome = ("ok", _call(envs[slot], cmd, payload))
            except Exception as exc:
                res = ("err", f"env raised {_describe(exc)}")
                env = envs.pop(slot, None)
                if env is not None:
                    _close_quietly(env)
            try:
                conn.send((slot, res))
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                conn.send((slot, ("err", f"result not picklable: {_describe(exc)}")))
    for env in envs.values():
        _close_quietly(env)


class _Worker:
    def __init__(self, ctx, factory, index: int):
        self.index = index
        self.conn, child = ctx.Pipe()
        # A spawned child (and the fork server, started on first use) inherits os.environ.
        with _environ(_ONE_THREAD_ENV):
            self.proc = ctx.Process(
                target=_worker_main, args=(child, factory), daemon=False, name=f"gigpo-env-worker-{index}"
            )
            self.proc.start()
        child.close()
        self.ready = False
        self.owned: set[int] = set()  # slots whose env lives in this process

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        self.proc.join(timeout=5)
        self.conn.close()


@contextlib.contextmanager
def _environ(values: Mapping[str, str]):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _exit_reason(proc) -> str:
    code = proc.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


def _shutdown(workers: list[_Worker]) -> None:
    for w in workers:
        with contextlib.suppress(Exception):
            w.conn.send(("close", []))
    for w in workers:
        w.proc.join(timeout=2)
        if w.proc.is_alive():
            w.kill()
        with contextlib.suppress(Exception):
            w.conn.close()


class ProcessExecutor:
    """Worker processes owning envs; slot ``s`` lives in worker ``s % num_workers``."""

    def __init__(
        self, factory: Callable[[], Any], num_workers: int, boot_timeout: float = 300.0, preload: Sequence[str] = ()
    ):
        try:
            pickle.dumps(factory)
        except Exception as exc:
            raise ValueError(
                "executor='process' sends env_factory to worker processes, so it must be picklable: "
                "use a module-level function or functools.partial of one, not a lambda or closure "
                f"({_describe(exc)})"
            ) from exc
        self._factory = factory
        # fork would copy the parent's threads and torch state. forkserver forks workers from a
        # clean server process that imported ``preload`` (e.g. the family module) once, so a worker
        # (and a restart after a crash) starts in milliseconds instead of re-importing TextWorld.
        if "forkserver" in get_all_start_methods():
            self._ctx = get_context("forkserver")
            self._ctx.set_forkserver_preload(["__main__", *preload])  # no effect once it runs
        else:
            self._ctx = get_context("spawn")
        self._max_workers = num_workers
        self._boot_timeout = boot_timeout
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)

    @property
    def pids(self) -> list[int | None]:
        """Process ids of the workers (index = slot % num_workers)."""
        return [w.pid for w in self._workers]

    def worker_of(self, slot: int) -> int:
        return slot % len(self._workers)

    def _start(self, n_slots: int) -> None:
        n = max(1, min(self._max_workers, n_slots))
        self._workers.extend(_Worker(self._ctx, self._factory, i) for i in range(n))

    def _restart(self, w: _Worker) -> None:
        w.kill()
        self._workers[w.index] = _Worker(self._ctx, self._factory, w.index)

    def _await_ready(self, workers: list[_Worker]) -> None:
        """Wait for each worker's start-up message, so job timeouts never include interpreter start."""
        deadline = time.monotonic() + self._boot_timeout
        for w in workers:
            while not w.ready:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"env worker {w.index} did not start within {self._boot_timeout:g} s")
                if w.conn.poll(min(left, 0.5)):
                    try:
                        tag, _ = w.conn.recv()
                    except (EOFError, OSError) as exc:
                        raise RuntimeError(
                            f"env worker {w.index} died while starting ({_exit_reason(w.proc)}); "
                            "check that the env factory can be imported in a fresh process"
                        ) from exc
                    w.ready = tag == "ready"
                elif not w.proc.is_alive():
                    raise RuntimeError(f"env worker {w.index} died while starting ({_exit_reason(w.proc)})")

    def run(self, cmd: str, jobs: Mapping[int, Any], timeout: float | None = None):
        if not self._workers:
            self._start(max(jobs, default=0) + 1)
        results: dict[int, Outcome] = {}
        lost: dict[int, str] = {}

        def fail_worker(w: _Worker, why: str, current: int | None) -> None:
            """Record the loss of worker ``w`` (its current job gets ``why``) and restart it."""
            for s in pending.pop(w.index, ()):
                results[s] = ("err", why if s == current else f"env lost: worker {w.index} restarted because {why}")
            for s in w.owned:
                if s != current:
                    lost[s] = f"env lost: worker {w.index} restarted because {why}"
            self._restart(w)

        # A worker that died between calls: its envs are gone; restart it before sending. A reset
        # starts a new batch, so the old episodes it held need no report.
        for w in list(self._workers):
            if not w.proc.is_alive():
                why = f"worker {w.index} (pid {w.pid}) died between calls ({_exit_reason(w.proc)})"
                if cmd == "reset":
                    w.owned.clear()
                pending = {}
                fail_worker(w, why, None)
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, payload in jobs.items():
            by_worker.setdefault(self.worker_of(slot), []).append((slot, payload))
        self._await_ready([self._workers[i] for i in by_worker])
        pending: dict[int, deque[int]] = {}
        started: dict[int, float] = {}
        for i, items in by_worker.items():
            w = self._workers[i]
            if cmd != "reset":  # a job on an env this worker lost fails without being sent
                for s, _ in items:
                    if s not in w.owned:
                        results[s] = ("err", lost.get(s, f"slot {s} has no env; reset it first"))
                items = [(s, p) for s, p in items if s in w.owned]
            if not items:
                continue
            pending[i] = deque(s for s, _ in items)
            started[i] = time.monotonic()
            try:
                w.conn.send((cmd, items))
            except OSError:  # died after start-up; the wait loop below sees it
                pass
        while pending:
            waitables: list[Any] = []
            for i in pending:
                waitables += [self._workers[i].conn, self._workers[i].proc.sentinel]
            wait_s = None
            if timeout is not None:
                wait_s = max(0.0, min(started[i] for i in pending) + timeout - time.monotonic())
            connection.wait(waitables, timeout=wait_s)
            for i in list(pending):
                w = self._workers[i]
                try:
                    while i in pending and w.conn.poll(0):
                        slot, res = w.conn.recv()
                        results[slot] = res
                        if cmd == "reset":
                            (w.owned.add if res[0] == "ok" else w.owned.discard)(slot)
                        elif res[0] == "err":
                            w.owned.discard(slot)
                        pending[i].popleft()
                        started[i] = time.monotonic()  # the worker's next job starts now
                        if not pending[i]:
                            del pending[i]
                except (EOFError, OSError):
                    pass
                if i not in pending:
                    continue
                current = pending[i][0]
                if not w.proc.is_alive():
                    fail_worker(
                        w,
                        f"worker {i} (pid {w.pid}) died during {cmd} of slot {current} ({_exit_reason(w.proc)})",
                        current,
                    )
                elif timeout is not None and time.monotonic() - started[i] > timeout:
                    fail_worker(
                        w, f"{cmd} of slot {current} timed out after {timeout:g} s (worker {i} killed)", current
                    )
        return results, lost

    def close(self) -> None:
        self._finalizer()


# ---------------------------------------------------------------------------------------------- ray
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
