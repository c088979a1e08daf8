"""Prompt templates per env family (in the spirit of verl-agent's ``prompts/<env>.py``).

A prompt is one user message: the task, the last K (observation, action) pairs, the current
observation, the admissible actions where the family has them, and the format instruction
(reason inside ``<think>``, act inside ``<action>``; search: ``<search>`` / ``<answer>``).
``render_prompt`` returns that message text; ``gigpo.agent.Agent`` puts it through the
tokenizer's chat template and handles context overflow.
"""

from __future__ import annotations

from typing import Sequence

def clean_text(text: str) -> str:
    """``text`` as a tokenizer can take it: surrogate pairs joined, lone surrogates (``\\ud800``,
    from a corpus or an env observation decoded with ``surrogateescape``) replaced by U+FFFD.

    Tokenizers (and UTF-8 files) refuse a lone surrogate; one stray character in user data must
    not stop prompt building.
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


# Default history length K per family (verl-agent ``env.history_length``, GIGPO_SPEC s.7).
DEFAULT_HISTORY = {"alfworld": 2, "webshop": 2, "search": 4}

_INTRO = {
    "alfworld": "You are an expert agent acting in the ALFRED household environment (ALFWorld).",
    "webshop": "You are an expert shopping agent acting in the WebShop online store.",
    "search": "You are an expert agent answering a question step by step with a search engine.",
}

_FORMAT = {
    "alfworld": (
        "Now take one action. First reason step by step about the situation inside <think> </think>. "
        "Then give exactly one admissible action inside <action> </action>."
    ),
    "webshop": (
        "Now take one action. First reason step by step about which admissible action best serves "
        "the shopping goal, inside <think> </think>. Then give exactly one admissible action inside "
        "<action> </action>."
    ),
    "search": (
        "Now respond for this step. First reason inside <think> </think>. Then do only one of: "
        "(1) if you lack knowledge, search with <search> your query </search>; the results come back "
        "inside <information> </information>; "
        "(2) if you can answer, give the short final answer inside <answer> </answer>, "
        "for example <answer>Beijing</answer>."
    ),
}


def _render_history(family: str, history: Sequence[tuple[str, str]], first_step: int, task: str) -> str:
    lines = []
    for j, (obs, act) in enumerate(history, start=first_step + 1):
        if family == "search":
            # The step-0 observation is the question itself, already shown above.
            shown = obs if obs and obs != task else ""
            lines.append(f"Step {j}: {shown}\nYour response: {act}" if shown else f"Step {j}: {act}")
        else:
            lines.append(f"[Observation {j}: '{obs}', Action {j}: '{act}']")
    return "\n".join(lines)


def render_prompt(
    family: str,
    task: str,
    observation: str,
    *,
    history: Sequence[tuple[str, str]] = (),
    step: int = 0,
    admissible_actions: Sequence[str] | None = None,
    repeat_task: bool = False,
) -> str:
    """The user-message text of one step's prompt.

    Args:
        family: env family (``alfworld``, ``webshop``, ``search``).
        task: the task text (``info["instruction"]`` at reset).
        observation: the current raw observation.
        history: the (observation, action) pairs to show, oldest first (already cut to K).
        step: steps taken so far in this trajectory (0 at reset).
        admissible_actions: listed when given and non-empty (ALFWorld's ``help`` is left out,
            as verl-agent does).
        repeat_task: end the message with the task once more (``Your task, again: ...``), a few
            tokens before the response. An option for small models built from scratch, whose
            attention does not yet reach back hundreds of tokens to the task line; not in the
            reference prompts.
    """
    if family not in _INTRO:
        raise ValueError(f"no prompt template for env family {family!r}; known: {sorted(_INTRO)}")
    label = "Question" if family == "search" else "Your task is to"
    parts = [_INTRO[family], f"{label}: {task}"]
    if history:
        first = step - len(history)
        what = "searches and results" if family == "search" else "observations and the actions you took"
        parts.append(
            f"You have taken {step} step(s) so far. The most recent {len(history)} {what}:\n"
            + _render_history(family, history, first, task)
        )
    if family == "search":
        if step > 0 or observation != task:
            parts.append(f"Latest search results (step {step + 1}): {observation}")
    else:
        parts.append(f"You are now at step {step + 1}. Current observation: {observation}")
    acts = [a for a in (admissible_actions or []) if a != "help"]
    if acts:
        parts.append("Admissible actions now:\n" + "\n".join(f"'{a}'" for a in acts))
    parts.append(_FORMAT[family])
    if repeat_task:
        parts.append(f"{'Question' if family == 'search' else 'Your task'}, again: {task}")
    return clean_text("\n".join(parts))
