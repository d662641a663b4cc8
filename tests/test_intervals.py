"""analyses/intervals.py: unions, time covered twice and peak concurrency, fed in batches.

Against a brute-force count of how many intervals cover each nanosecond, on random small
integer intervals (ties, nesting, zero lengths) cut into batches at random places, and a
hand-worked case.
"""

from __future__ import annotations

import numpy as np
import pytest

from nsysdiag.analyses.intervals import Busy, Union


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
