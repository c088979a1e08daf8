"""Expert responses for SFT: the text the model should learn to produce for an expert action.

Short, informative ``<think>`` text (tiny models learn from it) followed by the action tag, so that
``parse_action(family, format_expert_response(family, a))`` gives back the action (lower-cased for
ALFWorld/WebShop) as a valid step.
"""

from __future__ import annotations

import re

# ALFWorld verbs -> a one-line reason; {0}, {1} are the object and the target receptacle/tool.
_ALFWORLD_REASONS = [
    (r"go to (.+)", "I should check {0} next."),
    (r"open (.+)", "{0} is closed; I open it to see inside."),
    (r"close (.+)", "I am done with {0}; I close it."),
    (r"take (.+) from (.+)", "I need {0}, and it is at {1}; I take it."),
    (r"(?:put|move) (.+) (?:in/on|to) (.+)", "I have {0}; I put it in/on {1} as the task asks."),
    (r"clean (.+) with (.+)", "The task needs {0} clean; I clean it with {1}."),
    (r"heat (.+) with (.+)", "The task needs {0} hot; I heat it with {1}."),
    (r"cool (.+) with (.+)", "The task needs {0} cool; I cool it with {1}."),
    (r"slice (.+) with (.+)", "I slice {0} with {1}."),
    (r"use (.+)", "I turn on {0} to look under its light."),
    (r"examine (.+)", "I examine {0} closely."),
    (r"look", "I look around."),
    (r"inventory", "I check what I am carrying."),
]


def alfworld_reason(action: str) -> str:
    """The ALFWorld family's ``FamilySpec.expert_reason``."""
    for pat, reason in _ALFWORLD_REASONS:
        m = re.fullmatch(pat, action)
        if m:
            return reason.format(*m.groups())
    return "This action moves the task forward."


def webshop_reason(action: str) -> str:
    """The WebShop family's ``FamilySpec.expert_reason``."""
    m = re.fullmatch(r"search\[(.*)\]", action)
    if m:
        return f"I search the store for the requested product: {m.group(1)}."
    m = re.fullmatch(r"click\[(.*)\]", action)
    if m:
        target = m.group(1)
        if target == "buy now":
            return "The item and its options match the request; I buy it."
        if target in ("next >", "< prev", "back to search"):
            return f"The item I need is not here; I click {target}."
        return f"{target} matches the request; I click it."
    return "This action moves the purchase forward."


THINK_STYLES = ("reason", "empty")
GENERIC_REASON = "This action moves the task forward."


def format_expert_response(family, action: str, *, think: str = "reason") -> str:
    """The response text for an expert ``action`` of env ``family`` (a name or its ``FamilySpec``).

    ``action`` syntax (ALFWorld, WebShop): ``<think>reason</think><action>action</action>``, the
    action lower-cased (as the parser lower-cases), the reason from ``FamilySpec.expert_reason``.
    ``search`` syntax: the expert's text already has its ``<search>``/``<answer>`` tag; a short
    ``<think>`` is prepended when it has none.

    ``think="empty"``: ``<think></think>`` instead of the reason (still a valid response, spec s.6).
    A model that cannot yet read its prompt writes reasons unrelated to its action (the reason names
    the action's target, so it *is* the decision, made without the admissible-action mask); an empty
    one leaves every decision to the action text, where ``rollout.constrain_actions`` applies.
    """
    if think not in THINK_STYLES:
        raise ValueError(f"think must be one of {THINK_STYLES}, got {think!r}")
    from gigpo.envs.spec import get_family

    spec = get_family(family) if isinstance(family, str) else family
    text = _with_reason(spec, action)
    if think == "reason":
        return text
    bare = re.sub(r"<think>.*?</think>", "", text, flags=re.IGNORECASE | re.DOTALL).strip()
    if spec.action_syntax == "search" and not re.search(r"<(search|answer)>", bare, re.IGNORECASE):
        raise ValueError(f"search expert action must hold a <search> or <answer> block, got {action!r}")
    return f"<think></think>{bare}"


def _with_reason(spec, action: str) -> str:
    if spec.action_syntax == "search":
        if "<think>" in action:
            return action
        m = re.search(r"<search>(.*?)</search>", action, re.IGNORECASE | re.DOTALL)
        if m:
            return f"<think>I need more information: {m.group(1).strip()}.</think>{action}"
        if re.search(r"<answer>.*?</answer>", action, re.IGNORECASE | re.DOTALL):
            return f"<think>The results give me the answer.</think>{action}"
        raise ValueError(f"search expert action must hold a <search> or <answer> block, got {action!r}")
    action = action.strip().lower()
    reason = spec.expert_reason(action) if spec.expert_reason is not None else GENERIC_REASON
    return f"<think>{reason}</think><action>{action}</action>"
