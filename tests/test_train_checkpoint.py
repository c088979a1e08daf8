"""Checkpoints that cannot lie: damaged, emptied, garbled or planted files are refused, with a
warning and a fall back to the previous complete checkpoint, and RNG states survive exactly."""

import errno
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from gigpo.train.checkpoint import (
    CheckpointError,
    load_checkpoint,
    load_latest,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def _two(tmp_path):
    for it in (1, 2):
        save_checkpoint(tmp_path, it, {"model": {"w": torch.full((64,), float(it))}})
    return tmp_path / "checkpoints"


def test_checkpoint_has_checksum_and_loads_with_weights_only(tmp_path):
    ck = _two(tmp_path)
    assert (ck / "iter_000002" / "state.sha256").read_text().strip()
    path, state = load_latest(tmp_path)
    assert path.name == "iter_000002" and state["iteration"] == 2 and state["model"]["w"][0] == 2


def test_rng_state_roundtrips_through_a_weights_only_checkpoint(tmp_path):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    np.random.standard_normal()  # leaves a cached gaussian in numpy's state
    save_checkpoint(tmp_path, 1, {"model": {}})
    want = (random.random(), np.random.standard_normal(), torch.rand(1).item())
    random.seed(0), np.random.seed(0), torch.manual_seed(0)
    set_rng_state(load_checkpoint(tmp_path / "checkpoints" / "iter_000001")["rng"])
    assert (random.random(), np.random.standard_normal(), torch.rand(1).item()) == want
    assert isinstance(rng_state()["numpy"]["keys"], list)


def _truncate(f):
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _empty(f):
    f.write_bytes(b"")


def _flip(f):
    b = bytearray(f.read_bytes())
    for i in range(len(b) // 3, len(b) // 3 + 16):
        b[i] ^= 0xFF
    f.write_bytes(bytes(b))


@pytest.mark.parametrize("damage", [_truncate, _empty, _flip], ids=["truncated", "zero-length", "flipped-bytes"])
def test_corrupt_latest_warns_and_falls_back_to_the_previous_checkpoint(tmp_path, damage):
    ck = _two(tmp_path)
    damage(ck / "iter_000002" / "state.pt")
    with pytest.warns(UserWarning) as said:
        path, state = load_latest(tmp_path)
    assert path.name == "iter_000001" and state["iteration"] == 1 and state["model"]["w"][0] == 1
    msgs = [str(w.message) for w in said]
    assert re.match(r"skipping checkpoint iter_000002: .*(checksum|truncated)", msgs[0]), msgs
    # named by what it is: the newer one is unusable, not "older"
    assert re.match(
        r"resuming from iter_000001 \(iteration 1\): the newest checkpoint iter_000002 is unusable: .*"
        r"(checksum|truncated)",
        msgs[-1],
    ), msgs
    assert (ck / "iter_000002" / "state.pt").exists()  # evidence is left in place


def test_missing_checksum_is_refused(tmp_path):
    ck = _two(tmp_path)
    (ck / "iter_000002" / "state.sha256").unlink()
    with pytest.warns(UserWarning, match="state.sha256 is missing"):
        assert load_latest(tmp_path)[0].name == "iter_000001"


def test_no_usable_checkpoint_raises_a_clear_error(tmp_path):
    ck = _two(tmp_path)
    for d in ("iter_000001", "iter_000002"):
        _flip(ck / d / "state.pt")
    with pytest.warns(UserWarning), pytest.raises(CheckpointError, match=r"no usable checkpoint in .*iter_000001"):
        load_latest(tmp_path)


class _Planted:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


def test_planted_pickle_with_a_matching_checksum_is_not_executed(tmp_path):
    import hashlib

    ck = _two(tmp_path)
    target = str(tmp_path / "pwned")
    f = ck / "iter_000002" / "state.pt"
    torch.save({"model": _Planted(target), "iteration": 2, "rng": {}}, f)
    (f.parent / "state.sha256").write_text(hashlib.sha256(f.read_bytes()).hexdigest())
    with pytest.warns(UserWarning, match=r"skipping checkpoint iter_000002: .*could not be loaded safely"):
        path, _ = load_latest(tmp_path)
    assert path.name == "iter_000001"
    assert not os.path.exists(target)


@pytest.mark.parametrize("pointer", ["../x", "iter_000002/../../x", "/etc", ""])
def test_latest_pointer_outside_checkpoints_is_ignored(tmp_path, pointer):
    ck = _two(tmp_path)
    outside = tmp_path / "x"
    shutil.copytree(ck / "iter_000002", outside)  # a loadable checkpoint outside checkpoints/
    shutil.rmtree(ck / "iter_000002")
    (ck / "latest").write_text(pointer)
    with pytest.warns(UserWarning, match="not an iter_NNNNNN directory"):
        path, state = load_latest(tmp_path)
    assert path == ck / "iter_000001" and state["iteration"] == 1


def test_disk_full_while_saving_is_an_oserror_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    import builtins
    import errno

    import gigpo.train.checkpoint as checkpoint

    _two(tmp_path)

    def full_for_state(path, *a, **kw):  # the kernel's ENOSPC, from /dev/full
        return builtins.open("/dev/full" if str(path).endswith("state.pt") else path, *a, **kw)

    monkeypatch.setattr(checkpoint, "open", full_for_state, raising=False)
    big = {"model": {"w": torch.zeros(1 << 18)}}
    with pytest.raises(OSError) as e:
        save_checkpoint(tmp_path, 3, big)
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    ck = tmp_path / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["iter_000001", "iter_000002", "latest"]
    assert load_latest(tmp_path)[1]["iteration"] == 2


def test_a_corrupt_checkpoint_named_by_latest_but_older_is_worded_as_such(tmp_path):
    ck = _two(tmp_path)
    (ck / "latest").write_text("iter_000001")  # a pointer write lost after iter_000002 was renamed in
    _flip(ck / "iter_000001" / "state.pt")
    with pytest.warns(
        UserWarning,
        match=r"resuming from iter_000002 \(iteration 2\): checkpoint iter_000001, "
        r"which checkpoints/latest names, is unusable",
    ):
        assert load_latest(tmp_path)[0].name == "iter_000002"


def _torch_writer_hiding_enospc(monkeypatch):
    """torch.save as it fails on a full disk: part of the file written, then a RuntimeError without errno."""
    import gigpo.train.checkpoint as ckmod

    def save(obj, f):
        f.write(b"PK" + b"\0" * 1000)
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    monkeypatch.setattr(ckmod.torch, "save", save)


def test_a_full_disk_hidden_by_torchs_writer_is_enospc_naming_the_checkpoint(tmp_path, monkeypatch):
    import gigpo.policy.cache as cache

    save_checkpoint(tmp_path, 1, {"model": {"w": torch.ones(4)}})
    _torch_writer_hiding_enospc(monkeypatch)
    asked = []

    def no_space(path):
        asked.append(Path(path))
        return shutil._ntuple_diskusage(1 << 30, 1 << 30, 0)

    monkeypatch.setattr(cache.shutil, "disk_usage", no_space)
    with pytest.raises(OSError) as e:
        save_checkpoint(tmp_path, 2, {"model": {"w": torch.ones(4)}})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "checkpoints" / "iter_000002")
    assert isinstance(e.value.__cause__, RuntimeError)  # torch's error kept as the cause
    assert asked and asked[0].name.startswith(".tmp-iter_000002")  # asked while the partial file held the space
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["iter_000001", "latest"]
    assert load_latest(tmp_path)[0].name == "iter_000001"


def test_the_same_runtime_error_with_space_left_is_not_called_a_full_disk(tmp_path, monkeypatch):
    _torch_writer_hiding_enospc(monkeypatch)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        save_checkpoint(tmp_path, 1, {"model": {"w": torch.ones(4)}})
    assert list((tmp_path / "checkpoints").iterdir()) == []


def test_a_really_full_disk_while_checkpointing_is_enospc_and_leaves_no_temporary(tmp_path):
    from small_runs import fill_disk, tmpfs

    with tmpfs(tmp_path / "disk", "20m") as disk:
        save_checkpoint(disk, 1, {"model": {"w": torch.ones(1000)}})
        fill_disk(disk, leave=256 << 10)
        with pytest.raises(OSError) as e:  # torch itself raises RuntimeError "unexpected pos" here
            save_checkpoint(disk, 2, {"model": {"w": torch.ones(1 << 20)}})  # 4 MB
        assert e.value.errno == errno.ENOSPC and e.value.filename.endswith("iter_000002")
        assert sorted(p.name for p in (disk / "checkpoints").iterdir()) == ["iter_000001", "latest"]
        assert load_latest(disk)[0].name == "iter_000001"
