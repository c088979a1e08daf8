"""benchmarks/advantage_speed.py runs (--quick) and reports every path, with identical groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "advantage_speed.py"


def test_benchmark_quick_prints_every_path_machine_and_load():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True, env=env, timeout=120, check=True
    ).stdout
    assert out.startswith("machine: ") and "numpy" in out
    assert "before: load average" in out and "after: load average" in out
    paths = (
        "alfworld-like exact",
        "alfworld-like graphgpo",
        "search-like similarity 0.9",
        "search-r1-format similarity 0.9",
        "alfworld-like similarity 0.95",
    )
    for path in paths:
        line = next(line for line in out.splitlines() if line.startswith(path))
        assert " wall " in line and " cpu " in line
    assert out.count("identical to naive: yes") == 3 and "NO" not in out
