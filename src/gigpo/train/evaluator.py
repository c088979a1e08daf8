"""Held-out evaluation and validation during a run: one rollout per task at the eval temperature.

Both use the same sampling seeds every time (``seeds.EVAL``, ``seeds.VALIDATION`` at iteration 0):
a model scores the same each time, and before/after compare on common random numbers (paired,
less noise).
"""

from __future__ import annotations

import time
from typing import Callable

from gigpo.train import seeds
from gigpo.train.collect import sampling_params

VAL_KEYS = ("success", "score", "episode_length", "num_trajectories")


def won_per_task(batch, tasks) -> str:
    """ "1"/"0" per task of ``tasks`` (one rollout each), in their order: a compact per-task record
    that two evals on the same tasks compare task by task (``paired_change``)."""
    won = dict(zip(batch.traj_task_id, batch.traj_won))
    return "".join("1" if won.get(t.task_id) else "0" for t in tasks)


def paired_change(before: dict, after: dict) -> tuple[float, float] | None:
    """(change of held-out success, its paired standard error) from two evals' ``eval/won_per_task``
    on the same tasks: the standard error of the mean per-task difference. None without them."""
    a, b = before.get("eval/won_per_task"), after.get("eval/won_per_task")
    if not a or not b or len(a) != len(b) or len(a) < 2:
        return None
    import numpy as np

    d = np.array([int(y) - int(x) for x, y in zip(a, b)], dtype=float)
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(len(d)))


class Evaluator:
    """``run(pool, seed)`` rolls out ``pool`` once per task with the sampler that ``sampler()``
    returns, ready with the current weights (rank 0 only)."""

    def __init__(self, cfg, envs, agent, tokenizer, sampler: Callable) -> None:
        self.cfg, self.envs, self.agent, self.tokenizer, self.sampler = cfg, envs, agent, tokenizer, sampler

    def run(self, pool, seed: int, progress=None) -> tuple[dict, float]:
        """(rollout metrics, seconds); ``progress(done, total)`` is told as episodes end. The metrics
        include ``won_per_task``: "1"/"0" per task of ``pool``, in its order (paired comparisons)."""
        from gigpo.rollout import eval_rollout

        t0 = time.perf_counter()
        params = sampling_params(self.cfg, self.cfg.rollout.eval_temperature, seed)
        batch, m = eval_rollout(self.envs, pool, self.sampler(), self.tokenizer, self.agent, params, progress=progress)
        m["won_per_task"] = won_per_task(batch, pool)
        return m, time.perf_counter() - t0

    def validation(self, pool, progress=None) -> dict:
        """``val/*`` metrics on the validation tasks (best-model selection)."""
        m, secs = self.run(pool, seeds.iteration_seed(self.cfg.seed, 0, seeds.VALIDATION), progress)
        return {f"val/{k}": v for k, v in m.items() if k in VAL_KEYS} | {"time/val": secs}

    def heldout(self, pool, progress=None) -> dict:
        """``eval/*`` metrics on the held-out tasks."""
        m, secs = self.run(pool, seeds.iteration_seed(self.cfg.seed, 0, seeds.EVAL), progress)
        return {f"eval/{k}": v for k, v in m.items()} | {"time/eval": secs}
