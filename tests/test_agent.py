"""Agent: parsing tables (docs/algorithm.md#action-parsing), prompt contents, history K, overflow
handling, expert text."""

from __future__ import annotations

import pytest
from chatml_tokenizer import chatml_bpe

from gigpo.agent import Agent, format_expert_response, parse_action, render_prompt


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [
        "You are in the middle of a room. Looking quickly around you, you see a cabinet 1.",
        "go to countertop 1",
        "take apple 1 from countertop 1",
        "<think> </think> <action> </action>",
    ] * 20
    return chatml_bpe(corpus, vocab_size=400)


# --- parsing: ALFWorld / WebShop -------------------------------------------------------------
@pytest.mark.parametrize(
    "text,action,valid",
    [
        ("<think>look</think><action>go to countertop 1</action>", "go to countertop 1", True),
        ("<think>x</think><action>  Go To Countertop 1 </action>", "go to countertop 1", True),  # lower + strip
        ("<action>go to countertop 1</action>", "go to countertop 1", False),  # no think
        ("<think>x<action>go to countertop 1</action>", "go to countertop 1", False),  # no </think>
        ("<think>去</think><action>open drawer 1</action>", "open drawer 1", False),  # CJK
        ("<think>ok</think><action>a</action><action>b</action>", "a", True),  # first block
        ("<think>ok</think></action>x<action>", "", True),  # reference slicing quirk
        ("<THINK>ok</THINK><ACTION>look</ACTION>", "look", False),  # think check is on the raw text
    ],
)
def test_alfworld_parse_table(text, action, valid):
    p = parse_action("alfworld", text)
    assert (p.action, p.valid) == (action, valid)


def test_missing_action_tags_send_lowercased_tail_30_alfworld_20_webshop():
    text = "<think>Hmm</think> I Think We Should Go To The Countertop Number One Now"
    a = parse_action("alfworld", text)
    w = parse_action("webshop", text)
    assert not a.valid and not w.valid
    assert a.action == text.lower()[-30:] and len(a.action) == 30
    assert w.action == text.lower()[-20:] and len(w.action) == 20
    assert parse_action("alfworld", "short").action == "short"


def test_webshop_valid_click():
    p = parse_action("webshop", "<think>buy</think><action>click[Buy Now]</action>")
    assert p.valid and p.action == "click[buy now]"


# --- parsing: search --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,action,valid,kind",
    [
        ("<think>x</think><search> capital of France </search>", "<search>capital of France</search>", True, "search"),
        ("<think>x</think><answer>Paris</answer>", "<answer>Paris</answer>", True, "answer"),
        ("<SEARCH>q</SEARCH>", "<search>q</search>", True, "search"),  # tags case-insensitive, no think needed
        ("<search>q</search><answer>Paris</answer>", "<search>q</search>", False, "search"),  # both kinds
        ("<answer>Paris</answer><search>q</search>", "<search>q</search>", False, "search"),  # search first
        ("<search>a</search><search>b</search>", "<search>a</search>", False, "search"),  # repeated
        ("<answer>a</answer> <answer>b</answer>", "<answer>a</answer>", False, "answer"),
        ("I think it is Paris", "I think it is Paris", False, "none"),  # raw text when neither
    ],
)
def test_search_parse_table(text, action, valid, kind):
    p = parse_action("search", text)
    assert (p.action, p.valid, p.kind) == (action, valid, kind)


def test_unknown_family_is_a_clear_error(tokenizer):
    with pytest.raises(ValueError, match="unknown env family 'chess'"):
        Agent("chess", tokenizer)
    with pytest.raises(ValueError, match="no action parser"):
        parse_action("chess", "x")


# --- prompts ----------------------------------------------------------------------------------
def test_prompt_holds_task_last_k_history_obs_and_admissible(tokenizer):
    agent = Agent("alfworld", tokenizer, history_length=2)
    hist = [(f"obs number {i}", f"action number {i}") for i in range(5)]
    p = agent.build_prompt(
        "put an apple in the fridge",
        "you arrive at fridge 1.",
        hist,
        step=5,
        admissible_actions=["open fridge 1", "go to sinkbasin 1", "help"],
    )
    t = p.text
    assert "put an apple in the fridge" in t and "you arrive at fridge 1." in t
    assert "obs number 3" in t and "action number 4" in t  # last K=2
    assert "obs number 2" not in t and "action number 0" not in t
    assert "'open fridge 1'" in t and "'go to sinkbasin 1'" in t and "'help'" not in t
    assert "<think>" in t and "<action>" in t
    assert t.startswith("<|im_start|>user\n") and t.endswith("<|im_start|>assistant\n")  # chat template
    assert p.ids == tokenizer(t, add_special_tokens=False)["input_ids"]
    assert p.history_dropped == 0 and not p.observation_truncated


def test_search_prompt_defaults_to_k4_and_shows_information(tokenizer):
    agent = Agent("search", tokenizer)
    assert agent.history_length == 4
    hist = [("who wrote x?", "<search>x author</search>")] + [
        (f"<information>doc {i}</information>", f"<search>q{i}</search>") for i in range(1, 5)
    ]
    p = agent.build_prompt("who wrote x?", "<information>doc 5</information>", hist, step=5)
    assert "<search>x author</search>" not in p.text and "<search>q1</search>" in p.text
    assert "<information>doc 5</information>" in p.text and "<answer>" in p.text
    p2 = agent.build_prompt("who wrote x?", "<information>d</information>", hist[:1], step=1)
    assert p2.text.count("who wrote x?") == 1  # the step-0 observation (the question) is not repeated


