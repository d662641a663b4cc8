"""How much of a tail size explains, from a size-matched comparison (issue 34, workload):
the latency expected at a size is a monotone fit over size bins' medians, so a few stalled
units cannot move it; the share is the expected latency at the slow units' sizes less that
at the median band's, over their extra latency.

Simulated mechanisms, each request built the same way (input prepared on the host, copied
to the GPU, four kernels, a sync): latency a convex function of size (a size tail), equal
sizes with stalls between launches, sizes independent of stalls, mild sizes with stalls
(the stall is still named), and a serving run whose new sizes each pay a one-off cost (the
slow units are the first of their size)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import nsysdiag
from nsysdiag.analyses import workload
from nsysdiag.analyses.workload import WorkloadResult, is_new_size_tail, is_size_tail
from nsysdiag.diagnosis.model import Mechanism
from nsysdiag.settings import DEFAULTS, Settings

#: bytes copied to the GPU per token
TOKEN_BYTES = 4096


def requests(builder, tokens, *, prep_ns, stall_ns=None, new_size_ns: int = 0,
             seed: int = 1):
    """An export of one request per entry of ``tokens``: the input prepared on the host for
    ``prep_ns(size)`` (plus up to 20 us of noise), copied to the GPU (4 KiB a token at
    20 GB/s), four kernels of 500 ns a token, a sync. ``stall_ns[k]`` holds the host between
    the second and third launch of request k (a thread taking the interpreter lock);
    ``new_size_ns`` is spent on the host, after a cuLibraryLoadData call, by each request of
    a size no earlier one had (kernels loaded for a new shape)."""
    rng = np.random.default_rng(seed)
    b = builder("current")
    seen: set[int] = set()
    t = 1_000_000
    for k, size in enumerate(int(s) for s in tokens):
        start = t
        if new_size_ns and size not in seen:
            b.api(t, t + 50_000, "cuLibraryLoadData")
            t += 50_000 + new_size_ns
        seen.add(size)
        t += int(prep_ns(size)) + int(rng.integers(0, 20_000))
        nbytes = size * TOKEN_BYTES
        corr = b.api(t, t + 5_000, "cudaMemcpyAsync_v3020")
        copy_ns = nbytes // 20
        b.memcpy(t + 6_000, t + 6_000 + copy_ns, nbytes, corr=corr)
        gpu, call = t + 6_000 + copy_ns, t + 6_000
        for j in range(4):
            if j == 2 and stall_ns is not None and stall_ns[k]:
                call += int(stall_ns[k])
            dur = size * 500 + int(rng.integers(0, 5_000))
            gpu = max(gpu, call + 4_000)
            b.launch(call, call + 4_000, gpu, gpu + dur)
            call += 5_000
            gpu += dur
        end = max(call, gpu) + 3_000
        sync = b.api(call, end, "cudaStreamSynchronize_v3020")
        b.sync(call, end, corr=sync)
        b.nvtx(start, end + 1_000, "request")
        t = end + 50_000
    return b


def heavy_tailed(rng, n, lo=32, hi=2048):
    """Token counts of a Pareto tail (most requests small, a few big), in steps of 8."""
    tokens = np.minimum(hi, lo * rng.pareto(1.3, size=n) + lo).astype(int)
    return tokens - tokens % 8


def stalls(rng, n, share=0.05, lo=3_000_000, hi=6_000_000):
    """Stalls of ``lo``-``hi`` ns in a random ``share`` of the requests, 0 elsewhere."""
    return np.where(rng.random(n) < share, rng.integers(lo, hi, size=n), 0)


def diagnosed(b, tmp_path, name):
    return nsysdiag.diagnose(b.write(tmp_path / f"{name}.sqlite"), cache=False)


def test_expected_latency_is_the_monotone_fit_of_bin_medians():
    # three bins whose medians fall at the middle one: the fit pools the last two (weighted
    # by units), interpolates between bins' median sizes and is flat beyond them
    bins = pa.table({"measure": ["x"] * 3, "bin": [1, 2, 3], "units": [10, 30, 10],
                     "x_median": [1.0, 2.0, 4.0], "p50_ns": [100.0, 300.0, 200.0]})
    fitted = workload.expected_latency(bins, "x", np.array([0.0, 1.0, 1.5, 2.0, 3.0, 5.0]))
    # pooled: (300 x 30 + 200 x 10) / 40 = 275
    assert fitted == pytest.approx([100, 100, 187.5, 275, 275, 275])
    assert workload.expected_latency(bins.slice(0, 1), "x", np.array([1.0])) is None


def test_a_convex_size_cost_is_a_size_tail(builder, tmp_path):
    # (a) host preparation superlinear in size: latency is a monotone, not linear,
    # function of size; size explains the tail
    rng = np.random.default_rng(11)
    tokens = heavy_tailed(rng, 300)
    b = requests(builder, tokens, prep_ns=lambda s: 40 * s ** 1.5)
    d = diagnosed(b, tmp_path, "convex")
    w = d.analyses["workload"]
    assert isinstance(w, WorkloadResult)
    assert w.size_measure == "htod_bytes" and w.size_rho > 0.9
    assert w.size_explains >= 0.8, w.size_line()
    assert is_size_tail(w, DEFAULTS) and not is_new_size_tail(w)
    assert w.normalized_level != "abnormal", w.normalized_p99_over_p50
    assert d.verdict.layer == "workload", d.verdict.summary
    assert d.verdict.mechanism is Mechanism.MORE_WORK
    assert "slow units are bigger" in d.verdict.summary


def test_equal_sizes_with_stalls_are_no_size_tail(builder, tmp_path):
    # (b) every request the same size, random stalls between launches: nothing to fit
    rng = np.random.default_rng(12)
    n = 300
    b = requests(builder, np.full(n, 256), prep_ns=lambda s: 1_000 * s,
                 stall_ns=stalls(rng, n))
    d = diagnosed(b, tmp_path, "equal")
    w = d.analyses.get("workload")
    assert w is None or (w.size_measure is None and not is_size_tail(w, DEFAULTS))
    assert d.verdict.layer == "cpu", d.verdict.summary


def test_sizes_independent_of_stalls_are_no_size_tail(builder, tmp_path):
    # (c) the false-alarm guard: sizes vary, stalls fall on requests of any size
    rng = np.random.default_rng(13)
    n = 300
    tokens = rng.choice([64, 128, 192, 256], size=n)
    b = requests(builder, tokens, prep_ns=lambda s: 1_000 * s, stall_ns=stalls(rng, n))
    d = diagnosed(b, tmp_path, "independent")
    w = d.analyses["workload"]
    assert not is_size_tail(w, DEFAULTS), w.size_line()
    assert w.size_explains is None or w.size_explains < 0.3
    assert d.verdict.layer == "cpu", d.verdict.summary


def test_a_stall_among_mildly_varying_sizes_is_still_named(builder, tmp_path):
    # (d) latency follows size over most requests (rank correlation high), but the slow
    # ones are stalled requests of ordinary size: size explains little of the tail
    rng = np.random.default_rng(14)
    n = 300
    tokens = rng.integers(12, 21, size=n) * 8  # 96-160 tokens
    b = requests(builder, tokens, prep_ns=lambda s: 10_000 * s, stall_ns=stalls(rng, n))
    d = diagnosed(b, tmp_path, "mild")
    w = d.analyses["workload"]
    assert w.size_explains is None or w.size_explains < 0.2, w.size_line()
    assert not is_size_tail(w, DEFAULTS)
    assert d.verdict.layer == "cpu", d.verdict.summary


def test_new_sizes_paying_a_one_off_cost_are_a_size_tail(builder, tmp_path):
    # the serving run of real capture tf_sizes_1, by hand: heavy-tailed request sizes
    # (32-2048 tokens), the input prepared on the host (bytes, host and kernel time grow
    # with size), and each size no earlier request had loads kernels for its shape, 50 ms
    # on the host. Big sizes are rare, so most come once: the size-matched fit has no
    # repeat to compare them with, and the slow requests are the first of their size.
    rng = np.random.default_rng(15)
    tokens = heavy_tailed(rng, 300)
    b = requests(builder, tokens, prep_ns=lambda s: 10_000 * s, new_size_ns=50_000_000)
    d = diagnosed(b, tmp_path, "new_sizes")
    w = d.analyses["workload"]
    # new after the leading warm-up (requests of new sizes, left out of the figures)
    lead = len(tokens) - d.analyses["ranges"].n
    assert w.new_size_n == len(set(tokens.tolist()) - set(tokens[:lead].tolist()))
    assert w.slow_new_size_n == w.slow_n
    assert w.new_size_oneoff_n == w.new_size_n
    assert is_new_size_tail(w) and is_size_tail(w, DEFAULTS)
    assert d.verdict.layer == "workload", d.verdict.summary
    assert d.verdict.mechanism is Mechanism.NEW_SIZES
    summary = d.verdict.summary
    assert "the host-to-device bytes" in summary and "the host time outside CUDA" in summary
    assert "latency follows host-to-device bytes, rank correlation" in summary
    assert f"{w.slow_n} of the {w.slow_n} slowest units are the first of their" in summary
    mid = next(line for line in d.lines()[:12] if line.startswith("mid-run"))
    assert "cuLibraryLoadData" in mid and "are the first of their host-to-device bytes" in mid
    finding = next(f for f in d.findings if f.title.startswith("Workload size"))
    assert "first of their host-to-device bytes" in finding.title


def test_the_size_rules_are_settings_of_the_cached_result(builder, tmp_path):
    # the thresholds the workload analysis judges with are settings its run reads, so a
    # cached result is never reused under other values
    rng = np.random.default_rng(15)
    b = requests(builder, heavy_tailed(rng, 300), prep_ns=lambda s: 10_000 * s,
                 new_size_ns=50_000_000)
    path = b.write(tmp_path / "new_sizes.sqlite")
    with nsysdiag.open(path, cache_dir=tmp_path / "cache") as rep:
        default = rep.analysis("workload")
        (read,) = [e.fields for entries in rep.results_memo.values() for e in entries
                   if e.result is default]
        # (elevated_ratio is read only where the level is not above tail_ratio)
        assert {"size_min_rho", "new_size_share", "new_size_lift", "new_size_min_ratio",
                "tail_ratio"} <= set(read)
        strict = rep.analysis("workload", settings=Settings(new_size_min_ratio=1000.0))
        loose = rep.analysis("workload", settings=Settings(size_min_rho=1.0))
    assert default.new_size_tail and not strict.new_size_tail
    assert strict.new_size_ratio == default.new_size_ratio
    assert default.size_measure == "htod_bytes" and loose.size_measure is None
