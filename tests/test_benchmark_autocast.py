"""benchmarks/autocast_gradient.py: the bf16 policy gradient is measured against float32 correctly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from benchmark_scripts import load

A = load("autocast_gradient.py", "autocast_gradient_bench")


def test_compare_gives_cosine_and_relative_error():
    g = torch.tensor([3.0, 4.0], dtype=torch.float64)
    assert A.compare(g, g) == pytest.approx((1.0, 0.0))
    cos, rel = A.compare(g, torch.tensor([4.0, 3.0], dtype=torch.float64))
    assert cos == pytest.approx(24 / 25) and rel == pytest.approx(np.sqrt(2) / 5)
    assert np.isnan(A.compare(torch.zeros(2, dtype=torch.float64), g)[0])


def test_bf16_gradient_is_close_to_float32_and_depends_on_the_advantages():
    from gigpo.policy import load_policy

    torch.manual_seed(0)
    model, tok = load_policy("tiny")
    model.eval()
    prompts = [np.asarray(tok(f"You are in room {i}. Your task is to: put a mug on the desk.")["input_ids"])
               for i in range(4)]
    responses = [np.asarray(tok(f"<action>go to desk {i}</action>")["input_ids"]) for i in range(4)]
    from gigpo.policy.base import token_logprobs

    with torch.no_grad():  # old log-probs = the model's own: ratio 1, as the update's first step
        lp, _, _ = token_logprobs(model, prompts, responses, pad_token_id=tok.pad_token_id)
    batch = SimpleNamespace(prompt_ids=prompts, response_ids=responses, allowed=None,
                            logprobs=[lp[i, : len(r)].numpy() for i, r in enumerate(responses)])
    rows = np.arange(4)
    kw = dict(pad_token_id=tok.pad_token_id, temperature=1.0)
    adv = np.array([1.0, -1.0, 0.5, -0.5], np.float32)
    g32 = A.policy_gradient(model, batch, rows, adv, mode="none", **kw)
    g16 = A.policy_gradient(model, batch, rows, adv, mode="bf16", **kw)
    cos, rel = A.compare(g32, g16)
    assert float(g32.norm()) > 0 and cos > 0.99 and 0 < rel < 0.1  # close, yet not the same computation
    g_neg = A.policy_gradient(model, batch, rows, -adv, mode="none", **kw)
    assert A.compare(g32, g_neg)[0] == pytest.approx(-1.0, abs=1e-6)  # the loss is linear in A at ratio 1
