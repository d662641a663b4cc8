"""compute/intervals.py: unions, time covered twice, peak concurrency and a queue's depth,
fed in batches.

Against brute force (how many intervals cover each nanosecond; the depth walked instant by
instant), on random small integer inputs (ties, nesting, zero lengths, same-instant events)
cut into batches at random places, and a hand-worked case.
"""

from __future__ import annotations

import numpy as np
import pytest

import nsysdiag
from nsysdiag.compute.intervals import Busy, Union, queue_depth


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
def test_queue_depth_against_brute_force(seed):
    """Raises, lowerings and unchanged marks in any order, several at one instant, a
    lowering at its raise's instant (nets to zero); the bounds from the nonzero events."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 50))
    opens = rng.integers(0, 100, n)
    closes = opens + rng.integers(0, 20, n)  # 0: a +1 and a -1 at one instant
    same = rng.integers(0, 120, 5)  # launches that did not queue
    lo, hi = int(opens.min()), int(closes.max())
    up, down = rng.permutation(opens), rng.permutation(closes)
    time_at, marked, (t, depth) = queue_depth(up.copy(), same.copy(), down.copy(), lo, hi,
                                              keep_changes=True)
    events = np.r_[opens, same, closes]
    deltas = np.r_[np.ones(n, int), np.zeros(5, int), -np.ones(n, int)]
    marks = np.r_[np.ones(n + 5, bool), np.zeros(n, bool)]
    want_time, want_marked, want_changes = depth_brute(events, deltas, marks, lo, hi)
    assert (time_at, marked) == (want_time, want_marked)
    assert list(zip(t.tolist(), depth.tolist())) == want_changes
    assert queue_depth(up, same, down, None, None)[0] == {}  # no bounds: no time


def test_queue_depth_by_hand():
    # calls returning at 10, 20, 30 whose kernels start at 40, 50, 60 (the method's
    # example): depths 1, 2, 3 at launch, then 2, 1, 0; a launch at 45 that did not queue
    # reads depth 2 and splits [40, 50) at depth 2 in two
    time_at, marked, (t, depth) = queue_depth(np.array([30, 10, 20]), np.array([45]),
                                              np.array([60, 40, 50]), 10, 60, keep_changes=True)
    assert time_at == {1: 10 + 10, 2: 10 + 10, 3: 10}
    assert marked == {1: 1, 2: 2, 3: 1}
    assert t.tolist() == [10, 20, 30, 40, 50, 60] and depth.tolist() == [1, 2, 3, 2, 1, 0]


# --- unions and merged stretches per group (ranges' instances) ---

from nsysdiag.compute import intervals  # noqa: E402


def own_work(g, s, e, kernel=None):
    """_compiled.own_work on rows sorted by group, with [s, e) as both kinds of pieces:
    ({group: union}, {group: kernel union}, [(group, stretch start, stretch end)])."""
    from nsysdiag.compute import compiled as _compiled

    kernel = np.ones(len(g), dtype=bool) if kernel is None else kernel
    groups, offset, stop = intervals.runs(g)
    count = stop - offset
    unions = [np.empty(len(groups), dtype=np.int64) for _ in range(2)]
    of, a, b = (np.empty(len(g), dtype=np.int64) for _ in range(3))
    m = _compiled.own_work(groups, offset, count, kernel, s, s, e, *unions, of, a, b)
    kernel_union, any_union = unions
    return (dict(zip(groups.tolist(), any_union.tolist())),
            dict(zip(groups.tolist(), kernel_union.tolist())),
            list(zip(of[:m].tolist(), a[:m].tolist(), b[:m].tolist())))


def test_own_work_by_hand():
    # group 1: [20,25) [10,20) [30,40) [12,15) [33,33); group 2: [6,9) [5,8); group 5:
    # [100,101); rows in any order within a group
    g = np.array([1, 1, 1, 1, 1, 2, 2, 5])
    s = np.array([20, 10, 30, 12, 33, 6, 5, 100])
    e = np.array([25, 20, 40, 15, 33, 9, 8, 101])
    kernel = np.array([False, False, True, True, True, False, False, True])
    union, kernel_union, stretches = own_work(g, s, e, kernel)
    assert union == {1: 25, 2: 4, 5: 1}
    # group 1's kernels: [30,40) [12,15) = 13; group 2 has none: 0
    assert kernel_union == {1: 13, 2: 0, 5: 1}
    # [10,20) and [20,25) touch: one stretch; the empty piece counts nowhere
    assert stretches == [(1, 10, 25), (1, 30, 40), (2, 5, 9), (5, 100, 101)]


def brute_groups(g, s, e, lo, hi, mask=None):
    """Per group: union length and merged stretches, nanosecond by nanosecond."""
    union, islands = {}, []
    for k in np.unique(g):
        rows = (g == k) if mask is None else (g == k) & mask
        covered = np.zeros(int(hi[g == k][0]) - int(lo[g == k][0]) + 2, dtype=bool)
        for a, b in zip(s[rows], e[rows]):
            covered[a - lo[g == k][0]:b - lo[g == k][0]] = True
        union[int(k)] = int(covered.sum())
        # stretches: intervals that touch merge, so walk the sorted intervals
        cur = None
        for a, b in sorted(zip(s[g == k].tolist(), e[g == k].tolist())):
            if cur is not None and a <= cur[1]:
                cur[1] = max(cur[1], b)
            else:
                if cur is not None:
                    islands.append((int(k), *cur))
                cur = [a, b]
        islands.append((int(k), *cur))
    return union, islands


@pytest.mark.parametrize("seed", range(30))
def test_own_work_against_brute_force(seed):
    """Random groups with nested, touching and equal intervals, in any order within a
    group."""
    rng = np.random.default_rng(seed)
    rows = []
    for k in sorted(rng.choice(50, size=rng.integers(1, 8), replace=False).tolist()):
        lo = int(rng.integers(-30, 30))
        hi = lo + int(rng.integers(1, 25))
        for _ in range(int(rng.integers(1, 7))):
            a = int(rng.integers(lo, hi))
            rows.append((k, a, int(rng.integers(a + 1, hi + 1)), lo, hi))
    rng.shuffle(rows)
    rows.sort(key=lambda r: r[0])  # stable: any order within a group
    g, s, e, lo, hi = (np.array(c, dtype=np.int64) for c in zip(*rows))
    mask = rng.random(len(g)) < 0.5
    union, islands = brute_groups(g, s, e, lo, hi)
    masked, _ = brute_groups(g, s, e, lo, hi, mask)
    got_union, got_masked, got_islands = own_work(g, s, e, mask)
    assert got_union == union and got_masked == masked and got_islands == islands


def test_own_pieces_clips_to_the_window_and_groups_by_instance():
    """Each row on its instance's device goes to the instance's next slot, its pieces
    clipped to the window as SQL's greatest/least do (an unknown bound left out); rows on
    another device, of an instance without one, or of no known device are left out."""
    from nsysdiag.compute import compiled as _compiled

    # instances 1 (device 0, window [100, 200]) and 2 (device 1, window [300, unknown));
    # instance 3 has no device
    udevice = np.array([0, 0, 1, 0])
    uknown = np.array([False, True, True, False])
    wstart = np.array([0, 100, 300, 0])
    wend, wend_ok = np.array([0, 200, 0, 0]), np.array([False, True, False, False])
    rows = [  # instance, kernel, device (None: unknown), start, end, api_end
        (2, True, 1, 310, 350, 305),     # inside: [310, 350) and [305, 350)
        (1, True, 0, 90, 150, 80),       # starts before the window: [100, 150), [100, 150)
        (1, False, 1, 120, 130, 110),    # another device: left out
        (1, True, 0, 150, None, None),   # unknown end -> the window's; unknown return
        (3, True, 0, 10, 20, 5),         # instance without a device: left out
        (2, False, None, 320, 330, 315),  # unknown device: left out
        (2, False, 1, 320, None, 400),   # end unknown on both sides: empty pieces
        (1, True, 0, 180, 250, 190),     # ends after the window: [180, 200), [190, 200)
    ]
    inst, kind, dev, start, end, api = zip(*rows)
    ints = [np.array([0 if v is None else v for v in c], dtype=np.int64)
            for c in (dev, end, api)]
    oks = [np.array([v is not None for v in c]) for c in (dev, end, api)]
    placed = np.bincount(np.array(inst), minlength=4)
    offset = np.cumsum(placed) - placed
    fill = np.zeros(4, dtype=np.int64)
    kernel = np.zeros(len(rows), dtype=bool)
    ws, ps, e = (np.zeros(len(rows), dtype=np.int64) for _ in range(3))
    _compiled.own_pieces(np.array(inst), np.array(kind), ints[0], oks[0], np.array(start),
                         ints[1], oks[1], ints[2], oks[2], udevice, uknown, wstart, wend,
                         wend_ok, offset, fill, kernel, ws, ps, e)
    assert fill.tolist() == [0, 3, 2, 0]
    got = {g: [(bool(kernel[j]), int(ws[j]), int(ps[j]), int(e[j]))
               for j in range(offset[g], offset[g] + fill[g])] for g in (1, 2)}
    assert got[1] == [(True, 100, 100, 150), (True, 150, 100, 200), (True, 180, 190, 200)]
    assert got[2] == [(True, 310, 305, 350), (False, 320, 400, _compiled.NO_END)]
    # the unions and stretches of those pieces: instance 1 covers [100, 200) (kernels
    # only), pending [100, 200); instance 2 [310, 350), pending [305, 350)
    unions = [np.empty(2, dtype=np.int64) for _ in range(2)]
    of, a, b = (np.empty(len(rows), dtype=np.int64) for _ in range(3))
    m = _compiled.own_work(np.array([1, 2]), offset[[1, 2]], fill[[1, 2]], kernel, ws, ps, e,
                           *unions, of, a, b)
    assert unions[0].tolist() == [100, 40] and unions[1].tolist() == [100, 40]
    assert list(zip(of[:m].tolist(), a[:m].tolist(), b[:m].tolist())) == [
        (1, 100, 200), (2, 305, 350)]


@pytest.mark.parametrize("order", ["ascending", "descending", "random"])
def test_search_right_matches_numpy(order):
    """The galloping search answers as np.searchsorted(side='right'), duplicates and values
    outside the array included, whatever the order of the values."""
    from nsysdiag.compute import compiled as _compiled

    rng = np.random.default_rng(9)
    a = np.sort(rng.integers(0, 300, 1000))
    v = rng.integers(-10, 320, 3000)
    v = {"ascending": np.sort(v), "descending": np.sort(v)[::-1].copy(), "random": v}[order]
    out = np.empty(len(v), dtype=np.int64)
    _compiled.search_right(a, v, out)
    assert out.tolist() == np.searchsorted(a, v, side="right").tolist()
    _compiled.search_right(a[:0], v, out)
    assert not out.any()


def _segments(builder, tmp_path, rows, in_order):
    """``intervals.segments`` over VALUES rows (key, start_ns, sort_end, x), as lists."""
    from nsysdiag.compute import intervals

    b = builder("current")
    b.kernel(0, 1)
    values = ", ".join(f"({k}, {s}, {'NULL' if e is None else e}, {x})" for k, s, e, x in rows)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        out = [(key, list(map(int, cols["start_ns"])), list(map(int, cols["x"])))
               for key, cols in intervals.segments(
                   rep, f"SELECT * FROM (VALUES {values}) t(key, start_ns, sort_end, x)",
                   ("key",), ("start_ns", "x"), order="start_ns, sort_end", in_order=in_order)]
        rep.sql("SELECT 1").fetchall()  # the connection is free again
        return out


def test_segments_in_stored_order(builder, tmp_path):
    # two keys interleaved, each in start order; a NULL sort_end sorts last among ties
    rows = [(1, 10, 15, 0), (2, 5, 9, 1), (1, 12, None, 2), (2, 7, 8, 3), (1, 12, None, 3),
            (2, 7, 9, 4)]
    stored = _segments(builder, tmp_path, rows, in_order=True)
    assert stored == [((1,), [10, 12, 12], [0, 2, 3]), ((2,), [5, 7, 7], [1, 3, 4])]
    by_key = {}
    for key, starts, xs in _segments(builder, tmp_path, rows, in_order=False):
        by_key.setdefault(key, ([], []))
        by_key[key][0].extend(starts)
        by_key[key][1].extend(xs)
    assert {k: s for k, (s, _) in by_key.items()} == {(1,): [10, 12, 12], (2,): [5, 7, 7]}


@pytest.mark.parametrize("rows", [
    [(1, 10, 15, 0), (1, 9, 20, 1)],            # a start before the last one
    [(1, 10, 15, 0), (2, 3, 4, 1), (1, 10, 14, 2)],  # a tie on start, the end before
    [(1, 10, None, 0), (1, 10, 14, 1)],         # a NULL end sorts after every end
])
def test_segments_in_stored_order_refuses_rows_out_of_order(builder, tmp_path, rows):
    from nsysdiag.compute.intervals import OutOfOrder

    with pytest.raises(OutOfOrder):
        _segments(builder, tmp_path, rows, in_order=True)
    assert len(_segments(builder, tmp_path, rows, in_order=False)) >= 1


@pytest.mark.parametrize("order", ["ascending", "random"])
def test_inside_units_matches_brute_force(order):
    """host_stall's test of each call against its thread's units: inside when some unit of
    its thread holds it (start <= t < end), for calls of three threads interleaved, in start
    order (as stored) or not, fed in two batches that keep the searches' state."""
    from nsysdiag.compute import compiled as _compiled

    rng = np.random.default_rng(3)
    n_threads = 3
    u_code = rng.integers(0, n_threads, 60)
    u_start = rng.integers(0, 1000, 60)
    u_end = u_start + rng.integers(0, 120, 60)
    order_u = np.lexsort((u_start, u_code))
    codes, starts, ends = u_code[order_u], u_start[order_u], u_end[order_u]
    heads = np.searchsorted(codes, np.arange(n_threads + 1))
    reach = ends.copy()
    for k in range(n_threads):
        reach[heads[k]:heads[k + 1]] = np.maximum.accumulate(reach[heads[k]:heads[k + 1]])
    c = rng.integers(0, n_threads, 2000)
    t = rng.integers(-20, 1200, 2000)
    if order == "ascending":
        t = np.sort(t)
    want = np.array([bool(((codes == k) & (starts <= x) & (x < ends)).any())
                     for k, x in zip(c, t)])
    last = np.zeros(n_threads, dtype=np.int64)
    got = np.empty(len(c), dtype=bool)
    for part in (slice(0, 700), slice(700, None)):
        out = np.empty(len(c[part]), dtype=bool)
        _compiled.inside_units(c[part], t[part], heads, starts, reach, last, out)
        got[part] = out
    assert got.tolist() == want.tolist()
    assert want.any() and not want.all()
