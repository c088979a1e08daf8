"""Return glue: discounted returns, episode scores and the invalid-action penalty."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.advantages import apply_invalid_action_penalty, discounted_returns, episode_scores


def loop_returns(rewards, traj_ids, gamma):
    """Plain per-trajectory backward loop (the reference's algorithm, O(N^2) there)."""
    out = np.zeros(len(rewards))
    for t in set(traj_ids):
        rows = [i for i, x in enumerate(traj_ids) if x == t]
        running = 0.0
        for i in reversed(rows):
            running = rewards[i] + gamma * running
            out[i] = running
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 6), st.floats(-5, 10)), min_size=0, max_size=60),
    st.sampled_from([0.0, 0.5, 0.95, 1.0]),
)
def test_discounted_returns_equal_loop_on_interleaved_trajectories(rows, gamma):
    traj = [t for t, _ in rows]
    rew = [r for _, r in rows]
    np.testing.assert_allclose(
        discounted_returns(rew, traj, gamma), loop_returns(rew, traj, gamma), rtol=1e-5, atol=1e-4
    )


@pytest.mark.parametrize("lengths", [[50] * 30 + [37, 12], [2000] + [1] * 300], ids=["padded_matrix", "one_long"])
def test_discounted_returns_equal_loop_for_even_and_very_uneven_lengths(lengths):
    """Both strategies (padded matrix for similar lengths, per-position rows for a long outlier)."""
    rng = np.random.default_rng(len(lengths))
    traj = rng.permutation(np.repeat(np.arange(len(lengths)), lengths))  # interleaved, time order kept
    rew = rng.normal(size=len(traj))
    np.testing.assert_allclose(
        discounted_returns(rew, traj, 0.95), loop_returns(rew.tolist(), traj.tolist(), 0.95), rtol=1e-5, atol=1e-4
    )


def test_discounted_returns_accept_string_ids_and_sparse_terminal_reward():
    got = discounted_returns([0, 0, 0, 10, 1], ["a", "b", "a", "a", "b"], 0.5)
    np.testing.assert_allclose(got, [2.5, 0.5, 5.0, 10.0, 1.0])
    assert got.dtype == np.float32


def test_episode_scores_broadcast_trajectory_sum():
    np.testing.assert_allclose(episode_scores([1, 2, 3, 4], [0, 1, 0, 1]), [4, 6, 4, 6])


def test_penalty_hits_only_invalid_rows_and_copies():
    s, g = np.ones(3), np.full(3, 2.0)
    ps, pg = apply_invalid_action_penalty(s, g, [True, False, 1], 0.1)
    np.testing.assert_allclose(ps, [1, 0.9, 1])
    np.testing.assert_allclose(pg, [2, 1.9, 2])
    assert s[1] == 1 and g[1] == 2  # inputs untouched
    for coef in (None, 0):
        ps, pg = apply_invalid_action_penalty(s, g, [False] * 3, coef)
        np.testing.assert_array_equal(ps, s)
        np.testing.assert_array_equal(pg, g)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: discounted_returns([0, np.nan], [0, 0], 0.9), "rewards has 1 non-finite"),
        (lambda: discounted_returns([0, np.inf], [0, 0], 0.9), "rewards"),
        (lambda: discounted_returns([0, 1], [0], 0.9), "traj_ids has 1 rows"),
        (lambda: discounted_returns([0, 1], [0, 0], 1.5), "gamma"),
        (lambda: episode_scores([[0, 1]], [0]), "rewards must be 1-D"),
        (lambda: apply_invalid_action_penalty([1], [1, 2], [True], 0.1), "step_returns has 2 rows"),
        (lambda: apply_invalid_action_penalty([1], [1], [2], 0.1), "valid must be booleans"),
        (lambda: apply_invalid_action_penalty([1], [1], [True], -0.1), "coef"),
        (lambda: apply_invalid_action_penalty([np.nan], [1], [True], 0.1), "scores"),
    ],
)
def test_bad_return_inputs_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
