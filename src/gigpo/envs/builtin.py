"""The built-in env families' specs (registered by ``gigpo/envs/__init__.py``, one call each).

Prompt texts follow verl-agent's ``prompts/<env>.py``; history lengths are docs/algorithm.md#paper-settings, the
fallback tails s.6.
"""

from __future__ import annotations

import re

from gigpo.envs.spec import FamilySpec

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


def _search_metrics(batch) -> dict:
    """``tool_calls_per_question``: mean tool calls per trajectory."""
    import numpy as np

    calls = batch.meta.get("traj_tool_calls")
    if calls is None:
        return {}
    return {"tool_calls_per_question": float(np.mean(calls)) if len(calls) else 0.0}


ALFWORLD = FamilySpec(
    name="alfworld",
    module="gigpo.envs.alfworld",
    system_prompt="You are an expert agent acting in the ALFRED household environment (ALFWorld).",
    action_format=(
        "Now take one action. First reason step by step about the situation inside <think> </think>. "
        "Then give exactly one admissible action inside <action> </action>."
    ),
    default_history=2,
    fallback_tail=30,
    expert_reason=alfworld_reason,
    sft_relabel=True,
    # TextWorld's PDDL parser is shared module state and breaks under threads.
    thread_safe=False,
    # ALFWorld episodes are slow to play but repeat the same words: a few cover its vocabulary.
    tiny_corpus_episodes=6,
    engines=("alfworld", "textworld"),
)

WEBSHOP = FamilySpec(
    name="webshop",
    module="gigpo.envs.webshop",
    system_prompt="You are an expert shopping agent acting in the WebShop online store.",
    action_format=(
        "Now take one action. First reason step by step about which admissible action best serves "
        "the shopping goal, inside <think> </think>. Then give exactly one admissible action inside "
        "<action> </action>."
    ),
    default_history=2,
    fallback_tail=20,
    expert_reason=webshop_reason,
    tiny_corpus_episodes=40,
)

SEARCH = FamilySpec(
    name="search",
    module="gigpo.envs.search",
    system_prompt="You are an expert agent answering a question step by step with a search engine.",
    action_format=(
        "Now respond for this step. First reason inside <think> </think>. Then do only one of: "
        "(1) if you lack knowledge, search with <search> your query </search>; the results come back "
        "inside <information> </information>; "
        "(2) if you can answer, give the short final answer inside <answer> </answer>, "
        "for example <answer>Beijing</answer>."
    ),
    task_label="Question",
    task_again_label="Question",
    prompt_style="qa",
    history_noun="searches and results",
    default_history=4,
    action_syntax="search",
    fallback_tail=0,
    tool_call_kinds=("search",),
    metrics=_search_metrics,
    tiny_corpus_episodes=150,
    engines=("bm25s",),
)


def _sokoban_metrics(batch) -> dict:
    """``deadlock_rate``: share of trajectories that cornered a box (``info["deadlocked"]``);
    over the won trajectories, ``steps_over_optimal``: mean episode length minus the task's
    ``optimal_steps``, and ``optimal_rate``: share won in exactly ``optimal_steps``. The last two
    are absent when no trajectory won (a mean over nothing is no number to log)."""
    import numpy as np

    info = batch.meta.get("traj_info")
    if not info:
        return {}
    m = {"deadlock_rate": float(np.mean([bool(d.get("deadlocked")) for d in info]))}
    over = [
        int(n) - int(d["optimal_steps"])
        for d, n, won in zip(info, batch.traj_length, batch.traj_won)
        if won and d.get("optimal_steps") is not None
    ]
    if over:
        m["steps_over_optimal"] = float(np.mean(over))
        m["optimal_rate"] = float(np.mean([x <= 0 for x in over]))
    return m


def sokoban_reason(action: str) -> str:
    """The Sokoban family's ``FamilySpec.expert_reason`` (the expert follows a shortest solution)."""
    return f"Moving {action} keeps me on a shortest way to push every box onto a target without cornering one."


# Prompt after verl-agent's Sokoban template: the rules and legend come with the task text
# (the env's ``instruction``), the grid is the observation.
SOKOBAN = FamilySpec(
    name="sokoban",
    module="gigpo.envs.sokoban",
    system_prompt="You are an expert agent operating in the Sokoban environment.",
    action_format=(
        "Now choose ONE action for this step. First reason step by step inside <think> </think> about where "
        "the boxes and targets are and how to push a box toward a target without trapping it in a corner. "
        "Then give exactly one admissible action inside <action> </action>."
    ),
    default_history=2,
    observation_is_state=True,  # the grid; the task (push every box onto a target) never changes
    fallback_tail=10,
    expert_reason=sokoban_reason,
    metrics=_sokoban_metrics,
    traj_info_keys=("deadlocked", "optimal_steps"),
    # Grids of a few symbols and four actions: few episodes give the tokenizer all of them.
    tiny_corpus_episodes=40,
)

BUILTIN = (ALFWORLD, WEBSHOP, SEARCH, SOKOBAN)
