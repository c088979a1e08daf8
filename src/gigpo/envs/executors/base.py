"""What every executor shares (the protocol is in ``gigpo.envs.executors``): the ``Outcome`` of a
job, running one command on an env (``_call``), exception text, closing an env quietly, and the
one-thread environment of worker processes and actors (``_ONE_THREAD_ENV``, ``_environ``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Mapping

Outcome = tuple[str, Any]  # ("ok", value) | ("err", message)

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
