"""The streaming sweep behind the CPU components of ranges, and intervals.Coverage behind its
GPU busy time, against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import nsysdiag
from nsysdiag.compute import intervals as iv_mod
from nsysdiag.compute import sweep


def reference(intervals, probes, n_classes):
    """Pieces by the definition, one key at a time, then covered time at each probe."""
    out = []
    for key, t in probes:
        rows = sorted((s, -e, c) for k, s, e, c in intervals if k == key and e >= s)
        furthest, total = None, [0] * n_classes
        for s, neg_e, c in rows:
            e = -neg_e
            lo = s if furthest is None else max(s, furthest)
            furthest = e if furthest is None else max(furthest, e)
            if e > lo and lo <= t:
                total[c] += min(e, t) - lo
        out.append(total)
    return np.array(out, dtype=np.int64).reshape(len(probes), n_classes)


def sums(rep, intervals, probes, n_classes, n_groups, in_order=False):
    rep.con.register("iv", pa.table(dict(zip(("key", "start_ns", "end_ns", "cls"),
                                              map(list, zip(*intervals))))))
    rep.con.register("pr", pa.table(dict(zip(("key", "ts", "grp", "sign"),
                                              map(list, zip(*probes))))))
    return sweep.covered_sums(rep, "SELECT * FROM iv", "SELECT * FROM pr", n_classes, n_groups,
                              in_order=in_order)


def _sorted_per_key(intervals):
    last = {}
    for k, s, e, c in intervals:
        if e < s:
            continue
        if k in last and (s, -e, c) < last[k]:
            return False
        last[k] = (s, -e, c)
    return True


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("batch_rows", [1, 3, 64, 1 << 20])
@pytest.mark.parametrize("stored", ["sorted read", "in start order", "shuffled"])
def test_sweep_matches_reference(tmp_path, monkeypatch, seed, batch_rows, stored):
    """The sums by the sorted read, and by the read as stored (``in_order``): every key's
    intervals in order, the keys interleaved, gives the same sums without the sorted read;
    intervals out of order fall back to it."""
    monkeypatch.setattr(sweep, "BATCH_ROWS", batch_rows)
    sorted_reads = []
    real = sweep._sorted_read
    monkeypatch.setattr(sweep, "_sorted_read", lambda *a: sorted_reads.append(1) or real(*a))
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    keys = (rng.integers(0, 4, n) * 7 - 7).tolist()  # includes a negative key
    starts = rng.integers(0, 200, n)
    ends = starts + rng.integers(-5, 60, n)  # some end before their start: ignored
    intervals = list(zip(keys, starts.tolist(), ends.tolist(), rng.integers(0, 3, n).tolist()))
    if stored == "in start order":
        intervals.sort(key=lambda r: (r[1], -r[2], r[3]))
    m = 50
    probe_keys = (rng.integers(0, 5, m) * 7 - 7).tolist()  # includes a key with no interval
    probe_ts = np.concatenate([rng.integers(-10, 280, m - 10), starts[:5], ends[:5]])[:m]
    probes = list(zip(probe_keys, probe_ts.tolist(), rng.integers(0, 6, m).tolist(),
                      rng.choice([-1, 1], m).tolist()))
    want = np.zeros((6, 3), dtype=np.int64)
    at = reference(intervals, [(k, t) for k, t, _, _ in probes], 3)
    for (_, _, g, sign), row in zip(probes, at):
        want[g] += sign * row
    with nsysdiag.open(_export(tmp_path)) as rep:
        got = sums(rep, intervals, probes, 3, 6, in_order=stored != "sorted read")
    np.testing.assert_array_equal(got, want)
    assert len(sorted_reads) == (stored == "sorted read" or not _sorted_per_key(intervals))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 20])
def test_coverage_matches_reference(tmp_path, monkeypatch, seed, batch_rows):
    monkeypatch.setattr(iv_mod, "BATCH_ROWS", batch_rows)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 60))
    keys = (rng.integers(0, 4, n) * 7 - 7).tolist()
    starts = rng.integers(0, 200, n)
    ends = starts + rng.integers(-5, 60, n)  # some end before their start: ignored
    intervals = list(zip(keys, starts.tolist(), ends.tolist(), [0] * n))
    m = 80
    probe_keys = np.array((rng.integers(0, 5, m) * 7 - 7).tolist())  # a key with none too
    probe_ts = np.concatenate([rng.integers(-10, 280, m - 20), starts[:10], ends[:10]])[:m]
    probe_ts = np.resize(probe_ts, m)
    want = reference(intervals, list(zip(probe_keys.tolist(), probe_ts.tolist())), 1)[:, 0]
    with nsysdiag.open(_export(tmp_path)) as rep:
        rep.con.register("iv", pa.table(dict(zip(("key", "start_ns", "end_ns"),
                                                  map(list, zip(*[r[:3] for r in intervals]))))))
        cover = iv_mod.Coverage.of_query(rep, "SELECT * FROM iv")
    np.testing.assert_array_equal(cover.covered(probe_keys, probe_ts), want)
    lo, hi = np.minimum(probe_ts, probe_ts[::-1]), np.maximum(probe_ts, probe_ts[::-1])
    np.testing.assert_array_equal(cover.between(probe_keys, lo, hi),
                                  cover.covered(probe_keys, hi) - cover.covered(probe_keys, lo))


@pytest.mark.parametrize("order", ["ascending", "random", "descending", "sawtooth"])
def test_compiled_covered_any_order(order):
    # the galloping search against a plain binary search, over 5,000 pieces
    from nsysdiag.compute import compiled as _compiled

    rng = np.random.default_rng(7)
    lo = np.cumsum(rng.integers(1, 50, 5000)).astype(np.int64)
    hi = lo + rng.integers(1, 40, 5000)
    hi = np.minimum(hi, np.r_[lo[1:], hi[-1]])  # disjoint
    before = np.r_[0, np.cumsum(hi - lo)[:-1]].astype(np.int64)
    ts = rng.integers(-100, int(hi[-1]) + 100, 20000)
    ts = {"ascending": np.sort(ts), "random": ts, "descending": np.sort(ts)[::-1],
          "sawtooth": np.concatenate([np.sort(part) for part in np.array_split(ts, 37)])}[order]
    ts = np.ascontiguousarray(ts, dtype=np.int64)
    j = np.searchsorted(lo, ts, side="right") - 1
    at = np.maximum(j, 0)
    want = np.where(j >= 0, before[at] + np.minimum(ts, hi[at]) - lo[at], 0)
    got = np.empty(len(ts), dtype=np.int64)
    _compiled.covered(lo, hi, before, ts, got)
    np.testing.assert_array_equal(got, want)


def test_coverage_by_hand(tmp_path):
    # device 0: [0, 100) and [50, 80) inside it, then [120, 150): busy 130 in all;
    # before 60: 60; inside [90, 130]: 10 + 10 = 20; device 1 has none
    with nsysdiag.open(_export(tmp_path)) as rep:
        rep.con.register("iv", pa.table({"key": [0, 0, 0], "start_ns": [0, 50, 120],
                                         "end_ns": [100, 80, 150]}))
        cover = iv_mod.Coverage.of_query(rep, "SELECT * FROM iv")
    keys = np.array([0, 0, 0, 0, 1])
    assert cover.covered(keys, np.array([60, 1000, -5, 120, 500])).tolist() == [60, 130, 0, 100, 0]
    assert cover.between(np.array([0]), np.array([90]), np.array([130])).tolist() == [20]


def test_nested_calls_count_once(tmp_path):
    # a runtime call [0, 100) (class 0) holding a driver call [10, 30) (class 1), then a
    # call [90, 150) (class 2) that overlaps the first: class 0 gets 100, 2 gets 50, 1 none;
    # the window [50, 120] holds 50 of class 0 and 20 of class 2
    intervals = [(1, 0, 100, 0), (1, 10, 30, 1), (1, 90, 150, 2)]
    probes = [(1, 50, 0, -1), (1, 120, 0, 1), (1, 1000, 1, 1), (2, 500, 2, 1)]
    with nsysdiag.open(_export(tmp_path)) as rep:
        got = sums(rep, intervals, probes, 3, 3)
    assert got.tolist() == [[50, 0, 20], [100, 0, 50], [0, 0, 0]]


def _export(tmp_path):
    from fixtures.make_fixtures import standard

    path = tmp_path / "t.sqlite"
    if not path.exists():
        standard("current").write(path)
    return path


def holding(intervals, key, t):
    """The class of the piece (by the definition) that holds [t, t + 1) for ``key``, -1:
    none."""
    rows = sorted((s, -e, c) for k, s, e, c in intervals if k == key and e >= s)
    furthest = None
    for s, neg_e, c in rows:
        e = -neg_e
        lo = s if furthest is None else max(s, furthest)
        furthest = e if furthest is None else max(furthest, e)
        if lo <= t < e:
            return c
    return -1


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 20])
@pytest.mark.parametrize("windows", ["runs in time order", "any order"])
def test_covered_windows_matches_reference(tmp_path, monkeypatch, seed, batch_rows, windows):
    """Each window's covered time per class and the class holding its start, by the
    reference; windows that follow one another per key (no sort of the probes) and windows
    in any order (sorted in numpy) alike, the intervals read as stored."""
    monkeypatch.setattr(sweep, "BATCH_ROWS", batch_rows)
    rng = np.random.default_rng(200 + seed)
    n = int(rng.integers(1, 60))
    keys = (rng.integers(0, 4, n) * 7 - 7).tolist()
    starts = rng.integers(0, 200, n)
    ends = starts + rng.integers(-5, 60, n)
    intervals = list(zip(keys, starts.tolist(), ends.tolist(), rng.integers(0, 3, n).tolist()))
    m = 40
    wkey = np.sort(rng.integers(0, 5, m) * 7 - 7) if windows == "runs in time order" else \
        rng.integers(0, 5, m) * 7 - 7
    if windows == "runs in time order":  # per key, disjoint windows one after another
        wstart, wend = np.empty(m, np.int64), np.empty(m, np.int64)
        for k in np.unique(wkey):
            rows = np.flatnonzero(wkey == k)
            cuts = np.sort(rng.integers(-10, 280, 2 * len(rows)))
            wstart[rows], wend[rows] = cuts[0::2], cuts[1::2]
    else:
        bounds = np.sort(rng.integers(-10, 280, 2 * m).reshape(m, 2), axis=1)
        wstart, wend = bounds[:, 0].copy(), bounds[:, 1].copy()
    want = (reference(intervals, list(zip(wkey.tolist(), wend.tolist())), 3)
            - reference(intervals, list(zip(wkey.tolist(), wstart.tolist())), 3))
    want_at = [holding(intervals, k, t) for k, t in zip(wkey.tolist(), wstart.tolist())]
    with nsysdiag.open(_export(tmp_path)) as rep:
        rep.con.register("iv", pa.table(dict(zip(("key", "start_ns", "end_ns", "cls"),
                                                  map(list, zip(*intervals))))))
        got, at = sweep.covered_windows(rep, "SELECT * FROM iv", wkey.astype(np.int64),
                                        wstart, wend, 3, in_order=True)
    np.testing.assert_array_equal(got, want)
    assert at.tolist() == want_at


def test_between_key_is_between(tmp_path):
    with nsysdiag.open(_export(tmp_path)) as rep:
        rep.con.register("iv", pa.table({"key": [0, 0, 0], "start_ns": [0, 50, 120],
                                         "end_ns": [100, 80, 150]}))
        cover = iv_mod.Coverage.of_query(rep, "SELECT * FROM iv")
    lo, hi = np.array([-5, 90, 60, 200]), np.array([60, 130, 60, 300])
    assert cover.between_key(0, lo, hi).tolist() == [60, 20, 0, 0]
    assert cover.between_key(1, lo, hi).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("batch_rows", [1, 3, 1 << 20])
def test_window_causes_match_covered_windows(tmp_path, monkeypatch, seed, batch_rows):
    """gpu_idle's host cause finished inside the sweep (``window_causes``) equals
    ``covered_windows`` then ``gpu_idle.host_causes`` on the same windows: rows the GPU
    side decided skipped, windows cut at the launch call's return, keys in runs (a key in
    two runs or windows that overlap: None, the caller's other path)."""
    from nsysdiag.analyses import gpu_idle

    monkeypatch.setattr(sweep, "BATCH_ROWS", batch_rows)
    rng = np.random.default_rng(500 + seed)
    n = int(rng.integers(1, 80))
    keys = (rng.integers(0, 4, n) * 7 - 7).tolist()
    starts = rng.integers(0, 300, n)
    ends = starts + rng.integers(-5, 60, n)
    intervals = list(zip(keys, starts.tolist(), ends.tolist(), rng.integers(0, 4, n).tolist()))
    m = 50
    wkey = np.sort(rng.integers(0, 5, m) * 7 - 7).astype(np.int64)
    wstart, wend = np.empty(m, np.int64), np.empty(m, np.int64)
    for k in np.unique(wkey):
        rows = np.flatnonzero(wkey == k)
        cuts = np.sort(rng.integers(-10, 380, 2 * len(rows)))
        wstart[rows], wend[rows] = cuts[0::2], cuts[1::2]
    limit = np.where(rng.random(m) < 0.3, wstart + rng.integers(0, 30, m), wend + 5)
    cause = np.where(rng.random(m) < 0.2, gpu_idle.DEPENDENCY, -1).astype(np.int8)
    if seed % 4 == 3:  # one key's windows in two runs
        wkey[-1] = wkey[0]
    pct = float(rng.choice([50.0, 30.0, 80.0]))
    with nsysdiag.open(_export(tmp_path)) as rep:
        rep.con.register("iv", pa.table(dict(zip(("key", "start_ns", "end_ns", "cls"),
                                                  map(list, zip(*intervals))))))
        got = sweep.window_causes(rep, "SELECT * FROM iv", cause, wkey, wstart, wend, limit,
                                  gpu_idle._HOST_CODES, pct, in_order=True)
        host = np.flatnonzero(cause < 0)
        w_end = np.minimum(wend, limit)[host]
        sums, at = sweep.covered_windows(rep, "SELECT * FROM iv", wkey[host], wstart[host],
                                         w_end, 4, in_order=True)
    hk, hs = wkey[host], wstart[host]
    head = np.r_[True, hk[1:] != hk[:-1]]
    overlap = ((hs[1:] < w_end[:-1]) & ~head[1:]).any()
    if len(set(hk[head].tolist())) < head.sum() or overlap:
        assert got is None
        return
    assert got is not None
    outside = np.maximum((w_end - wstart[host]) - sums.sum(axis=1), 0)
    want = gpu_idle.host_causes(at == gpu_idle.SYNC_CALL, at == gpu_idle.COPY_CALL, sums,
                                outside, pct)
    assert got[host].tolist() == want.tolist()
    assert (got[cause >= 0] == -1).all()
