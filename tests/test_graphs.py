"""graphs: CUDA Graph launches at graph and node level, launch overhead, the empty case."""

from __future__ import annotations

import pytest
from conftest import H200, corpus_sqlite_files, need, run_on_corpus

import nsysdiag
from nsysdiag.analyses import graphs


def graph_level_trace(builder, tmp_path):
    """cudaGraphLaunch calls and CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows (graph-level trace).

    launch  api [start, end]    GPU [start, end]   graph  api->GPU  api dur  GPU dur
    1       [1000, 3000]        [5000, 9000]       1      4000      2000     4000
    2       [10000, 11000]      [11500, 20000]     1      1500      1000     8500
    3       [21000, 22000]      [30000, 31000]     2      9000      1000     1000
    4       (none: device-side) [40000, 41000]     2      -         -        1000
    plus one ordinary kernel [25000, 27000] (2000 ns) launched by cudaLaunchKernel.
    api->GPU sorted [1500, 4000, 9000]: p50 4000, p90 4000 + 0.8 * 5000 = 8000, max 9000
    api duration [1000, 1000, 2000]: p50 1000;  GPU duration [1000, 1000, 4000, 8500]: p50 2500
    graph GPU time 4000 + 8500 + 1000 + 1000 = 14500 of 14500 + 2000 -> 87.88 %
    """
    b = builder("current")
    for api, gpu, graph in (((1000, 3000), (5000, 9000), 1), ((10000, 11000), (11500, 20000), 1),
                            ((21000, 22000), (30000, 31000), 2)):
        corr = b.api(*api, "cudaGraphLaunch_v10000")
        b.graph_trace(*gpu, corr=corr, graph_id=graph)
    b.graph_trace(40000, 41000, corr=500, graph_id=2)
    b.launch(23000, 24000, 25000, 27000)
    return b.write(tmp_path / "graph-level.sqlite")


def test_graph_level(builder, tmp_path):
    with nsysdiag.open(graph_level_trace(builder, tmp_path), cache=False) as rep:
        res = graphs.run(rep)
    s = res.summary
    assert res.status == "ok" and s["in_use"] is True and s["trace_level"] == "graph"
    assert s["node_tracing"] is False and s["kernels_per_launch"] is None
    assert (s["graph_launches"], s["host_launches"], s["device_launches"]) == (4, 3, 1)
    assert (s["gpu_traced"], s["graphs"]) == (4, 2)
    assert (s["kernels"], s["kernels_in_graphs"], s["kernels_in_graphs_pct"]) == (1, 0, 0)
    assert s["launch_to_start_p50_ns"] == pytest.approx(4000)
    assert s["launch_to_start_p90_ns"] == pytest.approx(8000)
    assert s["launch_to_start_max_ns"] == 9000
    assert s["api_duration_p50_ns"] == pytest.approx(1000)
    assert s["gpu_duration_p50_ns"] == pytest.approx(2500)
    assert s["graph_gpu_ns"] == 14500
    assert s["graph_gpu_time_pct"] == pytest.approx(100 * 14500 / 16500)
    per = {r["graph_id"]: r for r in res.tables["per_graph"].to_pylist()}
    assert (per[1]["launches"], per[1]["total_gpu_ns"]) == (2, 12500)
    assert (per[2]["launches"], per[2]["total_gpu_ns"]) == (2, 2000)
    assert res.tables["per_graph"].column("graph_id").to_pylist() == [1, 2]
    assert res.tables["launches"].num_rows == 4
    assert "launch overhead is ~0" in res.message and "memory bandwidth" in res.message
    assert any("graph-level trace" in f for f in res.findings)
    assert any("12% of GPU kernel time runs outside graphs" in f for f in res.findings)
    assert any("1 graph launches have no host launch call" in f for f in res.findings)


def node_level_trace(builder, tmp_path):
    """Node-level trace: the graph's kernels carry graph_node_id and the launch's corr id.

    launch 1 api [1000, 1200]: kernels [2000, 3000] node 11, [3000, 4500] node 12
    launch 2 api [5000, 5100]: kernels [6000, 7000] node 11, [7100, 8000] node 12
    plus one ordinary kernel [9500, 10000].
    kernels 5, in graphs 4 (80 %); kernel time 1000 + 1500 + 1000 + 900 + 500 = 4900, in
    graphs 4400 -> 89.8 %; api->GPU [1000, 1000]; GPU duration [2500, 2000] -> p50 2250.
    """
    b = builder("current")
    for api, kernels in (((1000, 1200), ((2000, 3000, 11), (3000, 4500, 12))),
                         ((5000, 5100), ((6000, 7000, 11), (7100, 8000, 12)))):
        corr = b.api(*api, "cudaGraphLaunch_v10000")
        for start, end, node in kernels:
            b.kernel(start, end, corr=corr, graph_node=node)
    b.launch(9000, 9100, 9500, 10000)
    return b.write(tmp_path / "node-level.sqlite")


