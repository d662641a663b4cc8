"""launch_latency: launch cost, launch-to-start, the dispatch queue, on hand-built traces."""

from __future__ import annotations

import functools
import json

import pytest
from click.testing import CliRunner
from conftest import CORPUS, H200, corpus_sqlite_files, need, open_corpus

import nsysdiag
from nsysdiag.analyses import launch_latency
from nsysdiag.cli.main import cli


def run(b, tmp_path, **options):
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        return launch_latency.run(rep, **options)


def rows(res, table, *columns):
    return [tuple(r[c] for c in columns) for r in res.table(table).to_pylist()]


def device_series(res):
    return [(r["t_ns"], r["depth"]) for r in res.table("queue_depth").to_pylist()
            if r["level"] == "device"]


@pytest.fixture
def three_queued(builder):
    """Launch calls [0,10] [12,20] [22,30] -> kernels at 40, 50, 60 (5 ns each); then a
    call [70,100] whose kernel starts at 90, before the call returns."""
    b = builder("current")
    b.launch(0, 10, 40, 45, name="a")
    b.launch(12, 20, 50, 55, name="b")
    b.launch(22, 30, 60, 65, name="a")
    b.launch(70, 100, 90, 95, name="a")
    return b


def test_latencies_by_hand(three_queued, tmp_path):
    res = run(three_queued, tmp_path)
    assert res.status == "ok"
    # api_duration 10, 8, 8, 30; api start -> kernel start 40, 38, 38, 20;
    # api end -> kernel start 30, 30, 30, -10 (the last kernel started first); queue 30, 30, 30, 0
    assert rows(res, "per_kernel", "api_duration_ns", "api_start_to_kernel_start_ns",
                "api_end_to_kernel_start_ns") == [(10, 40, 30), (8, 38, 30), (8, 38, 30),
                                                  (30, 20, -10)]
    s = res.summary
    assert (s["kernels"], s["matched"], s["unmatched"], s["queued"]) == (4, 4, 0, 3)
    assert (s["negative_queue"], s["negative_queue_pct"]) == (1, 25)
    # sorted {8, 8, 10, 30}: p50 9, p90 10 + 0.7 * 20 = 24, max 30
    assert (s["api_duration_p50_ns"], s["api_duration_max_ns"]) == (9, 30)
    assert s["api_duration_p90_ns"] == pytest.approx(24)
    # {20, 38, 38, 40}: p50 38; {-10, 30, 30, 30}: p50 30; queue {0, 30, 30, 30}: p50 30
    assert s["api_start_to_kernel_start_p50_ns"] == 38
    assert s["api_end_to_kernel_start_p50_ns"] == 30 and s["queue_p50_ns"] == 30
    # the same figures as records, one per metric (the JSON keeps them flat)
    assert (res.api_duration.p50_ns, res.api_duration.max_ns) == (9, 30)
    assert (res.api_start_to_kernel_start.p50_ns, res.queue.p50_ns) == (38, 30)
    latency = {r["metric"]: r for r in res.table("latency").to_pylist()}
    assert latency["api_end_to_kernel_start"]["mean_ns"] == 20  # (30 * 3 - 10) / 4
    assert latency["queue"]["mean_ns"] == 22.5  # 90 / 4
    per_name = rows(res, "per_name", "name", "kernels", "api_duration_p50_ns")
    assert per_name == [("a", 3, 10), ("b", 1, 8)]  # a: {10, 8, 30} -> 10


