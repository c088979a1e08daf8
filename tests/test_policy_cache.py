"""The model cache: location rules and all-or-nothing directory builds."""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

import pytest

from gigpo.policy.cache import build_atomic, models_dir


def test_models_dir_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("GIGPO_CACHE", raising=False)
    assert models_dir() == Path.home() / ".cache" / "gigpo" / "models"
    monkeypatch.setenv("GIGPO_CACHE", str(tmp_path / "env"))
    assert models_dir() == tmp_path / "env" / "models"
    assert models_dir(tmp_path / "arg") == tmp_path / "arg" / "models"  # explicit argument wins


def test_build_atomic_builds_once(tmp_path):
    calls = []

    def build(d: Path) -> None:
        calls.append(d)
        (d / "weights.bin").write_bytes(b"x" * 10)

    target = tmp_path / "models" / "m"
    assert build_atomic(target, build) == target and (target / "weights.bin").read_bytes() == b"x" * 10
    assert build_atomic(target, build) == target
    assert len(calls) == 1 and calls[0] != target  # built elsewhere, then renamed into place


def test_failed_build_leaves_nothing(tmp_path):
    def build(d: Path) -> None:
        (d / "half.bin").write_bytes(b"partial")
        raise RuntimeError("disk full")

    target = tmp_path / "models" / "m"
    with pytest.raises(RuntimeError, match="disk full"):
        build_atomic(target, build)
    assert not target.exists() and list(target.parent.iterdir()) == []


def test_concurrent_winner_is_kept(tmp_path):
    target = tmp_path / "models" / "m"

    def build(d: Path) -> None:
        (d / "ours").write_text("ours")
        target.mkdir(parents=True)  # another process finished first
        (target / "theirs").write_text("theirs")

    assert build_atomic(target, build) == target
    assert [p.name for p in target.iterdir()] == ["theirs"]
    assert [p.name for p in target.parent.iterdir()] == ["m"]


def test_replace_dir_atomic_swaps_in_new_copy_and_keeps_old_one_on_failure(tmp_path):
    from gigpo.policy.cache import replace_dir_atomic

    target = tmp_path / "model"
    replace_dir_atomic(target, lambda d: (d / "w").write_text("v1"))
    replace_dir_atomic(target, lambda d: (d / "w").write_text("v2"))
    assert (target / "w").read_text() == "v2"

    def broken(d):
        (d / "w").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        replace_dir_atomic(target, broken)
    assert (target / "w").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary dirs left behind


def test_a_full_disk_while_writing_a_model_dir_is_enospc_and_keeps_the_old_copy(tmp_path):
    from safetensors.torch import save_file
    import torch

    from gigpo.policy.cache import replace_dir_atomic
    from small_runs import fill_disk, tmpfs

    with tmpfs(tmp_path / "disk", "20m") as disk:
        target = disk / "model"
        replace_dir_atomic(target, lambda d: save_file({"w": torch.ones(4)}, d / "model.safetensors"))
        fill_disk(disk, leave=256 << 10)
        with pytest.raises(OSError) as e:  # safetensors raises SafetensorError: ... (os error 28)
            replace_dir_atomic(target, lambda d: save_file({"w": torch.ones(1 << 20)}, d / "model.safetensors"))
        assert e.value.errno == errno.ENOSPC and e.value.filename == str(target)
        assert type(e.value.__cause__).__name__ == "SafetensorError"
        assert sorted(p.name for p in disk.iterdir() if not p.name.startswith("ballast")) == ["model"]
        assert (target / "model.safetensors").stat().st_size < 1000  # the old copy, untouched


def test_a_build_error_with_space_left_is_not_called_a_full_disk(tmp_path):
    from gigpo.policy.cache import disk_full

    assert not disk_full(RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1 vs 2"), tmp_path)
    assert disk_full(
        RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"), tmp_path
    )
    assert disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp_path)


def test_a_build_removes_the_temporaries_of_killed_builds_but_not_of_a_live_one(tmp_path):
    target = tmp_path / "models" / "sft-x"
    target.parent.mkdir()
    killed = target.parent / ".sft-x.tmp-killed"  # a killed build: its lock file exists, nobody holds it
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"x" * 100)
    killed.with_name(killed.name + ".lock").touch()
    older = target.parent / ".sft-x.tmp-older"  # made by a gigpo from before the locks
    older.mkdir()
    live = target.parent / ".sft-x.tmp-live"  # a build running in another process: its lock held
    live.mkdir()
    lock = live.with_name(live.name + ".lock")
    lock.touch()
    other = target.parent / ".sft-y.tmp-killed"  # another key's: not this build's to judge
    other.mkdir()
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        build_atomic(target, lambda d: (d / "w").write_text("new"))
    finally:
        os.close(fd)
    assert sorted(p.name for p in target.parent.iterdir()) == sorted(
        ["sft-x", ".sft-x.tmp-live", ".sft-x.tmp-live.lock", ".sft-y.tmp-killed"]
    )


def test_a_replace_killed_between_its_renames_gets_the_old_copy_back(tmp_path):
    from gigpo.policy.cache import replace_dir_atomic

    target = tmp_path / "model"
    stale = tmp_path / ".model.tmp-k"  # killed after moving model/ aside, before renaming the new one in
    (stale.with_name(stale.name + ".old") / "model").mkdir(parents=True)
    (stale.with_name(stale.name + ".old") / "model" / "w").write_text("v1")
    stale.mkdir()
    stale.with_name(stale.name + ".lock").touch()
    seen = []
    replace_dir_atomic(target, lambda d: seen.append((target / "w").read_text()) or (d / "w").write_text("v2"))
    assert seen == ["v1"] and (target / "w").read_text() == "v2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_the_cli_calls_an_unwrapped_safetensors_disk_full_one_line(monkeypatch):
    from gigpo import cli
    from gigpo.cli import _user_error

    monkeypatch.setattr(cli, "_RUN_DIR", [])  # no run in progress (an earlier test may have left one)

    code, msg = _user_error(RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert (code, msg) == (1, "disk full while writing the run: free some space")
    code, msg = _user_error(OSError(errno.ENOSPC, "No space left on device", "/x/model"))
    assert (code, msg) == (1, "disk full while writing /x/model: free some space")
