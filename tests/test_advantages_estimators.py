"""GiGPO / GRPO / RLOO invariants, and the vectorized estimators against plain loops (verl habit)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.advantages import gigpo, grpo, rloo


def loop_gigpo(scores, returns, uids, anchors, mode, w, eps=1e-6):
    """docs/algorithm.md#episode-advantage to #combined-advantage written as the official
    implementation does: dicts of lists, one row at a time."""

    def stats(values, singleton_mean):
        if len(values) == 1:
            return singleton_mean(values[0]), 1.0
        return float(np.mean(values)), float(np.std(values, ddof=1))

    def norm(x, m, s):
        return x - m if mode == "mean_norm" else (x - m) / (s + eps)

    by_uid, by_step = {}, {}
    for i, u in enumerate(uids):
        by_uid.setdefault(u, []).append(scores[i])
        by_step.setdefault((u, anchors[i]), []).append(returns[i])
    a_e, a_s = [], []
    for i, u in enumerate(uids):
        a_e.append(norm(scores[i], *stats(by_uid[u], lambda v: 0.0)))
        a_s.append(norm(returns[i], *stats(by_step[(u, anchors[i])], lambda v: v)))
    a_e, a_s = np.array(a_e), np.array(a_s)
    return a_e + w * a_s, a_e, a_s


rows_strategy = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 4), st.sampled_from("abcd"), st.floats(-3, 10), st.floats(-3, 10)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(rows_strategy, st.sampled_from(["mean_norm", "mean_std_norm"]), st.sampled_from([0.0, 0.5, 1.0]))
def test_gigpo_equals_plain_loop_on_uneven_shuffled_groups(rows, mode, w):
    uids = [f"u{r[0]}" for r in rows]
    anchors = [r[2] for r in rows]
    scores = [r[3] for r in rows]
    returns = [r[4] for r in rows]
    res = gigpo(scores, returns, uids, anchors, mode=mode, step_weight=w)
    adv, a_e, a_s = loop_gigpo(scores, returns, uids, anchors, mode, w)
    tol = dict(rtol=1e-4, atol=1e-3)  # float32 output; mean_std_norm divides by (std + 1e-6)
    np.testing.assert_allclose(res.episode_advantages, a_e, **tol)
    np.testing.assert_allclose(res.step_advantages, a_s, **tol)
    np.testing.assert_allclose(res.advantages, adv, **tol)


@settings(max_examples=50, deadline=None)
@given(rows_strategy, st.randoms(use_true_random=False))
def test_exact_grouping_does_not_depend_on_row_order(rows, rnd):
    uids, anchors = [r[0] for r in rows], [r[2] for r in rows]
    scores, returns = [r[3] for r in rows], [r[4] for r in rows]
    perm = list(range(len(rows)))
    rnd.shuffle(perm)
    a = gigpo(scores, returns, uids, anchors, mode="mean_std_norm")
    b = gigpo(*[[x[i] for i in perm] for x in (scores, returns, uids, anchors)], mode="mean_std_norm")
    np.testing.assert_allclose(a.advantages[perm], b.advantages, rtol=1e-5, atol=1e-4)
    pairs = set(zip(a.step_groups[perm].tolist(), b.step_groups.tolist()))
    assert len(pairs) == len(set(a.step_groups.tolist())) == len(set(b.step_groups.tolist()))


@settings(max_examples=50, deadline=None)
@given(rows_strategy)
def test_episode_advantage_sums_to_zero_per_group_in_mean_norm(rows):
    uids = [r[0] for r in rows]
    res = gigpo([r[3] for r in rows], [r[4] for r in rows], uids, [r[2] for r in rows])
    for u in set(uids):
        rows_u = [i for i, x in enumerate(uids) if x == u]
        if len(rows_u) > 1:  # a one-row group keeps its raw score (docs/algorithm.md#episode-advantage)
            assert abs(res.episode_advantages[rows_u].sum()) < 1e-3


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_equal_groups_give_exact_zeros(mode):
    res = gigpo([3.0] * 6, [0.7] * 6, [0, 0, 0, 1, 1, 1], ["a", "a", "b", "a", "a", "c"], mode=mode)
    assert not res.advantages.any() and not res.episode_advantages.any() and not res.step_advantages.any()


def test_singletons_follow_the_reference_edge_rules():
    """Episode singleton → mean 0, std 1; step singleton → A^S = 0 (docs/algorithm.md#edge-cases)."""
    res = gigpo([5.0, 1.0, 3.0], [2.0, 1.0, 0.5], ["solo", "g", "g"], ["x", "y", "z"], mode="mean_std_norm")
    assert res.episode_advantages[0] == pytest.approx(5.0 / (1 + 1e-6))
    assert not res.step_advantages.any()


def test_step_weight_zero_gives_the_episode_part():
    args = ([1, 0, 1, 0], [1, 0.5, 0.2, 0.1], [0, 0, 0, 0], ["a", "b", "a", "b"])
    res = gigpo(*args, step_weight=0.0)
    np.testing.assert_array_equal(res.advantages, res.episode_advantages)
    assert res.step_advantages.any()


def test_step_groups_never_cross_episode_groups():
    res = gigpo([1, 0, 1, 0], [1, 0, 1, 0], [0, 0, 1, 1], ["a", "a", "a", "a"])
    assert res.step_groups.tolist() == [0, 0, 1, 1]


def test_exact_keys_of_arrays_dicts_and_numpy_scalars():
    img = np.arange(6).reshape(2, 3)
    anchors = [
        img,
        img.copy().reshape(3, 2),
        {"b": [1, 2], "a": np.int64(3)},
        {"a": 3, "b": (1, 2)},
        np.float32(2.0),
        2.0,
    ]
    res = gigpo([0] * 6, [0] * 6, [0] * 6, anchors)
    g = res.step_groups.tolist()
    assert g[0] == g[1] and g[2] == g[3] and g[4] == g[5] and len(set(g)) == 3


def test_anchor_key_replaces_the_default_key():
    res = gigpo([0] * 3, [1, 2, 3], [0] * 3, ["Room ", "room", "hall"], anchor_key=lambda s: s.strip().lower())
    assert res.step_groups.tolist() == [0, 0, 1]


def test_unhashable_anchor_is_a_type_error_naming_anchors():
    with pytest.raises(TypeError, match="anchors: cannot build an exact-grouping key from a set"):
        gigpo([0, 1], [0, 1], [0, 0], [{1, 2}, "a"])


def loop_grpo(scores, uids, trajs, normalize_std, eps=1e-6):
    first = {}
    for s, u, t in zip(scores, uids, trajs):
        first.setdefault((u, t), s)
    out = []
    for s, u in zip(scores, uids):
        vals = [v for (uu, _), v in first.items() if uu == u]
        m, sd = (0.0, 1.0) if len(vals) == 1 else (np.mean(vals), np.std(vals, ddof=1))
        out.append((s - m) / (sd + eps) if normalize_std else s - m)
    return np.array(out)


def loop_rloo(scores, uids, trajs):
    first = {}
    for s, u, t in zip(scores, uids, trajs):
        first.setdefault((u, t), s)
    out = []
    for s, u, t in zip(scores, uids, trajs):
        others = [v for (uu, tt), v in first.items() if uu == u and tt != t]
        out.append(s - np.mean(others) if others else s)
    return np.array(out)


traj_rows = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 5), st.floats(-3, 10)), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(traj_rows, st.booleans())
def test_grpo_and_rloo_equal_plain_loops(rows, normalize_std):
    trajs = [r[1] for r in rows]
    uids = [r[1] % 3 for r in rows]  # a trajectory belongs to exactly one episode group
    scores = [r[2] for r in rows]
    np.testing.assert_allclose(
        grpo(scores, uids, trajs, mode="mean_std_norm" if normalize_std else "mean_norm", cross_steps=False).advantages,
        loop_grpo(scores, uids, trajs, normalize_std),
        rtol=1e-4,
        atol=1e-3,
    )
    res = rloo(scores, uids, trajs)
    np.testing.assert_allclose(res.advantages, loop_rloo(scores, uids, trajs), rtol=1e-4, atol=1e-4)
    assert (res.step_groups == -1).all() and not res.step_advantages.any()


