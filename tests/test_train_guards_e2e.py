"""The guards acting in real training runs: a quickly SFT'd `tiny` on small ALFWorld rooms (it wins
~40 % of them), with dynamic sampling, a planted learning-rate spike for the watchdog, and
best-model selection."""

import json

import pytest
import torch

from gigpo.train.checkpoint import best_checkpoint, load_checkpoint
from gigpo.train.config import load_config

ROOMS = "env.task_kwargs={task_types: [pick_and_place_simple], max_receptacles: 2, max_distractors: 0}"
BASE = ["configs/alfworld_tiny.yaml"]
SMALL = [
    ROOMS,
    "env.max_steps=12",
    "env.eval_tasks=4",
    "rollout.max_response_tokens=24",
    "sft.enabled=false",
    "log.progress=false",
    "log.tensorboard=false",
    "log.eval_before=false",
    "train.torch_threads=1",
    "log.trajectories_every=1",
    "train.lr=1e-4",
    "guard.val_every=0",
    "train.autocast=none",
]


@pytest.fixture(scope="module")
def sft_model(tmp_path_factory):
    from gigpo.train.sft import run_sft

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("sft") / "m"
    cfg = load_config(
        "configs/alfworld_tiny.yaml",
        [
            ROOMS,
            "sft.episodes=12",
            "sft.epochs=3",
            "sft.relabel=0",
            "sft.prompt_loss_weight=0",
            "sft.warmup_steps=10",
            "log.progress=false",
            "train.torch_threads=1",
        ],
    )
    run_sft(cfg, out, progress=False)
    return str(out)


def _run(tmp_path, model, extra, name="r"):
    from gigpo.train.trainer import Trainer

    cfg = load_config(
        "configs/alfworld_tiny.yaml",
        [*SMALL, f"model.name_or_path={model}", f"output_dir={tmp_path}", f"name={name}", *extra],
    )
    tr = Trainer(cfg)
    try:
        result = tr.run()
    finally:
        tr.close()
    lines = [json.loads(x) for x in (cfg.run_dir / "metrics.jsonl").read_text().splitlines()]
    return tr, result, lines, cfg.run_dir


def _groups(run_dir, it):
    rows = [json.loads(x) for x in (run_dir / "trajectories" / f"iter_{it:06d}.jsonl").read_text().splitlines()]
    by = {}
    for r in rows:
        by.setdefault(r["episode_id"], []).append(r["A"])
    return by


@pytest.mark.slow
# Signal is read from the advantages (group_has_signal), whatever the estimator: GRPO stands for the
# episode-level ones (RLOO's tied groups are GRPO's), GiGPO for those with step-level signal.
@pytest.mark.parametrize("estimator", ["gigpo", "grpo"])
def test_dynamic_sampling_fills_the_batch_with_groups_that_carry_signal(tmp_path, sft_model, estimator):
    common = [f"algorithm.estimator={estimator}", "env.group_size=2", "env.tasks_per_iter=3", "train.iterations=2"]
    if estimator == "grpo":  # the same rollouts for every estimator without it: one run shows it
        _, _, plain, plain_dir = _run(tmp_path, sft_model, [*common, "train.dynamic_sampling=false"], "plain")
        # without it, tied groups (both rollouts won or both failed) are trained on with A = 0 ...
        tied = sum(all(abs(a) < 1e-8 for a in g) for it in (1, 2) for g in _groups(plain_dir, it).values())
        assert tied > 0
    _, _, dyn, dyn_dir = _run(
        tmp_path, sft_model, [*common, "train.dynamic_sampling=true", "train.dynamic_sampling_rounds=4"], "dyn"
    )
    for it, line in zip((1, 2), [x for x in dyn if x["tag"] == "train"]):
        groups = _groups(dyn_dir, it)
        # ... with it every trained group has signal, and the batch is full again
        assert all(any(abs(a) > 1e-8 for a in g) for g in groups.values())
        assert len(groups) == line["train/groups_trained"] == 3
        assert line["train/groups_sampled"] - line["train/groups_without_signal"] >= 3
    assert sum(x["train/groups_without_signal"] for x in dyn if x["tag"] == "train") > 0
    assert max(x["train/rollout_rounds"] for x in dyn if x["tag"] == "train") > 1


@pytest.mark.slow
def test_watchdog_rolls_back_a_planted_collapse(tmp_path, sft_model, monkeypatch):
    monkeypatch.setenv("GIGPO_DEBUG_LR_AT", "2:0.05")  # iteration 2's update at 500x the lr
    tr, _, lines, run_dir = _run(
        tmp_path,
        sft_model,
        [
            "env.group_size=4",
            "env.tasks_per_iter=4",
            "train.iterations=5",
            "guard.patience=2",
            # without resampling a collapsed iteration costs one round of rollouts, not three
            "train.dynamic_sampling=false",
            "guard.train_drop=0.2",
            "guard.lr_factor=0.5",
        ],
    )
    train = {x["iteration"]: x for x in lines if x["tag"] == "train"}
    assert train[1]["rollout/success"] >= 0.25  # the SFT'd model wins some rooms ...
    assert train[3]["rollout/success"] <= 0.05  # ... and the spike destroyed it
    events = [x for x in lines if x["tag"] == "guard"]
    assert len(events) == 1 and events[0]["iteration"] == 4 and events[0]["event"] == "rollback"
    assert "training success" in events[0]["reason"] and events[0]["to_iteration"] <= 1
    assert events[0]["lr"] == pytest.approx(0.5e-4)
    assert train[4]["train/rows_updated"] == 0  # the collapsed batch was not trained on
    assert train[5]["rollout/success"] >= 0.25  # the restored model wins again
    assert train[5]["actor/lr"] == pytest.approx(0.5e-4) and train[5]["guard/rollbacks"] == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rollbacks"] == 1
    assert "guard, iteration 4" in (run_dir / "report.html").read_text()


