"""The in-process executors (protocol in ``gigpo.envs.executors``): ``InlineExecutor`` steps envs
one after another in the caller's thread; ``ThreadExecutor`` runs them on a pool of daemon threads
and abandons a job that runs past its timeout.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, Mapping

from gigpo.envs.executors.base import Outcome, _call, _close_quietly, _describe


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
