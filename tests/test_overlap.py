"""overlap: kernel/copy busy time, their intersection, stream concurrency, serializing patterns.

Hand-built exports with unions and intersections worked out in the comments, a random
trace against a direct computation, the H200 traces and the corpus.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import H200, corpus_sqlite_files, need, run_on_corpus

import nsysdiag
from nsysdiag.analyses import overlap
from nsysdiag.analyses.base import load_sql
from nsysdiag.compute import intervals
from nsysdiag.engine.steps import temp_views

T0 = 10_000  # keep timestamps away from 0 (CUPTI's "not collected")


def two_stream_trace(builder, tmp_path):
    """Kernels on streams 7 and 8, copies on stream 9; one process, device 0.

    kernels  K1 s7 [0, 1000]   K2 s8 [500, 1500]   K3 s7 [3000, 4000]      (+ T0)
    copies   C1 s9 [1200, 2000] cudaMemcpyAsync    (300 ns hidden under K2)
             C2 s9 [2500, 2600] cudaMemcpy (sync)  (exposed)
             S1 s9 [3500, 3700] memset             (hidden under K3)
    kernel union [0, 1500] + [3000, 4000]          = 2500
    copy union   800 + 100 + 200                   = 1100
    any union    [0, 2000] + [2500, 2600] + [3000, 4000] = 3100
    both = 2500 + 1100 - 3100 = 500 (= 300 + 200); exposed 600; overlap 500/1100
    wall span 4000; two kernels in flight on [500, 1000): 500 ns of 2500, peak 2
    streams (pid, 7), (pid, 8), (pid, 9)
    Process 777 has a synchronous cudaMemcpy call with C1's correlation id but no copy:
    the join must stay within a process, so C1 remains asynchronous.
    """
    b = builder("current")
    b.kernel(T0 + 0, T0 + 1000, stream=7)
    b.kernel(T0 + 500, T0 + 1500, stream=8)
    b.kernel(T0 + 3000, T0 + 4000, stream=7)
    c1 = b.api(T0 + 1100, T0 + 1150, "cudaMemcpyAsync_v3020")
    b.memcpy(T0 + 1200, T0 + 2000, 8000, stream=9, corr=c1)
    c2 = b.api(T0 + 2400, T0 + 2650, "cudaMemcpy_v3020")
    b.memcpy(T0 + 2500, T0 + 2600, 1000, kind="DtoH", src="device", dst="pinned", stream=9,
             corr=c2)
    b.memset(T0 + 3500, T0 + 3700, 4096, stream=9)
    b.api(T0 + 1100, T0 + 1150, "cudaMemcpy_v3020", corr=c1, pid=777, tid=777)
    return b.write(tmp_path / "two.sqlite")


def test_hands_its_busy_union_to_ranges(builder, tmp_path, monkeypatch):
    # Inside the workspace's handover, overlap's pass keeps each GPU's busy union for ranges: the
    # same covered time as ranges' own query (rg_busy_intervals), which leaves out an
    # operation starting at 0, as the kernel K0 [0, T0 + 200] here (overlap counts it).
    # The accelerated pass hands it on; the SQL method does not (ranges then makes it).
    monkeypatch.setenv("NSYSDIAG_ACCELERATE", "always")
    b = builder("current")
    b.kernel(0, T0 + 200, stream=7)
    b.kernel(T0 + 0, T0 + 1000, stream=7)
    b.kernel(T0 + 500, T0 + 1500, stream=8)
    b.memcpy(T0 + 1200, T0 + 2000, 8000, stream=9)
    b.memset(T0 + 3500, T0 + 3700, 4096, stream=9)
    b.kernel(T0 + 3000, T0 + 4000, stream=7)
    ts = np.arange(-100, T0 + 4200, 50)
    device = np.zeros(len(ts), dtype=np.int64)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        # K0 counts here: kernels busy [0, T0 + 1500] and [T0 + 3000, T0 + 4000]
        assert overlap.run(rep).tables["devices"]["kernel_busy_ns"].to_pylist() == [T0 + 2500]
        assert rep.workspace.take(intervals.GPU_BUSY) is None  # nobody expects it: nothing kept
        rep.results_memo.clear()
        with rep.workspace.handover(intervals.GPU_BUSY):
            overlap.run(rep)
            handed = rep.workspace.take(intervals.GPU_BUSY)
            assert rep.workspace.take(intervals.GPU_BUSY) is None  # taken once
        with temp_views(rep, load_sql("ranges"), ("rg_ops",)):
            own = intervals.Coverage.of_query(rep, load_sql("ranges")["rg_busy_intervals"])
    np.testing.assert_array_equal(handed.covered(device, ts), own.covered(device, ts))
    # [T0, T0 + 2000] (K1, K2, the copy) and [T0 + 3000, T0 + 4000]: 3000 ns in all
    assert handed.covered(device[:3], np.array([T0 + 100, T0 + 2500, T0 + 5000])).tolist() == [
        100, 2000, 3000]


def test_union_and_intersection(builder, tmp_path):
    with nsysdiag.open(two_stream_trace(builder, tmp_path), cache=False) as rep:
        res = overlap.run(rep)
    assert res.status == "ok"
    (dev,) = res.tables["devices"].to_pylist()
    assert dev["device_id"] == 0
    assert (dev["kernel_busy_ns"], dev["copy_busy_ns"], dev["both_busy_ns"]) == (2500, 1100, 500)
    assert dev["exposed_copy_ns"] == 600 and dev["wall_span_ns"] == 4000
    assert dev["overlap_pct"] == pytest.approx(100 * 500 / 1100)
    assert dev["kernel_busy_pct"] == pytest.approx(62.5)
    assert (dev["kernels"], dev["copies"]) == (3, 3)
    assert (dev["streams"], dev["kernel_streams"], dev["copy_streams"]) == (3, 2, 1)
    assert dev["concurrent_kernel_ns"] == 500 and dev["max_concurrent_kernels"] == 2
    assert dev["kernel_concurrency_pct"] == pytest.approx(20.0)
    s = res.summary
    assert s["devices"] == 1 and s["overlap_pct"] == pytest.approx(100 * 500 / 1100)
    assert s["single_stream"] is False


def test_synchronous_copies_joined_within_the_process(builder, tmp_path):
    with nsysdiag.open(two_stream_trace(builder, tmp_path), cache=False) as rep:
        res = overlap.run(rep)
    apis = {r["api_name"]: r for r in res.tables["copy_apis"].to_pylist()}
    assert apis["cudaMemcpyAsync"]["synchronous"] is False
    assert apis["cudaMemcpy"]["synchronous"] is True
    assert (apis["cudaMemcpy"]["copies"], apis["cudaMemcpy"]["copy_time_ns"]) == (1, 100)
    # memcpy time 800 + 100: the sync one is 100 / 900 (memsets are not memcpys)
    assert res.summary["sync_copies"] == 1
    assert res.summary["sync_copy_time_pct"] == pytest.approx(100 / 9)
    assert any("synchronous APIs (cudaMemcpy)" in f for f in res.findings)
    streams = {r["stream_id"]: r for r in res.tables["streams"].to_pylist()}
    assert (streams[7]["kernels"], streams[7]["kernel_time_ns"]) == (2, 2000)
    assert (streams[9]["copies"], streams[9]["copy_time_ns"]) == (3, 1100)


def test_single_stream_finding(builder, tmp_path):
    # kernel [0, 1000], copy [1000, 1500], kernel [1500, 2500] all on stream 7:
    # no overlap at all, everything serialized
    b = builder("current")
    b.kernel(T0, T0 + 1000)
    b.memcpy(T0 + 1000, T0 + 1500, 4096)
    b.kernel(T0 + 1500, T0 + 2500)
    with nsysdiag.open(b.write(tmp_path / "one.sqlite"), cache=False) as rep:
        res = overlap.run(rep)
    s = res.summary
    assert (s["kernel_busy_ns"], s["copy_busy_ns"], s["both_busy_ns"]) == (2000, 500, 0)
    assert s["overlap_pct"] == 0 and s["exposed_copy_ns"] == 500
    assert s["single_stream"] is True and s["streams"] == 1
    assert any("single stream" in f for f in res.findings)


def test_devices_apart_and_graph_launches_count_as_compute(builder, tmp_path):
    """Device 0: kernel [0, 1000]; device 1: copy [0, 1000] (no kernel on its device) and a
    graph-level launch [500, 2000] (GPU records of a cudaGraphLaunch) hiding half the copy.

    device 0: kernel 1000, copy 0;  device 1: kernel 1500, copy 1000, both 500
    all devices: kernel 2500, copy 1000, both 500 -> 50 %
    """
    b = builder("current")
    b.kernel(T0, T0 + 1000, device=0)
    b.memcpy(T0, T0 + 1000, 4096, device=1, stream=3)
    b.device_id = 1
    corr = b.api(T0 - 100, T0 - 50, "cudaGraphLaunch_v10000")
    b.graph_trace(T0 + 500, T0 + 2000, corr=corr, stream=4)
    with nsysdiag.open(b.write(tmp_path / "multi.sqlite"), cache=False) as rep:
        res = overlap.run(rep)
    devs = {r["device_id"]: r for r in res.tables["devices"].to_pylist()}
    busy = {d: (r["kernel_busy_ns"], r["copy_busy_ns"], r["both_busy_ns"]) for d, r in devs.items()}
    assert busy == {0: (1000, 0, 0), 1: (1500, 1000, 500)}
    assert devs[0]["overlap_pct"] is None
    s = res.summary
    assert s["devices"] == 2
    assert (s["kernel_busy_ns"], s["copy_busy_ns"], s["both_busy_ns"]) == (2500, 1000, 500)
    assert s["overlap_pct"] == pytest.approx(50.0) and s["wall_span_ns"] == 2000
    streams = {(r["device_id"], r["stream_id"]): r for r in res.tables["streams"].to_pylist()}
    assert streams[(1, 4)]["graph_launches"] == 1 and streams[(1, 4)]["kernel_time_ns"] == 1500


def test_kernels_only_and_nothing_captured(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, T0, T0 + 100)
    with nsysdiag.open(b.write(tmp_path / "k.sqlite"), cache=False) as rep:
        res = overlap.run(rep)
    assert res.status == "ok" and res.summary["copy_busy_ns"] == 0
    assert res.summary["overlap_pct"] is None and "no copy time" in res.message
    assert res.summary["sync_copy_time_pct"] is None
    b = builder("current")
    b.nvtx(0, 10, "x")
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        assert overlap.run(rep).status == "not_captured"


@pytest.mark.parametrize("in_start_order", [True, False])
def test_random_intervals_against_direct_computation(builder, tmp_path, in_start_order):
    """Unions and intersection on a 10 ns grid, counted point by point; the kernels
    exported in start order (read as stored, the copies merged in) or not (read sorted)."""
    rng = random.Random(3)
    b = builder("current")
    kernels, copies = [], []
    for i in range(120):
        start = T0 + rng.randrange(0, 20000, 10)
        end = start + rng.choice([0, 10, 100, 500, 2000])
        if i % 3:
            kernels.append((start, end))
        else:
            copies.append((start, end))
            b.memcpy(start, end, 100, stream=rng.choice([7, 10]))
    for start, end in sorted(kernels) if in_start_order else kernels:
        b.kernel(start, end, stream=rng.choice([7, 8, 9]))
    with nsysdiag.open(b.write(tmp_path / "r.sqlite"), cache=False) as rep:
        (dev,) = overlap.run(rep).tables["devices"].to_pylist()
    grid = range(T0, T0 + 23000, 10)

    def depth(spans, t):
        return sum(1 for s, e in spans if s <= t < e)

    k = [depth(kernels, t) for t in grid]
    c = [depth(copies, t) for t in grid]
    assert dev["kernel_busy_ns"] == 10 * sum(1 for d in k if d)
    assert dev["copy_busy_ns"] == 10 * sum(1 for d in c if d)
    assert dev["both_busy_ns"] == 10 * sum(1 for a, b in zip(k, c, strict=True) if a and b)
    assert dev["concurrent_kernel_ns"] == 10 * sum(1 for d in k if d >= 2)
    assert dev["max_concurrent_kernels"] == max(k)
    assert 0 <= dev["overlap_pct"] <= 100


CORPUS = corpus_sqlite_files()


@pytest.fixture(scope="module")
def corpus_results():
    """overlap on every corpus file, run once for the tests below."""
    return run_on_corpus(overlap.run)


@pytest.mark.parametrize("name", ["baseline.sqlite", "gpu.sqlite"])
def test_h200_traces(name, corpus_results):
    res = corpus_results[need(H200 / name)]
    s = res.summary
    # one process, one stream (7): every copy is serialized with the kernels
    assert res.status == "ok" and s["devices"] == 1 and s["streams"] == 1
    assert s["single_stream"] is True and s["both_busy_ns"] == 0
    assert s["exposed_copy_ns"] == s["copy_busy_ns"] > 0
    assert s["sync_copies"] == 0          # the workload uses cudaMemcpyAsync
    assert 0 < s["kernel_busy_ns"] < s["wall_span_ns"]
    assert any("single stream" in f for f in res.findings)


@pytest.mark.skipif(not CORPUS, reason="shared corpus not available")
def test_every_corpus_file(corpus_results):
    for path, res in corpus_results.items():
        assert res.status in ("ok", "empty", "not_captured"), path
        if res.ok:
            s = res.summary
            assert 0 <= s["both_busy_ns"] <= min(s["kernel_busy_ns"], s["copy_busy_ns"]), path
            for dev in res.tables["devices"].to_pylist():
                assert dev["kernel_busy_ns"] <= dev["wall_span_ns"], path
                assert dev["copy_busy_ns"] <= dev["wall_span_ns"], path


def test_jitter_concurrency_is_overlaps_kernel_sweep(builder, tmp_path):
    """Kernels [0, 100) and [50, 150) on two streams, then [200, 300): busy 250 ns, two in
    flight for 50 ns -> 20 % (jitter reports it per device from overlap)."""
    from nsysdiag.analyses import jitter

    b = builder("current")
    b.launch(0, 1, 0, 100, stream=7)
    b.launch(2, 3, 50, 150, stream=8)
    b.launch(4, 5, 200, 300, stream=7)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite")) as rep:
        res = jitter.run(rep)
    (row,) = res.table("concurrency").to_pylist()
    assert (row["busy_ns"], row["concurrent_ns"]) == (250, 50)
    assert row["concurrent_pct"] == pytest.approx(20.0)
    assert res.summary["concurrent_pct"] == pytest.approx(20.0)
