"""``SearchEnv``: search-augmented question answering under the Search-R1 protocol.

The action is the agent's FULL response text for the step (think text and all). The env reads it
the way verl-agent's ``search_projection`` does (case-insensitive):
    1. the first ``<search>query</search>`` block -> run the query;
    2. else the first ``<answer>text</answer>`` block -> end the episode and score the answer;
    3. else -> an "invalid action" observation; the episode goes on.
Judging validity for the invalid-action penalty (both tags present, repeated tags) is the agent
module's business; the env only needs the first block. ``parse_action`` is exported for reuse.

Observations and ``info`` (see also ``gigpo.envs.base``):
    reset      -> the question (``info["instruction"]`` too).
    <search>   -> ``<information>Doc 1(Title: "T") text\\nDoc 2(...) ...</information>`` (Search-R1's
                  ``_passages2string``); an empty query gets a "Search error: ..." observation. When
                  the retriever fails (server down, HTTP error, timeout) ``step`` raises
                  ``RetrieverError`` naming the URL and the error: an env fault, which the episode
                  manager ends as a failed episode, not the policy's failure.
    <answer>   -> ``""``, done; reward = exact match (0/1, ``em.exact_match``) against any golden answer.
    neither    -> Search-R1's "My previous action is invalid. ..." message.
    ``info["anchor"]`` (docs/algorithm.md#anchors): the question at reset; after a step, the raw tool
    output of that step (the ``<information>`` text or the empty-query message), ``""`` when the step had
    no ``<search>`` query.
    ``info["state_anchor"]``: ``"docs <id>, <id>, ..."``, the sorted ids of every document retrieved in
    the episode so far (a hit without an id counts by its text).
    ``info["tool_calls"]``: searches issued so far (empty queries included); ``info["score"]`` the
    EM at done (0 before); ``info["won"]`` = score == 1; ``info["action_kind"]`` search/answer/invalid.
The step limit (Search-R1/verl-agent: 4) is the episode manager's concern; stepping a finished
episode returns ``("", 0.0, True, info)``.
"""

from __future__ import annotations

import re

from gigpo.envs.base import Task
from gigpo.envs.search.em import exact_match
from gigpo.envs.search.retrievers import Retriever, RetrieverError, format_docs

_TAGS = {
    tag: (re.compile(f"<{tag}>", re.IGNORECASE), re.compile(f"</{tag}>", re.IGNORECASE)) for tag in ("search", "answer")
}

# Search-R1's message (search_r1/llm_agent/generation.py, execute_predictions), verbatim.
INVALID_ACTION_MESSAGE = (
    "My previous action is invalid. If I want to search, I should put the query between <search> "
    "and </search>. If I want to give the final answer, I should put the answer between <answer> "
    "and </answer>. Let me try again."
)


def parse_action(text: str) -> tuple[str, str]:
    """``(kind, content)``: kind is ``"search"``, ``"answer"`` or ``"invalid"``; content stripped."""
    for tag in ("search", "answer"):
        # Same match as re.search(r"<tag>(.*?)</tag>", re.I | re.S), linear-time: the lazy regex
        # rescans to the end from every opening tag, seconds on 100 KB of "</search><search>...".
        opening, closing = _TAGS[tag]
        if (m := opening.search(text)) and (end := closing.search(text, m.end())):
            return tag, text[m.end() : end.start()].strip()
    return "invalid", ""


