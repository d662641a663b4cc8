"""api_summary on a hand-built export whose answers are computed by hand."""

from __future__ import annotations

import pytest

import nsysdiag
from nsysdiag.analyses.api_summary import ApiCall, ApiSummaryResult

US = 1_000


def _export(builder, tmp_path):
    """The main thread: cudaLaunchKernel 10, 20, 30 us; a cudaMemcpy of 150 us that
    fails (returns 2, cudaErrorMemoryAllocation); cudaStreamSynchronize 50 and 50 us.
    Thread 7: cudaLaunchKernel 40 us.

    by name    calls  total  share           median  max  threads  failed
    cudaMemcpy     1    150  150/350 42.86%     150  150        1       1
    cudaLaunchKernel 4  100  100/350 28.57%      25   40        2       0
    cudaStreamSynchronize 2 100  28.57%          50   50        1       0
    (the two of 100 us: by name); in all 7 calls, 350 us, 3 names, 2 threads, 1 failed
    """
    b = builder("current")
    t = 1_000 * US
    for d in (10, 20, 30):
        b.api(t, t + d * US, "cudaLaunchKernel_v7000")
        t += 100 * US
    b.api(t, t + 150 * US, "cudaMemcpy_v3020")
    b.rows["CUPTI_ACTIVITY_KIND_RUNTIME"][-1]["returnValue"] = 2
    t += 200 * US
    for _ in range(2):
        b.api(t, t + 50 * US, "cudaStreamSynchronize_v3020")
        t += 100 * US
    b.api(2_000 * US, 2_040 * US, "cudaLaunchKernel_v7000", tid=7)
    return b.write(tmp_path / "t.sqlite")


def test_api_summary_by_hand(builder, tmp_path):
    with nsysdiag.open(_export(builder, tmp_path), cache=False) as rep:
        r = rep.api_summary()
    assert isinstance(r, ApiSummaryResult) and r.ok
    assert (r.calls, r.total_ns, r.names, r.threads, r.failed) == (7, 350 * US, 3, 2, 1)
    rows = r.tables["per_name"].to_pylist()
    assert [(x["name"], x["calls"], x["total_ns"], x["median_ns"], x["max_ns"],
             x["threads"], x["failed"]) for x in rows] == [
        ("cudaMemcpy", 1, 150 * US, 150 * US, 150 * US, 1, 1),
        ("cudaLaunchKernel", 4, 100 * US, 25 * US, 40 * US, 2, 0),
        ("cudaStreamSynchronize", 2, 100 * US, 50 * US, 50 * US, 1, 0)]
    assert [x["share_pct"] for x in rows] == pytest.approx([300 / 7, 200 / 7, 200 / 7])
    assert r.top(1) == [ApiCall("cudaMemcpy", 1, 150 * US, pytest.approx(300 / 7), 1)]
    assert r.message == "7 CUDA API calls of 3 names on 2 threads, 1 failed"


def test_without_cuda_calls_it_is_not_captured(builder, tmp_path):
    b = builder("current")
    b.osrt(0, 1_000, "poll")
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = rep.api_summary()
    assert type(r) is not ApiSummaryResult and r.status == "not_captured"
    assert r.message.startswith("api_calls: ")


def test_api_summary_matches_nsys_stats_cuda_api_sum():
    # NVIDIA's own `nsys stats --report cuda_api_sum` of the H200 baseline: the same
    # calls, total, median and max per name (nsys keeps the version suffix: _v11060)
    import csv
    import re

    from conftest import H200, need

    ref = need(H200 / "nsys-reference" / "stats_baseline_cuda_api_sum.csv")
    def bare(name):
        return re.sub(r"_v\d+$", "", name)

    with nsysdiag.open(need(H200 / "baseline.sqlite"), cache=False) as rep:
        rows = {bare(x["name"]): x
                for x in rep.api_summary().tables["per_name"].to_pylist()}
    with ref.open() as f:
        expected = {bare(line["Name"]): (int(line["Num Calls"]), int(line["Total Time (ns)"]),
                                         float(line["Med (ns)"]), int(line["Max (ns)"]))
                    for line in csv.DictReader(f)}
    assert set(rows) == set(expected)
    for name, (calls, total, median, most) in expected.items():
        got = rows[name]
        assert (got["calls"], got["total_ns"], got["max_ns"]) == (calls, total, most), name
        assert got["median_ns"] == pytest.approx(median, abs=0.5), name
