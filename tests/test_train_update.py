"""The policy update on a small real transformers model: it moves weights, guards NaNs."""

import math

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from gigpo.train.config import TrainConfig
from gigpo.learner.update import PolicyUpdater, TrainingDiverged, batched_logprobs

torch.set_num_threads(1)


def _model(seed=0):
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
    )
    return Qwen2ForCausalLM(cfg)


def _rows(n=12, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, 64, rng.integers(3, 10)).astype(np.int32) for _ in range(n)]
    responses = [rng.integers(1, 64, rng.integers(1, 6)).astype(np.int32) for _ in range(n)]
    adv = rng.normal(size=n).astype(np.float32)
    return prompts, responses, adv


def _params(m):
    return [p.detach().clone() for p in m.parameters()]


def test_update_changes_weights_and_reports_metrics():
    m = _model()
    prompts, responses, adv = _rows()
    cfg = TrainConfig(lr=1e-3, mini_batch_rows=5, micro_token_budget=24)
    up = PolicyUpdater(m, cfg, pad_token_id=0)
    old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=24)
    before = _params(m)
    out = up.update(prompts, responses, adv, old, ref_logp=old)
    assert any(not torch.equal(a, b) for a, b in zip(before, m.parameters()))
    for k in ("pg_loss", "kl", "entropy", "clipfrac", "grad_norm", "lr", "approx_kl"):
        assert k in out and math.isfinite(out[k])
    # first mini-batch: policy == old == ref, so ratio 1 and KL 0 exactly
    assert out["skipped_updates"] == 0


def test_batched_logprobs_independent_of_micro_batching():
    m = _model()
    prompts, responses, _ = _rows()
    a = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=10_000)
    b = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=12)
    for x, y, r in zip(a, b, responses):
        assert len(x) == len(r)
        np.testing.assert_allclose(x, y, atol=1e-5)


@pytest.mark.parametrize(
    "loss_kw", [{}, {"policy_loss": "gspo", "loss_agg_mode": "seq-mean-token-mean"}], ids=["ppo", "gspo"]
)
def test_positive_advantage_raises_logprob(loss_kw):
    m = _model()
    prompts, responses, _ = _rows(6)
    adv = np.ones(6, np.float32)
    cfg = TrainConfig(lr=1e-2, mini_batch_rows=6, use_kl=False, entropy_coef=0.0, **loss_kw)
    up = PolicyUpdater(m, cfg, pad_token_id=0)
    old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=8192)
    out = up.update(prompts, responses, adv, old)
    assert out["clipfrac"] == 0.0  # one on-policy step: every ratio is 1
    new = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=8192)
    assert sum(n.sum() for n in new) > sum(o.sum() for o in old)


def test_nan_loss_skips_update_keeps_weights_and_stops_after_three():
    m = _model()
    prompts, responses, adv = _rows(4)
    cfg = TrainConfig(lr=1e-3, mini_batch_rows=4, max_bad_updates=3)
    up = PolicyUpdater(m, cfg, pad_token_id=0)
    old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=8192)
    bad = adv.copy()
    bad[0] = np.nan
    before = _params(m)
    for _ in range(2):
        out = up.update(prompts, responses, bad, old)
        assert out["skipped_updates"] == 1 and out["nonfinite_loss"] == 1.0
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters()))
    # a good update resets the consecutive counter
    up.update(prompts, responses, adv, old)
    assert up.bad_updates == 0
    up.update(prompts, responses, bad, old)
    up.update(prompts, responses, bad, old)
    with pytest.raises(TrainingDiverged, match="3 consecutive"):
        up.update(prompts, responses, bad, old)


def test_warmup_then_cosine_schedule():
    m = _model()
    cfg = TrainConfig(lr=1.0, warmup_iterations=2, schedule="cosine", iterations=6)
    up = PolicyUpdater(m, cfg, pad_token_id=0)
    f = [up._lr_factor(i) for i in range(7)]
    assert f[:2] == [0.5, 1.0] and f[2] == pytest.approx(1.0) and f[6] == pytest.approx(0.0)
    assert all(a >= b for a, b in zip(f[2:], f[3:]))


