"""``ProcessExecutor`` (protocol in ``gigpo.envs.executors``): worker processes that each own the
envs of their slots, the workers' loop (``_worker_main``), and their start, restart and shutdown.
A worker that dies or runs past the timeout is killed and restarted; the episodes it held are lost.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import time
import weakref
from collections import deque
from multiprocessing import connection, get_all_start_methods, get_context
from typing import Any, Callable, Mapping, Sequence

from gigpo.envs.executors.base import _ONE_THREAD_ENV, Outcome, _call, _close_quietly, _describe, _environ


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
            self._ctx: Any = get_context("forkserver")
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
                pending: dict[int, deque[int]] = {}
                fail_worker(w, why, None)
        by_worker: dict[int, list[tuple[int, Any]]] = {}
        for slot, payload in jobs.items():
            by_worker.setdefault(self.worker_of(slot), []).append((slot, payload))
        self._await_ready([self._workers[i] for i in by_worker])
        pending = {}
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
