"""host_syncs: host synchronization waits on a hand-built trace, answers computed by hand."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import nsysdiag
from nsysdiag.analyses import host_syncs
from nsysdiag.cli.main import cli


@pytest.fixture
def waits(builder):
    """Two threads of one process.

    thread 11: cudaDeviceSynchronize [100, 600] (500); cudaStreamSynchronize [1000, 1100]
               (100) with the driver's cuStreamSynchronize [1010, 1090] inside it (the same
               wait); cudaMemcpy [2000, 2300] (300); cudaMemcpyAsync [2400, 2410] and
               cudaStreamWaitEvent [2500, 2505] (no waits); cudaEventSynchronize
               [3000, 3050] (50)
    thread 12: cudaStreamSynchronize [500, 900] (400) and [1000, 1200] (200); a
               cudaLaunchKernel [950, 960] (no wait)
    """
    b = builder("current")
    for start, end, name, tid, driver in (
        (100, 600, "cudaDeviceSynchronize_v3020", 11, False),
        (1000, 1100, "cudaStreamSynchronize_v3020", 11, False),
        (1010, 1090, "cuStreamSynchronize", 11, True),
        (2000, 2300, "cudaMemcpy_v3020", 11, False),
        (2400, 2410, "cudaMemcpyAsync_v3020", 11, False),
        (2500, 2505, "cudaStreamWaitEvent_v3020", 11, False),
        (3000, 3050, "cudaEventSynchronize_v3020", 11, False),
        (500, 900, "cudaStreamSynchronize_v3020", 12, False),
        (950, 960, "cudaLaunchKernel_v7000", 12, False),
        (1000, 1200, "cudaStreamSynchronize_v3020", 12, False),
    ):
        b.api(start, end, name, tid=tid, driver=driver)
    return b


def test_waits_per_call_thread_and_overall(waits, tmp_path):
    with nsysdiag.open(waits.write(tmp_path / "w.sqlite"), cache=False) as rep:
        res = host_syncs.run(rep)
    assert res.ok
    # six waits: 500, 100, 300, 50 (thread 11), 400, 200 (thread 12); sorted
    # [50, 100, 200, 300, 400, 500]: p50 at rank 2.5 = 250, p99 at rank 4.95 = 495
    s = res.summary
    assert (s["waits"], s["threads"], s["total_ns"], s["max_ns"]) == (6, 2, 1550, 500)
    assert s["p50_ns"] == 250 and s["p99_ns"] == pytest.approx(495)
    assert (s["sync_waits"], s["memcpy_waits"]) == (5, 1)
    per_call = {r["name"]: r for r in res.table("per_call").to_pylist()}
    assert list(per_call) == ["cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaMemcpy",
                              "cudaEventSynchronize"]  # most wait time first
    stream = per_call["cudaStreamSynchronize"]
    # 100, 400, 200: total 700, p50 200, p99 at rank 1.98 = 200 + 0.98 * 200 = 396
    assert (stream["waits"], stream["threads"], stream["total_ns"], stream["max_ns"]) == (
        3, 2, 700, 400)
    assert stream["p50_ns"] == 200 and stream["p99_ns"] == pytest.approx(396)
    assert stream["mean_ns"] == pytest.approx(700 / 3)
    assert stream["share_pct"] == pytest.approx(100 * 700 / 1550)
    assert (per_call["cudaMemcpy"]["kind"], per_call["cudaMemcpy"]["total_ns"]) == ("memcpy", 300)
    per_thread = [(r["tid"], r["name"], r["waits"], r["total_ns"])
                  for r in res.table("per_thread").to_pylist()]
    assert per_thread == [
        (11, "cudaDeviceSynchronize", 1, 500), (11, "cudaMemcpy", 1, 300),
        (11, "cudaStreamSynchronize", 1, 100), (11, "cudaEventSynchronize", 1, 50),
        (12, "cudaStreamSynchronize", 2, 600)]
    assert res.findings == ("cudaStreamSynchronize: 0.001 ms of host waits in 3 calls "
                            "(45.2% of all waits)",)


def test_no_waits(builder, tmp_path):
    b = builder("current")
    b.launch(0, 10, 20, 30)
    with nsysdiag.open(b.write(tmp_path / "n.sqlite"), cache=False) as rep:
        res = host_syncs.run(rep)
    assert res.ok and res.summary["waits"] == 0 and res.summary["total_ns"] == 0
    assert res.summary["p50_ns"] is None and res.table("per_call").num_rows == 0
    assert res.message == "no host synchronization wait"


def test_without_an_api_trace(builder, tmp_path):
    b = builder("current")
    b.kernel(0, 10)
    with nsysdiag.open(b.write(tmp_path / "k.sqlite"), cache=False) as rep:
        res = host_syncs.run(rep)
    assert res.status in ("not_captured", "empty") and "api_calls" in res.message


def test_cli(waits, tmp_path):
    path = str(waits.write(tmp_path / "c.sqlite"))
    out = CliRunner().invoke(cli, ["--no-cache", "host-syncs", path, "--format", "csv"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].startswith("name,kind,waits,threads,total_ns")
    assert "cudaStreamSynchronize,sync,3,2,700" in out.output
