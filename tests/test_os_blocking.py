"""OS blocking and GPU metrics on hand-built exports whose answers are computed by hand,
and the checks that read them (C2, D2)."""

from __future__ import annotations

import pytest

import nsysdiag
from nsysdiag.analyses.gpu_metrics import GpuMetricsResult
from nsysdiag.analyses.os_blocking import OsBlockingResult

MS = 1_000_000


def _export(builder, tmp_path, *, osrt=True, metrics=True):
    """Two threads: the main one polls 3 times (10, 20, 30 ms) and makes a 1 ms ioctl;
    thread 7 waits in a futex 50 ms and polls 5 ms. Four samples of two metrics: DRAM
    read 10, 30, 50, 70 %, SM active 80 % throughout; and an unrelated metric left out."""
    b = builder("current")
    for i in range(60):
        t = i * MS
        b.launch(t + 1_000, t + 5_000, t + 10_000, t + 20_000)
    if osrt:
        for k, d in enumerate((10, 20, 30)):
            b.osrt(k * 100 * MS, k * 100 * MS + d * MS, "poll")
        b.osrt(400 * MS, 401 * MS, "ioctl")
        b.osrt(0, 50 * MS, "futex", tid=7)
        b.osrt(60 * MS, 65 * MS, "poll", tid=7)
    if metrics:
        for k, v in enumerate((10, 30, 50, 70)):
            b.gpu_metric(k * MS, "DRAM Read Bandwidth [Throughput %]", v, metric_id=1)
            b.gpu_metric(k * MS, "SM Active [Throughput %]", 80, metric_id=2)
            b.gpu_metric(k * MS, "GR Active [Throughput %]", 99, metric_id=3)
    return b.write(tmp_path / "t.sqlite")


def test_os_blocking_by_hand(builder, tmp_path):
    path = _export(builder, tmp_path)
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("os_blocking")
    assert isinstance(r, OsBlockingResult) and r.ok
    assert (r.calls, r.threads, r.total_ns) == (6, 2, (10 + 20 + 30 + 1 + 50 + 5) * MS)
    top = r.top(3)
    # poll 65 ms on 2 threads, futex 50 ms on 1, ioctl 1 ms
    assert [(c.name, c.calls, c.total_ns, c.threads) for c in top] == [
        ("poll", 4, 65 * MS, 2), ("futex", 1, 50 * MS, 1), ("ioctl", 1, 1 * MS, 1)]
    assert r.table("per_name").column("max_ns").to_pylist() == [30 * MS, 50 * MS, 1 * MS]


def test_gpu_metrics_by_hand(builder, tmp_path):
    path = _export(builder, tmp_path)
    with nsysdiag.open(path, cache=False) as rep:
        m = rep.analysis("gpu_metrics")
    assert isinstance(m, GpuMetricsResult) and m.ok
    # GR Active is no DRAM, SM-active or PCIe metric
    assert (m.metrics, m.samples) == (2, 8)
    dram, sm = m.rows()
    assert dram.metric_name.startswith("DRAM") and dram.mean == pytest.approx(40.0)
    # quantile_cont at 0.99 of 10, 30, 50, 70: 50 + 0.97 x 20 = 69.4
    assert dram.p99 == pytest.approx(69.4) and dram.samples == 4
    assert (sm.mean, sm.p99, sm.samples) == (80.0, 80.0, 4)


def test_without_the_traces_neither_measures(builder, tmp_path):
    path = _export(builder, tmp_path, osrt=False, metrics=False)
    with nsysdiag.open(path, cache=False) as rep:
        assert rep.analysis("os_blocking").status == "not_captured"
        assert rep.analysis("gpu_metrics").status == "not_captured"


def test_the_checks_read_them(builder, tmp_path):
    """C2 lists the call names with the most blocked time (summed over threads, said so);
    D2 each metric's mean and P99. The verdict layer reads the measurements, not the
    export: the same findings with or without the views' cache."""
    d = nsysdiag.diagnose(_export(builder, tmp_path), cache=False)
    (c2,) = [f for f in d.findings if f.check == "C2"]
    assert c2.evidence == ("poll: 4 calls, 65 ms blocked, summed over 2 threads",
                           "futex: 1 calls, 50 ms blocked in total",
                           "ioctl: 1 calls, 1 ms blocked in total")
    (d2,) = [f for f in d.findings if f.check == "D2"]
    assert d2.title == "GPU metrics (D2)"
    assert d2.evidence[0] == "DRAM Read Bandwidth [Throughput %]: mean 40.0, P99 69.4 (4 samples)"
    bare = nsysdiag.diagnose(_export(builder, tmp_path, osrt=False, metrics=False), cache=False)
    assert not [f for f in bare.findings if f.check == "C2"]
    (d2,) = [f for f in bare.findings if f.check == "D2"]
    assert d2.title == "GPU metrics not captured"
