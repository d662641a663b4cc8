"""capture: what the capture lost or lacks, the machine it ran on, and how the diagnosis
uses it (too few units, a lone outlier, NVTX-only captures, unified memory).

Hand-built traces with the answers worked out in the comments, and the public corpus
exports the issue names (skipped when the corpus is absent).
"""

from __future__ import annotations

import json

import pytest
from conftest import CORPUS

import nsysdiag
from nsysdiag.analyses import capture
from nsysdiag.cli.main import main
from nsysdiag.diagnosis.engine import diagnose, lone_outlier
from nsysdiag.settings import Settings

PUBLIC2 = CORPUS / "public2"


def run(builder, tmp_path, **options):
    with nsysdiag.open(builder.write(tmp_path / "t.sqlite"), cache=False) as rep:
        return capture.run(rep, **options)


def test_launches_without_kernels_and_kernels_without_launches(builder, tmp_path):
    # 3 launches with their kernels, 2 launch calls whose kernels were never recorded, one
    # kernel whose call is missing (correlation id 99), one launch call that failed (no
    # kernel expected, not counted), one graph-node kernel (launched by a graph: not counted)
    b = builder("current")
    for i in range(3):
        b.launch(1000 * i, 1000 * i + 100, 1000 * i + 200, 1000 * i + 300)
    b.api(5000, 5100, "cudaLaunchKernel_v7000")
    b.api(5200, 5300, "cudaLaunchKernel_v7000")
    b.kernel(6000, 6100, corr=99)
    b.kernel(6200, 6300, corr=98, graph_node=7)
    failed = b.api(7000, 7100, "cudaLaunchKernel_v7000")
    b.rows["CUPTI_ACTIVITY_KIND_RUNTIME"][-1]["returnValue"] = 1
    assert failed
    r = run(b, tmp_path)
    # calls 5, kernels 4; lost 2 of 5 = 40 %, orphans 1 of 4 = 25 %
    assert (r.launch_calls, r.kernels, r.launches_without_kernel, r.kernels_without_launch) == (
        5, 4, 2, 1)
    assert (r.missing_kernels_pct, r.orphan_kernels_pct) == (40.0, 25.0)
    assert r.incomplete and not r.nvtx_only
    assert any("2 of 5 kernel launch calls have no kernel record" in f for f in r.findings)
    (row,) = r.launches()
    assert (row.launch_calls, row.kernels, row.launches_without_kernel) == (5, 4, 2)


def test_complete_capture(builder, tmp_path):
    b = builder("current")
    b.launch(0, 100, 200, 300)
    b.launch(400, 500, 600, 700)
    b.api(800, 900, "cudaDeviceSynchronize_v3020")
    b.api(950, 990, "cudaMemcpy_v3020")
    b.api(995, 999, "cudaMemcpyAsync_v3020")
    r = run(b, tmp_path)
    assert (r.launch_calls, r.kernels, r.launches_without_kernel, r.kernels_without_launch) == (
        2, 2, 0, 0)
    assert not r.incomplete and r.findings == ()
    # the synchronize and the synchronous copy block; the async copy does not
    assert r.blocking_waits == 2


def test_launches_recorded_into_a_graph_are_not_lost(builder, tmp_path):
    # 2 launches with kernels; a stream capture (begin 1000, end 2000) records 3 launches
    # into a graph (no kernel records: they run when the graph is launched); then one launch
    # call outside the capture whose kernel was not recorded: 3 counted calls, 2 kernels,
    # 1 lost (1 of 3), the captured ones neither counted nor lost
    b = builder("current")
    b.launch(0, 100, 200, 300)
    b.launch(400, 500, 600, 700)
    b.api(1000, 1010, "cudaStreamBeginCapture_v10000")
    for t in (1100, 1300, 1500):
        b.api(t, t + 50, "cudaLaunchKernel_v7000")
    b.api(1900, 2000, "cudaStreamEndCapture_v10000")
    b.api(2100, 2200, "cudaGraphLaunch_v10000")
    b.api(3000, 3100, "cudaLaunchKernel_v7000")
    r = run(b, tmp_path)
    assert (r.launch_calls, r.kernels, r.launches_without_kernel) == (3, 2, 1)


