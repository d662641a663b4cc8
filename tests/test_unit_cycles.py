"""The unit from the structure of the work: the period of a repeating sequence
(compute/cycles.py), iterations of a loop without NVTX from its repeating GPU work
(launch cycles), and groups of sibling NVTX ranges. Hand-built sequences and traces with
their answers worked out in the comments; the corpus exports the issue names."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import CORPUS, need, open_corpus

import nsysdiag
from nsysdiag.analyses import ranges
from nsysdiag.analyses.base import run_query
from nsysdiag.compute import cycles
from nsysdiag.diff import diff

# -- cycles.find on label sequences ---------------------------------------------------------

def test_a_loop_after_a_prelude():
    # prelude 9, 8, then 25 x (1 2 3 4): every label of the loop once per cycle, period 4;
    # no pauses given: the cycles start at the label that occurs first (1, position 2)
    seq = np.array([9, 8] + [1, 2, 3, 4] * 25)
    c = cycles.find(seq)
    assert (c.boundary, c.last, c.period, c.n, c.agreement) == (1, 4, 4, 25, 1.0)
    assert c.starts.tolist() == list(range(2, 102, 4))
    assert c.ends.tolist() == [s + 3 for s in range(2, 102, 4)]
    assert c.coverage == pytest.approx(100 / 102)


def test_the_cycle_starts_after_the_clearly_longest_pause():
    # 30 x (1 2 3); the host pauses 100 before each 2, 1 before the others -> cycles start
    # at 2 (positions 1, 4, ...); the last cycle (2 3) ends at the sequence's end
    seq = np.array([1, 2, 3] * 30)
    c = cycles.find(seq, np.tile([1, 100, 1], 30))
    assert (c.boundary, c.last, c.n) == (2, 1, 30)
    assert (c.starts[0], c.ends[0], c.starts[-1], c.ends[-1]) == (1, 3, 88, 89)
    # pauses of 100 against 60: not clearly longest (ratio 2) -> the first label, 1
    assert cycles.find(seq, np.tile([60, 100, 1], 30)).boundary == 1


def test_nothing_repeats():
    rng = np.random.default_rng(7)
    # random order over 3 or 10 labels: no label's cycles agree
    assert cycles.find(rng.integers(0, 3, 600)) is None
    assert cycles.find(rng.integers(0, 10, 600)) is None
    # one event repeated is no iteration of work (period 1)
    assert cycles.find(np.zeros(100, dtype=int)) is None
    # too few cycles: 19 < 20
    assert cycles.find(np.array([1, 2] * 19)) is None


def test_a_label_twice_per_cycle_is_no_boundary():
    # (1 2 5 2) x 30: 2 alternates between distances 1 and 3 -> not once per cycle; the
    # cycles start at 1, period 4
    c = cycles.find(np.array([1, 2, 5, 2] * 30))
    assert (c.boundary, c.period, c.n) == (1, 4, 30)


def test_nested_loops_take_the_outer_one_when_inner_cycles_differ():
    # gradient accumulation: 4 micro-steps (1 2 3) then the optimizer (7 8), 30 times.
    # 1, 2, 3 have period 3 but only 3 of 4 cycles agree (0.75 < 0.8); 7 and 8 have period
    # 14, all agree -> the optimizer step is the iteration, cut at 7 (occurs first)
    c = cycles.find(np.array(([1, 2, 3] * 4 + [7, 8]) * 30))
    assert (c.boundary, c.period, c.n, c.agreement) == (7, 14, 30, 1.0)
    # one extra kernel every 10 steps of (1 2 3), after steps 9, 19 and 29: of the 29
    # cycles between two 1s, those of steps 9 and 19 differ; 27 agree (0.93 >= 0.8) -> the
    # fine period stays the step's
    seq = []
    for k in range(30):
        seq += [1, 2, 3] + ([6] if k % 10 == 9 else [])
    c = cycles.find(np.array(seq))
    assert (c.boundary, c.period, c.n) == (1, 3, 30)
    assert c.agreement == pytest.approx(27 / 29)


# -- launch cycles: loops without NVTX ------------------------------------------------------

def _train_step(b, t, *, metric=True):
    """One training step at t (ns), as PyTorch issues it without NVTX: forward, backward
    and the optimizer's multi_tensor_apply kernel, then loss.item() (a DtoH
    cudaMemcpyAsync and a cudaStreamSynchronize waiting for the GPU) and, with ``metric``,
    a metric kernel and its .item(). Calls and GPU work:
      fwd  [t, t+1000]           -> [t+2000, t+20000]
      bwd  [t+2000, t+3000]      -> [t+20000, t+40000]
      multi_tensor_apply_kernel [t+4000, t+5000] -> [t+40000, t+50000]
      cudaMemcpyAsync [t+6000, t+7000] -> [t+50000, t+51000]; sync [t+7000, t+51500]
      metric [t+53000, t+54000]  -> [t+55000, t+60000]
      cudaMemcpyAsync [t+55000, t+56000] -> [t+60000, t+61000]; sync [t+56000, t+61500]
    """
    b.launch(t, t + 1000, t + 2000, t + 20000, name="fwd")
    b.launch(t + 2000, t + 3000, t + 20000, t + 40000, name="bwd")
    b.launch(t + 4000, t + 5000, t + 40000, t + 50000, name="multi_tensor_apply_kernel")
    c = b.api(t + 6000, t + 7000, "cudaMemcpyAsync_v3020")
    b.memcpy(t + 50000, t + 51000, 4, kind="DtoH", corr=c)
    b.api(t + 7000, t + 51500, "cudaStreamSynchronize_v3020")
    if metric:
        b.launch(t + 53000, t + 54000, t + 55000, t + 60000, name="metric")
        c = b.api(t + 55000, t + 56000, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 60000, t + 61000, 4, kind="DtoH", corr=c)
        b.api(t + 56000, t + 61500, "cudaStreamSynchronize_v3020")


def test_training_loop_with_two_item_syncs_per_step(builder, tmp_path):
    # 25 steps 100 us apart, two blocking waits each: 50 waits, 49 sync intervals that are
    # half-steps. The GPU work repeats every 6 calls (4 kernels, 2 copies); the pause
    # before fwd (100000 - 61500 = 38500) is clearly the longest (others 1000-1500), so
    # the cycles start at fwd. They hold blocking waits (2 each), so an iteration is bounded
    # by the wait for fwd: the first wait after its launch (t) that returns after fwd ends
    # (t+20000) is loss.item()'s sync, returning at t+51500; the 24 iterations run from
    # one step's to the next's: 1_051_500 + 100_000 k, 100 us each
    b = builder("current")
    b.api(0, 500_000, "cudaMalloc_v3020")  # set-up before the loop
    for k in range(25):
        _train_step(b, 1_000_000 + 100_000 * k)
    path = b.write(tmp_path / "train.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.scope, res.n, res.n_warmup) == (
        "launch-cycle", "launch_cycle", "thread", 24, 0)
    inst = res.table("instances").to_pylist()
    assert [(r["start_ns"], r["duration_ns"]) for r in inst] == (
        [(1_051_500 + 100_000 * k, 100_000) for k in range(24)])
    # the iteration holds the metric's wait of one step (5500) and loss.item()'s of the
    # next (44500: after its copy call) -> cpu_sync 50000; kernels: the metric (5 us) and
    # the next step's fwd, bwd, multi_tensor_apply (18+20+10 us)
    assert (inst[0]["cpu_sync_ns"], inst[0]["gpu_own_kernel_ns"], inst[0]["n_kernels"]) == (
        50_000, 53_000, 4)
    assert res.unit_reason == (
        "no repeated NVTX range; the GPU work repeats every 6 calls (25 cycles from fwd to "
        "cudaMemcpyAsync), 100% of them identical; 2 blocking host waits per cycle, so the "
        "intervals between them are not iterations; 24 iterations, each from the return of "
        "the cudaStreamSynchronize that waits for fwd (the first blocking wait after its "
        "launch to return after it ends, at the same place in every cycle) to the next "
        "one's: from the host learning one cycle's result to learning the next's, host work "
        "included")
    d = nsysdiag.diagnose(path)
    assert (d.tail.unit, d.tail.unit_source, d.tail.n) == ("launch-cycle", "launch_cycle", 24)


def _insert_round(b, t, d):
    """One round of a hash-table insertion loop (cuckoo_hash's shape) at t (ns) whose
    kernel runs d ns: the launch, a blocking DtoH cudaMemcpy that waits for the kernel,
    two small blocking HtoD copies and two blocking memsets for the next round, then 20 us
    of host work. Calls and GPU work:
      insert           [t, t+1000]           -> [t+1500, t+1500+d]
      cudaMemcpy DtoH  [t+1000, t+d+3000]    -> [t+d+2000, t+d+2500]
      cudaMemcpy HtoD  [t+d+3100, t+d+3600]  -> [t+d+3200, t+d+3500]
      cudaMemcpy HtoD  [t+d+3700, t+d+4200]  -> [t+d+3800, t+d+4100]
      cudaMemset       [t+d+4300, t+d+4800]  -> [t+d+4400, t+d+4700]
      cudaMemset       [t+d+4900, t+d+5400]  -> [t+d+5000, t+d+5300]
    The next round starts at t + d + 25400."""
    b.launch(t, t + 1000, t + 1500, t + 1500 + d, name="insert")
    for (a0, a1, g0, g1), kind in zip(((1000 - d, 3000, 2000, 2500), (3100, 3600, 3200, 3500),
                                       (3700, 4200, 3800, 4100)), ("DtoH", "HtoD", "HtoD")):
        c = b.api(t + d + a0, t + d + a1, "cudaMemcpy_v3020")
        b.memcpy(t + d + g0, t + d + g1, 64, kind=kind, corr=c)
    for a0 in (4300, 4900):
        c = b.api(t + d + a0, t + d + a0 + 500, "cudaMemset_v3020")
        b.memset(t + d + a0 + 100, t + d + a0 + 400, 64, corr=c)
    return t + d + 25_400


def test_blocking_copies_bound_the_iterations(builder, tmp_path):
    # 25 rounds with kernels of 10, 20, 30, 40 or 50 us (k % 5): five blocking waits per
    # round, so the sync intervals are pieces of a round; the GPU work repeats every 6
    # calls from insert (after the 20 us pause). The wait for insert is the DtoH copy
    # (returns at t_k + d_k + 3000): iteration k runs from round k's copy to round k+1's,
    # t_{k+1} + d_{k+1} - t_k - d_k = 25400 + d_{k+1} ns; 24 of them
    b = builder("current")
    t, starts, kern = 1_000_000, [], [10_000 * (1 + k % 5) for k in range(25)]
    for d in kern:
        starts.append(t)
        t = _insert_round(b, t, d)
    with nsysdiag.open(b.write(tmp_path / "cuckoo.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.n + res.n_warmup) == (
        "launch-cycle", "launch_cycle", 24)
    inst = res.table("instances").to_pylist()
    assert [r["start_ns"] for r in inst] == [s + d + 3000 for s, d in zip(starts[:-1],
                                                                         kern[:-1])]
    assert [r["duration_ns"] for r in inst] == [25_400 + d for d in kern[1:]]
    # an iteration holds the 4 short waits of its round (4 x 500) and the next round's
    # copy wait (from the end of the insert call, t+1000, to t+d+3000: d + 2000)
    assert [r["cpu_memcpy_ns"] + r["cpu_sync_ns"] + r["cpu_other_api_ns"]
            for r in inst][:2] == [2000 + 2000 + kern[1], 2000 + 2000 + kern[2]]
    assert "5 blocking host waits per cycle, so the intervals between them are not " \
        "iterations; 24 iterations, each from the return of the cudaMemcpy that waits for " \
        "insert (the first blocking wait after its launch to return after it ends, at the " \
        "same place in every cycle)" in res.unit_reason


def test_the_bounding_wait_is_at_the_same_place_in_every_cycle(builder, tmp_path):
    # jacobi's loop: a blocking cudaMemset [t, t+1000], the kernel [t+2000, t+2100] ->
    # [t+2200, t+2200+d], the DtoH cudaMemcpy of the residual [t+2100, t+d+3000]; the next
    # cycle starts 20 us after that copy returns, d = 10..13 us (k % 4). The memset's GPU
    # work ends after the call returns in even cycles ([t+500, t+1500]) and before it in
    # odd ones ([t+200, t+800]): the first wait that returns after the memset's work is
    # the copy in 13 cycles and the memset itself in 12. The copy, the most common place,
    # bounds every cycle: iteration k runs from t_k + d_k + 3000 to the next cycle's, the
    # 20 us pause and the next cycle up to its copy's return, 23000 + d_{k+1} ns (the
    # memset would make them alternate)
    b = builder("current")
    t, starts, kern = 1_000_000, [], [10_000 + 1000 * (k % 4) for k in range(25)]
    for k, d in enumerate(kern):
        starts.append(t)
        c = b.api(t, t + 1000, "cudaMemset_v3020")
        b.memset(*((t + 500, t + 1500) if k % 2 == 0 else (t + 200, t + 800)), 64, corr=c)
        b.launch(t + 2000, t + 2100, t + 2200, t + 2200 + d, name="jacobi")
        c = b.api(t + 2100, t + d + 3000, "cudaMemcpy_v3020")
        b.memcpy(t + d + 2300, t + d + 2600, 8, kind="DtoH", corr=c)
        t = t + d + 3000 + 20_000
    with nsysdiag.open(b.write(tmp_path / "jacobi.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    inst = res.table("instances").to_pylist()
    assert [(r["start_ns"], r["duration_ns"]) for r in inst] == [
        (s + d + 3000, 23_000 + e) for s, d, e in zip(starts, kern, kern[1:])]
    assert "24 iterations, each from the return of the cudaMemcpy that waits for " \
        "cudaMemset" in res.unit_reason


def test_a_blocking_copy_that_starts_the_cycle_bounds_it(builder, tmp_path):
    # 25 rounds, each a blocking HtoD cudaMemcpy [t, t+1000] -> [t+200, t+800], a kernel
    # step [t+1100, t+1200] -> [t+1300, t+1300+d] and a cudaDeviceSynchronize [t+1200,
    # t+d+1400], with d 10, 20 or 30 us (k % 3); the next round starts 30 us after the
    # sync returns. The GPU work repeats every 2 calls and the copy follows the longest
    # pause (30 us against 100 ns), so the cycles start at the copy: a blocking wait
    # itself, whose work ends before it returns, so it bounds the iteration
    b = builder("current")
    t, starts, kern = 1_000_000, [], [10_000 * (1 + k % 3) for k in range(25)]
    for d in kern:
        starts.append(t)
        c = b.api(t, t + 1000, "cudaMemcpy_v3020")
        b.memcpy(t + 200, t + 800, 64, kind="HtoD", corr=c)
        b.launch(t + 1100, t + 1200, t + 1300, t + 1300 + d, name="step")
        b.api(t + 1200, t + d + 1400, "cudaDeviceSynchronize_v3020")
        t = t + d + 1400 + 30_000
    with nsysdiag.open(b.write(tmp_path / "copyfirst.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    # two waits per cycle (the copy, the sync); the copy's return bounds each iteration:
    # t_k + 1000 to t_{k+1} + 1000, i.e. d_k + 31400
    assert (res.unit, res.n + res.n_warmup) == ("launch-cycle", 24)
    inst = res.table("instances").to_pylist()
    assert [(r["start_ns"], r["duration_ns"]) for r in inst] == [
        (s + 1000, d + 31_400) for s, d in zip(starts[:-1], kern[:-1])]
    assert ("each from the return of cudaMemcpy (the cycle's first call, itself a "
            "blocking wait) to the next one's") in res.unit_reason


def test_one_wait_per_step_keeps_the_sync_intervals(builder, tmp_path):
    # the same loop with loss.item() only: one wait per cycle, so the intervals between the
    # waits are the steps (24 of them, from the end of one wait to the end of the next)
    b = builder("current")
    for k in range(25):
        _train_step(b, 1_000_000 + 100_000 * k, metric=False)
    with nsysdiag.open(b.write(tmp_path / "one.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.n) == ("sync-interval", 24)
    assert res.unit_reason == ("intervals between blocking host waits (no repeated NVTX "
                               "range); one blocking wait per cycle of the repeating GPU work")
    # with three blocking copies of the set-up before the loop: 27 intervals, of which the
    # two between set-up copies end before the loop starts (1 ms) and are no iterations;
    # the one from the last set-up copy to the first step's wait ends inside it: 25 kept
    b = builder("current")
    for k in range(3):
        b.api(100_000 * (k + 1), 100_000 * (k + 1) + 5000, "cudaMemcpy_v3020")
    for k in range(25):
        _train_step(b, 1_000_000 + 100_000 * k, metric=False)
    with nsysdiag.open(b.write(tmp_path / "setup.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    inst = res.table("instances").to_pylist()
    assert (res.unit, len(inst)) == ("sync-interval", 25)
    assert (inst[0]["start_ns"], inst[0]["end_ns"]) == (305_000, 1_051_500)
    assert res.unit_reason.endswith("(25 intervals inside the loop; 2 before or after it left "
                                    "out)")


def _layered_step(b, t, items):
    """A step of a model with six identical layers: forward 6 x (gemm, gelu, gemm2), each
    call 1 us every 2 us from t; backward 6 x gemm_bwd; the optimizer's
    multi_tensor_apply_kernel; then ``items`` x (a DtoH cudaMemcpyAsync and a
    cudaStreamSynchronize of 5 us): 25 + items calls that put work on the GPU."""
    s = t
    for _ in range(6):
        for name in ("gemm", "gelu", "gemm2"):
            b.launch(s, s + 1000, s + 1500, s + 1900, name=name)
            s += 2000
    for name in ["gemm_bwd"] * 6 + ["multi_tensor_apply_kernel"]:
        b.launch(s, s + 1000, s + 1500, s + 1900, name=name)
        s += 2000
    for _ in range(items):
        c = b.api(s, s + 1000, "cudaMemcpyAsync_v3020")
        b.memcpy(s + 1500, s + 1900, 4, kind="DtoH", corr=c)
        b.api(s + 1000, s + 6000, "cudaStreamSynchronize_v3020")
        s += 8000


@pytest.mark.parametrize("items", [1, 2])
def test_layers_inside_steps(builder, tmp_path, items):
    # 25 steps every 200 us. The layers repeat every 3 calls (5 of the 6 layer cycles of a
    # step agree: 0.83), the steps every 25 + items calls (the syncs are no GPU work). With
    # one .item() the step's cycles hold one wait each: the 24 intervals between the waits
    # are the steps. With two, the layers hold none and the steps two: the steps are the
    # launch cycles. Only multi_tensor_apply_kernel occurs once per step (the others six
    # or two times), so the cycles start at it (launched at t + 48 us, done at t + 49.9
    # us); the first wait after it that returns later is the first .item()'s sync, [t + 51
    # us, t + 56 us]: each iteration runs from its return to the next step's, 200 us
    b = builder("current")
    for k in range(25):
        _layered_step(b, 1_000_000 + 200_000 * k, items)
    with nsysdiag.open(b.write(tmp_path / f"l{items}.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    if items == 1:
        assert (res.unit, res.n) == ("sync-interval", 24)
        return
    assert (res.unit, res.n + res.n_warmup) == ("launch-cycle", 24)
    assert ("repeats every 27 calls (25 cycles from multi_tensor_apply_kernel to gemm_bwd)"
            in res.unit_reason)
    inst = res.table("instances").to_pylist()
    assert [(r["start_ns"], r["duration_ns"]) for r in inst] == (
        [(1_056_000 + 200_000 * k, 200_000) for k in range(24)])


def test_serving_loop_without_syncs(builder, tmp_path):
    # 30 requests, each a forward pass of three kernels and a copy back, with no blocking
    # wait at all: no sync interval exists; the launch cycles are the requests. The host
    # pauses 50 us before each request's embed (others 1 us): each runs from its embed
    # launch to the next, 60 us
    b = builder("current")
    for k in range(30):
        t = 1_000_000 + 60_000 * k
        b.launch(t, t + 1000, t + 2000, t + 3000, name="embed")
        b.launch(t + 2000, t + 3000, t + 3000, t + 6000, name="attention")
        b.launch(t + 4000, t + 5000, t + 6000, t + 8000, name="mlp")
        c = b.api(t + 6000, t + 7000, "cudaMemcpyAsync_v3020")
        b.memcpy(t + 8000, t + 9000, 4096, kind="DtoH", corr=c)
    with nsysdiag.open(b.write(tmp_path / "serve.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.n, res.p50_ns) == ("launch-cycle", 30, 60_000)
    assert res.unit_reason.endswith("no blocking host wait inside the loop")


def test_a_run_that_does_not_repeat_has_no_unit(builder, tmp_path):
    # 300 launches of 12 kernel names in random order, no wait: no unit, and the diagnosis
    # answers for the whole run
    rng = np.random.default_rng(3)
    b = builder("current")
    for k, name in enumerate(rng.integers(0, 12, 300)):
        t = 1_000_000 + 10_000 * k
        b.launch(t, t + 1000, t + 2000, t + 5000, name=f"k{name}")
    path = b.write(tmp_path / "once.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        res = ranges.run(rep)
    assert res.status == "not_captured"
    assert res.message.startswith("no closed NVTX ranges, no blocking host waits and no "
                                  "repeating GPU work")
    d = nsysdiag.diagnose(path)
    assert d.tail.unit is None
    assert d.verdict.summary.startswith("No repeated unit: the run is dominated by")


# -- groups of sibling ranges -------------------------------------------------------------

def _frames(b, n, *, cuda=True):
    """A pipeline of three sibling ranges per frame, reader [0, 2000], infer [3000, 9000]
    (the longest, launching a kernel), post [10000, 11000] from each frame's start, frames
    every 100 us from 1 ms (the host pauses 89 us before each reader, 1 us before the
    others). The capture starts inside frame 0: its reader is missing; frame n has only
    its reader. So each name occurs n times."""
    for k in range(n + 1):
        t = 1_000_000 + 100_000 * k
        if k > 0:
            b.nvtx(t, t + 2000, "reader")
        if k < n:
            b.nvtx(t + 3000, t + 9000 + (50_000 if k == 5 else 0), "infer")
            if cuda:
                b.launch(t + 3100, t + 3200, t + 3300, t + 8000)
            b.nvtx(t + 10000 + (50_000 if k == 5 else 0), t + 11000 + (50_000 if k == 5 else 0),
                   "post")


def test_sibling_ranges_make_one_iteration(builder, tmp_path):
    # infer alone would be the unit (it covers the most time); reader, infer and post repeat
    # 25 times each in the same order: the frame is the iteration, cut at reader (the
    # longest pause), from reader's start to post's end: frames 1..24 last 11000 ns, frame 5
    # 61000 (a slow infer); frame 25 has only its reader: 2000 ns
    b = builder("current")
    _frames(b, 25)
    with nsysdiag.open(b.write(tmp_path / "f.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.unit_runner_up) == ("reader..post", "nvtx_group",
                                                               "infer")
    inst = res.table("instances").to_pylist()
    assert [r["start_ns"] for r in inst] == [1_000_000 + 100_000 * k for k in range(1, 26)]
    assert [r["duration_ns"] for r in inst] == (
        [11_000] * 4 + [61_000] + [11_000] * 19 + [2000])
    assert res.unit_reason.startswith(
        "reader..post grouped, 25 iterations: 3 sibling ranges repeat 25 times each, one "
        "after the other in the same order (reader, infer, post; 100% of cycles identical)")
    assert "; infer alone repeats 25 times" in res.unit_reason


def test_diff_lets_each_trace_group_its_siblings(builder, tmp_path):
    # a group's name is no range name: B chooses its unit the same way instead of being
    # asked for a range "reader..post" (a usage error)
    paths = []
    for name in ("a", "b"):
        b = builder("current")
        _frames(b, 25)
        paths.append(b.write(tmp_path / f"{name}.sqlite"))
    res = diff(*paths)
    latency = {r.metric: (r.a, r.b, r.status) for r in res.rows if r.section == "latency"}
    # both sides: 25 frames, P50 11 us (frame 5: 61 us)
    assert latency["reader..post units"][:2] == (25, 25)
    assert latency["reader..post P50"] == (11_000, 11_000, "unchanged")


def test_siblings_without_a_clear_pause_start_at_the_first(builder, tmp_path):
    # 8 layers of two ranges each (weights, compute) per token, 30 tokens, pauses all
    # alike (1 us): the cycle starts at the name that occurs first, weights_0; the first
    # token also loads modules (a one-off: warm-up)
    b = builder("current")
    for k in range(30):
        t = 1_000_000 + 1_000_000 * k
        for j in range(8):
            s = t + 20_000 * j
            b.nvtx(s, s + 9000, f"weights_{j}")
            b.nvtx(s + 10_000, s + 19_000, f"compute_{j}")
            b.launch(s + 10_100, s + 10_200, s + 10_300, s + 18_000)
        if k == 0:
            b.api(t + 1000, t + 2000, "cuModuleLoadData")
    with nsysdiag.open(b.write(tmp_path / "tok.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.n, res.n_warmup, res.p50_ns) == ("weights_0..compute_7", 29, 1,
                                                           159_000)


def _tokens(b, n, *, outer="token_{k}_processing", domain_id=0):
    """n tokens 1 ms apart from 1 ms, each an enclosing range ``outer`` (formatted with k;
    None: no enclosing range) around 8 layers of two sibling ranges (weights_j, 9 us,
    compute_j, 9 us, launching a kernel), layers 20 us apart: the token range lasts
    [t, t+170 us], token 3 runs 50 us longer in its last compute."""
    for k in range(n):
        t = 1_000_000 + 1_000_000 * k
        extra = 50_000 if k == 3 else 0
        if outer is not None:
            b.nvtx(t, t + 170_000 + extra, outer.format(k=k), domain_id=domain_id)
        for j in range(8):
            s = t + 1000 + 20_000 * j
            b.nvtx(s, s + 9000, f"weights_{j}")
            b.nvtx(s + 10_000, s + 19_000 + (extra if j == 7 else 0), f"compute_{j}")
            b.launch(s + 10_100, s + 10_200, s + 10_300, s + 18_000)


def test_a_numbered_enclosing_range_is_one_range(builder, tmp_path):
    # token_0_processing ... token_29_processing each occur once: a family of 30 numbered
    # names, one range with a counter in its name (token_#_processing, 30 instances); it
    # encloses the 16 sibling ranges of each token (each of which repeats 30 times), so
    # they are nested in it and it is the unit, not their group: 30 tokens of 170 us, token
    # 3 220 us
    b = builder("current")
    _tokens(b, 30)
    with nsysdiag.open(b.write(tmp_path / "fam.sqlite"), cache=False) as rep:
        fam = run_query(rep, "ranges", "unit_families", {"min_instances": 20}).to_pylist()
        res = ranges.run(rep)
    assert {r["family"] for r in fam} == {"token_#_processing"} and len(fam) == 30
    assert (res.unit, res.unit_source, res.n, res.n_warmup) == (
        "token_#_processing", "nvtx_auto", 30, 0)
    inst = res.table("instances").to_pylist()
    assert [r["duration_ns"] for r in inst] == [170_000] * 3 + [220_000] + [170_000] * 26
    assert res.unit_reason.startswith(
        "30 numbered names, token_0_processing ... token_29_processing, each once in its "
        "process: one range with a counter in its name; repeats 30 times, launches GPU work "
        "in 100% of its instances (8 calls each), median 170 us; ")
    assert "lies inside token_#_processing" in res.unit_reason
    # --range takes the family's name too
    with nsysdiag.open(b.write(tmp_path / "fam2.sqlite"), cache=False) as rep:
        named = ranges.run(rep, range_name="token_#_processing")
    assert (named.unit_source, named.n + named.n_warmup) == ("nvtx_named", 30)


def test_numbered_names_that_repeat_or_are_few_make_no_family(builder, tmp_path):
    # step_0 ... step_9 each 3 times (a step index that repeats, not a counter), and
    # req_0 ... req_14 once each (15 members, fewer than 20): no family; batch_0 ...
    # batch_24 once each in two processes (once in each: still a counter): one family of
    # 25 members and 50 instances
    b = builder("current")
    for r in range(3):
        for k in range(10):
            b.nvtx(10_000 * (10 * r + k), 10_000 * (10 * r + k) + 5000, f"step_{k}")
    for k in range(15):
        b.nvtx(500_000 + 10_000 * k, 505_000 + 10_000 * k, f"req_{k}")
    for pid in (100, 200):
        for k in range(25):
            b.nvtx(1_000_000 + 10_000 * k, 1_005_000 + 10_000 * k, f"batch_{k}", pid=pid)
    with nsysdiag.open(b.write(tmp_path / "nofam.sqlite"), cache=False) as rep:
        fam = run_query(rep, "ranges", "unit_families", {"min_instances": 20}).to_pylist()
    assert {r["family"] for r in fam} == {"batch_#"} and len(fam) == 25


def test_an_enclosing_range_that_does_not_qualify_is_named(builder, tmp_path):
    # the tokens' enclosing range "token" (30 times) lies in a library domain (MPI): an
    # operator or library range, not a unit. The sibling ranges are the unit, grouped
    # weights_0..compute_7 (each token from weights_0's start, t+1000, to compute_7's end,
    # t+160000: 159 us, token 3 209 us), and the reason says why "token" was passed over
    b = builder("current")
    b.nvtx_domain(5, "MPI")
    _tokens(b, 30, outer="token", domain_id=5)
    with nsysdiag.open(b.write(tmp_path / "lib.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.n) == ("weights_0..compute_7", "nvtx_group", 30)
    assert res.p50_ns == 159_000
    assert res.unit_reason.endswith(
        "; the enclosing token (30 times) was passed over: an operator or library range "
        "(domain MPI)")
    # without any enclosing range, the group's reason names none
    b = builder("current")
    _tokens(b, 30, outer=None)
    with nsysdiag.open(b.write(tmp_path / "bare.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert res.unit == "weights_0..compute_7" and "enclosing" not in res.unit_reason


def test_a_qualifying_enclosing_range_is_preferred_to_the_group(builder, tmp_path):
    # "token" (30 times, 170 us) encloses the 16 sibling ranges of each token and
    # qualifies, so the siblings lie inside it and it is the unit. Were the siblings not
    # seen inside it (their inside_frac set to 0 here), the group would be sought around
    # compute_7; the enclosing range still wins over the group it encloses
    b = builder("current")
    _tokens(b, 30, outer="token")
    with nsysdiag.open(b.write(tmp_path / "tok.sqlite"), cache=False) as rep:
        assert ranges.select_unit(rep).name == "token"
        cands = [ranges.Candidate.of(r) for r in ranges.candidates(
            rep, {"min_instances": 20, "min_median_ns": 1000, "cuda_traced": True})]
        loose = [c if c.name == "token" else replace(c, inside_frac=0.0) for c in cands]
        step = ranges.Unit("compute_7", "nvtx_auto", run_query(
            rep, "ranges", "units_nvtx", {"name": "compute_7"}), None, "")
        unit = ranges._group(rep, step, loose, 20)
    assert (unit.name, unit.source, unit.runner_up) == ("token", "nvtx_auto",
                                                        "weights_0..compute_7")
    assert unit.instances.num_rows == 30
    assert unit.reason.endswith("it encloses the 16 sibling ranges of each iteration "
                                "(weights_0, compute_0, weights_1, compute_1, ...), so it is "
                                "the iteration rather than their group (weights_0..compute_7)")


def test_an_nvtx_only_capture_groups_its_stages(builder, tmp_path):
    # the same frames without CUDA trace (EfficientCenterFormer): every stage qualifies
    b = builder("current")
    _frames(b, 25, cuda=False)
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.n) == ("reader..post", 25)


def test_ranges_of_equal_count_that_do_not_interleave_stay_apart(builder, tmp_path):
    # 20 warm-up steps then 20 measured steps: equal counts, but one block after the other
    # (no cycle of two) -> no group; the measured steps (more time) are the unit
    b = builder("current")
    for k in range(40):
        t = 1_000_000 + 100_000 * k
        b.nvtx(t, t + (5000 if k < 20 else 9000), "warm" if k < 20 else "bench")
        b.launch(t + 100, t + 200, t + 300, t + 900)
    with nsysdiag.open(b.write(tmp_path / "w.sqlite"), cache=False) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.n) == ("bench", "nvtx_auto", 20)


# -- the corpus -----------------------------------------------------------------------------

SH1 = CORPUS / "public" / "Sh1mwww__llama3-inference" / "real_inference_simulation.sqlite"
ECF = CORPUS / "public2" / "YoonKyonghwan__EfficientCenterFormer__baseline.sqlite"


def test_sh1mwww_unit_is_the_token():
    need(SH1)
    with open_corpus(SH1) as rep:
        res = ranges.run(rep)
        ((n, median),) = rep.sql("SELECT count(*), median(duration_ns) FROM nvtx_ranges "
                                 "WHERE regexp_matches(name, '^token_[0-9]+_processing$')"
                                 ).fetchall()
    # token_0_processing ... token_63_processing, once each, enclose 8 layers x (ensure
    # weights, computation) per token: the token is the unit; the first holds the 143 ms
    # first load: warm-up
    assert (res.unit, res.unit_source, res.unit_runner_up) == (
        "token_#_processing", "nvtx_auto", "layer_#_token_#")
    assert (res.n, res.n_warmup, res.n + res.n_warmup) == (63, 1, n)
    assert res.unit_reason.startswith("64 numbered names, token_0_processing ... "
                                      "token_63_processing, each once in its process")
    inst = res.table("instances").column("duration_ns").to_numpy()
    assert np.median(inst) == pytest.approx(median)
    assert res.p99_over_p50 < 1.1


def test_efficient_centerformer_unit_is_the_frame():
    # find_centers and transformer_forward both repeat 304 times, neither encloses the
    # other: both are stages of a frame (reader, 3D_backbone, find_centers,
    # transformer_forward, bbox_head, post_processing), which is the iteration
    need(ECF)
    with open_corpus(ECF) as rep:
        res = ranges.run(rep)
    assert (res.unit, res.unit_source, res.unit_runner_up) == (
        "reader..post_processing", "nvtx_group", "find_centers")
    assert res.n + res.n_warmup == 304
    inst = res.table("instances")
    # each frame holds the stages in order: a frame lasts longer than its find_centers
    assert np.median(inst.column("duration_ns").to_numpy()) > 67_654_274
