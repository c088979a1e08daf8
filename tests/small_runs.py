"""The small ``search_tiny`` run that the fault tests train, in process or as a ``gigpo train``
subprocess (tests/test_train_faults.py, tests/test_train_faults_e2e.py)."""

from __future__ import annotations

import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SEARCH_TINY = CONFIGS / "search_tiny.yaml"
# Two tasks x two rollouts x three steps of 12 tokens, no SFT, no eval before training: seconds an iteration.
SMALL = [
    "sft.enabled=false",
    "env.tasks_per_iter=2",
    "env.group_size=2",
    "env.eval_tasks=1",
    "env.max_steps=3",
    "rollout.max_response_tokens=12",
    "log.progress=false",
    "log.tensorboard=false",
    "log.eval_before=false",
    "log.trajectories_every=0",
    "train.lr=1e-3",
]


def train_cmd(parent, name: str, extra=()) -> list[str]:
    """``gigpo train`` of the small run as ``<parent>/<name>``, ``extra`` overrides last."""
    return [
        sys.executable,
        "-m",
        "gigpo.cli",
        "train",
        "--config",
        str(SEARCH_TINY),
        *SMALL,
        f"output_dir={parent}",
        f"name={name}",
        *extra,
    ]
