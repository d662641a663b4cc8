"""gpu_idle: each gap before a kernel gets its cause, on a hand-built trace whose answers
are computed by hand below; the classification rule on arrays; the corpus."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS, corpus_sqlite_files, need

import nsysdiag
from nsysdiag.analyses import gpu_idle
from nsysdiag.settings import Settings


@pytest.fixture
def trace(builder):
    """One thread launching eight kernels on one GPU, each gap with another cause.

    ns    thread (CUDA calls)             GPU
    0     launch k1 [0, 10]               k1 [20, 100]
    10    launch k2 [10, 150]             k2 [160, 200]   gap A [100, 160] = 60
    300   launch k3 [300, 310]            k3 [320, 400]   gap B [200, 320] = 120
    310   sync [310, 450]
    460   launch k4 [460, 470]            k4 [480, 500]   gap C [400, 480] = 80
    505   memcpy [505, 515]               copy [520, 600]
    515   launch k5 [515, 518]            k5 [610, 650]   gap D [500, 610] = 110
    520   launch k6 [520, 530]            k6 [700, 750]   gap E [650, 700] = 50
    995   launch k7 [995, 1005]           k7 [1010, 1050] gap F [750, 1010] = 260
    1100  launch k8 [1100, 1110]          k8 [1210, 1250] gap G [1050, 1210] = 160
                                          pid 99: kernel [1060, 1200]
    units 'req': [0, 800] and [1000, 1500]
    """
    b = builder("current")
    b.launch(0, 10, 20, 100)
    b.launch(10, 150, 160, 200)
    b.launch(300, 310, 320, 400)
    b.api(310, 450, "cudaStreamSynchronize_v3020")
    b.launch(460, 470, 480, 500)
    corr = b.api(505, 515, "cudaMemcpyAsync_v3020")
    b.memcpy(520, 600, 1 << 20, corr=corr)
    b.launch(515, 518, 610, 650)
    b.launch(520, 530, 700, 750)
    b.launch(995, 1005, 1010, 1050)
    b.launch(1100, 1110, 1210, 1250)
    b.kernel(1060, 1200, pid=99)
    return b


def causes_of(path, **options):
    with nsysdiag.open(path, cache=False) as rep:
        return gpu_idle.run(rep, **options)


def test_every_gap_gets_its_cause(trace, tmp_path):
    # A: at idle start (100) the thread is in k2's launch call, which fills the host
    #    window [100, 150]: launch_bound. B: window [200, 310] holds 10 ns of launch
    #    call, 100 outside CUDA: cpu_work. C: in the sync at 400: host_sync. D: the own
    #    copy covers 80 of 110 (>= 55): copy. E: k6's call returned at 530 < 650:
    #    dependency. F: 10 of 260 ns inside a unit (< 130): between_units. G: the other
    #    process' kernel covers 140 of 160: other_process.
    trace.nvtx(0, 800, "req")
    trace.nvtx(1000, 1500, "req")
    r = causes_of(trace.write(tmp_path / "t.sqlite"), range_name="req")
    gaps = r.table("gaps").to_pylist()
    assert [(g["gap_ns"], g["cause"]) for g in gaps] == [
        (60, "launch_bound"), (120, "cpu_work"), (80, "host_sync"), (110, "copy"),
        (50, "dependency"), (260, "between_units"), (160, "other_process")]
    assert r.gaps == 7 and r.idle_ns == 840 and r.unit == "req"
    assert r.by_cause["between_units"] == {"gaps": 1, "idle_ns": 260,
                                           "share_pct": pytest.approx(100 * 260 / 840)}
    assert r.top_cause == "between_units"
    assert sum(c.share_pct for c in r.causes()) == pytest.approx(100)
    # the launch-bound gaps alone: one of 60 ns, under the 20 us P99 threshold
    assert (r.launch_bound_gaps, r.launch_bound_p50_ns, r.launch_bound_p99_ns) == (1, 60, 60)
    assert not r.launch_overhead
    lowered = causes_of(tmp_path / "t.sqlite", range_name="req",
                        settings=Settings(gap_p99_ns=50))
    assert lowered.launch_overhead  # 60 ns > 50 ns


def test_without_units_the_whole_run(trace, tmp_path):
    # no NVTX and no sync pairs on the thread: no unit; gap F's host window [750, 1005]
    # holds 10 ns of launch call and 245 outside CUDA: cpu_work (120 + 260)
    r = causes_of(trace.write(tmp_path / "t.sqlite"))
    assert r.unit is None
    assert r.by_cause["cpu_work"]["idle_ns"] == 380
    assert r.by_cause["between_units"]["idle_ns"] == 0


def test_per_stream_shares(trace, tmp_path):
    r = causes_of(trace.write(tmp_path / "t.sqlite"))
    rows = r.table("per_stream").to_pylist()
    assert {row["stream_id"] for row in rows} == {7}
    assert sum(row["share_pct"] for row in rows) == pytest.approx(100)
    records = r.per_stream()  # the same table as typed records
    assert [(x.stream_id, x.cause, x.gaps, x.idle_ns) for x in records] == [
        (row["stream_id"], row["cause"], row["gaps"], row["idle_ns"]) for row in rows]
    assert sum(x.idle_ns for x in records) == r.idle_ns


def test_classify_order():
    # one gap of 100 ns each; the first rule that holds wins
    n = 4
    window = np.zeros((n, 5), dtype=np.int64)
    window[:, 4] = 1  # outside CUDA
    got = gpu_idle.classify(
        np.full(n, 100), np.array([60, 0, 0, 0]), np.array([60, 60, 0, 0]),
        np.array([100, 100, 10, 100]), np.ones(n, bool), np.array([False, False, False, True]),
        np.zeros(n, bool), np.zeros(n, bool), window, 50.0)
    assert [gpu_idle.CAUSES[c] for c in got] == ["copy", "other_process", "between_units",
                                                 "dependency"]


def test_no_kernels(builder, tmp_path):
    b = builder("current")
    b.memcpy(0, 10, 100)
    r = causes_of(b.write(tmp_path / "t.sqlite"))
    assert r.status != "ok"


@pytest.mark.parametrize("index", range(3))
def test_corpus_shares_add_up(index):
    need(CORPUS)
    r = causes_of(corpus_sqlite_files()[index])
    if r.ok and r.gaps:
        assert sum(v["idle_ns"] for v in r.by_cause.values()) == r.idle_ns
        assert sum(v["share_pct"] for v in r.by_cause.values()) == pytest.approx(100)


def test_diagnosis_splits_idle_time_up_to_a_size(trace, tmp_path):
    """The diagnosis runs gpu_idle up to idle_cause_max_kernels kernels; above, C1 reads
    the method's figure over every gap and no idle breakdown is claimed."""
    path = trace.write(tmp_path / "t.sqlite")
    small = nsysdiag.diagnose(path, cache=False)
    assert "gpu_idle" in small.analyses
    big = nsysdiag.diagnose(path, cache=False, settings=Settings(idle_cause_max_kernels=8))
    assert "gpu_idle" not in big.analyses
    assert not any(f.title.startswith("GPU idle time by cause") for f in big.findings)
    assert "gpu_idle" in nsysdiag.diagnose(
        path, cache=False, settings=Settings(idle_cause_max_kernels=9)).analyses