def test_grpo_per_trajectory_mode_uses_one_score_per_trajectory_not_per_row():
    # Trajectory A has 3 rows, B one: per-trajectory mean is 0.5, so the rows get ±0.5.
    res = grpo([1, 1, 1, 0], [0, 0, 0, 0], ["A", "A", "A", "B"], mode="mean_norm", cross_steps=False)
    np.testing.assert_allclose(res.advantages, [0.5, 0.5, 0.5, -0.5])


def test_grpo_default_statistics_over_all_rows_equal_gigpo_episode_part():
    # All trajectories fail (score 0); one row carries the invalid-action penalty. Over all rows
    # the std is finite, so the penalty gives a bounded advantage (the per-trajectory variant
    # would divide it by epsilon), and GRPO equals GiGPO's episode part in mean_std_norm.
    scores = np.array([0, 0, 0, 0, -0.1, 0, 0, 0, 0], np.float32)  # a non-first row of trajectory 1
    eps = np.zeros(9, np.int64)
    trajs = np.repeat([0, 1, 2], 3)
    res = grpo(scores, eps, trajs)
    ref = gigpo(scores, scores, eps, [str(i) for i in range(9)], mode="mean_std_norm", step_weight=0.0)
    np.testing.assert_allclose(res.advantages, ref.episode_advantages, rtol=1e-5)
    assert np.abs(res.advantages).max() < 3
    assert np.abs(grpo(scores, eps, trajs, cross_steps=False).advantages).max() > 1e4


def test_trajectory_under_two_episode_groups_is_rejected():
    with pytest.raises(ValueError, match="traj_ids"):
        rloo([1, 0], [0, 1], ["t", "t"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(scores=[1, 2], step_returns=[1], episode_ids=[0, 0], anchors=["a", "b"]), "step_returns has 1 rows"),
        (dict(scores=[1, 2], step_returns=[1, 2], episode_ids=[0], anchors=["a", "b"]), "episode_ids has 1 rows"),
        (dict(scores=[1, 2], step_returns=[1, 2], episode_ids=[0, 0], anchors=["a"]), "anchors has 1 rows"),
        (
            dict(scores=[1, np.nan], step_returns=[1, 2], episode_ids=[0, 0], anchors=["a", "b"]),
            "scores has 1 non-finite",
        ),
        (dict(scores=[1, 2], step_returns=[np.inf, 2], episode_ids=[0, 0], anchors=["a", "b"]), "step_returns"),
        (dict(scores=[1, 2], step_returns=[1, 2], episode_ids=[0, 0], anchors=["a", "b"], mode="std"), "mode must be"),
        (dict(scores=[1, 2], step_returns=[1, 2], episode_ids=[0, 0], anchors=["a", "b"], epsilon=-1), "epsilon"),
    ],
)
def test_bad_gigpo_inputs_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        gigpo(
            kwargs.pop("scores"), kwargs.pop("step_returns"), kwargs.pop("episode_ids"), kwargs.pop("anchors"), **kwargs
        )
