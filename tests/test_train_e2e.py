"""End-to-end: a few iterations of `tiny` on each CPU config, and exact resume after SIGKILL."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gigpo.train.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
SMALL = [
    "train.iterations=2",
    "env.tasks_per_iter=2",
    "env.group_size=2",
    "env.eval_tasks=2",
    "env.max_steps=3",
    "rollout.max_response_tokens=12",
    "sft.enabled=false",
    "log.progress=false",
    "log.tensorboard=false",
    "log.trajectories_every=1",
    "train.lr=1e-3",
    "train.entropy_coef=0.01",
    "train.use_kl=true",
    "train.skip_zero_advantage_rows=false",
    # an untrained model ties every group; dynamic sampling would (rightly) train on none of them
    "train.dynamic_sampling=false",
    "guard.val_every=0",
]
DOCUMENTED = [
    "rollout/success",
    "rollout/score",
    "rollout/invalid_action_rate",
    "actor/pg_loss",
    "actor/kl",
    "actor/entropy",
    "actor/clipfrac",
    "actor/grad_norm",
    "advantage/mean",
    "return/mean",
    "step_groups/num_groups",
    "step_groups/share_rows_in_size_gt1",
    "tokens/response",
    "time/rollout",
    "time/old_logprob",
    "time/ref_logprob",
    "time/advantage",
    "time/update",
    "time/iteration",
]


def _lines(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,extra",
    [
        ("alfworld_tiny", []),
        ("webshop_tiny", []),
        ("search_tiny", []),
        ("sokoban_tiny", []),
        # the other anchor definitions (docs/algorithm.md#anchor-definitions) and their metrics
        ("alfworld_tiny", ["algorithm.anchor=state"]),
        ("webshop_tiny", ["algorithm.anchor=context-2"]),
        # the update's speed options (docs/performance.md) through a whole run
        (
            "sokoban_tiny",
            [
                "train.mini_batch_order=by_prompt",
                "train.share_prefix=true",
                "train.update_attention=eager",
                "rollout.jump_forward=true",
            ],
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(v) or "default",
)
def test_few_iterations_change_parameters_and_log_documented_metrics(name, extra, tmp_path):
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    cfg = load_config(CONFIGS / f"{name}.yaml", [*SMALL, f"output_dir={tmp_path}", "log.eval_before=false", *extra])
    tr = Trainer(cfg)
    before = [p.detach().clone() for p in tr.model.parameters()]
    tr.run()
    tr.close()
    assert any(not torch.equal(a, b) for a, b in zip(before, tr.model.parameters()))
    lines = _lines(cfg.run_dir)
    train = [x for x in lines if x["tag"] == "train"]
    assert [x["iteration"] for x in train] == [1, 2]
    assert all(0.05 < x["system/rss_gb"] < 64 for x in train)  # a real reading of this process
    for key in DOCUMENTED + ["anchor/share_rows_in_size_gt1", "anchor/state_mixed_share", "time/anchor"]:
        assert key in train[0], key
    if any(e.startswith("algorithm.anchor=") for e in extra):
        assert "anchor/observation_mean_size" in train[0]
    if "train.update_attention=eager" in extra:
        assert tr.model.config._attn_implementation != "eager"  # the model's own kernel again
    assert any(x["tag"] == "eval_final" and "eval/success" in x for x in lines)
    assert (cfg.run_dir / "config.yaml").exists() and (cfg.run_dir / "checkpoints" / "latest").exists()
    assert list((cfg.run_dir / "trajectories").glob("*.jsonl"))
    assert (cfg.run_dir / "report.html").stat().st_size > 0  # written at the end of every run
    # The trained policy is saved as an ordinary HF directory that reloads with the trained weights.
    from transformers import AutoModelForCausalLM

    saved = AutoModelForCausalLM.from_pretrained(cfg.run_dir / "model")
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), tr.model.state_dict().values()))
    assert set(json.loads((cfg.run_dir / "phases.json").read_text())) >= {"model_build", "train", "eval_after"}
    # no "nan" strings (the one string metric is each held-out task's outcome, "1"/"0")
    assert not any(
        isinstance(v, str) and k not in ("tag", "eval/won_per_task")
        for x in lines
        if x["tag"] != "guard"
        for k, v in x.items()
    )
    assert all(set(x["eval/won_per_task"]) <= {"0", "1"} for x in lines if x["tag"].startswith("eval"))
    docs = (CONFIGS.parent / "docs" / "metrics.md").read_text()
    for key in train[0]:
        if key.startswith(("rollout/success/",)):
            continue
        assert f"`{key}`" in docs, f"{key} not documented in docs/metrics.md"


def _train(run_parent, name, extra, env=None, resume=False):
    cmd = [sys.executable, "-m", "gigpo.cli", "train"]
    if resume:
        cmd += ["--resume", str(run_parent / name)]
    else:
        cmd += [
            "--config",
            str(CONFIGS / "search_tiny.yaml"),
            *SMALL,
            f"output_dir={run_parent}",
            f"name={name}",
            *extra,
        ]
    e = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)


def _same(u, v):
    if isinstance(u, (int, float)) and isinstance(v, (int, float)):
        return v == pytest.approx(u, rel=1e-5, abs=1e-7)
    return u == v


def _comparable(line):
    return {k: v for k, v in line.items() if not k.startswith(("time/", "system/"))}  # wall time and memory vary


@pytest.fixture(scope="module")
def reference_run(tmp_path_factory):
    parent = tmp_path_factory.mktemp("ref")
    ref = _train(parent, "ref", ["train.iterations=3", "log.eval_before=false", "env.eval_tasks=1"])
    assert ref.returncode == 0, ref.stderr[-2000:]
    return parent / "ref"


@pytest.mark.slow
@pytest.mark.parametrize("kill_at,logged", [("2:after_rollout", [1]), ("2:after_log", [1, 2])])
def test_sigkill_mid_iteration_then_resume_matches_uninterrupted_run(tmp_path, reference_run, kill_at, logged):
    extra = ["train.iterations=3", "log.eval_before=false", "env.eval_tasks=1"]
    killed = _train(tmp_path, "cut", extra, env={"GIGPO_DEBUG_SIGKILL_AT": kill_at})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert [x["iteration"] for x in _lines(tmp_path / "cut") if x["tag"] == "train"] == logged
    resumed = _train(tmp_path, "cut", [], resume=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a = [_comparable(x) for x in _lines(reference_run) if x["tag"] == "train"]
    b = [_comparable(x) for x in _lines(tmp_path / "cut") if x["tag"] == "train"]
    assert [x["iteration"] for x in b] == [1, 2, 3]
    diffs = [(x["iteration"], k, x[k], y.get(k)) for x, y in zip(a, b) for k in x if not _same(x[k], y.get(k))]
    assert not diffs, diffs


@pytest.mark.slow
def test_resuming_a_finished_run_changes_nothing(reference_run):
    before = (reference_run / "metrics.jsonl").read_text()
    again = _train(reference_run.parent, reference_run.name, [], resume=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "already finished at iteration 3" in again.stdout
    assert (reference_run / "metrics.jsonl").read_text() == before  # no second eval_final


@pytest.mark.slow
def test_graphgpo_trains_two_iterations_with_gigpo_train(tmp_path):
    """``algorithm.estimator=graphgpo`` through ``gigpo train`` on the smallest run (tests/small_runs.py);
    search_tiny's similarity_threshold 0.9 merges graph nodes there (docs/algorithm.md#graphgpo)."""
    from small_runs import train_cmd

    extra = ["train.iterations=2", "algorithm.estimator=graphgpo", "algorithm.distance_decay=0.5"]
    r = subprocess.run(
        train_cmd(tmp_path, "graph", extra),
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    train = [x for x in _lines(tmp_path / "graph") if x["tag"] == "train"]
    assert [x["iteration"] for x in train] == [1, 2]
    assert all("advantage/mean" in x and "step_groups/num_groups" in x for x in train)
    cfg = load_config(tmp_path / "graph" / "config.yaml", [])
    assert (cfg.algorithm.estimator, cfg.algorithm.distance_decay) == ("graphgpo", 0.5)