class SearchEnv:
    """One search-QA episode at a time over ``retriever`` (see the module docstring).

    Args:
        retriever: anything with ``search(queries, topk)`` (``BM25Retriever``, ``HTTPRetriever``).
        topk: documents per search (Search-R1 and verl-agent: 3).
        world_seed: the seed of the generated corpus this env searches, or None for a user corpus
            or server; generated tasks of another world are refused at reset.
    """

    family = "search"

    def __init__(self, retriever: Retriever, topk: int = 3, world_seed: int | None = None):
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        if not hasattr(retriever, "search"):
            raise TypeError(f"retriever must have a search(queries, topk) method, got {type(retriever).__name__}")
        self.retriever, self.topk, self.world_seed = retriever, topk, world_seed
        self.task: Task | None = None
        self.done = True
        self.retrieved: set[str] = set()

    def reset(self, task: Task) -> tuple[str, dict]:
        if task.family != "search":
            raise ValueError(f"SearchEnv got a task of family {task.family!r}; make it with make_tasks('search', ...)")
        data = task.data
        if not data.get("question") or not data.get("golden_answers"):
            raise ValueError(f"search task {task.task_id!r} needs data['question'] and data['golden_answers']")
        ws = data.get("world_seed")
        if ws is not None and self.world_seed is not None and ws != self.world_seed:
            raise ValueError(
                f"task {task.task_id!r} comes from generated world {ws} but this env searches "
                f"world {self.world_seed}; pass make_env(world_seed={ws}) or matching tasks"
            )
        self.task, self.question = task, str(data["question"])
        self.golden = [str(a) for a in data["golden_answers"]]
        self.tool_calls, self.steps, self.done, self.score = 0, 0, False, 0.0
        self.retrieved: set[str] = set()  # ids of every document retrieved this episode
        return self.question, self._info(anchor=self.question, kind="reset")

    def _info(self, anchor: str, kind: str) -> dict:
        t = self.task
        return {
            "won": self.score == 1.0,
            "score": self.score,
            "anchor": anchor,
            # what the agent has learnt: the documents retrieved so far (docs/algorithm.md#anchor-definitions)
            "state_anchor": "docs " + ", ".join(sorted(self.retrieved)),
            "tool_calls": self.tool_calls,
            "action_kind": kind,
            "instruction": self.question,
            "task_type": t.task_type if t else "",
            "data_source": t.data.get("data_source", "") if t else "",
        }

    def _search(self, query: str) -> str:
        if not query:
            return "Search error: the query is empty. Put the query between <search> and </search>."
        # A retriever that fails (server down, HTTP error, timeout) raises: the episode ends as an
        # env fault, left out of the update, instead of an empty result trained on as the policy's failure.
        try:
            hits = self.retriever.search([query], self.topk)[0]
        except RetrieverError:
            raise
        except Exception as e:
            raise RetrieverError(f"retriever {type(self.retriever).__name__} failed: {type(e).__name__}: {e}") from e
        # a hit without an id (some retrieval servers) is known by its text
        self.retrieved.update(str(h["id"]) if h.get("id") is not None else str(h.get("contents", "")) for h in hits)
        return f"<information>{format_docs(hits).strip() or 'No results found.'}</information>"

    def step(self, action: str) -> tuple[str, float, bool, dict]:
        if self.task is None:
            raise RuntimeError("SearchEnv.step called before reset(task)")
        if self.done:
            return "", 0.0, True, self._info(anchor="", kind="after_done")
        action = action if isinstance(action, str) else str(action)
        self.steps += 1
        kind, content = parse_action(action)
        if kind == "search":
            self.tool_calls += 1
            out = self._search(content)
            return out, 0.0, False, self._info(anchor=out, kind=kind)
        if kind == "answer":
            self.done, self.score = True, exact_match(content, self.golden)
            return "", self.score, True, self._info(anchor="", kind=kind)
        return INVALID_ACTION_MESSAGE, 0.0, False, self._info(anchor="", kind=kind)

    def expert_action(self) -> str:
        """The next action of an expert who knows the hop plan (``data["hops"]``) and the answer.

        Generated tasks: one search per hop (two for multi-hop: the bridge entity, then the
        answer), then ``<answer>``. User data without hops: search the question, then answer.
        """
        if self.task is None:
            raise RuntimeError("SearchEnv.expert_action called before reset(task)")
        hops = [tuple(h) for h in self.task.data.get("hops") or [(self.question, self.golden[0])]]
        i = self.tool_calls
        if i < len(hops):
            if i == 0:
                think = f"I need to find the answer to: {self.question} Let me search for it."
            else:
                think = (
                    f"The documents say the answer to the first part is {hops[i - 1][1]}. "
                    f"Now I need to search for the next fact."
                )
            return f"<think>{think}</think>\n<search>{hops[i][0]}</search>"
        return f"<think>From the documents, the answer is {self.golden[0]}.</think>\n<answer>{self.golden[0]}</answer>"

    def close(self) -> None:
        self.task, self.done = None, True
