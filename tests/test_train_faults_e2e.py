"""Faults during a real `gigpo train`: a hung env worker, Ctrl-C, a full disk, an unwritable
output dir. Each run either finishes or stops with one clear line, and no finished iteration is lost."""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gigpo.cli import main

from small_runs import SEARCH_TINY, SMALL, fill_disk, tmpfs, train_cmd


def _train_iterations(run):
    path = run / "metrics.jsonl"
    if not path.exists():
        return []
    return [
        json.loads(x)["iteration"]
        for x in path.read_text().splitlines()
        if x.strip() and json.loads(x)["tag"] == "train"
    ]


def _wait_for_iteration(proc, run, k, timeout=240):
    t0 = time.monotonic()
    while k not in _train_iterations(run):
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() - t0 < timeout, "no progress"
        time.sleep(0.1)


def _env_workers(pid):
    import psutil

    procs = psutil.Process(pid).children(recursive=True)
    forked = [p for p in procs if p.ppid() != pid]  # forkserver children
    return forked or [
        p for p in procs if not any(s in " ".join(p.cmdline()) for s in ("resource_tracker", "forkserver"))
    ]


@pytest.mark.slow
def test_a_stopped_env_worker_times_out_and_the_run_finishes(tmp_path):
    pytest.importorskip("psutil")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = tmp_path / "hung"
    proc = subprocess.Popen(
        train_cmd(
            tmp_path,
            "hung",
            ["train.iterations=2", "env.executor=process", "env.step_timeout=2", "env.reset_timeout=2"],
        ),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stopped = None
    try:
        _wait_for_iteration(proc, run, 1)
        workers = _env_workers(proc.pid)
        assert workers, "no env worker processes found"
        stopped = workers[0].pid
        os.kill(stopped, signal.SIGSTOP)  # hung, not dead: only a timeout can notice
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):  # normally killed by its executor already
                os.kill(stopped, signal.SIGKILL)
    assert proc.returncode == 0, err[-3000:]
    assert _train_iterations(run) == [1, 2]
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any(x.get("rollout/failed_rate", 0) > 0 for x in lines if x["iteration"] > 1), "no episode timed out"


