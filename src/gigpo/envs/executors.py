"""Executors: where and how the grouped manager's environments run.

An executor owns one environment per slot and runs a batch of jobs on them:

    results, lost = executor.run(cmd, jobs, timeout)

``cmd`` is ``"reset"`` (payload: a ``Task``), ``"step"`` (payload: the action string) or
``"expert"`` (payload ignored; the env's ``expert_action()``). ``jobs`` maps slot -> payload.
``results`` maps every job slot to an outcome, ``("ok", value)`` or ``("err", message)``; after an
``err`` the slot's env is discarded and rebuilt at its next reset. ``lost`` maps slots whose env
state was lost as a side effect (their worker process was restarted) to a message; a lost slot may
also be in ``results`` with an ``ok`` value computed just before the loss.

Three executors:
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
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import threading
import time
import weakref
from collections import deque
from multiprocessing import connection, get_all_start_methods, get_context
from typing import Any, Callable, Mapping, Sequence

Outcome = tuple[str, Any]  # ("ok", value) | ("err", message)
EXECUTORS = ("inline", "thread", "process")

# Threads in workers and children: two cores shared by many envs; more threads run far slower.
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
