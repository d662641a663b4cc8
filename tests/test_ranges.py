"""ranges: unit choice, per-instance decomposition and tail attribution.

Hand-built traces with answers worked out by hand in the comments, NVIDIA's
``nsys stats --report nvtx_sum`` on the H200 baseline, an independent Python recomputation
on real instances, and every corpus file.
"""

from __future__ import annotations

import csv
import functools

import numpy as np
import pytest
from conftest import CORPUS, H200, corpus_sqlite_files, need, open_corpus

import nsysdiag
from fixtures.nsysbuild import TraceBuilder
from nsysdiag.analyses import ranges
from nsysdiag.cli.main import main
from nsysdiag.errors import UsageError

CPU = [f"{c}_ns" for c in ranges.CPU_COMPONENTS]
GPU = [f"{c}_ns" for c in ranges.GPU_COMPONENTS]


def run(builder, tmp_path, **options):
    with nsysdiag.open(builder.write(tmp_path / "t.sqlite"), cache=False) as rep:
        return ranges.run(rep, **options)


def only(res):
    """The single instance of a result."""
    (row,) = res.table("instances").to_pylist()
    return row


@pytest.fixture(scope="module")
def core_path(tmp_path_factory):
    """One request [1000, 11000] on thread 4242 with forward [1500, 9000] nested inside.

    thread 4242: cudaLaunchKernel [2000, 2500] -> kernel [3000, 5000]
                 cuKernelGetName [2100, 2200]  (driver call nested in the launch)
                 cudaMemcpyAsync [2600, 3000]  -> copy [5000, 5500]
                 cudaStreamSynchronize [3000, 6000]
                 cudaMalloc [6500, 7000]
                 cudaLaunchKernel [10500, 11500] -> kernel [11600, 12000] (call ends after the
                 request: its kernel is not the request's, but 500 ns of the call are inside)
    thread 5000: cudaLaunchKernel [4000, 4500] -> kernel [8000, 8500]
    process 777: kernel [6000, 7000] (no API trace)
    a mark named request and an unclosed request must be ignored.
    """
    b = TraceBuilder("current")
    b.nvtx(1000, 11000, "request")
    b.nvtx(1500, 9000, "forward")
    b.nvtx(500, None, "request", style="mark")
    b.nvtx(20000, None, "request")
    b.launch(2000, 2500, 3000, 5000, name="gemm")
    b.api(2100, 2200, "cuKernelGetName", driver=True)
    b.memcpy(5000, 5500, 1 << 20, corr=b.api(2600, 3000, "cudaMemcpyAsync_v3020"))
    b.api(3000, 6000, "cudaStreamSynchronize_v3020")
    b.api(6500, 7000, "cudaMalloc_v3020")
    b.launch(10500, 11500, 11600, 12000, name="late")
    b.launch(4000, 4500, 8000, 8500, name="worker", tid=5000)
    b.kernel(6000, 7000, name="other_process", pid=777)
    return b.write(tmp_path_factory.mktemp("core") / "core.sqlite")


@pytest.fixture(scope="module")
def core(core_path):
    """The core trace, opened once for the tests that read it."""
    with nsysdiag.open(core_path, cache=False) as rep:
        yield rep


def test_nested_request_decomposition(core):
    res = ranges.run(core, min_instances=1)
    s = res.summary
    # request and forward have one closed instance each (mark and unclosed range ignored);
    # forward lies inside request, so request is the unit; push/pop -> thread scope
    assert (s["unit"], s["unit_source"], s["scope"], s["n"]) == (
        "request", "nvtx_auto", "thread", 1)
    r = only(res)
    assert (r["start_ns"], r["end_ns"], r["duration_ns"], r["tid"]) == (1000, 11000, 10000, 4242)
    # CPU: launch [2000,2500] (the nested driver call counts once, for the launch) + the
    # part [10500,11000] of the late launch = 1000; memcpy 400; sync 3000; cudaMalloc 500;
    # thread 5000's launch is not this thread's: outside = 10000 - 4900 = 5100
    assert [r[c] for c in CPU] == [1000, 400, 3000, 500, 5100]
    # GPU window [1000,11000] on device 0: own kernel [3000,5000] = 2000, own copy
    # [5000,5500] = 500, other work [6000,7000] + [8000,8500] = 1500; own work pending
    # [2500,5000] u [3000,5500] = [2500,5500], of which [2500,3000] idle = 500;
    # busy 4000, so idle 10000 - 4000 - 500 = 5500
    assert [r[c] for c in GPU] == [2000, 500, 1500, 500, 5500]
    assert (r["n_kernels"], r["n_copies"], r["own_kernel_total_ns"], r["own_copy_total_ns"]) == (
        1, 1, 2000, 500)
    assert (r["gpu_start_ns"], r["gpu_end_ns"], r["gpu_overhang_ns"], r["device_id"]) == (
        3000, 5500, 0, 0)
    assert r["cuda_covered"] is True


