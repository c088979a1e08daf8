"""The actor loss against hand-computed values (docs/algorithm.md#loss) and micro-batching."""

import math

import pytest
import torch

from gigpo.learner.loss import actor_loss, agg_loss, kl_penalty, policy_gradient_loss, token_budget_microbatches


def _lp(ratio):
    return torch.log(torch.tensor([ratio], dtype=torch.float64))[None, :]


@pytest.mark.parametrize(
    "ratio,adv,expected",
    [
        (1.5, 1.0, -1.2),  # A>0, ratio above 1+eps_high: clipped to 1.2
        (0.5, 1.0, -0.5),  # A>0, ratio below 1-eps_low: unclipped branch (max of -0.5, -0.8)
        (0.5, -1.0, 0.8),  # A<0, ratio below: clipped to 0.8
        (2.0, -1.0, 2.0),  # A<0, ratio 2: max(2, 1.2) = 2, under dual clip 3
        (5.0, -1.0, 3.0),  # A<0, ratio 5: dual clip bounds the loss at -A*c = 3
        (5.0, 1.0, -1.2),  # A>0: dual clip never applies
    ],
)
def test_clipped_surrogate_matches_hand_values(ratio, adv, expected):
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, _ = policy_gradient_loss(
        _lp(ratio), old, torch.tensor([adv], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64)
    )
    assert float(loss) == pytest.approx(expected, rel=1e-9)


def test_clip_higher_uses_separate_high_bound():
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, st = policy_gradient_loss(
        _lp(1.5), old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1, dtype=torch.float64), clip_high=0.28
    )
    assert float(loss) == pytest.approx(-1.28)
    assert st.clipfrac == 1.0


def test_clipfrac_and_dual_clip_fraction():
    logp = torch.log(torch.tensor([[1.5, 1.0, 5.0, 1.0]], dtype=torch.float64))
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]], dtype=torch.float64)
    _, st = policy_gradient_loss(logp, torch.zeros_like(logp), adv, mask)
    assert st.clipfrac == pytest.approx(1 / 3)  # only token 0 takes the clipped branch
    assert st.clipfrac_lower == pytest.approx(1 / 3)  # token 2 hits the dual clip


def test_kl_types_hand_values_and_clamp():
    logp = torch.tensor([[-1.0]], dtype=torch.float64)
    ref = torch.tensor([[-2.0]], dtype=torch.float64)
    assert float(kl_penalty(logp, ref, "kl")) == pytest.approx(1.0)
    assert float(kl_penalty(logp, ref, "abs")) == pytest.approx(1.0)
    assert float(kl_penalty(logp, ref, "mse")) == pytest.approx(0.5)
    # k3: exp(-1) - (-1) - 1 = exp(-1)
    assert float(kl_penalty(logp, ref, "low_var_kl")) == pytest.approx(math.exp(-1))
    # ref far above logp: exp(15) - 15 - 1 is huge, clamped to 10
    big = kl_penalty(torch.tensor([[-20.0]]), torch.tensor([[-5.0]]), "low_var_kl")
    assert float(big) == 10.0
    assert float(kl_penalty(logp, logp, "low_var_kl")) == 0.0
    with pytest.raises(ValueError, match="kl_type"):
        kl_penalty(logp, ref, "kl2")


def test_aggregation_modes_hand_values():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert float(agg_loss(loss, mask, "token-mean")) == pytest.approx(10 / 4)
    assert float(agg_loss(loss, mask, "seq-mean-token-sum")) == pytest.approx((6 + 4) / 2)
    assert float(agg_loss(loss, mask, "seq-mean-token-mean")) == pytest.approx((2 + 4) / 2)
    # padding never counts, whatever value sits there
    loss2 = loss.clone()
    loss2[1, 1:] = 100.0
    for mode in ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean"):
        assert float(agg_loss(loss2, mask, mode)) == float(agg_loss(loss, mask, mode))


def test_actor_loss_adds_entropy_bonus_and_kl_term():
    logp = torch.log(torch.tensor([[1.0, 1.0]], dtype=torch.float64))  # ratio 1 -> pg = -A
    adv = torch.tensor([2.0], dtype=torch.float64)
    mask = torch.ones(1, 2, dtype=torch.float64)
    ent = torch.tensor([[0.5, 1.5]], dtype=torch.float64)
    ref = logp - 1.0  # kl per token under "kl" = 1
    loss, m = actor_loss(
        logp, logp.clone(), adv, mask, entropy=ent, ref_logp=ref, entropy_coef=0.1, kl_type="kl", kl_coef=0.01
    )
    assert float(loss) == pytest.approx(-2.0 - 0.1 * 1.0 + 0.01 * 1.0)
    assert m["entropy"] == pytest.approx(1.0) and m["kl"] == pytest.approx(1.0)


def test_loss_gradient_flows_only_through_new_logprobs():
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, _ = actor_loss(logp, torch.zeros(2, 3), torch.tensor([1.0, -1.0]), torch.ones(2, 3))
    loss.backward()
    assert logp.grad is not None and torch.isfinite(logp.grad).all()
    assert (logp.grad[0] < 0).all() and (logp.grad[1] > 0).all()


@pytest.mark.parametrize("budget", [1, 7, 16, 50, 1000])
def test_token_budget_microbatches_cover_every_row_once(budget):
    g = torch.Generator().manual_seed(budget)
    lengths = torch.randint(1, 20, (37,), generator=g).tolist()
    mbs = token_budget_microbatches(lengths, budget)
    flat = sorted(i for mb in mbs for i in mb)
    assert flat == list(range(37))
    for mb in mbs:
        padded = max(lengths[i] for i in mb) * len(mb)
        assert padded <= budget or len(mb) == 1


