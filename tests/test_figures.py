"""compute/figures.py: distribution figures in numpy, equal to DuckDB's aggregates."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from nsysdiag.analyses import launch_gaps
from nsysdiag.compute import figures
from nsysdiag.errors import InputError


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    yield c
    c.close()


def duck(con, sql, values, **params):
    con.register("v", {"x": values})
    try:
        return con.execute(f"SELECT {sql} FROM v", params or None).fetchall()[0]
    finally:
        con.unregister("v")


def test_quantiles_by_hand():
    # {10, 100}: rank (n - 1) p = p; p50 10 + 0.5 * 90 = 55, p90 91
    assert figures.quantiles(np.array([100, 10]), [0.5, 0.9]) == [55.0, pytest.approx(91)]
    # one value: every percentile is it; none: None
    assert figures.quantiles(np.array([7]), [0.5, 0.999]) == [7.0, 7.0]
    assert figures.quantiles(np.array([], dtype=np.int64), [0.5]) is None
    # a rank that falls on a value needs no interpolation: {1, 2, 3}, p50 = 2
    assert figures.quantiles(np.array([3, 1, 2]), [0.5, 0.0, 1.0]) == [2.0, 1.0, 3.0]


def test_quantiles_equal_duckdb(con):
    rng = np.random.default_rng(5)
    ps = [0.5, 0.9, 0.99, 0.999]
    for _ in range(300):
        n = int(rng.integers(1, 400))
        values = rng.integers(0, int(rng.choice([100, 10**6, 10**12])), n)
        (expected,) = duck(con, "quantile_cont(x, $ps)", values, ps=ps)
        assert figures.quantiles(values.copy(), ps) == expected  # to the last bit


def test_mean_total_and_share_equal_duckdb(con):
    rng = np.random.default_rng(6)
    for _ in range(200):
        values = rng.integers(0, int(rng.choice([10, 10**9, 2**50])), int(rng.integers(1, 300)))
        avg, total, share = duck(
            con, "avg(x), sum(x)::BIGINT, 100.0 * count(*) FILTER (WHERE x > 5) / count(*)",
            values)
        s = figures.total(values)
        assert (figures.mean(s, len(values)), s) == (avg, total)
        assert figures.share_pct(int((values > 5).sum()), len(values)) == share
    assert figures.mean(0, 0) is None and figures.share_pct(3, 0) is None


def test_total_is_exact_or_refuses():
    big = np.array([2**62, 2**62 - 1, -(2**61)], dtype=np.int64)
    assert figures.total(big) == 2**62 + 2**62 - 1 - 2**61  # int64 arithmetic would wrap
    with pytest.raises(InputError, match="out of range"):
        figures.total(np.array([2**62, 2**62], dtype=np.int64))


def test_describe_without_values():
    f = figures.describe(np.empty(0, dtype=np.int64), [0.5], 10)
    assert f == {"count": 0, "q": None, "max_ns": None, "mean_ns": None, "total_ns": 0,
                 "share_above_pct": None}


def test_histogram_bins_equal_duckdb(con):
    """The bin edges found by search put every gap where DuckDB's floor(log10(g) * 5 + 1e-9)
    does, at exact powers of ten and next to the irrational edges."""
    edges = [int(round(10 ** (b / 5))) for b in range(0, 95)]
    values = np.unique(np.array([e + d for e in edges for d in (-2, -1, 0, 1, 2) if e + d > 0]
                                + [1, 2, 3, 10**18, 2**62], dtype=np.int64))
    rows = duck(con, "list(floor(log10(x) * 5 + 1e-9)::BIGINT ORDER BY x)", values)[0]
    lo = launch_gaps._bin(int(values.min()))
    found = [launch_gaps._first_in_bin(b) for b in range(lo + 1, max(rows) + 1)]
    assert (lo + np.searchsorted(found, np.sort(values), side="right")).tolist() == rows


def test_in_place_and_masked_forms_give_the_same_figures():
    rng = np.random.default_rng(8)
    values = rng.integers(0, 10**9, 1001)
    mask = rng.random(1001) < 0.3
    assert figures.total(values, mask) == int(values[mask].sum())
    assert figures.total(values, np.zeros(1001, dtype=bool)) == 0
    big = np.array([2**62, 5, 2**62], dtype=np.int64)
    assert figures.total(big, np.array([True, True, False])) == 2**62 + 5
    copy = values.copy()
    assert figures.quantiles(copy, [0.5, 0.99], scratch=True) == figures.quantiles(
        values, [0.5, 0.99])
    assert not np.array_equal(copy, values)  # partially sorted in place
