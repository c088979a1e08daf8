"""How long a run will take, for ``gigpo train --dry-run``: from the timings of a run already in its
``output_dir`` with the same family, model, device and precision (the run itself when resumed).

Time per training episode (an iteration's wall time over its planned tasks x rollouts, so dynamic
sampling's extra rounds are in it) and per eval and validation episode, read from that run's
``metrics.jsonl`` and scaled by this run's counts. Nothing is measured at dry-run time: a probe of a
few seconds could not see how long episodes last, which sets an iteration's cost.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from gigpo.train.progress import eta_text

# what must agree for another run's seconds per episode to say something about this run's
SAME = (
    ("env", "family"),
    ("model", "name_or_path"),
    ("model", "device"),
    ("model", "dtype"),
    ("rollout", "backend"),
    ("train", "autocast"),
    ("env", "max_steps"),
    ("rollout", "max_response_tokens"),
)
MAX_RUNS_READ = 200  # newest first; an output_dir of thousands of runs stays quick


@dataclass
class Rates:
    """Seconds per episode measured in one run (``None``: that kind was never timed there)."""

    run_dir: Path
    train: float | None
    eval: float | None
    val: float | None
    eval_episodes: int | None  # an eval's episode count there (for env.eval_tasks=0, all of them)
    sft: float | None  # seconds its SFT build took, when it built one
    iterations_done: int


def _get(tree: dict, section: str, key: str):
    return (tree.get(section) or {}).get(key)


def _same(cfg, tree: dict) -> bool:
    return all(_get(tree, s, k) == getattr(getattr(cfg, s), k) for s, k in SAME)


def read_rates(run_dir: Path, tree: dict) -> Rates | None:
    """The run's seconds per episode, or None when it logged no timed line."""
    env = tree.get("env") or {}
    planned = (env.get("tasks_per_iter") or 0) * (env.get("group_size") or 0)
    train, evals, vals, n_eval, done = [], [], [], None, 0
    try:
        lines = (run_dir / "metrics.jsonl").read_text(errors="replace").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            r = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if not isinstance(r, dict):
            continue
        tag = r.get("tag")
        if tag == "train" and planned and r.get("time/iteration"):
            train.append(r["time/iteration"] / planned)
            done = max(done, int(r.get("iteration") or 0))
        elif tag in ("eval_before", "eval_final") and r.get("time/eval") and r.get("eval/num_trajectories"):
            evals.append(r["time/eval"] / r["eval/num_trajectories"])
            n_eval = int(r["eval/num_trajectories"])
        elif tag == "val" and r.get("time/val") and r.get("val/num_trajectories"):
            vals.append(r["time/val"] / r["val/num_trajectories"])
    if not (train or evals):
        return None
    sft = None
    try:
        sft = json.loads((run_dir / "phases.json").read_text()).get("sft")
    except (OSError, ValueError, AttributeError):
        pass
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731 (the first iteration's warm-up counts once)
    return Rates(run_dir, med(train), med(evals), med(vals), n_eval, sft if sft and sft > 5 else None, done)


def find_rates(cfg, *, resume: bool) -> Rates | None:
    """The timings of the run itself (resumed) or of the newest like run in ``cfg.output_dir``."""
    own = Path(cfg.run_dir)
    out = Path(cfg.output_dir).expanduser()
    try:
        dirs = sorted((p.parent for p in out.glob("*/config.yaml")), key=lambda d: d.stat().st_mtime, reverse=True)[
            :MAX_RUNS_READ
        ]
    except OSError:
        dirs = []
    if resume:
        dirs = [own, *(d for d in dirs if d.resolve() != own.resolve())]
    for d in dirs:
        try:
            tree = yaml.safe_load((d / "config.yaml").read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(tree, dict) and _same(cfg, tree):
            rates = read_rates(d, tree)
            if rates is not None and rates.train is not None:
                return rates
    return None


def sft_pending(cfg) -> bool:
    """The run would build its SFT start first (it is not cached)."""
    if not cfg.sft.enabled:
        return False
    from gigpo.policy.cache import models_dir
    from gigpo.train.sft import sft_key

    out = cfg.sft.output_dir or models_dir(cfg.model.cache_dir or None) / f"sft-{cfg.env.family}-{sft_key(cfg)}"
    return not Path(out).exists()


def estimate_lines(cfg, *, resume: bool, n_val: int) -> list[str]:
    """The dry run's time lines: the estimate and where it comes from, or why there is none."""
    e, t = cfg.env, cfg.train
    rates = find_rates(cfg, resume=resume)
    sft = sft_pending(cfg) and not resume
    sft_note = (
        f"; the SFT start is built first (sft.episodes={cfg.sft.episodes} expert episodes, then cached)" if sft else ""
    )
    if rates is None:
        return [
            f"time: no earlier run of {e.family} with {cfg.model.name_or_path} on {cfg.model.device} "
            f"(autocast {t.autocast}, max_steps {e.max_steps}) in {cfg.output_dir} to estimate from{sft_note}; "
            "a run prints its ETA after its first iteration"
        ]
    done = rates.iterations_done if resume and Path(rates.run_dir).resolve() == Path(cfg.run_dir).resolve() else 0
    left = max(t.iterations - done, 0)
    secs = left * e.tasks_per_iter * e.group_size * rates.train
    if rates.eval is not None:
        per_eval = (e.eval_tasks or rates.eval_episodes or 0) * rates.eval
        secs += per_eval * (1 + int(cfg.log.eval_before and not done))
    if rates.val is not None and t.iterations:
        secs += n_val * rates.val * left / t.iterations
    if sft and rates.sft:
        secs += rates.sft
        sft_note = f"; with the SFT build first ({eta_text(rates.sft)} there)"
    own = Path(rates.run_dir).resolve() == Path(cfg.run_dir).resolve()
    source = "this run's own iterations" if own else f"the timings of {rates.run_dir}"
    return [
        f"time: about {eta_text(secs)} for {left} iterations and the evaluations "
        f"({rates.train * e.tasks_per_iter * e.group_size:.1f}s an iteration), from {source}{sft_note}"
    ]
