"""Speed of gigpo.advantages on synthetic batches shaped like ALFWorld's and Search-R1's.

Prints rows, median wall-clock and CPU milliseconds per path, the machine and its load average,
and whether each goal is met (judged on wall time; CPU time is shown because on a shared, loaded
machine wall time mostly measures the other processes):
  ALFWorld-like 64x8x50 exact:         returns + GiGPO advantage < 10 ms  (reference 4.4 s + 0.74 s)
  Search-like 256x5x4 similarity 0.9:  < 0.5 s, groups identical to naive  (reference 13.5 s),
                                       on two data sets: one ~600-char doc per step, and
                                       Search-R1's 3-passage format with overlapping top-3 sets
  ALFWorld-like 16x8x50 similarity .95: < 1 s,  groups identical to naive  (reference 144 s)
Usage: python benchmarks/advantage_speed.py [--quick] [--check] [--repeats N]
  --quick  small batches, one repeat (smoke run for the tests); goals are not judged
  --check  compare the similarity partitions with the naive greedy difflib algorithm (slow at
           full size: minutes); --quick always checks
"""

from __future__ import annotations

import argparse
import difflib
import os
import platform
import random
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from gigpo.advantages import discounted_returns, gigpo, similarity, step_group_stats  # noqa: E402

WORDS = (
    "cabinet drawer countertop shelf sinkbasin fridge microwave stoveburner garbagecan toaster "
    "mug apple knife spoon plate bowl lettuce tomato bread egg potato pan pot kettle vase book "
    "open closed you see arrive at on in the a nothing happens is"
).split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    words = []
    while sum(len(w) + 1 for w in words) < n:
        w = rng.choice(WORDS)
        words.append(f"{w} {rng.randint(1, 9)}" if rng.random() < 0.3 else w)
    return " ".join(words)[:n]


def alfworld_like(tasks: int, rollouts: int, steps: int, seed: int = 0):
    """A shared step-0 obs per task; later steps from a 40-state per-task pool with p=0.3,
    otherwise a unique ~80-150-char obs; reward 10 at the last step with p=0.5."""
    rng = random.Random(seed)
    ep, traj, anchors, rewards = [], [], [], []
    for t in range(tasks):
        start = "You are in the middle of a room. Your task is to: " + sentence(rng, 80, 150)
        pool = [sentence(rng, 80, 150) for _ in range(40)]
        for r in range(rollouts):
            won = rng.random() < 0.5
            for s in range(steps):
                obs = start if s == 0 else rng.choice(pool) if rng.random() < 0.3 else sentence(rng, 80, 150)
                ep.append(t)
                traj.append(t * rollouts + r)
                anchors.append(obs)
                rewards.append(10.0 if (won and s == steps - 1) else 0.0)
    return np.array(ep), np.array(traj), anchors, np.array(rewards, np.float32)


def search_like(tasks: int, rollouts: int, steps: int, seed: int = 0):
    """Question at step 0; later steps are ~600-char retrieval texts: a per-task pool of 6
    (rollouts often retrieve the same documents), sometimes with a small edit, or unique."""
    rng = random.Random(seed)
    ep, traj, anchors, rewards = [], [], [], []
    for t in range(tasks):
        question = "Question: " + sentence(rng, 40, 90) + "?"
        pool = [
            f"<information>Doc 1 (Title: {sentence(rng, 10, 20)}) {sentence(rng, 560, 620)}</information>"
            for _ in range(6)
        ]
        for r in range(rollouts):
            for s in range(steps):
                if s == 0:
                    obs = question
                elif rng.random() < 0.6:
                    obs = rng.choice(pool)
                    if rng.random() < 0.3:  # a slightly different retrieval of the same docs
                        i = rng.randrange(len(obs))
                        obs = obs[:i] + sentence(rng, 5, 30) + obs[i:]
                else:
                    obs = f"<information>Doc 1 (Title: {sentence(rng, 10, 20)}) {sentence(rng, 560, 620)}</information>"
                ep.append(t)
                traj.append(t * rollouts + r)
                anchors.append(obs)
                rewards.append(float(s == steps - 1 and rng.random() < 0.4))
    return np.array(ep), np.array(traj), anchors, np.array(rewards, np.float32)


def search_r1_like(tasks: int, rollouts: int, steps: int, seed: int = 0):
    """Search-R1's real observation format (docs/algorithm.md#anchors; gigpo.envs.search): the question at step 0,
    then ``<information>Doc 1(Title: t) text\nDoc 2(...)...\nDoc 3(...)...</information>`` (top 3
    passages of ~190 chars, ~600 chars in all). Rollouts of a task query around the same topic,
    so their top-3 sets overlap: drawn from a per-task pool of 8 passages in rank order, often the
    same set, often sharing 1-2 passages (mid-range ratios, the hard case for the bounds), sometimes
    with a global distractor; 10% of steps carry "" (no <search> in the previous step)."""
    rng = random.Random(seed)

    def passage() -> str:
        return f'Doc {{i}}(Title: "{sentence(rng, 8, 24)}") {sentence(rng, 140, 180)}'

    ep, traj, anchors, rewards = [], [], [], []
    for t in range(tasks):
        question = "Question: " + sentence(rng, 40, 90) + "?"
        pool = [passage() for _ in range(8)]
        favourite = rng.sample(range(8), 3)
        for r in range(rollouts):
            for s in range(steps):
                if s == 0:
                    obs = question
                elif rng.random() < 0.1:
                    obs = ""
                else:
                    if rng.random() < 0.4:
                        picks = list(favourite)
                    else:
                        picks = favourite[: rng.randint(0, 2)]
                        picks += rng.sample([i for i in range(8) if i not in picks], 3 - len(picks))
                    docs = [pool[i] for i in picks]
                    if rng.random() < 0.2:
                        docs[rng.randrange(3)] = passage()  # a distractor from elsewhere
                    obs = (
                        "<information>"
                        + "".join(d.replace("{i}", str(k + 1)) + "\n" for k, d in enumerate(docs))
                        + "</information>"
                    )
                ep.append(t)
                traj.append(t * rollouts + r)
                anchors.append(obs)
                rewards.append(float(s == steps - 1 and rng.random() < 0.4))
    return np.array(ep), np.array(traj), anchors, np.array(rewards, np.float32)


