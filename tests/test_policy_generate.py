"""``HFGenerator``: exact ids, log-probs that a forward pass reproduces, left padding, seeds, stops."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo.policy import HFGenerator, SamplingParams, bare_generate, load_policy, token_logprobs
from gigpo.policy.generate import sample_next

torch.set_num_threads(1)

USER_TEXTS = [
    "go to",
    "Your task is to: put a clean mug in coffeemachine. You are in the middle of a room.",
    "Question: who wrote hamlet? <search> hamlet author </search>",
    "i need a long sleeve shirt in blue, price lower than 40.00 dollars. click[buy now] click[back to search]"
    " Your admissible actions of the current situation are: [go to desk 1, open drawer 2, look].",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    model, tok = load_policy("tiny", cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache"), device="cpu")
    return model, tok


@pytest.fixture(scope="module")
def prompts(tiny):
    _, tok = tiny
    return [
        tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True)["input_ids"]
        for t in USER_TEXTS
    ]


def recompute(model, tok, prompts, gens, temperature=1.0):
    with torch.no_grad():
        lp, _, mask = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=tok.pad_token_id,
            temperature=temperature,
        )
    return [lp[i, : len(g.token_ids)].numpy() for i, g in enumerate(gens)]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_logprobs_match_forward_pass(tiny, prompts, temperature):
    model, tok = tiny
    gens = HFGenerator(model, tok).generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=3))
    assert all(len(g.token_ids) == len(g.logprobs) > 0 for g in gens)
    for g, lp in zip(gens, recompute(model, tok, prompts, gens, temperature)):
        np.testing.assert_allclose(g.logprobs, lp, atol=1e-4)


def test_greedy_logprobs_are_untempered(tiny, prompts):
    model, tok = tiny
    gens = HFGenerator(model, tok).generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=12))
    for g, lp in zip(gens, recompute(model, tok, prompts, gens, 1.0)):
        np.testing.assert_allclose(g.logprobs, lp, atol=1e-4)


def test_left_padding_gives_same_tokens_as_alone(tiny, prompts):
    model, tok = tiny
    gen = HFGenerator(model, tok)
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    batch = gen.generate(prompts, params)  # prompts[0] is by far the shortest: most left padding
    for i, p in enumerate(prompts):
        alone = gen.generate([p], params)[0]
        np.testing.assert_array_equal(alone.token_ids, batch[i].token_ids)
        np.testing.assert_allclose(alone.logprobs, batch[i].logprobs, atol=1e-4)


def test_matches_hf_generate_greedy(tiny, prompts):
    model, tok = tiny
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    ours = HFGenerator(model, tok).generate(prompts, params)
    ref = bare_generate(model, tok, prompts, params)
    for a, b in zip(ours, ref):
        np.testing.assert_array_equal(a.token_ids, b.token_ids)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_same_seed_same_output_other_seed_differs(tiny, prompts):
    model, tok = tiny
    gen = HFGenerator(model, tok)
    a = gen.generate(prompts, SamplingParams(max_new_tokens=16, seed=7))
    b = gen.generate(prompts, SamplingParams(max_new_tokens=16, seed=7))
    c = gen.generate(prompts, SamplingParams(max_new_tokens=16, seed=8))
    assert all(
        np.array_equal(x.token_ids, y.token_ids) and np.array_equal(x.logprobs, y.logprobs) for x, y in zip(a, b)
    )
    assert any(not np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a, c))


def test_unseeded_calls_differ(tiny, prompts):
    model, tok = tiny
    gen = HFGenerator(model, tok)
    a = gen.generate(prompts, SamplingParams(max_new_tokens=16))
    b = gen.generate(prompts, SamplingParams(max_new_tokens=16))
    assert any(not np.array_equal(x.token_ids, y.token_ids) for x, y in zip(a, b))


def test_stops_at_eos_and_includes_it(tiny, prompts):
    model, tok = tiny
    params = SamplingParams(temperature=0.0, max_new_tokens=20)
    free = HFGenerator(model, tok, eos_token_ids=[-5]).generate(prompts, params)
    assert all(len(g.token_ids) == 20 and not g.finished for g in free)
    # Declare row 1's 4th greedy token an EOS: row 1 must stop right there, EOS included, while
    # other rows run on (they leave and rejoin nothing: the batch shrinks mid-decode).
    stop = int(free[1].token_ids[3])
    gens = HFGenerator(model, tok, eos_token_ids=[stop]).generate(prompts, params)
    for g, f in zip(gens, free):
        hits = np.flatnonzero(f.token_ids == stop)
        n = hits[0] + 1 if len(hits) else 20
        np.testing.assert_array_equal(g.token_ids, f.token_ids[:n])
        np.testing.assert_allclose(g.logprobs, f.logprobs[:n], atol=1e-4)
        assert g.finished == bool(len(hits))
    assert gens[1].finished and gens[1].token_ids[-1] == stop and len(gens[1].token_ids) <= 4


def test_max_new_tokens_bounds_length(tiny, prompts):
    model, tok = tiny
    for n in (1, 5):
        gens = HFGenerator(model, tok).generate(prompts, SamplingParams(max_new_tokens=n, seed=0))
        assert all(1 <= len(g.token_ids) <= n for g in gens)
        assert all(g.token_ids.dtype == np.int32 and g.logprobs.dtype == np.float32 for g in gens)


def test_top_p_restricts_support_and_renormalises(tiny, prompts):
    model, tok = tiny
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompts[1]])).logits[0, -1].float()
    probs = torch.softmax(logits, -1)
    top_p = 0.3
    order = probs.argsort(descending=True)
    k = int((probs[order].cumsum(0) < top_p).sum()) + 1  # smallest top set with mass >= top_p
    nucleus = set(order[:k].tolist())
    mass = float(probs[order[:k]].sum())
    gens = [
        HFGenerator(model, tok).generate([prompts[1]], SamplingParams(top_p=top_p, max_new_tokens=1, seed=s))[0]
        for s in range(40)
    ]
    firsts = {int(g.token_ids[0]) for g in gens}
    assert firsts <= nucleus and len(firsts) > 1
    for g in gens:  # renormalised over the nucleus: log p - log(mass of the nucleus)
        expect = float(torch.log(probs[int(g.token_ids[0])]) - np.log(mass))
        assert abs(float(g.logprobs[0]) - expect) < 1e-4


def test_sample_next_top_p_on_known_distribution():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    seen = {int(sample_next(logits, 1.0, 0.8, g)[0]) for _ in range(200)}
    assert seen == {0, 1}  # 0.5 < 0.8 <= 0.5 + 0.3
    tok, lp = sample_next(logits, 1.0, 0.8, g)
    assert abs(float(lp.exp()) - [0.5 / 0.8, 0.3 / 0.8][int(tok)]) < 1e-6
    assert {int(sample_next(logits, 1.0, 0.01, g)[0]) for _ in range(50)} == {0}


def test_bad_inputs_raise_clear_errors(tiny, prompts):
    model, tok = tiny
    gen = HFGenerator(model, tok)
    with pytest.raises(ValueError, match="temperature"):
        gen.generate(prompts, SamplingParams(temperature=-1))
    with pytest.raises(ValueError, match="top_p"):
        gen.generate(prompts, SamplingParams(top_p=0.0))
    with pytest.raises(ValueError, match="max_new_tokens"):
        gen.generate(prompts, SamplingParams(max_new_tokens=0))
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        gen.generate([prompts[0], []], SamplingParams())
    assert gen.generate([], SamplingParams()) == []


def test_chunked_batches_match_whole_batch_greedy(tiny, prompts):
    model, tok = tiny
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    whole = HFGenerator(model, tok).generate(prompts, params)
    chunked = HFGenerator(model, tok, max_batch_size=3).generate(prompts, params)
    assert [g.token_ids.tolist() for g in whole] == [g.token_ids.tolist() for g in chunked]


def test_shared_prompts_and_the_preallocated_cache_give_the_plain_loops_tokens(tiny, prompts):
    """A batch where prompts repeat (a task's rollouts start from one prompt), some rows stopping
    early and some constrained: prefilling each distinct prompt once and the in-place cache give,
    for one seed, the tokens, log-probs and restricted positions of the plain loop."""
    from gigpo.policy.constrain import ActionVocab

    model, tok = tiny
    batch = [prompts[i] for i in (1, 3, 1, 2, 1, 3, 0, 1)]
    vocab = ActionVocab(tok, open_tag=None)
    cons = [vocab.constraint(["go to desk 1", "look"]) if i % 3 == 2 else None for i in range(len(batch))]
    params = SamplingParams(temperature=1.0, max_new_tokens=20, seed=11)
    plain = HFGenerator(model, tok, share_prompts=False, preallocate=False)
    free = plain.generate(batch, params)
    stop = int(free[0].token_ids[4])  # row 0 stops after 5 tokens: the batch shrinks mid-decode
    plain.eos_ids.append(stop)
    for kw in (dict(share_prompts=True, preallocate=False), dict(share_prompts=False), {}):
        fast = HFGenerator(model, tok, **kw)
        fast.eos_ids.append(stop)
        for c in (None, cons):
            want, got = plain.generate(batch, params, constraints=c), fast.generate(batch, params, constraints=c)
            assert len(want[0].token_ids) <= 5 and want[0].finished
            for a, b in zip(want, got):
                np.testing.assert_array_equal(a.token_ids, b.token_ids)
                np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
                assert a.finished == b.finished
                assert [(k, ids.tolist()) for k, ids in a.allowed or []] == [
                    (k, ids.tolist()) for k, ids in b.allowed or []
                ]


def test_rows_of_one_shared_prompt_sample_apart_with_exact_log_probs(tiny, prompts):
    model, tok = tiny
    batch = [prompts[1]] * 6 + [prompts[2]] * 2
    gens = HFGenerator(model, tok).generate(batch, SamplingParams(temperature=1.0, max_new_tokens=12, seed=5))
    assert len({tuple(g.token_ids.tolist()) for g in gens[:6]}) > 1  # one prefill, independent draws
    for g, lp in zip(gens, recompute(model, tok, batch, gens)):
        np.testing.assert_allclose(g.logprobs, lp, atol=1e-4)
