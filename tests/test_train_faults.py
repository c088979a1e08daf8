"""Runs that survive faults and bad input: one writer per run dir, checks before the run dir is
touched, resumes that refuse (or record) run-defining changes and apply the allowed ones."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gigpo.cli import main
from gigpo.train.config import ConfigError, load_config
from gigpo.train.rundir import RunDirLock, RunDirLocked, lock_holder, open_run_dir

from small_runs import CONFIGS, SEARCH_TINY, SMALL, train_cmd

TINY = [*SMALL, "train.iterations=1"]


def _cfg(parent, name="r", extra=()):
    return load_config(SEARCH_TINY, [*TINY, f"output_dir={parent}", f"name={name}", *extra])


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def one_iteration_run(tmp_path_factory):
    """A run dir with the checkpoint of iteration 1 (trained in this process, no eval)."""
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    parent = tmp_path_factory.mktemp("runs")
    tr = Trainer(_cfg(parent, "base"))
    tr.train_iteration()
    tr.close()
    return parent / "base"


@pytest.fixture
def run_copy(one_iteration_run, tmp_path):
    dst = tmp_path / "r"
    shutil.copytree(one_iteration_run, dst)
    return dst


# --------------------------------------------------------------------------- the run-dir lock


def test_a_second_writer_is_refused_before_it_touches_the_run_dir(run_copy, capsys):
    before = _snapshot(run_copy)
    holder = RunDirLock.acquire(run_copy)  # this process plays the live trainer
    try:
        assert lock_holder(run_copy) == os.getpid()
        env = dict(os.environ, OMP_NUM_THREADS="1")
        base = [sys.executable, "-m", "gigpo.cli", "train"]
        fresh = subprocess.run(
            train_cmd(run_copy.parent, "r", ["train.iterations=1"]),
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        resumed = subprocess.run(
            [*base, "--resume", str(run_copy)], env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        holder.release()
    for r in (fresh, resumed):
        assert r.returncode == 1, r.stderr[-2000:]
        assert f"is in use by process {os.getpid()}" in r.stderr, r.stderr[-2000:]
        assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr  # one line
    # Nothing was renamed, written or deleted.
    assert sorted(p.name for p in run_copy.parent.iterdir()) == ["r"]
    assert _snapshot(run_copy) == before
    assert lock_holder(run_copy) is None  # freed with its holder


def test_live_trainer_holds_the_lock_until_close(tmp_path):
    from gigpo.train.trainer import Trainer

    tr = Trainer(_cfg(tmp_path))
    try:
        assert lock_holder(tmp_path / "r") == os.getpid()
        with pytest.raises(RunDirLocked, match=f"in use by process {os.getpid()}"):
            Trainer(_cfg(tmp_path))
        assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]  # not set aside while live
    finally:
        tr.close()
    assert lock_holder(tmp_path / "r") is None


def test_runs_set_aside_in_the_same_second_get_a_counter(tmp_path, monkeypatch):
    import gigpo.train.rundir as rundir

    monkeypatch.setattr(rundir.time, "strftime", lambda fmt: "20250101-000000")
    run = tmp_path / "r"
    for i in range(3):
        lock = open_run_dir(run, resume=False)
        (run / "metrics.jsonl").write_text(f"{i}\n")
        lock.release()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["r", "r-20250101-000000", "r-20250101-000000-1"]
    assert (tmp_path / "r-20250101-000000" / "metrics.jsonl").read_text() == "0\n"
    assert (tmp_path / "r-20250101-000000-1" / "metrics.jsonl").read_text() == "1\n"


def test_stale_temporary_checkpoints_are_removed_on_start(run_copy):
    ck = run_copy / "checkpoints"
    (ck / ".tmp-iter_000002-12345").mkdir()
    (ck / ".tmp-iter_000002-12345" / "state.pt").write_bytes(b"half")
    (ck / ".latest-12345").write_text("iter_000002")
    open_run_dir(run_copy, resume=True).release()
    assert sorted(p.name for p in ck.iterdir()) == ["iter_000001", "latest"]


# --------------------------------------------------------------------------- checks before the run dir


@pytest.mark.parametrize(
    "extra,match",
    [
        (["env.family=webshop", "env.kwargs.num_prodcts=10"], "num_prodcts"),
        (["env.task_kwargs.nonsense=1"], "nonsense"),
        (["model.name_or_path=/nonexistent/model"], "does not exist"),
        (["model.device=gpu0"], "model.device"),
        (["model.device=xpu"], "model.device: 'xpu' is not a device gigpo"),
        (["model.name_or_path=org/typo"], "not in the local Hugging Face cache"),
        (["guard.val_every=1", "guard.val_tasks=5000"], r"env.eval_tasks \+ guard.val_tasks: .* search has 1581"),
        (["env.train_tasks=100000"], "env.train_tasks: 100000 train tasks asked for, but search has 5459"),
    ],
)
def test_bad_kwargs_model_or_device_fail_before_the_run_dir_exists(tmp_path, extra, match):
    from gigpo.train.trainer import Trainer

    with pytest.raises(ConfigError, match=match):
        Trainer(_cfg(tmp_path, extra=extra))
    assert not any(tmp_path.iterdir())


def test_model_dir_without_tokenizer_is_refused(tmp_path):
    from gigpo.train.checks import check_model_path

    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match="missing a tokenizer file"):
        check_model_path(str(d))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_cuda_is_refused(tmp_path):
    from gigpo.train.trainer import Trainer

    with pytest.raises(ConfigError, match="CUDA is not available"):
        Trainer(_cfg(tmp_path, extra=["model.device=cuda"]))
    assert not any(tmp_path.iterdir())


def test_cli_reports_a_mistyped_env_kwarg_in_one_line(tmp_path, capsys):
    rc = main(
        [
            "train",
            "--config",
            str(CONFIGS / "webshop_tiny.yaml"),
            *TINY,
            f"output_dir={tmp_path}",
            "env.kwargs.num_prodcts=10",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("gigpo: config error: env.kwargs") and "num_prodcts" in err
    assert "\n" not in err and not any(tmp_path.iterdir())


BAD_EXPERT_FAMILY = """
import dataclasses
import gigpo_echo_family as echo