@pytest.mark.slow
def test_best_model_selection_keeps_the_earlier_checkpoint_when_a_later_one_is_worse(tmp_path, sft_model, monkeypatch):
    monkeypatch.setenv("GIGPO_DEBUG_LR_AT", "2:0.05")
    tr, result, lines, run_dir = _run(
        tmp_path,
        sft_model,
        [
            "env.group_size=2",
            "env.tasks_per_iter=2",
            "train.iterations=2",
            "guard.val_every=1",
            "guard.val_tasks=8",
            "guard.watchdog=false",
            "guard.select_margin_se=0",  # strict best: the rule under test here
        ],
    )
    vals = {x["iteration"]: x["val/success"] for x in lines if "val/success" in x}
    assert sorted(vals) == [0, 1, 2] and vals[2] < max(vals[0], vals[1])
    # ties keep the earlier model: the delivered one is the first to reach the best score
    summary = json.loads((run_dir / "summary.json").read_text())
    best_it = summary["models"]["model"]
    assert best_it in (0, 1) and vals[best_it] == max(vals.values()) and summary["models"]["model_last"] == 2
    assert all(v < vals[best_it] for i, v in vals.items() if i < best_it)
    from transformers import AutoModelForCausalLM

    best = load_checkpoint(best_checkpoint(run_dir))
    assert best["iteration"] == best_it
    delivered = AutoModelForCausalLM.from_pretrained(run_dir / "model").state_dict()
    last = AutoModelForCausalLM.from_pretrained(run_dir / "model_last").state_dict()
    assert all(torch.equal(delivered[k], best["model"][k]) for k in delivered)
    assert any(not torch.equal(delivered[k], last[k]) for k in delivered)
    finals = {x["tag"]: x for x in lines if x["tag"] in ("eval_final", "eval_last")}
    assert finals["eval_final"]["eval/model_iteration"] == best_it and finals["eval_last"]["eval/model_iteration"] == 2
    assert result["after"]["eval/success"] == finals["eval_final"]["eval/success"]
    # validation tasks are disjoint from the held-out ones
    assert not {t.task_id for t in tr.val_pool} & {t.task_id for t in tr.eval_pool}


@pytest.mark.slow
def test_one_step_off_the_watchdog_rolls_back_and_drops_the_rollouts_in_flight(tmp_path, sft_model, monkeypatch):
    """With ``train.off_policy_steps=1`` iteration i's rollouts measure the policy of update i - 2:
    the collapse planted in update 2 shows from iteration 4 on, the rollback then drops the
    rollouts already sampled by the collapsed policy, and the restored policy samples again."""
    monkeypatch.setenv("GIGPO_DEBUG_LR_AT", "2:0.05")
    tr, _, lines, run_dir = _run(
        tmp_path,
        sft_model,
        [
            "env.group_size=4",
            "env.tasks_per_iter=4",
            "train.iterations=6",
            "guard.patience=2",
            "train.dynamic_sampling=false",
            "guard.train_drop=0.2",
            "guard.lr_factor=0.5",
            "train.off_policy_steps=1",
        ],
    )
    train = {x["iteration"]: x for x in lines if x["tag"] == "train"}
    # staleness counts weight changes: update 4 trains on the collapsed policy's rollouts, which
    # may hold no signal (every one invalid, on some CPUs), and then the weights iteration 5 was
    # sampled on are still the current ones
    stale5 = 1 if train[4]["train/rows_updated"] > 0 else 0
    assert [train[i]["train/staleness"] for i in range(1, 7)] == [0, 1, 1, 1, stale5, 0]
    assert train[3]["rollout/invalid_action_rate"] < 0.1  # sampled by update 1, before the spike
    assert train[4]["rollout/invalid_action_rate"] > 0.5  # the first rollouts of the collapsed policy
    events = [x for x in lines if x["tag"] == "guard"]
    assert len(events) == 1 and events[0]["iteration"] == 5 and events[0]["event"] == "rollback"
    assert train[5]["train/rows_updated"] == 0
    # iteration 6's rollouts, sampled by the collapsed policy while 5 updated, were dropped and
    # sampled again from the restored weights (staleness 0: nothing was in flight)
    assert train[6]["train/groups_stale_dropped"] == 4 and train[5]["train/groups_stale_dropped"] == 0
    assert train[6]["rollout/invalid_action_rate"] < 0.1 and train[6]["train/rows_updated"] > 0
