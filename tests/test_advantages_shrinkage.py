"""``gigpo_eb``: GiGPO with empirical-Bayes anchor baselines, against a plain loop written from
its definition, and at the limits where it must be GiGPO or the task-mean baseline."""

from __future__ import annotations

import numpy as np
import pytest

from gigpo.advantages import ESTIMATORS, compute_advantages, estimator_options, gigpo, gigpo_eb
from gigpo.train.config import load_config


def plain_loop(scores, step_returns, episode_ids, anchors, mode="mean_norm", step_weight=1.0, epsilon=1e-6):
    """The definition, one Python loop per quantity (anchors compared by equality)."""
    n = len(scores)
    tasks = sorted(set(episode_ids), key=list(episode_ids).index)
    key = [(episode_ids[i], anchors[i]) for i in range(n)]
    groups = {}
    for i in range(n):
        groups.setdefault(key[i], []).append(i)
    task_mean = {t: np.mean([step_returns[i] for i in range(n) if episode_ids[i] == t]) for t in tasks}
    means = {k: np.mean([step_returns[i] for i in rows]) for k, rows in groups.items()}
    ss = sum((step_returns[i] - means[k]) ** 2 for k, rows in groups.items() for i in rows)
    dof = sum(len(rows) - 1 for rows in groups.values())
    kappa = dict.fromkeys(groups, 1.0)
    if dof and ss > 0:
        sigma2 = ss / dof
        dev2 = [(means[k] - task_mean[k[0]]) ** 2 for k in groups]
        noise = [sigma2 / len(rows) for rows in groups.values()]
        tau2 = max(sum(dev2) / len(groups) - sum(noise) / len(groups), 0.0)
        kappa = {k: tau2 / (tau2 + sigma2 / len(rows)) for k, rows in groups.items()}
    ref_gigpo = gigpo(scores, step_returns, episode_ids, anchors, mode=mode, epsilon=epsilon)
    a_s = np.zeros(n)
    for k, rows in groups.items():
        base = task_mean[k[0]] + kappa[k] * (means[k] - task_mean[k[0]])
        std = np.std([step_returns[i] for i in rows], ddof=1) if len(rows) > 1 else 1.0
        for i in rows:
            a_s[i] = step_returns[i] - base
            if mode == "mean_std_norm":
                a_s[i] /= std + epsilon
    return ref_gigpo.episode_advantages + step_weight * a_s, a_s, kappa


def _batch(seed, tasks=3, rollouts=5, steps=6, states=4):
    """Rollouts of a few tasks that revisit a few states; returns depend on the state and noise."""
    rng = np.random.default_rng(seed)
    scores, rets, eps, anchors = [], [], [], []
    for t in range(tasks):
        value = rng.normal(0, 1, states)
        for _ in range(rollouts):
            score = float(rng.integers(0, 2))
            for _ in range(int(rng.integers(1, steps + 1))):
                s = int(rng.integers(0, states + 2))  # states >= `states` are seen once or rarely
                scores.append(score)
                rets.append((value[s] if s < states else 0.0) + rng.normal(0, 0.5))
                eps.append(f"task{t}")
                anchors.append(f"state{s}" if s < states else f"rare{t}-{len(anchors)}")
    return dict(scores=scores, step_returns=rets, episode_ids=eps, anchors=anchors)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gigpo_eb_is_its_definition(mode, seed):
    b = _batch(seed)
    want, want_s, kappa = plain_loop(**b, mode=mode, step_weight=0.7)
    got = gigpo_eb(**b, mode=mode, step_weight=0.7)
    np.testing.assert_allclose(got.step_advantages, want_s, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got.advantages, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.episode_advantages, gigpo(**b, mode=mode).episode_advantages)
    k = np.array(list(kappa.values()))
    assert (k > 0).any() and (k < 1).all()  # the batches exercise real shrinkage, not a limit


def test_groups_far_apart_and_full_trust_their_own_mean_as_gigpo_does():
    # two states per task, 40 rows each, values 10 apart, noise 0.1: kappa ~ 1
    rng = np.random.default_rng(0)
    rets = [10.0 * (i % 2) + rng.normal(0, 0.1) for i in range(160)]
    b = dict(
        scores=[float(i % 3 == 0) for i in range(160)],
        step_returns=rets,
        episode_ids=[i // 80 for i in range(160)],
        anchors=[f"s{i % 2}" for i in range(160)],
    )
    np.testing.assert_allclose(gigpo_eb(**b).advantages, gigpo(**b).advantages, atol=2e-4)


def test_states_that_do_not_differ_are_all_compared_with_the_task_mean():
    # every state's mean return is its task's: tau^2 = 0, kappa = 0, baseline = the task's mean
    rets = [1.0, 0.0, 0.0, 1.0, 3.0, 1.0, 1.0, 3.0]
    b = dict(
        scores=[1, 0, 0, 1, 1, 1, 0, 0],
        step_returns=rets,
        episode_ids=[0, 0, 0, 0, 1, 1, 1, 1],
        anchors=["a", "a", "b", "b", "a", "a", "b", "b"],
    )
    want = np.array(rets) - np.repeat([0.5, 2.0], 4)
    np.testing.assert_allclose(gigpo_eb(**b).step_advantages, want, atol=1e-6)


def test_without_a_group_of_two_rows_it_is_gigpo():
    b = dict(scores=[1, 0, 1], step_returns=[0.9, 0.1, 0.5], episode_ids=[0, 0, 0], anchors=["a", "b", "c"])
    for mode in ("mean_norm", "mean_std_norm"):
        np.testing.assert_array_equal(gigpo_eb(**b, mode=mode).advantages, gigpo(**b, mode=mode).advantages)


def test_a_singleton_gets_a_step_signal_where_gigpo_gives_none():
    b = _batch(0)
    single = np.bincount(gigpo(**b).step_groups)[gigpo(**b).step_groups] == 1
    assert single.any()
    assert np.all(gigpo(**b).step_advantages[single] == 0)
    assert np.any(gigpo_eb(**b).step_advantages[single] != 0)


def test_step_groups_do_not_cross_tasks():
    # the same anchor in two tasks: two groups, each shrunk toward its own task's mean
    b = dict(
        scores=[1, 0, 1, 0],
        step_returns=[2.0, 0.0, 12.0, 10.0],
        episode_ids=[0, 0, 1, 1],
        anchors=["s", "s", "s", "s"],
    )
    r = gigpo_eb(**b)
    assert r.step_groups.tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose(r.step_advantages, [1.0, -1.0, 1.0, -1.0], atol=1e-6)


def test_registered_with_gigpos_options_and_a_config_can_name_it():
    assert "gigpo_eb" in ESTIMATORS
    assert set(estimator_options("gigpo_eb")) == set(estimator_options("gigpo"))
    b = _batch(3)
    r = compute_advantages("gigpo_eb", traj_ids=None, mode="mean_std_norm", step_weight=0.5, **b)
    np.testing.assert_array_equal(r.advantages, gigpo_eb(**b, mode="mean_std_norm", step_weight=0.5).advantages)
    cfg = load_config("configs/sokoban_tiny.yaml", ["algorithm.estimator=gigpo_eb"])
    assert cfg.algorithm.estimator_options() == {"mode": "mean_norm"}
    with pytest.raises(ValueError, match="step_returns"):
        compute_advantages("gigpo_eb", scores=[1.0], episode_ids=[0], anchors=["a"])
