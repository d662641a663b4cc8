"""whole_run: the whole run's breakdown on hand-built traces (answers in the comments), the
diagnosis' answer without a unit, and the corpus."""

from __future__ import annotations

import pytest
from conftest import corpus_sqlite_files, open_corpus

import nsysdiag
from nsysdiag.analyses import whole_run


@pytest.fixture
def small(builder, tmp_path):
    """Device 0: gemm [1000, 2000] and [3000, 4000], an HtoD copy [2500, 3500] of 1 MiB.
    Span 1000..4000 = 3000 ns; kernels 2000; copy alone [2500, 3000) = 500; idle 500.
    Host: cudaMemcpy [2400, 3600] (1200 ns), cudaStreamSynchronize [4000, 4500] with a
    driver sync nested in it (counted once: 500 ns)."""
    b = builder("current")
    b.launch(500, 600, 1000, 2000, name="gemm")
    corr = b.api(2400, 3600, "cudaMemcpy_v3020")
    b.memcpy(2500, 3500, 1 << 20, corr=corr)
    b.launch(2700, 2800, 3000, 4000, name="gemm")
    b.api(4000, 4500, "cudaStreamSynchronize_v3020")
    b.api(4100, 4200, "cuStreamSynchronize", driver=True)
    return b.write(tmp_path / "w.sqlite")


def test_hand_computed_breakdown(small):
    with nsysdiag.open(small, cache=False) as rep:
        r = whole_run.run(rep)
    assert r.ok
    assert (r.device_id, r.wall_span_ns, r.kernel_busy_ns, r.exposed_copy_ns, r.gpu_idle_ns) \
        == (0, 3000, 2000, 500, 500)
    assert r.kernel_busy_pct == pytest.approx(200 / 3)
    assert (r.host_sync_ns, r.host_copy_call_ns) == (500, 1200)
    assert [(k.name, k.instances, k.total_ns, k.time_pct) for k in r.top_kernels()] == [
        ("gemm", 2, 2000, 100.0)]
    assert [(c.kind, c.instances, c.bytes, c.total_ns) for c in r.top_copies()] == [
        ("HtoD", 1, 1 << 20, 1000)]
    assert r.dominated_by == "kernels"
    assert r.dominant_summary.startswith("the run is dominated by GPU kernels (66.7% of GPU 0's")


def test_no_unit_gets_the_whole_run(builder, tmp_path):
    # two launches 10 us apart, no NVTX, no synchronization: no unit; the GPU idles
    b = builder("current")
    b.launch(0, 50, 100, 200, name="k")
    b.launch(10_000, 10_050, 10_100, 10_200, name="k")
    path = b.write(tmp_path / "i.sqlite")
    d = nsysdiag.diagnose(path)
    assert d.tail.unit is None and d.verdict.layer == "undetermined"
    # span 100..10200 = 10100 ns, kernels 200 ns: idle 9900 ns = 98%
    assert d.verdict.summary.startswith(
        "No repeated unit: the run is dominated by GPU idle time (the GPU waited for the host) "
        "(98% of GPU 0's 10.1 us)")
    assert d.to_dict()["evidence"]["whole_run"]["summary"]["dominated_by"] == "gpu_idle"


def test_no_gpu_work(builder, tmp_path):
    b = builder("current")
    b.api(0, 10, "cudaMalloc_v3020")
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        r = whole_run.run(rep)
    assert not r.ok and not isinstance(r, whole_run.WholeRunResult)


@pytest.mark.parametrize("path", corpus_sqlite_files()[:6], ids=lambda p: p.name)
def test_corpus_parts_add_up(path):
    with open_corpus(path) as rep:
        r = whole_run.run(rep)
    if r.ok:
        assert r.kernel_busy_ns + r.exposed_copy_ns + r.gpu_idle_ns == r.wall_span_ns
        assert r.dominated_by in whole_run.DOMINANT
