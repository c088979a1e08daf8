"""Data for the report's trajectory viewer: a capped JSON digest of trajectories/ files.

Layout of the digest (embedded in the page, read by the inline script in ``html.py``)::

    {"iterations": [{"iteration": int, "tasks": [
        {"episode_id": int, "task_id": str, "task_type": str, "trajs": [
            {"traj_id": int, "won": bool, "steps": [
                {"t": int, "obs": str,     # anchor: the observation the action was taken in
                 "st": str,                # the env's state key ("" when the run has none)
                 "act": str, "resp": str, "r": float, "valid": bool, "done": bool,
                 "ae": float|None, "as": float|None, "a": float|None,   # A^E, A^S, A
                 "g": int, "gs": int}      # step-group label (-1: none) and its size in the iteration
            ], "final_obs": str}]}]}],
     "notes": [str]}

Caps keep the page small: a few iterations (first, last, evenly spaced between), a few episode
groups per iteration, long texts cut; every cut is listed in ``notes`` and shown on the page.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict

from gigpo.report.data import RunData, as_float, read_trajectory_rows

MAX_ITERATIONS = 6
MAX_TASKS = 6
MAX_TRAJS = 16
MAX_STEPS = 60
TEXT_CAPS = (600, 300, 150, 80)  # tried in order until the digest fits MAX_BYTES
MAX_BYTES = 1_500_000


def pick_iterations(available: list[int], k: int = MAX_ITERATIONS) -> list[int]:
    """Up to ``k`` of ``available`` (sorted): the first, the last and evenly spaced ones between."""
    if len(available) <= k:
        return list(available)
    idx = sorted({round(i * (len(available) - 1) / (k - 1)) for i in range(k)})
    return [available[i] for i in idx]


def _cut(s, cap: int) -> str:
    s = "" if s is None else str(s)
    return s if len(s) <= cap else s[: cap - 1] + "\u2026"


def _num(v):
    f = as_float(v)
    return None if f is None or not math.isfinite(f) else round(f, 4)


def _iteration_digest(rows: list[dict], cap: int, notes: list[str], it: int) -> dict:
    sizes = Counter(
        int(r["step_group"]) for r in rows if isinstance(r.get("step_group"), (int, float)) and r["step_group"] >= 0
    )
    by_ep: dict[int, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if isinstance(r.get("episode_id"), int) and isinstance(r.get("traj_id"), int):
            by_ep[r["episode_id"]][r["traj_id"]].append(r)
    eps = sorted(by_ep)
    if len(eps) > MAX_TASKS:
        notes.append(f"iteration {it}: showing {MAX_TASKS} of {len(eps)} tasks")
        eps = eps[:MAX_TASKS]
    tasks = []
    for ep in eps:
        trajs = by_ep[ep]
        tids = sorted(trajs)
        if len(tids) > MAX_TRAJS:
            notes.append(f"iteration {it}, episode {ep}: showing {MAX_TRAJS} of {len(tids)} rollouts")
            tids = tids[:MAX_TRAJS]
        first = trajs[tids[0]][0]
        out_trajs = []
        for tid in tids:
            steps = sorted(trajs[tid], key=lambda r: r.get("step", 0))
            if len(steps) > MAX_STEPS:
                notes.append(f"iteration {it}, trajectory {tid}: showing {MAX_STEPS} of {len(steps)} steps")
                steps = steps[:MAX_STEPS]
            g = lambda r: int(r["step_group"]) if isinstance(r.get("step_group"), (int, float)) else -1  # noqa: E731
            out_trajs.append(
                {
                    "traj_id": tid,
                    "won": bool(steps[0].get("won")),
                    "steps": [
                        {
                            "t": int(r.get("step", 0)),
                            "obs": _cut(r.get("anchor"), cap),
                            "st": _cut(r.get("state_anchor"), cap // 2),
                            "act": _cut(r.get("action"), cap // 2),
                            "resp": _cut(r.get("response"), cap // 2),
                            "r": _num(r.get("reward")),
                            "valid": bool(r.get("valid", True)),
                            "done": bool(r.get("done", False)),
                            "ae": _num(r.get("A_E")),
                            "as": _num(r.get("A_S")),
                            "a": _num(r.get("A")),
                            "g": g(r),
                            "gs": sizes.get(g(r), 0),
                        }
                        for r in steps
                    ],
                    "final_obs": _cut(steps[-1].get("observation"), cap) if steps[-1].get("done") else "",
                }
            )
        tasks.append(
            {
                "episode_id": ep,
                "task_id": str(first.get("task_id", "")),
                "task_type": str(first.get("task_type", "") or ""),
                "trajs": out_trajs,
            }
        )
    return {"iteration": it, "tasks": tasks}


def no_trajectories_message(run: RunData) -> str:
    """Why the viewer has nothing to show, naming the cause the run directory points to."""
    head = "No trajectories were written in this run"
    if run.trajectories:
        return "No trajectories to show: the trajectories/ files of this run hold no readable steps."
    k = run.cfg("log.trajectories_every")
    done = max((int(r["iteration"]) for r in run.train), default=0)
    if not isinstance(k, int) or isinstance(k, bool):
        return f"{head} (no trajectories/ files; without config.yaml the log.trajectories_every setting is unknown)."
    if k <= 0:
        return f"{head}: log.trajectories_every is {k} (never). Set log.trajectories_every=1 to write them."
    if done == 0:
        return f"{head}: it logged no training iteration (trajectories are written after an iteration's update)."
    if done < k:
        span = "iteration 1" if done == 1 else f"iterations 1-{done}"
        return (
            f"{head}: trajectories are written at iterations that are a multiple of log.trajectories_every = {k}, "
            f"and none of the logged {span} was. Set log.trajectories_every=1 (or at most train.iterations) "
            "to see them."
        )
    return (
        f"{head}, although iteration {k} was logged and log.trajectories_every = {k}: the trajectories/ "
        "directory is missing or empty (deleted or not copied with the run?)."
    )


def viewer_data(run: RunData) -> dict:
    """The capped digest (module docstring) of ``run``'s trajectory files; with no step to show,
    ``{"iterations": [], "notes": [...], "empty": <why, from no_trajectories_message>}``."""
    notes: list[str] = []
    available = list(run.trajectories)
    chosen = pick_iterations(available)
    if len(chosen) < len(available):
        notes.append(f"showing iterations {', '.join(map(str, chosen))} of {len(available)} with trajectory files")
    raw = {it: read_trajectory_rows(run.trajectories[it], run.problems) for it in chosen}
    data: dict = {"iterations": [], "notes": notes}
    for cap in TEXT_CAPS:
        n = list(notes)
        its = [_iteration_digest(raw[it], cap, n, it) for it in chosen if raw[it]]
        data = {
            "iterations": [d for d in its if d["tasks"]],
            "notes": n + [f"texts longer than {cap} characters are cut"],
        }
        if not data["iterations"]:
            return {"iterations": [], "notes": notes, "empty": no_trajectories_message(run)}
        if len(json.dumps(data)) <= MAX_BYTES:
            return data
    # Still too big with the shortest texts: drop iterations from the middle until it fits.
    while len(data["iterations"]) > 1 and len(json.dumps(data)) > MAX_BYTES:
        data["iterations"].pop(len(data["iterations"]) // 2)
    data["notes"].append("some iterations dropped to keep the page small")
    return data


def to_script_json(data: dict) -> str:
    """``data`` as JSON safe inside ``<script type="application/json">``: every ``<`` becomes the
    JSON escape ``\\u003c``, so no ``</script>`` or ``<!--`` inside a text can end the block."""
    return json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
