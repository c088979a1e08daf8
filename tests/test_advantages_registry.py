"""The estimator registry, the uniform entry point, and step-group diagnostics."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo.advantages import ESTIMATORS, compute_advantages, estimator_options, gigpo, register, step_group_stats

BATCH = dict(
    scores=[10, 10, 0, 0, 0, 10],
    step_returns=[9.5, 10, 0, 0, 0, 10],
    episode_ids=["g", "g", "g", "g", "h", "h"],
    traj_ids=[0, 0, 1, 1, 2, 3],
    anchors=["s0", "s1", "s0", "s1", "s0", "s0"],
)


def test_registry_has_the_paper_estimators_and_ablations():
    assert {"gigpo", "grpo", "rloo", "gigpo_no_step", "gigpo_no_episode"} <= set(ESTIMATORS)


def test_ablations_are_the_two_parts_of_gigpo():
    full = compute_advantages("gigpo", mode="mean_std_norm", **BATCH)
    no_step = compute_advantages("gigpo_no_step", mode="mean_std_norm", **BATCH)
    no_ep = compute_advantages("gigpo_no_episode", mode="mean_std_norm", **BATCH)
    np.testing.assert_array_equal(no_step.advantages, full.episode_advantages)
    np.testing.assert_array_equal(no_ep.advantages, full.step_advantages)
    np.testing.assert_allclose(no_step.advantages + no_ep.advantages, full.advantages, atol=1e-6)
    # ...and without its step part GiGPO is GRPO exactly (research/learning.py reuses GRPO's runs)
    np.testing.assert_array_equal(
        no_step.advantages, compute_advantages("grpo", mode="mean_std_norm", **BATCH).advantages
    )


def test_entry_point_passes_options_through():
    direct = gigpo(
        BATCH["scores"],
        BATCH["step_returns"],
        BATCH["episode_ids"],
        BATCH["anchors"],
        step_weight=0.5,
        similarity_threshold=0.4,
    )
    via = compute_advantages("gigpo", step_weight=0.5, similarity_threshold=0.4, **BATCH)
    np.testing.assert_array_equal(direct.advantages, via.advantages)
    assert (
        compute_advantages("grpo", mode="mean_norm", **BATCH).advantages.tolist()
        != compute_advantages("grpo", **BATCH).advantages.tolist()
    )
    assert set(estimator_options("rloo")) == set()


def test_unknown_estimator_lists_valid_names_and_closest_match():
    with pytest.raises(ValueError, match=r"unknown advantage estimator 'gipgo'.*'grpo'.*Did you mean 'gigpo'"):
        compute_advantages("gipgo", **BATCH)


def test_unaccepted_option_is_an_error_not_ignored():
    with pytest.raises(ValueError, match=r"'grpo' does not accept option\(s\) \['step_weight'\]"):
        compute_advantages("grpo", step_weight=1.0, **BATCH)


def test_missing_input_says_which():
    kw = dict(BATCH, anchors=None)
    with pytest.raises(ValueError, match="needs anchors"):
        compute_advantages("gigpo", **kw)
    assert compute_advantages("grpo", **kw).advantages.shape == (6,)


def test_an_alias_is_the_estimator_under_another_name_everywhere():
    from gigpo.advantages import ALIASES, canonical_name

    assert ALIASES["gae"] == "ppo" and "gae" not in ESTIMATORS  # one entry, two names
    assert canonical_name("gae") == canonical_name("ppo") == "ppo" and canonical_name("grpo") == "grpo"

    @register("test_alias_target", aliases=("test_alias_other",))
    def scaled(*, scores, step_returns, episode_ids, traj_ids, anchors, scale=2.0):
        return compute_advantages("grpo", scores=scores, episode_ids=episode_ids, traj_ids=traj_ids)

    try:
        assert estimator_options("test_alias_other") == {"scale": 2.0}
        np.testing.assert_array_equal(
            compute_advantages("test_alias_other", scale=3.0, **BATCH).advantages,
            compute_advantages("test_alias_target", **BATCH).advantages,
        )
        with pytest.raises(ValueError, match="'test_alias_other' is already registered"):
            register("test_alias_other")(scaled)  # an alias is taken like a name
        with pytest.raises(ValueError, match="'gae' is already registered"):
            register("test_alias_new", aliases=("gae",))(scaled)
        assert "test_alias_new" not in ESTIMATORS
    finally:
        ESTIMATORS.pop("test_alias_target")
        ALIASES.pop("test_alias_other")
    with pytest.raises(ValueError, match=r"valid names: .*'ppo'.*\(aliases: gae = ppo\)"):
        compute_advantages("dqn", **BATCH)


def test_register_refuses_duplicates_and_bad_signatures():
    with pytest.raises(ValueError, match="already registered"):
        register("gigpo")(lambda **kw: None)

    def no_inputs(*, scores):
        return None

    with pytest.raises(TypeError, match="must accept the keyword inputs"):
        register("test_only_bad")(no_inputs)
    assert "test_only_bad" not in ESTIMATORS


def test_step_group_stats_counts_sizes_and_shares():
    labels = np.array([0, 0, 0, 1, 2, 2, -1])
    st = step_group_stats(labels, episode_ids=np.array([0, 0, 0, 0, 1, 1, 1]))
    assert st["num_groups"] == 3
    assert st["share_rows_in_groups_gt1"] == pytest.approx(5 / 6)
    assert st["mean_group_size"] == pytest.approx(2.0)
    assert st["max_group_size"] == 3
    assert st["size_hist"] == {1: 1, 2: 1, 3: 1}
    assert st["num_episode_groups"] == 2 and st["groups_per_episode_group"] == pytest.approx(1.5)
    empty = step_group_stats(np.full(3, -1))
    assert empty["num_groups"] == 0 and empty["size_hist"] == {}
