"""Process-wide speed-ups of TextWorld's PDDL text generation (behaviour unchanged).

TextWorld re-parses the same grammar template strings with tatsu on every derivation and
deep-copies the derivation context for every symbol; on ALFWorld that is most of a step's time
(docs/performance.md has the measurement). We memoise the two pure parse functions and
make the context copy shallow: derivation only ever adds keys to the copied ``variables`` and
``mapping`` dicts (``textgen.query``), it never mutates their values, so a dict copy is enough.

Resets: ``PddlState`` runs Fast Downward's PDDL->SAS translation (grounding, the slow part of a
reset) twice per state, and ``PddlEnv`` builds a new state at ``load`` and again at every ``reset``. The
translation is a pure function of (domain, problem) whose result is only read afterwards, so we
memoise it (a small LRU); replaying a game (GiGPO groups) then resets in milliseconds. The
``GameLogic`` (grammar parse) is memoised by its text likewise.
"""

from __future__ import annotations

import copy
from collections import OrderedDict

SAS_CACHE_SIZE = 64  # games whose translation stays cached per process (a few MB each at most)

_APPLIED = False


def apply() -> None:
    """Install the memoised parsers into textworld (idempotent)."""
    global _APPLIED
    if _APPLIED:
        return
    import textworld.envs.pddl.textgen as tg
    import textworld.logic as tl

    tg_parse, tl_parse = tg._parse_and_convert, tl._parse_and_convert
    tg_cache: dict = {}
    tl_cache: dict = {}

    def tg_cached(text, rule_name="symbols", trace=False, **kwargs):
        key = (text, rule_name)
        if key not in tg_cache:
            tg_cache[key] = tg_parse(text, rule_name=rule_name, **kwargs)
        return copy.deepcopy(tg_cache[key])  # symbols get contexts attached: hand out copies

    def tl_cached(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in tl_cache:
            tl_cache[key] = tl_parse(*args, **kwargs)  # logic objects are immutable values
        return tl_cache[key]

    def copy_context(context):
        return {
            "state": context["state"],
            "facts": context["facts"],
            "variables": dict(context["variables"]),
            "mapping": dict(context["mapping"]),
            "entity_infos": context["entity_infos"],
        }

    import fast_downward
    import textworld.envs.pddl.logic as pl

    sas_fn, sas_cache = fast_downward.pddl2sas, OrderedDict()

    def pddl2sas_cached(domain, problem, verbose=False, optimize=False):
        key = (hash(domain), problem, optimize)
        if key in sas_cache:
            sas_cache.move_to_end(key)
            return sas_cache[key]
        out = sas_cache[key] = sas_fn(domain, problem, verbose=verbose, optimize=optimize)
        while len(sas_cache) > SAS_CACHE_SIZE:
            sas_cache.popitem(last=False)
        return out

    logic_cls, logic_cache = pl.GameLogic, OrderedDict()

    def game_logic_cached(domain, grammar):
        key = (domain, grammar)
        if key not in logic_cache:
            logic_cache[key] = logic_cls(domain=domain, grammar=grammar)
            while len(logic_cache) > SAS_CACHE_SIZE:
                logic_cache.popitem(last=False)
        return logic_cache[key]

    fast_downward.pddl2sas = pddl2sas_cached
    pl.GameLogic = game_logic_cached
    tg._parse_and_convert = tg_cached
    tl._parse_and_convert = tl_cached
    tg.copy_context = copy_context
    _APPLIED = True
