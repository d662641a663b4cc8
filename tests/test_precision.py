"""Precision of the checks on hand-built exports of the classes of issue 33: each names a
cause only where the export's own rows support it, in words and units a person reads."""

from __future__ import annotations

import re

import pytest

import nsysdiag
from nsysdiag.analyses import jitter


def test_jitter_tells_one_name_at_two_grids_apart(builder, tmp_path):
    """One kernel name run at two grids: 40 launches of 100 ns at grid 64 and 20 of 200 ns
    at grid 128, each configuration within 1%. By name alone a third of the launches are
    over 1.5x the median (100 ns); by name and configuration none is."""
    b = builder("current")
    t = 0
    for i in range(60):
        wide = i % 3 == 2
        dur = (200 if wide else 100) + i % 2
        b.launch(t, t + 5, t + 10, t + 10 + dur, name="jacobi_kernel",
                 grid=(128, 1, 1) if wide else (64, 1, 1), block=(32, 32, 1))
        t += 1000
    with nsysdiag.open(b.write(tmp_path / "t.sqlite")) as rep:
        res = jitter.run(rep)
    rows = {r.name: r for r in res.per_kernel()}
    assert set(rows) == {"jacobi_kernel <<<(64,1,1),(32,32,1)>>>",
                         "jacobi_kernel <<<(128,1,1),(32,32,1)>>>"}
    assert rows["jacobi_kernel <<<(64,1,1),(32,32,1)>>>"].instances == 40
    assert all(r.slow_pct == 0 for r in rows.values())
    assert res.summary["time_weighted_slow_pct"] == pytest.approx(0.0)


def test_idle_cause_is_taken_over_the_whole_gap(builder, tmp_path):
    """The thread is in cudaDeviceSynchronize when the GPU drains (at 100), leaves it at
    101 and runs CPU code until it launches the next kernel at 1000: the gap [100, 1010)
    is CPU work (895 of its 905 ns host window outside CUDA), not a host sync."""
    from nsysdiag.analyses import gpu_idle

    b = builder("current")
    b.launch(0, 5, 10, 100)
    b.api(6, 101, "cudaDeviceSynchronize_v3020")
    b.launch(1000, 1005, 1010, 1050)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = gpu_idle.run(rep)
    (gap,) = r.table("gaps").to_pylist()
    assert (gap["gap_ns"], gap["cause"]) == (910, "cpu_work")


@pytest.mark.parametrize("counted,incomplete", [(3, False), (5, True)])
def test_might_not_all_be_collected_is_checked_against_nsys_counts(builder, tmp_path,
                                                                    counted, incomplete):
    """nsys's generic "Not all NVTX events might have been collected" with its own count
    of the NVTX events it collected: equal to the export's 3 NVTX rows, nothing was lost;
    5 against 3, two were."""
    from nsysdiag.analyses import capture

    b = builder("current")
    for i in range(3):
        b.nvtx(1000 * i, 1000 * i + 500, "step")
        b.launch(1000 * i + 10, 1000 * i + 20, 1000 * i + 30, 1000 * i + 90)
    b.diagnostic("Not all NVTX events might have been collected.", severity=2)
    b.diagnostic(f"Number of NVTX events collected: \t{counted}.", severity=1)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = capture.run(rep)
    assert r.incomplete is incomplete
    assert r.dropped_warnings == (1 if incomplete else 0)


def test_short_launch_gaps_that_cost_much_are_a_warning_not_within_bounds(builder, tmp_path):
    """300 kernels of 1 us, each launched by a 4 us call right after the previous kernel
    ends: every gap is launch-bound and short (about 4 us, under the 20 us P99 threshold),
    but together they are most of the GPU's time. C1 says so as a warning; it never calls
    them "within bounds" while its own evidence says the GPU lost most of its time."""
    b = builder("current")
    t = 0
    for _ in range(300):
        b.launch(t, t + 4_000, t + 4_500, t + 5_500)
        t += 5_500
    d = nsysdiag.diagnose(b.write(tmp_path / "t.sqlite"), cache=False)
    (c1,) = [f for f in d.findings if f.check == "C1"]
    assert c1.severity == "warning", c1.title
    assert c1.title.startswith("Launch-bound: the GPU lost")
    assert "within bounds" not in c1.title