def test_bf16_autocast_logprobs_close_to_float32_and_update_learns():
    m = _model()
    prompts, responses, _ = _rows(8)
    kw = dict(pad_token_id=0, temperature=1.0, token_budget=8192)
    f32 = batched_logprobs(m, prompts, responses, **kw)
    b16 = batched_logprobs(m, prompts, responses, autocast="bf16", **kw)
    for x, y in zip(f32, b16):
        assert x.dtype == y.dtype == np.float32  # log-probs stay float32 under autocast
        np.testing.assert_allclose(x, y, atol=0.05)
    assert any(not np.array_equal(x, y) for x, y in zip(f32, b16))  # the matmuls really ran in bf16
    cfg = TrainConfig(lr=1e-2, mini_batch_rows=8, use_kl=False, entropy_coef=0.0, autocast="bf16")
    before = [p.dtype for p in m.parameters()]
    PolicyUpdater(m, cfg, pad_token_id=0).update(prompts, responses, np.ones(8, np.float32), f32)
    assert [p.dtype for p in m.parameters()] == before  # weights stay float32 (autocast, not a cast)
    new = batched_logprobs(m, prompts, responses, **kw)
    assert sum(n.sum() for n in new) > sum(o.sum() for o in f32)


@pytest.mark.parametrize("native", [True, False])
def test_auto_autocast_runs_bf16_only_where_the_device_has_native_bf16(monkeypatch, native):
    import gigpo.learner.precision as precision

    m = _model()
    prompts, responses, _ = _rows(4)
    kw = dict(pad_token_id=0, temperature=1.0, token_budget=8192)
    monkeypatch.setattr(precision, "native_bf16", lambda device_type: native)
    assert precision.resolve_autocast("auto", "cpu") == ("bf16" if native else "none")
    assert precision.resolve_autocast("bf16", "cpu") == "bf16" and precision.resolve_autocast("none", "cpu") == "none"
    auto = batched_logprobs(m, prompts, responses, autocast="auto", **kw)
    same = batched_logprobs(m, prompts, responses, autocast="bf16" if native else "none", **kw)
    for x, y in zip(auto, same):
        np.testing.assert_array_equal(x, y)


