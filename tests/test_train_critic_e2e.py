"""End-to-end PPO with a learned critic (``algorithm.estimator=ppo``) on ``tiny``: two iterations with
critic warm-up, sane documented metrics, the critic in the checkpoint, and an exact resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gigpo.train.checkpoint import latest_checkpoint, load_checkpoint
from gigpo.train.config import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# search_tiny at its smallest (tests/test_train_e2e.py's budget), PPO with a critic that only
# learns in iteration 1 (critic warm-up) and trains with the policy in iteration 2.
GAE = [
    "algorithm.estimator=ppo",
    "algorithm.mode=null",
    "algorithm.similarity_threshold=null",
    "critic.lr=1e-4",
    "critic.warmup_iterations=1",
    "train.iterations=2",
    "env.tasks_per_iter=2",
    "env.group_size=2",
    "env.eval_tasks=1",
    "env.max_steps=3",
    "rollout.max_response_tokens=12",
    "sft.enabled=false",
    "log.progress=false",
    "log.tensorboard=false",
    "log.trajectories_every=1",
    "train.lr=1e-3",
    "train.use_kl=true",
    "guard.val_every=0",
    "guard.watchdog=false",
]


def _cfg(parent, name):
    return load_config(CONFIGS / "search_tiny.yaml", [*GAE, f"output_dir={parent}", f"name={name}"])


def _comparable(m):
    return {k: v for k, v in m.items() if not k.startswith(("time/", "system/"))}


@pytest.mark.slow
def test_ppo_run_trains_a_critic_checkpoints_it_and_resumes_exactly(tmp_path):
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    tr = Trainer(_cfg(tmp_path, "ref"))
    policy0 = [p.detach().clone() for p in tr.model.parameters()]
    critic0 = [p.detach().clone() for p in tr.critic.parameters()]
    m1 = tr.train_iteration()
    # Warm-up: the critic learned, the policy did not move.
    assert m1["train/rows_updated"] == 0 and not any(k.startswith("actor/") for k in m1)
    assert all(torch.equal(a, b) for a, b in zip(policy0, tr.model.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(critic0, tr.critic.parameters()))
    m2 = tr.train_iteration()
    assert m2["train/rows_updated"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(policy0, tr.model.parameters()))
    for m in (m1, m2):
        for k in ("critic/value_loss", "critic/vf_clipfrac", "critic/values_mean", "critic/grad_norm"):
            assert np.isfinite(m[k]), k
        assert m["critic/value_loss"] >= 0 and 0 <= m["critic/vf_clipfrac"] <= 1
        assert m.get("critic/explained_variance", 0.0) <= 1.0
        assert abs(m["advantage/mean"]) < 0.5  # whitened over tokens: row means are near 0
    assert "actor/pg_loss" in m2 and "step_groups/num_groups" not in m2  # no step groups under ppo
    docs = (CONFIGS.parent / "docs" / "metrics.md").read_text()
    for key in m2:
        if key.startswith(("critic/", "time/")):
            assert f"`{key}`" in docs, f"{key} not documented in docs/metrics.md"
    state = load_checkpoint(latest_checkpoint(tr.run_dir))
    assert state["iteration"] == 2
    assert all(torch.equal(state["critic"][k], v) for k, v in tr.critic.state_dict().items())
    assert state["critic_updater"]["optimizer"]["state"]  # Adam moments saved with the weights
    ref_critic = {k: v.clone() for k, v in tr.critic.state_dict().items()}
    ref_model = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.close()

    # Stop after iteration 1, resume: iteration 2 is the uninterrupted run's, bit for bit.
    cut = Trainer(_cfg(tmp_path, "cut"))
    assert _comparable(cut.train_iteration()) == _comparable(m1)
    cut.close()
    res = Trainer(_cfg(tmp_path, "cut"), resume=True)
    assert res.iteration == 1
    assert _comparable(res.train_iteration()) == _comparable(m2)
    assert all(torch.equal(ref_critic[k], v) for k, v in res.critic.state_dict().items())
    assert all(torch.equal(ref_model[k], v) for k, v in res.model.state_dict().items())
    res.close()


@pytest.mark.slow
def test_shared_backbone_ppo_run_learns_values_in_the_policy_update_and_resumes_exactly(tmp_path):
    """critic.shared_backbone: one model; the head's weights are the checkpoint's critic, its Adam
    moments the policy optimizer's; the policy update moves the head; resume is exact. (The value
    loss of iteration 2 against 1 compares different rollouts: it rose on another CPU's draw.)"""
    from gigpo.train.trainer import Trainer

    torch.set_num_threads(1)
    shared = ["critic.shared_backbone=true", "critic.warmup_iterations=0", "train.ppo_epochs=2"]

    def cfg(name):
        return load_config(CONFIGS / "search_tiny.yaml", [*GAE, *shared, f"output_dir={tmp_path}", f"name={name}"])

    tr = Trainer(cfg("ref"))
    assert tr.critic_updater is None and set(tr.critic.state_dict()) == {"score.weight", "score.bias"}
    head0 = {k: v.clone() for k, v in tr.critic.state_dict().items()}
    m1, m2 = tr.train_iteration(), tr.train_iteration()
    for m in (m1, m2):
        assert m["train/rows_updated"] > 0 and np.isfinite(m["critic/value_loss"]) and 0 <= m["critic/vf_clipfrac"] <= 1
        assert "critic/grad_norm" not in m and "time/critic_update" not in m  # no separate critic update
    assert any(not torch.equal(head0[k], v) for k, v in tr.critic.state_dict().items())
    state = load_checkpoint(latest_checkpoint(tr.run_dir))
    assert set(state["critic"]) == {"score.weight", "score.bias"} and "critic_updater" not in state
    n_policy = sum(p.requires_grad for p in tr.model.parameters())
    assert len(state["updater"]["optimizer"]["state"]) == n_policy + 2  # the head's moments too
    ref_head = {k: v.clone() for k, v in tr.critic.state_dict().items()}
    ref_model = {k: v.clone() for k, v in tr.model.state_dict().items()}
    tr.close()

    cut = Trainer(cfg("cut"))
    assert _comparable(cut.train_iteration()) == _comparable(m1)
    cut.close()
    res = Trainer(cfg("cut"), resume=True)
    assert _comparable(res.train_iteration()) == _comparable(m2)
    assert all(torch.equal(ref_head[k], v) for k, v in res.critic.state_dict().items())
    assert all(torch.equal(ref_model[k], v) for k, v in res.model.state_dict().items())
    res.close()
