"""Held-out success of a uniformly random mover on configs/sokoban_tiny.yaml's eval rooms (64
rooms, 15 steps): the floor a policy that reads the grid must clear. Compare with a model's
``gigpo eval --config configs/sokoban_tiny.yaml model.name_or_path=DIR``.

    python research/experiments/sokoban_baselines.py                      # 3 draws

The finding it backs: research/notes/sokoban-tiny-does-not-read-the-grid.md.
"""

from __future__ import annotations

import argparse
import random

from gigpo.envs.sokoban import make_env, make_tasks

ACTIONS = ("up", "down", "left", "right")


def random_mover(n_tasks: int, max_steps: int, seed: int) -> float:
    tasks = make_tasks("eval", n=n_tasks, seed=0, dim=6, num_boxes=1)
    env, rng, wins = make_env(), random.Random(seed), 0
    for t in tasks:
        env.reset(t)
        info: dict = {}
        for _ in range(max_steps):
            _, _, done, info = env.step(rng.choice(ACTIONS))
            if done:
                break
        wins += bool(info.get("won"))
    return wins / len(tasks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--max-steps", type=int, default=15)
    p.add_argument("--draws", type=int, default=3)
    a = p.parse_args()
    for d in range(a.draws):
        print(f"random mover, draw {d}: held-out success {random_mover(a.tasks, a.max_steps, d):.3f}")


if __name__ == "__main__":
    main()
