"""Normalized views on hand-built exports of every layout, with hand-computed answers."""

from __future__ import annotations

import csv
import os
import random
import re
import sqlite3

import numpy as np
import pytest
from conftest import CORPUS, H200, need

import nsysdiag
from nsysdiag.errors import InputError, MissingDataError
from nsysdiag.views.cache import ViewFiles
from nsysdiag.views.definitions import API_VERSION_STAMP


def rows(rep, query):
    return rep.sql(query).fetchall()


def test_kernels_view(standard_export):
    with nsysdiag.open(standard_export) as rep:
        got = rows(rep, "SELECT start_ns, end_ns, duration_ns, pid, stream_id, device_id, name, "
                        "correlation_id FROM kernels ORDER BY start_ns")
    assert got == [
        (5000, 9000, 4000, 4242, 7, 0, "gemm", 1),
        (9500, 12000, 2500, 4242, 7, 0, "gemm", 2),
        (20000, 21000, 1000, 4242, 7, 0, "relu", 3),
    ]


def test_memcpy_kinds_and_bandwidth(standard_export):
    with nsysdiag.open(standard_export) as rep:
        (row,) = rows(rep, "SELECT copy_kind, src_kind, dst_kind, is_pageable, bytes, "
                           "bytes / duration_ns FROM memcpys")
    # 1 MiB in 100 us = 1048576 / 100000 bytes/ns = 10.48576 GB/s
    assert row[:5] == ("HtoD", "pageable", "device", True, 1 << 20)
    assert row[5] == pytest.approx(10.48576)


def test_api_calls_names_and_categories(standard_export):
    with nsysdiag.open(standard_export) as rep:
        got = dict(rows(rep, "SELECT name, category FROM api_calls"))
    assert got == {"cudaLaunchKernel": "launch", "cudaMemcpy": "memcpy", "cudaMemset": "memset",
                   "cudaStreamSynchronize": "sync"}


@pytest.mark.parametrize(("odd", "no_string", "read_ids"), [
    (None, False, False), ("cudaFree", False, False), ("my_hook", False, True),
    (None, True, True)])
def test_api_names_outside_the_cuda_api(builder, tmp_path, monkeypatch, odd, no_string, read_ids):
    """API names are listed as the CUDA API names among the export's strings, without
    reading the calls' name ids first; a call named anything else, or with an id that has
    no string, starts the build over with the ids read, and still gets its name or
    'unknown' (as does a call without a name id)."""
    from nsysdiag.views.build import ViewStore

    reads = []
    real = ViewStore._string_ids
    monkeypatch.setattr(ViewStore, "_string_ids",
                        lambda self, spec: reads.append(spec.name) or real(self, spec))
    b = builder("current")
    b.api(0, 10, "cudaLaunchKernel_v7000")
    b.api(20, 30, "cuMemAlloc_v2", driver=True)
    b.api(40, 50, "cudaDeviceSynchronize")
    b.api(60, 70, odd or "cudaMemcpyAsync")
    b.add("CUPTI_ACTIVITY_KIND_RUNTIME", start=80, end=90, eventClass=0, globalTid=0,
          correlationId=99, nameId=987654 if no_string else None, returnValue=0,
          callchainId=None)
    b.string("cutlass_kernel_not_called")
    with nsysdiag.open(b.write(tmp_path / "n.sqlite")) as rep:
        got = rows(rep, "SELECT start_ns, name, category FROM api_calls ORDER BY start_ns")
    last = {None: ("cudaMemcpyAsync", "memcpy"), "my_hook": ("my_hook", "other"),
            "cudaFree": ("cudaFree", "memory")}[odd]
    assert got == [(0, "cudaLaunchKernel", "launch"), (20, "cuMemAlloc_v2", "memory"),
                   (40, "cudaDeviceSynchronize", "sync"), (60, *last), (80, "unknown", "other")]
    assert reads == (["api_calls"] if read_ids else [])


