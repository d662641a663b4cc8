"""Slow units that are simply bigger (issue 34): a serving run whose requests have
heavy-tailed sizes. Each request's size drives its host time (input preparation), the bytes
it copies to the GPU and its kernel time, and a caching pinned allocator grows
(cudaHostAlloc) on each request of a size not seen before, scattered through the run.
Nothing mid-run is set apart, the figures count every request after the first, and the
verdict is workload, whichever side absorbs the time."""

from __future__ import annotations

import numpy as np
import pytest

import nsysdiag
from nsysdiag.analyses import ranges
from nsysdiag.render.html import render_html

#: tokens per request and their probabilities: most are small, a few are big
TOKENS = np.array([32, 64, 128, 256, 512, 1024, 2048])
WEIGHTS = np.array([30, 25, 20, 12, 7, 4, 2], dtype=float)


def serving(builder, n: int = 300, seed: int = 3, host_us_per_token: float = 4.0):
    """The export, and each request's tokens."""
    rng = np.random.default_rng(seed)
    tokens = rng.choice(TOKENS, size=n, p=WEIGHTS / WEIGHTS.sum())
    b = builder("current")
    seen: set[int] = set()
    t = 1_000_000
    for k, size in enumerate(tokens):
        size = int(size)
        start = t
        if k == 0:
            b.api(t, t + 2_000_000, "cuModuleLoadData")  # the first request loads the module
            t += 2_000_000
        if size not in seen:  # the pinned cache grows to the new size
            seen.add(size)
            b.api(t, t + 300_000, "cudaHostAlloc")
            t += 300_000
        t += int(size * host_us_per_token * 1000) + int(rng.integers(0, 20_000))  # input prep
        nbytes = size * 4096
        corr = b.api(t, t + 5_000, "cudaMemcpyAsync_v3020")
        copy_ns = nbytes // 20  # 20 GB/s
        b.memcpy(t + 6_000, t + 6_000 + copy_ns, nbytes, corr=corr)
        gpu = t + 6_000 + copy_ns
        call = t + 6_000
        for _ in range(4):
            dur = size * 500 + int(rng.integers(0, 5_000))
            b.launch(call, call + 4_000, gpu, gpu + dur)
            call += 5_000
            gpu += dur
        end = max(call, gpu) + 3_000
        sync = b.api(call, end, "cudaStreamSynchronize_v3020")
        b.sync(call, end, corr=sync)
        b.nvtx(start, end + 1_000, "request")
        t = end + 50_000
    return b, tokens


def test_size_tail_is_workload_and_nothing_mid_run_is_dropped(builder, tmp_path):
    b, tokens = serving(builder)
    path = b.write(tmp_path / "serving.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
    inst = res.table("instances").sort_by("start_ns").to_pylist()
    # only the leading stretch is warm-up: the first request (module load) and those right
    # after it that allocate a new size, up to the first that does not
    lead = next(k for k in range(1, len(tokens)) if tokens[k] in tokens[:k])
    assert [r["instance"] for r in inst if r["warmup"]] == [r["instance"] for r in inst[:lead]]
    assert res.n == len(tokens) - lead
    first_of_size = [k for k in range(len(tokens)) if tokens[k] not in tokens[:k]]
    later = [k for k in first_of_size if k >= lead]
    assert later and res.n_later_oneoff == len(later)
    assert [k for k, r in enumerate(inst) if r["oneoff"] and r["counted"]] == later

    d = nsysdiag.diagnose(path, cache=False)
    assert d.tail.n == res.n and d.tail.p50_ns == pytest.approx(res.p50_ns)
    assert d.verdict.layer == "workload", d.verdict.summary
    w = d.analyses["workload"]
    rel = {r.measure: r for r in w.size_relation()}
    # bytes follow tokens exactly: 4 KiB a token
    assert w.size_measure == "htod_bytes" and w.size_rho > 0.8 and w.size_ratio > 3
    assert rel["host_ns"].rho > 0.8 and rel["kernel_ns"].rho > 0.8
    assert rel["n_kernels"].rho is None  # four kernels in every request
    # over the latency expected at its size, what is left is the 300 us allocation of each
    # request of a new size against the 0.2-6.4 ms its size takes: elevated, not abnormal
    assert w.normalized_level == "elevated" and 1.3 < w.normalized_p99_over_p50 < 2.5
    assert w.size_explains >= 0.8
    assert "slow units are bigger" in d.verdict.summary
    assert any(f.title.startswith("Workload size") for f in d.findings)
    lines = d.lines()
    mid = next(line for line in lines[:12] if line.startswith("mid-run"))
    # the allocations come with new sizes, and the line says so
    assert "cudaHostAlloc" in mid and w.oneoff_new_sizes
    assert mid.endswith("all units with a one-off call are the first of their host-to-device "
                        "bytes: a cache (kernels for a shape, pinned or device memory) that "
                        "grows with each new size")
    # the HTML plots latency against the size latency follows
    page = render_html(d)
    assert "Latency against host-to-device bytes (MB) per unit" in page


def test_a_tail_of_equal_units_is_no_size_tail(builder, tmp_path):
    # every request the same size; the slow ones spend longer on the host for nothing:
    # no work measure follows latency
    b = builder("current")
    rng = np.random.default_rng(5)
    t = 1_000_000
    for k in range(200):
        start = t
        t += 100_000 + (3_000_000 if k % 37 == 5 else int(rng.integers(0, 20_000)))
        corr = b.api(t, t + 5_000, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 6_000, t + 56_000, 1 << 20, corr=corr)
        b.launch(t + 10_000, t + 14_000, t + 60_000, t + 160_000)
        sync = b.api(t + 15_000, t + 165_000, "cudaStreamSynchronize_v3020")
        b.sync(t + 15_000, t + 165_000, corr=sync)
        b.nvtx(start, t + 166_000, "request")
        t += 200_000
    path = b.write(tmp_path / "equal.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    assert d.verdict.layer != "workload", d.verdict.summary
    w = d.analyses.get("workload")
    assert w is None or w.size_measure is None
