"""Import a research script from research/ (not a package) in the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "research"


def load(script: str, name: str):
    """``research/<script>`` as module ``name``, registered in ``sys.modules`` (dataclasses look
    their module up there)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / script)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
