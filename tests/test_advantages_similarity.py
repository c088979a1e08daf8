"""Fast similarity grouping gives exactly the naive greedy difflib partition (docs/algorithm.md#similarity-grouping)."""

from __future__ import annotations

import difflib
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gigpo.advantages import gigpo, similarity_step_groups


def naive_groups(episode_ids, anchors, thresh):
    """The reference algorithm, literally: per episode group in batch order, join the first
    cluster whose representative passes SequenceMatcher(None, new, rep).ratio() >= thresh."""
    labels, next_label = [None] * len(anchors), 0
    for uid in sorted(set(episode_ids)):
        clusters = []  # [representative, label]
        for i in (i for i, e in enumerate(episode_ids) if e == uid):
            for rep, lab in clusters:
                if difflib.SequenceMatcher(None, anchors[i], rep).ratio() >= thresh:
                    labels[i] = lab
                    break
            else:
                clusters.append((anchors[i], next_label))
                labels[i] = next_label
                next_label += 1
    return labels


def same_partition(a, b):
    pairs = set(zip(list(a), list(b)))
    return len(pairs) == len(set(a)) == len(set(b))


def mutate(rng, s, k):
    s = list(s)
    for _ in range(k):
        op, i = rng.random(), rng.randrange(len(s) + 1)
        if op < 0.4 and i < len(s):
            s[i] = rng.choice("abcde xyz.")
        elif op < 0.7:
            s.insert(i, rng.choice("abcde xyz."))
        elif i < len(s):
            del s[i]
    return "".join(s)


def random_batch(seed, n_groups, rows, long):
    rng = random.Random(seed)
    eps, anchors = [], []
    for _ in range(n_groups):
        length = rng.randint(200, 320) if long else rng.randint(0, 40)
        base = [("".join(rng.choice("abcde xyz.") for _ in range(length))) for _ in range(3)]
        for _ in range(rows):
            r = rng.random()
            anchors.append(rng.choice(base) if r < 0.3 else mutate(rng, rng.choice(base), rng.randint(1, 12)))
            eps.append(rng.randrange(n_groups))  # interleaved episode groups
    return eps, anchors


@pytest.mark.parametrize("long", [False, True], ids=["short", "long_autojunk"])
@pytest.mark.parametrize("thresh", [0.5, 0.8, 0.9, 0.95])
def test_fast_similarity_equals_naive_on_random_batches(long, thresh):
    for seed in range(3):
        eps, anchors = random_batch(seed, 3, 12, long)
        fast = similarity_step_groups(np.asarray(eps), anchors, thresh)
        assert same_partition(fast.tolist(), naive_groups(eps, anchors, thresh))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.text("ab c", max_size=12)), min_size=1, max_size=25), st.floats(0.05, 0.95)
)
def test_fast_similarity_equals_naive_property(rows, thresh):
    eps, anchors = [e for e, _ in rows], [a for _, a in rows]
    fast = similarity_step_groups(np.asarray(eps), anchors, thresh)
    assert same_partition(fast.tolist(), naive_groups(eps, anchors, thresh))


def test_identical_strings_share_one_similarity_group():
    eps, anchors = random_batch(7, 2, 20, True)
    anchors = anchors + anchors[::-1]
    eps = eps + eps[::-1]
    labels = similarity_step_groups(np.asarray(eps), anchors, 0.95)
    seen = {}
    for e, a, lab in zip(eps, anchors, labels.tolist()):
        assert seen.setdefault((e, a), lab) == lab


def test_similarity_is_asymmetric_like_difflib_autojunk():
    """The representative's popular characters are junk (>= 200 chars): order changes groups."""
    rep_long = "x" + "ab" * 150  # 301 chars: 'a' and 'b' are popular in it → junk as 2nd argument
    short = "ab" * 90  # 180 chars: no autojunk when it is the 2nd argument
    r_fwd = difflib.SequenceMatcher(None, short, rep_long).ratio()
    r_bwd = difflib.SequenceMatcher(None, rep_long, short).ratio()
    thresh = (r_fwd + r_bwd) / 2
    assert r_fwd == 0.0 and r_bwd > 0.7
    a = similarity_step_groups(np.zeros(2, np.int64), [rep_long, short], thresh)
    b = similarity_step_groups(np.zeros(2, np.int64), [short, rep_long], thresh)
    assert (a[0] == a[1]) == (r_fwd >= thresh)
    assert (b[0] == b[1]) == (r_bwd >= thresh)


def test_similarity_never_merges_across_episode_groups():
    labels = similarity_step_groups(np.array([0, 1, 0, 1]), ["same", "same", "same", "same"], 0.9)
    assert labels.tolist() == [0, 1, 0, 1]


@pytest.mark.parametrize("thresh", [0, 1, 1.5, -0.2, True, "0.9"])
def test_similarity_threshold_outside_open_unit_interval_is_rejected(thresh):
    with pytest.raises(ValueError, match="similarity_threshold"):
        gigpo([1, 2], [1, 2], [0, 0], ["a", "b"], similarity_threshold=thresh)


def test_similarity_needs_string_anchors():
    with pytest.raises(ValueError, match=r"anchors\[1\] is a int"):
        gigpo([1, 2], [1, 2], [0, 0], ["a", 3], similarity_threshold=0.9)
