"""``gigpo list``: the env families (built-in and installed plug-ins) and the estimators, and the
top-level help naming them from the registries."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gigpo.advantages import ESTIMATORS, estimator_options
from gigpo.cli import main
from gigpo.envs import builtin_families

PLUGIN_DIR = Path(__file__).resolve().parent / "data" / "plugin_family"


def test_top_level_help_names_every_registered_estimator_and_builtin_family(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert len(builtin_families()) == 4 and len(ESTIMATORS) >= 7
    for name in [*builtin_families(), *ESTIMATORS, "list"]:
        assert name in out, name


def test_list_shows_families_and_estimators_with_options(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name, spec in builtin_families().items():
        assert f"  {name}" in out and f"module {spec.module}" in out
    assert out.count("built-in") == len(builtin_families())
    for name in ESTIMATORS:
        line = next(x for x in out.splitlines() if x.startswith(f"  {name} "))
        assert all(f"{k}=" in line for k in estimator_options(name)), line
    assert "[alias gae]" in out and "[learned critic]" in out
    assert main(["list", "estimators"]) == 0
    assert "env families" not in capsys.readouterr().out


def test_list_marks_plugins_and_broken_plugins(tmp_path):
    """In a fresh process with an installed echo plug-in and a broken one: both are listed, marked,
    and the command does not fail."""
    eps = (("gigpo_echo_family", "echo = gigpo_echo_family:FAMILY_SPEC"), ("broken_fam", "broken = nope_xyz:S"))
    for name, ep in eps:
        d = tmp_path / f"{name}-0.1.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
        (d / "entry_points.txt").write_text(f"[gigpo.families]\n{ep}\n")
    path = os.pathsep.join([str(tmp_path), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1")
    res = subprocess.run(
        [sys.executable, "-m", "gigpo.cli", "list", "families"], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "echo plug-in, entry point 'echo' = 'gigpo_echo_family:FAMILY_SPEC' (gigpo_echo_family 0.1)" in out
    assert "module gigpo_echo_family: You are an agent that repeats words." in out
    assert "broken plug-in, BROKEN (not loaded): entry point 'broken' = 'nope_xyz:S'" in out
    assert "Traceback" not in res.stderr and "advantage estimators" not in out


def test_list_into_a_closed_pipe_ends_quietly():
    """`gigpo list | head -1`: the reader closes the pipe before the listing is written (here before
    the process has even started); the command ends with the shell's SIGPIPE status and no traceback."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gigpo.cli", "list"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert err.decode() == "" and proc.returncode == 141
