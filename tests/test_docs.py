"""The README's library example runs, every relative link in README.md, docs/ and research/ resolves, and
docs/extending.md's examples are the fixtures the tests run."""

import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_readme_python_example_runs():
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, "README.md has no python example"
    scope: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), scope)  # noqa: S102 - our own README
    res = scope["res"]
    assert res.advantages.shape == (5,) and np.isfinite(res.advantages).all()
    assert (res.step_groups >= 0).all()


def test_relative_links_resolve():
    broken = []
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "research").rglob("*.md"))]
    for doc in docs:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_extending_estimator_example_is_the_tested_fixture():
    doc = (ROOT / "docs" / "extending.md").read_text()
    section = doc.split("## Add an advantage estimator", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    fixture = (ROOT / "tests" / "data" / "plugin_estimator" / "my_estimators.py").read_text()
    assert example in fixture  # tests/test_envs_spec.py trains with the fixture from the CLI


def test_extending_backend_example_is_the_tested_fixture():
    doc = (ROOT / "docs" / "extending.md").read_text()
    section = doc.split("## Add a model backend", 1)[1]
    example = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    fixture = (ROOT / "tests" / "data" / "plugin_generator" / "my_generator.py").read_text()
    assert example in fixture  # tests/test_policy_backend.py runs the fixture against HFGenerator


def _section(text: str, heading: str) -> str:
    """The text of ``heading``'s section, up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    body = text.split(heading + "\n", 1)[1]
    m = re.search(rf"^#{{1,{len(level)}}} ", body, re.M)
    return body[: m.start()] if m else body


def test_architecture_names_every_registered_family_estimator_and_backend():
    import gigpo.advantages
    from gigpo.advantages import ALIASES, ESTIMATORS
    from gigpo.envs.builtin import BUILTIN

    # gigpo's own estimators: other tests in this process may have registered plug-in ones
    ESTIMATORS = {n: f for n, f in ESTIMATORS.items() if f.__module__.startswith("gigpo.")}
    ALIASES = {a: n for a, n in ALIASES.items() if n in ESTIMATORS}
    from gigpo.train.config_rollout import BACKENDS

    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = _section(doc, "## Environments")
    missing = [f"family {s.name}" for s in BUILTIN if f"| `{s.name}` |" not in table]
    intro = doc.split("\n## ", 1)[0]  # the page's opening paragraph lists the estimators
    missing += [f"estimator {n}" for n in [*ESTIMATORS, *ALIASES] if f"`{n}`" not in intro]
    missing += [f"backend {b}" for b in BACKENDS if f"`{b}`" not in doc]
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)
    module_doc = gigpo.advantages.__doc__
    assert not [n for n in [*ESTIMATORS, *ALIASES] if f"``{n}``" not in module_doc], "gigpo.advantages' docstring"


def test_every_shipped_config_runs_a_documented_builtin_family():
    import yaml

    from gigpo.envs.builtin import BUILTIN

    builtin = {s.name for s in BUILTIN}
    table = _section((ROOT / "docs" / "architecture.md").read_text(), "## Environments")
    # template_family.yaml is the starting point for a new family (docs/extending.md runs it with
    # its example plug-in), not a built-in one
    configs = sorted(p for p in (ROOT / "configs").glob("*.yaml") if not p.name.startswith("template_"))
    assert configs
    for path in configs:
        family = yaml.safe_load(path.read_text())["env"]["family"]
        assert family in builtin, f"{path.name}: {family} is not a built-in family"
        assert f"| `{family}` |" in table, f"{path.name}: {family} is not in docs/architecture.md's family table"


def test_readme_smoke_command_runs_as_written(tmp_path):
    """The README's smoke test, run as a user would (its own ``runs/``: here under tmp_path), with
    stderr redirected as to a log file: it finishes, names its run dir, and writes no progress bars
    there (transformers' "Loading weights" bars are off when stderr is not a terminal)."""
    import os
    import shlex
    import subprocess
    import sys

    text = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "name=smoke" in b)
    words = shlex.split(block.replace("\\\n", " "), comments=True)
    assert words[0] == ".venv/bin/gigpo", words
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "gigpo.cli", *words[1:]]
    config = words.index("--config") + 1
    cmd[cmd.index(words[config])] = str(ROOT / words[config])
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines()[0] == "run directory: runs/smoke", r.stdout[:300]
    assert (tmp_path / "runs" / "smoke" / "summary.json").exists()
    assert "Loading weights" not in r.stderr and "it/s]" not in r.stderr, r.stderr[-2000:]
