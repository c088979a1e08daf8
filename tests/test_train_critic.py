"""PPO's learned critic on the real ``tiny`` model: its start, its per-token values, its loss and update."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo.policy.load import load_critic, load_policy
from gigpo.train.config import ConfigError, CriticConfig, TrainConfig, load_config
from gigpo.learner.critic import CriticUpdater, batched_values, explained_variance, token_values
from gigpo.learner.loss import value_loss

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def critic():
    return load_critic("tiny", device="cpu", dtype="float32", seed=0)


def _rows(n=8, seed=0, vocab=200):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(5, vocab, size=int(rng.integers(4, 14))) for _ in range(n)]
    responses = [rng.integers(5, vocab, size=int(rng.integers(1, 7))) for _ in range(n)]
    return prompts, responses


def test_critic_is_the_policy_transformer_with_a_new_scalar_head(critic):
    policy, _ = load_policy("tiny", device="cpu", dtype="float32")
    pol = dict(policy.model.named_parameters())
    assert all(torch.equal(p, pol[k]) for k, p in critic.model.named_parameters())
    assert critic.score.out_features == 1 and critic.dropout.p == 0.0
    again = load_critic("tiny", device="cpu", dtype="float32", seed=0)
    other = load_critic("tiny", device="cpu", dtype="float32", seed=1)
    assert torch.equal(critic.score.weight, again.score.weight)  # the head is drawn from the seed
    assert not torch.equal(critic.score.weight, other.score.weight)


def test_value_of_a_token_is_the_heads_output_at_the_position_before_it(critic):
    prompts, responses = _rows()
    batched = batched_values(critic, prompts, responses, pad_token_id=0, token_budget=64, pad_multiple=8)
    for p, r, got in zip(prompts, responses, batched):
        ids = torch.as_tensor(np.concatenate([p, r]))[None]
        with torch.no_grad():
            out = critic(input_ids=ids, attention_mask=torch.ones_like(ids)).logits[0, :, 0]
        np.testing.assert_allclose(got, out[len(p) - 1 : len(p) - 1 + len(r)].numpy(), atol=1e-5)
    with torch.no_grad():
        v, mask = token_values(critic, prompts[:3], responses[:3], pad_token_id=0)
    assert v.shape == mask.shape and (v[mask == 0] == 0).all()
    assert mask.sum(1).tolist() == [len(r) for r in responses[:3]]


def test_value_loss_takes_the_larger_of_clipped_and_unclipped_error():
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0, 0.0]])
    ret = torch.tensor([[1.0, -2.0, 0.0]])
    v = torch.tensor([[2.0, -1.0, 5.0]], requires_grad=True)
    # token 0: unclipped (2-1)^2 = 1, clipped to 0.5: (0.5-1)^2 = 0.25 -> 1 (unclipped)
    # token 1: unclipped (-1+2)^2 = 1, clipped to -0.5: (-0.5+2)^2 = 2.25 -> 2.25 (clipped)
    loss, frac = value_loss(v, old, ret, mask, cliprange_value=0.5)
    assert float(loss.detach()) == pytest.approx(0.5 * (1 + 2.25) / 2)
    assert frac == pytest.approx(0.5)
    loss.backward()
    assert v.grad[0, 1] == 0 and v.grad[0, 0] != 0  # the clipped branch has no gradient


def test_explained_variance():
    r = [np.array([1.0, 2.0]), np.array([3.0])]
    assert explained_variance(r, r) == pytest.approx(1.0)
    assert explained_variance([np.full(2, 2.0), np.array([2.0])], r) == pytest.approx(0.0)
    assert np.isnan(explained_variance(r, [np.ones(2), np.ones(1)]))


def test_critic_loss_decreases_on_a_fixed_batch():
    critic = load_critic("tiny", device="cpu", dtype="float32", seed=0)
    prompts, responses = _rows(n=12, seed=1)
    returns = [np.full(len(r), 1.0 if i % 2 else -0.5, np.float32) for i, r in enumerate(responses)]
    upd = CriticUpdater(critic, CriticConfig(lr=3e-4), TrainConfig(mini_batch_rows=12, pad_multiple=8), pad_token_id=0)
    losses = []
    for step in range(5):
        old = batched_values(critic, prompts, responses, pad_token_id=0, token_budget=256)
        m = upd.update(prompts, responses, old, returns, seed=step)
        assert m["skipped_updates"] == 0 and np.isfinite(m["grad_norm"])
        losses.append(m["value_loss"])
    final = batched_values(critic, prompts, responses, pad_token_id=0, token_budget=256)
    err = np.mean(np.concatenate([(v - r) ** 2 for v, r in zip(final, returns)]))
    assert losses[-1] < 0.5 * losses[0], losses
    assert 0.5 * err < losses[0]
    state = upd.state_dict()["optimizer"]["state"]
    assert state and all(int(s["step"]) == 5 for s in state.values())


def test_ppo_is_the_name_and_verls_gae_an_alias_that_old_runs_resume_under(tmp_path):
    from gigpo.train.config import save_config
    from gigpo.train.rundir import resume_changes

    ppo, old = load_config(None, ["algorithm.estimator=ppo"]), load_config(None, ["algorithm.estimator=gae"])
    assert ppo.algorithm.estimator == old.algorithm.estimator == "ppo" and old.needs_critic()
    # A run started as gae (its config.yaml says so) resumes as ppo: no run-defining change.
    save_config(old, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    (tmp_path / "config.yaml").write_text(text.replace("estimator: ppo", "estimator: gae"))
    assert "estimator: gae" in (tmp_path / "config.yaml").read_text()
    assert resume_changes(tmp_path, ppo, force=False) == []
    msg = r"algorithm\.estimator: unknown .*'ppo'.*aliases: gae = ppo.*Did you mean 'ppo'"
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["algorithm.estimator=ppp"])


def test_config_checks_for_the_critic():
    gae = ["algorithm.estimator=ppo"]
    assert load_config(None, gae).needs_critic() and not load_config(None, []).needs_critic()
    with pytest.raises(ConfigError, match=r"train\.dynamic_sampling"):
        load_config(None, [*gae, "train.dynamic_sampling=true"])
    with pytest.raises(ConfigError, match=r"train\.skip_zero_advantage_rows"):
        load_config(None, [*gae, "train.skip_zero_advantage_rows=true"])
    with pytest.raises(ConfigError, match=r"critic\.gamma"):
        load_config(None, [*gae, "algorithm.options.gamma=0.9"])
    with pytest.raises(ConfigError, match=r"critic\.lr"):
        load_config(None, [*gae, "critic.lr=0"])
    with pytest.raises(ConfigError, match=r"critic\.lam"):
        load_config(None, [*gae, "critic.lam=1.5"])
    with pytest.raises(ConfigError, match=r"critic\.warmup_iterations: 1 needs a separate critic.*set critic\.warmup"):
        load_config(None, [*gae, "critic.shared_backbone=true", "critic.warmup_iterations=1"])
    with pytest.raises(ConfigError, match=r"critic\.vf_coef"):
        load_config(None, [*gae, "critic.vf_coef=0"])
    assert load_config(None, [*gae, "critic.shared_backbone=true"]).critic.shared_backbone
    with pytest.raises(ConfigError, match=r"algorithm\.mode"):  # gae has no normalisation option
        load_config(None, [*gae, "algorithm.mode=mean_norm"])


def test_shared_critic_is_a_head_on_the_policys_backbone_trained_by_the_policy_update():
    from gigpo.learner.logprobs import token_logprobs
    from gigpo.learner.critic import SharedCritic
    from gigpo.learner.update import PolicyUpdater, batched_logprobs

    policy, _ = load_policy("tiny", device="cpu", dtype="float32")
    head = SharedCritic(policy, seed=0)
    assert set(head.state_dict()) == {"score.weight", "score.bias"}  # the backbone is the policy's
    assert torch.equal(head.score.weight, SharedCritic(policy, seed=0).score.weight)
    prompts, responses = _rows(n=10, seed=2)
    # The update's one forward gives the values a separate value pass gives.
    values = batched_values(head, prompts, responses, pad_token_id=0, token_budget=128, pad_multiple=8)
    with torch.no_grad():
        lp, _, mask, hidden = token_logprobs(policy, prompts, responses, pad_token_id=0, with_hidden=True)
        lp_alone, _, _ = token_logprobs(policy, prompts, responses, pad_token_id=0)
    torch.testing.assert_close(lp, lp_alone)
    shared = (head.head(hidden) * mask).detach().numpy()
    for i, v in enumerate(values):
        np.testing.assert_allclose(shared[i, : len(v)], v, atol=1e-5)

    returns = [np.full(len(r), 1.0 if i % 2 else -0.5, np.float32) for i, r in enumerate(responses)]
    train = TrainConfig(mini_batch_rows=10, pad_multiple=8, lr=3e-4, use_kl=False)
    upd = PolicyUpdater(policy, train, pad_token_id=0, value_head=head, vf_coef=1.0)
    zero_adv = [np.zeros(len(r), np.float32) for r in responses]
    with pytest.raises(ValueError, match="old_values and returns"):
        upd.update(prompts, responses, np.zeros(10), [np.zeros(len(r)) for r in responses], token_advantages=zero_adv)
    losses = []
    for step in range(5):
        old_v = batched_values(head, prompts, responses, pad_token_id=0, token_budget=128)
        old_lp = batched_logprobs(policy, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=128)
        m = upd.update(
            prompts,
            responses,
            np.zeros(10),
            old_lp,
            seed=step,
            token_advantages=zero_adv,
            old_values=old_v,
            returns=returns,
        )
        assert m["skipped_updates"] == 0 and 0 <= m["vf_clipfrac"] <= 1
        losses.append(m["value_loss"])
    assert losses[-1] < 0.5 * losses[0], losses
    # The head's parameters are in the policy's optimizer, stepped with it.
    state = upd.optimizer.state
    assert all(int(state[p]["step"]) == 5 for p in head.parameters())
