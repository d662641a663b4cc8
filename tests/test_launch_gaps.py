"""launch_gaps: the method's gap definition on hand-built traces, a reference, the corpus."""

from __future__ import annotations

import functools
import json
import random
import sqlite3

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import CORPUS, H200, corpus_sqlite_files, need, open_corpus

import nsysdiag
from nsysdiag.analyses import launch_gaps
from nsysdiag.cli.main import cli
from nsysdiag.errors import UsageError


def run(builder_or_path, tmp_path=None, **options):
    path = builder_or_path
    if tmp_path is not None:
        path = builder_or_path.write(tmp_path / "t.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        return launch_gaps.run(rep, **options)


def rows_of(res, table, *columns):
    return [tuple(r[c] for c in columns) for r in res.table(table).to_pylist()]


@pytest.fixture
def streams(builder):
    """Six kernels on two streams of one GPU, overlapping across streams.

    stream 1: k1 [0, 100], k3 [150, 200], k4 [400, 500]
    stream 2: k2 [50, 300], k5 [450, 480], k6 [510, 600]
    """
    b = builder("current")
    for start, end, stream in ((0, 100, 1), (50, 300, 2), (150, 200, 1), (400, 500, 1),
                               (450, 480, 2), (510, 600, 2)):
        b.kernel(start, end, stream=stream)
    return b


def test_overlapping_streams(streams, tmp_path):
    # Sorted by start: k1 [0,100] k2 [50,300] k3 [150,200] k4 [400,500] k5 [450,480] k6 [510,600]
    # running max end before each: -, 100, 300, 300, 500, 500
    # k2 50 < 100, k3 150 < 300: overlap, no gap; k4: 400 - 300 = 100; k5 450 < 500;
    # k6: 510 - 500 = 10.  Gaps {100, 10}.
    res = run(streams, tmp_path)
    assert res.status == "ok"
    dist = res.table("distribution").to_pylist()
    assert [(r["gap_ns"], r["start_ns"]) for r in dist] == [(100, 400), (10, 510)]
    s = res.summary
    # numpy-style linear percentiles of {10, 100}: p50 55, p90 10 + 0.9 * 90 = 91,
    # p99 10 + 0.99 * 90 = 99.1, p99.9 99.91; mean 55; idle total 110
    keys = ("count", "p50_ns", "max_ns", "mean_ns", "total_ns")
    assert [s[k] for k in keys] == [2, 55, 100, 55, 110]
    assert s["p90_ns"] == pytest.approx(91) and s["p99_ns"] == pytest.approx(99.1)
    assert s["p999_ns"] == pytest.approx(99.91)
    # default thresholds 5 us / 20 us: nothing above
    assert (s["share_above_normal_pct"], s["cpu_bound"]) == (0, False)
    assert (s["kernels"], s["graph_kernels"], s["gaps_per_device"]) == (6, 0, {"0": 2})
    # per stream, gap = start - previous end on the stream when positive:
    # stream 1: 150 - 100 = 50, 400 - 200 = 200; stream 2: 450 - 300 = 150, 510 - 480 = 30
    per_stream = {r["stream_id"]: r for r in res.table("per_stream").to_pylist()}
    figures = {k: (r["gaps"], r["p50_ns"], r["max_ns"]) for k, r in per_stream.items()}
    assert figures == {1: (2, 125, 200), 2: (2, 90, 150)}


def test_thresholds_in_microseconds(streams, tmp_path):
    # normal 0.05 us = 50 ns: only the 100 ns gap is above -> 50 %;
    # P99 threshold 0.099 us = 99 ns < p99 99.1 ns -> CPU-bound
    res = run(streams, tmp_path, normal_threshold_us=0.05, p99_threshold_us=0.099)
    s = res.summary
    assert (s["normal_threshold_ns"], s["p99_threshold_ns"]) == (50, 99)
    assert s["share_above_normal_pct"] == 50 and s["share_above_p99_threshold_pct"] == 50
    assert s["cpu_bound"] is True
    assert any("CPU-side scheduling bottleneck" in f for f in res.findings)
    with pytest.raises(UsageError, match="normal_threshold_us must be a number >= 0, got -1"):
        run(streams, tmp_path, normal_threshold_us=-1)
    # the same thresholds as settings (ns): the same judgement
    by_settings = run(streams, tmp_path,
                      settings=nsysdiag.Settings(gap_normal_ns=50, gap_p99_ns=99))
    assert by_settings.summary == s and by_settings.findings == res.findings
    # the settings' default: 20 us, far above every gap here
    assert run(streams, tmp_path).cpu_bound is False


def test_devices_and_processes_are_separate_sequences(builder, tmp_path):
    # pid 1, GPU 0: [0,10] [30,40] -> gap 20
    # pid 1, GPU 1: [0,10] [15,20] [60,70] -> gaps 5, 40
    # pid 2, GPU 0: [5,8] [100,110] -> gap 92 (its own sequence: pid 1's kernels don't count)
    b = builder("current", pid=1)
    for start, end, device, pid in ((0, 10, 0, 1), (30, 40, 0, 1), (0, 10, 1, 1), (15, 20, 1, 1),
                                    (60, 70, 1, 1), (5, 8, 0, 2), (100, 110, 0, 2)):
        b.kernel(start, end, device=device, pid=pid)
    res = run(b, tmp_path)
    per_device = [(r["device_id"], r["pid"], r["kernels"], r["gaps"], r["max_ns"])
                  for r in res.table("per_device").to_pylist()]
    assert per_device == [(0, 1, 2, 1, 20), (0, 2, 2, 1, 92), (1, 1, 3, 2, 40)]
    assert res.summary["gaps_per_device"] == {"0": 2, "1": 2}
    assert sorted(r["gap_ns"] for r in res.table("distribution").to_pylist()) == [5, 20, 40, 92]


def test_graph_kernels_are_reported_apart(builder, tmp_path):
    # k1 [0,100]; graph launch 50: nodes [130,150] [160,170] [175,200];
    # k2 [260,300]; graph launch 51: nodes [320,330] [330,340]   (all on one stream)
    # Device sequence, running max end before each: -, 100, 150, 170, 200, 300, 330
    #   graph_launch gaps (first node of a launch): 130 - 100 = 30, 320 - 300 = 20
    #   graph_node gaps (later nodes): 160 - 150 = 10, 175 - 170 = 5; 330 - 330 = 0 is none
    #   kernel gaps: k2 260 - 200 = 60 (the graph kept the GPU busy until 200)
    b = builder("current")
    b.kernel(0, 100)
    for start, end, node in ((130, 150, 1), (160, 170, 2), (175, 200, 3)):
        b.kernel(start, end, corr=50, graph_node=node)
    b.kernel(260, 300)
    for start, end, node in ((320, 330, 1), (330, 340, 2)):
        b.kernel(start, end, corr=51, graph_node=node)
    res = run(b, tmp_path)
    s = res.summary
    assert (s["count"], s["p50_ns"], s["kernels"], s["graph_kernels"]) == (1, 60, 2, 5)
    assert s["graph_gaps"] == 4
    # intra-graph {5, 10}: p50 7.5, p99 5 + 0.99 * 5 = 9.95
    assert s["intra_graph_gap_p50_ns"] == 7.5
    assert s["intra_graph_gap_p99_ns"] == pytest.approx(9.95)
    graph = {r["kind"]: (r["count"], r["p50_ns"]) for r in res.table("graph").to_pylist()}
    assert graph == {"graph_launch": (2, 25), "graph_node": (2, 7.5)}
    # per stream: only gaps before non-graph kernels: k2 260 - 200 = 60
    (stream,) = res.table("per_stream").to_pylist()
    assert (stream["kernels"], stream["gaps"], stream["max_ns"]) == (2, 1, 60)
    assert any("CUDA graphs" in f for f in res.findings)


def test_graph_level_trace_keeps_the_gpu_busy(builder, tmp_path):
    # k1 [0,100]; a graph launch traced as a whole (graph-level trace) runs [130,400];
    # k2 [450,500].  Main gap: 450 - 400 = 50, not 450 - 100; graph_launch gap 130 - 100 = 30
    b = builder("current")
    b.kernel(0, 100)
    corr = b.api(110, 120, "cudaGraphLaunch_v10000")
    b.graph_trace(130, 400, corr=corr)
    b.kernel(450, 500)
    res = run(b, tmp_path)
    assert rows_of(res, "distribution", "gap_ns") == [(50,)]
    assert rows_of(res, "graph", "kind", "count", "p50_ns") == [("graph_launch", 1, 30)]
    assert (res.summary["kernels"], res.summary["graph_kernels"]) == (2, 0)


def test_starved_and_prelaunched_gaps(builder, tmp_path):
    # call [0,5] -> kernel [10,20]; call [6,8] -> kernel [50,60]: it was launched (8) before
    # the GPU went idle (20): a prelaunched gap of 30; call [70,80] -> kernel [85,95]:
    # launched after the GPU went idle (60): a starved gap of 25
    b = builder("current")
    b.launch(0, 5, 10, 20)
    b.launch(6, 8, 50, 60)
    b.launch(70, 80, 85, 95)
    res = run(b, tmp_path)
    s = res.summary
    keys = ("count", "prelaunched_gaps", "starved_gaps", "starved_p50_ns")
    assert [s[k] for k in keys] == [2, 1, 1, 25]
    assert s["prelaunched_idle_pct"] == pytest.approx(100 * 30 / 55)
    got = rows_of(res, "distribution", "gap_ns", "launched_before_idle")
    assert got == [(30, True), (25, False)]
    assert any("already launched" in f for f in res.findings)


def test_gaps_without_api_trace_are_unattributed(streams, tmp_path):
    s = run(streams, tmp_path).summary
    assert (s["prelaunched_gaps"], s["prelaunched_idle_pct"], s["starved_gaps"]) == (0, None, 0)


def test_histogram_bins(builder, tmp_path):
    # gaps 1000, 1000, 10000 ns; bins are 5 per decade: 1000 ns is bin 15 = [1000, 1584.9),
    # 10000 ns bin 20 = [10000, 15848.9); bins 16..19 are present and empty
    b = builder("current")
    for start in (0, 1100, 2200, 12300):
        b.kernel(start, start + 100)
    hist = run(b, tmp_path).table("histogram").to_pylist()
    assert [(r["bin"], r["gaps"]) for r in hist] == [(15, 2), (16, 0), (17, 0), (18, 0),
                                                     (19, 0), (20, 1)]
    assert hist[0]["bin_lo_ns"] == pytest.approx(1000)
    assert hist[0]["bin_hi_ns"] == pytest.approx(10 ** 3.2)
    assert hist[0]["share_pct"] == pytest.approx(200 / 3)
    res = run(tmp_path / "t.sqlite")
    records = res.histogram()  # the same table as typed records
    assert [(r.gaps, r.bin_lo_ns, r.bin_hi_ns) for r in records] == [
        (r["gaps"], r["bin_lo_ns"], r["bin_hi_ns"]) for r in hist]
    assert sum(r.gaps for r in records) == res.count == 3


def reference_gaps(kernels):
    """Gaps by the method's definition, in plain Python: {(pid, device): [gap, ...]}."""
    out = {}
    for key in {(k[2], k[3]) for k in kernels}:
        seq = sorted((s, e) for s, e, pid, dev, _ in kernels if (pid, dev) == key)
        busy, gaps = seq[0][1], []
        for s, e in seq[1:]:
            if s > busy:
                gaps.append(s - busy)
            busy = max(busy, e)
        out[key] = gaps
    return out


def test_random_trace_matches_reference_and_is_order_free(builder, tmp_path):
    rng = random.Random(7)
    kernels = []
    for _ in range(300):
        start = rng.randrange(0, 200_000)
        kernels.append((start, start + rng.randrange(1, 3000), rng.choice((1, 2)),
                        rng.choice((0, 1)), rng.choice((7, 8, 9))))
    results = []
    for order in (kernels, list(reversed(kernels))):  # row order must not matter
        b = builder("current")
        for start, end, pid, device, stream in order:
            b.kernel(start, end, pid=pid, device=device, stream=stream)
        results.append(run(b, tmp_path))
    ref = reference_gaps(kernels)
    for res in results:
        got = {}
        for r in res.table("distribution").to_pylist():
            got.setdefault((r["pid"], r["device_id"]), []).append(r["gap_ns"])
        assert got == {k: v for k, v in ref.items() if v}
        every = [g for v in ref.values() for g in v]
        assert res.summary["p99_ns"] == pytest.approx(np.percentile(every, 99))
    assert results[0].summary == results[1].summary


@pytest.mark.parametrize("batch_rows", [5, 1 << 20])
def test_stream_gaps_match_reference_across_batches(builder, tmp_path, monkeypatch, batch_rows):
    """Per-stream gaps come from the device pass: streams interleaved on two GPUs of two
    processes, streamed in batches of 5 rows (streams met mid-pass, runs cut by batches)."""
    from nsysdiag.compute import intervals

    monkeypatch.setattr(intervals, "BATCH_ROWS", batch_rows)
    rng = random.Random(11)
    b = builder("current")
    by_stream: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for _ in range(200):
        start = rng.randrange(0, 50_000)
        pid, device, stream = rng.choice((1, 2)), rng.choice((0, 1)), rng.choice((7, 8, 9, 13))
        end = start + rng.randrange(1, 900)
        b.kernel(start, end, pid=pid, device=device, stream=stream)
        by_stream.setdefault((pid, device, stream), []).append((start, end))
    ref = {}
    for key, kernels in by_stream.items():
        kernels.sort()
        gaps = [s - e for (_, e), (s, _) in zip(kernels, kernels[1:]) if s > e]
        if gaps:
            ref[key] = (len(gaps), max(gaps), float(np.percentile(gaps, 50)))
    res = run(b, tmp_path)
    got = {(r["pid"], r["device_id"], r["stream_id"]): (r["gaps"], r["max_ns"], r["p50_ns"])
           for r in res.table("per_stream").to_pylist() if r["gaps"]}
    assert got == ref
    assert res.table("per_stream").num_rows == len(by_stream)


def test_gap_summary_helper(streams, tmp_path):
    with nsysdiag.open(streams.write(tmp_path / "s.sqlite"), cache=False) as rep:
        s = launch_gaps.gap_summary(rep)
    assert (s.count, s.p50_ns, s.cpu_bound) == (2, 55, False)
    assert s.p99_ns == pytest.approx(99.1)


def test_no_kernels(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    assert run(b, tmp_path).status == "empty"
    b = builder("current")
    b.nvtx(0, 10, "no cuda")
    assert run(b, tmp_path).status == "not_captured"
    b = builder("current")
    b.kernel(0, 10)
    res = run(b, tmp_path)  # one kernel: captured, but there is no gap to measure
    assert (res.status, res.summary["count"], res.summary["p99_ns"]) == ("ok", 0, None)
    assert res.table("histogram").num_rows == 0
    assert res.histogram() == []


def test_cli(streams, tmp_path):
    path = streams.write(tmp_path / "c.sqlite")
    out = CliRunner().invoke(cli, ["launch-gaps", str(path), "--format", "json",
                                   "--normal-threshold-us", "0.05"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["summary"]["share_above_normal_pct"] == 50
    assert [r["gap_ns"] for r in doc["tables"]["distribution"]] == [100, 10]


@functools.cache
def corpus_result(path):
    """One run per corpus file, shared by the tests below."""
    with open_corpus(path) as rep:
        return launch_gaps.run(rep)


@pytest.mark.parametrize("name", ["baseline.sqlite", "gpu.sqlite"])
def test_real_trace_matches_numpy(name):
    """The gaps recomputed with numpy from the raw kernel table, independently of the views."""
    path = need(H200 / name)
    res = corpus_result(path)
    db = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = db.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL '
                          'ORDER BY start, "end"').fetchall()
    finally:
        db.close()
    start, end = np.array(rows).T
    # one process, one GPU, no graphs in these traces: one sequence
    busy = np.maximum.accumulate(end)[:-1]
    gaps = (start[1:] - busy)[start[1:] > busy]
    dist = res.table("distribution").column("gap_ns").to_numpy()
    np.testing.assert_array_equal(dist, gaps)
    s = res.summary
    assert s["count"] == len(gaps) == sum(r["gaps"] for r in res.table("histogram").to_pylist())
    for key, q in (("p50_ns", 50), ("p90_ns", 90), ("p99_ns", 99), ("p999_ns", 99.9)):
        assert s[key] == pytest.approx(np.percentile(gaps, q))
    assert s["max_ns"] == gaps.max() and s["total_ns"] == gaps.sum()


@pytest.mark.parametrize("path", corpus_sqlite_files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_runs(path):
    res = corpus_result(path)
    assert res.status in ("ok", "empty", "not_captured")
    if res.ok:
        assert all(g > 0 for g in res.table("distribution").column("gap_ns").to_pylist())
        assert res.table("distribution").num_rows == res.summary["count"]


def test_without_detail_same_figures_no_per_gap_table():
    path = need(H200 / "baseline.sqlite")
    with nsysdiag.open(path) as rep:
        full = launch_gaps.run(rep)
        lean = launch_gaps.run(rep, detail=False)
    assert "distribution" not in lean.tables and "distribution" in full.tables
    assert lean.summary == full.summary
    for name in lean.tables:
        assert lean.tables[name].equals(full.tables[name]), name


def test_kernels_without_an_end(builder, tmp_path):
    """A kernel whose end is invalid (before its start: NULL in the view) keeps its place in
    the sequence but extends no busy period and is no stream predecessor.

    A [0, 100], B at 200 (no end), C [300, 400], D [500, 600], E at 500 (no end; after D,
    since unknown ends sort last), F [700, 800]. Device: busy until 100 before B (gap 100)
    and before C (200); D follows C by 100; E starts inside D; F follows D by 100.
    Stream: B follows A by 100, D follows C by 100; C and F follow a kernel without an end.
    """
    b = builder("current")
    for start, end in ((0, 100), (200, 150), (300, 400), (500, 600), (500, 10), (700, 800)):
        b.kernel(start, end)
    res = run(b, tmp_path)
    assert rows_of(res, "distribution", "start_ns", "gap_ns") == [
        (200, 100), (300, 200), (500, 100), (700, 100)]
    (stream,) = res.table("per_stream").to_pylist()
    assert (stream["kernels"], stream["gaps"], stream["max_ns"]) == (6, 2, 100)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernels_stored_out_of_start_order_read_sorted(builder, tmp_path, monkeypatch, seed):
    # Kernels of two GPUs and three streams with ties on start; stored in start order the
    # pass reads them as stored, shuffled it finds them out of order and reads them sorted:
    # the same results either way. (The accelerated pass: the SQL method sorts.)
    monkeypatch.setenv("NSYSDIAG_ACCELERATE", "always")
    rng = random.Random(seed)
    kernels = []
    for i in range(300):
        start = rng.randrange(0, 20_000, 10)  # ties
        kernels.append((start, start + rng.randrange(1, 200), rng.choice((1, 2, 3)),
                        rng.choice((0, 1)), i + 1))
    taken = []
    original = launch_gaps._pass
    monkeypatch.setattr(launch_gaps, "_pass", lambda *a, **k: taken.append(k["in_order"])
                        or original(*a, **k))
    results = {}
    for label, rows in (("sorted", sorted(kernels, key=lambda k: (k[0], k[1]))),
                        ("shuffled", rng.sample(kernels, len(kernels)))):
        b = builder("current")
        for start, end, stream, device, corr in rows:
            b.kernel(start, end, stream=stream, device=device, corr=corr)
        taken.clear()
        res = run(b.write(tmp_path / f"{label}.sqlite"))
        results[label] = (res.summary, {t: res.table(t).to_pylist() for t in res.tables})
        assert taken == ([True] if label == "sorted" else [True, False])
    assert results["sorted"] == results["shuffled"]
