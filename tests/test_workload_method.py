"""workload.sql ``compare`` counts each unit's copied bytes from running totals read with
ASOF joins, not by comparing each unit with each copy. These tests hold it equal to the
direct statement (every unit against every copy call of its thread or process) on
hand-built traces whose answers are computed by hand, on the corpus and on the project's
own captures, in both scopes. Likewise the ``sizes`` table of the accelerated pass
(``workload.sizes_accelerated``: each call placed by a search among its key's units) is
held equal to the SQL method's (an ASOF join of every call)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from conftest import corpus_sqlite_files, open_corpus

import nsysdiag
from nsysdiag.analyses import workload
from nsysdiag.analyses.base import load_sql
from nsysdiag.analyses.ranges import RangesResult
from nsysdiag.engine.steps import bind, registered

_DIRECT = """unit_bytes AS (
    SELECT g.grp, g.instance, sum(m.bytes) AS copy_bytes
    FROM g JOIN moved m
        ON m.pid = g.pid AND ($scope = 'process' OR m.tid = g.tid)
       AND m.call_ns >= g.start_ns AND m.call_ns <= g.end_ns
    GROUP BY g.grp, g.instance)
SELECT count(*)"""


def direct_query() -> str:
    sql = load_sql("workload")["compare"]
    head, _, rest = sql.partition("\nkeyed AS (")
    _, _, tail = rest.partition("\nSELECT count(*)")
    assert head and tail, "compare no longer has the keyed ... unit_bytes steps"
    return head + "\n" + _DIRECT + tail


COLUMNS = ["instance", "start_ns", "end_ns", "duration_ns", "pid", "tid", "n_kernels",
           "own_kernel_total_ns", "own_copy_total_ns", "cuda_covered"]


def both(rep: nsysdiag.Report, scope: str, slow_n: int = 5) -> tuple[dict, dict] | None:
    r = rep.analysis("ranges")
    if not isinstance(r, RangesResult) or not r.ok:
        return None
    with registered(rep, "_workload_instances", r.counted_instances(COLUMNS)):
        params = {"slow_n": slow_n, "scope": scope}
        sql = load_sql("workload")["compare"]
        got = rep.sql(sql, bind(sql, params)).to_arrow_table().to_pylist()[0]
        direct = direct_query()
        want = rep.sql(direct, bind(direct, params)).to_arrow_table().to_pylist()[0]
    return got, want


def test_bytes_per_unit_by_hand(builder, tmp_path):
    b = builder()
    # 60 units of 1 ms; unit k copies (k % 3 + 1) MB HtoD inside it, on its thread, and
    # one copy on another thread (counted only in the process scope); a copy exactly at a
    # unit's start and one at its end both count
    for k in range(60):
        t = 1_000_000 + k * 2_000_000
        b.nvtx(t, t + 1_000_000 + (k % 7) * 10_000, "step")
        b.launch(t + 10, t + 20, t + 30, t + 900_000)
        c = b.api(t, t + 50, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 60, t + 70, (k % 3 + 1) << 20, corr=c)
        c = b.api(t + 1_000_000 + (k % 7) * 10_000, t + 1_000_000 + (k % 7) * 10_000 + 5,
                  "cudaMemcpyAsync_v3020")
        b.memcpy(t + 1_100_000, t + 1_100_100, 1000, corr=c)
        c = b.api(t + 500, t + 600, "cudaMemcpyAsync_v3020", tid=b.tid + 1)
        b.memcpy(t + 700, t + 800, 7, corr=c)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        for scope in ("thread", "process"):
            got, want = both(rep, scope, slow_n=60)
            assert got == want
            # every unit, slow_n = all: (1 + 2 + 3) MB / 3 on average, + 1000 at the end
            extra = 7 if scope == "process" else 0
            assert got["slow_copy_bytes"] == pytest.approx(2 * 2**20 + 1000 + extra)


CORPUS = corpus_sqlite_files()


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_compare_equals_the_direct_rule(path):
    with open_corpus(path) as rep:
        for scope in ("thread", "process"):
            pair = both(rep, scope)
            if pair is None:
                pytest.skip("no units")
            assert pair[0] == pair[1]


def test_own_captures_compare_equals_the_direct_rule(labelled):
    for name, path in labelled.items():
        with nsysdiag.open(path, cache=False) as rep:
            for scope in ("thread", "process"):
                pair = both(rep, scope)
                assert pair is not None and pair[0] == pair[1], name


SIZE_COLUMNS = ["instance", "pid", "tid", "start_ns", "end_ns", "duration_ns", "n_kernels",
                "own_kernel_total_ns", "cuda_covered", "counted"]


def sizes_both(rep: nsysdiag.Report, scope: str):
    """(the SQL method's sizes, the accelerated pass's) of every unit, or None."""
    r = rep.analysis("ranges")
    if not isinstance(r, RangesResult) or not r.ok:
        return None
    t = r.tables["instances"]
    units = t.select([c for c in SIZE_COLUMNS if c in t.column_names])
    for c in ("cuda_covered", "counted"):
        if c not in units.column_names:
            units = units.append_column(c, pa.nulls(units.num_rows, pa.bool_()))
    units = units.append_column("oneoff", pa.nulls(units.num_rows, pa.bool_())) \
        .append_column("host_ns", pa.nulls(units.num_rows, pa.float64()))
    return (workload.sizes_method(rep, units, scope),
            workload.sizes_accelerated(rep, units, scope))


def test_sizes_placed_by_hand(builder, tmp_path):
    """30 units of 1 ms on one thread. Unit k: a runtime launch with its driver call inside
    (one launch), a second launch at its very end (counted), a copy of (k + 1) KB HtoD and
    one of 100 bytes DtoH; between units, a launch (in no unit); on a second thread, a
    launch inside the unit's time (its thread's: only in the process scope). Units 0-4 also
    hold a unit that starts inside them and ends after (an overlapping one of the same
    name): the calls after its start go to it, the most recently started unit."""
    b = builder()
    for k in range(30):
        t = 1_000_000 + k * 2_000_000
        b.nvtx(t, t + 1_000_000, "step")
        c = b.api(t + 100, t + 400, "cudaLaunchKernel_v7000")
        b.api(t + 150, t + 350, "cuLaunchKernel", corr=c, driver=True)
        b.kernel(t + 500, t + 900, corr=c)
        b.launch(t + 1_000_000, t + 1_000_010, t + 1_000_020, t + 1_000_030)
        c = b.api(t + 1000, t + 1100, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 1200, t + 1300, (k + 1) * 1024, corr=c)
        c = b.api(t + 2000, t + 2100, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 2200, t + 2300, 100, kind="DtoH", corr=c)
        b.launch(t + 1_500_000, t + 1_500_100, t + 1_500_200, t + 1_500_300)
        b.launch(t + 3000, t + 3100, t + 3200, t + 3300, tid=b.tid + 1)
        if k < 5:
            b.nvtx(t + 500_000, t + 1_400_000, "step")
            b.launch(t + 600_000, t + 600_100, t + 600_200, t + 600_300)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        for scope in ("thread", "process"):
            pair = sizes_both(rep, scope)
            assert pair is not None
            sql, fast = pair
            assert fast.equals(sql), scope
            rows = {r["start_ns"]: r for r in fast.to_pylist()}
            for k in range(30):
                t = 1_000_000 + k * 2_000_000
                row = rows[t]
                late = k < 5  # the late launch goes to the overlapping unit started later
                other = 1 if scope == "process" else 0
                assert row["launch_calls"] == 2 - late + other, (scope, k)
                assert row["htod_bytes"] == (k + 1) * 1024
                assert row["dtoh_bytes"] == 100
                if k < 5:
                    assert rows[t + 500_000]["launch_calls"] == 2


@pytest.mark.parametrize("path", CORPUS, ids=[p.stem for p in CORPUS])
def test_corpus_sizes_pass_equals_the_method(path):
    with open_corpus(path) as rep:
        for scope in ("thread", "process"):
            pair = sizes_both(rep, scope)
            if pair is None:
                pytest.skip("no units")
            assert pair[1].equals(pair[0]), scope


def test_own_captures_sizes_pass_equals_the_method(labelled):
    for name, path in labelled.items():
        with nsysdiag.open(path, cache=False) as rep:
            for scope in ("thread", "process"):
                pair = sizes_both(rep, scope)
                assert pair is not None and pair[1].equals(pair[0]), name


def test_sizes_pass_when_an_id_is_not_one_run(builder, tmp_path, monkeypatch):
    """The pass groups the calls of one (process, correlation id) as runs of the stored
    order; where an id's calls are apart (a call of another thread between a runtime call
    and its driver call) or ids fall, it starts over on DuckDB's aggregate: the table is
    the method's either way, and the fallback is taken."""
    b = builder()
    for k in range(30):
        t = 1_000_000 + k * 2_000_000
        b.nvtx(t, t + 1_000_000, "step")
        c = b.api(t + 100, t + 400, "cudaLaunchKernel_v7000")
        b.api(t + 120, t + 130, "cudaMemcpyAsync_v3020", tid=b.tid + 1)  # between the two
        b.api(t + 150, t + 350, "cuLaunchKernel", corr=c, driver=True)
        b.kernel(t + 500, t + 900, corr=c)
        if k == 10:  # an id lower than those before it
            c = b.api(t + 5000, t + 5100, "cudaMemcpyAsync_v3020", corr=3)
            b.memcpy(t + 5200, t + 5300, 4096, corr=c)
    taken = []
    runs = workload._placed_in_order

    def spy(*a):
        try:
            return runs(*a)
        except workload._NotRuns:
            taken.append("duckdb")
            raise

    monkeypatch.setattr(workload, "_placed_in_order", spy)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        for scope in ("thread", "process"):
            sql, fast = sizes_both(rep, scope)
            assert fast.equals(sql), scope
            assert sorted(set(fast.column("launch_calls").to_pylist())) == [1]
    assert taken == ["duckdb", "duckdb"]