def test_a_copy_with_a_runtime_and_a_driver_call_counts_once(builder, tmp_path):
    """A copy (or a graph launch) whose id a runtime call and the driver call inside it
    share is one piece of own work, launched from the first entry to the last return.

    request [1000, 11000]: cudaMemcpyAsync [2600, 3000] with cuMemcpyAsync [2650, 2950]
    inside it (one id) -> copy [5000, 5500]; cudaGraphLaunch [3100, 3400] with
    cuGraphLaunch [3150, 3350] -> a graph-level execution [6000, 7000]."""
    b = builder("current")
    b.nvtx(1000, 11000, "request")
    corr = b.api(2600, 3000, "cudaMemcpyAsync_v3020")
    b.api(2650, 2950, "cuMemcpyAsync", corr=corr, driver=True)
    b.memcpy(5000, 5500, 1 << 20, corr=corr)
    corr = b.api(3100, 3400, "cudaGraphLaunch_v10000")
    b.api(3150, 3350, "cuGraphLaunch", corr=corr, driver=True)
    b.graph_trace(6000, 7000, corr=corr)
    r = only(run(b, tmp_path, range_name="request", min_instances=1))
    # one copy of 500 ns and one graph execution of 1000 ns, not two of each
    assert (r["n_kernels"], r["n_copies"], r["own_kernel_total_ns"], r["own_copy_total_ns"]) == (
        1, 1, 1000, 500)
    # own work pending from each call's last return: [3000, 5500] and [3400, 7000], merged
    # [3000, 7000] = 4000 ns, of which the copy and the graph run 1500: 2500 idle
    assert (r["gpu_own_kernel_ns"], r["gpu_own_copy_ns"], r["gpu_pending_idle_ns"]) == (
        1000, 500, 2500)


def test_named_inner_range(core):
    res = ranges.run(core, range_name="forward")
    assert (res.summary["unit"], res.summary["unit_source"]) == ("forward", "nvtx_named")
    r = only(res)
    # forward [1500,9000] = 7500: launch 500, memcpy 400, sync 3000, malloc 500 -> outside 3100;
    # GPU: own 2000 + 500, other 1500, pending idle 500, idle 7500 - 4000 - 500 = 3000
    assert [r[c] for c in CPU] == [500, 400, 3000, 500, 3100]
    assert [r[c] for c in GPU] == [2000, 500, 1500, 500, 3000]


def test_process_scope_counts_other_threads(core):
    r = only(ranges.run(core, range_name="request", scope="process"))
    # thread 5000's launch [4000,4500] falls inside the sync [3000,6000], which began first:
    # CPU unchanged. Its kernel [8000,8500] becomes own: own kernels 2000 + 500 = 2500,
    # other = process 777's 1000; pending [2500,5500] u [4500,8500] = [2500,8500] = 6000,
    # busy inside it 2500 + 1000 + 500 = 4000 -> pending idle 2000; idle 10000-4000-2000
    assert [r[c] for c in CPU] == [1000, 400, 3000, 500, 5100]
    assert [r[c] for c in GPU] == [2500, 500, 1000, 2000, 4000]
    assert r["n_kernels"] == 2


def test_totals_like_nsys_stats(core):
    res = ranges.run(core, min_instances=1)
    got = {r["range"]: (r["style"], r["instances"], r["total_ns"], r["min_ns"], r["max_ns"],
                        r["stddev_ns"], r["unclosed"]) for r in res.table("totals").to_pylist()}
    # nsys names default-domain ranges ':name'; one instance -> stddev 0
    assert got == {":request": ("push_pop", 1, 10000, 10000, 10000, 0, 1),
                   ":forward": ("push_pop", 1, 7500, 7500, 7500, 0, 0)}


@pytest.fixture
def steps(builder):
    """Ten 'step' ranges; the last is slower: its kernel takes 2x and its sync 3x as long.

    normal (9x, start s): range [s, s+10000]; launch [s+1000, s+2000] -> kernel
        [s+2000, s+6000]; cudaStreamSynchronize [s+5000, s+7000]
    slow (1x):            range [s, s+16000]; same launch -> kernel [s+2000, s+10000];
        cudaStreamSynchronize [s+5000, s+11000]
    """
    b = builder("current")
    for k in range(10):
        s, slow = (k + 1) * 100_000, k == 9
        b.nvtx(s, s + (16000 if slow else 10000), "step")
        b.launch(s + 1000, s + 2000, s + 2000, s + (10000 if slow else 6000))
        b.api(s + 5000, s + (11000 if slow else 7000), "cudaStreamSynchronize_v3020")
    return b


