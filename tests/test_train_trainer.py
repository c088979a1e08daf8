"""Trainer pieces without a model: step-group metrics come from advantages.step_group_stats."""

import numpy as np

from gigpo.advantages import step_group_stats
from gigpo.train.trainer import HIST_BINS, step_group_metrics


def test_step_group_metrics_match_step_group_stats():
    # sizes: group 0 -> 1, group 1 -> 2, group 2 -> 3, group 3 -> 5, group 4 -> 9; -1 rows ignored
    labels = np.array([0] + [1] * 2 + [2] * 3 + [3] * 5 + [4] * 9 + [-1] * 4)
    m = step_group_metrics(labels)
    st = step_group_stats(labels)
    assert m["step_groups/num_groups"] == st["num_groups"] == 5
    assert m["step_groups/share_rows_in_size_gt1"] == st["share_rows_in_groups_gt1"] == 19 / 20
    assert m["step_groups/mean_size"] == 4.0
    assert m["step_groups/max_size"] == 9
    assert [m[f"step_groups/hist_{b}"] for *_, b in HIST_BINS] == [1, 1, 1, 1, 1]


def test_step_group_metrics_absent_without_step_groups():
    assert step_group_metrics(np.full(6, -1)) == {}


def test_hist_names_are_the_ones_the_report_parses():
    from gigpo.report.plots import _HIST

    for *_, b in HIST_BINS:
        assert _HIST.match(f"step_groups/hist_{b}"), b


def test_new_run_keeps_an_existing_run_dir_instead_of_appending(tmp_path):
    from pathlib import Path

    from gigpo.train.config import load_config
    from gigpo.train.trainer import Trainer

    configs = Path(__file__).resolve().parents[1] / "configs"
    cfg = load_config(
        configs / "search_tiny.yaml",
        [f"output_dir={tmp_path}", "name=r", "sft.enabled=false", "env.eval_tasks=1", "env.train_tasks=4"],
    )
    old = cfg.run_dir
    old.mkdir(parents=True)
    (old / "metrics.jsonl").write_text('{"tag": "train", "iteration": 1}\n')
    tr = Trainer(cfg)
    tr.close()
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("r-")]
    assert len(kept) == 1 and (kept[0] / "metrics.jsonl").read_text().startswith('{"tag": "train"')
    assert not (old / "metrics.jsonl").exists() or (old / "metrics.jsonl").read_text() == ""
