"""Batch diagnosis: many reports, failures recorded, resumable, on local processes and Dask."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from conftest import ROOT, standard

from nsysdiag.batch.run import (
    FINDINGS_SCHEMA,
    KERNELS_SCHEMA,
    REPORTS_SCHEMA,
    diagnose_one,
    expand_inputs,
    run_batch,
)
from nsysdiag.cli.main import main


@pytest.fixture(autouse=True)
def _bounded():
    """Every test here ends within 300 s, whatever goes wrong."""
    def stop(*_):
        raise TimeoutError("test ran past 300 s")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(300)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    standard("current").write(d / "a.sqlite")
    standard("old").write(d / "b.sqlite")
    (d / "broken.sqlite").write_bytes(b"not a database at all")
    return d


def test_expand_inputs_files_dirs_globs(inputs):
    assert [p.name for p in expand_inputs([str(inputs)])] == [
        "a.sqlite", "b.sqlite", "broken.sqlite"]
    globbed = expand_inputs([str(inputs / "a.*"), str(inputs / "a.sqlite")])
    assert [p.name for p in globbed] == ["a.sqlite"]


def test_batch_records_failures_and_resumes(inputs, tmp_path):
    out = tmp_path / "res.parquet"
    s = run_batch([str(inputs)], out, workers=1)
    assert (s.total, s.done, s.skipped, s.failed) == (3, 3, 0, 1)
    rows = {r["report"].rsplit("/", 1)[-1]: r for r in pq.read_table(out).to_pylist()}
    assert rows["a.sqlite"]["status"] == "ok" and rows["a.sqlite"]["verdict"]
    assert rows["broken.sqlite"]["status"] == "error"
    assert "not an SQLite file" in rows["broken.sqlite"]["error"]
    kernels = pq.read_table(tmp_path / "res.kernels.parquet").to_pylist()
    assert {(k["report"].rsplit("/", 1)[-1], k["name"], k["instances"]) for k in kernels} >= {
        ("a.sqlite", "gemm", 2), ("a.sqlite", "relu", 1)}
    # a rerun skips what is finished; --force redoes it
    again = run_batch([str(inputs)], out, workers=1)
    assert (again.done, again.skipped) == (0, 3)
    assert run_batch([str(inputs)], out, workers=1, force=True).done == 3


def test_batch_killed_midway_keeps_finished_parts(inputs, tmp_path):
    out = tmp_path / "res.parquet"
    run_batch([str(inputs / "a.sqlite")], out, workers=1)
    # simulate a kill: the combined output is lost, the finished part survives
    out.unlink()
    s = run_batch([str(inputs)], out, workers=1)
    assert (s.skipped, s.done) == (1, 2)
    assert len(pq.read_table(out)) == 3


def test_batch_on_dask_local_cluster(inputs, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        s = run_batch([str(inputs)], tmp_path / "d.parquet", dask=cluster.scheduler_address)
    assert (s.done, s.failed) == (3, 1)


def test_batch_cli(inputs, tmp_path, capsys):
    # broken.sqlite failed: the results are written, the exit status says so
    assert main(["batch", str(inputs), "-o", str(tmp_path / "c.parquet"), "-j", "1"]) == 5
    assert "3 reports: 3 diagnosed" in capsys.readouterr().out
    assert main(["batch", str(inputs), "-o", str(tmp_path / "c.csv")]) == 2


@pytest.mark.parametrize("broken_name", ["0broken.sqlite", "zbroken.sqlite"])
def test_batch_columns_do_not_depend_on_the_first_report(inputs, tmp_path, broken_name):
    """Whichever report comes first (a failed one: no figures; a diagnosed one: no exit
    code), every table has its full schema and each row its own values."""
    (inputs / "broken.sqlite").rename(inputs / broken_name)
    out = tmp_path / "res.parquet"
    run_batch([str(inputs)], out, workers=1)
    table = pq.read_table(out)
    assert table.schema == REPORTS_SCHEMA
    rows = {r["report"].rsplit("/", 1)[-1]: r for r in table.to_pylist()}
    first = table.column("report")[0].as_py().rsplit("/", 1)[-1]
    assert first == ("0broken.sqlite" if broken_name.startswith("0") else "a.sqlite")
    broken, ok = rows[broken_name], rows["a.sqlite"]
    assert broken["exit_code"] == 3 and broken["status"] == "error" and broken["verdict"] is None
    assert ok["exit_code"] is None and ok["error"] is None
    assert ok["verdict"] and ok["n"] is not None and ok["launch_gap_count"] > 0
    assert pq.read_table(tmp_path / "res.findings.parquet").schema == FINDINGS_SCHEMA
    kernels = pq.read_table(tmp_path / "res.kernels.parquet")
    assert kernels.schema == KERNELS_SCHEMA
    assert ("a.sqlite", "gemm", 2) in {
        (k["report"].rsplit("/", 1)[-1], k["name"], k["instances"]) for k in kernels.to_pylist()}


def test_batch_schemas_name_every_record_field(inputs):
    """A field added to the records needs its column: the schemas list exactly the keys
    ``diagnose_one`` writes (an ok record's and an error record's together)."""
    ok = diagnose_one(str(inputs / "a.sqlite"), {"cache": False})
    bad = diagnose_one(str(inputs / "broken.sqlite"), {"cache": False})
    assert ok["status"] == "ok" and bad["status"] == "error" and ok["findings"] and ok["kernels"]
    assert set(REPORTS_SCHEMA.names) == (set(ok) | set(bad)) - {"findings", "kernels"}
    assert set(FINDINGS_SCHEMA.names) == {"report", *ok["findings"][0]}
    assert set(KERNELS_SCHEMA.names) == {"report", *ok["kernels"][0]}


def test_batch_with_no_finished_report_writes_empty_tables(tmp_path):
    from nsysdiag.batch.run import _combine

    out = tmp_path / "none.parquet"
    _combine([], out)
    assert pq.read_table(out).schema == REPORTS_SCHEMA and pq.read_table(out).num_rows == 0
    assert pq.read_table(tmp_path / "none.kernels.parquet").schema == KERNELS_SCHEMA


# ------------------------------------------------------------ hostile batches (issue 39)

KILLER = """
import os, signal, sys
sys.path.insert(0, {root!r})
import nsysdiag.batch.run as r
real = r.diagnose_one
def bomb(path, options):  # a report that takes its whole process down (out of memory)
    if "bomb" in path:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(path, options)