def test_capture_windows_are_per_thread_and_an_unended_one_runs_to_the_end(builder, tmp_path):
    # thread 1 captures from 1000 to 2000 (cudaStreamEndCapture's return) and begins a
    # second capture at 5000 that never ends; thread 2 launches throughout without
    # capturing. Counted: thread 1's launches at 0 and 3000 (the one at 1500 is inside the
    # first window, the one at 6000 inside the open one) and thread 2's three: 5 calls, of
    # which thread 2's at 4000 and thread 1's at 3000 have no kernel: 2 lost
    b = builder("current")
    b.launch(0, 100, 200, 300, tid=1)
    b.api(1000, 1010, "cudaStreamBeginCapture_v10000", tid=1)
    b.api(1500, 1550, "cudaLaunchKernel_v7000", tid=1)
    b.launch(1600, 1650, 1700, 1800, tid=2)
    b.api(1900, 2000, "cuStreamEndCapture", tid=1)
    b.api(3000, 3100, "cudaLaunchKernel_v7000", tid=1)
    b.api(4000, 4100, "cudaLaunchKernel_v7000", tid=2)
    b.api(5000, 5010, "cudaStreamBeginCapture_v10000", tid=1)
    b.api(6000, 6050, "cudaLaunchKernel_v7000", tid=1)
    b.launch(7000, 7050, 7100, 7200, tid=2)
    r = run(b, tmp_path)
    assert (r.launch_calls, r.kernels, r.launches_without_kernel) == (5, 3, 2)


def test_no_kernel_records_at_all(builder, tmp_path):
    b = builder("current")
    for i in range(4):
        b.api(100 * i, 100 * i + 50, "cudaLaunchKernel_v7000")
    r = run(b, tmp_path)
    assert (r.launch_calls, r.kernels, r.launches_without_kernel) == (4, 0, 4)
    assert r.missing_kernels_pct == 100.0 and r.incomplete


def test_dropped_event_warnings_versions_and_open_ranges(builder, tmp_path):
    b = builder("current")
    b.launch(0, 100, 200, 300)
    b.diagnostic("Not all CUDA events might have been collected.")
    b.diagnostic("Not all CUDA events might have been collected.")
    b.diagnostic("Some events were dropped.", severity=3)
    b.diagnostic("No NVTX events collected. Does the process use NVTX?")  # not a loss
    b.diagnostic("Not all CUDA events might have been collected.", severity=1)  # info only
    b.system_env("NvDriverVersion", "535.216.01")
    b.system_env("CudaDriverVersion", "12020")
    b.nvtx(0, 1000, "step")
    b.nvtx(2000, None, "step")
    b.nvtx(3000, None, "step")
    r = run(b, tmp_path)
    assert r.dropped_warnings == 3
    notes = dict(zip(r.table("notes").column("text").to_pylist(),
                     r.table("notes").column("n").to_pylist()))
    assert notes == {"Not all CUDA events might have been collected.": 2,
                     "Some events were dropped.": 1}
    assert r.incomplete
    assert (r.driver_version, r.cuda_version) == ("535.216.01", "12.2")
    assert r.open_ranges == 2
    assert any("2 NVTX ranges never closed" in f and "step (2)" in f for f in r.findings)


def test_info_gives_versions(builder, tmp_path):
    b = builder("current")
    b.launch(0, 100, 200, 300)
    b.system_env("NvDriverVersion", "550.54.15")
    b.system_env("CudaDriverVersion", "12040")
    with nsysdiag.open(b.write(tmp_path / "v.sqlite"), cache=False) as rep:
        info = rep.info()
    assert (info.driver_version, info.cuda_version) == ("550.54.15", "12.4")


