"""Model dirs are complete or absent: `gigpo sft --out DIR` appears only finished (a SIGKILL leaves no
DIR), an incomplete dir is refused by sft, eval and load_policy in one `gigpo: ...` line, and an SFT
without demonstrations is one line too."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gigpo.cli import main
from gigpo.policy.load import ModelDirError, load_policy
from gigpo.policy.tiny import tiny_path

ROOT = Path(__file__).resolve().parents[1]
ROOMS = "env.task_kwargs={task_types: [pick_and_place_simple], max_receptacles: 2, max_distractors: 0}"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    # Same cache root as the policy tests: the first one builds the tiny model, the others reuse it.
    root = tmp_path_factory.getbasetemp() / "gigpo-cache"
    tiny_path(cache_dir=str(root))
    return root


def _sft_args(cache, out, *extra):
    return [
        "sft",
        "--config",
        str(ROOT / "configs/alfworld_tiny.yaml"),
        ROOMS,
        "sft.episodes=2",
        "sft.epochs=1",
        "log.progress=false",
        "train.torch_threads=1",
        f"model.cache_dir={cache}",
        *extra,
        "--out",
        str(out),
    ]


def _eval_args(cache, model):
    return [
        "eval",
        "--config",
        str(ROOT / "configs/alfworld_tiny.yaml"),
        ROOMS,
        "env.eval_tasks=1",
        "log.progress=false",
        "train.torch_threads=1",
        f"model.cache_dir={cache}",
        f"model.name_or_path={model}",
    ]


def _one_gigpo_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("gigpo: ")]  # transformers' progress bars aside
    assert len(lines) == 1 and "Traceback" not in err and "Error" not in err.replace(lines[0], ""), err
    return lines[0]


def test_sigkilled_sft_leaves_no_out_dir_and_the_rerun_builds_a_complete_one(cache, tmp_path):
    out = tmp_path / "sft"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gigpo.cli", *_sft_args(cache, out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".sft.tmp-*")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "SFT finished before it could be killed"
        time.sleep(1.0)  # into loading / collecting / training
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not out.exists()  # nothing under the final name that a later run could take for done
    with pytest.raises(FileNotFoundError):
        load_policy(str(out), device="cpu")
    assert list(tmp_path.glob(".sft.tmp-*"))  # the killed run's temporary dir (a model's worth of disk)...
    # The rerun builds it (the killed run's temporary dir does not count)...
    assert main(_sft_args(cache, out)) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sft"]  # ...and removes that temporary
    assert {"config.json", "model.safetensors", "tokenizer.json", "sft_stats.json"} <= {p.name for p in out.iterdir()}
    model, tok = load_policy(str(out), device="cpu")
    assert len(tok) > 32


def _half_dir(cache, d: Path, files) -> Path:
    src = Path(tiny_path(cache_dir=str(cache)))
    d.mkdir()
    for f in files:
        shutil.copy(src / f, d / f)
    return d


def test_sft_refuses_an_incomplete_out_dir_instead_of_taking_it_for_done(cache, tmp_path, capsys):
    out = _half_dir(cache, tmp_path / "sft", ["config.json", "tokenizer_config.json"])  # killed mid-save, old style
    assert main(_sft_args(cache, out)) == 1
    line = _one_gigpo_line(capsys.readouterr().err)
    assert "is not a complete model directory (missing weights" in line and "remove it" in line
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer_config.json"]  # left as it was


def test_eval_refuses_a_dir_without_tokenizer_files_in_one_line(cache, tmp_path, capsys):
    d = _half_dir(cache, tmp_path / "m", ["config.json", "model.safetensors", "tokenizer_config.json"])
    assert main(_eval_args(cache, d)) == 2
    captured = capsys.readouterr()
    line = _one_gigpo_line(captured.err)
    assert "model.name_or_path" in line and "missing a tokenizer file" in line and captured.out == ""
    with pytest.raises(ModelDirError, match="missing a tokenizer file"):  # the library call, without the CLI
        load_policy(str(d), device="cpu")


def test_eval_refuses_a_tokenizer_of_a_handful_of_tokens(cache, tmp_path, capsys):
    from tokenizers import Tokenizer, models

    d = _half_dir(cache, tmp_path / "m", ["config.json", "model.safetensors"])
    Tokenizer(models.WordLevel({"a": 0, "b": 1, "<unk>": 2}, unk_token="<unk>")).save(str(d / "tokenizer.json"))
    assert main(_eval_args(cache, d)) == 2
    captured = capsys.readouterr()
    line = _one_gigpo_line(captured.err)
    assert re.search(r"has only \d token\(s\), not a usable vocabulary", line) and captured.out == ""


def test_sft_without_any_expert_demonstration_is_one_line(cache, tmp_path, capsys):
    out = tmp_path / "sft"
    assert main(_sft_args(cache, out, "env.max_steps=1")) == 1  # no room is solved in one step
    line = _one_gigpo_line(capsys.readouterr().err)
    assert "no expert demonstrations" in line and "env.max_steps=1" in line and "sft.episodes" in line
    assert not out.exists() and not list(tmp_path.iterdir())


# --------------------------------------------------------------------------- damaged or mismatched model dirs


def _copy_dir(cache, d: Path) -> Path:
    shutil.copytree(tiny_path(cache_dir=str(cache)), d)
    return d


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "damage,message",
    [
        ("tokenizer.json", r"the tokenizer in .* cannot be loaded \(.*\): a truncated or damaged tokenizer file"),
        ("model.safetensors", r"model\.safetensors' is truncated or damaged .* bytes, but its header describes"),
    ],
)
def test_a_truncated_tokenizer_or_weight_file_is_one_line_before_anything_loads(
    cache, tmp_path, capsys, damage, message
):
    d = _copy_dir(cache, tmp_path / "m")
    _truncate(d / damage)
    assert main(_eval_args(cache, d)) == 2
    captured = capsys.readouterr()
    line = _one_gigpo_line(captured.err)
    assert line.startswith("gigpo: config error: model.name_or_path: ") and re.search(message, line), line
    assert captured.out == ""
    with pytest.raises(ModelDirError, match=message):  # the library call, without the CLI
        load_policy(str(d), device="cpu")


def test_a_config_json_of_another_architecture_than_the_weights_is_refused(cache, tmp_path, capsys):
    """config.json says BERT over Qwen2 weights: every weight would be missing and the model random;
    gigpo eval used to score it and exit 0."""
    import json

    d = _copy_dir(cache, tmp_path / "m")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    assert main(_eval_args(cache, d)) == 2
    captured = capsys.readouterr()
    line = _one_gigpo_line(captured.err)
    assert "config.json describes a 'bert' model" in line and "are not in the weight files" in line, line
    assert "'model.embed_tokens.weight'" in line and "randomly initialised" in line and captured.out == ""
    # load_policy itself refuses what transformers reports as mostly missing (output_loading_info)
    with pytest.raises(
        ModelDirError, match=r"of the \d+ weights of the BertLMHeadModel .* are not in its weight files"
    ):
        load_policy(str(d), device="cpu")
    # the untouched copy passes both
    from gigpo.train.checks import check_model_path

    good = _copy_dir(cache, tmp_path / "good")
    check_model_path(str(good))
    load_policy(str(good), device="cpu")


def test_a_hub_id_not_in_the_local_cache_is_one_line(cache, capsys):
    assert main(_eval_args(cache, "org/typo")) == 2
    captured = capsys.readouterr()
    line = _one_gigpo_line(captured.err)
    assert "model.name_or_path: 'org/typo' is not a local directory and not in the local Hugging Face cache" in line
    assert "downloads nothing at run time" in line and "hf download org/typo" in line and captured.out == ""