def test_overflow_drops_oldest_history_first_and_counts(tokenizer):
    agent = Agent("alfworld", tokenizer, history_length=2, max_prompt_tokens=10_000)
    hist = [("a long observation " * 10, "go to x"), ("recent obs", "go to y")]
    full = agent.build_prompt("task", "now", hist, step=2)
    no_old = agent.build_prompt("task", "now", hist[1:], step=2)
    agent.max_prompt_tokens = len(full.ids) - 1  # one token too short: drop only the oldest
    p = agent.build_prompt("task", "now", hist, step=2)
    assert p.ids == no_old.ids and p.history_dropped == 1 and not p.observation_truncated
    assert "recent obs" in p.text


def test_overflow_then_truncates_observation_from_the_left_keeping_task(tokenizer):
    agent = Agent("alfworld", tokenizer, history_length=2, max_prompt_tokens=10_000)
    obs = " ".join(f"item{i}" for i in range(300)) + " THE END"
    base = agent.build_prompt("my task text", "", [("h", "go to x")], step=1)
    agent.max_prompt_tokens = len(base.ids) + 40
    p = agent.build_prompt("my task text", obs, [("h", "go to x")], step=1)
    assert len(p.ids) <= agent.max_prompt_tokens
    assert p.history_dropped == 1 and p.observation_truncated and not p.hard_truncated
    assert "my task text" in p.text and "THE END" in p.text and "item0 " not in p.text


def test_overflow_hard_truncation_never_crashes_and_counts(tokenizer):
    agent = Agent("webshop", tokenizer, max_prompt_tokens=32)
    p = agent.build_prompt("a very long task " * 50, "obs", [("o", "a")], step=1)
    assert len(p.ids) == 32 and p.hard_truncated and p.observation_truncated and p.history_dropped == 1
    assert p.ids[-3:] == agent.build_prompt("t", "o").ids[-3:]  # generation prompt kept at the end


@pytest.mark.parametrize("family", ["alfworld", "webshop", "search"])
def test_repeat_task_ends_the_prompt_with_the_task(family):
    plain = render_prompt(family, "find a mug", "obs", admissible_actions=["look"])
    again = render_prompt(family, "find a mug", "obs", admissible_actions=["look"], repeat_task=True)
    assert again.startswith(plain) and again.endswith(", again: find a mug") and "again" not in plain


def test_observation_prompt_form_is_the_sokoban_grid_alone_and_refused_elsewhere(tokenizer):
    from gigpo.agent.prompts import clean_text
    from gigpo.envs.sokoban import INSTRUCTION, make_env, make_tasks

    grid, _ = make_env().reset(make_tasks("train", n=1, seed=0)[0])
    assert render_prompt("sokoban", INSTRUCTION, grid, form="observation") == clean_text(grid)
    full = Agent("sokoban", tokenizer, history_length=0).build_prompt(INSTRUCTION, grid, admissible_actions=["up"])
    bare = Agent("sokoban", tokenizer, history_length=0, prompt_form="observation").build_prompt(
        INSTRUCTION, grid, admissible_actions=["up"]
    )
    assert INSTRUCTION not in bare.text and INSTRUCTION in full.text and len(bare.ids) < len(full.ids) / 2
    with pytest.raises(ValueError, match="observation is not its whole state"):
        render_prompt("alfworld", "put a mug in sink", "You arrive at sink 1.", form="observation")
    with pytest.raises(ValueError, match=r"history_length 0 \(got 2\)"):
        Agent("sokoban", tokenizer, history_length=2, prompt_form="observation")
    with pytest.raises(ValueError, match="alfworld.*False"):
        Agent("alfworld", tokenizer, history_length=0, prompt_form="observation")


def test_render_prompt_omits_history_block_at_step_zero():
    t = render_prompt("webshop", "buy shoes", "WebShop [SEP] Search", admissible_actions=["search[<query>]"])
    assert "step(s) so far" not in t and "'search[<query>]'" in t


# --- expert responses ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "family,action",
    [
        ("alfworld", "go to countertop 1"),
        ("alfworld", "take apple 1 from countertop 1"),
        ("alfworld", "move apple 1 to fridge 1"),
        ("alfworld", "heat egg 2 with microwave 1"),
        ("alfworld", "Open Drawer 3"),
        ("webshop", "search[red running shoes]"),
        ("webshop", "click[buy now]"),
        ("webshop", "click[b0012345]"),
    ],
)
def test_expert_response_parses_back_to_a_valid_action(family, action):
    text = format_expert_response(family, action)
    p = parse_action(family, text)
    assert p.valid and p.action == action.lower()
    assert text.startswith("<think>") and len(text) < 200


@pytest.mark.parametrize(
    "family,action",
    [
        ("alfworld", "Take Apple 1 from countertop 1"),
        ("webshop", "click[buy now]"),
        ("search", "<think>I need x</think><search>author of x</search>"),
        ("search", "<answer>paris</answer>"),
    ],
)
def test_empty_think_responses_stay_valid_and_keep_the_action(family, action):
    text = format_expert_response(family, action, think="empty")
    assert text.startswith("<think></think>") and text.count("<think>") == 1
    p, ref = parse_action(family, text), parse_action(family, format_expert_response(family, action))
    assert p.valid and p.action == ref.action
    with pytest.raises(ValueError, match="think must be one of"):
        format_expert_response(family, action, think="short")


def test_search_expert_response_keeps_tags_and_adds_think():
    t = format_expert_response("search", "<search>author of x</search>")
    p = parse_action("search", t)
    assert p.valid and p.action == "<search>author of x</search>" and "<think>" in t
    assert (
        format_expert_response("search", "<think>a</think><answer>b</answer>") == "<think>a</think><answer>b</answer>"
    )
    with pytest.raises(ValueError, match="<search> or <answer>"):
        format_expert_response("search", "paris")