@pytest.mark.slow
def test_ctrl_c_stops_with_the_resume_command_and_resume_completes(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = tmp_path / "cc"
    # Many iterations, so the Ctrl-C cannot arrive after a run that was about to finish anyway
    # (two iterations of this tiny job end within a second of the first one's log line).
    proc = subprocess.Popen(
        train_cmd(tmp_path, "cc", ["train.iterations=100"]),
        env=env,
        # a shell's background job ignores SIGINT, and children inherit that: give the run the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for_iteration(proc, run, 1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("gigpo: stopped at iteration ") and last.endswith(f"resume with: gigpo train --resume {run}")
    assert "Traceback" not in err
    done = _train_iterations(run)
    assert done and done == list(range(1, len(done) + 1))
    r = subprocess.run(
        [sys.executable, "-m", "gigpo.cli", "train", "--resume", str(run), f"train.iterations={len(done) + 1}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert _train_iterations(run) == list(range(1, len(done) + 2))


@pytest.mark.slow
def test_disk_full_while_checkpointing_stops_with_one_line_and_keeps_the_previous_checkpoint(
    tmp_path, monkeypatch, capsys
):
    import gigpo.train.trainer as trainer
    from gigpo.train.checkpoint import load_latest

    real = trainer.save_checkpoint

    def full_disk_at_2(run_dir, iteration, state, **kw):
        if iteration == 2:  # the kernel answers ENOSPC when the new `latest` pointer is written
            (Path(run_dir) / "checkpoints" / f".latest-{os.getpid()}").symlink_to("/dev/full")
        return real(run_dir, iteration, state, **kw)

    monkeypatch.setattr(trainer, "save_checkpoint", full_disk_at_2)
    rc = main(
        [
            "train",
            "--config",
            str(SEARCH_TINY),
            *SMALL,
            f"output_dir={tmp_path}",
            "name=full",
            "train.iterations=2",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    run = tmp_path / "full"
    assert rc == 1
    assert (
        err[-1] == f"gigpo: disk full while writing the run: free some space; then continue with: "
        f"gigpo train --resume {run}"
    )
    path, state = load_latest(run)
    assert path.name == "iter_000001" and state["iteration"] == 1
    # iteration 2 was logged before its checkpoint failed; a resume drops that line and re-runs it
    assert _train_iterations(run) == [1, 2]


@pytest.mark.slow
def test_a_really_full_disk_at_a_checkpoint_or_at_model_is_one_line_and_the_run_resumes(tmp_path, monkeypatch, capsys):
    """A tmpfs filled to its last 256 KB: torch's checkpoint writer (RuntimeError "unexpected pos")
    and safetensors' model writer (SafetensorError) both become the one disk-full line."""
    import gigpo.policy.cache as cache
    import gigpo.train.trainer as trainer
    from gigpo.train.checkpoint import load_latest

    disk = tmp_path / "disk"
    args = ["train", "--config", str(SEARCH_TINY), *SMALL, f"output_dir={disk}", "name=full", "train.iterations=2"]
    run = disk / "full"
    with tmpfs(disk, "200m"):
        ballast = []
        real_save, real_replace = trainer.save_checkpoint, cache.replace_dir_atomic

        def full_at_2(run_dir, iteration, state, **kw):
            if iteration == 2 and not ballast:
                ballast.append(fill_disk(disk))
            return real_save(run_dir, iteration, state, **kw)

        monkeypatch.setattr(trainer, "save_checkpoint", full_at_2)
        assert main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (
            f"gigpo: disk full while writing {run}/checkpoints/iter_000002: free some space; "
            f"then continue with: gigpo train --resume {run}"
        )
        assert "Traceback" not in "\n".join(err)
        assert sorted(p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")) == []
        assert load_latest(run)[0].name == "iter_000001"

        # Space freed, the resume finishes iteration 2; the disk fills again as model/ is written.
        ballast.pop().unlink()
        monkeypatch.setattr(trainer, "save_checkpoint", real_save)

        def full_at_model(target, write, **kw):
            ballast.append(fill_disk(disk))
            return real_replace(target, write, **kw)

        monkeypatch.setattr(cache, "replace_dir_atomic", full_at_model)
        assert main(["train", "--resume", str(run)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (
            f"gigpo: disk full while writing {run}/model: free some space; "
            f"then continue with: gigpo train --resume {run}"
        )
        assert not (run / "model").exists() and not list(run.glob(".model*"))

        ballast.pop().unlink()
        monkeypatch.setattr(cache, "replace_dir_atomic", real_replace)
        assert main(["train", "--resume", str(run)]) == 0
        assert (run / "model" / "model.safetensors").is_file() and (run / "summary.json").is_file()
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        assert [(x["tag"], x["iteration"]) for x in lines if x["tag"] in ("train", "eval_final")] == [
            ("train", 1),
            ("train", 2),
            ("eval_final", 2),  # evaluated on both resumes, logged once
        ]


def test_unwritable_output_dir_is_one_line(capsys):
    rc = main(["train", "--config", str(SEARCH_TINY), *SMALL, "output_dir=/sys/gigpo-test"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("gigpo: cannot write /sys/gigpo-test") and "writable output_dir" in err
    assert "\n" not in err


def _tags_at(run, iteration):
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return sorted(x["tag"] for x in lines if x["iteration"] == iteration and x["tag"] != "guard")


@pytest.mark.slow
def test_a_resume_after_a_kill_in_iteration_1_logs_eval_before_and_val_once(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    run = tmp_path / "twice"
    extra = ["train.iterations=1", "log.eval_before=true", "guard.val_every=1", "guard.val_tasks=1"]
    killed = subprocess.run(
        train_cmd(tmp_path, "twice", extra),
        env=dict(env, GIGPO_DEBUG_SIGKILL_AT="1:after_rollout"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert _tags_at(run, 0) == ["eval_before", "val"]
    r = subprocess.run(
        [sys.executable, "-m", "gigpo.cli", "train", "--resume", str(run)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resumed from iteration 0" in r.stdout
    assert "held-out eval before training" not in r.stdout  # the start is not evaluated again...
    assert "before vs after training" in r.stdout  # ...its logged result makes the table
    assert _tags_at(run, 0) == ["eval_before", "val"]
    assert _tags_at(run, 1) == ["eval_final", "train"]


FAULTY_FAMILY = """
from gigpo.envs import FamilySpec, Task


class FaultyEnv:
    family = "faulty"

    def reset(self, task):
        return "a room", {"won": False, "score": 0.0, "admissible_actions": ["wait"]}

    def step(self, action):
        raise RuntimeError("the engine crashed")

    def expert_action(self):
        return "wait"

    def close(self):
        pass


def make_env():
    return FaultyEnv()


def make_tasks(split, n=None, seed=0):
    tasks = [Task("faulty", f"{split}-{i}", split, "faulty", {}) for i in range(20)]
    return tasks if n is None else tasks[:n]


FAMILY_SPEC = FamilySpec(
    name="faulty",
    module=__name__,
    system_prompt="You are an agent.",
    action_format="Give one admissible action inside <action> </action>.",
    default_history=0,
    fallback_tail=10,
    expert_reason=lambda action: "I wait.",
)
"""


def test_a_run_whose_episodes_all_fault_stops_with_one_line(tmp_path, capsys):
    """Every episode ends in an env fault: the run stops after the iteration with one ``gigpo:``
    line naming the first error and the resume command, not a traceback."""
    module = tmp_path / "faulty_family.py"
    module.write_text(FAULTY_FAMILY)
    template = Path(__file__).resolve().parents[1] / "configs" / "template_family.yaml"
    rc = main(
        [
            "train",
            "--config",
            str(template),
            "env.family=faulty",
            f"env.family_module={module}",
            "sft.enabled=false",
            "log.eval_before=false",
            "guard.val_every=0",
            "env.tasks_per_iter=2",
            "env.group_size=2",
            "env.eval_tasks=2",
            "rollout.max_response_tokens=8",
            "log.progress=false",
            "log.tensorboard=false",
            f"output_dir={tmp_path}",
            "name=faulty",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    m = re.match(r"gigpo: (\d+) of (\d+) episodes in iteration 1 ended in env faults", err[-1])
    assert m and m.group(1) == m.group(2)  # every episode, dynamic sampling's extra rounds included
    assert "the engine crashed" in err[-1] and f"--resume {tmp_path / 'faulty'}" in err[-1]
    assert not any("Traceback" in x for x in err)
