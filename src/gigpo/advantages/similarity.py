"""Similarity step groups (docs/algorithm.md#similarity-grouping; the Search config's ``enable_similarity``).

``similarity_step_groups`` gives exactly the reference's greedy single pass: per episode group,
in batch order, a row joins the FIRST cluster whose representative (its first member) has
``difflib.SequenceMatcher(None, row_obs, representative).ratio() >= thresh`` (default autojunk),
else it founds a new cluster. The speed comes from never calling ``ratio()`` when a sound upper
bound already shows the pair cannot reach ``thresh``:

``ratio = 2.0 * M / (la + lb)`` where M is the total size of difflib's matching blocks. Those
blocks are disjoint and increase in both strings (``get_matching_blocks`` contract), so their
concatenation is a common subsequence: M <= LCS(a, b) <= min(la, lb). ``2.0 * M / T`` is
monotone in M (IEEE multiplication and division by a positive number are monotone), so with
``need`` = the smallest integer m with ``2.0 * m / T >= thresh`` (the same float expression as
difflib's), a pair with ``min(la, lb) < need`` (difflib's real_quick_ratio bound) or
``LCS < need`` cannot pass and is skipped. The LCS is rapidfuzz's bit-parallel C
implementation (``LCSseq.similarity``, an integer, exact). Bounds only skip pairs; every join is
decided by difflib's own ``ratio()`` (cydifflib when installed: the same algorithm compiled).
"""

from __future__ import annotations

import difflib
import numbers

import numpy as np

from ._labels import first_rows, rank_reps
from ._types import Anchors, ArrayLike, LabelArray

try:  # Optional: cydifflib is difflib's own algorithm compiled with Cython (same ratios, faster).
    from cydifflib import SequenceMatcher
except ImportError:  # pragma: no cover - depends on the environment
    SequenceMatcher = difflib.SequenceMatcher

try:  # rapidfuzz is a core dependency; without it the bound falls back to difflib's quick_ratio.
    from rapidfuzz.distance import LCSseq
except ImportError:  # pragma: no cover - depends on the environment
    LCSseq = None  # type: ignore[assignment]


def matches_needed(total: np.ndarray, thresh: float) -> np.ndarray:
    """Smallest integer m with ``2.0 * m / total >= thresh`` (difflib's float formula), per entry.

    total int [k] > 0 (= la + lb). ceil(thresh * total / 2) can be off by one after rounding, so
    it is corrected in both directions with the exact expression difflib evaluates.
    """
    t = np.maximum(total, 1).astype(np.float64)  # total 0 (both empty) never reaches a bound check
    m = np.ceil(thresh * t / 2.0)
    for _ in range(3):  # each pass moves m by at most one; 3 is more than enough
        m = np.where((m > 0) & (2.0 * (m - 1) / t >= thresh), m - 1, m)
        m = np.where(2.0 * m / t < thresh, m + 1, m)
    return m.astype(np.int64)