def test_tail_attribution(steps, tmp_path):
    with nsysdiag.open(steps.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep, min_instances=5)
        wide = ranges.run(rep, min_instances=5, tail_pct=20)
    s = res.summary
    # durations: nine of 10000 and one of 16000. quantile_cont at 0.45 / 0.55 -> positions
    # 4.05 / 4.95 of the sorted values -> both 10000: the median band is the nine normal
    # steps. 1 % of 10 rounds up to the 1 slowest. p90 at 8.1: 10000 + 0.1 * 6000;
    # p99 at 8.91: 10000 + 0.91 * 6000 = 15460.
    assert (s["unit"], s["n"], s["tail_n"], s["median_band_n"]) == ("step", 10, 1, 9)
    assert (s["p50_ns"], s["p90_ns"], s["max_ns"]) == (10000, pytest.approx(10600), 16000)
    assert s["p99_ns"] == pytest.approx(15460) and s["p99_over_p50"] == pytest.approx(1.546)
    # CPU, normal / slow: launch 1000 / 1000; sync 2000 / 6000; outside 7000 / 9000.
    # GPU: own kernel 4000 / 8000, idle 6000 / 8000, pending idle 0 (the kernel runs at once).
    # duration delta 6000: sync +4000 (2/3), outside +2000 (1/3); own kernel +4000 (2/3),
    # idle +2000 (1/3)
    att = s["attribution"]
    expect = {"cpu_launch": (1000, 1000, 0), "cpu_sync": (6000, 2000, 4000),
              "cpu_outside_cuda": (9000, 7000, 2000), "gpu_own_kernel": (8000, 4000, 4000),
              "gpu_idle": (8000, 6000, 2000), "gpu_pending_idle": (0, 0, 0)}
    for comp, (tail, med, delta) in expect.items():
        a = att[comp]
        assert (a["tail_mean_ns"], a["median_mean_ns"], a["delta_ns"]) == (tail, med, delta), comp
    # nothing shrank: the shares of each side's growth are those of the duration's delta
    assert att["cpu_sync"]["share_of_growth"] == pytest.approx(2 / 3)
    assert att["cpu_outside_cuda"]["share_of_growth"] == pytest.approx(1 / 3)
    assert att["gpu_own_kernel"]["share_of_growth"] == pytest.approx(2 / 3)
    assert att["cpu_launch"]["share_of_growth"] == 0
    # the GPU side names the work that grew
    assert (s["top_component"], s["top_cpu_component"], s["top_gpu_component"]) == (
        "gpu_own_kernel", "cpu_sync", "gpu_own_kernel")
    table = res.table("attribution").to_pylist()
    assert table[0]["component"] == "duration" and table[0]["delta_ns"] == 6000
    for family in ("cpu", "gpu"):
        rows = [r for r in table if r["family"] == family]
        assert sum(r["share_of_growth"] for r in rows) == pytest.approx(1)
        assert {(r["family_growth_ns"], r["family_shrink_ns"]) for r in rows} == {(6000, 0)}
    assert res.table("slowest").to_pylist()[0]["duration_ns"] == 16000
    assert any("6 us longer than the median band" in f for f in res.findings)
    # 20 %: the two slowest, mean duration (16000 + 10000) / 2 = 13000, sync 4000:
    # deltas 3000 and 2000 -> share 2/3
    w = wide.summary
    assert (w["tail_n"], w["attribution"]["cpu_sync"]["delta_ns"]) == (2, 2000)
    assert w["attribution"]["cpu_sync"]["share_of_growth"] == pytest.approx(2 / 3)
    assert res.offset_notes() == []


def test_tail_attribution_with_shrinking(builder, tmp_path):
    """A component that shrinks lets another grow by more than the unit did: its share is
    of its side's growth (never above 100%) and the shrinking is stated.

    normal (9x, start s): range [s, s+10000]; launch [s+1000, s+2000] -> kernel
        [s+2000, s+6000]; cudaStreamSynchronize [s+5000, s+7000]
    slow (1x):            range [s, s+12000]; launch [s+1000, s+2500] -> kernel
        [s+2000, s+11000]; cudaStreamSynchronize [s+5000, s+11500]
    """
    b = builder("current")
    for k in range(10):
        s, slow = (k + 1) * 100_000, k == 9
        b.nvtx(s, s + (12000 if slow else 10000), "step")
        b.launch(s + 1000, s + (2500 if slow else 2000), s + 2000, s + (11000 if slow else 6000))
        b.api(s + 5000, s + (11500 if slow else 7000), "cudaStreamSynchronize_v3020")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep, min_instances=5)
    # duration 10000 -> 12000: +2000.
    # GPU side: own kernel 4000 -> 9000 (+5000), idle 6000 -> 3000 (-3000): growth 5000,
    #   shrink 3000, 5000 - 3000 = 2000. The kernel's delta is 250% of the duration's; of
    #   the GPU side's growth it is 100%.
    # CPU side: launch 1000 -> 1500 (+500), sync 2000 -> 6500 (+4500), outside CUDA
    #   7000 -> 4000 (-3000): growth 5000, shrink 3000; shares 10% and 90%.
    att = res.summary["attribution"]
    expect = {"gpu_own_kernel": (5000, 1.0), "gpu_idle": (-3000, 0.0),
              "cpu_launch": (500, 0.1), "cpu_sync": (4500, 0.9), "cpu_outside_cuda": (-3000, 0.0)}
    for comp, (delta, share) in expect.items():
        assert att[comp]["delta_ns"] == delta, comp
        assert att[comp]["share_of_growth"] == pytest.approx(share), comp
    assert all(0 <= a["share_of_growth"] <= 1 for a in att.values())
    table = {r["component"]: r for r in res.table("attribution").to_pylist()}
    assert table["duration"]["delta_ns"] == 2000 and table["duration"]["share_of_growth"] == 1
    for c in ("gpu_idle", "cpu_launch"):
        assert (table[c]["family_growth_ns"], table[c]["family_shrink_ns"]) == (5000, 3000)
    gpu = res.balance("gpu")
    assert (gpu.growth_ns, gpu.shrink_ns, gpu.delta_ns) == (5000, 3000, 2000)
    notes = res.offset_notes()
    # the CPU side's top grower (sync, +4500) also passes the units' +2000
    assert notes == [
        "CPU side: cpu_outside_cuda shrank by 3 us, so cpu_sync's growth (4.5 us) exceeds the "
        "units' (2 us); shares are of the side's growth (5 us), which the shrinking offsets "
        "by 3 us",
        "GPU side: gpu_idle shrank by 3 us, so gpu_own_kernel's growth (5 us) exceeds the "
        "units' (2 us); shares are of the side's growth (5 us), which the shrinking offsets "
        "by 3 us"]
    assert all(n in res.findings for n in notes)
    assert any("GPU side: gpu_own_kernel 100%" in f and "of each side's growth" in f
               for f in res.findings)


