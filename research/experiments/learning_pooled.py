"""Pool several learning comparisons of the same variants and seeds (e.g. bf16 and float32 updates).

Reads the per-run summaries ``research/learning.py`` wrote (``<dir>/<variant>-s<seed>.json``)
from two or more directories, and prints, per variant, the final held-out success of each
comparison, the per-seed difference between the first two, the pooled mean over all runs and
the pooled difference to a baseline variant paired by (comparison, seed). Runs reported from
another variant's (``same_run_as``, e.g. ``gigpo_no_step`` = GRPO) are left out. ``--plot``
draws every run's final success per variant, one marker per comparison, over the start's band.

    python research/experiments/learning_pooled.py research/results/alfworld:bf16 \\
        research/results/alfworld-fp32:float32 --plot research/results/alfworld-pooled.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import learning_report as R  # noqa: E402  (research/ is not a package)


def load(spec: str) -> tuple[str, dict[str, dict[int, dict]]]:
    """``DIR[:LABEL]`` -> (label, {variant: {seed: summary}}), aliased runs left out."""
    path, _, label = spec.partition(":")
    d = Path(path)
    summaries = R.read_summaries(d)
    if not summaries:
        raise SystemExit(f"no run summaries (*.json) in {d}; pass a directory research/learning.py wrote")
    runs: dict[str, dict[int, dict]] = {}
    for s in summaries:
        if "same_run_as" in s or R.final_eval(s) is None:
            continue
        runs.setdefault(s["variant"], {})[s["seed"]] = s
    return label or d.name, runs


def success(s: dict) -> float:
    return 100.0 * R.final_eval(s)["eval/success"]


def pooled(comparisons: list[tuple[str, dict]], baseline: str) -> dict:
    """Everything the table shows, as numbers: per variant the finals per comparison (seed order),
    the pooled finals, the first-two-comparison differences and the paired differences to
    ``baseline``; plus the start's success over all runs' evals before training."""
    variants = sorted({v for _, runs in comparisons for v in runs})
    out: dict = {"labels": [lab for lab, _ in comparisons], "variants": {}, "start": []}
    seen = set()
    for _, runs in comparisons:
        for by_seed in runs.values():
            for seed, s in by_seed.items():
                b = R.first_eval(s)
                if b is not None and seed not in seen:
                    seen.add(seed)
                    out["start"].append(100.0 * b["eval/success"])
    for v in variants:
        finals = [{seed: success(s) for seed, s in sorted(runs.get(v, {}).items())} for _, runs in comparisons]
        row = {"finals": finals, "pooled": [x for f in finals for x in f.values()]}
        if len(finals) >= 2:
            row["diff"] = [finals[1][k] - finals[0][k] for k in sorted(finals[0]) if k in finals[1]]
        if v != baseline:
            row["vs_baseline"] = [f[k] - success(runs[baseline][k])
                                  for f, (_, runs) in zip(finals, comparisons)
                                  for k in sorted(f) if k in runs.get(baseline, {})]
        out["variants"][v] = row
    return out


def _pts(xs: list[float]) -> str:
    return R.fmt(xs, scale=1.0)  # values are already in points


def table(p: dict, baseline: str) -> str:
    labels = p["labels"]
    head = ["variant"] + labels + ([f"{labels[1]} - {labels[0]}, per seed"] if len(labels) >= 2 else []) + \
        ["all runs", f"minus {baseline}, paired"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v, row in p["variants"].items():
        cells = [v] + [f"{_pts(list(f.values()))} ({', '.join(f'{x:.0f}' for x in f.values())})" for f in row["finals"]]
        if len(labels) >= 2:
            cells.append(", ".join(f"{d:+.0f}" for d in row["diff"]) or "-")
        cells.append(f"**{_pts(row['pooled'])}**")
        cells.append(_pts(row["vs_baseline"]) if "vs_baseline" in row else "-")
        lines.append("| " + " | ".join(cells) + " |")
    diffs = [d for row in p["variants"].values() for d in row.get("diff", [])]
    notes = [f"Start (held-out success before training, one value per seed): {_pts(p['start'])}."]
    if diffs:
        m, sd = R.mean_sd(diffs)
        notes.append(f"{labels[1]} minus {labels[0]} over all {len(diffs)} paired runs: mean {m:+.1f}, "
                     f"sd {sd:.1f} points.")
    return "\n".join(lines + [""] + notes)


def plot(p: dict, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    variants = list(p["variants"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    m, sd = R.mean_sd(p["start"])
    if m == m:
        ax.axhspan(m - (sd if sd == sd else 0), m + (sd if sd == sd else 0), color="grey", alpha=0.15,
                   label=f"start {_pts(p['start'])}")
        ax.axhline(m, color="grey", lw=0.8)
    markers = "os^Dv"
    for j, lab in enumerate(p["labels"]):
        off = (j - (len(p["labels"]) - 1) / 2) * 0.18
        for i, v in enumerate(variants):
            ys = list(p["variants"][v]["finals"][j].values())
            ax.scatter([i + off] * len(ys), ys, marker=markers[j % len(markers)], s=22, alpha=0.8,
                       color=f"C{j}", label=lab if i == 0 else None)
    for i, v in enumerate(variants):
        pm, _ = R.mean_sd(p["variants"][v]["pooled"])
        ax.plot([i - 0.3, i + 0.3], [pm, pm], color="black", lw=1.5, label="mean of all runs" if i == 0 else None)
    ax.set_xticks(range(len(variants)), variants, rotation=15, fontsize=8)
    ax.set_ylabel("final held-out success (%)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="+", metavar="DIR[:LABEL]", help="summary directories written by learning.py")
    ap.add_argument("--baseline", default="grpo", help="variant the paired differences are taken against")
    ap.add_argument("--plot", default=None, help="PNG path for the per-run plot")
    ap.add_argument("--title", default="final held-out success per run", help="plot title")
    a = ap.parse_args(argv)
    comparisons = [load(spec) for spec in a.dirs]
    if not any(a.baseline in runs for _, runs in comparisons):
        ap.error(f"baseline {a.baseline!r} is in none of the directories; pass --baseline VARIANT")
    p = pooled(comparisons, a.baseline)
    print(table(p, a.baseline))
    if a.plot:
        print(f"plot: {plot(p, Path(a.plot), a.title)}")
    return p


if __name__ == "__main__":
    main()