r.diagnose_one = bomb
print(r.run_batch([{inputs!r}], {out!r}, workers={workers}))
"""


def _rows(out):
    return {r["report"].rsplit("/", 1)[-1]: r for r in pq.read_table(out).to_pylist()}


def _run_killer(tmp_path, inputs, out, workers):
    code = KILLER.format(root=str(ROOT), inputs=str(inputs), out=str(out), workers=workers)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_a_worker_that_dies_costs_its_report_only(inputs, tmp_path):
    """Local workers: the bomb kills its worker (twice: retried once), the batch finishes
    every other report and records the bomb as crashing, with the signal."""
    standard("current").write(inputs / "bomb.sqlite")
    out = tmp_path / "res.parquet"
    proc = _run_killer(tmp_path, inputs, out, workers=2)
    assert proc.returncode == 0, proc.stderr
    assert "4 reports: 4 diagnosed, 0 already done, 2 failed" in proc.stdout
    rows = _rows(out)
    assert rows["a.sqlite"]["status"] == rows["b.sqlite"]["status"] == "ok"
    bomb = rows["bomb.sqlite"]
    assert bomb["status"] == "error" and "SIGKILL" in bomb["error"]
    assert "crashed 2 times: recorded as crashing" in bomb["error"]
    # recorded for good: a rerun does not run it again
    again = _run_killer(tmp_path, inputs, out, workers=2)
    assert "0 diagnosed, 4 already done" in again.stdout, again.stdout


def test_a_report_that_kills_the_whole_batch_is_retried_once(inputs, tmp_path):
    """In-process (-j 1) the bomb kills the batch itself; each rerun counts it, the second
    lost run records it as crashing, and the third run finishes."""
    (inputs / "broken.sqlite").unlink()
    standard("current").write(inputs / "bomb.sqlite")
    out = tmp_path / "res.parquet"
    for _ in range(2):
        proc = _run_killer(tmp_path, inputs, out, workers=1)
        assert proc.returncode == -signal.SIGKILL
    proc = _run_killer(tmp_path, inputs, out, workers=1)
    assert proc.returncode == 0, proc.stderr
    rows = _rows(out)
    assert rows["a.sqlite"]["status"] == "ok"
    assert "crashed 2 times" in rows["bomb.sqlite"]["error"]


def test_worker_killed_from_outside_is_retried(inputs, tmp_path, monkeypatch):
    """kill -9 of one local worker: its report is tried again, the others go on."""
    import nsysdiag.batch.run as r

    marker = tmp_path / "killed-once"
    real = r.diagnose_one

    def once(path, options):
        if "a.sqlite" in path and not marker.exists():
            marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, options)

    monkeypatch.setattr(r, "diagnose_one", once)  # forked workers inherit it
    out = tmp_path / "res.parquet"
    s = r.run_batch([str(inputs)], out, workers=2)
    assert (s.done, s.failed) == (3, 1)
    assert marker.exists() and _rows(out)["a.sqlite"]["status"] == "ok"


def test_transient_failure_is_not_final(inputs, tmp_path):
    """An unwritable cache (the environment's fault, exit 75) is recorded, and a rerun
    with a usable cache diagnoses the report instead of calling it done."""
    blocker = tmp_path / "not_a_dir"
    blocker.write_bytes(b"")
    out = tmp_path / "res.parquet"
    s = run_batch([str(inputs / "a.sqlite")], out, workers=1, cache_dir=str(blocker / "c"))
    assert s.failed == 1 and _rows(out)["a.sqlite"]["exit_code"] == 75
    s = run_batch([str(inputs / "a.sqlite")], out, workers=1, cache_dir=str(tmp_path / "c"))
    assert (s.done, s.skipped, s.failed) == (1, 0, 0)
    assert _rows(out)["a.sqlite"]["status"] == "ok"


def test_batch_where_every_report_fails_exits_non_zero(tmp_path, capsys):
    d = tmp_path / "bad"
    d.mkdir()
    for name in ("x.sqlite", "y.sqlite"):
        (d / name).write_bytes(b"not a database")
    assert main(["batch", str(d), "-o", str(tmp_path / "r.parquet"), "-j", "2"]) == 5
    assert "2 failed" in capsys.readouterr().out


def test_dask_worker_lost_is_retried_then_recorded(inputs, tmp_path, monkeypatch):
    """A report whose Dask task fails without a record (a worker lost) is tried once more,
    then recorded as crashing, and the batch ends."""
    import nsysdiag.batch.run as r

    calls = []

    def lost(todo, options, workers, dask):
        for key, _ in todo:
            calls.append(key)
            yield key, "its worker died (KilledWorker: lost)"

    monkeypatch.setattr(r, "_results", lost)
    out = tmp_path / "res.parquet"
    s = r.run_batch([str(inputs / "a.sqlite")], out, dask="tcp://nowhere:1")
    assert len(calls) == 2 and (s.done, s.failed) == (1, 1)
    assert "crashed 2 times" in _rows(out)["a.sqlite"]["error"]
