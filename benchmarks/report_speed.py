"""Speed and memory of ``gigpo report`` on a long run: a synthetic metrics.jsonl of N lines.

The lines have the shape of a real run's (by default the 82 keys of a Sokoban ``train`` line of
configs/sokoban_tiny.yaml, with values on a random walk; ``--like RUN_DIR`` copies the key set and
config of another run directory), with an ``eval_before`` line, an ``eval`` line every 1,000
iterations and an ``eval_final`` line. ``write_report`` runs in a child process, so its peak RSS
is measured alone (``ru_maxrss`` of the child; the bare imports are measured the same way).

Goal: linear in N; 50,000 lines in seconds and well under 1 GB (was 265 s and 3.4 GB for 55,000).
Usage: python benchmarks/report_speed.py [--lines N ...] [--like RUN_DIR] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

# A train line of a 2-iteration sokoban_tiny run (values rounded); key order as the trainer logs.
TRAIN_LINE = {
    "rollout/num_trajectories": 16, "rollout/num_steps": 240, "rollout/success": 0.0,
    "rollout/success/6x6-1box": 0.0, "rollout/score": 0.0, "rollout/episode_length": 15.0,
    "rollout/failed_rate": 0.0, "rollout/truncated_rate": 1.0, "rollout/invalid_action_rate": 1.0,
    "rollout/deadlock_rate": 0.0, "rollout/prompt_history_dropped": 0.0,
    "rollout/prompt_observation_truncated": 0.0, "rollout/prompt_hard_truncated": 0.0,
    "rollout/entropy_est": 8.264, "actor/pg_loss": 0.0036, "actor/clipfrac": 0.136,
    "actor/clipfrac_lower": 0.0, "actor/approx_kl": 0.0134, "actor/kl_k3": 0.0177, "actor/entropy": 8.266,
    "actor/loss": -0.0047, "actor/grad_norm": 0.331, "actor/skipped_updates": 0, "actor/optimizer_steps": 4,
    "actor/kl_stopped": 0, "actor/distinct_rows": 240, "actor/lr": 0.0001, "return/mean": -0.74,
    "return/std": 0.3, "return/min": -1.17, "return/max": -0.2, "score/mean": -1.6, "score/std": 0.0,
    "score/min": -1.6, "score/max": -1.6, "advantage/mean": -5e-09, "advantage/std": 0.3,
    "advantage/min": -0.433, "advantage/max": 0.54, "advantage_episode/mean": 0.0,
    "advantage_episode/std": 0.0, "advantage_episode/min": 0.0, "advantage_episode/max": 0.0,
    "advantage_step/mean": -5e-09, "advantage_step/std": 0.3, "advantage_step/min": -0.433,
    "advantage_step/max": 0.54, "step_groups/num_groups": 12, "step_groups/share_rows_in_size_gt1": 0.95,
    "step_groups/mean_size": 20.0, "step_groups/max_size": 120, "step_groups/hist_1": 2,
    "step_groups/hist_2": 3, "step_groups/hist_3-4": 2, "step_groups/hist_5-8": 3, "step_groups/hist_9+": 2,
    "anchor/share_rows_in_size_gt1": 0.95, "anchor/mean_size": 20.0, "anchor/state_rows_share": 1.0,
    "anchor/state_mixed_share": 0.0, "anchor/state_mixed_rows_share": 0.0, "train/rollout_rounds": 1,
    "train/groups_sampled": 2, "train/groups_trained": 2, "train/episodes_faulted": 0,
    "train/groups_without_signal": 0, "train/rows_updated": 240, "guard/rollbacks": 0, "guard/lr_scale": 1.0,
    "tokens/response": 2880, "tokens/prompt": 30000, "tokens/response_mean": 12.0, "time/rollout": 6.6,
    "time/anchor": 0.01, "time/advantage": 0.004, "time/old_logprob": 0.0, "time/ref_logprob": 0.0,
    "time/update": 11.2, "time/iteration": 17.8, "system/rss_gb": 1.9,
}  # fmt: skip
EVAL_KEYS = ("success", "score", "episode_length", "invalid_action_rate", "success/6x6-1box")

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from gigpo.report import write_report
t1 = time.perf_counter()
if sys.argv[1] != "-":
    write_report(sys.argv[1])
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "report_s": t2 - t1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def synthesise(run: Path, n_lines: int, like: Path | None, seed: int = 0) -> None:
    """``run/config.yaml`` and an ``n_lines``-line ``run/metrics.jsonl`` (no trajectories)."""
    import numpy as np

    run.mkdir(parents=True, exist_ok=True)
    template = dict(TRAIN_LINE)
    if like is not None:
        shutil.copy(like / "config.yaml", run / "config.yaml")
        for raw in (like / "metrics.jsonl").read_text().splitlines():
            row = json.loads(raw)
            if row.get("tag") == "train":
                template = {k: v for k, v in row.items() if k not in ("iteration", "tag")}
                break
    else:
        from gigpo.train.config import load_config, save_config

        cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "sokoban_tiny.yaml", [])
        save_config(cfg, run / "config.yaml")
    rng = np.random.default_rng(seed)
    keys = list(template)
    floats = np.array([isinstance(template[k], float) for k in keys])
    base = np.array([float(template[k]) for k in keys])
    n_evals = 2 + (n_lines - 2) // 1000
    n_train = max(1, n_lines - n_evals)
    with open(run / "metrics.jsonl", "w") as f:

        def ev(it: int, tag: str, s: float) -> None:
            line = {"iteration": it, "tag": tag, **{f"eval/{k}": s for k in EVAL_KEYS}, "time/eval": 5.0}
            f.write(json.dumps(line) + "\n")

        ev(0, "eval_before", 0.4)
        walk = np.zeros(len(keys))
        for it in range(1, n_train + 1):
            walk += rng.normal(0, 0.01, len(keys))
            vals = np.where(floats, base * (1 + walk) + walk, base)
            row = {"iteration": it, "tag": "train"}
            row.update({k: (float(v) if fl else int(v)) for k, v, fl in zip(keys, vals, floats)})
            f.write(json.dumps(row) + "\n")
            if it % 1000 == 0 and it < n_train:
                ev(it, "eval", 0.4 + 0.1 * it / n_train)
        ev(n_train, "eval_final", 0.5)


def child(run: str) -> dict:
    src = str(Path(__file__).resolve().parent.parent / "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", CHILD, run], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, nargs="+", default=[5_000, 20_000, 50_000])
    p.add_argument("--like", type=Path, help="a run directory whose train-line keys and config.yaml to copy")
    p.add_argument("--keep", type=Path, help="write the synthetic run dirs here (default: a temporary dir)")
    args = p.parse_args()
    print(f"cpu: {cpu_model()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    bare = child("-")
    print(f"imports alone: {bare['import_s']:.2f} s, peak RSS {bare['peak_rss_mb']:.0f} MB")
    root = args.keep or Path(tempfile.mkdtemp(prefix="gigpo-report-bench-"))
    try:
        for n in args.lines:
            run = root / f"run_{n}"
            synthesise(run, n, args.like)
            size = (run / "metrics.jsonl").stat().st_size / 2**20
            r = child(str(run))
            print(
                f"{n:>7,} lines ({size:6.1f} MB): write_report {r['report_s']:6.2f} s "
                f"({1e3 * r['report_s'] / n:.3f} ms a line), peak RSS {r['peak_rss_mb']:6.0f} MB"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
