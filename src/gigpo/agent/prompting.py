"""Prompting agents for ``gigpo eval`` (``agent.mode``): ReAct's few-shot examples and Reflexion's
reflections, as prompt parts for ``Agent.build_prompt(preamble=...)``.

``react`` (Yao et al., ReAct, arXiv:2210.03629): the prompt shows solved episodes of the same
family before the task, each step an observation and a response that gives a thought, then an
action, in the family's own syntax (``<think>..</think><action>..</action>``; search:
``<think>..</think><search>..</search>``), so responses parse and count as valid exactly as in
training (docs/algorithm.md#action-parsing). The examples are the env expert's episodes on
generated train-split tasks (``gigpo.rollout.prompting.collect_fewshot``), the thought of each
step the family's expert reason template (``FamilySpec.expert_reason``, ``format_expert_response``):
short, and true of the action it precedes.

``reflexion`` (Shinn et al., arXiv:2303.11366): ReAct's prompt, plus, after each failed trial of a
task, a reflection the model writes in a separate generation (``reflection_message``: the failed
trajectory and the outcome) that the task's next trial carries.

Fitting ``max_prompt_tokens``: the preamble is ordered least important first (the examples, least
similar task type first, then the reflections, oldest first) and ``Agent.build_prompt`` drops its
parts first-first before it cuts history or the observation. A reflection prompt drops the
trajectory's oldest steps first (``build_reflection_prompt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from gigpo.agent.agent import Agent, Prompt
from gigpo.agent.parsing import ParsedAction, parse_action
from gigpo.envs.spec import FamilySpec
from gigpo.text import clean_text

MODES = ("policy", "react", "reflexion")
_THINK = re.compile(r"<think>(.*?)</think>", re.IGNORECASE | re.DOTALL)
_REFLECTION = re.compile(r"<reflection>(.*?)(?:</reflection>|$)", re.IGNORECASE | re.DOTALL)
REFLECTION_INSTRUCTION = (
    "You did not complete this task. In a few sentences, say what went wrong and write a plan for your "
    "next attempt that avoids the mistake. Write it inside <reflection> </reflection>."
)


@dataclass(frozen=True)
class FewShotExample:
    """One solved episode shown to a ReAct agent.

    task: the task text. task_type: the task's type (``Task.task_type``).
    steps: ``(observation, response)`` per step, the response a thought then an action.
    """

    task: str
    task_type: str
    steps: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class ReActStep:
    """A response split into its thought (the first ``<think>`` block, '' without one) and the
    family's parse of its action."""

    thought: str
    action: ParsedAction


def parse_react(spec: FamilySpec, text: str) -> ReActStep:
    """The thought and the action of a ReAct response (the action parsed as in training)."""
    m = _THINK.search(text)
    return ReActStep(m.group(1).strip() if m else "", parse_action(spec, text))


def render_example(spec: FamilySpec, example: FewShotExample) -> str:
    """One example as prompt text: the task, then each step's observation and response."""
    lines = [f"A solved example ({len(example.steps)} steps), for reference:", f"{spec.task_label}: {example.task}"]
    for j, (obs, response) in enumerate(example.steps, start=1):
        if obs and not (spec.prompt_style == "qa" and obs == example.task):  # qa: step 1 shows the question
            lines.append(f"Observation {j}: {obs}")
        lines.append(f"Response {j}: {response}")
    return clean_text("\n".join(lines))


def select_examples(examples: Sequence[FewShotExample], task_type: str, n: int) -> list[FewShotExample]:
    """Up to ``n`` examples for a task of ``task_type``: those of the same type first, then the
    others, each in pool order (ReAct shows examples of the task's own type)."""
    same = [e for e in examples if e.task_type == task_type]
    other = [e for e in examples if e.task_type != task_type]
    return (same + other)[: max(n, 0)]


def react_preamble(spec: FamilySpec, examples: Sequence[FewShotExample], task_type: str, n: int) -> list[str]:
    """The few-shot parts of a task's prompt, least important (first dropped) first: the
    ``select_examples`` in reverse, so the most similar example sits next to the task."""
    chosen = select_examples(examples, task_type, n)
    return [render_example(spec, e) for e in reversed(chosen)]


def reflection_part(trial: int, reflection: str) -> str:
    """A reflection as it appears in the next trials' prompts."""
    return clean_text(f"Your reflection after failed attempt {trial} at this task: {reflection}")


def parse_reflection(text: str) -> str:
    """The reflection in a response: the ``<reflection>`` block (to the end when unclosed), else
    the text without ``<think>`` blocks; whitespace collapsed."""
    m = _REFLECTION.search(text)
    body = m.group(1) if m else _THINK.sub(" ", text)
    body = " ".join(body.split())
    return body or "(no reflection written)"


def reflection_message(
    spec: FamilySpec,
    task: str,
    steps: Sequence[tuple[str, str]],
    final_observation: str,
    outcome: str,
    *,
    first_step: int = 1,
    left_out: int = 0,
) -> str:
    """The user message asking for a reflection on a failed trial.

    ``steps``: ``(observation, response)`` per step shown, numbered from ``first_step``;
    ``left_out``: earlier steps not shown (said in the text); ``final_observation``: what the
    env answered to the last response; ``outcome``: how the trial ended.
    """
    lines = [spec.system_prompt, f"{spec.task_label}: {task}", "Your attempt:"]
    if left_out:
        lines.append(f"({left_out} earlier step(s) left out)")
    for j, (obs, response) in enumerate(steps, start=first_step):
        lines.append(f"Observation {j}: {obs}")
        lines.append(f"Your response {j}: {response}")
    lines.append(f"Final observation: {final_observation}")
    lines.append(f"Outcome: {outcome}")
    lines.append(REFLECTION_INSTRUCTION)
    return clean_text("\n".join(lines))


def build_reflection_prompt(
    agent: Agent,
    task: str,
    steps: Sequence[tuple[str, str]],
    final_observation: str,
    outcome: str,
) -> Prompt:
    """The reflection prompt within ``agent.max_prompt_tokens``: the oldest steps are left out
    first; when even none fit, the ids are spliced as ``Agent.build_prompt``'s last resort does
    (head + tail, the instruction kept). ``Prompt.history_dropped`` counts the steps left out."""
    limit = agent.max_prompt_tokens
    k = 0
    while True:
        msg = reflection_message(agent.spec, task, steps[k:], final_observation, outcome, first_step=k + 1, left_out=k)
        p = agent.encode_message(msg)
        if len(p.ids) <= limit or k >= len(steps):
            break
        k += 1
    p.history_dropped = k
    if len(p.ids) > limit:
        head = limit // 4
        ids = p.ids[:head] + p.ids[len(p.ids) - (limit - head) :]
        text = agent.tokenizer.decode(ids)
        p = Prompt(ids, text, message=text, history_dropped=k, observation_truncated=True, hard_truncated=True)
    return p