def test_token_budget_groups_similar_lengths():
    lengths = [100, 1, 99, 2, 98, 3]
    mbs = token_budget_microbatches(lengths, 300)
    assert mbs[0] == [0, 2, 4] and sorted(mbs[1]) == [1, 3, 5]


# --------------------------------------------------------------------------- GSPO (arXiv:2507.18071)

F64 = torch.float64


def _gspo(logp, old, adv, mask, **kw):
    return actor_loss(logp, old, adv, mask, policy_loss="gspo", agg_mode="seq-mean-token-mean", **kw)


def test_gspo_on_policy_ratio_is_one_and_loss_is_minus_mean_advantage():
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(3, 4, generator=g, dtype=F64)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=F64)
    adv = torch.tensor([1.5, -0.5, 2.0], dtype=F64)
    loss, m = _gspo(logp, logp.clone(), adv, mask)
    assert float(loss) == pytest.approx(-float(adv.mean()), rel=1e-12)
    assert m["clipfrac"] == 0.0 and m["clipfrac_lower"] == 0.0 and m["approx_kl"] == 0.0


def test_gspo_two_rows_hand_values():
    # row 0: token log-ratios 0.1 and 0.3 -> s_0 = exp(0.2) = 1.221 > 1.2, A = +1: clipped, loss -1.2
    # row 1: one real token (log-ratio -0.1; the padding's 5.0 never counts) -> s_1 = exp(-0.1) = 0.905,
    #        inside [0.8, 1.2], A = -2: loss 2 exp(-0.1)
    old = torch.zeros(2, 2, dtype=F64)
    logp = torch.tensor([[0.1, 0.3], [-0.1, 5.0]], dtype=F64)
    mask = torch.tensor([[1, 1], [1, 0]], dtype=F64)
    adv = torch.tensor([1.0, -2.0], dtype=F64)
    loss, m = _gspo(logp, old, adv, mask, clip_low=0.2, clip_high=0.2)
    assert float(loss) == pytest.approx((-1.2 + 2 * math.exp(-0.1)) / 2, rel=1e-12)
    assert m["clipfrac"] == pytest.approx(0.5)  # one of two sequences, whatever their lengths
    assert m["approx_kl"] == pytest.approx(-(0.1 + 0.3 - 0.1) / 3)
    # per-token PPO on the same rows differs: token 0.1 of row 0 is not clipped there
    ppo, _ = actor_loss(logp, old, adv, mask, agg_mode="seq-mean-token-mean")
    assert float(ppo) != pytest.approx(float(loss))


@pytest.mark.parametrize("clip", [0.2, 3e-4])
def test_gspo_gradient_matches_the_sequence_formula(clip):
    # d loss / d logp[i, t] = -(1/B) (A_i / |y_i|) s_i on row i's tokens when s_i is not clipped
    # (the loss is the mean over B rows of -A_i s_i), 0 on padding and on rows clipped in A's direction.
    old = torch.zeros(4, 3, dtype=F64)
    lr = torch.tensor([[0.5, 0.1, 0.0], [0.0, -0.4, 9.0], [-0.3, -0.3, -0.3], [0.2, 0.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 0, 0]], dtype=F64)
    adv = torch.tensor([1.0, -1.0, 1.0, -0.5], dtype=F64)
    # s = exp(0.3) with A > 0: clipped; exp(-0.2) = 0.819 with A < 0: clipped only at eps 3e-4;
    # exp(-0.3) with A > 0 and exp(0.2) with A < 0: the unclipped branch is the larger loss, never clipped
    logp = lr.clone().requires_grad_(True)
    loss, m = _gspo(logp, old, adv, mask, clip_low=clip, clip_high=clip)
    loss.backward()
    n = mask.sum(-1)
    s = torch.exp((lr * mask).sum(-1) / n)
    clipped = ((adv > 0) & (s > 1 + clip)) | ((adv < 0) & (s < 1 - clip))
    want = torch.where(clipped, 0.0, -(adv / n) * s / 4)[:, None] * mask
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, want, rtol=1e-12, atol=1e-15)
    assert clipped.tolist() == ([True, False, False, False] if clip == 0.2 else [True, True, False, False])
    assert m["clipfrac"] == pytest.approx(float(clipped.double().mean()))


def test_gspo_keeps_entropy_and_kl_terms_aggregated_per_sequence():
    logp = torch.log(torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=F64))
    mask = torch.tensor([[1, 1], [1, 0]], dtype=F64)
    ent = torch.tensor([[0.5, 1.5], [3.0, 99.0]], dtype=F64)  # per-row means 1.0 and 3.0
    loss, m = _gspo(
        logp,
        logp.clone(),
        torch.tensor([2.0, 0.0], dtype=F64),
        mask,
        entropy=ent,
        ref_logp=logp - 1.0,
        entropy_coef=0.1,
        kl_type="kl",
        kl_coef=0.01,
    )
    assert m["entropy"] == pytest.approx(2.0) and m["kl"] == pytest.approx(1.0)
    assert float(loss) == pytest.approx(-1.0 - 0.1 * 2.0 + 0.01 * 1.0)


def test_gspo_refuses_other_aggregations_and_unknown_policy_loss_is_named():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        actor_loss(x, x, torch.ones(1), torch.ones(1, 2), policy_loss="gspo", agg_mode="token-mean")
    with pytest.raises(ValueError, match="policy_loss 'gpso'"):
        actor_loss(x, x, torch.ones(1), torch.ones(1, 2), policy_loss="gpso")
