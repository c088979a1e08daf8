"""An iteration's metrics (docs/metrics.md) and the timer of its phases.

Every function here is pure over the iteration's batch and results, so each metric can be tested
alone; ``iteration_metrics`` assembles one ``metrics.jsonl`` line from them.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

import numpy as np

# Size bins of the logged histogram (``step_groups/hist_<bin>``; report.plots reads the same names).
HIST_BINS = ((1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 10**9, "9+"))


class PhaseTimer:
    """Wall seconds per phase as ``time/<phase>`` (verl's ``marked_timer``): ``with timer("update"):``.
    Phases may nest; an outer phase includes its inner ones."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.record(name, time.perf_counter() - t0)

    def record(self, name: str, seconds: float) -> None:
        self.times[f"time/{name}"] = self.times.get(f"time/{name}", 0.0) + seconds

    def skip(self, *names: str) -> None:
        """Phases that did not run this iteration, logged as 0 so every line has the same keys."""
        for n in names:
            self.times[f"time/{n}"] = 0.0


def stats(prefix: str, x) -> dict:
    """``<prefix>/{mean,std,min,max}`` of ``x``; {} when empty."""
    x = np.asarray(x, dtype=np.float64)
    if not len(x):
        return {}
    return {
        f"{prefix}/mean": float(x.mean()),
        f"{prefix}/std": float(x.std()),
        f"{prefix}/min": float(x.min()),
        f"{prefix}/max": float(x.max()),
    }


def step_group_metrics(step_groups: np.ndarray) -> dict:
    """``step_groups/*`` metrics from ``gigpo.advantages.step_group_stats``.

    step_groups  int [N]  step-group label per row (-1 = the estimator has none: GRPO/RLOO).
    Returns {} when no row has a step group, so those metrics are absent rather than zero.
    """
    from gigpo.advantages import step_group_stats

    st = step_group_stats(step_groups)
    if not st["num_groups"]:
        return {}
    out = {
        "step_groups/num_groups": st["num_groups"],
        "step_groups/share_rows_in_size_gt1": st["share_rows_in_groups_gt1"],
        "step_groups/mean_size": st["mean_group_size"],
        "step_groups/max_size": st["max_group_size"],
    }
    for lo, hi, name in HIST_BINS:
        out[f"step_groups/hist_{name}"] = int(sum(c for size, c in st["size_hist"].items() if lo <= size <= hi))
    return out


def anchor_metrics(batch, anchors, anchor: str) -> dict:
    """``anchor/*`` metrics: the chosen anchor's exact step groups, the observation anchor's for
    comparison, and how often observation groups mix engine states.

    batch: the trained StepBatch; anchors: the keys ``anchor`` gave its rows (``step_anchors``).
    """
    from gigpo.advantages import exact_step_groups, state_mixing, step_group_stats

    if not batch.num_rows:
        return {}
    out: dict = {}

    def sizes(name: str, keys) -> None:
        st = step_group_stats(exact_step_groups(np.asarray(batch.episode_id), keys))
        out[f"anchor/{name}share_rows_in_size_gt1"] = st["share_rows_in_groups_gt1"]
        out[f"anchor/{name}mean_size"] = st["mean_group_size"]

    sizes("", anchors)
    if anchor != "observation":
        sizes("observation_", batch.anchor)
    st = batch.state_anchor
    out["anchor/state_rows_share"] = 0.0 if st is None else float(np.mean([s is not None for s in st]))
    mix = state_mixing(batch.episode_id, batch.anchor, st)
    if mix:
        out["anchor/state_mixed_share"] = mix["mixed_share"]
        out["anchor/state_mixed_rows_share"] = mix["mixed_rows_share"]
    return out


def entropy_estimate(batch) -> float:
    """Mean -log p of the sampled response tokens: a sample estimate of the policy's per-token
    entropy at the rollout temperature, free from the sampler's log-probs."""
    lps = [np.asarray(x, dtype=np.float64) for x in batch.logprobs if len(x)]
    return float(-np.concatenate(lps).mean()) if lps else 0.0


def rollout_phase_metrics(every) -> dict:
    """``rollout/*`` over everything sampled (faulted episodes and dropped groups included)."""
    from gigpo.rollout import rollout_metrics

    m = {f"rollout/{k}": v for k, v in rollout_metrics(every).items()}
    m["rollout/entropy_est"] = entropy_estimate(every)
    return m


def critic_metrics(values, token_returns) -> dict:
    """``critic/values_mean`` and ``critic/explained_variance`` of the values the advantages used."""
    from gigpo.learner.critic import explained_variance

    toks = [np.asarray(v, np.float64) for v in values if len(v)]
    out = {"critic/values_mean": float(np.concatenate(toks).mean()) if toks else 0.0}
    ev = explained_variance(values, token_returns)
    if np.isfinite(ev):  # no variance in the returns: the metric is left out, never NaN
        out["critic/explained_variance"] = ev
    return out


def credit_metrics(batch, credit, anchor: str) -> dict:
    """Returns, scores, advantages (all, episode-level, step-level), step groups and anchors of
    the trained batch (``credit``: a ``gigpo.train.credit.Credit``)."""
    res = credit.result
    # no row with a non-zero advantage: the update cannot change the policy (every group tied)
    m = {"train/no_signal": int(not np.any(np.abs(np.asarray(res.advantages, dtype=np.float64)) > 1e-8))}
    m |= stats("return", credit.step_returns) | stats("score", credit.scores) | stats("advantage", res.advantages)
    m |= stats("advantage_episode", res.episode_advantages) | stats("advantage_step", res.step_advantages)
    return m | step_group_metrics(res.step_groups) | anchor_metrics(batch, credit.anchors, anchor)


def token_metrics(batch) -> dict:
    resp_len = batch.response_lengths()
    return {
        "tokens/response": int(resp_len.sum()),
        "tokens/prompt": int(sum(len(p) for p in batch.prompt_ids)),
        "tokens/response_mean": float(resp_len.mean()) if len(resp_len) else 0.0,
    }


def rss_gb() -> float:
    """This process's resident memory (GiB): current on Linux, the peak elsewhere."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError, IndexError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
        return peak / (2**30 if sys.platform == "darwin" else 2**20)


def iteration_metrics(trainer, batch, credit, upd: dict, crit: dict, n_rows: int, counters: dict, timer) -> dict:
    """The iteration's ``train`` line past the rollout's own metrics: the update's (``actor/*``,
    ``critic/*``), credit, counters, tokens, phase times and memory."""
    m = {f"actor/{k}": v for k, v in upd.items()}
    if trainer.critic is not None:
        m |= critic_metrics(credit.values, credit.result.token_returns)
        m |= {f"critic/{k}": v for k, v in crit.items()}
    m |= credit_metrics(batch, credit, trainer.cfg.algorithm.anchor) | counters
    m |= {"train/rows_updated": n_rows, "guard/rollbacks": trainer.watchdog.rollbacks}
    if trainer.server is not None:
        m["rollout/server_restarts"] = trainer.server.restarts
    m |= {"guard/lr_scale": trainer.updater.lr_scale} | token_metrics(batch) | timer.times
    m["system/rss_gb"] = rss_gb()
    dist = trainer.dist
    if dist.device.startswith("cuda"):  # the largest over the ranks
        import torch

        m["system/gpu_peak_gb"] = dist.max_int(torch.cuda.max_memory_allocated() >> 20) / 1024
    return m
