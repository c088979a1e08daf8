"""Search-tag parsing is linear-time and finds what the lazy regexes found."""

from __future__ import annotations

import random
import re
import time

import pytest

from gigpo.agent import parse_action
from gigpo.agent.parsing import ParsedAction
from gigpo.envs.search import parse_action as env_parse_action

_S = re.compile(r"<search>(.*?)</search>", re.IGNORECASE | re.DOTALL)
_A = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)


def _reference_agent(text: str) -> ParsedAction:
    """The regex projection as it was (quadratic on unclosed tags)."""
    trimmed = text
    if "</search>" in text:
        trimmed = text.split("</search>", 1)[0] + "</search>"
    elif "</answer>" in text:
        trimmed = text.split("</answer>", 1)[0] + "</answer>"
    if m := _S.search(trimmed):
        action, kind = f"<search>{m.group(1).strip()}</search>", "search"
    elif m := _A.search(trimmed):
        action, kind = f"<answer>{m.group(1).strip()}</answer>", "answer"
    else:
        return ParsedAction(text, False, "none")
    ns, na = len(re.findall("<search>", text, re.I)), len(re.findall("<answer>", text, re.I))
    return ParsedAction(action, not (ns and na) and ns <= 1 and na <= 1, kind)


def _reference_env(text: str) -> tuple[str, str]:
    if m := _S.search(text):
        return "search", m.group(1).strip()
    if m := _A.search(text):
        return "answer", m.group(1).strip()
    return "invalid", ""


_PIECES = [
    "<search>",
    "</search>",
    "<answer>",
    "</answer>",
    "<SEARCH>",
    "</Search>",
    "<Answer>",
    "</ANSWER>",
    "<think>",
    "</think>",
    " who is X ",
    "Vell",
    "\n",
    " ",
    "<searc",
    "h>",
    "ſ",
    "<ſearch>",
    "</ſearch>",
]


def _random_texts(n: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(n):
        yield "".join(rng.choice(_PIECES) for _ in range(rng.randint(0, 12)))


@pytest.mark.parametrize(
    "text",
    [
        "<think>hm</think>\n<search> who is X </search>",
        "<ANSWER>Vell</Answer>",
        "<answer>a</answer><search>q</search>",
        "<search>unclosed <answer>b</answer>",
        "no tags at all",
        "<search>q",
        "</search><search>q</search>",
        "<search>a</search><search>b</search>",
        "<search>\n multi\nline </search>",
        "",
    ],
)
def test_same_parse_as_the_regexes_on_normal_inputs(text):
    assert parse_action("search", text) == _reference_agent(text)
    assert env_parse_action(text) == _reference_env(text)


def test_same_parse_as_the_regexes_on_random_tag_soup():
    for text in _random_texts(3000):
        assert parse_action("search", text) == _reference_agent(text), text
        assert env_parse_action(text) == _reference_env(text), text


@pytest.mark.parametrize(
    "text",
    [
        "<search>" * 12_500,
        "</search>" + "<search>" * 12_500,
        "<answer>" * 12_500,
        "</answer>" + "<answer>" * 12_500,
        "<search><answer>" * 6_250,
        "<SeArCh>x" * 11_000,
    ],
)
def test_100_kb_of_tags_parses_in_linear_time(text):
    assert len(text) >= 99_000
    t0 = time.perf_counter()
    agent, env = parse_action("search", text), env_parse_action(text)
    assert time.perf_counter() - t0 < 0.5
    assert agent.valid is False and env[0] == "invalid"
