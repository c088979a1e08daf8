"""Learning benchmark: GiGPO vs GRPO vs RLOO (and GiGPO's ablations) on the same budget.

Every run starts from ONE shared SFT-warm-started ``tiny`` checkpoint (built once, before any
run), uses the same seeds, iterations, tasks per iteration, group size and hyper-parameters (the
family's ``configs/<family>_tiny.yaml``, read at run time); only the advantage estimator differs.
Runs are ``gigpo train`` subprocesses (one torch thread each, ``--jobs`` at a time), so a killed
comparison continues where it stopped: complete runs are skipped, partial ones ``--resume``.

    python research/learning.py                       # full ALFWorld comparison (~65 min, 2 cores)
    python research/learning.py --estimators gigpo_std_norm,grpo   # the headline pair (~30 min)
    python research/learning.py --estimators gigpo_std_norm,grpo,ppo   # with PPO + critic (opt-in)
    python research/learning.py --estimators gigpo_std_norm,grpo,graphgpo   # with GraphGPO (opt-in)
    python research/learning.py --family webshop
    python research/learning.py --family sokoban
    python research/learning.py --quick --out /tmp/x  # smoke run of a few minutes
    python research/learning.py --report-only         # rebuild research/results.md from research/results/

Outputs (``--out``, default ``research/``): ``results.md`` (a generated section per family, text
outside the markers is kept), ``results/<family>/*.png`` (held-out success against iterations and
against training wall-clock) and ``results/<family>/<variant>-s<seed>.json`` (compact per-run
summaries of ``metrics.jsonl``; the report is computed from these alone).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import learning_report  # noqa: E402  (research/ is not a package)

ROOT = Path(__file__).resolve().parents[1]

# Variant label -> the only config keys that differ between runs. GRPO and the ablations use
# mean_std_norm (GRPO's std normalisation; the paper's ALFWorld setting), gigpo_mean_norm is
# GiGPO's "Dr. GRPO"-style variant without std division (docs/algorithm.md#normalisation).
VARIANTS = {
    "gigpo_std_norm": ["algorithm.estimator=gigpo", "algorithm.mode=mean_std_norm"],
    "gigpo_mean_norm": ["algorithm.estimator=gigpo", "algorithm.mode=mean_norm"],
    "grpo": ["algorithm.estimator=grpo", "algorithm.mode=mean_std_norm"],
    "rloo": ["algorithm.estimator=rloo", "algorithm.mode=null"],  # RLOO has no normalisation option
    "gigpo_no_step": ["algorithm.estimator=gigpo_no_step", "algorithm.mode=mean_std_norm"],
    "gigpo_no_episode": ["algorithm.estimator=gigpo_no_episode", "algorithm.mode=mean_std_norm"],
}

# GiGPO with another anchor definition (docs/algorithm.md#anchor-definitions), std-normalised so
# that each pairs with gigpo_std_norm (the observation anchor) and with GRPO. Opt-in: not in the
# default --estimators list.
ANCHOR_VARIANTS = {
    "gigpo_state": ["algorithm.estimator=gigpo", "algorithm.mode=mean_std_norm", "algorithm.anchor=state"],
    "gigpo_context2": ["algorithm.estimator=gigpo", "algorithm.mode=mean_std_norm", "algorithm.anchor=context-2"],
}
# GraphGPO (docs/algorithm.md#graphgpo): step returns from a state graph of each group's rollouts,
# with the recipe's defaults (mean_std_norm, distance_decay 0.1, both weights 1). Opt-in.
GRAPH_VARIANTS = {
    "graphgpo": ["algorithm.estimator=graphgpo", "algorithm.mode=mean_std_norm"],
}
# GiGPO with empirical-Bayes anchor baselines (docs/algorithm.md#empirical-bayes-anchor-baselines),
# in GiGPO's Sokoban normalisation, so that it pairs with gigpo_mean_norm. Opt-in.
SHRINK_VARIANTS = {
    "gigpo_eb_mean_norm": ["algorithm.estimator=gigpo_eb", "algorithm.mode=mean_norm"],
}
# PPO with a learned critic, the paper's PPO row (docs/algorithm.md#ppo-with-a-learned-critic).
# Opt-in. Dynamic sampling and skipping A = 0 rows do not apply to it (config errors), so they are
# off for this variant only. critic.lr: verl-agent's critic runs at 10x its actor's lr; 10x the
# tiny configs' 1e-4 (1e-3) overshot in a smoke run (value loss 0.02 -> 2.9 after one step), so
# the critic gets 1e-4, the policy's lr on ALFWorld and Sokoban (not tuned further).
CRITIC_VARIANTS = {
    "ppo": [
        "algorithm.estimator=ppo",
        "algorithm.mode=null",
        "algorithm.similarity_threshold=null",
        "train.dynamic_sampling=false",
        "train.skip_zero_advantage_rows=false",
        "critic.lr=1e-4",
    ],
}
# GiGPO with rollout and update at the same time (docs/training.md#rollout-and-update-at-the-same-time),
# paired with gigpo_std_norm: the same run but one step off. Opt-in. Its sampler is a second
# process with its own torch thread, so count it as two jobs' worth of cores.
OFF_POLICY_VARIANTS = {
    "gigpo_one_off": ["algorithm.estimator=gigpo", "algorithm.mode=mean_std_norm", "train.off_policy_steps=1"],
}
DEFAULT_VARIANTS = tuple(VARIANTS)
VARIANTS.update(ANCHOR_VARIANTS)
VARIANTS.update(GRAPH_VARIANTS)
VARIANTS.update(SHRINK_VARIANTS)
VARIANTS.update(CRITIC_VARIANTS)
VARIANTS.update(OFF_POLICY_VARIANTS)

# The head-to-head: planned first, for every seed, then the other CORE variants, then the ablations.
HEAD = ("gigpo_std_norm", "gigpo_mean_norm", "grpo", "rloo")
CORE = (
    *HEAD,
    *ANCHOR_VARIANTS,
    *GRAPH_VARIANTS,
    *SHRINK_VARIANTS,
    *CRITIC_VARIANTS,
    *OFF_POLICY_VARIANTS,
)

# Variants whose advantages equal another variant's exactly (tests/test_advantages_registry.py):
# with mean_std_norm, GiGPO without its step part is GRPO's episode advantage, so with the same
# seed its run is GRPO's run, step for step (measured: identical per-seed results and statistics,
# research/results.md). When both are asked for, the benchmark runs the pair once and reports the run
# under both names (marked); ``--rerun-identical`` runs it anyway, as a determinism check.
IDENTICAL = {"gigpo_no_step": "grpo"}

# Budget of the full comparison per family, on top of configs/<family>_tiny.yaml (the same for
# every variant). ALFWorld: 10 iterations of 8 tasks x 4 rollouts (half the default job's 20) with
# the update in bf16 autocast where the CPU has AVX512 (1.6x faster iterations; gradients at cosine
# 0.9999 to float32's for every estimator and no estimator-specific effect on results, research/notes/bf16-autocast.md),
# and the config's 96 held-out tasks before and after: with two runs in parallel, one thread each,
# an iteration takes ~40 s and an eval ~75 s, so all six variants x 3 seeds (15 runs,
# gigpo_no_step being GRPO's) fit the 90-minute budget: 65 min measured (float32: ~91).
FULL = {
    "alfworld": {
        "iterations": 10,
        "eval_every": 10,
        "overrides": ["train.autocast=auto", "guard.val_every=0", "guard.watchdog=false"],
    },
    "webshop": {"iterations": 3, "eval_every": 3, "overrides": []},
    # Sokoban: the config's 10 iterations of 4 rooms x 8 rollouts, held-out eval (64 rooms) before
    # and after. The comparison scores the last model of every run: validation, best-model
    # selection and the watchdog are off, so no guard acts differently per estimator (dynamic
    # sampling stays on for all). GiGPO vs GRPO x 5 seeds: ~60 min with two runs at a time.
    "sokoban": {"iterations": 10, "eval_every": 10, "overrides": ["guard.val_every=0", "guard.watchdog=false"]},
}
# --quick: a pipeline smoke run (minutes), not a result.
QUICK = {
    "iterations": 1,
    "eval_every": 1,
    "overrides": [
        "env.tasks_per_iter=2",
        "env.group_size=2",
        "env.eval_tasks=2",
        "env.max_steps=6",
        "rollout.max_response_tokens=12",
        "train.mini_batch_rows=16",
    ],
    # the expert needs 6-30 steps, so the smoke SFT gets a longer horizon to win some demos
    "sft_overrides": ["env.max_steps=16", "sft.episodes=4", "sft.epochs=1"],
}
# Every run: quiet, no trajectory dumps, checkpoint every iteration (resumable), one thread.
COMMON = [
    "log.progress=false",
    "log.tensorboard=false",
    "log.trajectories_every=0",
    "log.save_every=1",
    "train.torch_threads=1",
]
# Rough seconds when no finished run exists to calibrate from (two runs at a time on a 2-core
# machine), by ``train.autocast``. ALFWorld bf16: 42 s an iteration, the mean of the bf16
# comparison in research/results.md (AVX-512 CPU); float32 ("none", what `auto` picks on an AVX2-only
# CPU): 136 s an iteration and 128 s an eval, the means of the anchor comparison's float32 runs
# (AVX2-only CPU). Sokoban bf16: 9.8-11.6 s per iteration, ~6 s per 64-room eval (the bare-grid
# prompt); float32: 16.5-17.3 s, the medians of the annotated-grid comparison (AVX2-only CPU).
# WebShop measured in float32 only; bf16 scaled by ALFWorld's ratio. The figures are for the
# config's batch and eval size; ``estimate_minutes`` scales them to the comparison's.
DEFAULT_COST = {
    "alfworld": {"iteration": {"bf16": 42.0, "none": 136.0}, "eval": {"bf16": 75.0, "none": 128.0}, "startup": 30.0},
    "webshop": {"iteration": {"bf16": 19.0, "none": 60.0}, "eval": {"bf16": 17.0, "none": 30.0}, "startup": 30.0},
    "sokoban": {"iteration": {"bf16": 10.5, "none": 17.0}, "eval": {"bf16": 6.0, "none": 10.0}, "startup": 15.0},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--family", default="alfworld", choices=sorted(FULL), help="env family")
    p.add_argument("--out", default=str(ROOT / "research"), help="where results.md and results/ go")
    p.add_argument("--runs-dir", default=None, help="parent of the run dirs (default runs/learning-<family>[-quick])")
    p.add_argument(
        "--estimators",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma list of {list(VARIANTS)} (default: {','.join(DEFAULT_VARIANTS)})",
    )
    p.add_argument("--seeds", default="0,1,2", help="comma list of integer seeds")
    p.add_argument("--iterations", type=int, default=None, help="training iterations per run")
    p.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every k iterations")
    p.add_argument("--jobs", type=int, default=2, help="training processes at a time (1 torch thread each)")
    p.add_argument("--quick", action="store_true", help="tiny smoke budget (see QUICK)")
    p.add_argument(
        "--rerun-identical",
        action="store_true",
        help=f"also run variants identical to another one ({IDENTICAL}) instead of reusing its runs",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan and the time estimate, run nothing")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the report from <out>/results/<family>/ (re-exporting from --runs-dir when it exists)",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value", help="extra config overrides for every run")
    a = p.parse_args(argv)
    a.estimators = [e.strip() for e in a.estimators.split(",") if e.strip()]
    bad = [e for e in a.estimators if e not in VARIANTS]
    if bad or not a.estimators:
        p.error(f"--estimators: unknown {bad}; choose from {list(VARIANTS)}")
    try:
        a.seeds = [int(s) for s in a.seeds.split(",") if s.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, e.g. 0,1,2; got {a.seeds!r}")
    if not a.seeds:
        p.error("--seeds: give at least one seed")
    budget = QUICK if a.quick else FULL[a.family]
    a.iterations = budget["iterations"] if a.iterations is None else a.iterations
    a.eval_every = budget["eval_every"] if a.eval_every is None else a.eval_every
    if a.iterations < 1 or a.eval_every < 1 or a.jobs < 1:
        p.error("--iterations, --eval-every and --jobs must be >= 1")
    a.budget_overrides = list(budget["overrides"]) + list(a.overrides)
    a.sft_overrides = a.budget_overrides + list(budget.get("sft_overrides", []))
    a.runs_dir = Path(a.runs_dir or ROOT / "runs" / f"learning-{a.family}{'-quick' if a.quick else ''}")
    a.config = ROOT / "configs" / f"{a.family}_tiny.yaml"
    return a


def snapshot_base_config(args) -> Path:
    """Freeze ``configs/<family>_tiny.yaml`` into the runs dir; every run of the comparison reads the copy.

    The repo config may be edited while a long comparison runs (or between a kill and a resume);
    the copy keeps all runs on the same hyper-parameters. A later edit is reported, not applied:
    start a fresh ``--runs-dir`` to compare on the new config.
    """
    frozen = args.runs_dir / "base_config.yaml"
    current = args.config.read_text()
    if not frozen.exists():
        frozen.write_text(current)
    elif frozen.read_text() != current:
        print(
            f"note: {args.config.relative_to(ROOT)} changed since this comparison started; "
            f"its runs keep using {frozen} (use a new --runs-dir for the new config)",
            flush=True,
        )
    return frozen


def _env():
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")


def _gigpo(*args) -> list[str]:
    return [sys.executable, "-m", "gigpo.cli", *args]


def build_shared_sft(args) -> str:
    """Build (or find in the cache) the one SFT checkpoint every run starts from; returns its dir.

    Seed 0 and the base config's SFT settings: the cache key (``gigpo.train.sft.sft_key``) then
    matches what ``make train`` builds, so the two share the model. A runs dir that already holds
    a comparison keeps its start (``plan.json``'s ``sft_dir``), so a resumed or extended
    comparison never mixes two start checkpoints, even after the cache key scheme changed.
    """
    plan = args.runs_dir / "plan.json"
    if plan.exists():
        prev = json.loads(plan.read_text()).get("sft_dir", "")
        if prev and Path(prev).is_dir():
            return prev
    log = args.runs_dir / "logs" / "sft.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = _gigpo("sft", "--config", str(args.config), "seed=0", "log.progress=false", *args.sft_overrides)
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT).returncode
    text = log.read_text()
    m = re.search(r"SFT model: (\S+)", text)
    if rc != 0 or not m:
        raise SystemExit(f"learning: building the shared SFT model failed (rc {rc}); see {log}:\n{text[-2000:]}")
    return m.group(1)


def plan_runs(args, sft_dir: str) -> list[dict]:
    """One dict per run: name, dir and the full override list.

    Order = priority if a comparison is cut short: the head-to-head (HEAD: GiGPO, GRPO, RLOO) for
    every seed first, then the other CORE variants (anchors, GraphGPO, shrinkage, critic, one step
    off), then the ablations; within a tier seeds are outer, so partial results pair up by seed.
    """
    runs = []
    tier = {v: 0 if v in HEAD else 1 if v in CORE else 2 for v in args.estimators}
    order = [(seed, v) for t in (0, 1, 2) for seed in args.seeds for v in args.estimators if tier[v] == t]
    same = {} if args.rerun_identical else {v: w for v, w in IDENTICAL.items() if w in args.estimators}
    first = next(v for _, v in order if v not in same)  # the seed's first run evaluates its start
    for seed, v in order:
        name = f"{v}-s{seed}"
        # Before training every variant of a seed holds the same model, eval tasks and sampling
        # seed, so the eval before training is identical: only the seed's first variant runs it
        # and the report shares it (learning_report.export_summaries).
        before = "true" if v == first else "false"
        ov = [
            *args.budget_overrides,
            *COMMON,
            *VARIANTS[v],
            f"seed={seed}",
            f"log.eval_before={before}",
            f"train.iterations={args.iterations}",
            f"log.eval_every={args.eval_every}",
            f"model.name_or_path={sft_dir}",
            "sft.enabled=false",
            f"output_dir={args.runs_dir}",
            f"name={name}",
        ]
        run = {"name": name, "variant": v, "seed": seed, "dir": args.runs_dir / name, "overrides": ov}
        if v in same:
            run["same_as"] = f"{same[v]}-s{seed}"
        runs.append(run)
    return runs


def same_as_map(runs: list[dict]) -> dict[str, str]:
    """Run name -> the run reported for it, for the planned runs that are not trained (IDENTICAL)."""
    return {r["name"]: r["same_as"] for r in runs if "same_as" in r}


def run_state(run: dict, iterations: int) -> str:
    """``done`` (eval_final at ``iterations`` logged), ``partial`` (a checkpoint to resume) or ``new``."""
    d = run["dir"]
    metrics = d / "metrics.jsonl"
    if metrics.exists():
        for line in metrics.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                if rec.get("tag") == "eval_final" and rec.get("iteration") == iterations:
                    return "done"
    return "partial" if (d / "checkpoints" / "latest").exists() else "new"


def check_same_config(run: dict, args) -> None:
    """A run dir left by a different comparison must not be resumed or counted silently."""
    from gigpo.train.config import load_config, to_dict

    saved = run["dir"] / "config.yaml"
    if not saved.exists():
        return
    want = to_dict(load_config(args.config, run["overrides"]))
    have = to_dict(load_config(str(saved), []))  # fields added since then read as their defaults
    for d in (want, have):
        d.get("train", {}).pop("iterations", None)  # more iterations later = continue the run
    if want != have:
        diff = sorted(
            f"{s}.{k}"
            for s in want
            if isinstance(want[s], dict)
            for k in want[s]
            if want[s][k] != (have.get(s) or {}).get(k)
        )
        raise SystemExit(
            f"learning: {run['dir']} was made with a different config ({diff or 'top-level keys'}); "
            f"delete it or pick another --runs-dir"
        )


def execute(run: dict, args) -> dict:
    """Run (or resume) one training run as a subprocess; returns {name, rc, seconds, state}."""
    if "same_as" in run:
        return {"name": run["name"], "rc": 0, "seconds": 0.0, "state": f"reported from {run['same_as']}"}
    state = run_state(run, args.iterations)
    if state == "done":
        return {"name": run["name"], "rc": 0, "seconds": 0.0, "state": "skipped (complete)"}
    log = args.runs_dir / "logs" / f"{run['name']}.log"
    if state == "partial":
        cmd = _gigpo("train", "--resume", str(run["dir"]), f"train.iterations={args.iterations}")
    else:
        cmd = _gigpo("train", "--config", str(args.config), *run["overrides"])
    t0 = time.perf_counter()
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT).returncode
    dt = time.perf_counter() - t0
    print(
        f"[{time.strftime('%H:%M:%S')}] {run['name']}: {'ok' if rc == 0 else f'FAILED rc {rc}, see {log}'} "
        f"({dt / 60:.1f} min, {state})",
        flush=True,
    )
    return {"name": run["name"], "rc": rc, "seconds": dt, "state": state}


def estimate_minutes(args, runs: list[dict]) -> tuple[float, str]:
    """Wall minutes for the runs still to do, from finished runs' own timings when there are any."""
    from gigpo.train.config import load_config

    cost = dict(DEFAULT_COST[args.family])
    source = (
        "placeholder defaults, not measured"
        if cost.pop("placeholder", False)
        else "defaults measured on the 2-core machine"
    )
    from gigpo.learner.precision import resolve_autocast

    cfg, base = load_config(args.config, args.budget_overrides), load_config(args.config, [])
    autocast = resolve_autocast(cfg.train.autocast)
    cost["iteration"], cost["eval"] = cost["iteration"][autocast], cost["eval"][autocast]
    # the defaults are for the config's batch and eval size: an iteration costs about its episodes
    cost["iteration"] *= (cfg.env.tasks_per_iter * cfg.env.group_size) / (base.env.tasks_per_iter * base.env.group_size)
    cost["eval"] *= cfg.env.eval_tasks / max(base.env.eval_tasks, 1)
    trained = [r for r in runs if "same_as" not in r]
    seen = {r["name"]: learning_report.load_run_dir(r["dir"]) for r in trained}
    seen = {k: d for k, d in seen.items() if d and d["train"]}
    if seen:  # medians: an iteration that spans a suspended run does not count
        its = [t["time/iteration"] for d in seen.values() for t in d["train"] if "time/iteration" in t]
        evs = [e["time/eval"] for d in seen.values() for e in d["evals"] if "time/eval" in e]
        cost["iteration"] = statistics.median(its) if its else cost["iteration"]
        cost["eval"] = statistics.median(evs) if evs else cost["eval"]
        source = f"the medians of {len(seen)} run(s) so far"
    per_eval = 1 / len(args.estimators)  # the eval before training: once per seed
    seconds, todo = 0.0, 0
    for r in trained:
        if run_state(r, args.iterations) == "done":
            continue
        d = seen.get(r["name"])
        at = max((t["iteration"] for t in d["train"]), default=0) if d else 0
        left = max(args.iterations - at, 0)
        evals = len({i for i in range(at + 1, args.iterations + 1) if i % args.eval_every == 0} | {args.iterations})
        seconds += cost["startup"] + left * cost["iteration"] + (evals + (0 if d else per_eval)) * cost["eval"]
        todo += 1
    return seconds / 60.0 / args.jobs, (
        f"{todo} run(s) to do, ~{seconds / 60 / max(todo, 1):.1f} min each / {args.jobs} jobs (costs from {source})"
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    if args.report_only:
        plan = args.runs_dir / "plan.json"
        if plan.exists():  # run dirs still here: refresh the summaries from their metrics first
            planned = json.loads(plan.read_text())["runs"]
            learning_report.export_summaries(
                args.runs_dir, out, args.family, [r["name"] for r in planned], same_as=same_as_map(planned)
            )
        path = learning_report.write_report(out, args.family)
        print(f"report: {path}")
        return 0
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    print(
        f"learning benchmark: {args.family}, variants {args.estimators}, seeds {args.seeds}, "
        f"{args.iterations} iterations, eval every {args.eval_every}, runs in {args.runs_dir}",
        flush=True,
    )
    if not args.dry_run:
        args.config = snapshot_base_config(args)
    t0 = time.perf_counter()
    sft_dir = "<shared SFT dir>" if args.dry_run else build_shared_sft(args)
    print(f"shared SFT checkpoint: {sft_dir} ({time.perf_counter() - t0:.0f}s)", flush=True)
    runs = plan_runs(args, sft_dir)
    if not args.dry_run:
        for r in runs:
            check_same_config(r, args)
    for r in runs:
        if "same_as" in r:
            print(
                f"{r['name']}: reported from {r['same_as']} (identical advantages; --rerun-identical runs it)",
                flush=True,
            )
    minutes, how = estimate_minutes(args, runs)
    print(f"estimate: ~{minutes:.0f} min wall ({how})", flush=True)
    # a dry run beside a comparison in progress leaves its plan (and start checkpoint) alone
    if not (args.dry_run and (args.runs_dir / "plan.json").exists()):
        (args.runs_dir / "plan.json").write_text(
            json.dumps(
                {
                    "family": args.family,
                    "sft_dir": sft_dir,
                    "iterations": args.iterations,
                    "eval_every": args.eval_every,
                    "base_config": str(args.config),
                    "budget_overrides": args.budget_overrides,
                    "runs": [{k: str(v) if isinstance(v, Path) else v for k, v in r.items()} for r in runs],
                },
                indent=1,
            )
        )
    if args.dry_run:
        return 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(lambda r: execute(r, args), runs))
    failed = [r["name"] for r in results if r["rc"] != 0]
    learning_report.export_summaries(
        args.runs_dir, out, args.family, [r["name"] for r in runs], same_as=same_as_map(runs)
    )
    path = learning_report.write_report(out, args.family)
    print(f"report: {path}  ({(time.perf_counter() - t0) / 60:.1f} min total)", flush=True)
    if failed:
        print(f"FAILED runs: {failed} (logs in {args.runs_dir / 'logs'})", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
