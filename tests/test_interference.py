"""Interference by name and more work vs slower work, on hand-built traces whose answers
are computed by hand, and the diagnosis' verdicts on simulated mechanisms."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nsysdiag

MS = 1_000_000


def _requests(b, durations_ms, *, kernels=None, kernel_ms=None, background=()):
    """One request per duration: an NVTX range on the main thread, its own kernels (launched
    inside it, back to back on stream 7); ``background``: (request index, start offset ms,
    length ms) GEMMs on stream 13 launched by another thread."""
    t = 0
    for i, d in enumerate(durations_ms):
        span = int(d * MS)
        b.nvtx(t, t + span, "request")
        n = kernels[i] if kernels is not None else 4
        k = int((kernel_ms[i] if kernel_ms is not None else 0.1) * MS)
        at = t + 10_000
        for j in range(n):
            launch = t + 1_000 + j * 2_000
            at = max(at, launch + 1_000)
            b.launch(launch, launch + 500, at, at + k, name="step")
            at += k
        for idx, off, length in background:
            if idx == i:
                s = t + int(off * MS)
                b.launch(s - 5_000, s - 4_000, s, s + int(length * MS), name="gemm_bg",
                         stream=13, tid=99)
        t += span + 100_000
    return b


def test_interference_names_the_background_stream(builder, tmp_path):
    # 40 requests; the 4 slowest (3 ms) have 2 ms of stream-13 GEMM inside them; one median
    # request (1 ms) has a 0.2 ms one. slow set: max(tail 1, min(10, 40 / 10 = 4)) = 4
    durations = [1.0] * 36 + [3.0] * 4
    bg = [(36 + k, 0.5, 2.0) for k in range(4)] + [(10, 0.3, 0.2)]
    path = _requests(builder("current"), durations, background=bg).write(tmp_path / "i.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        r = rep.analysis("interference")
    assert r.ok and r.slow_n == 4
    assert r.culprit_stream == 13 and r.culprit_names == ("gemm_bg",)
    assert r.culprit_slow_units == 4
    # median band (45th-55th percentile of 36 x 1 ms and 4 x 3 ms): the 36 requests of 1 ms
    assert r.median_n == 36 and r.culprit_median_units == 1
    assert r.culprit_slow_overlap_mean_ns == pytest.approx(2 * MS)
    assert r.culprit_median_overlap_mean_ns == pytest.approx(0.2 * MS / 36)
    # the request's own kernels on stream 7 are never other work
    assert 7 not in r.table("per_stream").column("stream_id").to_pylist()
    assert "4 of 4 slow units and 1 of 36 median-band units" in r.culprit_line()


def _sizes(rng, n):
    return rng.choice([4, 4, 4, 4, 4, 4, 4, 4, 12, 20], size=n)


def test_workload_tail_is_told_from_jitter(builder, tmp_path):
    rng = np.random.default_rng(3)
    n = 200
    # workload: slow requests launch more kernels of 0.25 ms each (requests of varying size)
    k = _sizes(rng, n)
    dur = [0.2 + 0.25 * x * rng.uniform(1.0, 1.04) for x in k]
    work = _requests(builder("current"), dur, kernels=list(k), kernel_ms=[0.25] * n)
    # jitter: 4 kernels each, in some requests they run 3-5x slower
    slow = rng.uniform(size=n) < 0.1
    kms = [0.25 * (rng.uniform(3, 5) if s else rng.uniform(1.0, 1.04)) for s in slow]
    dur_j = [0.2 + 4 * x for x in kms]
    jit = _requests(builder("current"), dur_j, kernels=[4] * n, kernel_ms=kms)
    with nsysdiag.open(work.write(tmp_path / "w.sqlite"), cache=False) as rep:
        w = rep.analysis("workload")
    with nsysdiag.open(jit.write(tmp_path / "j.sqlite"), cache=False) as rep:
        j = rep.analysis("workload")
    # the 10 slowest units launch 20 kernels (20 requests of 20 drawn), the median band 4
    assert w.kind == "more_work" and w.kernel_ratio == pytest.approx(5.0)
    assert w.per_kernel_ratio == pytest.approx(1.0, abs=0.05)
    assert w.r_kernels > 0.9 and w.slope_ns_per_kernel == pytest.approx(0.25 * MS, rel=0.1)
    assert j.kind == "slower_work" and j.kernel_ratio == pytest.approx(1.0)
    assert j.per_kernel_ratio > 2.5 and j.r_kernels is None
    dw = nsysdiag.diagnose(tmp_path / "w.sqlite", cache=False)
    dj = nsysdiag.diagnose(tmp_path / "j.sqlite", cache=False)
    assert dw.verdict.layer == "workload", dw.verdict.summary
    assert "5x the kernels" in dw.verdict.summary
    assert dj.verdict.layer == "gpu", dj.verdict.summary


def _mechanism(b, rng, n, *, weights: bool):
    """Requests of 4 kernels (0.25 ms each); in 15% of them either a 4 ms weight load
    (cudaMemcpy HtoD of 100 MB, pinned) or 4 ms of Python work outside CUDA (a thread
    holding the GIL: no CUDA call, the GPU idle) comes first: a bimodal tail."""
    t = 0
    for _ in range(n):
        extra = rng.uniform(3.5, 4.5) * MS if rng.uniform() < 0.15 else 0
        jitter = rng.uniform(0, 0.05) * MS
        at = t + 10_000
        if extra and weights:
            corr = b.api(at, at + int(extra) + 5_000, "cudaMemcpy_v3020")
            b.memcpy(at + 2_000, at + 2_000 + int(extra), 100 << 20, corr=corr)
        at += int(extra)
        for j in range(4):
            launch = at + j * 2_000
            k0 = max(launch + 1_000, at + j * 250_000)
            b.launch(launch, launch + 500, k0, k0 + 250_000, name="step")
        end = at + 4 * 250_000 + 20_000 + int(jitter)
        b.nvtx(t, end, "request")
        t = end + 100_000
    return b


@pytest.mark.parametrize("weights,layer", [(True, "pcie"), (False, "cpu")])
def test_what_grew_decides_not_the_shape(builder, tmp_path, weights, layer):
    path = _mechanism(builder("current"), np.random.default_rng(5), 300,
                      weights=weights).write(tmp_path / "m.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    assert d.verdict.layer == layer, d.verdict.summary
    assert d.tail.shape == "multimodal"
    assert "the shape (multimodal) points at gpu" in d.verdict.summary


def test_weight_loads_are_a_transfer_volume_tail(builder, tmp_path):
    """The weight-loading mechanism above: the 10 slowest requests (of the 15% that load)
    each copy 100 MiB, the median band none; their extra own copy time is their extra
    latency (the load comes before the request's kernels), so the verdict names transfer
    volume, not contention, and the finding gives the bytes."""
    path = _mechanism(builder("current"), np.random.default_rng(5), 300,
                      weights=True).write(tmp_path / "m.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        w = rep.analysis("workload")
    assert w.slow_n == 10 and w.slow_copy_bytes == 100 << 20 and w.median_copy_bytes == 0
    assert w.copies_explain > 0.95
    # 100 MiB in the extra copy time, which is 3.5-4.5 ms: 23-30 GB/s
    assert 23 < w.extra_copy_gbps < 30
    d = nsysdiag.diagnose(path, cache=False)
    assert d.verdict.layer == "pcie" and "transfer volume" in d.verdict.summary
    (f,) = [f for f in d.findings if f.title.startswith("Transfer volume")]
    assert f.layer == "pcie" and f.severity == "warning" and "105 MB" in f.evidence[0]


def test_more_work_that_mostly_grows_the_gpu_idle_time_is_a_workload_tail(builder, tmp_path):
    """Requests of varying size launched from Python: each kernel (50 us) waits for the next
    launch 150 us after the previous one, so a bigger request grows the GPU's idle time
    more than its kernel time; the extra kernels still explain the extra latency."""
    rng = np.random.default_rng(11)
    b = builder("current")
    t = 0
    for k in rng.choice([4, 4, 4, 4, 4, 4, 4, 4, 16, 24], size=200).tolist():
        for j in range(k):
            launch = t + 5_000 + j * 150_000
            b.launch(launch, launch + 5_000, launch + 10_000, launch + 60_000, name="step")
        end = t + 5_000 + k * 150_000 + int(rng.uniform(0, 5_000))
        b.nvtx(t, end, "request")
        t = end + 50_000
    path = b.write(tmp_path / "py.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    r, w = d.analyses["ranges"], d.analyses["workload"]
    assert r.top_gpu_component.value == "gpu_idle"
    # slope 150 us per kernel x (24 - 4) kernels = the extra latency (3 ms)
    assert w.kernels_explain == pytest.approx(1.0, abs=0.05)
    assert d.verdict.layer == "workload", d.verdict.summary
    assert "the extra kernels explain" in d.verdict.summary


def test_mild_extra_work_among_natural_hiccups_is_a_workload_tail(builder, tmp_path):
    """Ten of 300 requests launch 11 kernels instead of 8 (0.25 ms each: 1.34x the
    latency) and two of the baseline's own requests hiccup to 3.5 ms with their 8 kernels.
    The slowest ten (the two hiccups and eight of the bigger ones) launch (2 x 8 + 8 x 11)
    / 10 = 10.4 kernels on average, 1.3x the median band's 8, under ``workload_ratio``
    (1.5): the mean dilutes the dose. The extra kernels still explain the slow units' extra
    latency (about 0.25 ms per kernel x 2.4 kernels of 0.75 ms), so the tail is more work."""
    rng = np.random.default_rng(17)
    n = 300
    bigger = set(rng.choice(np.arange(5, n), size=12, replace=False).tolist())
    hiccups = set(sorted(bigger)[:2])
    kernels = [11 if i in bigger - hiccups else 8 for i in range(n)]
    dur = [3.5 if i in hiccups else (0.2 + 0.25 * k) * rng.uniform(1.0, 1.04)
           for i, k in enumerate(kernels)]
    path = _requests(builder("current"), dur, kernels=kernels,
                     kernel_ms=[0.25] * n).write(tmp_path / "m.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    w = d.analyses["workload"]
    assert w.kind == "more_work" and w.work_ratio == pytest.approx(10.4 / 8, rel=0.01)
    assert w.work_ratio < d.settings.workload_ratio
    assert w.kernels_explain >= d.settings.work_explains
    assert d.verdict.layer == "workload" and d.verdict.mechanism.value == "more_work", \
        d.verdict.summary
    # the same run without the bigger requests: the hiccups are no workload
    plain = [8] * n
    dur0 = [3.5 if i in hiccups else (0.2 + 0.25 * 8) * rng.uniform(1.0, 1.04)
            for i in range(n)]
    path0 = _requests(builder("current"), dur0, kernels=plain,
                      kernel_ms=[0.25] * n).write(tmp_path / "p.sqlite")
    d0 = nsysdiag.diagnose(path0, cache=False)
    assert d0.verdict.layer != "workload", d0.verdict.summary


def test_explained_shares_by_hand():
    from nsysdiag.analyses.workload import explained

    c = {"slow_duration_ns": 5_000, "median_duration_ns": 1_000, "slow_kernels": 12,
         "median_kernels": 4, "slow_copy_bytes": 3e6, "median_copy_bytes": 1e6,
         "slow_copy_ns": 2_000, "median_copy_ns": 1_000}
    out = explained(c, slope_ns_per_kernel=250.0)
    # 8 extra kernels x 250 ns = 2000 ns of the 4000 ns extra latency
    assert out["extra_latency_ns"] == 4_000 and out["kernels_explain"] == pytest.approx(0.5)
    # 1000 ns more copy time of 4000; 2 MB more in 1000 ns = 2000 GB/s... per ns: bytes/ns
    assert out["copies_explain"] == pytest.approx(0.25)
    assert out["extra_copy_gbps"] == pytest.approx(2e6 / 1_000)
    # slow units no slower than the median band: nothing to explain
    assert "kernels_explain" not in explained({**c, "slow_duration_ns": 900}, 250.0)


def test_bundled_example_names_the_interfering_stream(capsys):
    """examples/gpu-jitter.sqlite: a background stream (13) runs GEMM bursts (nvjet) part of
    the time; the verdict's evidence names it, in the terminal and the JSON."""
    from conftest import ROOT

    from nsysdiag.cli.main import main

    path = ROOT / "examples" / "gpu-jitter.sqlite"
    assert main(["--no-cache", "-q", "diagnose", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["layer"] == "gpu"
    assert "stream 13 of python3" in doc["verdict"]["summary"]
    assert "nvjet" in doc["verdict"]["summary"]
    inter = doc["evidence"]["interference"]["summary"]
    assert inter["culprit_stream"] == 13 and inter["culprit_names"][0].startswith("nvjet")
    # it ran in (nearly) every slow request and (nearly) no median one
    assert inter["culprit_slow_units"] >= 0.8 * inter["slow_n"]
    assert inter["culprit_median_units"] <= 0.2 * inter["median_n"]
    gpu = [f for f in doc["findings"] if f["title"].startswith("Other GPU work")]
    assert gpu and gpu[0]["layer"] == "gpu" and "stream 13" in gpu[0]["evidence"][0]


@pytest.mark.parametrize("slow,median,kind,share", [
    # 12 kernels of 100 ns against 4: growth 800 ns, all of it 8 more kernels x 100 ns
    ((12, 100), (4, 100), "more_work", 1.0),
    # the same 4 kernels at 300 ns: growth 800 ns, none of it more kernels
    ((4, 300), (4, 100), "slower_work", 0.0),
    # 6 kernels of 200 ns against 4 of 100: growth 800 ns, 2 x 100 = 200 ns more work
    ((6, 200), (4, 100), "slower_work", 0.25),
    # fewer kernel time in the slow units: no growth
    ((4, 90), (4, 100), "no_growth", None),
])
def test_workload_split_by_hand(slow, median, kind, share):
    from nsysdiag.analyses.workload import judge
    from nsysdiag.settings import DEFAULTS

    (ks, ps), (km, pm) = slow, median
    # one NCCL kernel of 50 ns in every median unit, of 250 ns in every slow one
    out = judge({"slow_n": 10, "median_n": 20, "slow_kernels": ks, "median_kernels": km,
                 "slow_kernel_ns": ks * ps, "median_kernel_ns": km * pm,
                 "slow_per_kernel_ns": ps, "median_per_kernel_ns": pm,
                 "slow_collective_ns": 250.0, "median_collective_ns": 50.0}, DEFAULTS)
    assert out.get("kind", "no_growth") == kind
    # the 200 ns of NCCL growth over the 800 ns of own kernel growth; none without growth
    assert out.get("collective_share") == (None if kind == "no_growth" else 0.25)
    assert out.get("more_work_share") == (None if share is None else pytest.approx(share))
    assert out["kernel_ratio"] == pytest.approx(ks / km)
    assert out["work_ratio"] == pytest.approx(ks * pm / (km * pm))
