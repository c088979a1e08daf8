"""The package's dependency rules (docs/architecture.md, "Packages"), checked on every import,
module-level or inside a function."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gigpo"
# package -> the gigpo packages it may import (``text`` and ``_imports`` are leaves everyone may use)
ALLOWED = {
    "advantages": set(),
    "batch": set(),
    "envs": set(),
    "learner": set(),
    "policy": {"envs", "learner"},
    "agent": {"envs", "policy"},
    "rollout": {"envs", "agent", "policy", "batch"},
    "train": {"rollout", "advantages", "learner", "policy", "envs", "agent", "batch", "report"},
    "report": set(),
    "cli": {"train", "learner", "report", "envs", "advantages"},
}


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module == "gigpo":
                yield from (f"gigpo.{a.name}" for a in node.names)
            else:
                yield node.module


def test_imports_follow_the_layering():
    bad = []
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        pkg = rel.parts[0].removesuffix(".py")
        if pkg in ("__init__", "text", "_imports"):
            continue
        assert pkg in ALLOWED, f"new package {pkg!r}: add its rule to ALLOWED and docs/architecture.md"
        for name in _imports(f):
            parts = name.split(".")
            if (
                parts[0] != "gigpo"
                or len(parts) < 2
                or parts[1] in (pkg, "text", "_imports")
                or parts[1].startswith("__")
            ):
                continue
            if parts[1] not in ALLOWED[pkg]:
                bad.append(f"{rel}: imports {name} ({pkg} may import {sorted(ALLOWED[pkg]) or 'nothing of gigpo'})")
    assert not bad, "\n".join(bad)


def test_the_rules_have_no_cycle():
    seen, stack = set(), set()

    def visit(p):
        assert p not in stack, f"dependency cycle through {p}"
        if p in seen:
            return
        stack.add(p)
        for q in ALLOWED[p]:
            visit(q)
        stack.discard(p)
        seen.add(p)

    for p in ALLOWED:
        visit(p)


def test_the_learner_loads_nothing_but_itself():
    """``gigpo.learner`` is the piece a GPU user swaps or scales: importing it brings in no rollout,
    agent, env, policy or training-loop module."""
    import subprocess
    import sys

    code = "import sys, gigpo.learner; print(sorted(m for m in sys.modules if m.startswith('gigpo.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = eval(out)  # noqa: S307 - our own subprocess's printed list
    assert loaded and all(m.startswith("gigpo.learner") for m in loaded), loaded
