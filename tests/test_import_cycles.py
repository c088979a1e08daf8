"""No import cycle between gigpo's modules (issue "One loop that reads in thirty lines", item 4).

The graph has one node per module under src/gigpo (a package is its ``__init__``) and an edge for
every ``import``/``from`` statement anywhere in a module, function bodies and ``TYPE_CHECKING``
blocks included, relative imports resolved. An import names the deepest gigpo module it reaches:
``from gigpo.envs import spec`` and ``import gigpo.envs.spec`` both point at ``gigpo.envs.spec``,
``from gigpo.envs import make_env`` at ``gigpo.envs``. Importing a submodule runs its parent
packages' ``__init__`` first; that implied edge is left out (every package that imports its own
submodules would otherwise be a cycle), so a package ``__init__`` may import its children but no
child may import its package back.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "gigpo"


def _modules(src: Path = SRC) -> dict[str, tuple[Path, bool]]:
    """``dotted name -> (file, is_package)`` for every module under ``src``."""
    out = {}
    for f in sorted(src.rglob("*.py")):
        parts = list(f.relative_to(src.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (f, is_pkg)
    return out


def _deepest(name: str, mods) -> str | None:
    """The longest prefix of dotted ``name`` that is a gigpo module (None: not gigpo's)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in mods:
            return cand
    return None


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """``module -> the gigpo modules it imports`` (see the module docstring)."""
    mods = _modules(src)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, (path, is_pkg) in mods.items():
        package = mod if is_pkg else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    assert base, f"{path}: relative import beyond the top package"
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                # ``from X import y``: y is a submodule when X.y is a module, else a name in X
                targets = [f"{origin}.{a.name}" if f"{origin}.{a.name}" in mods else origin for a in node.names]
            for t in targets:
                dep = _deepest(t, mods)
                if dep is not None and dep != mod:
                    graph[mod].add(dep)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as ``[a, b, ..., a]``, or None (iterative DFS, deterministic order)."""
    color = dict.fromkeys(graph, 0)  # 0 new, 1 on the stack, 2 done
    for root in sorted(graph):
        if color[root]:
            continue
        path, its = [root], [iter(sorted(graph[root]))]
        color[root] = 1
        while path:
            nxt = next(its[-1], None)
            if nxt is None:
                color[path.pop()] = 2
                its.pop()
            elif color[nxt] == 1:
                return path[path.index(nxt) :] + [nxt]
            elif color[nxt] == 0:
                color[nxt] = 1
                path.append(nxt)
                its.append(iter(sorted(graph[nxt])))
    return None


def test_the_module_import_graph_has_no_cycle():
    graph = import_graph()
    assert len(graph) > 50 and graph["gigpo.envs"]  # the walk found the package and its imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_imports_in_functions_and_relative_imports(tmp_path):
    pkg = tmp_path / "gigpo"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .a import f\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from . import b\n    return b\n")
    (pkg / "sub" / "b.py").write_text("import numpy\nfrom ..sub.a import f\n")
    (pkg / "c.py").write_text("from gigpo.sub import f\nfrom gigpo import sub\n")
    graph = import_graph(pkg)
    assert graph == {
        "gigpo": set(),
        "gigpo.c": {"gigpo.sub"},
        "gigpo.sub": {"gigpo.sub.a"},
        "gigpo.sub.a": {"gigpo.sub.b"},
        "gigpo.sub.b": {"gigpo.sub.a"},
    }
    assert find_cycle(graph) == ["gigpo.sub.a", "gigpo.sub.b", "gigpo.sub.a"]
    assert find_cycle({"x": {"y"}, "y": set()}) is None