@pytest.mark.parametrize(("raw", "shown"), [
    ("58160", "581.60"),        # Windows, CS336_assignment2 (RTX 5000 Ada Laptop)
    ("41867", "418.67"),        # Mordred-Deprecated (nsys 2019)
    ("5355403", "535.54.03"),   # kmeans-parallel: major, 2-digit minor, patch
    ("52510517", "525.105.17"),  # pipit (Perlmutter): a 3-digit minor
    ("550.54.15", "550.54.15"),  # recorded dotted: as it is
    ("0", None),                # not recorded
])
def test_driver_version_as_nsys_shows_it(builder, tmp_path, raw, shown):
    b = builder("current")
    b.launch(0, 100, 200, 300)
    b.system_env("NvDriverVersion", raw)
    path = b.write(tmp_path / "v.sqlite")
    with nsysdiag.open(path, cache=False) as rep:
        assert rep.info().driver_version == shown
        assert capture.run(rep).driver_version == shown


def test_corpus_windows_driver_version():
    # the export records "58160": the platform states driver 581.60
    d = diagnose(_corpus("Athrun0109__CS336_assignment2__result.sqlite"))
    assert d.platform.driver_version == "581.60"
    assert "driver 581.60, CUDA 13.0" in d.platform.lines()
    assert d.to_dict()["platform"]["driver_version"] == "581.60"


def test_gpus_link_table(builder, tmp_path):
    # the builder's GPU: an H200 (compute capability 9.0): PCIe Gen5 x16 from the table,
    # 32 GT/s x 128/130 / 8 x 16 lanes = 63.0 GB/s per direction
    b = builder("current")
    b.launch(0, 100, 200, 300)
    (gpu,) = run(b, tmp_path).gpus()
    assert (gpu.device_id, gpu.name, gpu.link_source) == (0, "NVIDIA H200", "default")
    assert gpu.link_gbps == pytest.approx(32 * 128 / 130 / 8 * 16)


def test_nvtx_only(builder, tmp_path):
    b = builder("current")
    for i in range(60):
        b.nvtx(10_000 * i, 10_000 * i + 1000 + 10 * i, "forward")
    r = run(b, tmp_path)
    assert r.nvtx_only and r.launch_calls == 0
    path = b.write(tmp_path / "nvtx.sqlite")
    d = diagnose(path, cache=False)
    assert d.tail.unit == "forward" and d.tail.n == 60
    assert d.verdict.layer == "undetermined"
    assert "NVTX ranges only" in d.verdict.summary and "--trace=cuda" in d.verdict.summary
    assert d.findings[0].check == "capture" and d.findings[0].severity == "critical"