def test_autocast_value_is_checked():
    with pytest.raises(ValueError, match="train.autocast"):
        TrainConfig(autocast="fp16")


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_step_does_not_depend_on_micro_batching(agg):
    """A micro-batch's loss is its share of the mini-batch's (global token/row counts), so one
    micro-batch or many give the same loss, gradient norm and weights (float summation order)."""
    prompts, responses, adv = _rows(12)
    old = batched_logprobs(_model(), prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    out = []
    for budget in (4096, 12):  # one micro-batch per step; ~6 per step
        m = _model()
        cfg = TrainConfig(lr=1e-3, mini_batch_rows=6, micro_token_budget=budget, pad_multiple=1, loss_agg_mode=agg)
        up = PolicyUpdater(m, cfg, pad_token_id=0)
        out.append((up.update(prompts, responses, adv, old, seed=1), _params(m)))
    (m1, p1), (m2, p2) = out
    for k in ("loss", "pg_loss", "grad_norm"):
        assert m2[k] == pytest.approx(m1[k], rel=1e-5), k
    assert max(float((a - b).abs().max()) for a, b in zip(p1, p2)) < 2e-5


def _repeated_rows(seed=0):
    """12 rows where several are one sample repeated with different advantages of one sign, one
    pair repeats with advantages of both signs, and the rest are distinct."""
    prompts, responses, adv = _rows(6, seed)
    rep = [0, 0, 0, 1, 1, 2, 3, 4, 5, 5, 2, 2]
    adv_rep = np.array([0.5, 1.5, 2.0, -0.3, -1.1, 0.7, 0.2, -0.9, 1.2, -1.2, 0.1, 0.0], np.float32)
    return [prompts[i] for i in rep], [responses[i] for i in rep], adv_rep


def test_identical_row_groups_split_by_sign_tokens_and_old_logprobs():
    from gigpo.learner.update import identical_row_groups

    prompts, responses, adv = _repeated_rows()
    old = batched_logprobs(_model(), prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    groups = [g.tolist() for g in identical_row_groups(prompts, responses, adv, old)]
    # row 11 (A = 0) joins row 2's sample only with non-positive advantages: none here, so alone
    assert groups == [[0, 1, 2], [3, 4], [5, 10], [6], [7], [8], [9], [11]]
    # old log-probs that differ (another policy version) keep rows apart
    old2 = list(old)
    old2[1] = np.asarray(old[1]) + 1e-3
    assert [g.tolist() for g in identical_row_groups(prompts, responses, adv, old2)][:2] == [[0, 2], [1]]
    # different constrained positions keep rows apart
    allowed = [None] * 12
    allowed[2] = [(0, np.array([1, 2, 3]))]
    assert [0, 1] in [g.tolist() for g in identical_row_groups(prompts, responses, adv, old, allowed)]


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_merging_identical_rows_gives_the_same_step_with_fewer_rows(agg):
    """One mini-batch of 12 rows with repeats: merged into 8 weighted rows, the loss, metrics and
    new weights equal those of the 12 rows (entropy and KL terms included)."""
    prompts, responses, adv = _repeated_rows()
    ref = batched_logprobs(_model(1), prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    out = []
    for merge in (False, True):
        m = _model()
        # the update runs two epochs: the second one's ratios are not 1 and some tokens clip
        cfg = TrainConfig(
            lr=3e-2, mini_batch_rows=12, ppo_epochs=2, pad_multiple=1, loss_agg_mode=agg, merge_identical_rows=merge
        )
        old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
        up = PolicyUpdater(m, cfg, pad_token_id=0)
        out.append((up.update(prompts, responses, adv, old, ref_logp=ref, seed=1), _params(m)))
    (m1, p1), (m2, p2) = out
    assert (m1["distinct_rows"], m2["distinct_rows"]) == (12, 8)
    assert m1["clipfrac"] > 0
    for k in ("loss", "pg_loss", "kl", "entropy", "clipfrac", "approx_kl", "grad_norm"):
        assert m2[k] == pytest.approx(m1[k], rel=1e-5, abs=1e-7), k
    # Adam divides by sqrt(v): weights with near-zero gradients move by rounding noise; the others
    # agree to well below a step (lr 3e-2)
    assert max(float((a - b).abs().max()) for a, b in zip(p1, p2)) < 2e-4


def test_merged_rows_count_as_their_rows_in_mini_batches():
    from gigpo.learner.update import weighted_mini_batches

    order = np.arange(5)
    assert [b.tolist() for b in weighted_mini_batches(order, np.ones(5), 2)] == [[0, 1], [2, 3], [4]]
    assert [b.tolist() for b in weighted_mini_batches(order, np.array([3.0, 1, 1, 1, 2]), 3)] == [[0], [1, 2, 3], [4]]
    # no remainder batch of one row: two batches of about equal size
    assert [b.tolist() for b in weighted_mini_batches(order, np.ones(5), 4)] == [[0, 1, 2], [3, 4]]
    assert [len(b) for b in weighted_mini_batches(np.arange(322), np.ones(322), 64)] == [54, 54, 53, 54, 54, 53]
    prompts, responses, adv = _repeated_rows()
    old = batched_logprobs(_model(), prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    for merge in (False, True):
        cfg = TrainConfig(lr=1e-3, mini_batch_rows=4, use_kl=False, entropy_coef=0.0, merge_identical_rows=merge)
        out = PolicyUpdater(_model(), cfg, pad_token_id=0).update(prompts, responses, adv, old)
        assert out["distinct_rows"] == (8 if merge else 12)
    # per-token advantages (PPO's critic) differ between repeats: no merging
    tok = [np.full(len(r), a, np.float32) for r, a in zip(responses, adv)]
    cfg = TrainConfig(lr=1e-3, mini_batch_rows=4, use_kl=False, entropy_coef=0.0)
    out = PolicyUpdater(_model(), cfg, pad_token_id=0).update(prompts, responses, adv, old, token_advantages=tok)
    assert out["distinct_rows"] == 12


def test_target_kl_ends_the_update_at_the_first_mini_batch_already_that_far_from_the_sampler():
    prompts, responses, adv = _rows(n=12)
    old = batched_logprobs(_model(), prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    kw = dict(lr=3e-2, mini_batch_rows=3, ppo_epochs=2, use_kl=False, entropy_coef=0.0)
    free = PolicyUpdater(_model(), TrainConfig(**kw), pad_token_id=0).update(prompts, responses, adv, old)
    assert free["optimizer_steps"] == 8 and free["kl_stopped"] == 0 and free["kl_k3"] > 0
    # the first mini-batch sees the sampler's own policy (KL 0) and always steps; at lr 3e-2 the
    # second sees the first step's move, above this target, and ends the update untrained
    m = _model()
    out = PolicyUpdater(m, TrainConfig(**kw, target_kl=1e-4), pad_token_id=0).update(prompts, responses, adv, old)
    assert out["optimizer_steps"] == 1 and out["kl_stopped"] == 1 and out["kl_k3"] == pytest.approx(0.0, abs=1e-6)
    # the stopped update's weights are one step's: the first mini-batch alone, same order and seed
    one = _model()
    rows = np.random.default_rng(0).permutation(12)[:3]
    PolicyUpdater(one, TrainConfig(**{**kw, "ppo_epochs": 1, "mini_batch_rows": 3}), pad_token_id=0).update(
        [prompts[i] for i in rows], [responses[i] for i in rows], adv[rows], [old[i] for i in rows]
    )
    # (to summation order: the reference permutes its 3 rows again)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(m.parameters(), one.parameters()))
    new = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
    assert max(float(np.abs(a - b).max()) for a, b in zip(new, old)) > 0.1  # that one step moved it
    # a target the update never reaches changes nothing
    wide = PolicyUpdater(_model(), TrainConfig(**kw, target_kl=10.0), pad_token_id=0).update(
        prompts, responses, adv, old
    )
    assert wide["optimizer_steps"] == 8 and wide["pg_loss"] == pytest.approx(free["pg_loss"], abs=1e-6)


def test_target_kl_must_not_be_negative():
    with pytest.raises(ValueError, match="train.target_kl"):
        TrainConfig(target_kl=-0.1).validate()


def test_behaviour_weight_max_is_the_largest_weight_of_the_update_not_a_mean():
    """One row's behaviour log-probs planted 3 nats below the proximal ones (weight e^3 = 20.1) in
    one micro-batch of several: ``behav_weight_max`` is that weight whatever the micro-batching,
    while ``behav_weight_mean`` stays near 1."""
    prompts, responses, adv = _rows()
    seen = []
    for budget in (24, 4096):
        m = _model()
        cfg = TrainConfig(lr=1e-3, mini_batch_rows=6, micro_token_budget=budget, behav_weight_cap=100.0)
        prox = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=budget)
        behav = [p.copy() for p in prox]
        behav[7] = behav[7] - 3.0
        out = PolicyUpdater(m, cfg, pad_token_id=0).update(prompts, responses, adv, prox, behav_logp=behav)
        assert out["behav_weight_max"] == pytest.approx(math.exp(3.0), rel=1e-4)
        assert out["behav_weight_mean"] < 4.0
        seen.append(out["behav_weight_max"])
    assert seen[0] == pytest.approx(seen[1], rel=1e-6)
