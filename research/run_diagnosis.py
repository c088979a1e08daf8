"""What the policy did, iteration by iteration, from a run's ``trajectories/*.jsonl`` (ALFWorld).

    python research/run_diagnosis.py runs/alfworld_tiny [--from 10]

Per iteration: training success, mean episode length, the share of take/move actions and of
"put-backs" (``move X to Y`` right after ``take X from Y``: a take/put-back loop), the share of
rows with advantage 0 (no gradient), and the share of rows in anchor-state step groups (size > 1)
whose members differ in what the agent holds: the anchor is the observation text, and ALFWorld's
"You arrive at drawer 1. The drawer 1 is closed." reads the same whether or not the agent holds the
object, so such groups compare actions taken from different true states.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

_FILE = re.compile(r"iter_(\d+)\.jsonl$")
_TAKE = re.compile(r"^take (.+) from (.+)$")
_MOVE = re.compile(r"^move (.+) to (.+)$")


def read(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def with_holding(rows: list[dict]) -> list[dict]:
    """Each row plus ``holding``: the object the agent held when it chose the row's action,
    reconstructed from the env's replies ("You pick up the X ..." / "You move the X ...")."""
    held: dict[int, str | None] = defaultdict(lambda: None)
    out = []
    for r in sorted(rows, key=lambda r: (r["traj_id"], r["step"])):
        out.append(dict(r, holding=held[r["traj_id"]]))
        obs = r.get("observation") or ""
        if obs.startswith("You pick up the "):
            held[r["traj_id"]] = obs[len("You pick up the ") :].split(" from ")[0]
        elif obs.startswith(("You move the ", "You put the ")):
            held[r["traj_id"]] = None
    return out


def iteration_stats(rows: list[dict]) -> dict:
    rows = with_holding(rows)
    trajs = defaultdict(list)
    for r in rows:
        trajs[r["traj_id"]].append(r)
    n = len(rows)
    put_backs = 0
    for steps in trajs.values():
        for a, b in zip(steps, steps[1:]):
            t, m = _TAKE.match(a["action"]), _MOVE.match(b["action"])
            put_backs += bool(t and m and t.group(1) == m.group(1) and t.group(2) == m.group(2))
    groups = defaultdict(list)
    for r in rows:
        if r.get("step_group", -1) is not None and r.get("step_group", -1) >= 0:
            groups[(r["episode_id"], r["step_group"])].append(r)
    in_big = [g for g in groups.values() if len(g) > 1]
    mixed = sum(len(g) for g in in_big if len({bool(r["holding"]) for r in g}) > 1)
    return {
        "success": sum(s[0]["won"] for s in trajs.values()) / max(1, len(trajs)),
        "length": n / max(1, len(trajs)),
        "take_move": sum(bool(_TAKE.match(r["action"]) or _MOVE.match(r["action"])) for r in rows) / max(1, n),
        "put_backs": put_backs,
        "zero_adv": sum(abs(r.get("A", 0.0)) < 1e-8 for r in rows) / max(1, n),
        "mixed_holding": mixed / max(1, sum(len(g) for g in in_big)),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--from", dest="start", type=int, default=1, help="first iteration to show")
    args = p.parse_args(argv)
    files = sorted(
        (int(m.group(1)), f)
        for f in (Path(args.run_dir) / "trajectories").glob("iter_*.jsonl")
        if (m := _FILE.search(f.name))
    )
    if not files:
        print(f"no trajectories/iter_*.jsonl in {args.run_dir} (set log.trajectories_every=1)", file=sys.stderr)
        return 2
    print(
        "| iteration | success | steps/episode | take+move actions | put-backs | rows with A=0 | "
        "step-group rows mixing held/not held |"
    )
    print("|---|---|---|---|---|---|---|")
    for it, f in files:
        if it < args.start:
            continue
        s = iteration_stats(read(f))
        print(
            f"| {it} | {s['success']:.2f} | {s['length']:.1f} | {100 * s['take_move']:.0f} % | {s['put_backs']} | "
            f"{100 * s['zero_adv']:.0f} % | {100 * s['mixed_holding']:.0f} % |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