def test_sizes_pass_with_processes_interleaved(builder, tmp_path, monkeypatch):
    """Three processes call at once, each with its own units (20 of 1 ms): unit k of
    process p launches p + 1 kernels and copies (k + 1) KB HtoD, each process' calls
    interleaved in time with the others'. Each call goes to its own process' unit, in both
    scopes; with a table of processes too small for three (the pass follows at most half
    its slots), the pass starts over on DuckDB's aggregate, with the same table."""
    b = builder()
    pids = (4242, 5000, 6000)
    for k in range(20):
        t = 1_000_000 + k * 2_000_000
        for p, pid in enumerate(pids):
            b.nvtx(t + p, t + 1_000_000 + p, "step", pid=pid)
        for p, pid in enumerate(pids):
            for i in range(p + 1):
                at = t + 1000 * (i + 1) + 10 * p
                b.launch(at, at + 5, at + 500, at + 600, pid=pid)
            at = t + 10_000 + 10 * p
            c = b.api(at, at + 5, "cudaMemcpyAsync_v3020", pid=pid)
            b.memcpy(at + 100, at + 200, (k + 1) * 1024, corr=c, pid=pid)
    taken = []
    runs = workload._placed_in_order

    def spy(*a):
        try:
            return runs(*a)
        except workload._NotRuns:
            taken.append("duckdb")
            raise

    monkeypatch.setattr(workload, "_placed_in_order", spy)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        for slots, fallback in ((1 << 12, []), (4, ["duckdb", "duckdb"])):
            taken.clear()
            monkeypatch.setattr(workload, "_PROCESS_SLOTS", slots)
            for scope in ("thread", "process"):
                sql, fast = sizes_both(rep, scope)
                assert fast.equals(sql), (scope, slots)
                rows = fast.to_pylist()
                assert len(rows) == 60  # every process' units
                by_start = {r["start_ns"]: r for r in rows}
                for start, row in by_start.items():
                    p = (start - 1_000_000) % 2_000_000
                    k = (start - 1_000_000) // 2_000_000
                    assert row["launch_calls"] == p + 1, (scope, start)
                    assert row["htod_bytes"] == (k + 1) * 1024
            assert taken == fallback


def test_no_median_band_gives_no_median_figures(builder, tmp_path):
    """Ten units, five of 3 ms and five of 1 ms: the 45th and 55th percentiles both fall
    between 1 ms and 3 ms, so no unit is in the median band. Compare's SQL then has no
    median figures, and the size relations none either: no NaN, no numpy warning (which
    the test settings make an error)."""
    b = builder()
    for k in range(10):
        t = k * 10_000_000
        b.nvtx(t, t + (1_000_000 if k % 2 else 3_000_000), "step")
        b.launch(t + 10, t + 20, t + 30, t + 500_000)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        w = rep.workload(range_name="step")
    assert w.ok and w.median_n == 0 and w.median_kernels is None
    rows = w.tables["size_relation"].to_pylist()
    assert rows and all(r["median_mean"] is None and r["ratio"] is None for r in rows)
    assert [r["slow_mean"] for r in rows if r["measure"] == "n_kernels"] == [1.0]
