"""The report's figures, rendered with matplotlib (Agg) to base64 PNG so the page opens offline.

Each builder returns a list of ``Panel``; a panel whose data is absent from the run carries a
``note`` instead of an image (the page then says what is missing rather than the report failing).
Metric names follow docs/metrics.md (``rollout/*`` for training rollouts, ``eval/*`` for held-out
evaluations, ``actor/*`` from the update, ``step_groups/*``, ``time/*``).
"""

from __future__ import annotations

import base64
import io
import math
import re
from dataclasses import dataclass

import numpy as np

from gigpo.report.data import RunData, as_float, read_trajectory_rows, series

# Time per phase of one iteration, in the order the trainer runs them (the paper's cost breakdown,
# arXiv:2505.10978 s.5: GiGPO's grouping adds only the small "advantage" slice).
PHASES = (
    ("time/rollout", "rollout"),
    ("time/old_logprob", "old log-probs"),
    ("time/ref_logprob", "reference log-probs"),
    ("time/advantage", "advantage"),
    ("time/update", "update"),
)

# (title, train key, held-out key, y label); either key may be None.
CURVES = (
    ("Success rate", "rollout/success", "eval/success", "success"),
    ("Score", "rollout/score", "eval/score", "score"),
    ("Episode length", "rollout/episode_length", "eval/episode_length", "steps"),
    ("Invalid-action rate", "rollout/invalid_action_rate", "eval/invalid_action_rate", "share of steps"),
    ("KL to reference", "actor/kl", None, "KL"),
    ("Entropy", "actor/entropy", None, "nats / token"),
    ("Sampled-token entropy estimate", "rollout/entropy_est", None, "nats / token"),
    ("Clip fraction", "actor/clipfrac", None, "share of tokens"),
    ("Gradient norm", "actor/grad_norm", None, "global L2 norm"),
)

# Drawn only for a run that trained off-policy (train.off_policy_steps >= 1, which logs train/staleness).
OFF_POLICY_CURVES = (
    ("Staleness of the trained rollouts", "train/staleness", None, "updates behind the learner"),
    ("Behaviour weight (mean)", "actor/behav_weight_mean", None, "pi_prox / pi_behav"),
    ("Behaviour weight (largest)", "actor/behav_weight_max", None, "pi_prox / pi_behav"),
    ("KL behaviour to proximal", "actor/behav_kl_k3", None, "k3 / token"),
)

_HIST = re.compile(r"^step_groups/hist_(\d+)(?:-(\d+)|(\+))?$")

# Long runs: a curve is drawn from at most MAX_POINTS bucket means (shaded from the bucket's min to
# its max), a bar chart from at most MAX_BARS bars; the first and last iteration stay on the axis.
MAX_POINTS = 1000
MAX_BARS = 100

_PLOTTED = frozenset(
    [k for _, tk, ek, _ in CURVES + OFF_POLICY_CURVES for k in (tk, ek) if k]
    + [k for k, _ in PHASES]
    + ["val/success", "step_groups/share_rows_in_size_gt1", "train/no_signal"]
)


def report_key(key: str) -> bool:
    """Whether the report reads metric ``key`` (``load_run(..., keep=report_key)`` holds only these)."""
    return key in _PLOTTED or key.startswith("step_groups/hist_")


@dataclass
class Thinned:
    """A series as drawn: ``x``, ``y`` (K,), and when bucketed the bucket's ``lo``/``hi`` (K,)
    and ``per`` = iterations (points) per bucket; ``per`` 1 and lo = hi = y when not bucketed."""

    x: np.ndarray
    y: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    per: int = 1


