"""Reading a run directory (``runs/<name>/``) for the report, tolerant of missing pieces.

A run directory holds (see docs/architecture.md):
    config.yaml          the resolved config (``gigpo.train.config.save_config``)
    metrics.jsonl        one JSON object per line: ``{"iteration": int, "tag": str, <metric>: value}``;
                         ``tag`` is ``train`` for training iterations and ``eval``, ``eval_before``
                         or ``eval_final`` for held-out evaluations (docs/metrics.md names the keys)
    trajectories/        ``iter_<NNNNNN>.jsonl``, one JSON object per agent step
                         (``gigpo.rollout.write_trajectories_jsonl``)

Nothing here is required except the directory itself: a run killed before its first iteration
still gets a report that says what is missing. Unreadable lines are skipped and counted in
``RunData.problems`` instead of failing the whole report.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import yaml

_TRAJ_FILE = re.compile(r"iter_(\d+)\.jsonl$")


@dataclass
class RunData:
    """Everything the report reads from one run directory."""

    run_dir: Path
    name: str
    config: dict  # nested dict from config.yaml ({} when absent)
    train: list[dict]  # metrics lines with tag "train", sorted by iteration
    evals: list[dict]  # lines whose tag starts with "eval", sorted by iteration
    trajectories: dict[int, Path]  # iteration -> trajectories/iter_*.jsonl
    problems: list[str] = field(default_factory=list)  # human-readable notes on what was skipped
    events: list[dict] = field(default_factory=list)  # lines with tag "guard" (watchdog rollbacks)
    vals: list[dict] = field(default_factory=list)  # validation results: tag "val" lines and train
    # lines that carry val/success

    def cfg(self, dotted: str, default=None):
        """A config value by dotted key (``"env.group_size"``), or ``default`` when absent."""
        node = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node


def as_float(v) -> float | None:
    """``v`` as a finite-or-nan float; None when it is not a number (bools count as numbers).

    The metrics logger writes non-finite floats as the strings ``"nan"``/``"inf"``; those map
    back to floats so a diverged value shows as a gap rather than crashing a plot.
    """
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "+inf"):
        return float(v)
    return None


def series(rows: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(iterations, values) of ``key`` over ``rows``, keeping only rows where it is a finite number.

    Both arrays have shape (K,), K <= len(rows); iterations are float for plotting.
    """
    xs, ys = [], []
    for r in rows:
        y = as_float(r.get(key))
        x = as_float(r.get("iteration"))
        if y is None or x is None or not math.isfinite(y):
            continue
        xs.append(x)
        ys.append(y)
    return np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64)


def _iter_jsonl(path: Path, problems: list[str]) -> Iterator[dict]:
    """The JSON objects of ``path``, one line at a time (a file of any length in constant memory)."""
    bad = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                bad += 1  # e.g. a half-written last line of a killed run
                continue
            if isinstance(obj, dict):
                yield obj
            else:
                bad += 1
    if bad:
        problems.append(f"{path.name}: skipped {bad} unreadable line(s)")


def _read_jsonl(path: Path, problems: list[str]) -> list[dict]:
    return list(_iter_jsonl(path, problems))


def load_run(run_dir, keep: Callable[[str], bool] | None = None) -> RunData:
    """Read ``run_dir``; raises FileNotFoundError when it is not a run directory.

    ``keep``: which metric keys of train, eval and val lines to hold (``iteration`` and ``tag``
    always; guard lines whole); None holds every key. metrics.jsonl is read one line at a time,
    so with a ``keep`` of the few plotted keys (``gigpo.report.plots.report_key``) a run of
    50,000 iterations of ~80 metrics each takes tens of MB instead of GBs.
    """
    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(
            f"run directory {str(run)!r} does not exist; pass a directory made by "
            "`gigpo train` (e.g. runs/alfworld_tiny)"
        )
    has_any = (run / "config.yaml").exists() or (run / "metrics.jsonl").exists()
    if not has_any:
        raise FileNotFoundError(
            f"{str(run)!r} has neither config.yaml nor metrics.jsonl; is it a run directory made by `gigpo train`?"
        )
    problems: list[str] = []
    config: dict = {}
    if (run / "config.yaml").exists():
        try:
            loaded = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
            config = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as e:
            problems.append(f"config.yaml could not be parsed ({e.__class__.__name__}); config summary omitted")
    else:
        problems.append("no config.yaml: config summary omitted")
    train, evals, events, vals = [], [], [], []
    if (run / "metrics.jsonl").exists():
        for row in _iter_jsonl(run / "metrics.jsonl", problems):
            tag = str(row.get("tag", "train"))
            if as_float(row.get("iteration")) is None:
                continue
            if keep is not None and tag != "guard":
                row = {k: v for k, v in row.items() if k in ("iteration", "tag") or keep(k)}
            {"guard": events, "val": vals}.get(tag, evals if tag.startswith("eval") else train).append(row)
            if tag == "train" and "val/success" in row:
                vals.append(row)
    else:
        problems.append("no metrics.jsonl: curves omitted")
    train.sort(key=lambda r: r["iteration"])
    evals.sort(key=lambda r: r["iteration"])
    vals.sort(key=lambda r: r["iteration"])
    trajs = {}
    tdir = run / "trajectories"
    if tdir.is_dir():
        for p in tdir.iterdir():
            m = _TRAJ_FILE.search(p.name)
            if m:
                trajs[int(m.group(1))] = p
    name = config.get("name") if isinstance(config.get("name"), str) else None
    return RunData(
        run_dir=run,
        name=name or run.name,
        config=config,
        train=train,
        evals=evals,
        trajectories=dict(sorted(trajs.items())),
        problems=problems,
        events=events,
        vals=vals,
    )


def read_trajectory_rows(path: Path, problems: list[str] | None = None) -> list[dict]:
    """The step rows of one ``trajectories/iter_*.jsonl`` file (see module docstring)."""
    return _read_jsonl(Path(path), problems if problems is not None else [])


def eval_summary(run: RunData, key: str = "eval/success") -> dict:
    """Held-out figures: ``before`` (eval_before), ``final`` (eval_final, else the last eval line),
    ``best`` and ``best_iteration``; each None when there is no such line."""
    out = {"before": None, "final": None, "best": None, "best_iteration": None}
    vals = [(r, as_float(r.get(key))) for r in run.evals]
    vals = [(r, v) for r, v in vals if v is not None and math.isfinite(v)]
    if not vals:
        return out
    before = [v for r, v in vals if r.get("tag") == "eval_before"]
    final = [v for r, v in vals if r.get("tag") == "eval_final"]
    out["before"] = before[0] if before else None
    out["final"] = final[-1] if final else vals[-1][1]
    best_row, best = max(vals, key=lambda rv: rv[1])
    out["best"], out["best_iteration"] = best, int(best_row["iteration"])
    return out