def test_queue_depth_by_hand(three_queued, tmp_path):
    res = run(three_queued, tmp_path)
    # +1 at each call's return (10, 20, 30), -1 at each kernel start (40, 50, 60);
    # the kernel at 90 started before its call returned (100): it never queued
    assert device_series(res) == [(10, 1), (20, 2), (30, 3), (40, 2), (50, 1), (60, 0)]
    assert [d for t, d in rows(res, "queue_depth", "t_ns", "depth")] == [1, 2, 3, 2, 1, 0] * 2
    # time at depth over [10, 60]: 1 -> 10-20, 50-60 = 20; 2 -> 20-30, 40-50 = 20; 3 -> 10
    hist = rows(res, "queue_depth_hist", "level", "depth", "time_ns", "time_pct")
    assert hist[:3] == [("device", 1, 20, 40), ("device", 2, 20, 40), ("device", 3, 10, 20)]
    s = res.summary
    # time-weighted mean (1 * 20 + 2 * 20 + 3 * 10) / 50 = 1.8; never empty inside the span
    assert s["mean_depth"] == pytest.approx(1.8) and s["queue_nonempty_pct"] == 100
    # depth right after each call returns: 1, 2, 3, and 0 at 100 -> p50 1.5,
    # p90 2 + 0.7 * 1 = 2.7, max 3
    assert (s["depth_at_launch_p50"], s["depth_at_launch_max"]) == (1.5, 3)
    assert s["depth_at_launch_p90"] == pytest.approx(2.7)


def test_queue_per_stream_and_simultaneous_events(builder, tmp_path):
    # stream 1: call returns 10, kernel starts 30; stream 2: call returns 20, kernel 25;
    # stream 1: call returns 30, kernel 40 -- the start at 30 and this return at 30 net out
    b = builder("current")
    b.launch(0, 10, 30, 31, stream=1)
    b.launch(15, 20, 25, 26, stream=2)
    b.launch(28, 30, 40, 41, stream=1)
    res = run(b, tmp_path)
    # device: +1@10, +1@20, -1@25, (-1 +1)@30, -1@40
    assert device_series(res) == [(10, 1), (20, 2), (25, 1), (40, 0)]
    streams = {}
    for r in res.table("queue_depth").to_pylist():
        if r["level"] == "stream":
            streams.setdefault(r["stream_id"], []).append((r["t_ns"], r["depth"]))
    assert streams == {1: [(10, 1), (40, 0)], 2: [(20, 1), (25, 0)]}
    # depth at launch: 1 at 10; 2 at 20; at 30 the first kernel has left and the third
    # joined: 1.  Time-weighted over [10, 40]: (1 * 10 + 2 * 5 + 1 * 15) / 30 = 35 / 30
    s = res.summary
    assert (s["depth_at_launch_p50"], s["depth_at_launch_max"]) == (1, 2)
    assert s["mean_depth"] == pytest.approx(35 / 30)


def test_unmatched_kernels(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, 20, 30)
    b.kernel(40, 50, corr=999)  # no API call has correlation id 999
    res = run(b, tmp_path)
    s = res.summary
    assert (s["kernels"], s["matched"], s["unmatched"], s["unmatched_pct"]) == (2, 1, 1, 50)
    assert rows(res, "per_kernel", "correlation_id", "api_duration_ns") == [(1, 10), (999, None)]
    latency = {r["metric"]: r["count"] for r in res.table("latency").to_pylist()}
    assert latency["queue"] == latency["api_duration"] == 1  # unmatched kernels are left out
    assert any("no traced launch call" in f for f in res.findings)


def test_same_correlation_ids_in_two_processes_do_not_cross(builder, tmp_path):
    # both processes use correlation id 1: pid 1 call [0,10] -> kernel 100;
    # pid 2 call [50,60] -> kernel 70.  A join on correlation id alone would give 4 rows.
    b = builder("current")
    for pid, call, kernel in ((1, (0, 10), 100), (2, (50, 60), 70)):
        b.api(*call, "cudaLaunchKernel_v7000", corr=1, pid=pid)
        b.kernel(kernel, kernel + 5, corr=1, pid=pid)
    res = run(b, tmp_path)
    got = rows(res, "per_kernel", "pid", "api_start_to_kernel_start_ns")
    assert sorted(got) == [(1, 100), (2, 20)]
    assert res.summary["matched"] == 2