def test_string_ids_placed_by_table_or_search():
    """Each id's place (from 1) among the sorted ids: looked up in the table below its
    size, searched above it; 0 and a miss where it is not among them."""
    from nsysdiag.views import _compiled

    ids = np.array([-4, 2, 5, 9, 1 << 40], dtype=np.int64)
    table = np.zeros(6, dtype=np.int32)  # covers ids 0-5 only
    table[[2, 5]] = [2, 3]
    values = np.array([5, 9, 2, -4, 1 << 40, 3, 7, 0, 5], dtype=np.int64)
    valid = np.array([1, 1, 1, 1, 1, 1, 1, 0, 1], dtype=bool)
    out = np.empty(len(values), dtype=np.int64)
    assert _compiled.place_ids(values, valid, ids, table, out) == 2  # 3 and 7
    assert out.tolist() == [3, 4, 2, 1, 5, 0, 0, 0, 3]
    found = np.empty(6, dtype=np.int64)
    _compiled.find_values(np.array([9, 9, 3, 3, -4, 9], dtype=np.int64), ids, found)
    assert found.tolist() == [3, 3, -1, -1, 0, 3]


def test_nvtx_ranges_text_and_registered_marks_excluded(standard_export):
    with nsysdiag.open(standard_export) as rep:
        got = rows(rep, "SELECT name, start_ns, end_ns, style, pid, tid FROM nvtx_ranges ORDER BY start_ns")
    assert got == [("request", 0, 200000, "push_pop", 4242, 4242),
                   ("forward", 500, 160000, "push_pop", 4242, 4242)]


def test_memsets_syncs_threads_devices(standard_export):
    with nsysdiag.open(standard_export) as rep:
        assert rows(rep, "SELECT bytes, mem_kind FROM memsets") == [(4096, "device")]
        assert rows(rep, "SELECT sync_type, duration_ns FROM syncs") == [("stream_synchronize", 10000)]
        assert rows(rep, "SELECT pid, tid, thread_name FROM threads") == [(4242, 4242, "main")]
        (dev,) = rows(rep, "SELECT device_id, name, bus_location FROM devices")
    assert dev == (0, "NVIDIA H200", "0000:01:00.0")


def test_nvtx_domains_and_cross_thread_ranges(builder, tmp_path):
    b = builder("current")
    b.nvtx_domain(3, "serving")
    b.nvtx(100, 900, "request", style="start_end", domain_id=3, tid=11, end_tid=12)
    b.nvtx(200, 300, "inner", domain_id=0)
    with nsysdiag.open(b.write(tmp_path / "d.sqlite")) as rep:
        got = rows(rep, "SELECT name, domain, style, tid, end_tid FROM nvtx_ranges ORDER BY start_ns")
    assert got == [("request", "serving", "start_end", 11, 12), ("inner", "", "push_pop", 4242, None)]


def test_pid_tid_decoding_uses_nsys_bit_layout(builder, tmp_path):
    b = builder("current", pid=16777215 - 1, tid=77)
    b.launch(0, 10, 20, 30)
    with nsysdiag.open(b.write(tmp_path / "p.sqlite")) as rep:
        assert rows(rep, "SELECT pid, tid FROM api_calls") == [(16777214, 77)]
        assert rows(rep, "SELECT pid FROM kernels") == [(16777214,)]


