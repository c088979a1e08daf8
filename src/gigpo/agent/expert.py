"""Expert responses for SFT: the text the model should learn to produce for an expert action.

Short, informative ``<think>`` text (tiny models learn from it; the family's
``FamilySpec.expert_reason``) followed by the action tag, so that
``parse_action(family, format_expert_response(family, a))`` gives back the action (lower-cased for
ALFWorld/WebShop) as a valid step.
"""

from __future__ import annotations

import re

from gigpo.envs.spec import get_family

THINK_STYLES = ("reason", "empty")
GENERIC_REASON = "This action moves the task forward."


def format_expert_response(family, action: str, *, think: str = "reason") -> str:
    """The response text for an expert ``action`` of env ``family`` (a name or its ``FamilySpec``).

    ``action`` syntax (ALFWorld, WebShop): ``<think>reason</think><action>action</action>``, the
    action lower-cased (as the parser lower-cases), the reason from ``FamilySpec.expert_reason``.
    ``search`` syntax: the expert's text already has its ``<search>``/``<answer>`` tag; a short
    ``<think>`` is prepended when it has none.

    ``think="empty"``: ``<think></think>`` instead of the reason (still a valid response,
    docs/algorithm.md#action-parsing).
    A model that cannot yet read its prompt writes reasons unrelated to its action (the reason names
    the action's target, so it *is* the decision, made without the admissible-action mask); an empty
    one leaves every decision to the action text, where ``rollout.constrain_actions`` applies.
    """
    if think not in THINK_STYLES:
        raise ValueError(f"think must be one of {THINK_STYLES}, got {think!r}")
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
