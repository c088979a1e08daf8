"""The small ``search_tiny`` run that the fault tests train, in process or as a ``gigpo train``
subprocess (tests/test_train_faults.py, tests/test_train_faults_e2e.py), and a real disk to fill
(``tmpfs``, ``fill_disk``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
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


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "60m"):
    """A fresh tmpfs of ``size`` mounted at ``path`` for the block (a real disk to fill), or the
    test is skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN, no mount)."""
    import pytest

    path.mkdir(parents=True, exist_ok=True)
    if not shutil.which("mount") or os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, text=True
    )
    if r.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill_disk(where: Path, leave: int = 256 << 10) -> Path:
    """Fill ``where``'s file system but ``leave`` bytes with a ballast file; returns the ballast."""
    ballast = where / f"ballast-{len(list(where.glob('ballast-*')))}"
    size = shutil.disk_usage(where).free - leave
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.posix_fallocate(fd, 0, max(size, 1))
    finally:
        os.close(fd)
    return ballast
