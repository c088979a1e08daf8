"""Wall time per training iteration, rollout and update in series vs at the same time.

For each config, one short ``gigpo train`` run per mode, one after the other (the machine to one
run): ``train.off_policy_steps=0`` with the config's ``train.torch_threads`` and with one thread per
CPU, and
``train.off_policy_steps=K`` with one torch thread for the learner and one for the sampler process,
with each ``train.off_policy_loss`` (``decoupled`` adds a forward pass for the proximal log-probs).
Prints, per config and mode, the mean ``time/iteration`` over iterations 2.. (iteration 1 fills the
pipeline: nothing to overlap yet; the first iteration of a resumed run is left out for the same
reason), its rollout (wait), old log-prob and update parts, the seconds per 100 updated rows (the
modes train on different batches), and the speed-ups over the series run.
Evaluation before and after training and validation are switched off; they do not overlap.

Usage: python benchmarks/off_policy_speed.py [--configs A.yaml B.yaml] [--iterations N]
       [--steps K] [--out DIR] [--modes series,behaviour] [overrides ...]
``--out DIR`` keeps the runs; a run already finished there is read again, not rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gigpo.train.config import load_config

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["log.eval_before=false", "guard.val_every=0", "env.eval_tasks=1", "log.progress=false"]


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(config: Path, name: str, overrides: list[str], iterations: int, out: Path) -> list[dict]:
    run_dir = out / name
    lines_path = run_dir / "metrics.jsonl"

    def train_lines():
        if not lines_path.exists():
            return []
        return [x for x in map(json.loads, lines_path.read_text().splitlines()) if x.get("tag") == "train"]

    if len(train_lines()) < iterations:
        cmd = [sys.executable, "-m", "gigpo.cli", "train", "--config", str(config), *QUIET, *overrides]
        cmd += [f"train.iterations={iterations}", f"output_dir={out}", f"name={name}"]
        if run_dir.exists():
            # a longer --iterations trains a finished run on
            cmd = [
                sys.executable,
                "-m",
                "gigpo.cli",
                "train",
                "--resume",
                str(run_dir),
                f"train.iterations={iterations}",
            ]
        print(f"[{name}] {' '.join(cmd[3:])}", flush=True)
        starts = out / f"{name}.starts.json"  # where each process began: its first iteration refills the pipeline
        begun = json.loads(starts.read_text()) if starts.exists() else []
        starts.write_text(json.dumps([*begun, len(train_lines())]))
        env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
        subprocess.run(cmd, check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    starts = out / f"{name}.starts.json"
    first = {i + 1 for i in (json.loads(starts.read_text()) if starts.exists() else [0])}
    return [x for x in train_lines() if x["iteration"] not in first]


def summary(lines: list[dict]) -> dict:
    """Means over the timed iterations; ``per_100_rows``: iteration seconds per 100 updated rows
    (the modes train on different batches, whose sizes differ)."""

    def mean(key):
        return statistics.fmean(x.get(key, 0.0) for x in lines)

    keys = ("iteration", "rollout", "old_logprob", "update")
    rows = sum(x.get("train/rows_updated", 0) for x in lines)
    per_100 = 100 * sum(x["time/iteration"] for x in lines) / rows if rows else float("nan")
    return {k: mean(f"time/{k}") for k in keys} | {"per_100_rows": per_100, "n": len(lines)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", nargs="+", default=["configs/alfworld_tiny.yaml", "configs/sokoban_tiny.yaml"])
    ap.add_argument("--iterations", type=int, default=4, help="iterations per run (the first is not timed)")
    ap.add_argument("--steps", type=int, default=1, help="train.off_policy_steps of the overlapped runs")
    ap.add_argument("--out", type=Path, help="keep the runs here (and reuse finished ones)")
    ap.add_argument(
        "--modes",
        help="run only these modes, comma-separated, of series, series-all-cores, decoupled, behaviour "
        "(default: all; the first one run is the speed-ups' baseline)",
    )
    ap.add_argument("overrides", nargs="*", help="config overrides for every run, e.g. sft.episodes=100")
    a = ap.parse_args(argv)
    if a.iterations < 2:
        ap.error("--iterations must be at least 2: the first iteration is not timed")
    out = a.out or Path(tempfile.mkdtemp(prefix="gigpo-offpolicy-"))
    out.mkdir(parents=True, exist_ok=True)
    k = a.steps
    cores = os.cpu_count() or 1
    modes = [
        ("series", "in series", "k0", ["train.off_policy_steps=0"]),
        # the series loop may use every core for its update, which one step off shares with the sampler
        (
            "series-all-cores",
            f"in series, {cores} threads",
            f"k0-t{cores}",
            ["train.off_policy_steps=0", f"train.torch_threads={cores}"],
        ),
        ("decoupled", f"{k} step off, decoupled", f"k{k}", [f"train.off_policy_steps={k}", "train.torch_threads=1"]),
        (
            "behaviour",
            f"{k} step off, behaviour",
            f"k{k}-behaviour",
            [f"train.off_policy_steps={k}", "train.torch_threads=1", "train.off_policy_loss=behaviour"],
        ),
    ]
    chosen = a.modes.split(",") if a.modes else [m[0] for m in modes]
    unknown = sorted(set(chosen) - {m[0] for m in modes})
    if unknown:
        ap.error(f"--modes: unknown {unknown}; choose from {[m[0] for m in modes]}")
    modes = [m[1:] for m in modes if m[0] in chosen]
    table = []
    for c in a.configs:
        config = (ROOT / c) if not Path(c).is_absolute() else Path(c)
        got = []
        threads = load_config(config, list(a.overrides)).train.torch_threads
        for label, tag, o in modes:
            if tag == f"k0-t{cores}" and threads == cores:
                continue  # the config's series run already has a thread per CPU
            got.append((label, summary(run(config, f"{config.stem}-{tag}", [*o, *a.overrides], a.iterations, out))))
        table.append((config.name, got))
    print(
        f"\n{cpu_model()}, {os.cpu_count()} CPUs; mean seconds per iteration over iterations 2..{a.iterations} "
        "(less the first of each resumed process: nothing in flight yet)"
    )
    print(
        "| config | mode | iterations | iteration | rollout (wait) | old log-prob | update | s / 100 rows | speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, got in table:
        base, base_rows = got[0][1]["iteration"], got[0][1]["per_100_rows"]
        for label, m in got:
            print(
                f"| {name} | {label} | {m['n']} | {m['iteration']:.1f} s | {m['rollout']:.1f} | "
                f"{m['old_logprob']:.1f} | {m['update']:.1f} | {m['per_100_rows']:.2f} | "
                f"{base / m['iteration']:.2f}x ({base_rows / m['per_100_rows']:.2f}x per row) |"
            )
    print(f"runs: {out}")


if __name__ == "__main__":
    main()