def test_probe_reports_missing_data_with_hint(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    with nsysdiag.open(b.write(tmp_path / "nok.sqlite")) as rep:
        pr = rep.probe
        assert pr["kernels"].status == "empty"
        assert "no kernel ran" in pr["kernels"].reason
        assert pr["nvtx_ranges"].status == "not_captured"
        assert pr["gpu_metrics"].hint == "nsys profile --gpu-metrics-devices=all"
        with pytest.raises(MissingDataError, match="needs kernels"):
            pr.require("kernels")
        # empty views still exist and can be queried
        assert rows(rep, "SELECT count(*) FROM kernels") == [(0,)]


def test_cache_is_reused_and_no_cache_leaves_nothing(standard_export, tmp_path):
    with nsysdiag.open(standard_export, cache_dir=tmp_path / "c") as rep:
        rep.ensure_views("kernels")
        cached = ViewFiles(rep.cache_path).lookup("kernels")
        assert cached is not None and cached.exists()
        mtime = cached.stat().st_mtime_ns
    with nsysdiag.open(standard_export, cache_dir=tmp_path / "c") as rep:
        assert rows(rep, "SELECT count(*) FROM kernels") == [(3,)]
    assert cached.stat().st_mtime_ns == mtime
    with nsysdiag.open(standard_export, cache=False) as rep:
        rep.ensure_views("kernels")
        tmp = rep.cache_path
        assert tmp.exists()
    assert not tmp.exists()


def test_input_never_modified(standard_export):
    before = (standard_export.read_bytes(), os.stat(standard_export).st_mtime_ns)
    with nsysdiag.open(standard_export) as rep:
        rep.info()
        rep.sql("SELECT * FROM kernels, memcpys").fetchall()
    assert (standard_export.read_bytes(), os.stat(standard_export).st_mtime_ns) == before


def test_not_an_export(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("hello")
    with pytest.raises(InputError, match="not an SQLite file"):
        nsysdiag.open(f)


def test_sqlite_and_parquet_exports_give_identical_rows():
    sq = need(H200 / "baseline.sqlite")
    pq = need(H200 / "baseline_pq")
    from nsysdiag.views.definitions import VIEWS

    with nsysdiag.open(sq) as a, nsysdiag.open(pq) as b:
        for view in VIEWS:
            q = f"SELECT * FROM {view} ORDER BY ALL"
            assert rows(a, q) == rows(b, q), view


def test_notebook_html_reprs_escape_trace_text(builder, tmp_path):
    from nsysdiag.analyses import kernel_summary

    b = builder("current")
    b.launch(0, 10, 20, 30, name="<b>evil</b>")
    with nsysdiag.open(b.write(tmp_path / "h.sqlite")) as rep:
        assert "<table>" in rep._repr_html_()
        html = kernel_summary.run(rep)._repr_html_()
    assert "&lt;b&gt;evil&lt;/b&gt;" in html and "<b>evil" not in html


def test_kernel_configs_view(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, 20, 30, name="k")
    path = b.write(tmp_path / "t.sqlite")
    with nsysdiag.open(path) as rep:
        (k,) = rows(rep, "SELECT start_ns, global_pid, correlation_id FROM kernels")
        got = rep.sql("SELECT grid_x, block_x, registers_per_thread FROM kernel_configs "
                      "WHERE start_ns = ? AND global_pid = ? AND correlation_id = ?",
                      list(k)).fetchall()
    assert len(got) == 1 and all(v is not None for v in got[0])


@pytest.mark.parametrize("min_rows", [1, 10**12])
def test_parallel_rowid_reads_give_the_same_views(monkeypatch, tmp_path, min_rows):
    """Big tables are read as rowid ranges on threads; the views must not change."""
    from nsysdiag.adapters import sqlite as sqlite_adapter
    from nsysdiag.views.definitions import VIEWS

    src = need(H200 / "baseline.sqlite")
    with nsysdiag.open(src, cache_dir=tmp_path / "one") as rep:
        monkeypatch.setattr(sqlite_adapter, "PARALLEL_MIN_ROWS", 10**12)
        want = {v: rows(rep, f"SELECT * FROM {v} ORDER BY ALL") for v in VIEWS}
    monkeypatch.setattr(sqlite_adapter, "PARALLEL_MIN_ROWS", min_rows)
    monkeypatch.setattr(sqlite_adapter, "READERS", 3)
    with nsysdiag.open(src, cache_dir=tmp_path / "par") as rep:
        for view in VIEWS:
            assert rows(rep, f"SELECT * FROM {view} ORDER BY ALL") == want[view], view


def test_parallel_read_of_a_damaged_table_is_one_input_error(monkeypatch, tmp_path):
    from nsysdiag.adapters import sqlite as sqlite_adapter

    src = need(H200 / "baseline.sqlite")
    cut = tmp_path / "cut.sqlite"
    data = src.read_bytes()
    cut.write_bytes(data[: len(data) * 6 // 10])
    monkeypatch.setattr(sqlite_adapter, "PARALLEL_MIN_ROWS", 1)
    with pytest.raises(InputError) as err:
        with nsysdiag.open(cut, cache_dir=tmp_path / "c") as rep:
            rep.ensure_views("kernels", "api_calls")
    assert "\n" not in str(err.value)


def test_probe_is_kept_in_the_cache(standard_export, tmp_path, monkeypatch):
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        first = rep.probe
    from nsysdiag.adapters.sqlite import SqliteSource

    def fail(*a, **k):
        raise AssertionError("probed the export again")

    monkeypatch.setattr(SqliteSource, "row_count", fail)
    with nsysdiag.open(standard_export, cache_dir=tmp_path) as rep:
        assert rep.probe.views == first.views
        assert rep.probe.cuda_traced == first.cuda_traced


def test_kernels_carry_their_launch_call(builder, tmp_path):
    b = builder("current")
    b.api(10, 50, "cudaLaunchKernel", corr=5, tid=11)
    b.api(20, 45, "cuLaunchKernel", corr=5, tid=11, driver=True)  # inside it: one call
    b.api(60, 70, "cudaMemcpyAsync", corr=6)  # not a launch
    b.api(80, 90, "cudaGraphLaunch", corr=7, tid=12)
    b.kernel(100, 200, corr=5)
    b.kernel(210, 220, corr=5, pid=99)  # same id in another process: not its call
    b.kernel(230, 240, corr=6)
    b.kernel(250, 260, corr=7, graph_node=3)
    with nsysdiag.open(b.write(tmp_path / "l.sqlite"), cache=False) as rep:
        got = rows(rep, "SELECT start_ns, launch_start_ns, launch_end_ns, "
                        "launch_global_tid & 16777215 FROM kernels ORDER BY start_ns")
    assert got == [(100, 10, 50, 11), (210, None, None, None), (230, None, None, None),
                   (250, 80, 90, 12)]


def test_launch_calls_match_a_reference(builder, tmp_path):
    """Kernels of three processes, shuffled, matched to launch calls by (process,
    correlation id): a runtime call and driver calls with its id are one call from the first
    entry (and its thread) to the last return; ids without a launch call, or only another
    process' or a memcpy's, match nothing. An invalid entry time reads as NULL."""
    rng = random.Random(5)
    b = builder("current")
    calls: dict[tuple[int, int], list[tuple[int | None, int | None, int]]] = {}
    for pid in (3, 4, 5):
        for corr in rng.sample(range(1, 400), 120):
            name = rng.choice(("cudaLaunchKernel", "cudaGraphLaunch", "cudaMemcpyAsync"))
            for _ in range(rng.choice((1, 1, 2, 3))):  # runtime and driver calls, one id
                start = rng.randrange(0, 10_000) if rng.random() > 0.05 else 2**62  # invalid
                end = start + rng.randrange(1, 500) if start < 2**62 else 5
                tid = rng.randrange(1, 9)
                b.api(start, end, name, corr=corr, pid=pid, tid=tid, driver=rng.random() < 0.5)
                if name != "cudaMemcpyAsync":
                    # an invalid entry reads NULL; the return stays (it cannot be before it)
                    calls.setdefault((pid, corr), []).append(
                        (start if start < 2**62 else None, end, tid))
    kernels = [(pid, corr) for pid in (3, 4, 5, 6) for corr in range(0, 420, 3)]
    rng.shuffle(kernels)
    expected = []
    for i, (pid, corr) in enumerate(kernels):
        b.kernel(10_000 + i, 10_001 + i, corr=corr, pid=pid)
        mine = calls.get((pid, corr), [])
        starts = [(s, t) for s, _, t in mine if s is not None]
        ends = [e for _, e, _ in mine if e is not None]
        first = min(starts, default=(None, None))  # ties: any thread of those entries
        expected.append((10_000 + i, first[0], max(ends, default=None),
                         first[1] if len(starts) == len({s for s, _ in starts}) else "tie"))
    with nsysdiag.open(b.write(tmp_path / "l.sqlite"), cache=False) as rep:
        got = rows(rep, "SELECT start_ns, launch_start_ns, launch_end_ns, "
                        "launch_global_tid & 16777215 FROM kernels ORDER BY start_ns")
    got = [g if e[3] != "tie" else (*g[:3], "tie") for g, e in zip(got, expected)]
    assert got == expected
    assert sum(e[1] is not None for e in expected) > 50  # the test matches many


def test_launch_key_search_in_any_order():
    """The galloping search finds each key whatever the order of the keys searched."""
    from nsysdiag.views import _compiled

    rng = np.random.default_rng(3)
    keys = sorted({(int(c), int(r)) for c, r in zip(rng.integers(0, 3, 3000),
                                                     rng.integers(-50, 5000, 3000))})
    code, corr = (np.array(k, dtype=np.int64) for k in zip(*keys))
    where = {k: i for i, k in enumerate(keys)}
    for order in ("ascending", "descending", "random"):
        q = np.stack([rng.integers(0, 4, 5000), rng.integers(-60, 5100, 5000)], axis=1)
        if order != "random":
            q = q[np.lexsort((q[:, 1], q[:, 0]))][:: 1 if order == "ascending" else -1]
        ok = rng.random(len(q)) > 0.1
        out = np.empty(len(q), dtype=np.int64)
        _compiled.find_keys(code, corr, q[:, 0].copy(), q[:, 1].copy(), ok, out)
        want = [where.get((int(c), int(r)), -1) if o else -1 for (c, r), o in zip(q, ok)]
        assert out.tolist() == want


def test_spill_directory_exists_before_any_view_is_built(tmp_path, monkeypatch):
    """DuckDB creates its spill directory but not the parents: without them, a view build
    that spilled failed on a first run with --no-cache."""
    from nsysdiag.engine.database import connect

    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(tmp_path / "new" / "cache"))
    con = connect()
    (spill,) = con.execute("SELECT current_setting('temp_directory')").fetchone()
    assert spill == str(tmp_path / "new" / "cache" / "spill")
    assert (tmp_path / "new" / "cache" / "spill").is_dir()
    con.close()


@pytest.mark.parametrize("nodes", [True, False])
def test_graph_status_from_the_kernels_view_or_the_export(builder, tmp_path, monkeypatch, nodes):
    """cuda_graphs' status (node-level tracing shows only as graph node ids on kernels) is
    decided when asked for: from the kernels view once it is built, without scanning the
    export again, else from the export; both give the same status."""
    from nsysdiag.adapters.sqlite import SqliteSource

    b = builder("current")
    b.kernel(0, 10)
    b.kernel(20, 30, corr=5, graph_node=3 if nodes else None)
    path = b.write(tmp_path / "g.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        from_export = rep.probe["cuda_graphs"]
    with nsysdiag.open(path, cache=False) as rep:
        rep.ensure_views("kernels")

        def fail(*a, **k):
            raise AssertionError("scanned the export")

        monkeypatch.setattr(SqliteSource, "any_nonzero", fail)
        from_view = rep.probe["cuda_graphs"]
    assert from_view == from_export
    assert (from_view.present, from_view.source_rows) == ((True, 2) if nodes else (False, 0))


# ------------------------------------------------------------------------ API names

def _nsys_api_name(raw: str) -> str:
    """The name `nsys stats --report cuda_api_sum` prints: it drops a four-digit `_vNNNN`."""
    return raw[:-6] if raw[-6:-4] == "_v" and raw[-4:].isdigit() else raw


def test_api_names_keep_distinct_functions_apart(builder, tmp_path):
    """Only the CUDA version stamp goes: cuGetProcAddress and cuGetProcAddress_v2 are two
    driver functions, cudaLaunchKernel_v7000 and cudaStreamIsCapturing_v10000 one each."""
    b = builder("current")
    names = ["cudaLaunchKernel_v7000", "cudaStreamIsCapturing_v10000", "cuGetProcAddress",
             "cuGetProcAddress_v2", "cuGetProcAddress_v2", "cuMemAlloc_v2"]
    for i, name in enumerate(names):
        b.api(i * 100, i * 100 + 10, name)
    path = b.write(tmp_path / "names.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        got = dict(rep.execute("SELECT name, count(*) FROM api_calls GROUP BY 1"))
    assert got == {"cudaLaunchKernel": 1, "cudaStreamIsCapturing": 1, "cuGetProcAddress": 1,
                   "cuGetProcAddress_v2": 2, "cuMemAlloc_v2": 1}


def test_api_names_match_nsys_cuda_api_sum():
    """Per-name call counts and total time equal NVIDIA's cuda_api_sum on the H200 baseline;
    nsys keeps five-digit stamps (cudaLaunchKernelExC_v11060), which are one function with the
    stamp removed here."""
    ref_path = need(H200 / "nsys-reference" / "stats_baseline_cuda_api_sum.csv")
    with ref_path.open() as fh:
        ref = {re.sub(API_VERSION_STAMP, "", r["Name"]): (int(r["Num Calls"]),
                                                          int(r["Total Time (ns)"]))
               for r in csv.DictReader(fh)}
    assert "cuGetProcAddress_v2" in ref
    with nsysdiag.open(need(H200 / "baseline.sqlite"), cache=False) as rep:
        got = {n: (c, t) for n, c, t in rep.execute(
            "SELECT name, count(*), sum(duration_ns)::BIGINT FROM api_calls GROUP BY 1")}
    assert got == ref


def test_qcu_driver_functions_stay_apart():
    """qcu's capture calls cuGetProcAddress 373 times and cuGetProcAddress_v2 1576 times."""
    path = need(CORPUS / "public" / "ZhangXin8069__qcu" / "report10.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        got = dict(rep.execute("SELECT name, count(*) FROM api_calls "
                               "WHERE name LIKE 'cuGetProcAddress%' GROUP BY 1"))
    raw = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True).execute(
        "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
        "ON s.id = r.nameId WHERE s.value LIKE 'cuGetProcAddress%' GROUP BY 1").fetchall()
    assert got == {_nsys_api_name(n): c for n, c in raw}
    assert len(got) == 2


def test_sql_names_views_on_its_own_connection(standard_export, monkeypatch):
    """Report.sql finds the views a query names on the report's connection, never on
    DuckDB's default one, which every thread shares (two threads naming tables on it at
    once deadlocked: one held the GIL, the other the connection)."""
    import contextlib
    import threading

    import duckdb

    from nsysdiag.engine.schedule import forked

    def shared(*_a, **_k):
        raise AssertionError("duckdb's default connection used")

    monkeypatch.setattr(duckdb, "get_table_names", shared)
    with nsysdiag.open(standard_export, cache=False) as rep, contextlib.ExitStack() as stack:
        forks = [stack.enter_context(forked(rep, "kernels", "api_calls")) for _ in range(2)]
        counts: list[int] = []

        def count(other) -> None:
            for _ in range(50):
                counts.append(other.execute("SELECT count(*) FROM kernels")[0][0])

        workers = [threading.Thread(target=count, args=(f,)) for f in forks]
        for w in workers:
            w.start()
        for _ in range(50):
            rep.execute("SELECT count(*) FROM api_calls")
        for w in workers:
            w.join(timeout=60)
        assert not any(w.is_alive() for w in workers)
    assert counts == [counts[0]] * 100 and counts[0] > 0


def test_a_view_named_in_a_comment_is_not_built(standard_export):
    # a parameterized LIMIT the parser refuses: views are then matched by name, and a
    # name inside a comment must not build its view (kernel_configs costs seconds)
    with nsysdiag.open(standard_export, cache=False) as rep:
        query = ("-- not kernel_configs\nSELECT count(*) FROM kernels /* nor memsets */ "
                 "LIMIT $n")
        assert rep._views_named(query) == ["kernels"]
        assert rep.execute(query, {"n": 1})[0][0] > 0
        assert not rep._store.built("kernel_configs") and not rep._store.built("memsets")
