"""The bounds behind fast similarity grouping are sound, and every matcher it may use agrees with
difflib (gigpo.advantages.similarity; docs/algorithm.md#similarity-grouping).

A wrong bound would silently split a group that the reference joins, so each ingredient is
checked on its own against difflib / a plain DP, on short and >= 200-char strings (autojunk), in
both argument orders.
"""

from __future__ import annotations

import difflib
import random

import numpy as np
import pytest

from gigpo.advantages import similarity
from gigpo.advantages.similarity import matches_needed, similarity_step_groups
from gigpo.advantages.synthetic import alfworld_like, search_like

from test_advantages_similarity import naive_groups, same_partition


def lcs_dp(a: str, b: str) -> int:
    """Longest common subsequence length, textbook O(len(a) * len(b)) DP."""
    prev = [0] * (len(b) + 1)
    for ca in a:
        cur = [0]
        for j, cb in enumerate(b):
            cur.append(prev[j] + 1 if ca == cb else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def random_pairs(seed: int, count: int, lo: int, hi: int, alphabet: str = "abcde xyz.AQ7"):
    """Pairs of related strings (one a mutation of the other) and unrelated ones."""
    rng = random.Random(seed)
    for _ in range(count):
        a = "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))
        if rng.random() < 0.6:
            b = list(a)
            for _ in range(rng.randint(0, max(1, len(a) // 10))):
                i = rng.randrange(len(b) + 1)
                if rng.random() < 0.5 and i < len(b):
                    del b[i]
                else:
                    b.insert(i, rng.choice(alphabet))
            b = "".join(b)
        else:
            b = "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))
        yield a, b


def difflib_matches(a: str, b: str) -> int:
    return sum(block.size for block in difflib.SequenceMatcher(None, a, b).get_matching_blocks())


@pytest.mark.parametrize("thresh", [0.05, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999, 1 / 3, 2 / 3])
def test_matches_needed_is_the_exact_float_boundary_of_difflib_ratio(thresh):
    totals = np.arange(1, 3000)
    need = matches_needed(totals, thresh)
    for t, m in zip(totals.tolist(), need.tolist()):
        assert 2.0 * m / t >= thresh  # m passes with difflib's own expression...
        assert m == 0 or 2.0 * (m - 1) / t < thresh  # ...and m - 1 does not


@pytest.mark.parametrize("lo,hi", [(0, 30), (200, 320)], ids=["short", "long_autojunk"])
def test_difflib_matches_never_exceed_lcs_in_either_argument_order(lo, hi):
    """M <= LCS: difflib's matching blocks are increasing and disjoint, a common subsequence."""
    for a, b in random_pairs(1, 60, lo, hi):
        lcs = lcs_dp(a, b)
        assert difflib_matches(a, b) <= lcs
        assert difflib_matches(b, a) <= lcs


def test_rapidfuzz_lcs_with_cutoff_is_exact_at_and_above_the_cutoff():
    """The bound relies on LCSseq.similarity(a, b, score_cutoff=k) >= k exactly when LCS >= k."""
    lcsseq = pytest.importorskip("rapidfuzz.distance").LCSseq
    for a, b in random_pairs(2, 80, 0, 120, alphabet="ab cdé\u4e2d\U0001f600"):
        lcs = lcs_dp(a, b)
        assert lcsseq.similarity(a, b) == lcs
        for k in {max(lcs - 1, 1), lcs, lcs + 1}:
            assert (lcsseq.similarity(a, b, score_cutoff=k) >= k) == (lcs >= k)


def test_installed_matcher_gives_difflib_ratios_incl_autojunk_both_orders():
    """cydifflib (optional) must agree with difflib bit for bit, or the groups could differ."""
    for a, b in list(random_pairs(3, 60, 190, 420)) + list(random_pairs(4, 60, 0, 40)):
        for x, y in ((a, b), (b, a)):
            want = difflib.SequenceMatcher(None, x, y).ratio()
            m = similarity.SequenceMatcher(None, "", y)
            m.set_seq1(x)
            assert m.ratio() == want


def many_cluster_batch(seed: int):
    """One episode group with > 32 clusters (exercises the vectorised length bound), mixed lengths."""
    rng = random.Random(seed)
    base = ["".join(rng.choice("abcdefgh ij") for _ in range(rng.randint(150, 260))) for _ in range(45)]
    anchors = []
    for _ in range(90):
        s = rng.choice(base)
        if rng.random() < 0.5:
            i = rng.randrange(len(s))
            s = s[:i] + "".join(rng.choice("abcdefgh ij") for _ in range(rng.randint(1, 15))) + s[i:]
        anchors.append(s)
    return [0] * len(anchors), anchors


@pytest.mark.parametrize("thresh", [0.6, 0.9, 0.95])
def test_fast_equals_naive_with_many_clusters(thresh):
    eps, anchors = many_cluster_batch(5)
    fast = similarity_step_groups(np.asarray(eps), anchors, thresh)
    assert same_partition(fast.tolist(), naive_groups(eps, anchors, thresh))


@pytest.mark.parametrize(
    "make,shape,thresh",
    [(search_like, (6, 5, 4), 0.9), (search_like, (6, 5, 4), 0.95), (alfworld_like, (1, 4, 20), 0.95)],
)
def test_fast_equals_naive_on_benchmark_data(make, shape, thresh):
    ep, _, anchors, _ = make(*shape, seed=11)
    fast = similarity_step_groups(ep, anchors, thresh)
    assert same_partition(fast.tolist(), naive_groups(ep.tolist(), anchors, thresh))


@pytest.mark.parametrize("missing", ["rapidfuzz", "cydifflib"])
def test_fallbacks_without_optional_speedups_give_the_same_groups(monkeypatch, missing):
    """Without rapidfuzz the bound is difflib's quick_ratio; without cydifflib, difflib itself."""
    if missing == "rapidfuzz":
        monkeypatch.setattr(similarity, "LCSseq", None)
    else:
        monkeypatch.setattr(similarity, "SequenceMatcher", difflib.SequenceMatcher)
    ep, _, anchors, _ = search_like(3, 5, 4, seed=3)
    fast = similarity_step_groups(ep, anchors, 0.9)
    assert same_partition(fast.tolist(), naive_groups(ep.tolist(), anchors, 0.9))
