"""Estimator registry: name -> function, and the one entry point the trainer calls.

Every registered function takes the same keyword inputs (scores, step_returns, episode_ids,
traj_ids, anchors; an estimator ignores the ones it does not use) plus its own keyword-only
options, and returns an ``AdvantageResult``. An estimator may also take run-time inputs
(``RUNTIME_INPUTS``), which the trainer computes each iteration and passes; they are not options:
``values`` (the critic's per-token values: the estimator needs a learned critic, ``needs_values``)
and ``penalties`` (each row's invalid-action penalty, for estimators that build their own step
returns). ``compute_advantages`` checks the name and the options against the function's signature
before calling it.

An estimator may also answer to aliases (``register(name, aliases=...)``; ``ALIASES`` maps each to
its name, ``canonical_name`` resolves one): PPO is ``ppo``, and verl's name ``gae`` is accepted.
Every lookup goes through ``canonical_name``, so an alias works wherever a name does.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable, Sequence

import numpy as np

from ._types import Anchors, ArrayLike
from .estimators import AdvantageResult, gigpo, grpo, rloo
from .gae import row_gae
from .graph import graphgpo
from .shrinkage import gigpo_eb

ESTIMATORS: dict[str, Callable[..., AdvantageResult]] = {}
# alias -> registered name (other trainers' names for the same estimator).
ALIASES: dict[str, str] = {}
_INPUTS = ("scores", "step_returns", "episode_ids", "traj_ids", "anchors")
# Inputs computed by the trainer at run time for the estimators that declare them (not options).
RUNTIME_INPUTS = ("values", "penalties")


def register(name: str, *, aliases: Sequence[str] = ()):
    """Decorator adding an estimator under ``name`` (and ``aliases``, other names for it); a name or
    alias can be registered only once."""

    def deco(fn):
        for n in (name, *aliases):
            if n in ESTIMATORS or n in ALIASES:
                raise ValueError(f"advantage estimator {n!r} is already registered; pick another name")
        if len(set((name, *aliases))) != 1 + len(aliases):
            raise ValueError(f"estimator {name!r}: aliases {list(aliases)} repeat a name")
        params = inspect.signature(fn).parameters
        missing = [p for p in _INPUTS if p not in params]
        if missing:
            raise TypeError(f"estimator {name!r} must accept the keyword inputs {_INPUTS}; missing {missing}")
        ESTIMATORS[name] = fn
        ALIASES.update(dict.fromkeys(aliases, name))
        return fn

    return deco


def estimator_options(name: str) -> dict[str, object]:
    """The options ``name`` accepts, with their defaults."""
    params = inspect.signature(_lookup(name)).parameters
    return {k: p.default for k, p in params.items() if k not in _INPUTS + RUNTIME_INPUTS}


def needs_values(name: str) -> bool:
    """Whether estimator ``name`` takes the critic's per-token ``values`` (PPO with a learned critic)."""
    return "values" in inspect.signature(_lookup(name)).parameters


def runtime_inputs(name: str) -> tuple[str, ...]:
    """The ``RUNTIME_INPUTS`` estimator ``name`` takes (``values``, ``penalties``), in that order."""
    params = inspect.signature(_lookup(name)).parameters
    return tuple(k for k in RUNTIME_INPUTS if k in params)


def canonical_name(name: str) -> str:
    """The registered name of estimator ``name`` (itself, or the name an alias stands for).

    Raises ValueError naming the valid names (aliases included) and the closest match.
    """
    if name in ESTIMATORS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    known = [*ESTIMATORS, *ALIASES]
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    aliases = ", ".join(f"{a} = {n}" for a, n in sorted(ALIASES.items()))
    also = f" (aliases: {aliases})" if aliases else ""
    raise ValueError(f"unknown advantage estimator {name!r}; valid names: {sorted(ESTIMATORS)}{also}.{hint}")


def _lookup(name: str):
    return ESTIMATORS[canonical_name(name)]


def compute_advantages(
    name: str,
    *,
    scores: ArrayLike,
    step_returns: ArrayLike | None = None,
    episode_ids: ArrayLike,
    traj_ids: ArrayLike | None = None,
    anchors: Anchors | None = None,
    values: Sequence[ArrayLike] | None = None,
    penalties: ArrayLike | None = None,
    **options: Any,
) -> AdvantageResult:
    """Run estimator ``name`` on row arrays (all length N; see ``gigpo`` for their meaning).

    scores float [N], step_returns float [N], episode_ids/traj_ids any [N], anchors [N];
    values: N float arrays (the critic's value of each response token) for the estimators that
    take them (``needs_values``), else None; penalties: float [N], the invalid-action penalty
    subtracted from each row's score (0 for valid rows), for the estimators that take it
    (``runtime_inputs``), else None.
    ``options`` go to the estimator (see ``estimator_options(name)``); an option it does not
    accept is an error, never silently dropped.
    """
    fn = _lookup(name)
    runtime = {}
    takes = runtime_inputs(name)
    if "values" in takes:
        runtime["values"] = _need(values, "the critic's per-token values", name)
    elif values is not None:
        raise ValueError(f"estimator {name!r} takes no critic values; pass values=None")
    if "penalties" in takes:
        runtime["penalties"] = _need(penalties, "each row's invalid-action penalty (penalties=)", name)
    elif penalties is not None:
        raise ValueError(f"estimator {name!r} takes no penalties (they are already in its scores); pass penalties=None")
    allowed = estimator_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"estimator {name!r} does not accept option(s) {unknown}; it accepts {sorted(allowed) or 'no options'}"
        )
    return fn(
        scores=scores,
        step_returns=step_returns,
        episode_ids=episode_ids,
        traj_ids=traj_ids,
        anchors=anchors,
        **runtime,
        **options,
    )