def test_ties_and_two_gpus_both_ways(builder, tmp_path, monkeypatch):
    """Kernels tied on start and end after a gap: the gap goes to the kernel the SQL's
    tie-breaks take first (outside graphs, then the lower stream), whatever the stored
    order; one thread's host windows on two GPUs overlap in time. The SQL method and the
    accelerated pass give the same, computed by hand:

    ns    thread (CUDA calls)              GPU 0                      GPU 1
    0     launch [0, 5]                                               [10, 150]
    0     launch [0, 10]                   k1 [20, 100] stream 7
    50    launch kA [50, 60]               kA [200, 300] stream 9
    110   launch kB [110, 190]             kB [200, 300] stream 8
    140   launch [140, 180]                                           [250, 260]
    250   graph launch [250, 260]          node [400, 450] stream 7
    320   launch kC [320, 330]             kC [400, 450] stream 7

    GPU 0, gap [100, 200] before kB (stream 8 before 9; kA's call returned at 60, which
    would make it a dependency): host window [100, 190], 80 ns in kB's call: launch_bound.
    Gap [300, 400] before kC (the graph node tied with it is taken after it): window
    [300, 330], 10 ns of launch call, 20 outside CUDA: cpu_work. GPU 1, gap [150, 250]:
    window [150, 180] inside kB's call (the nested call adds nothing): launch_bound.
    """
    b = builder("current")
    b.launch(0, 5, 10, 150, device=1)
    b.launch(0, 10, 20, 100)
    b.launch(50, 60, 200, 300, stream=9)
    b.launch(110, 190, 200, 300, stream=8)
    b.launch(140, 180, 250, 260, device=1)
    corr = b.api(250, 260, "cudaGraphLaunch_v10000")
    b.kernel(400, 450, corr=corr, graph_node=1)
    b.launch(320, 330, 400, 450)
    path = b.write(tmp_path / "t.sqlite")
    for mode in ("never", "always"):
        monkeypatch.setenv("NSYSDIAG_ACCELERATE", mode)
        gaps = causes_of(path).table("gaps").to_pylist()
        assert [(g["device_id"], g["stream_id"], g["idle_start_ns"], g["idle_end_ns"],
                 g["cause"]) for g in gaps] == [
            (0, 8, 100, 200, "launch_bound"), (0, 7, 300, 400, "cpu_work"),
            (1, 7, 150, 250, "launch_bound")], mode


@pytest.mark.parametrize("mode", ["never", "always"])
def test_idle_cause_is_taken_over_the_whole_gap(builder, tmp_path, monkeypatch, mode):
    """The thread is in cudaDeviceSynchronize when the GPU drains (at 100), leaves it at
    101 and runs CPU code until it launches the next kernel at 1000: the gap [100, 1010)
    is CPU work (895 of its 905 ns host window outside CUDA), not a host sync; with the
    next launch at 150 instead, most of the window (45 of 50 ns) is outside CUDA too, and
    at 104 (4 of 8 ns: not "most") the sync at the drain point wins. Both paths."""
    monkeypatch.setenv("NSYSDIAG_ACCELERATE", mode)
    for launch, cause in ((1000, "cpu_work"), (150, "cpu_work"), (104, "host_sync")):
        b = builder("current")
        b.launch(0, 5, 10, 100)
        b.api(6, 101, "cudaDeviceSynchronize_v3020")
        b.launch(launch, launch + 5, launch + 10, launch + 50)
        with nsysdiag.open(b.write(tmp_path / f"t{launch}.sqlite"), cache=False) as rep:
            r = gpu_idle.run(rep)
        (gap,) = r.table("gaps").to_pylist()
        assert (gap["gap_ns"], gap["cause"]) == (launch + 10 - 100, cause)