def test_runtime_and_driver_call_sharing_an_id_count_once(builder, tmp_path):
    # cudaLaunchKernel [0,20] and the cuLaunchKernel it made [5,15], one correlation id
    b = builder("current")
    corr = b.api(0, 20, "cudaLaunchKernel_v7000")
    b.api(5, 15, "cuLaunchKernel", corr=corr, driver=True)
    b.kernel(30, 40, corr=corr)
    res = run(b, tmp_path)
    assert rows(res, "per_kernel", "api_duration_ns", "api_end_to_kernel_start_ns") == [(20, 10)]


def test_graph_launches_are_timed_per_launch(builder, tmp_path):
    # cudaGraphLaunch [0,10] (corr 5): nodes [30,40] and [45,50]; one eager launch
    b = builder("current")
    b.api(0, 10, "cudaGraphLaunch_v10000", corr=5)
    b.kernel(30, 40, corr=5, graph_node=1)
    b.kernel(45, 50, corr=5, graph_node=2)
    b.launch(60, 70, 80, 90)  # correlation id 1
    res = run(b, tmp_path)
    s = res.summary
    assert (s["kernels"], s["graph_launches"]) == (1, 1)  # graph nodes are not kernels here
    assert (s["graph_api_duration_p50_ns"], s["graph_launch_to_start_p50_ns"]) == (10, 30)
    assert rows(res, "graph_launches", "api_duration_ns", "launch_to_start_ns", "n_kernels") == [
        (10, 30, 2)]
    assert device_series(res) == [(70, 1), (80, 0)]  # graph launches are not in the queue


def test_not_captured_and_empty(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    assert run(b, tmp_path).status == "empty"
    b = builder("current")
    b.kernel(0, 10)  # kernels without any API trace
    res = run(b, tmp_path)
    assert res.status == "not_captured" and res.message.startswith("api_calls")


def test_top_and_cli(three_queued, tmp_path):
    path = three_queued.write(tmp_path / "c.sqlite")
    out = CliRunner().invoke(cli, ["launch-latency", str(path), "--format", "json", "--top", "1"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [r["name"] for r in doc["tables"]["per_name"]] == ["a"]
    assert doc["summary"]["queue_p50_ns"] == 30


@functools.cache
def corpus_result(path):
    """One run per corpus file, shared by the tests below."""
    with open_corpus(path) as rep:
        return launch_latency.run(rep)


@pytest.mark.parametrize("name", ["baseline.sqlite", "gpu.sqlite"])
def test_real_trace_queue_accounting(name):
    """The area under the device queue-depth curve is the sum of all queue times."""
    res = corpus_result(need(H200 / name))
    s = res.summary
    assert s["matched"] + s["unmatched"] == s["kernels"] == res.table("per_kernel").num_rows
    queue_total = sum(max(q, 0) for q in res.table("per_kernel")
                      .column("api_end_to_kernel_start_ns").to_pylist() if q is not None)
    hist = [r for r in res.table("queue_depth_hist").to_pylist() if r["level"] == "device"]
    assert sum(r["depth"] * r["time_ns"] for r in hist) == queue_total
    assert s["mean_depth"] == pytest.approx(queue_total / sum(r["time_ns"] for r in hist))
    depths = res.table("queue_depth").column("depth").to_pylist()
    assert min(depths) >= 0 and depths[-1] == 0
    assert s["queue_p50_ns"] <= s["queue_p99_ns"] <= s["queue_max_ns"]


@pytest.mark.parametrize("path", corpus_sqlite_files(), ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_runs(path):
    res = corpus_result(path)
    assert res.status in ("ok", "empty", "not_captured")
    if res.ok:
        s = res.summary
        assert s["matched"] + s["unmatched"] == s["kernels"]
        assert s["depth_at_launch_max"] is None or s["depth_at_launch_max"] >= 0


def test_detail_false_gives_the_same_summary(standard_export):
    with nsysdiag.open(standard_export, cache=False) as rep:
        full = launch_latency.run(rep)
        lean = launch_latency.run(rep, detail=False)
    assert lean.summary == full.summary
    for table in ("per_kernel", "per_name", "queue_depth"):
        assert table not in lean.tables and table in full.tables
