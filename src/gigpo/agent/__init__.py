"""The agent: prompt templates per env family, history memory, action parsing and validity.

It knows nothing about how responses are generated (that is ``gigpo.policy``) or how steps are
looped (``gigpo.rollout``).
"""

from gigpo.agent.agent import Agent, Prompt
from gigpo.agent.expert import format_expert_response
from gigpo.agent.memory import History, Memory
from gigpo.agent.parsing import FALLBACK_TAIL, ParsedAction, parse_action, parse_search_action, parse_tagged_action
from gigpo.agent.prompts import DEFAULT_HISTORY, render_prompt

__all__ = [
    "Agent",
    "DEFAULT_HISTORY",
    "FALLBACK_TAIL",
    "History",
    "Memory",
    "ParsedAction",
    "Prompt",
    "format_expert_response",
    "parse_action",
    "parse_search_action",
    "parse_tagged_action",
    "render_prompt",
]