def test_sync_fallback(builder, tmp_path):
    # thread 4242: DeviceSync [1000,2000] (with a nested cuCtxSynchronize, the same wait),
    # launch [3000,3500] -> kernel [4000,4500], DeviceSync [5000,6000], StreamQuery
    # [7000,7100] (polls, no boundary), StreamSync [9000,12000]; thread 99 syncs once.
    b = builder("current")
    b.api(1000, 2000, "cudaDeviceSynchronize_v3020")
    b.api(1100, 1900, "cuCtxSynchronize", driver=True)
    b.launch(3000, 3500, 4000, 4500)
    b.api(5000, 6000, "cudaDeviceSynchronize_v3020")
    b.api(7000, 7100, "cudaStreamQuery_v5000")
    b.api(9000, 12000, "cudaStreamSynchronize_v3020")
    b.api(2500, 2600, "cudaStreamSynchronize_v3020", tid=99)
    res = run(b, tmp_path)
    s = res.summary
    assert (s["unit"], s["unit_source"], s["scope"], s["n"]) == ("sync-interval", "sync_fallback",
                                                                  "thread", 2)
    first, second = res.table("instances").to_pylist()
    # (2000, 6000]: launch 500, sync [5000,6000] 1000, outside 2500; own kernel 500,
    # pending [3500,4500] of which [3500,4000] idle, idle 4000 - 500 - 500 = 3000
    assert (first["start_ns"], first["end_ns"]) == (2000, 6000)
    assert [first[c] for c in CPU] == [500, 0, 1000, 0, 2500]
    assert [first[c] for c in GPU] == [500, 0, 0, 500, 3000]
    # (6000, 12000]: sync 3000 + query 100, outside 2900; the GPU idles (device 0 of the process)
    assert (second["start_ns"], second["duration_ns"]) == (6000, 6000)
    assert [second[c] for c in CPU] == [0, 0, 3100, 0, 2900]
    assert [second[c] for c in GPU] == [0, 0, 0, 0, 6000]
    assert "totals" not in res.tables


def test_blocking_copies_and_memsets_are_sync_points(builder, tmp_path):
    # no Synchronize call at all: synchronous cudaMemcpy [1000,2000], a launch [2500,2600],
    # cudaMemcpyAsync [3000,3100] and cudaStreamWaitEvent [3200,3300] (no boundaries),
    # cudaMemcpyFromSymbol [5000,6000] (a flag poll), cudaMemset [7000,7500] and the
    # driver's cuMemcpyDtoH_v2 [9000,9400]; a cuMemsetD8Async [8000,8100] is no boundary.
    # Boundaries end at 2000, 6000, 7500, 9400 -> three instances.
    b = builder("current")
    b.api(1000, 2000, "cudaMemcpy_v3020")
    b.launch(2500, 2600, 2700, 2900)
    b.api(3000, 3100, "cudaMemcpyAsync_v3020")
    b.api(3200, 3300, "cudaStreamWaitEvent_v3020")
    b.api(5000, 6000, "cudaMemcpyFromSymbol_v3020")
    b.api(7000, 7500, "cudaMemset_v3020")
    b.api(8000, 8100, "cuMemsetD8Async", driver=True)
    b.api(9000, 9400, "cuMemcpyDtoH_v2", driver=True)
    res = run(b, tmp_path)
    assert (res.unit, res.unit_source) == ("sync-interval", "sync_fallback")
    spans = [(r["start_ns"], r["end_ns"]) for r in res.table("instances").to_pylist()]
    assert spans == [(2000, 6000), (6000, 7500), (7500, 9400)]


def test_async_calls_alone_are_no_sync_points(builder, tmp_path):
    b = builder("current")
    b.api(1000, 2000, "cudaMemcpyAsync_v3020")
    b.api(3000, 3100, "cudaMemsetAsync_v3020")
    b.api(4000, 4100, "cudaStreamWaitEvent_v3020")
    res = run(b, tmp_path)
    assert res.status == "not_captured"
    assert "no blocking host waits" in res.message


def test_cross_thread_start_end_range(builder, tmp_path):
    # start/end range [1000,9000] started on thread 10, ended on thread 11; the work runs on
    # worker thread 12: launch [2000,3000] -> kernel [3500,6000], sync [6000,7000];
    # thread 10 calls cudaMalloc [1500,1800]
    b = builder("current")
    b.nvtx_domain(3, "serving")
    b.nvtx(1000, 9000, "req", style="start_end", tid=10, end_tid=11, domain_id=3)
    b.launch(2000, 3000, 3500, 6000, tid=12)
    b.api(6000, 7000, "cudaStreamSynchronize_v3020", tid=12)
    b.api(1500, 1800, "cudaMalloc_v3020", tid=10)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep, range_name="req")
        forced = ranges.run(rep, range_name="serving:req", scope="thread")
    assert res.summary["scope"] == "process"
    r = only(res)
    # process scope: launch 1000, sync 1000, malloc 300, outside 8000 - 2300 = 5700;
    # own kernel 2500; pending [3000,6000] -> [3000,3500] idle; idle 8000 - 2500 - 500
    assert [r[c] for c in CPU] == [1000, 0, 1000, 300, 5700]
    assert [r[c] for c in GPU] == [2500, 0, 0, 500, 5000]
    # forced thread scope: only thread 10's malloc counts; the kernel is other work
    r = only(forced)
    assert [r[c] for c in CPU] == [0, 0, 0, 300, 7700]
    assert [r[c] for c in GPU] == [0, 0, 2500, 0, 5500]


