"""Counterfactual task relabelling of ALFWorld expert steps, for SFT.

An expert demonstration teaches reading only at the few steps whose action depends on the task's
words: taking the task's object, and carrying it to the task's receptacle type. A 120-episode
SFT set has ~240 such rows, and a from-scratch model learns from them where the expert usually
goes, not to copy the name from its task (research/notes/why-tiny-does-not-read.md). Relabelling makes each such row a
contrastive set: same scene, same history, the task naming another object (or receptacle type)
in view, and the action the expert would then take. The only way to fit all of them is to read.
This is hindsight relabelling (Andrychowicz et al., 2017, HER) applied to the task text.

Only ALFWorld ``put`` tasks are relabelled (all six types end with putting X in/on Y); other
steps, families and phrasings give no variants.
"""

from __future__ import annotations

import re
from typing import Sequence

# "put a clean apple in fridge", "put some knife on countertop"; "heat some egg and put it in
# diningtable" names its object first (OBJ_FIRST, tried before PUT, which would take "it").
PUT = re.compile(
    r"put (?:a |an |some |the |two )?(?:(?:clean|hot|cool|heated|cooled|cleaned) )?"
    r"(?P<obj>\w+) (?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"
)
OBJ_FIRST = re.compile(
    r"(?:clean|heat|cool|examine|look at) (?:a |an |some |the )?(?P<obj>\w+) and put it "
    r"(?:in|on|in/on) (?:a |an |the )?(?P<rec>\w+)"
)
TAKE = re.compile(r"^take (?P<obj>\w+) (?P<n>\d+) from (?P<src>.+)$")
GOTO = re.compile(r"^go to (?P<rec>\w+) (?P<n>\d+)$")


def task_words(task: str) -> re.Match | None:
    """The match of the task's object (``obj``) and receptacle type (``rec``), or None."""
    return OBJ_FIRST.search(task) or PUT.search(task)


def _swap(task: str, m: re.Match, group: str, word: str) -> str:
    return task[: m.start(group)] + word + task[m.end(group) :]


def relabel_step(task: str, action: str, admissible: Sequence[str], holding: bool, limit: int) -> list[tuple[str, str]]:
    """Up to ``limit`` (task, action) variants of one expert step.

    ``take X n from S`` where X is the task's object: the task naming another object W that can be
    taken here, with ``take W m from S``. ``go to Y n`` where Y is the task's receptacle type and the
    agent holds the task's object (``holding``): the task naming another receptacle type Z in
    reach, with ``go to Z k`` (its lowest-numbered instance). Variants are in admissible-list
    order, so the choice is deterministic.
    """
    m = task_words(task)
    if m is None or limit <= 0:
        return []
    obj, rec = m.group("obj"), m.group("rec")
    out: list[tuple[str, str]] = []
    t = TAKE.match(action)
    if t and t.group("obj") == obj:
        seen = {obj}
        for a in admissible:
            u = TAKE.match(a)
            if u and u.group("src") == t.group("src") and u.group("obj") not in seen:
                seen.add(u.group("obj"))
                out.append((_swap(task, m, "obj", u.group("obj")), a))
    g = GOTO.match(action)
    if g and holding and g.group("rec") == rec:
        first: dict[str, tuple[int, str]] = {}
        for a in admissible:
            u = GOTO.match(a)
            if u and u.group("rec") != rec:
                n = int(u.group("n"))
                if u.group("rec") not in first or n < first[u.group("rec")][0]:
                    first[u.group("rec")] = (n, a)
        out.extend((_swap(task, m, "rec", z), a) for z, (_, a) in first.items())
    return out[:limit]


def holds_task_object(task: str, actions: Sequence[str]) -> bool:
    """Whether the task's object is in hand after ``actions`` (took it, has not put it down)."""
    m = task_words(task)
    if m is None:
        return False
    holding = False
    for a in actions:
        t = TAKE.match(a)
        if t and t.group("obj") == m.group("obj"):
            holding = True
        elif a.startswith(("put ", "move ")):
            holding = False
    return holding