def test_the_tail_finding_names_the_verdicts_layer_only():
    """The tail's finding carries the layer of what grew most (here pcie); under a healthy
    verdict it names none, under a cpu verdict cpu; other findings keep theirs, and a pcie
    warning under the healthy verdict says it is about the whole run, not the tail."""
    from nsysdiag.diagnosis import consistency
    from nsysdiag.diagnosis.model import Finding, Verdict

    tail = Finding("pcie", "warning", "Latency tail of 'request' is elevated", ("x",),
                   check="A/B")
    e1 = Finding("pcie", "warning", "Host-device transfers: pageable", ("y",), check="E1")
    healthy = consistency.annotated(
        consistency.relabelled([tail, e1], Verdict("healthy", 0.7, "")), Verdict(
            "healthy", 0.7, ""))
    assert [f.layer for f in healthy] == ["info", "pcie"]
    assert "not the latency tail" in healthy[1].evidence[-1]
    cpu = consistency.relabelled([tail, e1], Verdict("cpu", 0.8, ""))
    assert [f.layer for f in cpu] == ["cpu", "pcie"]


def test_an_l2_resident_memset_faster_than_dram_is_not_suspect(builder, tmp_path):
    """The GPU's DRAM moves 4814 GB/s and its L2 holds 60 MiB. A 32 MiB memset in 5 us
    (6711 GB/s) fits in L2 and may outrun DRAM: kept. A 4 GiB memset in 1120 ns cannot be
    L2-resident: suspect."""
    from nsysdiag.analyses import transfers

    b = builder("current")
    b.memset(0, 5_000, 32 << 20)
    b.memset(10_000, 11_120, 4 << 30)
    with nsysdiag.open(b.write(tmp_path / "t.sqlite"), cache=False) as rep:
        r = transfers.run(rep)
    rows = r.table("copies").to_pylist()
    assert [row["suspect"] for row in rows] == [None, "faster_than_memory"]
    assert r.faster_than_memory == 1


def test_copies_far_below_the_model_are_a_warning_with_their_reason(builder, tmp_path):
    """40 pinned 8 MiB host-to-device copies at 20% of the copy model's speed: slow copies,
    a warning whose title says what E1 measured; no percentage of the model above 100."""
    b = builder("current")
    t = 0
    expected = (8 << 20) / 63.0  # ns at the H200's 63 GB/s platform figure
    for _ in range(40):
        b.memcpy(t, t + int(5 * expected), 8 << 20)
        t += int(6 * expected)
    d = nsysdiag.diagnose(b.write(tmp_path / "t.sqlite"), cache=False)
    (e1,) = [f for f in d.findings if f.check == "E1"]
    assert e1.severity == "warning"
    assert e1.title == "Host-device transfers: copies slow against the copy model"
    import re
    pcts = [float(p) for line in e1.evidence for p in re.findall(r"(\d+)% of the speed", line)]
    assert pcts and all(p <= 100 for p in pcts)


def test_unified_memory_time_above_the_whole_is_not_called_a_share(builder, tmp_path):
    """Without units the time base is the GPU work's span, here [0, 1000]: two kernels,
    and four overlapping 800 ns migrations (3200 ns summed) inside it. The summed
    migration time is more than the span: the finding says so instead of "320% of"."""
    b = builder("current")
    b.launch(0, 5, 0, 10)
    b.launch(6, 8, 990, 1000)
    for i in range(4):
        b.memcpy(100 + i * 10, 900 + i * 10 - 40, 4096, kind="UVM_HtoD", src="managed",
                 dst="managed", stream=20 + i)
    d = nsysdiag.diagnose(b.write(tmp_path / "t.sqlite"), cache=False)
    (um,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert "not a share of it" in um.evidence[0]
    assert not re.search(r"\b[1-9]\d{2,}\.\d% of", " ".join(um.evidence))
