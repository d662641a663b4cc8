"""Units that are a population, and verdicts they can carry (issue 33 items 1, 2, 5): sync
intervals that hold one copy or kernel, or differ in what they run, are no unit; a verdict
resting on a handful of slow units is not confident; the program's own earlier work on its
own stream is no "other GPU work"."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CORPUS

import nsysdiag
from nsysdiag.analyses import ranges
from nsysdiag.diagnosis import support
from nsysdiag.settings import DEFAULTS


def _sync_loop(b, n: int, work) -> None:
    """``n`` intervals between blocking copies; ``work(b, k, t)`` puts iteration k's GPU work
    at time t and returns when it ends."""
    t = 1_000_000
    for k in range(n):
        t = work(b, k, t)
        corr = b.api(t, t + 20_000, "cudaMemcpy_v3020")
        b.memcpy(t + 5_000, t + 15_000, 4096, kind="DtoH", corr=corr)
        t += 30_000


def test_sync_intervals_of_one_operation_each_are_no_unit(builder, tmp_path):
    # each wait bounds one kernel, a different one each time, in no repeating order (a
    # solver's phases, each followed by a check): the intervals hold one kernel and the
    # wait's own copy
    rng = np.random.default_rng(2)
    names = [f"phase_{i}" for i in range(8)]

    def one(b, k, t):
        dur = int(rng.integers(10_000, 3_000_000))
        b.launch(t, t + 5_000, t + 6_000, t + 6_000 + dur, name=names[int(rng.integers(0, 8))])
        return t + 6_000 + dur

    b = builder("current")
    _sync_loop(b, 200, one)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert not res.ok and res.status == "empty"
    assert "do not repeat the same work" in res.message
    assert "Annotate the iteration with an NVTX range" in res.message
    d = nsysdiag.diagnose(tmp_path / "t.sqlite", cache=False)
    assert d.tail.unit is None and d.verdict.layer == "undetermined"
    assert d.verdict.confidence < 0.6


def test_sync_intervals_that_repeat_an_iteration_stay_the_unit(builder, tmp_path):
    # each interval: an input copy and three kernels, then the blocking result copy
    def step(b, k, t):
        corr = b.api(t, t + 5_000, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 6_000, t + 20_000, 1 << 16, corr=corr)
        for j, name in enumerate(("embed", "mlp", "head")):
            b.launch(t + 10_000 + j * 6_000, t + 15_000 + j * 6_000,
                     t + 30_000 + j * 100_000, t + 120_000 + j * 100_000, name=name)
        return t + 330_000

    b = builder("current")
    _sync_loop(b, 60, step)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source) == ("sync-interval", "sync_fallback")


#: corpus exports whose sync intervals hold one copy or kernel, or differ in what they run
NOT_A_POPULATION = (
    "public/hpcgroup__pipit/perlmutter-cloverleaf-cuda.sqlite",
    "public/bwyogatama__Mordred-Deprecated/report1.sqlite",
    "public/quasiben__nvtx-examples/cudf.sqlite",
    "public/Raphael-Hao__Abacus/converted_by_nsys2022.4.2/report1.qdrep.sqlite",
    "public/openhackathons-org__gpubootcamp/converted_by_nsys2022.4.2/"
    "jacobi_memcpy_nvlink_report.qdrep.sqlite",
    "public/Yu-gyoung-Yun__alpa/converted_by_nsys2022.4.2/report1.nsys-rep.sqlite",
    "public/ZhangXin8069__qcu/report10.sqlite",
)


@pytest.mark.parametrize("name", NOT_A_POPULATION)
def test_corpus_sync_intervals_that_are_no_population(name):
    path = CORPUS / name
    if not path.exists():
        pytest.skip("corpus not present")
    d = nsysdiag.diagnose(path, cache=False)
    assert d.tail.unit is None, d.tail.unit
    assert "do not repeat the same work" in d.verdict.summary
    assert d.verdict.confidence < 0.6


@pytest.mark.parametrize("reduction", [True, False])
def test_a_launch_cycle_is_the_whole_iteration_not_a_pattern_inside_it(builder, tmp_path,
                                                                       reduction):
    # 30 iterations of one loop: 20 rounds of four small kernels, 100 launches of a
    # residual kernel and a reduction. The four-kernel pattern repeats 600 times, 95%
    # alike, but holds under half of the work: the iteration is the whole loop body (181
    # launches). Without the reduction nothing marks the iteration, and the pattern inside
    # it is no unit either.
    b = builder("current")
    t = 1_000_000
    for _k in range(30):
        for _ in range(20):
            for name in ("copy", "scale", "add", "norm"):
                b.launch(t, t + 3_000, t + 4_000, t + 6_000, name=name)
                t += 8_000
        for _ in range(100):
            b.launch(t, t + 3_000, t + 4_000, t + 20_000, name="residuals")
            t += 22_000
        if reduction:
            b.launch(t, t + 3_000, t + 4_000, t + 30_000, name="reduce")
        t += 50_000
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    if not reduction:
        assert not res.ok and "the GPU work repeats only in part (every 4 calls" in res.message
        return
    assert (res.unit, res.n + res.n_warmup) == ("launch-cycle", 30)
    assert "repeats every 181 calls" in res.unit_reason
    # no part of an iteration is anyone else's work
    assert res.growth(ranges.Component.GPU_OTHER).tail_mean_ns == 0


def test_the_programs_own_earlier_work_is_no_other_gpu_work(builder, tmp_path):
    # one thread, one stream. Every 8th step launches a 3 ms kernel and returns at once
    # (the host runs ahead); the next step's launch blocks on the full queue until it ends:
    # its window holds the previous step's kernel. That is the program's own work, the
    # GPU being behind, not anyone else's work.
    b = builder("current")
    t = 1_000_000
    gpu_free = 0
    for k in range(240):
        start = t
        call_end = max(t + 5_000, gpu_free - 10_000)  # blocks while the queue is full
        kstart = max(t + 6_000, gpu_free)
        length = 3_000_000 if k % 8 == 3 else 40_000
        b.launch(t, call_end, kstart, kstart + length, name="big" if length > 40_000 else "step")
        gpu_free = kstart + length
        t = call_end + 50_000
        b.nvtx(start, t, "step")
        t += 10_000
    path = b.write(tmp_path / "t.sqlite")
    d = nsysdiag.diagnose(path, cache=False)
    r = d.analyses["ranges"]
    assert r.top_gpu_component is ranges.Component.GPU_OTHER
    i = d.analyses["interference"]
    assert i.own_work and i.per_stream()[0].own_stream
    assert "other streams or processes" not in d.verdict.summary
    assert not any(f.title.startswith("Other GPU work") for f in d.findings)
    gpu_bound = [f for f in d.findings if f.title.startswith("GPU-bound with the host ahead")]
    assert gpu_bound and "stream 7" in gpu_bound[0].title
    if d.verdict.layer == "gpu":
        assert d.verdict.mechanism.value == "gpu_bound"


def _other_job_beside(builder, tmp_path, slow):
    """300 requests of one 140 us kernel; in the requests ``slow`` another process's
    kernel runs beside a second launch, and the request takes 2 ms instead of 0.2 ms."""
    b = builder("current")
    t = 1_000_000
    for k in range(300):
        b.nvtx(t, t + (2_000_000 if k in slow else 200_000), "request")
        b.launch(t + 1_000, t + 5_000, t + 10_000, t + 150_000)
        if k in slow:
            b.kernel(t + 150_000, t + 1_900_000, name="other_job", stream=13, pid=999)
            b.launch(t + 6_000, t + 9_000, t + 1_900_000, t + 1_990_000)
        t += 3_000_000
    return b.write(tmp_path / "t.sqlite")


def test_a_cause_resting_on_a_handful_of_units_is_as_sure_as_its_evidence(builder, tmp_path):
    # 300 requests, 6 of them slow because another process's kernel ran beside them (and a
    # second launch): the slowest 10 hold 6 standing out of the body, each carrying the
    # cause; 6 of 6 make the majority 1 - I_0.5(6.5, 0.5) > 0.99 sure, and 6 units are
    # support_min_units (5) or more: the count lowers nothing, the verdict keeps its score
    d = nsysdiag.diagnose(_other_job_beside(builder, tmp_path, range(25, 300, 50)),
                          cache=False)
    assert d.tail.n_standing_out == 6
    found = support.measure(d.analyses.ranges, d.verdict.layer, DEFAULTS)
    assert (found.carried, found.judged) == (6, 6) and found.bound > 0.99
    assert d.verdict.layer in ("gpu", "workload") and d.verdict.confidence >= 0.9, d.verdict
    assert "rests on 6 units" not in d.verdict.summary
    # four of them: fewer than support_min_units, not confident however large the growth
    d = nsysdiag.diagnose(_other_job_beside(builder, tmp_path, range(25, 300, 75)),
                          cache=False)
    if d.verdict.layer in ("cpu", "gpu", "pcie", "workload"):
        assert d.verdict.confidence <= DEFAULTS.unsettled_confidence, d.verdict
        assert "rests on 4 units" in d.verdict.summary


def test_support_bound_by_hand():
    # P(share >= 1/2) under Beta(s + 1/2, m - s + 1/2): 1 of 2 and 5 of 10 are symmetric
    # about 1/2 (0.5); 2 of 2: 1 - I_0.5(2.5, 0.5), the integral of x^1.5 (1 - x)^-0.5
    # over [0, 1/2] / B(2.5, 0.5) = 0.0756 (numerical quadrature), so 0.924; none
    # carrying: 0.076
    assert support.majority(1, 2) == pytest.approx(0.5, abs=1e-9)
    assert support.majority(5, 10) == pytest.approx(0.5, abs=1e-9)
    assert support.majority(2, 2) == pytest.approx(0.924, abs=1e-3)
    assert support.majority(0, 2) == pytest.approx(1 - 0.924, abs=1e-3)
    assert support.majority(0, 0) == 0.0
    # the bound: the majority's chance from support_min_units (5) units judged; under
    # them at most unsettled_confidence (0.55)
    assert support.bound(2, 2, 5, 0.55) == pytest.approx(0.55)
    assert support.bound(4, 4, 5, 0.55) == pytest.approx(0.55)
    assert support.bound(1, 4, 5, 0.55) == pytest.approx(support.majority(1, 4))
    assert support.bound(5, 5, 5, 0.55) == pytest.approx(support.majority(5, 5))
    assert support.majority(5, 5) > 0.99
    assert support.bound(7, 11, 5, 0.55) == pytest.approx(support.majority(7, 11))
    assert 0.8 < support.bound(7, 11, 5, 0.55) < 0.85
    # more carrying, surer; fewer than half, under 1/2
    assert support.bound(6, 11, 5, 0.55) < support.bound(7, 11, 5, 0.55) \
        < support.bound(9, 11, 5, 0.55)
    assert support.bound(4, 11, 5, 0.55) < 0.5


def test_a_cause_carried_by_two_units_is_not_confident(builder, tmp_path):
    # 300 requests, 2 of them 10x slower because another process's kernel ran beside them:
    # however large their growth, 2 units are fewer than support_min_units: at most 0.55
    d = nsysdiag.diagnose(_other_job_beside(builder, tmp_path, (100, 200)), cache=False)
    assert d.verdict.confidence <= 0.55, d.verdict
    if d.verdict.layer in ("cpu", "gpu", "pcie", "workload"):
        assert "rests on 2 units: 2 of the 2 slowest units standing out carry it" \
            in d.verdict.summary


def test_a_mean_carried_by_one_unit_is_no_cause_of_the_tail(builder, tmp_path):
    # 300 requests of a 200 us kernel and a sync (~250 us); 10 run their kernel 400 us
    # (~450 us), one stalls 3 ms on the host before its launch (~3.25 ms, 7x the next
    # slowest: no lone outlier). The slowest 3 (1%): the stalled one and two slow-kernel
    # ones, whose mean growth is mostly the stall (cpu). Judged one by one, the units in
    # the tail's range (over max(1.3 x 250, (250 + 450) / 2) = 350 us: 11) carry the GPU's
    # longer kernels, 1 of 11 the host stall: the cause is not the tail's, undetermined
    b = builder("current")
    t = 1_000_000
    for k in range(300):
        stall = 3_000_000 if k == 150 else 0
        run = 400_000 if k % 30 == 15 else 200_000
        s = t + 10_000 + stall
        b.launch(s, s + 5_000, s + 10_000, s + 10_000 + run)
        corr = b.api(s + 6_000, s + 20_000 + run, "cudaStreamSynchronize_v3020")
        b.sync(s + 6_000, s + 20_000 + run, corr=corr)
        b.nvtx(t, s + 30_000 + run, "request")
        t = s + 1_000_000
    d = nsysdiag.diagnose(b.write(tmp_path / "t.sqlite"), cache=False)
    assert d.tail.lone_outlier_ns is None
    assert d.verdict.layer == "undetermined", d.verdict.summary
    assert "1 of the 11 slowest units standing out carry it" in d.verdict.summary
    assert "mean points at cpu" in d.verdict.summary and "10 carry gpu" in d.verdict.summary
