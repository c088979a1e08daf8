"""Prompt rendering from an env family's ``FamilySpec`` (in the spirit of verl-agent's ``prompts/<env>.py``).

A prompt is one user message: the task, the last K (observation, action) pairs, the current
observation, the admissible actions where the family has them, and the format instruction
(reason inside ``<think>``, act inside ``<action>``; search: ``<search>`` / ``<answer>``).
``render_prompt`` returns that message text; ``gigpo.agent.Agent`` puts it through the
tokenizer's chat template and handles context overflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Iterator, Sequence

from gigpo.envs.spec import FamilySpec, families, get_family
from gigpo.text import clean_text  # noqa: F401 - re-exported: part of gigpo.agent.prompts' API


PROMPT_FORMS = ("full", "observation")


class _DefaultHistory(Mapping):
    """``family -> default history length K`` (``FamilySpec.default_history``), read from the registry."""

    def __getitem__(self, family: str) -> int:
        try:
            return get_family(family).default_history
        except ValueError:
            raise KeyError(family) from None

    def __iter__(self) -> Iterator[str]:
        return iter(families())

    def __len__(self) -> int:
        return len(families())


DEFAULT_HISTORY: Mapping[str, int] = _DefaultHistory()


def _render_history(spec: FamilySpec, history: Sequence[tuple[str, str]], first_step: int, task: str) -> str:
    lines = []
    for j, (obs, act) in enumerate(history, start=first_step + 1):
        if spec.prompt_style == "qa":
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
    form: str = "full",
    preamble: Sequence[str] = (),
) -> str:
    """The user-message text of one step's prompt.

    Args:
        family: env family name (``alfworld``, ``webshop``, ``search``, a registered plugin's) or
            its ``FamilySpec``; the spec gives the wording (``system_prompt``, ``task_label``,
            ``prompt_style``, ``action_format``).
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
        form: ``full`` (the family's template above) or ``observation``: the current
            observation alone, for families whose observation is the whole state
            (``FamilySpec.observation_is_state``); task, history, action list and format
            instruction are left out. An option for small models built from scratch, which
            learn to read a bare Sokoban grid faster than the same grid inside the ~300-token
            template (research/notes/sokoban-tiny-does-not-read-the-grid.md); not the reference prompt.
        preamble: text parts shown after the system prompt, before the task (the prompting
            agents' few-shot examples and reflections, ``gigpo.agent.prompting``); not with
            ``form="observation"``.
    """
    spec = get_family(family) if isinstance(family, str) else family
    if form not in PROMPT_FORMS:
        raise ValueError(f"prompt form must be one of {PROMPT_FORMS}, got {form!r}")
    if form == "observation":
        if not spec.observation_is_state:
            raise ValueError(
                f"the {spec.name} family's observation is not its whole state (FamilySpec.observation_is_state); "
                "its prompt needs the task and history: use the full prompt form"
            )
        if preamble:
            raise ValueError("a prompt of form 'observation' holds the observation alone: it takes no preamble")
        return clean_text(observation)
    parts = [spec.system_prompt, *preamble, f"{spec.task_label}: {task}"]
    if history:
        first = step - len(history)
        parts.append(
            f"You have taken {step} step(s) so far. The most recent {len(history)} {spec.history_noun}:\n"
            + _render_history(spec, history, first, task)
        )
    if spec.prompt_style == "qa":
        if step > 0 or observation != task:
            parts.append(f"Latest search results (step {step + 1}): {observation}")
    else:
        parts.append(f"You are now at step {step + 1}. Current observation: {observation}")
    acts = [a for a in (admissible_actions or []) if a != "help"]
    if acts:
        parts.append("Admissible actions now:\n" + "\n".join(f"'{a}'" for a in acts))
    parts.append(spec.action_format)
    if repeat_task:
        parts.append(f"{spec.task_again_label}, again: {task}")
    return clean_text("\n".join(parts))
