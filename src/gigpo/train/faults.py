"""Faults planted on purpose, for the tests that show a run survives them (docs/reliability.md).

Read once when a trainer starts, from environment variables; the loop only calls its phase hooks
(``Trainer.hooks``), which are empty unless a variable is set:

- ``GIGPO_DEBUG_SIGKILL_AT=<iteration>:<phase>`` SIGKILLs the process at the end of that phase
  (``after_rollout``, ``after_update``, ``after_log``);
- ``GIGPO_DEBUG_LR_AT=<iteration>:<lr>`` runs that iteration's update at ``lr`` (a learning-rate
  spike, to show the guards acting on a real collapse; the update's scheduler step restores the
  configured lr after it);
- ``GIGPO_DEBUG_SLOW_RANK=<rank>:<phase>:<seconds>`` sleeps that rank at each ``<phase>`` (also
  ``before_run``, as the loop starts): whatever rank is slow, the ranks must decide alike;
- ``GIGPO_DEBUG_KILL_SAMPLER_AT=<iteration>`` makes the off-policy sampler process
  (``gigpo.train.offpolicy``) exit as it starts that iteration's collect, once per run.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

Hook = Callable[[Any, int, str], None]  # (trainer, iteration, phase) -> None


def _kill_at(at: str) -> Hook:
    def hook(trainer, iteration: int, phase: str) -> None:
        if at == f"{iteration}:{phase}":
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def _slow_rank(at: str) -> Hook:
    rank, when, seconds = at.split(":")

    def hook(trainer, iteration: int, phase: str) -> None:
        if phase == when and trainer.dist.rank == int(rank):
            time.sleep(float(seconds))

    return hook


def _lr_at(at: str) -> Hook:
    it, lr = at.split(":")

    def hook(trainer, iteration: int, phase: str) -> None:
        if phase == "before_update" and str(iteration) == it:
            for g in trainer.updater.optimizer.param_groups:
                g["lr"] = float(lr)

    return hook


def hooks_from_env(environ=os.environ) -> list[Hook]:
    """The phase hooks the ``GIGPO_DEBUG_*`` variables ask for (none in a normal run)."""
    hooks = []
    if environ.get("GIGPO_DEBUG_SIGKILL_AT"):
        hooks.append(_kill_at(environ["GIGPO_DEBUG_SIGKILL_AT"]))
    if environ.get("GIGPO_DEBUG_SLOW_RANK"):
        hooks.append(_slow_rank(environ["GIGPO_DEBUG_SLOW_RANK"]))
    if environ.get("GIGPO_DEBUG_LR_AT"):
        hooks.append(_lr_at(environ["GIGPO_DEBUG_LR_AT"]))
    return hooks


def sampler_fault(run_dir, iteration: int, environ=os.environ) -> None:
    """Called by the sampler process before each collect: exits it at ``GIGPO_DEBUG_KILL_SAMPLER_AT``'s
    iteration, the first time only (a marker file in the run directory), as a crash would."""
    if environ.get("GIGPO_DEBUG_KILL_SAMPLER_AT") != str(iteration):
        return
    marker = os.path.join(run_dir, f".sampler-killed-{iteration}")
    if not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(17)
