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