def test_push_pop_range_whose_work_runs_elsewhere_goes_process_scoped(builder, tmp_path):
    b = builder("current")
    b.nvtx(1000, 9000, "req", tid=10)
    b.launch(2000, 3000, 3500, 6000, tid=12)
    res = run(b, tmp_path, range_name="req")
    # thread 10 made no CUDA call inside the range -> the process's calls count
    assert res.summary["scope"] == "process"
    assert only(res)["cpu_launch_ns"] == 1000


def test_auto_choice_prefers_the_outermost_repeated_range(builder, tmp_path):
    # 20 requests of 9 us, each holding one forward (7 us) holding three layers (1 us, each
    # launching a kernel): all three qualify; forward lies in request, layer in forward
    b = builder("current")
    for k in range(20):
        s = 10_000 + k * 10_000
        b.nvtx(s, s + 9000, "request")
        b.nvtx(s + 1000, s + 8000, "forward")
        for j in range(3):
            t = s + 2000 + 2000 * j
            b.nvtx(t, t + 1000, "layer")
            b.launch(t + 100, t + 200, t + 300, t + 900)
    b.nvtx(0, 300_000, "main")  # outermost but not repeated
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        assert ranges.durations(rep) == ("request", pytest.approx(np.full(20, 9000)), "nvtx_auto")
        cands = ranges.candidates(rep, {"min_instances": 20, "min_median_ns": 1000,
                                        "cuda_traced": True})
        unit = ranges.select_unit(rep)
    # qualifying and outermost first, then by total time: forward 140 us, layer 60 us
    assert [(c["name"], c["n"], c["inside_frac"], c["usual_parent"], c["qualifies"])
            for c in cands] == [("request", 20, 0.0, None, True),
                                ("forward", 20, 1.0, "request", True),
                                ("layer", 60, 1.0, "forward", True)]
    # each request holds three launch calls, each layer one
    assert [c["gpu_calls_mean"] for c in cands] == [3, 3, 1]
    assert (unit.name, unit.runner_up) == ("request", "forward")
    assert "repeats 20 times" in unit.reason and "runner-up forward: lies inside request" \
        in unit.reason


def _steps(b, n, *, t0=100_000, period=20_000, length=10_000, op=None, op_domain=0):
    """n ranges "step" of ``length`` ns, each launching a kernel; with ``op``, an operator
    range of that name (2 us, launching a kernel) inside each step."""
    for k in range(n):
        s = t0 + k * period
        b.nvtx(s, s + length, "step")
        b.launch(s + 100, s + 200, s + 300, s + 900)
        if op:
            b.nvtx(s + 2000, s + 4000, op, domain_id=op_domain)
            b.launch(s + 2100, s + 2200, s + 2300, s + 2900)


def test_operator_and_library_ranges_are_not_units(builder, tmp_path):
    # emit_nvtx's operator ranges are more frequent than the step (twice: 40 against 20)
    # and launch GPU work, but are operators
    b = builder("current")
    _steps(b, 20, op="aten::addmm, seq = 12, op_id = 3")
    _steps(b, 20, t0=1_000_000, op="aten::relu")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        unit = ranges.select_unit(rep)
    assert unit.name == "step"
    # a library domain (MPI) counts as an operator too; without the step none qualifies
    b = builder("current")
    b.nvtx_domain(5, "MPI")
    for k in range(25):
        s = 10_000 + 10_000 * k
        b.nvtx(s, s + 5000, "MPI_Allreduce", domain_id=5)
        b.launch(s + 100, s + 200, s + 300, s + 900)
    with nsysdiag.open(b.write(tmp_path / "m.sqlite"), cache=False) as rep:
        cands = ranges.candidates(rep, {"min_instances": 20, "min_median_ns": 1000,
                                        "cuda_traced": True})
        res = ranges.run(rep)
    assert [(c["name"], c["domain"], c["operator_like"], c["qualifies"]) for c in cands] == [
        ("MPI_Allreduce", "MPI", True, False)]
    assert res.status != "ok" and "no repeated NVTX range qualifies as a unit" in res.message
    assert "an operator or library range (domain MPI)" in res.message


def test_short_ranges_and_ranges_without_gpu_work_are_not_units(builder, tmp_path):
    b = builder("current")
    _steps(b, 20)
    for k in range(40):
        s = 100_000 + k * 10_000 + 5000
        # sub-microsecond bookkeeping holding a launch, and a CPU-only range
        b.nvtx(s, s + 500, "null_count")
        b.launch(s + 100, s + 200, s + 300, s + 400)
        b.nvtx(s + 1000, s + 4000, "log")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        cands = {c["name"]: c for c in ranges.candidates(
            rep, {"min_instances": 20, "min_median_ns": 1000, "cuda_traced": True})}
        unit = ranges.select_unit(rep)
    assert unit.name == "step"
    assert (cands["null_count"]["median_ns"], cands["null_count"]["qualifies"]) == (500, False)
    assert (cands["log"]["gpu_share"], cands["log"]["qualifies"]) == (0, False)
    assert cands["step"]["gpu_share"] == 1


