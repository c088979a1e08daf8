"""The run's random streams, by name.

Every random draw of iteration ``k`` comes from its own seed, ``iteration_seed(seed, k, stream)``, a
pure function of the three numbers: a resumed run draws what an uninterrupted one draws, and a
change in one phase (one more rollout round, say) never shifts another phase's draws.
"""

from __future__ import annotations

import random

import numpy as np
import torch

ITERATION = 0  # the global torch/numpy/random state at the start of an iteration
TASKS = 1  # which train tasks an iteration rolls out
ROLLOUT = 2  # the rollout's sampling seed
UPDATE = 3  # the policy update's mini-batch order
CRITIC_UPDATE = 4  # the critic update's mini-batch order
VALIDATION = 8  # validation rollouts (drawn at iteration 0: every validation samples alike)
EVAL = 9  # held-out evaluation rollouts (iteration 0, as validation)
_TASKS_ROUND = 100  # + r: the tasks of dynamic sampling's extra round r
_ROLLOUT_ROUND = 200  # + r: that round's sampling seed


def tasks_stream(round_: int) -> int:
    """The stream of round ``round_``'s task draw (round 0 is the iteration's batch)."""
    return TASKS if round_ == 0 else _TASKS_ROUND + round_


def rollout_stream(round_: int) -> int:
    """The stream of round ``round_``'s sampling seed."""
    return ROLLOUT if round_ == 0 else _ROLLOUT_ROUND + round_


def iteration_seed(seed: int, iteration: int, stream: int = ITERATION) -> int:
    """A 31-bit seed derived from (seed, iteration, stream) (independent of any RNG state)."""
    return int(np.random.SeedSequence([seed, iteration, stream]).generate_state(1)[0] & 0x7FFFFFFF)


def seed_all(s: int) -> None:
    """Seed Python's, numpy's and torch's global generators."""
    random.seed(s)
    np.random.seed(s)
    torch.manual_seed(s)
