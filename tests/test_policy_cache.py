"""The model cache: location rules and all-or-nothing directory builds."""

from __future__ import annotations

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