def thin(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> Thinned:
    """``(x, y)`` as at most ``max_points`` bucket means of consecutive points, in O(len(x)).

    A bucket's point sits at the mean x of its points, except that the first and last points sit
    at ``x[0]`` and ``x[-1]`` (the first and last iteration stay on the axis); ``lo``/``hi`` are
    the bucket's min and max.
    """
    n = len(x)
    if n <= max_points:
        return Thinned(x, y, y, y)
    starts = np.linspace(0, n, max_points, endpoint=False).astype(np.int64)
    counts = np.diff(np.append(starts, n))
    bx = np.add.reduceat(x, starts) / counts
    by = np.add.reduceat(y, starts) / counts
    bx[0], bx[-1] = x[0], x[-1]
    return Thinned(bx, by, np.minimum.reduceat(y, starts), np.maximum.reduceat(y, starts), int(counts.max()))


def bucket_bars(its: list[int], values: np.ndarray, max_bars: int = MAX_BARS) -> tuple[list[str], np.ndarray, int]:
    """Rows of ``values`` [I, K] (one per iteration of ``its``) averaged over at most ``max_bars``
    buckets of consecutive iterations: (tick labels: each bucket's first iteration, means [B, K],
    iterations per bucket, at most)."""
    n = len(its)
    if n <= max_bars:
        return [str(i) for i in its], values, 1
    starts = np.linspace(0, n, max_bars, endpoint=False).astype(np.int64)
    ends = np.append(starts[1:], n)
    means = np.add.reduceat(values, starts, axis=0) / (ends - starts)[:, None]
    labels = [str(its[a]) for a in starts]
    return labels, means, int((ends - starts).max())


@dataclass
class Panel:
    """One figure of the report: ``png`` (base64) or, when its data is absent, ``note``."""

    key: str  # stable id, used as the HTML element id (``plot-<key>``)
    title: str
    png: str | None = None
    note: str | None = None


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # headless, deterministic; never opens a window
    import matplotlib.pyplot as plt

    return plt


def MaxNLocator(**kw):
    from matplotlib.ticker import MaxNLocator as M

    return M(**kw)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _plt().close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _slug(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", s.lower()).strip("-")


def curve_panels(run: RunData) -> list[Panel]:
    """Training (per iteration) and held-out (per evaluation) curves, one panel per metric."""
    plt = _plt()
    out = []
    off_policy = len(series(run.train, "train/staleness")[1]) > 0
    for title, tk, ek, ylabel in CURVES + (OFF_POLICY_CURVES if off_policy else ()):
        tx, ty = series(run.train, tk) if tk else (np.empty(0), np.empty(0))
        ex, ey = series(run.evals, ek) if ek else (np.empty(0), np.empty(0))
        if not len(ty) and not len(ey):
            keys = " / ".join(k for k in (tk, ek) if k)
            out.append(Panel(_slug(title), title, note=f"not logged in this run ({keys})"))
            continue
        fig, ax = plt.subplots(figsize=(4.2, 2.7))
        per = 1
        if len(ty):
            t = thin(tx, ty)
            per = t.per
            if t.per > 1:
                ax.fill_between(t.x, t.lo, t.hi, color="#1f77b4", alpha=0.2, lw=0)
            ax.plot(
                t.x,
                t.y,
                "-",
                color="#1f77b4",
                lw=1.5,
                marker="o" if len(t.y) < 30 else None,
                ms=3,
                label="training rollouts",
            )
        if len(ey):
            e = thin(ex, ey)
            ax.plot(
                e.x, e.y, "--", color="#d62728", lw=1.5, marker="s" if len(e.y) < 30 else None, ms=4, label="held-out"
            )
        if tk == "rollout/success" and run.vals:
            vx, vy = series(run.vals, "val/success")
            if len(vy):
                v = thin(vx, vy)
                ax.plot(
                    v.x,
                    v.y,
                    ":",
                    color="#2ca02c",
                    lw=1.5,
                    marker="^" if len(v.y) < 30 else None,
                    ms=4,
                    label="validation",
                )
        for ev in run.events if tk == "rollout/success" else ():
            ax.axvline(float(ev["iteration"]), color="#9467bd", lw=1, alpha=0.7)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))  # 5-digit iterations stay apart
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if len(ty) and (len(ey) or (tk == "rollout/success" and run.vals)):
            ax.legend(fontsize=7)
        note = f"{len(tx):,} iterations: mean of every {per} drawn, shaded from min to max" if per > 1 else None
        out.append(Panel(_slug(title), title, png=_png(fig), note=note))
    return out


def _bin_label(m: re.Match) -> tuple[int, str]:
    lo = int(m.group(1))
    if m.group(3):
        return lo, f"{lo}+"
    return lo, f"{lo}-{m.group(2)}" if m.group(2) else str(lo)


# Bins used when counting from trajectory files; the same as the trainer's step_group_metrics.
_BINS = ((1, 1, "1"), (2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 10**9, "9+"))


def group_size_table(run: RunData) -> tuple[list[int], list[str], np.ndarray, np.ndarray, str]:
    """Step-group size histogram per iteration.

    Returns (iterations [I], bin labels [K], counts [I, K] = number of step groups per size bin,
    share [I] = share of rows in groups of size > 1 (nan if unknown), source description).
    Reads the trainer's ``step_groups/hist_*`` metrics; falls back to counting the ``step_group``
    labels in trajectories/ files (only the iterations that were written) when those are absent.
    """
    seen: set[str] = set()
    for r in run.train:
        seen.update(r.keys())  # the key set once, then the regex on distinct keys only
    bins: dict[str, int] = {}
    for k in seen:
        m = _HIST.match(k)
        if m:
            bins[k] = _bin_label(m)[0]
    if bins:
        keys = sorted(bins, key=bins.get)
        rows = [r for r in run.train if any(as_float(r.get(k)) is not None for k in keys)]
        counts = np.array([[as_float(r.get(k)) or 0.0 for k in keys] for r in rows], dtype=np.float64)
        share = np.array(
            [v if (v := as_float(r.get("step_groups/share_rows_in_size_gt1"))) is not None else np.nan for r in rows]
        )
        labels = [_bin_label(_HIST.match(k))[1] for k in keys]
        return [int(r["iteration"]) for r in rows], labels, counts, share, "metrics.jsonl"
    its, counts, share = [], [], []
    for it, path in run.trajectories.items():
        labels = [r.get("step_group") for r in read_trajectory_rows(path, run.problems)]
        g = np.array([int(x) for x in labels if isinstance(x, (int, float)) and x >= 0])
        if not len(g):
            continue
        _, sizes = np.unique(g, return_counts=True)
        its.append(it)
        counts.append([((sizes >= lo) & (sizes <= hi)).sum() for lo, hi, _ in _BINS])
        share.append(sizes[sizes > 1].sum() / len(g))
    return (
        its,
        [b[2] for b in _BINS],
        np.array(counts, dtype=np.float64).reshape(len(its), len(_BINS)),
        np.array(share, dtype=np.float64),
        "trajectories/",
    )


