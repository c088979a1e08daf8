"""The collect phase of an iteration: rollout rounds, faulted episodes set aside, dynamic sampling.

Episodes that ended in an env fault (exception, timeout, dead worker) are left out of the trained
batch and of their group's statistics: a fault is not the policy's failure. With
``train.dynamic_sampling``, groups without signal (``group_has_signal``) are dropped and more tasks
are rolled out (at most ``dynamic_sampling_rounds`` more rounds, sized by ``next_round_size``)
until ``tasks_per_iter`` groups have signal; groups beyond that are dropped, as in DAPO.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from gigpo.batch import concat_batches, select_trajectories
from gigpo.train import seeds


class RunStopped(RuntimeError):
    """The run cannot go on usefully (most episodes end in env faults); the message says why."""


def group_has_signal(batch, advantages, tol: float = 1e-8) -> np.ndarray:
    """bool [E] per episode group: some row's advantage is non-zero. Groups without signal
    (every rollout tied, GRPO/RLOO; or also no step-level differences, GiGPO) give no gradient."""
    n_eps = int(batch.traj_episode_id.max()) + 1 if batch.num_trajectories else 0
    out = np.zeros(n_eps, dtype=bool)
    nz = np.abs(np.asarray(advantages, dtype=np.float64)) > tol
    out[np.asarray(batch.episode_id)[nz]] = True
    return out


def next_round_size(want: int, have: int, n_signal: int, n_sampled: int) -> int:
    """Tasks to roll out in the next dynamic-sampling round: enough to fill the ``want - have``
    missing groups at the signal rate seen so far (counted as at least 1 in 4, so a bad start does
    not ask for an unbounded round), never more than ``want``."""
    rate = max(n_signal / n_sampled, 0.25)
    return min(want, int(np.ceil((want - have) / rate)))


def num_groups(batch) -> int:
    return int(batch.traj_episode_id.max()) + 1 if batch.num_trajectories else 0


def sample_tasks(cfg, pool: list, iteration: int, round_: int = 0, k: int | None = None) -> list:
    """``k`` (default ``env.tasks_per_iter``) tasks of ``pool`` for ``iteration``'s rollout round
    ``round_``: a pure function of (seed, iteration, round)."""
    rng = np.random.default_rng(seeds.iteration_seed(cfg.seed, iteration, seeds.tasks_stream(round_)))
    n, k = len(pool), k or cfg.env.tasks_per_iter
    idx = rng.choice(n, size=k, replace=n < k)
    return [pool[i] for i in idx]


def sampling_params(cfg, temperature: float, seed: int):
    from gigpo.policy.base import SamplingParams

    r = cfg.rollout
    return SamplingParams(temperature=temperature, top_p=r.top_p, max_new_tokens=r.max_response_tokens, seed=seed)


class Collector:
    """Rolls out an iteration's task groups on the training envs.

    ``advantages(batch)`` gives the rows' advantages (dynamic sampling keeps the groups where some
    are non-zero); ``run_dir`` only names the resume command in ``RunStopped``'s message.
    """

    def __init__(self, cfg, pool: list, envs, agent, tokenizer, advantages: Callable, run_dir) -> None:
        self.cfg, self.pool, self.envs, self.agent, self.tokenizer = cfg, pool, envs, agent, tokenizer
        self.advantages, self.run_dir = advantages, run_dir

    def round(self, generator, it: int, round_: int, k: int):
        """One rollout of ``k`` task groups: (StepBatch, error messages of faulted episodes)."""
        from gigpo.rollout import rollout

        cfg = self.cfg
        tasks = sample_tasks(cfg, self.pool, it, round_, k)
        seed = seeds.iteration_seed(cfg.seed, it, seeds.rollout_stream(round_))
        params = sampling_params(cfg, cfg.rollout.temperature, seed)
        batch = rollout(self.envs, tasks, generator, self.tokenizer, self.agent, params)
        return batch, [r.error for r in self.envs.results() if r.failed and r.error]

    def collect(self, generator, it: int):
        """The iteration's rollouts: (everything sampled, the batch to train on, counters)."""
        cfg = self.cfg
        want = cfg.env.tasks_per_iter
        sampled, kept, errors = [], [], []
        n_groups = n_signal = 0
        round_, k = 0, want
        while True:
            batch, errs = self.round(generator, it, round_, k)
            sampled.append(batch)
            errors += errs
            clean = select_trajectories(batch, ~batch.traj_failed)
            n_groups += k
            if not cfg.train.dynamic_sampling:
                kept.append(clean)
                break
            sig = group_has_signal(clean, self.advantages(clean)) if clean.num_rows else np.zeros(0, bool)
            n_signal += int(sig.sum())
            if sig.any():
                kept.append(select_trajectories(clean, sig[clean.traj_episode_id]))
            have = sum(num_groups(b) for b in kept)
            if have >= want or round_ >= cfg.train.dynamic_sampling_rounds:
                break
            round_ += 1
            k = next_round_size(want, have, n_signal, n_groups)
        every = concat_batches(sampled)
        n_failed = int(every.traj_failed.sum())
        if n_failed and n_failed * 2 > every.num_trajectories:
            first = errors[0] if errors else "no error message"
            raise RunStopped(
                f"{n_failed} of {every.num_trajectories} episodes in iteration {it} ended in env "
                f"faults (first: {first}); fix the env (env.kwargs, env.executor, timeouts) and "
                f"resume with --resume {self.run_dir}"
            )
        train = concat_batches(kept) if kept else select_trajectories(every, np.zeros(every.num_trajectories, bool))
        if cfg.train.dynamic_sampling and train.num_trajectories:
            eps = np.arange(num_groups(train))
            train = select_trajectories(train, (eps < want)[train.traj_episode_id])
        counters = {
            "train/rollout_rounds": round_ + 1,
            "train/groups_sampled": n_groups,
            "train/groups_trained": num_groups(train),
            "train/episodes_faulted": n_failed,
        }
        if cfg.train.dynamic_sampling:
            counters["train/groups_without_signal"] = n_groups - n_signal
        return every, train, counters
