"""token_logprobs: asking the model for response-position logits only changes nothing."""

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from gigpo.learner.logprobs import token_logprobs

torch.set_num_threads(1)


class FullLogitsOnly(torch.nn.Module):
    """The same model behind a forward without ``logits_to_keep`` (the fallback path)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask, use_cache):
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)


def test_logits_to_keep_path_equals_full_logits_path():
    torch.manual_seed(0)
    m = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=128,
        )
    )
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 64, rng.integers(1, 20)) for _ in range(7)]  # ragged, one of length 1 likely
    prompts[0] = prompts[0][:1]
    responses = [rng.integers(1, 64, rng.integers(1, 9)) for _ in range(7)]
    with torch.no_grad():
        fast = token_logprobs(m, prompts, responses, pad_token_id=0, temperature=0.7, with_entropy=True)
        full = token_logprobs(FullLogitsOnly(m), prompts, responses, pad_token_id=0, temperature=0.7, with_entropy=True)
    for a, b in zip(fast, full):
        torch.testing.assert_close(a, b)
    assert fast[2].sum() == sum(len(r) for r in responses)
    # gradients flow through the kept logits as before
    lp, _, mask = token_logprobs(m, prompts, responses, pad_token_id=0)
    (lp * mask).sum().backward()
    assert m.lm_head.weight.grad is not None and m.lm_head.weight.grad.abs().sum() > 0


def test_pad_multiple_changes_shapes_not_results():
    """``pad_multiple`` (train.pad_multiple) pads rows and kept logits to repeated shapes; the
    log-probs, entropies and gradients are those of the unpadded pass."""
    from gigpo.learner.update import batched_logprobs, padded_lengths

    torch.manual_seed(0)
    m = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=64,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=256,
        )
    )
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, 64, rng.integers(1, 40)) for _ in range(9)]
    responses = [rng.integers(1, 64, rng.integers(1, 12)) for _ in range(9)]
    seen = []
    orig = m.forward

    def spy(input_ids, **kw):
        seen.append((tuple(input_ids.shape), len(kw["logits_to_keep"])))
        return orig(input_ids=input_ids, **kw)

    m.forward = spy
    out = {}
    for mult in (1, 16):
        m.zero_grad()
        lp, ent, mask = token_logprobs(m, prompts, responses, pad_token_id=0, with_entropy=True, pad_multiple=mult)
        (lp * mask).sum().backward()
        out[mult] = (lp.detach(), ent.detach(), mask, m.lm_head.weight.grad.clone())
    assert seen[1][0][1] % 16 == 0 and seen[1][0][1] >= seen[0][0][1]
    assert seen[1][1] % 16 == 0 or seen[1][1] == seen[1][0][1] - (min(len(p) for p in prompts) - 1)
    for a, b in zip(out[1], out[16]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert padded_lengths([[1] * 5], [[2] * 3], 4) == [8] and padded_lengths([[1] * 5], [[2] * 4], 4) == [12]
    # the token budget counts padded lengths: every micro-batch's padded size stays within it
    seen.clear()
    a = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=64, pad_multiple=16)
    assert len(seen) > 1 and all(s[0][0] * s[0][1] <= 64 or s[0][0] == 1 for s in seen)
    b = batched_logprobs(m, prompts, responses, pad_token_id=0, temperature=1.0, token_budget=64)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
