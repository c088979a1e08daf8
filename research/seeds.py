"""Seed sweep of the default job: does `make train` leave every user with a better agent?

Runs ``gigpo train --config configs/alfworld_tiny.yaml seed=S`` for each seed from scratch: each
sweep has its own model cache, so ``tiny`` and every seed's SFT warm start are built inside it,
as on a fresh clone. Prints, per seed, held-out success before training, of the delivered model
(``model/``, best by validation) and of the last one, which iteration was delivered, guard
rollbacks, wall time and the SFT weights' hash; then the mean change and how many runs ended
below their start.

    python research/seeds.py                          # seeds 0-4, three at a time on 2 cores
    python research/seeds.py --jobs 1                 # one at a time with the config's threads
    python research/seeds.py --seeds 0,1 train.iterations=2 --out /tmp/s   # a quick look

By default ``--jobs`` is one more than the cores (at most the number of seeds), each run with
``cores // jobs`` torch threads (at least one): five seeds on two cores run three at a time, so
no core idles while the last runs finish (two at a time would leave the fifth seed alone on one
core). With one thread a run's floats differ from a ``make train`` (two threads) of the same
seed: the runs are equivalent draws, not bit-identical copies. A killed sweep continues:
finished seeds are skipped, partial ones resumed. Writes ``<out>/seeds.json`` and ``<out>/seeds.md`` (the table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default=str(ROOT / "configs" / "alfworld_tiny.yaml"))
    p.add_argument("--seeds", default="0-4", help="e.g. 0-4 or 0,2,5")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="runs at a time (default: cores + 1, at most the seeds; each gets cores/jobs torch threads)",
    )
    p.add_argument("--out", default=str(ROOT / "runs" / "seeds"))
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")
    return p.parse_args(argv)


def default_jobs(n_seeds: int, cpus: int) -> int:
    """Runs at a time when ``--jobs`` is not given: one more than the cores, at most the seeds."""
    return max(1, min(n_seeds, cpus + 1))


def _env(out: Path, threads: int | None) -> dict:
    env = dict(os.environ, GIGPO_CACHE=str(out / "cache"), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def command(args, seed: int, threads: int | None) -> list[str]:
    run = Path(args.out) / f"s{seed}"
    gigpo = [sys.executable, "-m", "gigpo.cli", "train"]
    if (run / "checkpoints" / "latest").exists():
        return [*gigpo, "--resume", str(run)]
    extra = [f"train.torch_threads={threads}"] if threads else []
    return [
        *gigpo,
        "--config",
        args.config,
        f"seed={seed}",
        f"name=s{seed}",
        f"output_dir={args.out}",
        "log.progress=false",
        *extra,
        *args.overrides,
    ]


def run_seed(args, seed: int, threads: int | None) -> dict:
    out = Path(args.out)
    summary = out / f"s{seed}" / "summary.json"
    if not summary.exists():
        t0 = time.time()
        with open(out / f"s{seed}.log", "a") as log:
            rc = subprocess.run(
                command(args, seed, threads), cwd=ROOT, env=_env(out, threads), stdout=log, stderr=subprocess.STDOUT
            ).returncode
        print(
            f"seed {seed}: exit {rc} after {(time.time() - t0) / 60:.1f} min (log {out / f's{seed}.log'})", flush=True
        )
        if rc != 0 or not summary.exists():
            return {"seed": seed, "error": f"exit code {rc}; see {out / f's{seed}.log'}"}
    s = json.loads(summary.read_text())
    metrics = out / f"s{seed}" / "metrics.jsonl"
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    rss = [json.loads(line).get("system/rss_gb", 0.0) for line in lines if line.strip()]
    return {
        "peak_rss_gb": max(rss, default=0.0),
        "seed": seed,
        "start": s["success_before"],
        "final": s["success_final"],
        "change_se": s.get("success_change_se"),
        "last": s["success_last"] if s["success_last"] is not None else s["success_final"],
        "delivered_iteration": s["models"]["model"],
        "iterations": s["iterations"],
        "rollbacks": s["rollbacks"],
        "stopped": s["stop_reason"],
        "best_val": s["best_val_success"],
        "selection": s.get("selection", "best by validation"),
        "minutes": sum(s["phases"].values()) / 60,
        "sft_sha256": s["start_model_sha256"][:12],
    }


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


def table(rows: list[dict]) -> str:
    lines = [
        "| seed | start | final (`model/`) | last (`model_last/`) | change | delivered | rollbacks | "
        "wall min | peak GiB | SFT sha256 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['seed']} | {r['error']} ||||||||")
            continue
        ch = 100 * (r["final"] - r["start"])
        se = f" ± {100 * r['change_se']:.1f}" if r.get("change_se") is not None else ""
        lines.append(
            f"| {r['seed']} | {_pct(r['start'])} | {_pct(r['final'])} | {_pct(r['last'])} | {ch:+.1f}{se} | "
            f"iteration {r['delivered_iteration']} of {r['iterations']} | {r['rollbacks']} | "
            f"{r['minutes']:.0f} | {r.get('peak_rss_gb', 0.0):.1f} | `{r['sft_sha256']}` |"
        )
    ok = [r for r in rows if "error" not in r]
    if ok:
        import numpy as np

        ch = np.array([100 * (r["final"] - r["start"]) for r in ok])
        last = np.array([100 * (r["last"] - r["start"]) for r in ok])
        lines.append("")
        lines.append(
            f"Held-out success (%). Change of the delivered model: mean {ch.mean():+.1f} "
            f"(sd {ch.std(ddof=1) if len(ch) > 1 else 0:.1f}, min {ch.min():+.1f}) over {len(ok)} seeds; "
            f"{int((ch < 0).sum())} ended below their start. Last model: mean {last.mean():+.1f}, "
            f"min {last.min():+.1f}."
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = parse_seeds(args.seeds)
    cpus = os.cpu_count() or 1
    if args.jobs is None:
        args.jobs = default_jobs(len(seeds), cpus)
    threads = max(1, cpus // args.jobs) if args.jobs > 1 else None
    # Build `tiny` once before runs start side by side (they would race on the same cache dir).
    subprocess.run(
        [sys.executable, "-c", "from gigpo.policy.load import resolve_path; resolve_path('tiny')"],
        cwd=ROOT,
        env=_env(out, threads),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    t0 = time.time()
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda s: run_seed(args, s, threads), seeds))
    text = table(rows)
    print(text)
    (out / "seeds.json").write_text(
        json.dumps(
            {
                "config": args.config,
                "overrides": args.overrides,
                "jobs": args.jobs,
                "threads": threads,
                "rows": rows,
                # this invocation only: a resumed sweep skips finished seeds (their own
                # minutes are in the rows)
                "invocation_minutes": (time.time() - t0) / 60,
            },
            indent=2,
        )
    )
    (out / "seeds.md").write_text(text + "\n")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
