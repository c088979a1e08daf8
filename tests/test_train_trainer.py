"""Trainer pieces without a model: step-group metrics come from advantages.step_group_stats; the
anchor metrics."""

import numpy as np

from gigpo.advantages import step_anchors, step_group_stats
from gigpo.batch import StepBatch
from gigpo.train.metrics import HIST_BINS, anchor_metrics, step_group_metrics


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


def _rows(anchor, state_anchor=None):
    n = len(anchor)
    obj = StepBatch.object_array
    return StepBatch(
        episode_id=np.zeros(n, np.int64),
        traj_id=np.array([0, 0, 1, 1][:n]),
        step=np.array([0, 1, 0, 1][:n], np.int32),
        anchor=obj(anchor),
        reward=np.zeros(n, np.float32),
        done=np.array([False, True] * (n // 2)),
        valid=np.ones(n, bool),
        prompt_ids=[np.zeros(1, np.int32)] * n,
        response_ids=[np.zeros(1, np.int32)] * n,
        logprobs=[np.zeros(1, np.float32)] * n,
        action=obj(["go", "open", "go", "close"][:n]),
        response_text=obj([""] * n),
        observation=obj([""] * n),
        traj_episode_id=np.zeros(2, np.int64),
        traj_task_id=obj(["t", "t"]),
        traj_task_type=obj(["x", "x"]),
        traj_won=np.zeros(2, bool),
        traj_score=np.zeros(2, np.float32),
        traj_length=np.array([2, 2], np.int32),
        traj_failed=np.zeros(2, bool),
        traj_truncated=np.zeros(2, bool),
        state_anchor=None if state_anchor is None else obj(state_anchor),
    )


def test_anchor_metrics_measure_state_mixing_and_the_chosen_anchors_groups():
    b = _rows(["start", "drawer", "start", "drawer"], ["s0", "holding", "s0", "empty"])
    st = step_anchors(
        "state", episode_ids=b.episode_id, traj_ids=b.traj_id, anchors=b.anchor, state_anchors=b.state_anchor
    )
    m = anchor_metrics(b, st, "state")
    assert m["anchor/state_mixed_share"] == 0.5 and m["anchor/state_mixed_rows_share"] == 0.5
    assert m["anchor/state_rows_share"] == 1.0
    assert m["anchor/share_rows_in_size_gt1"] == 0.5 and m["anchor/mean_size"] == 4 / 3
    assert m["anchor/observation_share_rows_in_size_gt1"] == 1.0 and m["anchor/observation_mean_size"] == 2.0
    # observation: no comparison keys; a family without states: no mixing figures, 0 rows with a state
    m = anchor_metrics(_rows(["a", "b", "a", "b"]), _rows(["a", "b", "a", "b"]).anchor, "observation")
    assert m == {"anchor/share_rows_in_size_gt1": 1.0, "anchor/mean_size": 2.0, "anchor/state_rows_share": 0.0}


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


def test_every_held_out_evaluation_samples_with_the_same_seeds(tmp_path):
    # before/after compare on common random numbers, and a delivered start model scores exactly
    # what it scored before training
    from pathlib import Path

    from gigpo.train.config import load_config
    from gigpo.train.trainer import Trainer

    configs = Path(__file__).resolve().parents[1] / "configs"
    cfg = load_config(
        configs / "search_tiny.yaml",
        [f"output_dir={tmp_path}", "name=r", "sft.enabled=false", "env.eval_tasks=2", "log.progress=false"],
    )
    tr = Trainer(cfg)
    seeds = []
    tr.evaluator.run = lambda pool, seed, progress=None: (seeds.append(seed), ({"success": 0.5}, 0.0))[1]
    try:
        tr.evaluate()
        tr.iteration = 7
        tr.evaluate(tag="eval_final")
        tr.validate()
    finally:
        tr.close()
    assert seeds[0] == seeds[1] != seeds[2]  # validation has its own stream
