"""benchmarks/learning_pooled.py: pooling comparisons pairs the right runs and draws every one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmark_scripts import load

P = load("learning_pooled.py", "learning_pooled_bench")


def _write(d: Path, variant: str, seed: int, before: float, final: float, **extra) -> None:
    d.mkdir(parents=True, exist_ok=True)
    s = {"name": f"{variant}-s{seed}", "variant": variant, "seed": seed, "config": {}, "train": [],
         "evals": [{"iteration": 0, "tag": "eval_before", "eval/success": before},
                   {"iteration": 10, "tag": "eval_final", "eval/success": final}], **extra}
    (d / f"{variant}-s{seed}.json").write_text(json.dumps(s))


def test_pooled_pairs_by_comparison_and_seed_and_skips_aliases(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for d, g, r in ((a, (0.60, 0.50), (0.55, 0.65)), (b, (0.70, 0.40), (0.50, 0.60))):
        for seed in (0, 1):
            _write(d, "gigpo", seed, 0.5 + 0.1 * seed, g[seed])
            _write(d, "grpo", seed, 0.5 + 0.1 * seed, r[seed])
            _write(d, "gigpo_no_step", seed, 0.5, 0.99, same_run_as=f"grpo-s{seed}")  # an alias: left out
    p = P.main([f"{a}:bf16", f"{b}:float32", "--plot", str(tmp_path / "p.png")])
    g = p["variants"]["gigpo"]
    assert g["finals"] == [{0: 60.0, 1: 50.0}, {0: 70.0, 1: 40.0}]
    assert g["diff"] == pytest.approx([10.0, -10.0])  # float32 - bf16, per seed
    assert g["vs_baseline"] == pytest.approx([5.0, -15.0, 20.0, -20.0])  # paired within each comparison
    assert sorted(g["pooled"]) == [40.0, 50.0, 60.0, 70.0]
    assert "gigpo_no_step" not in p["variants"] and "vs_baseline" not in p["variants"]["grpo"]
    assert p["start"] == pytest.approx([50.0, 60.0])  # one before-eval per seed
    out = capsys.readouterr().out
    assert "| gigpo | 55.0 ± 7.1 (60, 50) | 55.0 ± 21.2 (70, 40) | +10, -10 | **55.0 ± 12.9** |" in out
    assert "over all 4 paired runs: mean -2.5" in out
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_input_is_named(tmp_path):
    with pytest.raises(SystemExit, match="no run summaries"):
        P.main([str(tmp_path)])
    _write(tmp_path / "a", "gigpo", 0, 0.5, 0.6)
    with pytest.raises(SystemExit):
        P.main([str(tmp_path / "a"), "--baseline", "grpo"])  # argparse error naming the baseline
