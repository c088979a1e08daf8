"""Admissible-action decoding: the trie, the sampler under it, and log-probs that match it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gigpo.policy import HFGenerator, SamplingParams, load_policy, token_logprobs
from gigpo.policy.constrain import ActionVocab
from gigpo.policy.generate import default_eos_ids
from gigpo.train.sft import sft_loss

torch.set_num_threads(1)

ACTIONS = ["go to drawer 1", "go to drawer 10", "go to desk 1", "take mug 2 from desk 1", "look"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_policy("tiny", cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache"), device="cpu")


def _prompt(tok, text="Your task is to: put a mug in desk."):
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]


def test_positions_follow_the_trie_after_the_open_tag(tiny):
    _, tok = tiny
    eos = [tok.eos_token_id]
    c = ActionVocab(tok).constraint(ACTIONS)
    text = "<think>the mug is on the desk</think><action>go to drawer 1</action>"
    resp = list(tok(text, add_special_tokens=False)["input_ids"]) + eos
    pos = c.positions(resp, eos)
    action_at = resp.index(tok.convert_tokens_to_ids("<action>"))
    assert pos[0][0] == action_at + 1  # free text up to and including the open tag
    assert [k for k, _ in pos] == list(range(action_at + 1, len(resp)))
    first = {tok(a, add_special_tokens=False)["input_ids"][0] for a in ACTIONS}
    assert set(pos[0][1].tolist()) == first
    for k, ids in pos:
        assert resp[k] in ids.tolist()
    assert pos[-1][1].tolist() == eos  # after the close tag only EOS
    # "drawer 1" is a prefix of "drawer 10": after its "1" both the "0" and the close tag are allowed
    assert len(pos[-2][1]) == 2


def test_an_action_outside_the_list_leaves_the_trie(tiny):
    _, tok = tiny
    c = ActionVocab(tok).constraint(ACTIONS)
    resp = list(tok("<think>x</think><action>go to sofa 1</action>", add_special_tokens=False)["input_ids"])
    pos = c.positions(resp, [tok.eos_token_id])
    assert 0 < len(pos) < len(resp)  # restricted until "sofa" left the trie, free afterwards


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampler_stays_in_the_list_and_log_probs_match_a_masked_forward_pass(tiny, temperature):
    model, tok = tiny
    vocab = ActionVocab(tok, open_tag=None)  # restricted from the first token: a random model obeys too
    lists = [ACTIONS, ["look", "inventory"], None, ["open drawer 3", "go to shelf 12", "examine shelf 12"]]
    cons = [vocab.constraint(a) if a else None for a in lists]
    prompts = [_prompt(tok, t) for t in ["a", "b c", "d e f", "go to"]]
    gen = HFGenerator(model, tok)
    gens = gen.generate(prompts, SamplingParams(temperature=temperature, max_new_tokens=24, seed=5), constraints=cons)
    eos = gen.eos_ids
    for g, a, c in zip(gens, lists, cons):
        if a is None:
            assert not g.allowed
            continue
        assert g.finished and g.token_ids[-1] in eos
        text = tok.decode(g.token_ids[:-1])
        assert text in {x + "</action>" for x in a}
        want = c.positions(list(g.token_ids), eos)
        assert [k for k, _ in g.allowed] == [k for k, _ in want]
        assert all(set(x.tolist()) == set(y.tolist()) for (_, x), (_, y) in zip(g.allowed, want))
    with torch.no_grad():
        lp, _, _ = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=tok.pad_token_id,
            temperature=temperature,
            allowed=[g.allowed for g in gens],
        )
        free, _, _ = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=tok.pad_token_id,
            temperature=temperature,
        )
    for i, g in enumerate(gens):
        np.testing.assert_allclose(g.logprobs, lp[i, : len(g.token_ids)].numpy(), atol=1e-4)
        if g.allowed:  # renormalised over fewer ids: every restricted log-prob is higher
            assert (lp[i, : len(g.token_ids)] >= free[i, : len(g.token_ids)] - 1e-6).all()
            assert (lp[i, : len(g.token_ids)] > free[i, : len(g.token_ids)] + 1e-3).any()


def test_a_forced_token_has_log_prob_zero_and_no_entropy(tiny):
    model, tok = tiny
    p = [np.asarray(_prompt(tok))]
    r = [np.asarray(tok("look", add_special_tokens=False)["input_ids"] + [tok.eos_token_id])]
    allowed = [[(0, np.asarray([r[0][0]])), (1, np.asarray([r[0][1], 7, 9]))]]
    lp, ent, _ = token_logprobs(model, p, r, pad_token_id=tok.pad_token_id, with_entropy=True, allowed=allowed)
    assert float(lp[0, 0].detach()) == 0.0 and float(ent[0, 0].detach()) == 0.0
    assert torch.isfinite(ent).all() and 0 < float(ent[0, 1]) <= np.log(3) + 1e-5
    lp.sum().backward()  # gradients stay finite through the -inf logits
    assert all(torch.isfinite(q.grad).all() for q in model.parameters() if q.grad is not None)
    model.zero_grad(set_to_none=True)


def test_sft_loss_under_the_mask_is_at_most_the_free_loss(tiny):
    model, tok = tiny
    eos = [tok.eos_token_id]
    c = ActionVocab(tok).constraint(ACTIONS)
    texts = ["<think>a</think><action>look</action>", "<think>b</think><action>go to desk 1</action>"]
    R = [np.asarray(list(tok(t, add_special_tokens=False)["input_ids"]) + eos) for t in texts]
    P = [np.asarray(_prompt(tok))] * 2
    with torch.no_grad():
        free, n = sft_loss(model, P, R, pad_token_id=tok.pad_token_id)
        masked, n2 = sft_loss(
            model, P, R, pad_token_id=tok.pad_token_id, allowed=[c.positions(list(r), eos) for r in R]
        )
    assert n == n2 and float(masked) < float(free)


def test_default_eos_ids_close_a_constrained_response(tiny):
    model, tok = tiny
    assert tok.eos_token_id in default_eos_ids(model, tok)


@pytest.mark.slow
def test_constrained_alfworld_rollout_after_a_short_sft_acts_only_from_the_list(tmp_path_factory):
    """A brief masked SFT teaches `tiny` the format; the rollout then only emits admissible
    actions, the batch carries the masks, and the update's first ratio is exactly 1."""
    pytest.importorskip("alfworld")
    from gigpo.agent import Agent
    from gigpo.envs import make_tasks
    from gigpo.envs.manager import GroupedEnvs
    from gigpo.rollout import collect_expert_demos, rollout
    from gigpo.train.config import TrainConfig
    from gigpo.train.sft import sft_train
    from gigpo.learner.update import PolicyUpdater

    model, tok = load_policy("tiny", cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache"), device="cpu")
    agent = Agent("alfworld", tok, history_length=1, max_prompt_tokens=768, constrain_actions=True)
    kw = dict(task_types=["pick_and_place_simple"], max_receptacles=4, max_distractors=2)
    demos = collect_expert_demos(
        "alfworld", make_tasks("alfworld", "train", n=3, seed=1, **kw), tok, agent, max_steps=12, with_allowed=True
    )
    assert demos and all(len(d) == 3 and d[2] for d in demos)
    sft_train(model, demos, epochs=12, lr=3e-3, batch_rows=8, pad_token_id=tok.pad_token_id)
    tasks = make_tasks("alfworld", "train", n=2, seed=5, **kw)
    with GroupedEnvs("alfworld", group_size=2, max_steps=3) as envs:
        reset = envs.reset(tasks)
        admissible = [set(info["admissible_actions"]) for _, info in reset]
        batch = rollout(
            envs, tasks, HFGenerator(model, tok), tok, agent, SamplingParams(temperature=1.0, max_new_tokens=48, seed=0)
        )
    assert batch.allowed is not None and len(batch.allowed) == batch.num_rows
    tagged = [i for i in range(batch.num_rows) if "<action>" in batch.response_text[i]]
    assert len(tagged) >= batch.num_rows // 2, list(batch.response_text)  # the SFT taught the format
    first = [i for i in tagged if batch.step[i] == 0]
    assert first and all(batch.action[i] in admissible[batch.traj_id[i]] for i in first)
    assert all(batch.allowed[i] for i in tagged)
    # The sampler's log-probs are those of the masked distribution: the update's ratio starts at 1.
    up = PolicyUpdater(
        model,
        TrainConfig(lr=1e-4, mini_batch_rows=batch.num_rows, ppo_epochs=1),
        pad_token_id=tok.pad_token_id,
        temperature=1.0,
    )
    m = up.update(
        batch.prompt_ids,
        batch.response_ids,
        np.ones(batch.num_rows, np.float32),
        list(batch.logprobs),
        allowed=batch.allowed,
    )
    assert abs(m["approx_kl"]) < 1e-5 and m["clipfrac"] == 0.0


def test_forced_tail_is_the_rest_of_the_last_action_with_one_end_id(tiny):
    _, tok = tiny
    enc = ActionVocab(tok).encode
    close = enc("</action>")
    for end_id, want_end in [(None, None), (tok.eos_token_id, tok.eos_token_id)]:
        c = ActionVocab(tok, open_tag=None, end_id=end_id).constraint(ACTIONS)
        st = c.start()
        assert c.forced_tail(st, [0, 2]) is None  # five actions: a choice
        for t in enc("take mug 2 from desk 1")[:1]:  # the only action that starts so
            c.advance(st, t)
        tail = c.forced_tail(st, [0, 2])
        if want_end is None:  # two EOS ids may end it: the last token is a choice
            assert tail is None
            assert c.forced_tail(st, [7]) == list(enc("take mug 2 from desk 1")[1:] + close) + [7]
        else:
            assert tail == list(enc("take mug 2 from desk 1")[1:] + close) + [want_end]
            assert c.positions(list(enc("take mug 2 from desk 1") + close) + [want_end], [0, 2])[-1][1].tolist() == [
                want_end
            ]
    c = ActionVocab(tok, open_tag=None, end_id=tok.eos_token_id).constraint(["go to drawer 1", "go to drawer 10"])
    st = c.start()
    for t in enc("go to drawer 1"):
        c.advance(st, t)
    assert c.forced_tail(st, [0]) is None  # "1" may close or go on to "10"
    assert c.forced_tail(c.start(), [0]) is None and c.start().mode == "trie"


def _row_steps(model):
    """A counter of the rows the model runs (each call's batch size), and its hook."""
    n = [0]
    h = model.register_forward_pre_hook(
        lambda _, args, kw: n.__setitem__(0, n[0] + (kw.get("input_ids") if "input_ids" in kw else args[0]).shape[0]),
        with_kwargs=True,
    )
    return n, h


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_jump_forward_writes_the_forced_tail_without_the_model(tiny, temperature):
    model, tok = tiny
    vocab = ActionVocab(tok, open_tag=None, end_id=tok.eos_token_id)
    lists = [ACTIONS, ["look", "inventory"], None, ["open drawer 3", "go to shelf 12", "examine shelf 12"]] * 2
    prompts = [_prompt(tok, t) for t in ["a", "b c", "d e f", "go to", "g", "h i", "j", "k l"]]
    params = SamplingParams(temperature=temperature, max_new_tokens=24, seed=3)
    out, calls = {}, {}
    for jump in (False, True):
        cons = [vocab.constraint(a) if a else None for a in lists]
        n, h = _row_steps(model)
        try:
            out[jump] = HFGenerator(model, tok, jump_forward=jump).generate(prompts, params, constraints=cons)
        finally:
            h.remove()
        calls[jump] = n[0]
    gens, eos = out[True], default_eos_ids(model, tok)
    for g, a in zip(gens, lists):
        if a is None:
            continue
        assert g.finished and int(g.token_ids[-1]) == tok.eos_token_id
        assert tok.decode(g.token_ids[:-1]) in {x + "</action>" for x in a}
        want = vocab.constraint(a).positions(list(g.token_ids), eos)
        assert [k for k, _ in g.allowed] == [k for k, _ in want]
        assert all(x.tolist() == y.tolist() for (_, x), (_, y) in zip(g.allowed, want))
    if temperature == 0:  # greedy: the same responses, log-probs and masks, in fewer model calls
        for g, h in zip(gens, out[False]):
            assert g.token_ids.tolist() == h.token_ids.tolist() and g.finished == h.finished
            np.testing.assert_allclose(g.logprobs, h.logprobs, atol=1e-5)
            assert [k for k, _ in g.allowed or []] == [k for k, _ in h.allowed or []]
    assert calls[True] < calls[False]
    with torch.no_grad():
        lp, _, _ = token_logprobs(
            model,
            [np.asarray(p) for p in prompts],
            [g.token_ids for g in gens],
            pad_token_id=tok.pad_token_id,
            temperature=temperature or 1.0,
            allowed=[g.allowed for g in gens],
        )
    for i, g in enumerate(gens):  # the skipped tokens' log-prob 0 is the masked distribution's
        if temperature:
            np.testing.assert_allclose(g.logprobs, lp[i, : len(g.token_ids)].numpy(), atol=1e-4)
        if g.allowed:
            forced = [k for k, ids in g.allowed if len(ids) == 1]
            assert forced and (g.logprobs[forced] == 0).all() and (lp[i, forced] == 0).all()


def test_jump_forward_cut_by_the_token_budget_ends_unfinished(tiny):
    model, tok = tiny
    vocab = ActionVocab(tok, open_tag=None, end_id=tok.eos_token_id)
    action = "take mug 2 from desk 1"
    n = len(vocab.encode(action)) + 1  # the close tag and EOS do not fit
    g = HFGenerator(model, tok).generate(
        [_prompt(tok)], SamplingParams(temperature=1.0, max_new_tokens=n, seed=0), [vocab.constraint([action])]
    )[0]
    assert not g.finished and g.token_ids.tolist() == list(vocab.encode(action) + vocab.close_ids)[:n]
    assert [k for k, _ in g.allowed] == list(range(n)) and (g.logprobs == 0).all()
