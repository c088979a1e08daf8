"""How much a Sokoban policy circles: the share of its held-out steps taken from a grid it has
already been in earlier in the same episode (1 - distinct states / steps, averaged over
episodes), at the config's eval temperature 0.4, with success and the share out of steps.

    python research/experiments/sokoban_revisits.py start=DIR gigpo=RUN/model grpo=RUN/model [--rooms 128]

The finding it backs: research/results.md, "Sokoban from a weaker start".
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

import gigpo.rollout
from gigpo.train.config import load_config
from gigpo.train.evaluate import evaluate_model


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="+", help="NAME=MODEL_DIR")
    p.add_argument("--rooms", type=int, default=128, help="held-out rooms (the first N of the eval split)")
    p.add_argument("--config", default="configs/sokoban_tiny.yaml")
    args = p.parse_args()
    torch.set_num_threads(1)
    captured = {}
    evaluate = gigpo.rollout.eval_rollout

    def keep_batch(*a, **k):  # evaluate_model returns metrics only; keep its rows
        batch, metrics = evaluate(*a, **k)
        captured["batch"] = batch
        return batch, metrics

    gigpo.rollout.eval_rollout = keep_batch
    for spec in args.models:
        name, path = spec.split("=", 1)
        cfg = load_config(
            args.config, [f"model.name_or_path={path}", f"env.eval_tasks={args.rooms}", "log.progress=false"]
        )
        m = evaluate_model(cfg)
        b = captured["batch"]
        episodes = np.unique(b.episode_id)
        revisit = [1 - len(set(b.anchor[b.episode_id == e])) / int((b.episode_id == e).sum()) for e in episodes]
        print(
            json.dumps(
                {
                    "model": name,
                    "success": m["success"],
                    "truncated": m["truncated_rate"],
                    "revisit_share": round(float(np.mean(revisit)), 3),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
