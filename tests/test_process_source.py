"""One process of a multi-process export (adapters/process.py, ``Report(pid=...)``,
``--pid``) on a hand-built export of two processes whose rows are counted by hand."""

from __future__ import annotations

import pytest

from fixtures.nsysbuild import TraceBuilder
from fixtures.parquetdir import sqlite_to_parquet_dir
from nsysdiag.errors import UsageError
from nsysdiag.report import Report

US = 1_000


@pytest.fixture
def two_processes(tmp_path):
    """Process 10: 5 launches on GPU 0, a range, an OS call; process 11: 3 launches on
    GPU 1, 2 copies, 2 ranges; both GPUs listed once."""
    b = TraceBuilder(pid=10)
    for i in range(5):
        t = i * 100 * US
        b.launch(t, t + 5 * US, t + 10 * US, t + 30 * US, name="a", pid=10)
    b.nvtx(0, 500 * US, "serve", pid=10)
    b.osrt(0, 20 * US, "pthread_mutex_lock", pid=10)
    for i in range(3):
        t = i * 100 * US
        b.launch(t, t + 5 * US, t + 10 * US, t + 30 * US, name="b", pid=11, device=1)
        b.nvtx(t, t + 50 * US, "step", pid=11)
    b.memcpy(0, 10 * US, 1 << 20, pid=11, device=1)
    b.memcpy(50 * US, 60 * US, 1 << 20, pid=11, device=1)
    sqlite = b.write(tmp_path / "two.sqlite")
    return {"sqlite": sqlite, "parquet": sqlite_to_parquet_dir(sqlite, tmp_path / "two_pq")}



def _counts(rep: Report) -> dict[str, int]:
    views = ("kernels", "api_calls", "memcpys", "nvtx_ranges", "os_runtime", "processes",
             "devices")
    return {v: rep.execute(f"SELECT count(*) FROM {v}")[0][0] for v in views}


@pytest.mark.parametrize("fmt", ["sqlite", "parquet"])
def test_each_process_reads_its_own_rows(two_processes, fmt):
    path = two_processes[fmt]
    with Report(path, cache=False) as rep:
        whole = _counts(rep)
    with Report(path, cache=False, pid=10) as rep:
        ten = _counts(rep)
        assert rep.probe.views["memcpys"].status != "present"  # none of its own
        assert {r[0] for r in rep.execute("SELECT DISTINCT pid FROM api_calls")} == {10}
    with Report(path, cache=False, pid=11) as rep:
        eleven = _counts(rep)
        assert rep.probe.views["kernels"].source_rows == 3
        names = rep.execute("SELECT DISTINCT name FROM nvtx_ranges")
        assert names == [("step",)]
    assert ten == {"kernels": 5, "api_calls": 5, "memcpys": 0, "nvtx_ranges": 1,
                   "os_runtime": 1, "processes": 1, "devices": whole["devices"]}
    assert eleven == {"kernels": 3, "api_calls": 3, "memcpys": 2, "nvtx_ranges": 3,
                      "os_runtime": 0, "processes": 1, "devices": whole["devices"]}
    # every row of a table that names a process is in exactly one process' reading
    for view in ("kernels", "api_calls", "memcpys", "nvtx_ranges", "os_runtime", "processes"):
        assert ten[view] + eleven[view] == whole[view], view


def test_a_process_is_cached_apart_from_the_whole_export(two_processes, tmp_path):
    path = two_processes["sqlite"]
    cache = tmp_path / "cache"
    with Report(path, cache_dir=cache, pid=11) as rep:
        assert rep.execute("SELECT count(*) FROM kernels")[0][0] == 3
        alone = rep.cache_path
    with Report(path, cache_dir=cache) as rep:
        assert rep.execute("SELECT count(*) FROM kernels")[0][0] == 8
        assert rep.cache_path != alone
    with Report(path, cache_dir=cache, pid=11) as rep:  # from its cache: still its own
        assert rep.execute("SELECT count(*) FROM kernels")[0][0] == 3


def test_a_process_the_export_lacks_names_those_it_has(two_processes):
    with pytest.raises(UsageError, match=r"no process 12 in .*two.sqlite; its processes: "
                                         r"10 \(proc10\), 11 \(proc11\)$"):
        Report(two_processes["sqlite"], cache=False, pid=12)


def test_a_process_sharing_a_gpu_is_told_what_is_left_out(tmp_path, capfd):
    """Processes 10 and 11 both run kernels on GPU 0, 12 on GPU 1: reading 10 alone notes
    that 11's work on GPU 0 is left out; reading 12 alone notes nothing."""
    b = TraceBuilder(pid=10)
    for pid, device in ((10, 0), (11, 0), (12, 1)):
        b.launch(0, 5 * US, 10 * US, 30 * US, name="k", pid=pid, device=device)
    path = b.write(tmp_path / "three.sqlite")
    with Report(path, cache=False, pid=10) as rep:
        assert rep.source.sharing() == {0: [11]}
    assert capfd.readouterr().err.splitlines() == [
        "nsysdiag: note: process 10 shares GPU 0 with process 11: their work there is left "
        "out with --pid (diagnose the whole export to see it as other GPU work)"]
    with Report(path, cache=False, pid=12) as rep:
        assert rep.source.sharing() == {}
    assert capfd.readouterr().err == ""
