"""A lone surrogate in user data (a corpus document, an observation, a task) gives a prompt, not an
exception: it becomes U+FFFD and the rest of the text is kept."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from gigpo.agent import Agent
from gigpo.agent.prompts import clean_text
from gigpo.envs import Task, make_env
from gigpo.envs.search import BM25Retriever
from gigpo.policy.tiny import tiny_path
from gigpo.rollout.demos import _demo_row


@pytest.fixture(scope="module")
def tiny_tok(tmp_path_factory):
    # Same cache root as the policy tests: the first one builds the tiny model, the others reuse it.
    return AutoTokenizer.from_pretrained(tiny_path(cache_dir=str(tmp_path_factory.getbasetemp() / "gigpo-cache")))


def test_clean_text_replaces_lone_surrogates_and_joins_pairs():
    assert clean_text("plain ✓ 東京") == "plain ✓ 東京"
    assert clean_text("a\ud800b\udfffc") == "a\ufffdb\ufffdc"
    assert clean_text("smile \ud83d\ude00") == "smile 😀"


@pytest.mark.parametrize("family", ["alfworld", "webshop", "search"])
def test_lone_surrogates_in_task_observation_history_and_actions_give_a_prompt(tiny_tok, family):
    agent = Agent(family, tiny_tok, max_prompt_tokens=1024)
    p = agent.build_prompt(
        "put a clean \ud800 apple in fridge",
        "You see a cabinet \udfff 1 and a drawer 2.",
        [("You arrive at \ud800 countertop 1.", "<think>x</think><action>go \udc80 to</action>")],
        step=1,
        admissible_actions=["go to cabinet 1", "take \ud800 1"],
    )
    text = tiny_tok.decode(p.ids)
    assert "\ufffd" in p.text and "\ud800" not in p.text and text == p.text
    for kept in ("apple in fridge", "cabinet", "drawer 2", "countertop 1"):
        assert kept in text


def test_lone_surrogate_in_a_corpus_document_reaches_the_prompt_as_a_replacement(tiny_tok):
    docs = [
        {"id": "0", "contents": '"Quorvath Pellin"\nQuorvath Pellin \ud800 is a glassmaker born in Brisk Hollow.'},
        {"id": "1", "contents": '"Tamsor"\nTamsor is a republic whose capital is Vell.'},
    ]
    env = make_env("search", retriever=BM25Retriever(docs))
    task = Task(
        "search",
        "t0",
        "train",
        "single_hop",
        {"question": "Where was Quorvath Pellin born?", "golden_answers": ["Brisk \udfff Hollow"]},
    )
    q, _ = env.reset(task)
    obs, _, _, _ = env.step("<search>Quorvath Pellin glassmaker</search>")
    assert "\ud800" in obs  # the env passes the document through untouched
    agent = Agent("search", tiny_tok, max_prompt_tokens=1024)
    p = agent.build_prompt(q, obs, [(q, "<search>Quorvath Pellin glassmaker</search>")], step=1)
    assert "born in Brisk Hollow" in p.text and "Pellin \ufffd is a glassmaker" in tiny_tok.decode(p.ids)
    # The expert's SFT row for an answer holding a surrogate tokenizes too.
    prompt_ids, resp_ids = _demo_row(p, "<answer>Brisk \udfff Hollow</answer>", tiny_tok, agent, None, False)
    assert len(prompt_ids) == len(p.ids) and "Brisk \ufffd Hollow" in tiny_tok.decode(resp_ids)
