"""The update's speed options keep its step: ``train.share_prefix`` (rows run their shared prompt
prefix once and the rest on its KV cache, with the log-probs, entropies and gradients of the
one-pass forward), ``train.mini_batch_order``, ``train.update_attention``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo.learner.logprobs import shared_prefix_plan, token_logprobs
from gigpo.learner.update import PolicyUpdater, batched_logprobs, by_prompt, update_attention
from gigpo.train.config import TrainConfig
from test_train_update import _model  # the same small Qwen2 the update's other tests train

torch.set_num_threads(1)


def _rows(seed=0, states=4, n=14):
    """Rows as rollouts of one task give them: a common template, a few states (each prompt the
    template + a state), several responses per state; and one row sharing nothing."""
    rng = np.random.default_rng(seed)
    template = rng.integers(1, 64, 12)
    grids = [np.concatenate([template, rng.integers(1, 64, rng.integers(20, 40))]) for _ in range(states)]
    prompts = [grids[rng.integers(0, states)] for _ in range(n)]
    responses = [rng.integers(1, 64, rng.integers(1, 6)) for _ in range(n)]
    prompts.append(rng.integers(1, 64, 30))
    responses.append(rng.integers(1, 64, 4))
    return prompts, responses


def _grads(model):
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("constrained", [False, True])
def test_shared_prefix_gives_the_one_pass_logprobs_entropies_and_gradients(constrained):
    prompts, responses = _rows()
    # constrained positions renormalise over a few ids, as the action-constrained sampler records
    allowed = [[(0, np.array([int(r[0]), 5, 9]))] if constrained and i % 2 else None for i, r in enumerate(responses)]
    allowed = allowed if constrained else None
    plan = shared_prefix_plan(prompts, responses, pad_multiple=8)
    assert plan is not None
    out = []
    for share in (False, True):
        m = _model()
        lp, ent, mask = token_logprobs(
            m,
            prompts,
            responses,
            pad_token_id=0,
            temperature=0.7,
            with_entropy=True,
            pad_multiple=8,
            allowed=allowed,
            share_prefix=share,
        )
        ((lp * torch.linspace(0.5, 1.5, lp.shape[1])).sum() + 0.1 * ent.sum()).backward()
        out.append((lp.detach(), ent.detach(), mask, _grads(m)))
    (lp1, e1, m1, g1), (lp2, e2, m2, g2) = out
    assert torch.equal(m1, m2) and lp1.shape == lp2.shape
    torch.testing.assert_close(lp2, lp1, atol=2e-5, rtol=0)
    torch.testing.assert_close(e2, e1, atol=2e-5, rtol=0)
    assert float((g2 - g1).norm() / g1.norm()) < 1e-5


def test_plan_shares_each_runs_common_prefix_and_leaves_rows_that_share_nothing_alone():
    prompts, responses = _rows()
    prefix_len, group, groups = shared_prefix_plan(prompts, responses)
    lone = group[-1]  # the last row shares nothing: a group of its own, its prompt but one token
    assert group.count(lone) == 1 and groups[lone] == (len(prompts) - 1, len(prompts[-1]) - 1)
    assert sum(1 for r in range(len(groups)) if group.count(r) >= 2) >= 2  # the states, not only the template
    for r, (first, s) in enumerate(groups):
        members = [i for i in range(len(prompts)) if group[i] == r]
        assert first in members
        for i in members:
            assert prefix_len[i] == s < len(prompts[i])  # the last prompt token is in the row's own pass
            assert np.array_equal(prompts[i][:s], prompts[first][:s])
    # all distinct prompts: nothing worth sharing but the template, below the saving asked
    rng = np.random.default_rng(1)
    assert shared_prefix_plan([rng.integers(1, 64, 30) for _ in range(6)], [np.ones(3)] * 6) is None


def test_batched_logprobs_with_shared_prefixes_match_across_micro_batches():
    prompts, responses = _rows(seed=2, n=30)
    m = _model()
    a = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=10_000)
    b = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=400, share_prefix=True)
    for x, y, r in zip(a, b, responses):
        assert len(x) == len(y) == len(r)
        np.testing.assert_allclose(y, x, atol=2e-5)


def test_by_prompt_keeps_rows_of_a_prompt_together_in_the_order_of_their_first_row():
    prompts = [np.array(p) for p in ([1, 2], [3], [1, 2], [4], [3], [1, 2])]
    order = by_prompt(np.array([3, 1, 5, 0, 4, 2]), prompts)
    assert order.tolist() == [3, 1, 4, 5, 0, 2]


def test_update_with_shared_prefixes_takes_the_step_of_the_plain_update():
    prompts, responses = _rows(seed=3, n=20)
    adv = np.random.default_rng(3).normal(size=len(prompts)).astype(np.float32)
    results = []
    for share in (False, True):
        m = _model()
        cfg = TrainConfig(
            lr=1e-2, mini_batch_rows=8, ppo_epochs=2, mini_batch_order="by_prompt", share_prefix=share, pad_multiple=8
        )
        old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
        out = PolicyUpdater(m, cfg, pad_token_id=0).update(prompts, responses, adv, old, seed=5)
        results.append((out, [p.detach().clone() for p in m.parameters()]))
    (o1, p1), (o2, p2) = results
    for k in ("loss", "pg_loss", "entropy", "clipfrac", "grad_norm"):
        assert o2[k] == pytest.approx(o1[k], rel=1e-4, abs=1e-6), k
    assert max(float((a - b).abs().max()) for a, b in zip(p1, p2)) < 1e-4


def test_update_attention_runs_the_update_with_that_kernel_and_gives_the_model_its_own_back():
    prompts, responses = _rows(seed=4, n=12)
    adv = np.random.default_rng(4).normal(size=len(prompts)).astype(np.float32)
    seen, results = [], []
    for kernel in ("", "eager"):
        m = _model()
        m.set_attn_implementation("sdpa")
        with update_attention(m, kernel):
            seen.append(m.config._attn_implementation)
        cfg = TrainConfig(lr=1e-2, mini_batch_rows=6, update_attention=kernel, pad_multiple=8)
        old = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=4096)
        out = PolicyUpdater(m, cfg, pad_token_id=0).update(prompts, responses, adv, old, seed=2)
        assert m.config._attn_implementation == "sdpa"
        results.append((out, [p.detach().clone() for p in m.parameters()]))
    assert seen == ["sdpa", "eager"]
    (o1, p1), (o2, p2) = results
    for k in ("loss", "grad_norm"):
        assert o2[k] == pytest.approx(o1[k], rel=1e-4, abs=1e-6), k
    assert max(float((a - b).abs().max()) for a, b in zip(p1, p2)) < 1e-4


def test_batched_logprobs_runs_a_repeated_row_once_and_gives_every_copy_its_log_probs():
    prompts, responses = _rows(seed=3, n=12)
    # every row twice more, interleaved, as rollouts that pass one state and take one action there
    rep_p = [p for p in prompts for _ in range(3)]
    rep_r = [r for r in responses for _ in range(3)]
    m = _model()
    seen = []
    h = m.register_forward_hook(lambda mod, args, kw, out: seen.append(kw["input_ids"].shape[0]), with_kwargs=True)
    try:
        got = batched_logprobs(m, rep_p, rep_r, pad_token_id=0, temperature=1.0, token_budget=10_000)
    finally:
        h.remove()
    assert sum(seen) == len(prompts)  # one pass, the distinct rows only
    one = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=10_000)
    assert len(got) == len(rep_p)
    for k, x in enumerate(got):
        np.testing.assert_array_equal(x, one[k // 3])
    got[0][:] = 99.0  # copies, not views of one array
    assert not np.array_equal(got[1], got[0])