def group_size_panels(run: RunData) -> list[Panel]:
    """Figure 7 of the paper: the distribution of anchor-state step-group sizes over training.

    Early on, looping policies revisit the same state many times (large groups); later most
    groups hold about one step per rollout (sizes near the group size n).
    """
    title = "Step-group size distribution"
    its, labels, counts, share, source = group_size_table(run)
    if not its:
        return [
            Panel(
                "group-sizes",
                title,
                note="no step-group statistics in this run (the estimator "
                "has no step groups, e.g. grpo/rloo, or nothing was logged)",
            )
        ]
    plt = _plt()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.0), gridspec_kw={"width_ratios": [3, 2]})
    tot = counts.sum(axis=1, keepdims=True)
    frac = np.divide(counts, tot, out=np.zeros_like(counts), where=tot > 0)  # (I, K) share of groups
    ticks, frac, per = bucket_bars(its, frac)  # long runs: mean shares over buckets of iterations
    x = np.arange(len(ticks))
    bottom = np.zeros(len(ticks))
    cmap = plt.get_cmap("viridis")
    for k, lab in enumerate(labels):
        ax.bar(x, frac[:, k], bottom=bottom, color=cmap(k / max(1, len(labels) - 1)), label=f"size {lab}", width=0.85)
        bottom += frac[:, k]
    step = max(1, len(ticks) // (5 if per > 1 else 12))
    ax.set_xticks(x[::step], ticks[::step], fontsize=7)
    ax.set_xlabel("iteration")
    ax.set_ylabel("share of step groups")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title("group-size histogram per iteration" + (f" (mean of {per})" if per > 1 else ""), fontsize=10)
    ok = np.isfinite(share)
    if ok.any():
        t = thin(np.asarray(its, dtype=np.float64)[ok], share[ok])
        ax2.plot(t.x, t.y, "-o" if len(t.y) < 60 else "-", ms=3, color="#2ca02c")
        ax2.set_ylim(0, 1.02)
        ax2.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=5))
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("share of rows")
    ax2.set_title("rows in step groups of size > 1", fontsize=10)
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    more = f"; {len(its):,} iterations, each bar the mean of up to {per}" if per > 1 else ""
    return [Panel("group-sizes", title, png=_png(fig), note=f"source: {source}{more}")]


def timing_table(run: RunData) -> tuple[list[int], list[str], np.ndarray]:
    """(iterations [I], phase labels [P], seconds [I, P]) for the phases that were logged."""
    present = [(k, lab) for k, lab in PHASES if any(as_float(r.get(k)) is not None for r in run.train)]
    rows = [r for r in run.train if any(as_float(r.get(k)) is not None for k, _ in present)]
    secs = np.array([[max(0.0, as_float(r.get(k)) or 0.0) for k, _ in present] for r in rows], dtype=np.float64)
    return [int(r["iteration"]) for r in rows], [lab for _, lab in present], secs.reshape(len(rows), len(present))


def timing_panels(run: RunData) -> list[Panel]:
    """Stacked bars of seconds per phase per iteration."""
    title = "Time per phase"
    its, labels, secs = timing_table(run)
    if not its or not labels:
        return [Panel("timing", title, note="no time/* metrics logged in this run")]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    ticks, bars, per = bucket_bars(its, secs)  # long runs: mean seconds over buckets of iterations
    x = np.arange(len(ticks))
    bottom = np.zeros(len(ticks))
    colors = plt.get_cmap("tab10")
    for p, lab in enumerate(labels):
        ax.bar(x, bars[:, p], bottom=bottom, label=lab, color=colors(p), width=0.85)
        bottom += bars[:, p]
    step = max(1, len(ticks) // (5 if per > 1 else 12))
    ax.set_xticks(x[::step], ticks[::step], fontsize=7)
    ax.set_xlabel("iteration")
    ax.set_ylabel("seconds" if per == 1 else "seconds per iteration")
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title("time per phase per iteration" + (f" (mean of {per})" if per > 1 else ""), fontsize=10)
    total = secs.sum()
    shares = (
        ", ".join(f"{lab} {100 * secs[:, p].sum() / total:.1f}%" for p, lab in enumerate(labels))
        if total > 0 and math.isfinite(total)
        else ""
    )
    return [Panel("timing", title, png=_png(fig), note=f"share of logged time: {shares}" if shares else None)]