class _Group:
    """Greedy clustering state of one episode group, identical to the naive algorithm.

    docs/algorithm.md#similarity-grouping.
    """

    def __init__(self, strings: list[str], thresh: float, need: np.ndarray, pair_cache: dict):
        self.strings = strings  # all anchors; a string id is the row of its first occurrence
        self.thresh = thresh
        self.need = need  # int64 [max total + 1]: matches_needed per total length la + lb
        self.need_list = need.tolist()
        self.pair_cache = pair_cache  # (string id, representative id) -> passes, batch-wide
        self.reps: list[int] = []  # cluster -> string id of its representative
        self.rep_len = np.empty(16, np.int64)  # cluster -> len(representative) (grown by doubling)
        self.matchers: dict = {}  # cluster -> matcher with seq2 = representative

    def passes(self, u: int, c: int) -> bool:
        """Exact test: SequenceMatcher(None, strings[u], representative of c).ratio() >= thresh."""
        key = (u, self.reps[c])
        hit = self.pair_cache.get(key)
        if hit is None:
            m = self.matchers.get(c)
            if m is None:  # set_seq2 builds b2j (the expensive part) once per representative
                m = self.matchers[c] = SequenceMatcher(None, "", self.strings[key[1]])
            m.set_seq1(self.strings[u])  # SequenceMatcher(None, new_obs, representative)
            hit = self.pair_cache[key] = m.ratio() >= self.thresh
        return hit

    def candidates(self, u: int, start: int):
        """Clusters >= start, in creation order, that the bounds cannot rule out (lazily: the
        scan stops at the first cluster that passes, so later LCS bounds are never computed)."""
        k = len(self.reps)
        if start >= k:
            return
        a = self.strings[u]
        la = len(a)
        if k - start > 32:  # many clusters: the length bound for all of them in one numpy call
            lb = self.rep_len[start:k]
            need = self.need[la + lb]
            cand = (np.flatnonzero(need <= np.minimum(la, lb)) + start).tolist()
        else:
            need_of = self.need_list
            cand = [
                c for c, lb in enumerate(self.rep_len[start:k].tolist(), start) if need_of[la + lb] <= min(la, lb)
            ]  # real_quick_ratio bound
        for c in cand:
            b = self.strings[self.reps[c]]
            need = self.need_list[la + len(b)]
            if LCSseq is not None:
                # LCS bound: similarity() is 0 below the cutoff, and need >= 1 here.
                if LCSseq.similarity(a, b, score_cutoff=need) < need:
                    continue
            elif difflib.SequenceMatcher(None, a, b).quick_ratio() < self.thresh:  # pragma: no cover
                continue
            yield c

    def scan(self, u: int, start: int) -> int:
        """First cluster >= start that u joins, founding a new cluster when none does."""
        for c in self.candidates(u, start):
            if self.passes(u, c):
                return c
        k = len(self.reps)
        if k == len(self.rep_len):
            self.rep_len = np.concatenate([self.rep_len, np.empty(k, np.int64)])
        self.rep_len[k] = len(self.strings[u])
        self.reps.append(u)
        return k

    def run(self, sids: list[int]) -> list[int]:
        """Cluster index per row (local to this group) for the rows' string ids, in batch order."""
        landed: dict[int, int] = {}  # string id -> cluster it joined on its last evaluation
        out = []
        for u in sids:
            prev = landed.get(u)
            if prev is None:
                c = self.scan(u, 0)
            elif self.reps[prev] != u or self.passes(u, prev):
                # A repeat joins the cluster its first occurrence joined: earlier clusters are
                # unchanged and failed then (ratio depends only on the pair), and that cluster
                # passed. If the string founded it, ratio(x, x) >= thresh is checked: 1.0 except
                # in pathological autojunk cases, which fall through to the clusters created since.
                c = prev
            else:
                c = self.scan(u, prev + 1)
            landed[u] = c
            out.append(c)
        return out


def similarity_step_groups(episode_codes: ArrayLike, anchors: Anchors, thresh: float) -> LabelArray:
    """Greedy similarity clustering per episode group, in batch order (docs/algorithm.md#similarity-grouping).

    A row joins the first cluster (in creation order) whose representative (its first member)
    has ``difflib.SequenceMatcher(None, row_obs, representative).ratio() >= thresh`` (default
    autojunk); otherwise it founds a new cluster. episode_codes int [N] (non-negative),
    anchors str [N], 0 < thresh < 1. Returns int64 labels [N], first-appearance order.
    """
    t: object = thresh  # checked as any object: mypy takes a float for never a numbers.Real
    if isinstance(t, bool) or not (isinstance(t, numbers.Real) and 0.0 < float(t) < 1.0):
        raise ValueError(f"similarity_threshold must be a float in (0, 1) (or None for exact grouping), got {thresh!r}")
    thresh = float(t)
    codes = np.asarray(episode_codes)
    n = len(codes)
    if len(anchors) != n:
        raise ValueError(f"anchors has {len(anchors)} rows but the other inputs have {n}; pass row-aligned arrays")
    items = anchors.tolist() if isinstance(anchors, np.ndarray) else list(anchors)
    if not set(map(type, items)) <= {str}:
        bad = next((i for i, a in enumerate(items) if not isinstance(a, str)), None)
        if bad is not None:
            raise ValueError(
                f"anchors[{bad}] is a {type(items[bad]).__name__}; similarity grouping needs str "
                "anchors (use similarity_threshold=None for exact grouping of other types)"
            )
        items = [str(a) for a in items]  # str subclasses (e.g. numpy.str_): same text, same ratios
    if n == 0:
        return np.zeros(0, np.int64)
    sid = first_rows(items)  # string id = row of its first occurrence in the batch
    ep = codes.astype(np.int64, copy=False)
    order = np.argsort(ep, kind="stable")  # batch order kept inside each episode group
    ep_sorted = ep[order]
    cuts = np.flatnonzero(ep_sorted[1:] != ep_sorted[:-1]) + 1
    pair_cache: dict = {}
    need = matches_needed(np.arange(2 * max(map(len, items)) + 1), thresh)
    rep_row = np.empty(n, np.int64)  # first row of each row's cluster
    for rows in np.split(order, cuts):
        group = _Group(items, thresh, need, pair_cache)
        clusters = np.asarray(group.run(sid[rows].tolist()), np.int64)
        first_of = rows[np.unique(clusters, return_index=True)[1]]  # clusters are 0..k-1
        rep_row[rows] = first_of[clusters]
    return rank_reps(rep_row)