def _need(value, what: str, name: str):
    if value is None:
        raise ValueError(f"estimator {name!r} needs {what}; pass it to compute_advantages")
    return value


def _register_gigpo(
    name: str, doc: str | None, *, fixed_step_weight: float | None = None, step_only: bool = False, fn=gigpo
):
    """Register a GiGPO estimator under ``name``: ``fn`` (``gigpo`` or a function with its
    signature, e.g. ``gigpo_eb``) behind the registry's keyword inputs.

    ``fixed_step_weight``: the ablation's step weight, then not an option (left out of the
    signature, which is what ``estimator_options`` and ``compute_advantages`` read).
    ``step_only``: advantages = step_weight * A^S (A^E still reported).
    """

    def estimator(
        *,
        scores,
        step_returns,
        episode_ids,
        traj_ids,
        anchors,
        mode="mean_norm",
        step_weight=1.0,
        similarity_threshold=None,
        epsilon=1e-6,
        anchor_key=None,
    ):
        w = step_weight if fixed_step_weight is None else fixed_step_weight
        res = fn(
            scores,
            _need(step_returns, "step_returns", name),
            episode_ids,
            _need(anchors, "anchors", name),
            mode=mode,
            step_weight=w,
            similarity_threshold=similarity_threshold,
            epsilon=epsilon,
            anchor_key=anchor_key,
        )
        if not step_only:
            return res
        adv = (np.float64(w) * res.step_advantages.astype(np.float64)).astype(np.float32)
        return AdvantageResult(adv, res.episode_advantages, res.step_advantages, res.step_groups)

    if fixed_step_weight is not None:
        sig = inspect.signature(estimator)
        params = [p for p in sig.parameters.values() if p.name != "step_weight"]
        estimator.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
    estimator.__name__ = estimator.__qualname__ = f"_{name}"
    estimator.__doc__ = doc
    register(name)(estimator)


_register_gigpo("gigpo", None)
_register_gigpo(
    "gigpo_no_step",
    "Paper ablation: A^E only (step_weight 0). Step groups are still formed, for diagnostics.",
    fixed_step_weight=0.0,
)
_register_gigpo(
    "gigpo_no_episode",
    "Paper ablation: A^S only (advantages = step_weight * A^S); A^E is still reported.",
    step_only=True,
)
_register_gigpo(
    "gigpo_eb",
    "GiGPO with empirical-Bayes anchor baselines (``shrinkage.gigpo_eb``): a small or noisy step "
    "group's baseline is shrunk toward its task's mean return.",
    fn=gigpo_eb,
)


@register("grpo")
def _grpo(*, scores, step_returns, episode_ids, traj_ids, anchors, mode="mean_std_norm", epsilon=1e-6):
    return grpo(scores, episode_ids, traj_ids, mode=mode, epsilon=epsilon)


@register("rloo")
def _rloo(*, scores, step_returns, episode_ids, traj_ids, anchors):
    return rloo(scores, episode_ids, _need(traj_ids, "traj_ids", "rloo"))


# verl and verl-agent call it algorithm.adv_estimator=gae; gigpo's name is the paper's row, PPO.
@register("ppo", aliases=("gae",))
def _ppo(*, scores, step_returns, episode_ids, traj_ids, anchors, values, gamma=1.0, lam=1.0, whiten=True):
    """PPO's GAE with a learned critic, laid out as verl-agent's (``gae.row_gae``).

    ``scores``: each row's reward (its episode score less its invalid-action penalty), put on the
    row's last response token. ``advantages`` holds each row's mean token advantage (for logging
    and trajectories); the policy loss uses ``token_advantages``.
    """
    s = np.asarray(scores, dtype=np.float32)
    adv, ret = row_gae(s, values, gamma=gamma, lam=lam, whiten=whiten)
    mean = np.array([a.mean() if len(a) else 0.0 for a in adv], dtype=np.float32)
    return AdvantageResult(mean, mean.copy(), np.zeros(len(s), np.float32), np.full(len(s), -1, np.int64), adv, ret)


@register("graphgpo")
def _graphgpo(
    *,
    scores,
    step_returns,
    episode_ids,
    traj_ids,
    anchors,
    penalties,
    mode="mean_std_norm",
    step_weight=1.0,
    episode_weight=1.0,
    distance_decay=0.1,
    normalize_distance=False,
    similarity_threshold=None,
    epsilon=1e-6,
    anchor_key=None,
):
    """GraphGPO (arXiv:2605.26684, verl-agent recipe/GraphGPO): step returns from a state graph of
    each episode group's rollouts (``graph.graphgpo``); ``step_returns`` is not used."""
    return graphgpo(
        scores,
        episode_ids,
        _need(traj_ids, "traj_ids", "graphgpo"),
        _need(anchors, "anchors", "graphgpo"),
        penalties,
        mode=mode,
        step_weight=step_weight,
        episode_weight=episode_weight,
        decay=distance_decay,
        normalize_distance=normalize_distance,
        similarity_threshold=similarity_threshold,
        epsilon=epsilon,
        anchor_key=anchor_key,
    )
