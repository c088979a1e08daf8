"""Anchor definitions (docs/algorithm.md#anchor-definitions) on hand-made batches: observation,
state with its fallback, context-k with its hierarchy fallback, exact and similarity grouping,
and the state-mixing measure."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gigpo.advantages import (
    compute_advantages,
    context_anchors,
    context_levels,
    hierarchical_anchors,
    parse_anchor,
    state_mixing,
    step_anchors,
)


def _obj(xs):
    out = np.empty(len(xs), dtype=object)
    for i, x in enumerate(xs):
        out[i] = x
    return out


# Two rollouts of one task. Both reach "You arrive at drawer 1." at step 1, one holding the mug,
# one not: the observation is the same, the engine state differs.
EP = np.array([0, 0, 0, 0])
TRAJ = np.array([0, 0, 1, 1])
OBS = _obj(["start", "You arrive at drawer 1.", "start", "You arrive at drawer 1."])
ACT = _obj(["take mug 1 from table 1", "put mug 1 in drawer 1", "go to drawer 1", "open drawer 1"])
STATE = _obj(["s0", "at drawer; holds mug", "s0", "at drawer; holds nothing"])
SCORES = np.array([10.0, 10.0, 0.0, 0.0])
RETURNS = np.array([9.5, 10.0, 0.0, 0.0])


def _groups(anchors, **kw):
    return compute_advantages(
        "gigpo", scores=SCORES, step_returns=RETURNS, episode_ids=EP, traj_ids=TRAJ, anchors=anchors, **kw
    ).step_groups


def test_parse_anchor_names_the_bad_value_and_the_allowed_ones():
    assert parse_anchor("observation") == ("observation", 0)
    assert parse_anchor("state") == ("state", 0)
    assert parse_anchor("context-2") == ("context", 2)
    for bad in ("obs", "context", "context-0", "context--1", "context-x", "", None, 2):
        with pytest.raises(ValueError, match=rf"{bad!r} is not an anchor definition; allowed: observation, state, "):
            parse_anchor(bad)


def test_observation_passes_the_anchors_through_untouched():
    out = step_anchors("observation", episode_ids=EP, traj_ids=TRAJ, anchors=OBS, actions=ACT, state_anchors=STATE)
    assert out is OBS


def test_state_separates_rows_that_the_observation_groups_together():
    g_obs = _groups(OBS)
    assert g_obs[1] == g_obs[3]  # same text, different states: one step group
    st = step_anchors("state", episode_ids=EP, traj_ids=TRAJ, anchors=OBS, actions=ACT, state_anchors=STATE)
    g_st = _groups(st)
    assert g_st[1] != g_st[3] and g_st[0] == g_st[2]
    res = compute_advantages(
        "gigpo", scores=SCORES, step_returns=RETURNS, episode_ids=EP, traj_ids=TRAJ, anchors=st, mode="mean_norm"
    )
    assert res.step_advantages[1] == res.step_advantages[3] == 0.0  # now singleton groups
    assert res.step_advantages[0] == pytest.approx(4.75)


def test_state_falls_back_to_the_observation_per_row_and_for_a_family_without_states():
    partial = _obj(["s0", None, "s0", None])
    st = step_anchors("state", episode_ids=EP, traj_ids=TRAJ, anchors=OBS, actions=ACT, state_anchors=partial)
    assert list(st) == ["s0", OBS[1], "s0", OBS[3]]
    none = step_anchors("state", episode_ids=EP, traj_ids=TRAJ, anchors=OBS, actions=ACT, state_anchors=None)
    np.testing.assert_array_equal(_groups(none), _groups(OBS))


def test_state_works_with_similarity_grouping_on_the_state_text():
    st = step_anchors("state", episode_ids=EP, traj_ids=TRAJ, anchors=OBS, actions=ACT, state_anchors=STATE)
    g = _groups(st, similarity_threshold=0.95)
    assert g[0] == g[2] and g[1] != g[3]
    # at a low threshold the two state texts are similar enough to share a group again
    assert _groups(st, similarity_threshold=0.6)[1] == _groups(st, similarity_threshold=0.6)[3]


def test_context_levels_hold_the_last_pairs_the_prompt_showed():
    tr = [0, 0, 0, 0]
    obs, act = ["o0", "o1", "o2", "o3"], ["a0", "a1", "a2", "a3"]
    lv = context_levels(tr, obs, act, 2)
    assert lv[0] == [("o0",), ("o1",), ("o2",), ("o3",)]
    assert lv[1][3] == ("o2", "a2", "o3")
    assert lv[2][3] == ("o1", "a1", "o2", "a2", "o3")
    assert lv[2][1] == ("o0", "a0", "o1")  # only one earlier step: the whole history
    # interleaved trajectories keep their own histories
    lv = context_levels([0, 1, 0, 1], ["x", "y", "x2", "y2"], ["p", "q", "p2", "q2"], 1)
    assert lv[1] == [("x",), ("y",), ("x", "p", "x2"), ("y", "q", "y2")]


def test_context_hierarchy_takes_the_deepest_level_with_a_peer_and_falls_back():
    # One episode group, three trajectories, all at "drawer" on their second step:
    # t0 and t1 came from "hall" by the same action, t2 from "kitchen".
    ep = [0] * 6
    tr = [0, 0, 1, 1, 2, 2]
    obs = ["hall", "drawer", "hall", "drawer", "kitchen", "drawer"]
    act = ["go to drawer 1", "open drawer 1", "go to drawer 1", "close drawer 1", "go to drawer 1", "look"]
    levels = context_levels(tr, obs, act, 1)
    chosen, keys = hierarchical_anchors(ep, levels)
    # t0/t1 share level 1 at "drawer"; t2's only peers at level 0 found that deeper group: it is alone
    assert chosen.tolist() == [1, 1, 1, 1, 0, 0]
    assert keys[1] == keys[3] == (1, ("hall", "go to drawer 1", "drawer"))
    assert keys[5] == (0, ("drawer",))
    # a second kitchen rollout gives t2 a level-1 peer
    chosen, _ = hierarchical_anchors(
        ep + [0, 0], context_levels(tr + [3, 3], obs + ["kitchen", "drawer"], act + ["go to drawer 1", "x"], 1)
    )
    assert chosen.tolist() == [1] * 8
    # leftovers of a level pool together: t2 and a fourth path from "garage" share level 0
    chosen, keys = hierarchical_anchors(
        ep + [0, 0], context_levels(tr + [3, 3], obs + ["garage", "drawer"], act + ["go to drawer 1", "x"], 1)
    )
    assert chosen.tolist() == [1, 1, 1, 1, 0, 0, 0, 0]
    assert keys[5] == keys[7] == (0, ("drawer",))


def test_context_anchors_group_as_the_hierarchy_says_with_exact_and_similarity_grouping():
    ep = np.zeros(6, int)
    tr = np.array([0, 0, 1, 1, 2, 2])
    obs = _obj(["hall", "drawer", "hall", "drawer", "kitchen", "drawer"])
    act = _obj(["go to drawer 1", "open drawer 1", "go to drawer 1", "close drawer 1", "go to drawer 1", "look"])
    anchors = step_anchors("context-1", episode_ids=ep, traj_ids=tr, anchors=obs, actions=act)
    assert json.loads(anchors[1]) == [1, "hall", "go to drawer 1", "drawer"]
    assert json.loads(anchors[5]) == [0, "drawer"]
    kw = dict(scores=np.zeros(6), step_returns=np.arange(6.0), episode_ids=ep, traj_ids=tr)
    g = compute_advantages("gigpo", anchors=anchors, **kw).step_groups
    assert g[0] == g[2] and g[1] == g[3] and len({g[1], g[4], g[5]}) == 3
    g_obs = compute_advantages("gigpo", anchors=obs, **kw).step_groups
    assert g_obs[1] == g_obs[3] == g_obs[5]
    # similarity compares the JSON context text; at 0.95 it gives the exact partition here
    g_sim = compute_advantages("gigpo", anchors=anchors, similarity_threshold=0.95, **kw).step_groups
    np.testing.assert_array_equal(g_sim, g)


def test_context_anchors_never_cross_episode_groups_and_take_non_string_anchors():
    ep, tr = [0, 0, 1, 1], [0, 0, 1, 1]
    obs, act = ["a", "b", "a", "b"], ["x", "y", "x", "y"]
    out = context_anchors(ep, tr, obs, act, 1)
    assert [json.loads(o)[0] for o in out] == [0, 0, 0, 0]  # no peer inside its own episode group
    grids = [np.array([[1, 0]]), np.array([[0, 1]]), np.array([[1, 0]]), np.array([[0, 1]])]
    out = context_anchors([0] * 4, tr, grids, act, 1)
    assert out[1] == out[3] == (1, ((1, 0), "x", (0, 1)))


def test_context_needs_actions():
    with pytest.raises(ValueError, match="actions"):
        step_anchors("context-2", episode_ids=EP, traj_ids=TRAJ, anchors=OBS)


def test_state_mixing_counts_observation_groups_whose_states_differ():
    m = state_mixing(EP, OBS, STATE)
    assert m == {"groups": 2, "mixed_groups": 1, "mixed_share": 0.5, "mixed_rows_share": 0.5}
    assert state_mixing(EP, OBS, None) == {}
    # rows without a state key are not compared; other episode groups never mix
    m = state_mixing([0, 0, 1, 1], ["o", "o", "o", "p"], ["s", None, "t", "u"])
    assert m["groups"] == 1 and m["mixed_groups"] == 0 and m["mixed_share"] == 0.0


def test_context_anchors_equal_the_hierarchy_of_the_context_levels_on_random_rollouts():
    rng = np.random.default_rng(0)
    ep = np.repeat(np.arange(3), 40)
    tr = np.repeat(np.arange(12), 10)
    obs = [f"room {r}" for r in rng.integers(0, 4, len(ep))]
    act = [f"go {r}" for r in rng.integers(0, 2, len(ep))]
    for k in (1, 2, 3):
        chosen, keys = hierarchical_anchors(ep, context_levels(tr, obs, act, k))
        assert set(chosen.tolist()) == set(range(k + 1))  # every level is taken by some row here
        expected = [json.dumps([lvl, *key]) for lvl, key in keys]
        assert list(context_anchors(ep, tr, obs, act, k)) == expected
