"""Synthetic advantage-estimator inputs shaped like ALFWorld's and Search-R1's rollouts.

Test and benchmark data, not training data: ``benchmarks/advantage_speed.py`` times the estimators
on these batches and ``tests/test_advantages_similarity_bounds.py`` checks similarity grouping on
them. Each generator is a pure function of its arguments (its own ``random.Random(seed)``) and
returns ``(episode_ids, traj_ids, anchors, rewards)``: int arrays, a list of observation strings
and float32 per-step rewards, one entry per row, rows trajectory-major in step order.
"""

from __future__ import annotations

import random

import numpy as np

__all__ = ["alfworld_like", "search_like", "search_r1_like", "sentence"]

WORDS = (
    "cabinet drawer countertop shelf sinkbasin fridge microwave stoveburner garbagecan toaster "
    "mug apple knife spoon plate bowl lettuce tomato bread egg potato pan pot kettle vase book "
    "open closed you see arrive at on in the a nothing happens is"
).split()


def sentence(rng: random.Random, lo: int, hi: int) -> str:
    n = rng.randint(lo, hi)
    words: list[str] = []
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