def test_nvtx_only_cli_exit_0(builder, tmp_path, capsys):
    b = builder("current")
    for i in range(30):
        b.nvtx(10_000 * i, 10_000 * i + 1000 + 10 * i, "forward")
    path = b.write(tmp_path / "nvtx.sqlite")
    assert main(["--no-cache", "diagnose", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["tail"]["n"] == 30 and doc["evidence"]["capture"]["summary"]["nvtx_only"]


def _steps(builder, durations):
    b = builder("current")
    t = 0
    for d in durations:
        b.nvtx(t, t + d, "step")
        b.launch(t + 10, t + 20, t + 30, t + 40)
        t += d + 100
    return b


def test_too_few_units_is_insufficient(builder, tmp_path):
    # 10 units, p99/p50 far above 2: still no verdict below min_units (50)
    b = _steps(builder, [1000] * 9 + [50_000])
    d = diagnose(b.write(tmp_path / "few.sqlite"), cache=False,
                 settings=Settings(range_min_instances=5))
    assert d.tail.n == 10 and d.tail.min_units == 50
    assert d.verdict.layer == "insufficient" and "rests on 10" in d.verdict.summary
    d = diagnose(tmp_path / "few.sqlite", cache=False,
                 settings=Settings(range_min_instances=5, min_units=10))
    assert d.verdict.layer != "insufficient"


def test_lone_outlier(builder, tmp_path):
    import numpy as np

    s = Settings()
    # second slowest 2000, slowest 30000: 15x > 10x -> a lone outlier
    assert lone_outlier(np.array([1000.0] * 28 + [2000.0, 30000.0]), s) == (30000.0, 15.0)
    # 19000 is 9.5x: not
    assert lone_outlier(np.array([1000.0] * 28 + [2000.0, 19000.0]), s) == (None, None)
    assert lone_outlier(np.array([5.0]), s) == (None, None)
    b = _steps(builder, [1000 + i for i in range(59)] + [1_000_000])
    d = diagnose(b.write(tmp_path / "lone.sqlite"), cache=False)
    assert d.tail.lone_outlier_ns == 1_000_000
    assert d.tail.lone_outlier_ratio == pytest.approx(1_000_000 / 1058)
    assert "lone outlier" in d.verdict.summary
    (tail,) = [f for f in d.findings if f.check == "A/B"]
    assert not any("slowest" in e and "vs median" in e for e in tail.evidence)


def test_unified_memory_finding(builder, tmp_path):
    # 50 units of 4 us; 4 migrations of 1 MB, 5 us each: 20 us of 200 us = 10 % (>= uvm_pct)
    b = _steps(builder, [4_000] * 50)
    for i in range(4):
        b.memcpy(20_000 * i, 20_000 * i + 5000, 1 << 20, kind="UVM_HtoD", src="unknown",
                 dst="unknown")
    d = diagnose(b.write(tmp_path / "uvm.sqlite"), cache=False)
    (f,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert f.severity == "warning" and f.layer == "pcie"
    assert "4 unified-memory migrations moved 4.2 MB" in f.evidence[0]
    assert "10.0% of the units' time" in f.evidence[0]
    assert "cudaMemPrefetchAsync" in f.fix
    t = d.analyses["transfers"]
    assert (t.uvm_copies, t.uvm_time_ns, t.uvm_htod_bytes, t.uvm_dtoh_bytes) == (
        4, 20_000, 4 << 20, 0)


def test_unified_memory_page_faults_finding(builder, tmp_path):
    # 50 units of 4 us (200 us); no migrations; GPU fault groups of 6 us every 20 us, five
    # of them (30 us: 15 % of the units' time, >= uvm_pct) with 8 faults each, and 10 CPU
    # faults: 50 faults, 1 per unit
    b = _steps(builder, [4_000] * 50)
    for i in range(5):
        b.um_gpu_fault(20_000 * i, 20_000 * i + 6000, faults=8)
    for i in range(10):
        b.um_cpu_fault(1000 * i + 50)
    d = diagnose(b.write(tmp_path / "faults.sqlite"), cache=False)
    (f,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert f.title == "Unified memory faults on access"
    assert f.severity == "warning" and f.layer == "pcie" and f.check == "E1"
    assert f.evidence == ("50 unified-memory page faults (10 on the host, 40 raised by kernels "
                          "in 5 groups), 1 per unit (50 units); the GPU spent 30 us resolving "
                          "them, 15.0% of the units' time",)
    assert "cudaMemPrefetchAsync" in f.fix and "cudaMemAdvise" in f.fix


def test_unified_memory_faults_below_the_threshold_and_unrecorded(builder, tmp_path):
    # one fault group of 2 us (1 % of 200 us): information only. Migrations in an export
    # without fault tables say which capture options record them.
    b = _steps(builder, [4_000] * 50)
    b.um_gpu_fault(1000, 3000, faults=3)
    d = diagnose(b.write(tmp_path / "few.sqlite"), cache=False)
    (f,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert f.severity == "info" and "1.0% of the units' time" in f.evidence[0]
    b = _steps(builder, [4_000] * 50)
    b.memcpy(1000, 2000, 1 << 20, kind="UVM_HtoD", src="unknown", dst="unknown")
    d = diagnose(b.write(tmp_path / "migrations.sqlite"), cache=False)
    (f,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert "--cuda-um-gpu-page-faults=true" in f.evidence[1]


# -- the public corpus exports the issue names --------------------------------------------

def _corpus(name):
    path = PUBLIC2 / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    return path


def test_corpus_report4_unified_memory():
    d = diagnose(_corpus(
        "ayanamesu__Performance-Analysis-of-GPU-Using-CUDA-on-Perlmutter__report4.sqlite"))
    (f,) = [f for f in d.findings if f.title.startswith("Unified memory")]
    assert "14336 unified-memory migrations moved 6442.5 MB" in f.evidence[0]


def test_corpus_sgemm_missing_kernel_records():
    d = diagnose(_corpus("haroonsyed__NVIDIA_SGEMM_PRACTICE__report1.sqlite"))
    assert d.findings[0].check == "capture" and d.findings[0].severity == "critical"
    assert "192 of 192 kernel launch calls have no kernel record" in d.findings[0].evidence[0]
    assert "incomplete" in d.verdict.summary


def test_corpus_blocking_copies_give_iterations():
    # balinski-gomory polls a flag with one blocking cudaMemcpyFromSymbol per cycle of its
    # repeating GPU work: the waits mark the iterations
    with nsysdiag.open(_corpus("cestwc__balinski-and-gomory-cuda__report19.sqlite")) as rep:
        r = rep.analysis("ranges")
    assert r.unit_source == "sync_fallback" and r.n > 100
    assert "one blocking wait per cycle of the repeating GPU work" in r.unit_reason
    # cuckoo_hash makes five blocking calls per insertion round (two cudaMemset, the
    # cudaMemcpy that waits for d_insert_arr, two more copies): the intervals between them
    # are pieces of a round; the rounds are the cycles of its GPU work (61 from a
    # d_insert_arr launch), and the waits for d_insert_arr bound the iterations: 60, the
    # first from the return of the first cudaMemcpy that ends after the first kernel
    with nsysdiag.open(_corpus("Ayanokoji-li__cuckoo_hash__report1.sqlite")) as rep:
        r = rep.analysis("ranges")
        ((first_wait,),) = rep.sql(
            "SELECT min(end_ns) FROM api_calls WHERE name LIKE 'cudaMemcpy%' AND end_ns >= "
            "(SELECT min(end_ns) FROM kernels WHERE short_name = 'd_insert_arr')").fetchall()
    assert (r.unit_source, r.n + r.n_warmup) == ("launch_cycle", 60)
    assert r.table("instances").column("start_ns")[0].as_py() == first_wait
    assert ("5 blocking host waits per cycle, so the intervals between them are not "
            "iterations; 60 iterations, each from the return of the cudaMemcpy that waits "
            "for d_insert_arr") in r.unit_reason


def test_corpus_jetson_no_pcie_figures():
    d = diagnose(_corpus("SamuelAmsih__CUDA__report14.sqlite"))
    (gpu,) = d.platform.gpus
    assert gpu.link_source == "integrated" and gpu.link_gbps is None
    assert not any("of the link" in e for f in d.findings for e in f.evidence)


def test_lost_os_runtime_events_alone_leave_the_capture_whole(builder, tmp_path):
    """nsys's "Not all OS runtime libraries events might have been collected" is a note:
    OS runtime calls are auxiliary evidence, not work the figures count. A CUDA kind's
    warning, where nsys's own count differs from the rows, still makes it incomplete."""
    import nsysdiag

    b = builder("current")
    for i in range(20):
        b.launch(i * 1000_000, i * 1000_000 + 5000, i * 1000_000 + 10_000, i * 1000_000 + 30_000)
    b.diagnostic("Not all OS runtime libraries events might have been collected.")
    with nsysdiag.open(b.write(tmp_path / "osrt.sqlite"), cache=False) as rep:
        c = rep.analysis("capture")
    assert not c.incomplete and c.dropped_warnings == 1
    assert c.table("notes").column("kind").to_pylist() == ["os runtime libraries"]
    b.diagnostic("Not all CUDA events might have been collected.")
    b.diagnostic("Number of CUDA events collected: 5.")
    with nsysdiag.open(b.write(tmp_path / "cuda.sqlite"), cache=False) as rep:
        c = rep.analysis("capture")
    assert c.incomplete and c.dropped_warnings == 2
