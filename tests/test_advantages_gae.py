"""GAE (PPO with a learned critic): hand-computed values, a plain loop, whitening, the registry entry,
and verl's own ``compute_gae_advantage_return`` (vectors in tests/data, made by make_gae_vectors.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.advantages import compute_advantages, estimator_options, gae, masked_whiten, needs_values, row_gae


def loop_gae(rewards, values, gamma, lam):
    """One row at a time, one token at a time, as the GAE paper writes it (no padding)."""
    advs, rets = [], []
    for r, v in zip(rewards, values):
        a = [0.0] * len(r)
        running = 0.0
        for t in reversed(range(len(r))):
            nxt = v[t + 1] if t + 1 < len(r) else 0.0
            delta = r[t] + gamma * nxt - v[t]
            running = delta + gamma * lam * running
            a[t] = running
        advs.append(np.array(a))
        rets.append(np.array(a) + np.asarray(v))
    return advs, rets


def _pad(rows, L):
    out = np.zeros((len(rows), L))
    mask = np.zeros((len(rows), L), bool)
    for i, x in enumerate(rows):
        out[i, : len(x)] = x
        mask[i, : len(x)] = True
    return out, mask


def test_hand_computed_example():
    # One row of 3 tokens, reward 1 on the last; values 0.5, 0.2, 0.4; gamma 0.9, lam 0.5.
    # delta2 = 1 - 0.4 = 0.6; delta1 = 0 + 0.9*0.4 - 0.2 = 0.16; delta0 = 0.9*0.2 - 0.5 = -0.32
    # A2 = 0.6; A1 = 0.16 + 0.45*0.6 = 0.43; A0 = -0.32 + 0.45*0.43 = -0.1265
    # Second row: one token, reward -1, value 0.3, then padding: A = -1.3, return -1.
    r = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0]])
    v = np.array([[0.5, 0.2, 0.4], [0.3, 9.0, 9.0]])  # values on padding are ignored
    mask = np.array([[1, 1, 1], [1, 0, 0]])
    adv, ret = gae(r, v, mask, gamma=0.9, lam=0.5)
    np.testing.assert_allclose(adv, [[-0.1265, 0.43, 0.6], [-1.3, 0.0, 0.0]], atol=1e-6)
    np.testing.assert_allclose(ret, [[0.3735, 0.63, 1.0], [-1.0, 0.0, 0.0]], atol=1e-6)
    assert adv.dtype == ret.dtype == np.float32


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.floats(-3, 3), st.floats(-3, 3)), min_size=1, max_size=9), min_size=1, max_size=7),
    st.sampled_from([0.0, 0.5, 0.95, 1.0]),
    st.sampled_from([0.0, 0.7, 0.95, 1.0]),
)
def test_vectorised_gae_equals_the_loop(rows, gamma, lam):
    rewards = [[r for r, _ in row] for row in rows]
    values = [[v for _, v in row] for row in rows]
    L = max(len(x) for x in rows) + 2  # extra right padding must not change anything
    R, mask = _pad(rewards, L)
    V, _ = _pad(values, L)
    adv, ret = gae(R, V, mask, gamma, lam)
    la, lr = loop_gae(rewards, values, gamma, lam)
    for i, row in enumerate(rows):
        np.testing.assert_allclose(adv[i, : len(row)], la[i], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ret[i, : len(row)], lr[i], rtol=1e-5, atol=1e-5)
        assert not adv[i, len(row) :].any() and not ret[i, len(row) :].any()


def test_gamma_lam_one_gives_reward_to_go_minus_value():
    # gamma = lam = 1 (verl-agent's defaults): A_t = sum of rewards from t - V_t, returns = reward-to-go.
    r = np.array([[0.0, 2.0, 0.0, 1.0]])
    v = np.array([[0.1, -0.4, 0.7, 0.2]])
    adv, ret = gae(r, v, np.ones_like(r, bool))
    np.testing.assert_allclose(ret, [[3.0, 3.0, 1.0, 1.0]], atol=1e-6)
    np.testing.assert_allclose(adv, ret - v, atol=1e-6)


def test_masked_whiten_matches_the_formula_and_ignores_padding():
    x = np.array([[1.0, 2.0, 50.0], [4.0, 60.0, 70.0]])
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    vals = np.array([1.0, 2.0, 4.0])
    expect = (vals - vals.mean()) / np.sqrt(vals.var(ddof=1) + 1e-8)
    w = masked_whiten(x, mask)
    np.testing.assert_allclose(w[mask.astype(bool)], expect, rtol=1e-6)
    assert not w[~mask.astype(bool)].any()


def test_row_gae_puts_each_rows_score_on_its_last_token():
    scores = np.array([1.0, -0.1, 0.0])
    values = [np.array([0.5, 0.25, 0.75]), np.array([0.2]), np.array([], np.float32)]
    adv, ret = row_gae(scores, values, whiten=False)
    np.testing.assert_allclose(ret[0], [1.0, 1.0, 1.0])
    np.testing.assert_allclose(adv[0], [0.5, 0.75, 0.25])
    np.testing.assert_allclose(ret[1], [-0.1], atol=1e-7)
    np.testing.assert_allclose(adv[1], [-0.3], atol=1e-7)
    assert len(adv[2]) == len(ret[2]) == 0
    whitened, _ = row_gae(scores, values)
    flat = np.concatenate(whitened)
    assert abs(flat.mean()) < 1e-6 and flat.std(ddof=1) == pytest.approx(1.0, rel=1e-4)


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="right-padded"):
        gae(np.zeros((1, 3)), np.zeros((1, 3)), [[1, 0, 1]])
    with pytest.raises(ValueError, match="lam"):
        gae(np.zeros((1, 2)), np.zeros((1, 2)), [[1, 1]], lam=1.5)
    with pytest.raises(ValueError, match="one shape"):
        gae(np.zeros((1, 2)), np.zeros((1, 3)), [[1, 1]])


def test_registry_entry_needs_values_and_returns_token_advantages():
    assert needs_values("ppo") and needs_values("gae") and not needs_values("gigpo")
    assert estimator_options("ppo") == {"gamma": 1.0, "lam": 1.0, "whiten": True}  # values is an input
    assert estimator_options("gae") == estimator_options("ppo")  # verl's name, an alias
    kw = dict(scores=[1.0, 0.0], episode_ids=[0, 0], traj_ids=[0, 1])
    with pytest.raises(ValueError, match="values"):
        compute_advantages("gae", **kw)
    with pytest.raises(ValueError, match="takes no critic values"):
        compute_advantages("grpo", values=[[0.0], [0.0]], **kw)
    values = [np.array([0.5, 0.5]), np.array([0.2])]
    res = compute_advantages("ppo", values=values, lam=0.9, **kw)
    alias = compute_advantages("gae", values=values, lam=0.9, **kw)
    np.testing.assert_array_equal(np.concatenate(alias.token_advantages), np.concatenate(res.token_advantages))
    adv, ret = row_gae(np.array([1.0, 0.0]), values, lam=0.9)
    for a, b in zip(res.token_advantages, adv):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(res.token_returns, ret):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(res.advantages, [adv[0].mean(), adv[1].mean()], rtol=1e-6)
    assert (res.step_groups == -1).all() and not res.step_advantages.any()


VERL = json.loads((Path(__file__).parent / "data" / "verl_gae_vectors.json").read_text())


def test_verl_vectors_record_their_source():
    src = VERL["source"]
    assert src["verl_version"] != "unknown" and src["made_by"] == "tests/data/make_gae_vectors.py"
    assert {"wheel_sha256", "sha256"} <= set(src) and len(VERL["cases"]) >= 5


@pytest.mark.parametrize("case", VERL["cases"], ids=[c["name"] for c in VERL["cases"]])
def test_gae_matches_verls_compute_gae_advantage_return(case):
    """tests/data/verl_gae_vectors.json: verl's own function on verl's per-token layout; gigpo's on
    its step rows (make_gae_vectors.py's docstring maps one onto the other)."""
    x, out, p = case["inputs"], case["outputs"], case["params"]
    mask = np.asarray(x["response_mask"], bool)
    values = np.asarray(x["values"])
    # The trainer's entry: one score and one value array per step row.
    rows = [values[i, :n] for i, n in enumerate(x["lengths"])]
    adv, ret = row_gae(np.asarray(x["scores"]), rows, gamma=p["gamma"], lam=p["lam"])
    np.testing.assert_allclose(np.concatenate(adv), np.asarray(out["advantages"])[mask], atol=1e-6, rtol=0)
    np.testing.assert_allclose(np.concatenate(ret), np.asarray(out["returns"])[mask], atol=1e-6, rtol=0)
    # The token-level pieces on verl's own padded arrays (random values in the padding included).
    a, r = gae(x["token_level_rewards"], values, mask, p["gamma"], p["lam"])
    np.testing.assert_allclose(masked_whiten(a, mask)[mask], np.asarray(out["advantages"])[mask], atol=1e-6, rtol=0)
    np.testing.assert_allclose(r[mask], np.asarray(out["returns"])[mask], atol=1e-6, rtol=0)
