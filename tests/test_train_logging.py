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


def _lines(tmp_path):
    return [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_a_resume_never_writes_a_tag_and_iteration_twice(tmp_path):
    # A run killed after its eval_final line but before summary.json: the resume evaluates again.
    lg = MetricsLogger(tmp_path, tensorboard=False)
    lg.log({"eval/success": 0.1}, iteration=0, tag="eval_before")
    lg.log({"x": 1.0}, iteration=1, tag="train")
    lg.log({"event": "rollback"}, iteration=1, tag="guard")
    lg.log({"event": "lr"}, iteration=1, tag="guard")
    lg.log({"eval/success": 0.5}, iteration=1, tag="eval_final")
    lg.close()
    lg = MetricsLogger(tmp_path, resume_after=1, tensorboard=False)
    lg.log({"eval/success": 0.6}, iteration=1, tag="eval_final")
    lg.close()
    lines = _lines(tmp_path)
    assert [(x["tag"], x["iteration"]) for x in lines] == [
        ("eval_before", 0),
        ("train", 1),
        ("guard", 1),
        ("guard", 1),  # guard lines may repeat: several events at one iteration
        ("eval_final", 1),
    ]
    assert lines[-1]["eval/success"] == 0.6  # the new line replaced the old one
    # ...and the file written by an older gigpo, doubled already, is repaired on the next resume
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in [lines[0], lines[1], lines[0] | {"eval/success": 0.2}])
    )
    MetricsLogger(tmp_path, resume_after=1, tensorboard=False).close()
    assert [(x["tag"], x["iteration"], x.get("eval/success")) for x in _lines(tmp_path)] == [
        ("train", 1, None),
        ("eval_before", 0, 0.2),
    ]


def test_a_line_logged_again_in_one_process_replaces_the_first(tmp_path):
    lg = MetricsLogger(tmp_path, tensorboard=False)
    lg.log({"val/success": 0.1}, iteration=0, tag="val")
    lg.log({"x": 1.0}, iteration=1, tag="train")
    lg.log({"val/success": 0.3}, iteration=0, tag="val")
    lg.log({"x": 2.0}, iteration=2, tag="train")  # appending goes on after a rewrite
    lg.close()
    assert [(x["tag"], x["iteration"]) for x in _lines(tmp_path)] == [("train", 1), ("val", 0), ("train", 2)]
    assert not (tmp_path / "metrics.tmp").exists()


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


def test_tensorboard_tags_name_the_line_once(tmp_path):
    """Eval scalars are ``eval_before/success``, not ``eval_before/eval/success`` (read back from the
    event file with TensorBoard's own reader)."""
    pytest.importorskip("tensorboard", reason="tensorboard is a main dependency; this install lacks it")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    lg = MetricsLogger(tmp_path, tensorboard=True)
    lg.log({"eval/success": 0.25, "eval/success/pick": 0.5, "time/eval": 3.0}, iteration=0, tag="eval_before")
    lg.log({"val/success": 0.5}, iteration=0, tag="val")
    lg.log({"rollout/success": 0.1, "actor/kl": 0.01}, iteration=1, tag="train")
    lg.log({"eval/success": 0.5}, iteration=1, tag="eval")
    lg.log({"eval/success": 0.75}, iteration=1, tag="eval_final")
    lg.log({"lr": 1e-5, "reason": "x"}, iteration=1, tag="guard")
    lg.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert tags == {
        "eval_before/success",
        "eval_before/success/pick",
        "eval_before/time/eval",
        "val/success",
        "rollout/success",
        "actor/kl",
        "eval/success",
        "eval_final/success",
        "guard/lr",
    }, tags
    assert [(e.step, e.value) for e in acc.Scalars("eval_final/success")] == [(1, 0.75)]


def test_missing_tensorboard_is_said_once_and_metrics_still_logged(tmp_path, monkeypatch, capsys):
    import gigpo.train.logging as L

    real = L._installed
    monkeypatch.setattr(L, "_installed", lambda m: False if m == "tensorboard" else real(m))
    monkeypatch.setattr(L, "_SAID", set())
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        lg = MetricsLogger(tmp_path / sub, tensorboard=True)
        lg.log({"x": 1.0}, iteration=1, tag="train")
        lg.close()
        assert (tmp_path / sub / "metrics.jsonl").read_text().strip()
        assert not (tmp_path / sub / "tensorboard").exists()
    err = capsys.readouterr().err
    assert err.count("TensorBoard logging is off because it is not installed") == 1, err
    assert "pip install" in err and "log.tensorboard=false" in err


def test_wandb_project_without_wandb_is_a_config_error_naming_the_extra(tmp_path, monkeypatch):
    import gigpo.train.logging as L
    from gigpo.train.config import ConfigError, LogConfig

    real = L._installed
    monkeypatch.setattr(L, "_installed", lambda m: False if m == "wandb" else real(m))
    with pytest.raises(ConfigError) as e:
        L.check_loggers(LogConfig(wandb_project="demo"))
    msg = str(e.value)
    assert "log.wandb_project='demo'" in msg and "pip install 'gigpo[wandb]'" in msg and "pip install wandb" in msg
    # the logger refuses before it writes anything into the run dir
    with pytest.raises(ConfigError, match="gigpo\\[wandb\\]"):
        MetricsLogger(tmp_path, tensorboard=False, wandb_project="demo")
    assert list(tmp_path.iterdir()) == []
    assert L.check_loggers(LogConfig(wandb_project="", tensorboard=False)) == []


def test_check_loggers_in_this_install():
    """wandb is not a dependency: with it absent the real check raises; tensorboard is one: no note."""
    import importlib.util

    from gigpo.train.config import ConfigError, LogConfig
    from gigpo.train.logging import check_loggers

    if importlib.util.find_spec("wandb") is None:
        with pytest.raises(ConfigError, match="needs Weights & Biases, which is not installed"):
            check_loggers(LogConfig(wandb_project="demo"))
    if importlib.util.find_spec("tensorboard") is not None:
        assert check_loggers(LogConfig()) == []