class Env(echo.EchoEnv):
    def expert_action(self):
        raise RuntimeError("no expert in this room")


def make_env(choices=3):
    return Env(choices)


def make_tasks(split, n=None, seed=0):
    return [dataclasses.replace(t, family="badexp") for t in echo.make_tasks(split, n, seed)]


FAMILY_SPEC = dataclasses.replace(echo.FAMILY_SPEC, name="badexp", module=__name__, tiny_corpus_episodes=2)
"""


def test_a_family_whose_expert_fails_stops_the_run_in_one_line_and_leaves_nothing(tmp_path):
    """With SFT on, preflight plays the expert once (a config error before any dir exists); with
    SFT off, tiny's corpus build meets it: one line, exit 1, and the run dir it had made removed
    with the run it had set aside back in its place."""
    (tmp_path / "badexp.py").write_text(BAD_EXPERT_FAMILY)
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).parent / "data" / "plugin_family"),
        "GIGPO_CACHE": str(tmp_path / "cache"),  # tiny is built here, so its corpus meets the family
        "OMP_NUM_THREADS": "1",
    }
    runs = tmp_path / "runs"
    cmd = [
        sys.executable, "-m", "gigpo.cli", "train", "--config", str(CONFIGS / "template_family.yaml"),
        "env.family=badexp", f"env.family_module={tmp_path / 'badexp.py'}", f"output_dir={runs}", "name=x",
    ]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert "sft.enabled: the badexp env's expert_action failed" in r.stderr and "no expert in this room" in r.stderr
    assert not runs.exists()
    (runs / "x").mkdir(parents=True)
    (runs / "x" / "metrics.jsonl").write_text("an earlier run\n")
    r = subprocess.run([*cmd, "sft.enabled=false"], env=env, capture_output=True, text=True, timeout=300)
    err = [x for x in r.stderr.splitlines() if x.startswith("gigpo:")]
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert len(err) == 1 and "tiny corpus: env family 'badexp' failed to give its text" in err[0], r.stderr
    assert "removed: the run failed before it began" in r.stdout
    assert [p.name for p in runs.iterdir()] == ["x"]
    assert (runs / "x" / "metrics.jsonl").read_text() == "an earlier run\n"


# --------------------------------------------------------------------------- resume


def test_resume_refuses_run_defining_changes_naming_key_and_values(run_copy, capsys):
    before = _snapshot(run_copy)
    rc = main(["train", "--resume", str(run_copy), "env.group_size=3"])
    err = capsys.readouterr().err
    assert rc == 2 and "env.group_size" in err and "2 -> 3" in err and "--force" in err, err
    assert _snapshot(run_copy) == before


def test_forced_resume_records_the_change_and_keeps_config_yaml(run_copy):
    from gigpo.train.trainer import Trainer

    original = (run_copy / "config.yaml").read_bytes()
    # grpo has no similarity grouping: the option the run set must be cleared with the switch
    cfg = _cfg(run_copy.parent, extra=["algorithm.estimator=grpo", "algorithm.similarity_threshold=null"])
    Trainer(cfg, resume=True, force=True).close()
    rows = [json.loads(x) for x in (run_copy / "config_changes.jsonl").read_text().splitlines()]
    assert {"key": "algorithm.estimator", "old": "gigpo", "new": "grpo"} in rows[0]["changes"]
    assert (run_copy / "config.yaml").read_bytes() == original
    assert load_config(run_copy / "config.resumed.yaml").algorithm.estimator == "grpo"


def test_resume_with_a_new_lr_uses_it(run_copy):
    from gigpo.train.trainer import Trainer

    tr = Trainer(_cfg(run_copy.parent, extra=["train.lr=2.5e-4", "train.iterations=2"]), resume=True)
    try:
        assert tr.iteration == 1
        m = tr.train_iteration()
    finally:
        tr.close()
    assert m["actor/lr"] == pytest.approx(2.5e-4)
    assert all(
        g["lr"] == pytest.approx(2.5e-4) and g["initial_lr"] == 2.5e-4 for g in tr.updater.optimizer.param_groups
    )
    assert (run_copy / "config.yaml").read_bytes() != (run_copy / "config.resumed.yaml").read_bytes()


def test_resume_falls_back_past_a_corrupt_newest_checkpoint(run_copy):
    from gigpo.train.checkpoint import save_checkpoint
    from gigpo.train.trainer import Trainer

    state = torch.load(run_copy / "checkpoints" / "iter_000001" / "state.pt", weights_only=True)
    save_checkpoint(run_copy, 2, {k: state[k] for k in ("model", "updater", "sampler")})
    f = run_copy / "checkpoints" / "iter_000002" / "state.pt"
    f.write_bytes(f.read_bytes()[:1000])
    with pytest.warns(UserWarning, match="skipping checkpoint iter_000002"):
        tr = Trainer(_cfg(run_copy.parent, extra=["train.iterations=2"]), resume=True)
    tr.close()
    assert tr.iteration == 1


def test_resume_with_an_unusable_device_writes_nothing(run_copy, capsys):
    before = _snapshot(run_copy)
    rc = main(["train", "--resume", str(run_copy), "model.device=xpu"])
    line = capsys.readouterr().err.strip()
    assert rc == 2 and line.startswith("gigpo: config error: model.device: 'xpu'") and "\n" not in line, line
    assert _snapshot(run_copy) == before and not (run_copy / "config.resumed.yaml").exists()


@pytest.mark.parametrize("force", [False, True])
def test_resume_refuses_switching_lora_which_the_checkpoint_cannot_load(run_copy, capsys, force):
    before = _snapshot(run_copy)
    rc = main(["train", "--resume", str(run_copy), "model.lora=true", *(["--force"] if force else [])])
    line = capsys.readouterr().err.strip()
    assert rc == 2 and line.startswith("gigpo: config error: model.lora: ") and "False -> True" in line, line
    assert "\n" not in line and _snapshot(run_copy) == before


# --------------------------------------------------------------------------- one line instead of a traceback


def test_output_dir_under_a_regular_file_is_one_line_before_anything_is_written(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("mine\n")
    for out, name, key in ((f, "r", "output_dir"), (f / "runs", "r", "output_dir"), (tmp_path, "notes.txt", "name")):
        rc = main(["train", "--config", str(SEARCH_TINY), *TINY, f"output_dir={out}", f"name={name}"])
        line = capsys.readouterr().err.strip()
        assert rc == 2 and line.startswith(f"gigpo: config error: {key}: {str(f)!r} is a file, not a directory"), line
        assert "\n" not in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and f.read_text() == "mine\n"


def test_a_300_character_name_is_one_line_and_user_error_survives_enametoolong(tmp_path, capsys):
    import errno

    from gigpo import cli

    rc = main(["train", "--config", str(SEARCH_TINY), *TINY, f"output_dir={tmp_path}", "name=" + "x" * 300])
    line = capsys.readouterr().err.strip()
    assert rc == 2 and line.startswith("gigpo: config error: name: must be at most 200 bytes") and "\n" not in line
    assert not any(tmp_path.iterdir())
    # The handler itself looks for a checkpoint in the run dir, whose path may be what failed.
    long_dir = tmp_path / ("x" * 300)
    err = OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG), str(long_dir))
    cli._RUN_DIR[:] = [long_dir]
    try:
        code, msg = cli._user_error(err)
        assert code == 2 and "the name is too long" in msg and "output_dir=" in msg
        code, msg = cli._user_error(NotADirectoryError(errno.ENOTDIR, "Not a directory", str(tmp_path / "f" / "r")))
        assert code == 2 and "a part of it is a file, not a directory" in msg
    finally:
        cli._RUN_DIR.clear()


def test_running_out_of_memory_is_one_line_with_the_resume_command(run_copy):
    from gigpo import cli

    cli._RUN_DIR[:] = [run_copy]
    try:
        try:  # a real failed allocation on the CPU: torch raises a plain RuntimeError
            torch.empty(1 << 60, dtype=torch.uint8)
        except RuntimeError as exc:
            cpu = exc
        for e in (MemoryError(), torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), cpu):
            code, msg = cli._user_error(e)
            assert code == 1 and msg.startswith(f"out of memory ({type(e).__name__}): lower env.tasks_per_iter")
            assert msg.endswith(f"then continue with: gigpo train --resume {run_copy}") and "\n" not in msg
    finally:
        cli._RUN_DIR.clear()