def test_choose_unit_reports_runner_up_and_reason():
    def cand(name, **kw):
        base = dict(n=30, total_ns=3e6, median_ns=1e5, domain="", gpu_share=1.0,
                    gpu_calls_mean=4.0, operator_like=False, qualifies=True, inside_frac=0.0,
                    usual_parent=None)
        return ranges.Candidate(name=name, **{**base, **kw})

    a, b = cand("iteration", total_ns=9e6), cand("eval", total_ns=2e6)
    choice = ranges.choose_unit([a, b])
    assert choice[:2] == ("iteration", "eval")
    assert "of 2 outermost qualifying ranges it covers the most time (9 ms)" in choice.reason
    assert "runner-up eval: covers less time (2 ms)" in choice.reason
    op = cand("aten::mm", operator_like=True, qualifies=False, domain="")
    none = ranges.choose_unit([op])
    assert none.unit is None and "aten::mm (30 times): an operator or library range" \
        in none.reason


def test_warmup_is_the_leading_stretch_only(builder, tmp_path):
    # 30 steps of 10 us; the first holds a module load and lasts 500 us (50x the median),
    # the second a cuBLAS handle creation at the usual length (both warm-up: the stretch
    # runs to the first steady unit, the third); the 10th loads a module late (mid-run:
    # counted, named as evidence, not set apart)
    b = builder("current")
    for k in range(30):
        s = 1_000_000 + k * 1_000_000
        length = 500_000 if k == 0 else 10_000 + k
        b.nvtx(s, s + length, "step")
        b.launch(s + 100, s + 200, s + 300, s + 900)
        if k == 0:
            b.api(s + 1000, s + 400_000, "cuLibraryLoadData")
        if k == 1:
            b.nvtx(s + 1000, s + 2000, "cublasCreate_v2")
        if k == 9:
            b.api(s + 1000, s + 2000, "cuModuleLoadData")
    path = b.write(tmp_path / "t.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
        kept = ranges.run(rep, keep_warmup=True)
    assert (res.n, res.n_warmup, res.warmup_kept) == (28, 2, False)
    assert res.warmup_calls == ("cuLibraryLoadData", "cublasCreate_v2")
    assert res.max_ns == 10_029  # the warm-up units are left out of the tail figures
    inst = res.table("instances").to_pylist()
    assert [r["instance"] for r in inst if r["warmup"]] == [1, 2]
    assert [r["instance"] for r in inst if r["oneoff"]] == [1, 2, 10]
    assert (res.n_later_oneoff, res.later_oneoff_calls) == (1, ("cuModuleLoadData",))
    assert res.findings[0].startswith(
        "2 warm-up units of 30, the leading stretch before the first steady unit (holding "
        "cuLibraryLoadData, cublasCreate_v2; 1 lasting 500 us against a median of 10 us)")
    # 2 of 30 is more than a few percent: said
    assert "7% of the units is more than a warm-up usually takes" in res.findings[0]
    assert res.findings[1].startswith("one-off calls after the warm-up in 1 of 30 units (3%: "
                                      "cuModuleLoadData in 1)")
    assert (kept.n, kept.n_warmup, kept.warmup_kept, kept.max_ns) == (30, 2, True, 500_000)
    d = nsysdiag.diagnose(path)
    # the diagnosis (classifier and ratio) reads the same 28 units
    durations = [10_000 + k for k in range(2, 30)]
    assert d.tail.n == 28 and d.tail.p99_over_p50 == pytest.approx(
        np.percentile(durations, 99) / np.percentile(durations, 50))


def test_allocations_mid_run_are_counted_not_warmup(builder, tmp_path):
    # a caching pinned allocator that grows with request size: every request whose size is
    # new allocates (cudaHostAlloc), scattered through the run; big requests are the slow
    # ones. Only the leading stretch (the first request, which also loads the module, and
    # the second, a new size too) is warm-up; every later request counts.
    b = builder("current")
    sizes = [1, 2, 1, 1, 4, 1, 2, 1, 8, 1, 1, 2, 16, 1, 1, 4, 1, 32, 1, 2, 1, 1, 8, 1, 64, 1,
             1, 2, 1, 1, 4, 1, 1, 128, 1, 2, 1, 1, 1, 1]
    seen: set[int] = set()
    for k, size in enumerate(sizes):
        s = 1_000_000 + k * 10_000_000
        length = 100_000 * size
        b.nvtx(s, s + length, "request")
        b.launch(s + 100, s + 200, s + 300, s + length - 1000)
        if size not in seen:
            seen.add(size)
            b.api(s + 1000, s + 2000, "cudaHostAlloc")
        if k == 0:
            b.api(s + 3000, s + 4000, "cuModuleLoadData")
    res = run(b, tmp_path)
    inst = res.table("instances").to_pylist()
    assert [r["instance"] for r in inst if r["warmup"]] == [1, 2]
    assert res.n == len(sizes) - 2
    # nothing mid-run is dropped: the big requests that allocate late all count
    allocating_later = [k + 1 for k, size in enumerate(sizes)
                        if size not in sizes[:k] and k >= 2]
    assert [r["instance"] for r in inst if r["oneoff"] and r["counted"]] == allocating_later
    assert res.n_later_oneoff == len(allocating_later) and res.later_oneoff_calls == (
        "cudaHostAlloc",)
    assert res.max_ns == 128 * 100_000


def test_a_call_every_unit_makes_is_no_warmup(builder, tmp_path):
    b = builder("current")
    for k in range(20):
        s = 100_000 + k * 100_000
        b.nvtx(s, s + 10_000, "step")
        b.launch(s + 100, s + 200, s + 300, s + 900)
        b.api(s + 1000, s + 2000, "cudaMalloc_v3020")
    res = run(b, tmp_path)
    assert (res.n, res.n_warmup, res.warmup_calls) == (20, 0, ())


def test_unknown_range_name_is_a_usage_error(core, core_path, capsys):
    with pytest.raises(UsageError, match=r"no closed NVTX range named 'nope'; most frequent: "
                                         r"forward \(1\), request \(1\)"):
        ranges.run(core, range_name="nope")
    assert main(["--no-cache", "ranges", str(core_path), "--range", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nsysdiag: error:") and "\n" not in err


def test_quotes_in_range_names_are_data(builder, tmp_path):
    b = builder("current")
    b.nvtx(1000, 2000, "it's \"quoted\"")
    b.nvtx(3000, 4500, "x")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        d = ranges.durations(rep, "it's \"quoted\"")
        assert (d.unit, list(d.durations_ns), d.unit_source) == ("it's \"quoted\"", [1000],
                                                                  "nvtx_named")
        with pytest.raises(UsageError, match="no closed NVTX range named"):
            ranges.run(rep, range_name="x' OR '1'='1")


def test_missing_data(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    res = run(b, tmp_path)
    assert res.status == "not_captured" and "--trace=cuda,nvtx" in res.message
    b = builder("current")
    b.nvtx(5, None, "only a mark", style="mark")
    assert run(b, tmp_path).status == "not_captured"
    b = builder("current")
    b.nvtx(0, 10, "once")
    res = run(b, tmp_path)
    assert res.status == "empty" and "once (1)" in res.message and "--range" in res.message
    with nsysdiag.open(b.write(tmp_path / "u.sqlite"), cache=False) as rep:
        assert ranges.durations(rep) == (None, pytest.approx(np.array([])), None)


@pytest.mark.parametrize("kw", [{"tail_pct": 0}, {"tail_pct": 60}, {"min_instances": 0},
                                {"scope": "device"}])
def test_bad_options(core, kw):
    with pytest.raises(UsageError, match="must be"):
        ranges.run(core, **kw)


# -- real traces ----------------------------------------------------------------------------

@functools.cache
def corpus_result(path):
    with open_corpus(path) as rep:
        return ranges.run(rep)


def check_components(res):
    for r in res.table("instances").to_pylist():
        for family in (CPU, GPU):
            values = [r[c] for c in family if c in r]
            if values and None not in values:
                assert sum(values) == r["duration_ns"], r
                assert min(values) >= 0, r


def test_baseline_nvtx_totals_match_nsys_stats():
    res = corpus_result(need(H200 / "baseline.sqlite"))
    ref = need(H200 / "nsys-reference" / "stats_baseline_nvtx_sum.csv")
    style = {"PushPop": "push_pop", "StartEnd": "start_end"}
    got = {(r["range"], r["style"]): r for r in res.table("totals").to_pylist()}
    rows = list(csv.DictReader(ref.read_text().splitlines()))
    assert len(rows) == len(got) == 2
    for row in rows:
        r = got[(row["Range"], style[row["Style"]])]
        assert (r["total_ns"], r["instances"], r["min_ns"], r["max_ns"]) == (
            int(row["Total Time (ns)"]), int(row["Instances"]), int(row["Min (ns)"]),
            int(row["Max (ns)"]))
        for ours, theirs in (("avg_ns", "Avg (ns)"), ("med_ns", "Med (ns)"),
                             ("stddev_ns", "StdDev (ns)"), ("time_pct", "Time (%)")):
            assert abs(r[ours] - float(row[theirs])) <= 0.05 + 1e-9, (ours, row)


def test_baseline_request_unit():
    path = need(H200 / "baseline.sqlite")
    res = corpus_result(path)
    s = res.summary
    # the first request (26.3 ms, lazy module loading) is warm-up, left out of the figures
    assert (s["unit"], s["unit_source"], s["scope"], s["n"], s["n_attributed"]) == (
        "request", "nvtx_auto", "thread", 1499, 1499)
    assert (s["n_warmup"], s["warmup_calls"]) == (1, ["cuLibraryLoadData"])
    assert (s["tail_n"], s["max_ns"]) == (15, 5050442)
    # a CPU-side tail: the host, not the GPU, took longer
    assert s["top_component"] == "cpu_outside_cuda" and s["top_gpu_component"] == "gpu_idle"
    check_components(res)
    with nsysdiag.open(path, cache=False) as rep:
        d = ranges.durations(rep)
    assert (d.unit, d.unit_source, len(d.durations_ns), int(d.durations_ns.sum())) == (
        "request", "nvtx_auto", 1500, 3146549399)
    assert d.durations_ns[0] == 26340982
    assert s["p99_ns"] == pytest.approx(np.percentile(d.durations_ns[1:], 99))


def test_gpu_trace_tail_waits_on_the_gpu():
    res = corpus_result(need(H200 / "gpu.sqlite"))
    s = res.summary
    # 1497 requests, the first warm-up (cuLibraryLoadData)
    assert (s["unit"], s["n"], s["n_warmup"]) == ("request", 1496, 1)
    # the CUDA trace stops early: the instances after it are left out of the attribution
    assert s["n_attributed"] < s["n"] and any("outside the span" in f for f in res.findings)
    # the host waits in syncs while submitted work does not run: contention the trace hides
    assert (s["top_component"], s["top_cpu_component"]) == ("gpu_pending_idle", "cpu_sync")
    check_components(res)


def _union(intervals):
    out = []
    for s, e in sorted(i for i in intervals if i[1] > i[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(iv):
    return sum(e - s for s, e in iv)


def test_baseline_matches_independent_recomputation():
    """Five baseline requests recomputed in Python: top-level calls clipped to the window,
    interval unions for the GPU side."""
    res = corpus_result(need(H200 / "baseline.sqlite"))
    rows = res.table("slowest").to_pylist()[:3] + res.table("instances").to_pylist()[700:702]
    comp = {"launch": "cpu_launch_ns", "graph_launch": "cpu_launch_ns", "memcpy": "cpu_memcpy_ns",
            "memset": "cpu_memcpy_ns", "sync": "cpu_sync_ns"}
    with nsysdiag.open(H200 / "baseline.sqlite", cache=False) as rep:
        for r in rows:
            a, b = r["start_ns"], r["end_ns"]
            calls = rep.execute(
                "SELECT start_ns, end_ns, category, correlation_id FROM api_calls "
                "WHERE tid = $tid AND end_ns > $a AND start_ns < $b ORDER BY start_ns, end_ns DESC",
                {"tid": r["tid"], "a": a - 10**8, "b": b})
            got = dict.fromkeys(CPU[:-1], 0)
            reach = None
            for s, e, cat, _ in calls:  # top-level calls: not inside an earlier call
                if reach is None or s >= reach:
                    got[comp.get(cat, "cpu_other_api_ns")] += max(0, min(e, b) - max(s, a))
                reach = e if reach is None else max(reach, e)
            assert got == {c: r[c] for c in CPU[:-1]}
            launched = {c: e for s, e, _, c in calls if s >= a and e <= b}
            ops = rep.execute(
                "SELECT 'k', start_ns, end_ns, correlation_id FROM kernels "
                "WHERE end_ns > $a - 100000000 AND start_ns < $b + 100000000 UNION ALL "
                "SELECT 'c', start_ns, end_ns, correlation_id FROM memcpys "
                "WHERE end_ns > $a - 100000000 AND start_ns < $b + 100000000", {"a": a, "b": b})
            own = [o for o in ops if o[3] in launched]
            clip = [(max(s, a), min(e, b)) for _, s, e, _ in own]
            kern = _union([(max(s, a), min(e, b)) for k, s, e, _ in own if k == "k"])
            busy = _union([(max(s, a), min(e, b)) for _, s, e, _ in ops])
            pend = _union([(max(launched[c], a), min(e, b)) for _, _, e, c in own])
            pend_busy = _length(_union([(max(p0, q0), min(p1, q1)) for p0, p1 in pend
                                        for q0, q1 in busy]))
            assert r["gpu_own_kernel_ns"] == _length(kern)
            assert r["gpu_own_copy_ns"] == _length(_union(clip)) - _length(kern)
            assert r["gpu_other_ns"] == _length(busy) - _length(_union(clip))
            assert r["gpu_pending_idle_ns"] == _length(pend) - pend_busy
            assert r["n_kernels"] == sum(o[0] == "k" for o in own)


@pytest.mark.parametrize("path", corpus_sqlite_files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_runs(path):
    res = corpus_result(path)
    assert res.status in ("ok", "empty", "not_captured"), res.message
    if res.ok:
        inst = res.table("instances")
        assert res.summary["n"] + res.summary["n_warmup"] == inst.num_rows > 0
        assert res.summary["n"] == sum(inst.column("counted").to_pylist())
        assert res.summary["unit_source"] in ("nvtx_auto", "nvtx_group", "launch_cycle",
                                              "sync_fallback")
        if res.summary["unit_source"] in ("nvtx_auto", "nvtx_group"):
            # an automatic NVTX unit lasts at least a microsecond and launches GPU work
            # (which an NVTX-only capture cannot show)
            assert np.median(inst.column("duration_ns").to_numpy()) >= 1000
            own = (inst.column("n_kernels").to_numpy() + inst.column("n_copies").to_numpy()) > 0
            assert own.mean() >= 0.5 or "GPU work not traced" in res.unit_reason
        check_components(res)


def test_offset_note_only_when_a_share_would_read_above_100():
    # GPU side: own kernel +1004 ns, idle -4 ns: the units grew 1000 ns; the kernel's
    # growth is 100.4% of it, which reads 100%: no note. With idle -6 ns (+1006 against
    # +1000: 100.6%, reads 101%) the note names the shrinking.
    from nsysdiag.analyses.ranges import ComponentGrowth, side_balance

    def att(kernel, idle):
        return (ComponentGrowth(ranges.Component.GPU_OWN_KERNEL, None, None, kernel, 1.0),
                ComponentGrowth(ranges.Component.GPU_IDLE, None, None, idle, 0.0))

    assert side_balance(att(1004.0, -4.0), "gpu").offset_note() is None
    b = side_balance(att(1006.0, -6.0), "gpu")
    assert (b.growth_ns, b.shrink_ns, b.delta_ns) == (1006, 6, 1000)
    assert b.offset_note().startswith("GPU side: gpu_idle shrank by 0.006 us, so "
                                      "gpu_own_kernel's growth (1.01 us) exceeds")
    assert side_balance(att(1006.0, -6.0), "cpu") is None
