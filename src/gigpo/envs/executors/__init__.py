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

Modules: ``base`` (the outcome type and the helpers every executor shares), ``local`` (``inline``
and ``thread``), ``process`` (the worker processes and their loop), ``ray_actors`` (the Ray
actors, ``init_ray``). Every public name is importable from ``gigpo.envs.executors``.
"""

from __future__ import annotations

from gigpo.envs.executors.base import Outcome
from gigpo.envs.executors.local import InlineExecutor, ThreadExecutor
from gigpo.envs.executors.process import ProcessExecutor
from gigpo.envs.executors.ray_actors import RayExecutor, import_ray, init_ray

EXECUTORS = ("inline", "thread", "process", "ray")

__all__ = [
    "EXECUTORS",
    "InlineExecutor",
    "Outcome",
    "ProcessExecutor",
    "RayExecutor",
    "ThreadExecutor",
    "import_ray",
    "init_ray",
]
