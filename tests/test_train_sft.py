"""SFT: the loss covers response tokens only and training lowers it."""

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from gigpo.learner.logprobs import token_logprobs
from gigpo.train.sft import sft_loss, sft_train

torch.set_num_threads(1)


def _model():
    torch.manual_seed(0)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=48,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=64,
        )
    )


def _demos(n=16, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = int(rng.integers(1, 20))
        prompt = np.array([1, a, *rng.integers(1, 48, 4)], np.int32)
        out.append((prompt, np.array([a + 20, a + 21, 2], np.int32)))  # response depends on prompt
    return out


def test_sft_loss_masks_prompt_tokens():
    m = _model()
    demos = _demos(4)
    loss, n = sft_loss(m, [d[0] for d in demos], [d[1] for d in demos], pad_token_id=0)
    assert n == sum(len(d[1]) for d in demos)
    lp, _, mask = token_logprobs(m, [d[0] for d in demos], [d[1] for d in demos], pad_token_id=0)
    assert float(loss) == float(-(lp * mask).sum() / n)
    # changing only prompt tokens' *targets* can't matter: the loss is over response positions;
    # a longer prompt with the same response adds no tokens to the count
    longer = [(np.concatenate([d[0], d[0]]), d[1]) for d in demos]
    assert sft_loss(m, [d[0] for d in longer], [d[1] for d in longer], pad_token_id=0)[1] == n


def test_sft_lowers_response_loss():
    m = _model()
    demos = _demos(32)
    P, R = [d[0] for d in demos], [d[1] for d in demos]
    with torch.no_grad():
        before = float(sft_loss(m, P, R, pad_token_id=0)[0])
    losses = sft_train(m, demos, epochs=10, lr=1e-2, batch_rows=8, pad_token_id=0)
    with torch.no_grad():
        after = float(sft_loss(m, P, R, pad_token_id=0)[0])
    assert after < 0.8 * before and losses[-1] < losses[0]


def test_prompt_loss_weight_adds_prompt_token_nll():
    m = _model()
    demos = _demos(6)
    P, R = [d[0] for d in demos], [d[1] for d in demos]
    base, n = sft_loss(m, P, R, pad_token_id=0)
    with_prompt, n2 = sft_loss(m, P, R, pad_token_id=0, prompt_weight=0.5)
    assert n == n2 == sum(len(r) for r in R)
    # hand value: mean NLL of every prompt token after the first, from an unpadded forward per row
    nll = []
    with torch.no_grad():
        for p, r in zip(P, R):
            ids = torch.as_tensor(np.concatenate([p, r]), dtype=torch.long)[None]
            lp = torch.log_softmax(m(input_ids=ids).logits[0, :-1].float(), -1)
            nll += [-float(lp[k - 1, ids[0, k]]) for k in range(1, len(p))]
    assert float(with_prompt) == pytest.approx(float(base) + 0.5 * np.mean(nll), rel=1e-4)


def test_prompt_loss_keeps_the_masked_response_term():
    """With action masks the prompt-loss path's response term is token_logprobs' masked NLL."""
    m = _model()
    demos = _demos(5)
    P, R = [d[0] for d in demos], [d[1] for d in demos]
    allowed = [[(0, sorted({int(r[0]), 3, 7}))] for r in R]  # first response token: 3 choices
    allowed[2] = None
    with torch.no_grad():
        masked, n = sft_loss(m, P, R, pad_token_id=0, allowed=allowed)
        plain, _ = sft_loss(m, P, R, pad_token_id=0)
        both, n2 = sft_loss(m, P, R, pad_token_id=0, allowed=allowed, prompt_weight=0.5)
        prompt_only = float(sft_loss(m, P, R, pad_token_id=0, prompt_weight=0.5)[0]) - float(plain)
    assert n == n2 and float(masked) < float(plain)  # renormalising over 3 ids raises those log-probs
    assert float(both) == pytest.approx(float(masked) + prompt_only, rel=1e-5)


def test_sft_lr_schedule_warms_up_then_decays():
    from gigpo.train.sft import sft_lr_factor

    f = [sft_lr_factor(s, 100, 10) for s in range(100)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)  # linear ramp, full lr at step 9
    assert all(a < b for a, b in zip(f[:10], f[1:10]))
    assert f[10] == pytest.approx(0.9) and f[99] == pytest.approx(0.01)  # then the same decay as before
    assert [sft_lr_factor(s, 100, 0) for s in range(100)] == [1.0 - s / 100 for s in range(100)]


def test_sft_train_applies_the_warmup():
    seen = []

    class Spy(torch.optim.AdamW):
        def step(self, closure=None):
            seen.append(self.param_groups[0]["lr"])
            return super().step(closure)

    m = _model()
    orig = torch.optim.AdamW
    torch.optim.AdamW = Spy
    try:
        sft_train(m, _demos(16), epochs=2, lr=1e-2, batch_rows=4, pad_token_id=0, warmup_steps=4)
    finally:
        torch.optim.AdamW = orig
    assert seen[:4] == pytest.approx([2.5e-3, 5e-3, 7.5e-3, 1e-2]) and seen[4] == pytest.approx(1e-2 * (1 - 4 / 8))
