"""analyses/intervals.py: unions, time covered twice, peak concurrency and a queue's depth,
fed in batches.

Against brute force (how many intervals cover each nanosecond; the depth walked instant by
instant), on random small integer inputs (ties, nesting, zero lengths, same-instant events)
cut into batches at random places, and a hand-worked case.
"""

from __future__ import annotations

import numpy as np
import pytest

from nsysdiag.analyses.intervals import Busy, Depth, Union


def brute(start: np.ndarray, end: np.ndarray) -> tuple[int, int, int]:
    """(union, covered >= 2 times, peak in flight) by counting per nanosecond."""
    if not len(start):
        return 0, 0, 0
    lo, hi = int(start.min()), int(end.max())
    depth = np.zeros(max(hi - lo, 0), dtype=np.int64)
    for s, e in zip(start, end):
        depth[s - lo:e - lo] += 1
    return int((depth >= 1).sum()), int((depth >= 2).sum()), int(depth.max(initial=0))


def fed(start: np.ndarray, end: np.ndarray, cuts: list[int]) -> Busy:
    busy = Busy()
    for lo, hi in zip([0, *cuts], [*cuts, len(start)]):
        busy.feed(start[lo:hi], end[lo:hi])
    return busy


def test_hand_worked():
    # [0,10) [2,4) [3,12) [12,15) [20,20): union 15, twice [2,4)+[4,10) = 8, peak 3 at 3
    start = np.array([0, 2, 3, 12, 20])
    end = np.array([10, 4, 12, 15, 20])
    for cuts in ([], [1], [2, 3], [4]):
        b = fed(start, end, cuts)
        assert (b.ns, b.twice_ns, b.peak) == (15, 8, 3)


@pytest.mark.parametrize("seed", range(40))
def test_random_against_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    start = np.sort(rng.integers(0, 200, n))
    end = start + rng.choice([0, 1, 5, 30, 90], n) * rng.integers(0, 2, n) + rng.integers(0, 3, n)
    order = np.lexsort((rng.random(n), start))  # ties in any order
    start, end = start[order], end[order]
    cuts = sorted(set(rng.integers(0, n + 1, int(rng.integers(0, 5))).tolist()))
    b = fed(start, end, cuts)
    assert (b.ns, b.twice_ns, b.peak) == brute(start, end)
    u = Union()
    for lo, hi in zip([0, *cuts], [*cuts, n]):
        u.feed(start[lo:hi], end[lo:hi])
    assert u.ns == b.ns


def test_nothing_fed():
    b = Busy()
    b.feed(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    assert (b.ns, b.twice_ns, b.peak) == (0, 0, 0)


def depth_brute(t, delta, mark, lo, hi):
    """(time at each depth, marked events at each depth, changes) by walking the instants."""
    instants = sorted(set(t.tolist()))
    depth, after = 0, {}
    for x in instants:
        depth += int(delta[t == x].sum())
        after[x] = depth
    time_at, marked, changes = {}, {}, []
    for a, b in zip(instants, instants[1:]):
        if lo is not None and lo <= a < hi:
            time_at[after[a]] = time_at.get(after[a], 0) + b - a
    for x, m in zip(t.tolist(), mark.tolist()):
        if m:
            marked[after[x]] = marked.get(after[x], 0) + 1
    for x in instants:
        if int(delta[t == x].sum()) != 0:
            changes.append((x, after[x]))
    return time_at, marked, changes


@pytest.mark.parametrize("seed", range(30))
def test_depth_against_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 50))
    opens = rng.integers(0, 100, n)
    closes = opens + rng.integers(0, 20, n)  # 0: a +1 and a -1 at one instant
    t = np.r_[opens, closes, rng.integers(0, 120, 5)]
    delta = np.r_[np.ones(n, int), -np.ones(n, int), np.zeros(5, int)]
    mark = np.r_[rng.random(n) < 0.5, np.zeros(n, bool), np.ones(5, bool)]
    order = np.lexsort((rng.random(len(t)), t))  # same-instant events in any order
    t, delta, mark = t[order], delta[order], mark[order]
    nz = t[delta != 0]
    lo, hi = (int(nz.min()), int(nz.max())) if len(nz) else (None, None)
    d = Depth(lo, hi, keep_changes=True)
    cuts = sorted(set(rng.integers(0, len(t) + 1, int(rng.integers(0, 6))).tolist()))
    for a, b in zip([0, *cuts], [*cuts, len(t)]):
        d.feed(t[a:b], delta[a:b], mark[a:b])
    d.finish()
    time_at, marked, changes = depth_brute(t, delta, mark, lo, hi)
    assert d.time_at == time_at and d.marked_at == marked
    got = [(int(x), int(v)) for ts, vs in d.changes for x, v in zip(ts, vs)]
    assert got == changes
