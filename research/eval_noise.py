"""How much of a run's measured change is evaluation noise? Scores one run's start and last
models on many eval-split tasks under several sampling seeds and keeps each task's outcome.

The first ``env.eval_tasks`` tasks are the run's held-out set and the next ``guard.val_tasks`` its
validation set (``gigpo.train.factories``); tasks after those were seen by neither, so the change
on them is a second, independent measure of the same two models. Different sampling seeds on the
same tasks give the spread that sampling alone puts into the held-out change.

    python research/eval_noise.py RUN_DIR --tasks 480 --sample-seeds run,1,2 --out noise.json
    python research/eval_noise.py --report noise.json [more.json ...]

``run`` is the run's own held-out sampling seed; in a batch of another size it draws other tokens
than the run's eval did, so it is one more draw, not the change the run printed. Several processes may
write parts (``--models start`` in one, ``--models last`` in another) into different files; the
report reads them together.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def outcomes(cfg, model_path: str, n_tasks: int, sample_seed: int) -> list[bool]:
    """Per-task success of ``model_path`` on the first ``n_tasks`` eval-split tasks, in task order."""
    from gigpo.envs import make_tasks
    from gigpo.policy.generate import HFGenerator
    from gigpo.policy.load import load_policy
    from gigpo.rollout import eval_rollout
    from gigpo.train.collect import sampling_params
    from gigpo.train.evaluator import won_per_task
    from gigpo.train.factories import build_agent, grouped_envs, load_kwargs

    model, tok = load_policy(model_path, **load_kwargs(cfg))
    e = cfg.env
    tasks = make_tasks(e.family, "eval", n=n_tasks, seed=e.task_seed, **e.task_kwargs)
    params = sampling_params(cfg, cfg.rollout.eval_temperature, sample_seed)
    with grouped_envs(e, 1) as envs:
        batch, _ = eval_rollout(envs, tasks, HFGenerator(model, tok), tok, build_agent(cfg, tok), params)
    return [c == "1" for c in won_per_task(batch, tasks)]


def measure(args) -> int:
    import torch

    from gigpo.train import seeds
    from gigpo.train.config import load_config

    torch.set_num_threads(1)
    run = Path(args.run_dir)
    summary = json.loads((run / "summary.json").read_text())
    models = {
        "start": summary["start_model"],
        "last": str(run / ("model_last" if (run / "model_last").exists() else "model")),
    }
    out = Path(args.out)
    done = json.loads(out.read_text()) if out.exists() else {"run": str(run), "rows": []}
    for name in args.models.split(","):
        for s in args.sample_seeds.split(","):
            cfg = load_config(run / "config.yaml", [f"model.name_or_path={models[name]}"])
            seed = seeds.iteration_seed(cfg.seed, 0, seeds.EVAL) if s == "run" else int(s)
            if any(r["model"] == name and r["sample_seed"] == seed and r["tasks"] >= args.tasks for r in done["rows"]):
                continue
            won = outcomes(cfg, models[name], args.tasks, seed)
            done["rows"].append(
                {
                    "model": name,
                    "path": models[name],
                    "sample_seed": seed,
                    "tasks": args.tasks,
                    "run_seed": s == "run",
                    "won": won,
                    "eval_tasks": cfg.env.eval_tasks,
                    "val_tasks": cfg.guard.val_tasks,
                }
            )
            out.write_text(json.dumps(done))
            print(
                f"{name} seed {seed}: {np.mean(won[: cfg.env.eval_tasks]):.3f} on the held-out "
                f"{cfg.env.eval_tasks}, {np.mean(won):.3f} on {args.tasks}",
                flush=True,
            )
    return 0


def report(paths: list[str]) -> int:
    rows = [r for p in paths for r in json.loads(Path(p).read_text())["rows"]]
    by = {(r["model"], r["sample_seed"]): r for r in rows}
    pairs = sorted({s for m, s in by if m == "start"} & {s for m, s in by if m == "last"})
    print("| sampling seed | held-out tasks | change there | unseen tasks | change there |")
    print("|---|---|---|---|---|")
    held, unseen = [], []
    for s in pairs:
        a, b = by[("start", s)], by[("last", s)]
        h = a["eval_tasks"]
        lo = h + a["val_tasks"]
        n = min(a["tasks"], b["tasks"])
        wa, wb = np.array(a["won"][:n], float), np.array(b["won"][:n], float)
        dh = 100 * (wb[:h].mean() - wa[:h].mean())
        held.append(dh)
        tag = " (the run's seed)" if a["run_seed"] else ""
        if n > lo:
            unseen.append(100 * (wb[lo:].mean() - wa[lo:].mean()))
            print(f"| {s}{tag} | {h} | {dh:+.1f} | {n - lo} | {unseen[-1]:+.1f} |")
        else:
            print(f"| {s}{tag} | {h} | {dh:+.1f} | - | - |")
    for what, xs in (("held-out", held), ("unseen", unseen)):
        if len(xs) > 1:
            print(f"{what} change over {len(xs)} sampling seeds: mean {np.mean(xs):+.1f}, sd {np.std(xs, ddof=1):.1f}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", nargs="?")
    p.add_argument("--tasks", type=int, default=480, help="eval-split tasks to score (from the first)")
    p.add_argument("--sample-seeds", default="run", help="comma list; 'run' = the run's held-out seed")
    p.add_argument("--models", default="start,last")
    p.add_argument("--out", default="eval_noise.json")
    p.add_argument("--report", nargs="+", metavar="JSON")
    args = p.parse_args(argv)
    if args.report:
        return report(args.report)
    if not args.run_dir:
        p.error("give RUN_DIR, or --report FILE ...")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
