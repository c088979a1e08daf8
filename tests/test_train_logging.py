"""MetricsLogger: one JSON line per call, non-finite values absent (never the string "nan")."""

import json
import math

import pytest

from gigpo.train.logging import MetricsLogger


def test_nonfinite_metrics_are_absent_and_finite_ones_keep_their_type(tmp_path):
    lg = MetricsLogger(tmp_path, tensorboard=False)
    lg.log({"a": 1.5, "b": float("nan"), "c": float("inf"), "d": 3, "e": "text"}, iteration=1, tag="train")
    lg.close()
    (line,) = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert line == {"iteration": 1, "tag": "train", "a": 1.5, "d": 3, "e": "text"}
    assert all(not isinstance(v, float) or math.isfinite(v) for v in line.values())


def test_resume_after_drops_later_lines(tmp_path):
    lg = MetricsLogger(tmp_path, tensorboard=False)
    for it in (1, 2, 3):
        lg.log({"x": float(it)}, iteration=it, tag="train")
    lg.close()
    lg = MetricsLogger(tmp_path, resume_after=2, tensorboard=False)
    lg.log({"x": 9.0}, iteration=3, tag="train")
    lg.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["iteration"], x["x"]) for x in lines] == [(1, 1.0), (2, 2.0), (3, 9.0)]


def test_iteration_summary_marks_absent_kl_and_entropy():
    from gigpo.train.logging import iteration_summary

    line = iteration_summary(3, 5, {"rollout/success": 0.25, "actor/kl": 0.0123})
    assert "iter 3/5" in line and "success 0.250" in line and "kl 0.0123" in line and "ent -" in line


@pytest.mark.parametrize(
    "torn",
    [
        b'{"iteration": 3, "tag": "train", "x": 0.',
        b'{"iteration": 3, "note": "\xe6\x9d',
        b'{"iteration": 3}{"itera',
        b"[3, 4",
    ],
)
def test_a_torn_last_line_is_dropped_with_a_warning_and_the_good_lines_are_kept(tmp_path, torn):
    lg = MetricsLogger(tmp_path, tensorboard=False)
    for it in (1, 2, 3):
        lg.log({"x": float(it)}, iteration=it, tag="train")
    lg.close()
    with open(tmp_path / "metrics.jsonl", "ab") as f:  # killed mid-write of iteration 4's line
        f.write(torn)
    with pytest.warns(UserWarning, match=r"metrics\.jsonl: dropped 1 unparsable line\(s\)"):
        lg = MetricsLogger(tmp_path, resume_after=3, tensorboard=False)
    lg.log({"x": 4.0}, iteration=4, tag="train")
    lg.close()
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(x["iteration"], x["x"]) for x in lines] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0)]
