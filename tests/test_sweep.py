"""The streaming sweep behind the CPU components of ranges, against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import nsysdiag
from nsysdiag.analyses import sweep


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


def sums(rep, intervals, probes, n_classes, n_groups):
    rep.con.register("iv", pa.table(dict(zip(("key", "start_ns", "end_ns", "cls"),
                                              map(list, zip(*intervals))))))
    rep.con.register("pr", pa.table(dict(zip(("key", "ts", "grp", "sign"),
                                              map(list, zip(*probes))))))
    return sweep.covered_sums(rep, "SELECT * FROM iv", "SELECT * FROM pr", n_classes, n_groups)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("batch_rows", [1, 3, 64, 1 << 20])
def test_sweep_matches_reference(tmp_path, monkeypatch, seed, batch_rows):
    monkeypatch.setattr(sweep, "BATCH_ROWS", batch_rows)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    keys = (rng.integers(0, 4, n) * 7 - 7).tolist()  # includes a negative key
    starts = rng.integers(0, 200, n)
    ends = starts + rng.integers(-5, 60, n)  # some end before their start: ignored
    intervals = list(zip(keys, starts.tolist(), ends.tolist(), rng.integers(0, 3, n).tolist()))
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
        got = sums(rep, intervals, probes, 3, 6)
    np.testing.assert_array_equal(got, want)


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