def test_node_level(builder, tmp_path):
    with nsysdiag.open(node_level_trace(builder, tmp_path), cache=False) as rep:
        res = graphs.run(rep)
    s = res.summary
    assert res.status == "ok" and s["in_use"] is True
    assert s["trace_level"] == "node" and s["node_tracing"] is True
    assert (s["graph_launches"], s["host_launches"], s["kernels_per_launch"]) == (2, 2, 2)
    assert (s["kernels"], s["kernels_in_graphs"]) == (5, 4)
    assert s["kernels_in_graphs_pct"] == pytest.approx(80.0)
    assert s["graph_gpu_ns"] == 4400
    assert s["graph_gpu_time_pct"] == pytest.approx(100 * 4400 / 4900)
    assert s["launch_to_start_p50_ns"] == pytest.approx(1000)
    assert s["gpu_duration_p50_ns"] == pytest.approx(2250)
    launches = res.tables["launches"].to_pylist()
    assert [(r["api_name"], r["n_kernels"], r["gpu_start_ns"]) for r in launches] == [
        ("cudaGraphLaunch", 2, 2000), ("cudaGraphLaunch", 2, 6000)]
    assert any("node-level graph tracing" in f for f in res.findings)


def test_api_only_launches(builder, tmp_path):
    b = builder("current")
    b.api(1000, 2000, "cuGraphLaunch", driver=True)
    b.launch(3000, 3100, 3500, 4000)
    with nsysdiag.open(b.write(tmp_path / "api.sqlite"), cache=False) as rep:
        res = graphs.run(rep)
    s = res.summary
    assert res.status == "ok" and s["in_use"] is True and s["trace_level"] == "api_only"
    assert s["gpu_traced"] == 0 and s["launch_to_start_p50_ns"] is None
    assert any("CPU only" in f for f in res.findings)


def test_no_graphs_is_empty_with_in_use_false(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, 20, 30)
    with nsysdiag.open(b.write(tmp_path / "plain.sqlite"), cache=False) as rep:
        res = graphs.run(rep)
    assert res.status == "empty" and res.summary["in_use"] is False
    assert res.summary["graph_launches"] == 0 and res.summary["kernels"] == 1
    b = builder("current")
    b.nvtx(0, 10, "x")
    with nsysdiag.open(b.write(tmp_path / "nvtx.sqlite"), cache=False) as rep:
        res = graphs.run(rep)
    assert res.status == "not_captured" and res.summary == {"in_use": None}


def test_real_node_level_graph_trace(labelled):
    """An H200 trace captured with --cuda-graph-trace=node (when present)."""
    with nsysdiag.open(labelled["graph"], cache=False) as rep:
        res = graphs.run(rep)
        # node kernels carry the cudaGraphLaunch call's correlation id (same process)
        ((matched, total),) = rep.sql(
            "SELECT count(a.name), count(*) FROM kernels k LEFT JOIN api_calls a "
            "ON a.global_pid = k.global_pid AND a.correlation_id = k.correlation_id "
            "AND a.category = 'graph_launch' WHERE k.graph_node_id IS NOT NULL").fetchall()
    assert matched == total > 0
    s = res.summary
    assert s["in_use"] is True and s["trace_level"] == "node" and s["node_tracing"] is True
    assert s["host_launches"] == s["graph_launches"] == s["gpu_traced"]
    assert s["kernels_in_graphs_pct"] > 50


CORPUS = corpus_sqlite_files()


@pytest.fixture(scope="module")
def corpus_results():
    """graphs on every corpus file, run once for the tests below."""
    return run_on_corpus(graphs.run)


@pytest.mark.parametrize("name", ["baseline.sqlite", "gpu.sqlite"])
def test_h200_traces_use_no_graphs(name, corpus_results):
    res = corpus_results[need(H200 / name)]
    assert res.status == "empty" and res.summary["in_use"] is False
    assert res.summary["kernels"] > 90_000


@pytest.mark.skipif(not CORPUS, reason="shared corpus not available")
def test_every_corpus_file(corpus_results):
    for path, res in corpus_results.items():
        assert res.status in ("ok", "empty", "not_captured"), path
        assert "in_use" in res.summary, path
        if res.ok:
            pct = res.summary["graph_gpu_time_pct"]
            assert pct is None or 0 <= pct <= 100 + 1e-9, path
