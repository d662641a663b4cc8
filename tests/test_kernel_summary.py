"""kernel_summary: hand-computed figures, NVIDIA's own `nsys stats` output, the corpus."""

from __future__ import annotations

import csv
import json
import math

import pytest
from click.testing import CliRunner
from conftest import H200, corpus_sqlite_files, need, open_corpus

import nsysdiag
from nsysdiag.analyses import kernel_summary
from nsysdiag.cli.main import cli
from nsysdiag.errors import UsageError

REFERENCE = H200 / "nsys-reference" / "stats_baseline_cuda_gpu_kern_sum.csv"


@pytest.fixture
def three_names(builder, tmp_path):
    """gemm: 100, 200, 600 ns; add: 50, 50 ns (the second a graph node); relu: 100 ns."""
    b = builder("current")
    b.kernel(0, 100, name="gemm")
    b.kernel(1000, 1200, name="gemm")
    b.kernel(2000, 2600, name="gemm")
    b.kernel(3000, 3050, name="add")
    b.kernel(4000, 4050, name="add", graph_node=9)
    b.kernel(5000, 5100, name="relu")
    return b.write(tmp_path / "k.sqlite")


def by_name(result):
    return {r["name"]: r for r in result.table("per_name").to_pylist()}


def test_hand_computed_figures(three_names):
    with nsysdiag.open(three_names, cache=False) as rep:
        res = kernel_summary.run(rep)
    assert res.status == "ok"
    # total 900 + 100 + 100 = 1100 ns; ties on total are ordered by name (add before relu)
    assert [r["name"] for r in res.table().to_pylist()] == ["gemm", "add", "relu"]
    gemm, add, relu = (by_name(res)[n] for n in ("gemm", "add", "relu"))
    # gemm: mean 300; median 200; squared deviations 40000 + 10000 + 90000 = 140000,
    # sample variance 140000 / 2 = 70000, stddev sqrt(70000) = 264.575...
    assert [gemm[k] for k in ("instances", "total_ns", "min_ns", "max_ns")] == [3, 900, 100, 600]
    assert gemm["avg_ns"] == 300 and gemm["median_ns"] == 200
    assert gemm["stddev_ns"] == pytest.approx(math.sqrt(70000))
    assert gemm["time_pct"] == pytest.approx(100 * 900 / 1100)
    # add: two instances of 50 ns -> median 50, stddev 0; relu: one instance -> stddev NULL
    assert (add["instances"], add["median_ns"], add["stddev_ns"]) == (2, 50, 0)
    assert relu["stddev_ns"] is None
    assert relu["time_pct"] == pytest.approx(100 / 11)
    assert res.summary == {"kernels": 6, "names": 3, "total_ns": 1100, "graph_kernels": 1,
                           "top_name": "gemm", "top_time_pct": pytest.approx(900 / 11)}


def test_median_of_even_count_interpolates(builder, tmp_path):
    b = builder("current")
    for start, dur in ((0, 10), (100, 20), (200, 30), (300, 45)):
        b.kernel(start, start + dur, name="k")
    with nsysdiag.open(b.write(tmp_path / "m.sqlite"), cache=False) as rep:
        (row,) = kernel_summary.run(rep).table().to_pylist()
    assert row["median_ns"] == 25  # (20 + 30) / 2


def test_top_keeps_shares_of_all_kernels(three_names):
    with nsysdiag.open(three_names, cache=False) as rep:
        res = kernel_summary.run(rep, top=1)
        with pytest.raises(UsageError, match="top must be a positive integer, got 0"):
            kernel_summary.run(rep, top=0)
    (row,) = res.table().to_pylist()
    assert row["name"] == "gemm" and row["time_pct"] == pytest.approx(900 / 11)
    assert res.summary["names"] == 3


def test_no_kernels_is_empty_and_no_cuda_is_not_captured(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    with nsysdiag.open(b.write(tmp_path / "e.sqlite"), cache=False) as rep:
        assert kernel_summary.run(rep).status == "empty"
    b = builder("current")
    b.nvtx(0, 10, "only nvtx")
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        res = kernel_summary.run(rep)
    assert res.status == "not_captured" and "--trace=cuda" in res.message


def test_cli_json(three_names):
    out = CliRunner().invoke(cli, ["kernel-summary", str(three_names), "--format", "json",
                                   "--top", "2"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [r["name"] for r in doc["tables"]["per_name"]] == ["gemm", "add"]


def test_equals_nsys_stats_cuda_gpu_kern_sum():
    """Every row of `nsys stats --report cuda_gpu_kern_sum` for baseline.sqlite.

    nsys prints averages, medians, stddev and shares with one decimal: those agree to
    rounding (0.05, plus float slack); instances, total, min and max agree exactly.
    """
    need(REFERENCE)
    with REFERENCE.open(newline="") as f:
        expected = list(csv.DictReader(f))
    with nsysdiag.open(need(H200 / "baseline.sqlite"), cache=False) as rep:
        got = by_name(kernel_summary.run(rep))
    assert len(got) == len(expected)
    for ref in expected:
        row = got[ref["Name"]]
        assert row["instances"] == int(ref["Instances"])
        assert row["total_ns"] == int(ref["Total Time (ns)"])
        assert row["min_ns"] == int(ref["Min (ns)"])
        assert row["max_ns"] == int(ref["Max (ns)"])
        for ours, theirs in (("avg_ns", "Avg (ns)"), ("median_ns", "Med (ns)"),
                             ("stddev_ns", "StdDev (ns)"), ("time_pct", "Time (%)")):
            assert row[ours] == pytest.approx(float(ref[theirs]), abs=0.05 + 1e-6), ours


@pytest.mark.parametrize("path", corpus_sqlite_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_runs(path):
    with open_corpus(path) as rep:
        res = kernel_summary.run(rep)
    assert res.status in ("ok", "empty", "not_captured")
    if res.ok:
        assert sum(r["instances"] for r in res.table().to_pylist()) == res.summary["kernels"]
        assert sum(r["time_pct"] for r in res.table().to_pylist()) == pytest.approx(100)
