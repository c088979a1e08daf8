"""Speed of gigpo.advantages on synthetic batches shaped like ALFWorld's and Search-R1's (gigpo.advantages.synthetic).

Prints rows, median wall-clock and CPU milliseconds per path, the machine and its load average,
and whether each goal is met (judged on wall time; CPU time is shown because on a shared, loaded
machine wall time mostly measures the other processes):
  ALFWorld-like 64x8x50 exact:         returns + GiGPO advantage < 10 ms  (reference 4.4 s + 0.74 s)
  ALFWorld-like 64x8x50 GraphGPO:      state graph, goal distances, advantage < 50 ms
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
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from gigpo.advantages import discounted_returns, gigpo, graphgpo, similarity, step_group_stats  # noqa: E402
from gigpo.advantages.synthetic import alfworld_like, search_like, search_r1_like  # noqa: E402


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

    penalties = np.zeros(len(ep))

    def graph_path():
        return graphgpo(scores, ep, traj, anchors, penalties)

    ms = median_ms(graph_path, repeats)
    moved = float(np.mean(graph_path().step_advantages != 0))
    report(
        "alfworld-like graphgpo (graph + advantage)",
        shape,
        len(ep),
        ms,
        50.0,
        args.quick,
        f"rows with A^S != 0: {moved:.1%}",
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
