"""Action parsing ("projection") and validity per env family, exactly as the reference
(docs/algorithm.md#action-parsing).

ALFWorld / WebShop (verl-agent ``alfworld_projection`` / ``webshop_projection``):
  * the response is lower-cased;
  * the action is the text between the first ``<action>`` and the first ``</action>``, stripped;
  * valid needs both action tags, both ``<think>`` and ``</think>``, and no CJK character
    (U+4E00..U+9FFF);
  * without the action tags the last 30 (ALFWorld) / 20 (WebShop) characters of the lower-cased
    response are sent to the env instead, and the step is invalid;
  * the action is NOT checked against the admissible list (an inadmissible action is valid; the
    env answers "Nothing happens.").

Search (verl-agent ``search_projection``): the first ``<search>...</search>`` block, else the first
``<answer>...</answer>`` block (tags case-insensitive). Invalid if neither is present, if both tag
kinds appear anywhere in the response, or if a tag kind appears more than once. The env receives the
normalised ``<search>query</search>`` / ``<answer>text</answer>``, or the raw response when no block
was found. Invalid actions are still sent to the env; the trainer applies the penalty.

A family's projection is its ``FamilySpec.action_syntax`` (``action``, with ``fallback_tail``, or
``search``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Iterator

from gigpo.envs.spec import families, get_family

_CJK = re.compile(r"[\u4e00-\u9fff]")


class _FallbackTail(Mapping):
    """``family -> FamilySpec.fallback_tail`` for the families with ``action`` syntax: characters of
    the response tail sent to the env when the action tags are missing (docs/algorithm.md#action-parsing)."""

    def __getitem__(self, family: str) -> int:
        spec = families().get(family)
        if spec is None or spec.action_syntax != "action":
            raise KeyError(family)
        return spec.fallback_tail

    def __iter__(self) -> Iterator[str]:
        return iter([n for n, s in families().items() if s.action_syntax == "action"])

    def __len__(self) -> int:
        return sum(1 for _ in self)


FALLBACK_TAIL: Mapping[str, int] = _FallbackTail()

_SEARCH_TAG = re.compile(r"<search>", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>", re.IGNORECASE)
_SEARCH_END = re.compile(r"</search>", re.IGNORECASE)
_ANSWER_END = re.compile(r"</answer>", re.IGNORECASE)


def first_block(text: str, open_tag: re.Pattern, close_tag: re.Pattern) -> str | None:
    """What ``re.search(r"<tag>(.*?)</tag>", text, re.I | re.S)`` finds, in linear time.

    The lazy regex retries from every opening tag up to the end of the text, so 100 KB of
    unclosed tags took seconds. The leftmost match starts at the first opening tag (if any
    closing tag follows it, that one is the match; if none does, none follows a later one either).
    """
    m = open_tag.search(text)
    if m is None:
        return None
    end = close_tag.search(text, m.end())
    return None if end is None else text[m.end() : end.start()]


@dataclass(frozen=True)
class ParsedAction:
    """The parse of one response.

    action: the text sent to the env.
    valid:  the response followed the format (docs/algorithm.md#action-parsing); invalid ones get the penalty.
    kind:   ``action`` (ALFWorld/WebShop tags found), ``search`` / ``answer`` (search family),
            or ``none`` (no tags found; ``action`` is the fallback text).
    """

    action: str
    valid: bool
    kind: str


def parse_tagged_action(text: str, tail_chars: int) -> ParsedAction:
    """ALFWorld/WebShop projection; ``tail_chars`` is the fallback tail length (30 / 20)."""
    lowered = text.lower()
    start, end = lowered.find("<action>"), lowered.find("</action>")
    if start == -1 or end == -1:
        return ParsedAction(lowered[-tail_chars:] if tail_chars > 0 else "", False, "none")
    # Same slicing as the reference: an </action> before <action> yields "" (still "valid").
    action = lowered[start + len("<action>") : end].strip()
    valid = "<think>" in text and "</think>" in text and not _CJK.search(text)
    return ParsedAction(action, valid, "action")


def parse_search_action(text: str) -> ParsedAction:
    """Search projection: first ``<search>`` block, else first ``<answer>`` block."""
    # The reference first cuts the response after the first closing tag, search before answer.
    trimmed = text
    if "</search>" in text:
        trimmed = text.split("</search>", 1)[0] + "</search>"
    elif "</answer>" in text:
        trimmed = text.split("</answer>", 1)[0] + "</answer>"
    if (query := first_block(trimmed, _SEARCH_TAG, _SEARCH_END)) is not None:
        action, kind = f"<search>{query.strip()}</search>", "search"
    elif (answer := first_block(trimmed, _ANSWER_TAG, _ANSWER_END)) is not None:
        action, kind = f"<answer>{answer.strip()}</answer>", "answer"
    else:
        return ParsedAction(text, False, "none")
    n_search, n_answer = len(_SEARCH_TAG.findall(text)), len(_ANSWER_TAG.findall(text))
    valid = not (n_search and n_answer) and n_search <= 1 and n_answer <= 1
    return ParsedAction(action, valid, kind)


def parse_action(family, text: str) -> ParsedAction:
    """Parse a decoded response of env ``family`` (a name or its ``FamilySpec``) by the spec's
    ``action_syntax``."""
    if isinstance(family, str):
        try:
            spec = get_family(family)
        except ValueError as e:
            raise ValueError(f"no action parser for env family {family!r}: {e}") from None
    else:
        spec = family
    if spec.action_syntax == "search":
        return parse_search_action(text)
    return parse_tagged_action(text, spec.fallback_tail)
