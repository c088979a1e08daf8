"""``gigpo.agent.prompting``: ReAct's thought/action parse, few-shot example selection and
rendering, the preamble's place and cut order in ``Agent.build_prompt``, Reflexion's reflection
prompt and parse. Prompts are measured with ``tiny``'s real tokenizer."""

from __future__ import annotations

import pytest

from gigpo.agent import Agent
from gigpo.agent.prompting import (
    FewShotExample,
    build_reflection_prompt,
    parse_react,
    parse_reflection,
    react_preamble,
    reflection_part,
    render_example,
    select_examples,
)
from gigpo.envs.spec import get_family
from gigpo.policy import load_policy


@pytest.fixture(scope="module")
def tok():
    return load_policy("tiny")[1]


ALF = get_family("alfworld")


def _ex(task: str, task_type: str, n: int = 2) -> FewShotExample:
    steps = tuple(
        (f"obs {task_type} {j}", f"<think>thought {j}</think><action>go to shelf {j}</action>") for j in range(n)
    )
    return FewShotExample(task, task_type, steps)


def test_parse_react_splits_thought_and_action():
    r = parse_react(ALF, "<think>The mug is in the cabinet.</think><action>Open Cabinet 1</action>")
    assert r.thought == "The mug is in the cabinet."
    assert r.action.action == "open cabinet 1" and r.action.valid
    r = parse_react(get_family("search"), "<think>need the city</think><search>where was X born</search>")
    assert r.thought == "need the city" and r.action.kind == "search" and r.action.valid
    # No thought: the action still parses, but the step is invalid, as in training.
    r = parse_react(ALF, "<action>look</action>")
    assert r.thought == "" and r.action.action == "look" and not r.action.valid


def test_examples_of_the_task_type_come_first_and_sit_next_to_the_task():
    pool = [_ex("put a mug in sink", "pick_and_place"), _ex("heat an egg", "heat"), _ex("cool a pan", "cool")]
    assert [e.task_type for e in select_examples(pool, "cool", 2)] == ["cool", "pick_and_place"]
    assert select_examples(pool, "cool", 0) == []
    parts = react_preamble(ALF, pool, "heat", 2)
    # Least important first: the same-type example is the last part, right before the task.
    assert "heat an egg" in parts[1] and "put a mug in sink" in parts[0]
    text = render_example(ALF, pool[1])
    assert "Your task is to: heat an egg" in text
    assert "Observation 1: obs heat 0\nResponse 1: <think>thought 0</think>" in text


def test_preamble_is_shown_before_the_task_and_dropped_first(tok):
    agent = Agent("alfworld", tok, history_length=2, max_prompt_tokens=4096)
    pre = [render_example(ALF, _ex("far task", "a", 6)), render_example(ALF, _ex("near task", "b", 6))]
    hist = [("You see a shelf.", "go to shelf 1"), ("On the shelf 1, you see a mug.", "take mug 1 from shelf 1")]
    p = agent.build_prompt("put a mug in sink", "You hold the mug.", hist, step=2, preamble=pre)
    msg = p.message
    assert (
        msg.index(ALF.system_prompt) < msg.index("far task") < msg.index("near task") < msg.index("put a mug in sink")
    )
    assert p.preamble_dropped == 0 and p.history_dropped == 0
    # A limit that holds one example: the first part goes, history stays.
    full = len(p.ids)
    one = len(agent.build_prompt("put a mug in sink", "You hold the mug.", hist, step=2, preamble=pre[1:]).ids)
    agent.max_prompt_tokens = (full + one) // 2
    p = agent.build_prompt("put a mug in sink", "You hold the mug.", hist, step=2, preamble=pre)
    assert p.preamble_dropped == 1 and p.history_dropped == 0
    assert "near task" in p.message and "far task" not in p.message and len(p.ids) <= agent.max_prompt_tokens
    # The chat-wrapped text is what the ids hold; the message is the user content alone.
    assert p.message in p.text and p.text != p.message


def test_reflection_prompt_keeps_the_latest_steps_within_the_limit(tok):
    agent = Agent("alfworld", tok, max_prompt_tokens=4096)
    steps = [(f"You are at place {j}.", f"<think>try {j}</think><action>go to shelf {j}</action>") for j in range(1, 9)]
    p = build_reflection_prompt(agent, "put a mug in sink", steps, "Nothing happens.", "step limit reached.")
    assert p.history_dropped == 0 and "Observation 1: You are at place 1." in p.message
    assert "Final observation: Nothing happens." in p.message and "<reflection>" in p.message
    agent.max_prompt_tokens = len(p.ids) - 40
    q = build_reflection_prompt(agent, "put a mug in sink", steps, "Nothing happens.", "step limit reached.")
    assert q.history_dropped >= 1 and len(q.ids) <= agent.max_prompt_tokens and not q.hard_truncated
    assert f"({q.history_dropped} earlier step(s) left out)" in q.message
    assert "go to shelf 1<" not in q.message and "go to shelf 8" in q.message  # the oldest go first


def test_parse_reflection():
    assert parse_reflection("<think>hm</think><reflection> I looped.\n Go to the sink first. </reflection>") == (
        "I looped. Go to the sink first."
    )
    assert parse_reflection("<reflection>cut off at max tokens") == "cut off at max tokens"
    assert parse_reflection("<think>only thinking</think> plain plan") == "plain plan"
    assert parse_reflection("   ") == "(no reflection written)"
    assert reflection_part(2, "Go left.") == "Your reflection after failed attempt 2 at this task: Go left."