def naive_partition(ep, anchors, thresh):
    """The reference's greedy single pass, literally (for --check)."""
    labels, nxt = np.empty(len(anchors), np.int64), 0
    for u in np.unique(ep):
        clusters = []
        for i in np.flatnonzero(ep == u):
            for rep, lab in clusters:
                if difflib.SequenceMatcher(None, anchors[i], rep).ratio() >= thresh:
                    labels[i] = lab
                    break
            else:
                clusters.append((anchors[i], nxt))
                labels[i] = nxt
                nxt += 1
    return labels


def same_partition(a, b) -> bool:
    return len(set(zip(a.tolist(), b.tolist()))) == len(set(a.tolist())) == len(set(b.tolist()))


def median_ms(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median CPU (process) milliseconds of ``fn()`` over ``repeats`` runs.

    On a shared, loaded machine the wall time includes waiting for other processes' turn on the
    cores; the CPU time is the work this process did (and what an idle machine's wall time is).
    """
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        cpu.append((time.process_time() - c0) * 1e3)
        wall.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(wall), statistics.median(cpu)


def load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} cores"
    except OSError:
        return "load average unknown"


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return (
        f"{model}, {os.cpu_count()} cores, python {platform.python_version()}, numpy {np.__version__}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
        f"matcher {similarity.SequenceMatcher.__module__.split('.')[0]}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batches, one repeat (smoke run)")
    ap.add_argument("--check", action="store_true", help="verify similarity groups against the naive algorithm")
    ap.add_argument("--repeats", type=int, default=5, help="runs per path; the median is printed")
    args = ap.parse_args()
    repeats = 1 if args.quick else args.repeats
    check = args.check or args.quick
    print(f"machine: {machine()}")
    print(f"before: {load()}")

    shape = (4, 8, 50) if args.quick else (64, 8, 50)
    ep, traj, anchors, rew = alfworld_like(*shape)
    scores = np.bincount(traj, weights=rew)[traj]

    def exact_path():
        returns = discounted_returns(rew, traj, 0.95)
        return gigpo(scores, returns, ep, anchors, mode="mean_norm")

    ms = median_ms(exact_path, repeats)
    share = step_group_stats(exact_path().step_groups)["share_rows_in_groups_gt1"]
    report(
        "alfworld-like exact (returns + advantage)",
        shape,
        len(ep),
        ms,
        10.0,
        args.quick,
        f"rows in groups >1: {share:.1%}",
    )

    for name, make, shape_full, shape_quick, thresh, goal in (
        ("search-like similarity 0.9", search_like, (256, 5, 4), (4, 5, 4), 0.9, 500.0),
        ("search-r1-format similarity 0.9", search_r1_like, (256, 5, 4), (4, 5, 4), 0.9, 500.0),
        ("alfworld-like similarity 0.95", alfworld_like, (16, 8, 50), (1, 4, 20), 0.95, 1000.0),
    ):
        shape = shape_quick if args.quick else shape_full
        ep, traj, anchors, rew = make(*shape)
        returns = discounted_returns(rew, traj, 0.95)
        scores = np.bincount(traj, weights=rew)[traj]

        def sim_path(scores=scores, returns=returns, ep=ep, anchors=anchors, thresh=thresh):
            return gigpo(scores, returns, ep, anchors, mode="mean_std_norm", similarity_threshold=thresh)

        ms = median_ms(sim_path, repeats)
        groups = sim_path().step_groups
        note = f"step groups: {len(set(groups.tolist()))}"
        if check:
            t0 = time.perf_counter()
            same = same_partition(groups, naive_partition(ep, anchors, thresh))
            note += f"; identical to naive: {'yes' if same else 'NO'} (naive {time.perf_counter() - t0:.1f} s)"
        report(name, shape, len(ep), ms, goal, args.quick, note)
    print(f"after: {load()}")


def report(name, shape, rows, ms, goal_ms, quick, note) -> None:
    wall, cpu = ms
    if quick:
        verdict = "not judged (--quick)"
    elif wall < goal_ms:
        verdict = "MET"
    else:
        verdict = "MET on CPU time, wall time MISSED (machine load)" if cpu < goal_ms else "MISSED"
    print(
        f"{name:40s} {'x'.join(map(str, shape)):>9s} rows={rows:6d} wall {wall:9.1f} ms  cpu {cpu:9.1f} ms  "
        f"goal < {goal_ms:g} ms: {verdict}  [{note}]"
    )


if __name__ == "__main__":
    main()
