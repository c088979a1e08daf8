"""The run report: ``gigpo report RUN_DIR`` writes ``RUN_DIR/report.html``.

One static page that opens from disk (no server, no network): the run's config summary and
held-out success, training/held-out curves, the step-group size distribution (paper Figure 7),
time per phase, and a trajectory viewer with anchor-state groups coloured.

    from gigpo.report import write_report
    write_report("runs/alfworld_tiny")        # -> Path("runs/alfworld_tiny/report.html")

Modules: ``data`` (reading a run directory), ``plots`` (matplotlib figures as base64 PNG),
``viewer`` (the capped trajectory digest), ``html`` (the page itself).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["write_report", "main"]

# (label, dotted config key) shown in the header.
SUMMARY_KEYS = (
    ("estimator", "algorithm.estimator"),
    ("model", "model.name_or_path"),
    ("env", "env.family"),
    ("group size (n)", "env.group_size"),
    ("tasks per iteration", "env.tasks_per_iter"),
    ("max steps", "env.max_steps"),
    ("iterations", "train.iterations"),
    ("learning rate", "train.lr"),
    ("gamma", "algorithm.gamma"),
    ("step advantage weight", "algorithm.step_weight"),
    ("KL coef", "train.kl_coef"),
    ("seed", "seed"),
)


def _signal_notes(run) -> list[str]:
    """A warning when iterations trained on no signal (``train/no_signal``: every advantage 0)."""
    flat = [r["iteration"] for r in run.train if r.get("train/no_signal")]
    if not flat:
        return []
    which = ", ".join(map(str, flat[:10])) + (", ..." if len(flat) > 10 else "")
    return [
        f"{len(flat)} of {len(run.train)} iterations trained on no signal (every advantage 0: all rollouts of "
        f"each task scored alike, so the policy did not change): iteration {which}. "
        "See docs/training.md, 'No signal'."
    ]


def _summary(run) -> list[tuple[str, str]]:
    # The KL coefficient only when the KL term is on (train.use_kl, on when an old config lacks it).
    skip = {"train.kl_coef"} if run.cfg("train.use_kl", True) is False else set()
    out = [(label, str(v)) for label, key in SUMMARY_KEYS if key not in skip and (v := run.cfg(key)) is not None]
    done = max([int(r["iteration"]) for r in run.train], default=0)
    out.append(("iterations logged", str(done)))
    for ev in run.events:  # watchdog rollbacks (purple lines in the success plot)
        out.append(
            (
                f"guard, iteration {ev.get('iteration')}",
                f"{ev.get('event', '?')} to iteration {ev.get('to_iteration', '?')}: {ev.get('reason', '')}"
                + (f" (stopped: {ev['stop']})" if ev.get("stop") else ""),
            )
        )
    return out


def write_report(run_dir, out: str | os.PathLike | None = None) -> Path:
    """Build the report of ``run_dir`` and write it to ``out`` (default ``run_dir/report.html``).

    Missing pieces (no evaluations, no trajectories, an estimator without step groups) become a
    note on the page, never an error; a path that is not a run directory raises FileNotFoundError.
    """
    from gigpo.report import html as H
    from gigpo.report.data import eval_summary, load_run
    from gigpo.report.plots import curve_panels, group_size_panels, report_key, timing_panels
    from gigpo.report.viewer import to_script_json, viewer_data

    run = load_run(run_dir, keep=report_key)  # only the plotted metrics: memory stays small
    curves, groups, timing = curve_panels(run), group_size_panels(run), timing_panels(run)
    vdata = viewer_data(run)
    parts = [
        H.section_html(
            "curves",
            "Training and held-out curves",
            "Solid: training rollouts (sampled at the training temperature), per iteration. "
            "Dashed: held-out evaluation on eval-split tasks.",
            curves,
        ),
        H.section_html(
            "group-sizes",
            "Step-group sizes (paper Figure 7)",
            "Share of anchor-state step groups by size per iteration, and the share of step "
            "rows that fall in a group of size &gt; 1 (rows that get a step-level advantage "
            "from a real comparison).",
            groups,
            wide=True,
        ),
        H.section_html(
            "timing",
            "Time per phase",
            "Wall-clock seconds of each phase of an iteration (the paper's cost breakdown).",
            timing,
            wide=True,
        ),
        H.viewer_html(to_script_json(vdata), vdata["notes"]),
    ]
    # Header last so problems found while reading trajectories are listed too.
    header = H.header_html(run.name, _summary(run), eval_summary(run), run.problems + _signal_notes(run))
    text = H.page(f"gigpo report: {run.name}", [header, *parts])
    path = Path(out) if out is not None else run.run_dir / "report.html"
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # a reader never sees a half-written page
    except BaseException:  # Ctrl-C or a full disk mid-write: no half-written .tmp left behind
        tmp.unlink(missing_ok=True)
        raise
    return path


def main(argv=None) -> int:
    """``gigpo report RUN_DIR [--out FILE]``: write the report and print its path.

    Exit codes: 0 written, 2 not a run directory, 130 Ctrl-C (``gigpo: interrupted``)."""
    p = argparse.ArgumentParser(
        prog="gigpo report",
        description="Write RUN_DIR/report.html: curves, step-group sizes, time per "
        "phase and a trajectory viewer, in one offline HTML file.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by `gigpo train` (runs/<name>)")
    p.add_argument("--out", help="where to write the page (default RUN_DIR/report.html)")
    args = p.parse_args(argv)
    try:
        path = write_report(args.run_dir, args.out)
    except FileNotFoundError as e:
        print(f"gigpo report: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; the old report.html (if any) is untouched
        print("gigpo: interrupted", file=sys.stderr)
        return 130
    print(f"report: {path}")
    return 0
