"""Advantage estimators for GiGPO, GRPO, RLOO, PPO (GAE with a critic) and GraphGPO over plain numpy row arrays.

One row = one agent step. The trainer calls only ``compute_advantages(name, ...)``; the pieces
are public so other trainers (verl, TRL) can use them directly:

- ``discounted_returns``, ``episode_scores``, ``apply_invalid_action_penalty``: return glue
  (docs/algorithm.md#step-returns, #invalid-action-penalty);
- ``gigpo`` (exact or similarity anchor grouping), ``grpo``, ``rloo`` → ``AdvantageResult``;
  ``exact_step_groups`` (``grouping.py``) and ``similarity_step_groups`` (``similarity.py``:
  difflib-exact greedy clustering, pruned by a sound LCS bound) build the step groups;
- ``ESTIMATORS`` / ``ALIASES`` / ``register`` / ``canonical_name`` / ``estimator_options`` /
  ``needs_values``: the registry (names ``gigpo``, ``grpo``, ``rloo``, the paper's ablations
  ``gigpo_no_step``, ``gigpo_no_episode``, ``ppo``, PPO with a learned critic, which takes the
  critic's per-token values (verl's name ``gae`` is an alias of ``ppo``), and ``graphgpo``);
- ``gae``, ``masked_whiten``, ``row_gae`` (``gae.py``): Generalized Advantage Estimation over
  token rows (docs/algorithm.md#ppo-with-a-learned-critic);
- ``graphgpo``, ``graph_step_returns``, ``state_graph``, ``goal_distances`` (``graph.py``):
  GraphGPO's step returns from a state graph of each episode group's rollouts
  (docs/algorithm.md#graphgpo), registered as ``graphgpo``; it takes the run-time input
  ``penalties`` (``runtime_inputs``);
- ``gigpo_eb``, ``shrinkage_weights`` (``shrinkage.py``): GiGPO whose step baseline is each
  anchor group's mean return shrunk toward its task's mean by the group's count and spread
  (docs/algorithm.md#empirical-bayes-anchor-baselines), registered as ``gigpo_eb``;
- ``step_group_stats``: group-size diagnostics for logging;
- ``synthetic`` (imported by name, not re-exported): ALFWorld- and Search-R1-shaped batches for
  tests and benchmarks.
- ``step_anchors`` (``anchors.py``): the anchor definitions ``observation``, ``state`` and
  ``context-k`` (docs/algorithm.md#anchor-definitions) as keys for the ``anchors`` input, and
  ``state_mixing``, how often observation anchors mix engine states.
"""

from ._checks import NORM_MODES
from .anchors import (
    ANCHORS,
    context_anchors,
    context_levels,
    hierarchical_anchors,
    parse_anchor,
    state_mixing,
    state_or_observation,
    step_anchors,
)
from .estimators import AdvantageResult, gigpo, grpo, rloo
from .gae import gae, masked_whiten, row_gae
from .graph import goal_distances, graph_step_returns, graphgpo, state_graph
from .shrinkage import gigpo_eb, shrinkage_weights
from .grouping import exact_step_groups, hashable_anchor, similarity_step_groups
from .registry import (
    ALIASES,
    ESTIMATORS,
    RUNTIME_INPUTS,
    canonical_name,
    compute_advantages,
    estimator_options,
    needs_values,
    register,
    runtime_inputs,
)
from .returns import apply_invalid_action_penalty, discounted_returns, episode_scores
from .stats import step_group_stats

__all__ = [
    "ALIASES",
    "ANCHORS",
    "AdvantageResult",
    "ESTIMATORS",
    "RUNTIME_INPUTS",
    "NORM_MODES",
    "apply_invalid_action_penalty",
    "canonical_name",
    "compute_advantages",
    "context_anchors",
    "context_levels",
    "discounted_returns",
    "episode_scores",
    "estimator_options",
    "exact_step_groups",
    "gae",
    "gigpo",
    "goal_distances",
    "graph_step_returns",
    "graphgpo",
    "gigpo_eb",
    "shrinkage_weights",
    "grpo",
    "hashable_anchor",
    "hierarchical_anchors",
    "masked_whiten",
    "needs_values",
    "parse_anchor",
    "register",
    "rloo",
    "row_gae",
    "runtime_inputs",
    "similarity_step_groups",
    "state_graph",
    "state_mixing",
    "state_or_observation",
    "step_anchors",
    "step_group_stats",
]
