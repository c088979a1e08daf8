"""Env throughput: steps per second and reset time of each env family through GroupedEnvs.

For every family present (or those given with --families): B tasks x n rollouts, stepped to the end
(or max_steps) with random actions (a random admissible action where the env lists them, else random
text built from the observation) and with expert actions (``env.expert_action()``). ALFWorld runs
with the inline and the process executor (other families inline; --executors to change).

Figures, per row:
    steps/s       env steps / wall time spent inside ``GroupedEnvs.step`` (expert queries excluded)
    reset ms/env  wall time of ``reset`` / slots, mean over the timed rounds (after a warm-up reset)
    startup s     the first reset: worker start (process) + building the envs + resetting them

    OMP_NUM_THREADS=1 python benchmarks/env_throughput.py [--quick] [--families alfworld webshop]
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import random
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from gigpo.envs import FAMILIES, make_tasks  # noqa: E402
from gigpo.envs.manager import GroupedEnvs  # noqa: E402


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def present_families() -> list[str]:
    out = []
    for fam, mod in FAMILIES.items():
        try:
            m = importlib.import_module(mod)
        except ImportError:
            continue
        if hasattr(m, "make_env") and hasattr(m, "make_tasks"):
            out.append(fam)
    return out


def random_action(rng: random.Random, obs: str, info: dict) -> str:
    """A random admissible action, else random text: a search/answer tag or words from the page."""
    adm = info.get("admissible_actions")
    if adm:
        return rng.choice(list(adm))
    words = obs.split() or ["nothing"]
    pick = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
    return rng.choice([f"<search>{pick}</search>", f"<answer>{pick}</answer>", pick])


def run_policy(envs: GroupedEnvs, policy: str, rng: random.Random) -> tuple[int, float, int]:
    """Run the batch to the end; returns (steps, seconds inside step, wins)."""
    steps, secs = 0, 0.0
    while envs.active():
        active = envs.active()
        if policy == "expert":
            actions = envs.expert_actions(active)
        else:
            actions = {s: random_action(rng, *envs.observation(s)) for s in active}
        t0 = time.perf_counter()
        envs.step(actions)
        secs += time.perf_counter() - t0
        steps += len(actions)
    return steps, secs, sum(r.won for r in envs.results())


def bench(family: str, executor: str, args) -> list[list[str]]:
    tasks = make_tasks(family, "train", n=args.tasks, seed=args.seed)
    rows = []
    with GroupedEnvs(
        family, group_size=args.group_size, max_steps=args.max_steps, executor=executor, num_workers=args.workers
    ) as envs:
        t0 = time.perf_counter()
        envs.reset(tasks)
        startup = time.perf_counter() - t0
        workers = len(envs.worker_pids) or envs.num_workers
        for policy in ("random", "expert"):
            rng = random.Random(args.seed)
            steps = wins = 0
            step_s = reset_s = 0.0
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                envs.reset(tasks)
                reset_s += time.perf_counter() - t0
                n, s, w = run_policy(envs, policy, rng)
                steps, step_s, wins = steps + n, step_s + s, wins + w
            slots = envs.num_slots * args.rounds
            failed = sum(r.failed for r in envs.results())
            rows.append(
                [
                    family,
                    executor,
                    policy,
                    str(workers),
                    f"{steps / max(step_s, 1e-9):.1f}",
                    f"{1000 * reset_s / slots:.4f}",
                    str(steps),
                    f"{100 * wins / slots:.0f}",
                    f"{startup:.2f}",
                    str(failed),
                ]
            )
    return rows


def print_table(rows: list[list[str]]) -> None:
    head = [
        "family",
        "executor",
        "policy",
        "workers",
        "steps/s",
        "reset ms/env",
        "steps",
        "won %",
        "startup s",
        "failed",
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    print(fmt(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(fmt(r))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes (seconds), for smoke tests")
    p.add_argument("--families", nargs="*", help="families to run (default: all present)")
    p.add_argument("--executors", nargs="*", help="executors (default: inline; alfworld also process)")
    p.add_argument("--tasks", type=int, help="tasks per batch (B)")
    p.add_argument("--group-size", type=int, help="rollouts per task (n)")
    p.add_argument("--max-steps", type=int, help="step limit per episode")
    p.add_argument("--rounds", type=int, help="timed batches per policy")
    p.add_argument("--workers", type=int, default=None, help="process/thread workers (default: CPU count)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    defaults = (
        dict(tasks=2, group_size=2, max_steps=5, rounds=1)
        if args.quick
        else dict(tasks=4, group_size=4, max_steps=30, rounds=2)
    )
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    present = present_families()
    families = args.families or present
    missing = [f for f in families if f not in present]
    if missing:
        p.error(f"families not available: {missing} (present: {present})")
    print(
        f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print(
        f"batch: {args.tasks} tasks x {args.group_size} rollouts, max_steps {args.max_steps}, "
        f"{args.rounds} round(s) per policy"
    )
    rows = []
    for fam in families:
        for ex in args.executors or (["inline", "process"] if fam == "alfworld" else ["inline"]):
            rows += bench(fam, ex, args)
            print(f"  done: {fam} / {ex}", file=sys.stderr, flush=True)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
