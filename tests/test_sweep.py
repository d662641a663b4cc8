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


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch_rows", [1, 3, 64, 1 << 20])
def test_sweep_matches_reference(standard_export, monkeypatch, seed, batch_rows):
    monkeypatch.setattr(sweep, "BATCH_ROWS", batch_rows)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    keys = rng.integers(0, 4, n) * 7 - 7  # includes a negative key
    starts = rng.integers(0, 200, n)
    ends = starts + rng.integers(-5, 60, n)  # some end before their start: ignored
    classes = rng.integers(0, 3, n)
    intervals = list(zip(keys.tolist(), starts.tolist(), ends.tolist(), classes.tolist()))
    probe_keys = rng.integers(0, 5, 40) * 7 - 7  # includes a key with no interval
    probe_ts = np.concatenate([rng.integers(-10, 280, 30), starts[:5], ends[:5]])
    probes = list(zip(probe_keys.tolist(), probe_ts[:40].tolist()))
    table = pa.table({"key": keys, "start_ns": starts, "end_ns": ends, "cls": classes})
    with nsysdiag.open(standard_export) as rep:
        rep.con.register("iv", table)
        got = sweep.covered(rep, "SELECT * FROM iv",
                            pa.table({"key": [k for k, _ in probes], "ts": [t for _, t in probes]}),
                            3)
    np.testing.assert_array_equal(got, reference(intervals, probes, 3))


def test_nested_calls_count_once(standard_export):
    # a runtime call [0, 100) (class 0) holding a driver call [10, 30) (class 1), then a
    # call [90, 150) (class 2) that overlaps the first: class 0 gets 100, 2 gets 50, 1 none
    table = pa.table({"key": [1, 1, 1], "start_ns": [0, 10, 90], "end_ns": [100, 30, 150],
                      "cls": [0, 1, 2]})
    with nsysdiag.open(standard_export) as rep:
        rep.con.register("iv", table)
        got = sweep.covered(rep, "SELECT * FROM iv",
                            pa.table({"key": [1, 1, 1], "ts": [50, 120, 1000]}), 3)
    assert got.tolist() == [[50, 0, 0], [100, 0, 20], [100, 0, 50]]
