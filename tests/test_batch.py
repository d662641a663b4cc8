"""Batch diagnosis: many reports, failures recorded, resumable, on local processes and Dask."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import standard

from nsysdiag.batch.run import expand_inputs, run_batch
from nsysdiag.cli.main import main


@pytest.fixture
def inputs(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    standard("current").write(d / "a.sqlite")
    standard("old").write(d / "b.sqlite")
    (d / "broken.sqlite").write_bytes(b"not a database at all")
    return d


def test_expand_inputs_files_dirs_globs(inputs):
    assert [p.name for p in expand_inputs([str(inputs)])] == ["a.sqlite", "b.sqlite", "broken.sqlite"]
    assert [p.name for p in expand_inputs([str(inputs / "a.*"), str(inputs / "a.sqlite")])] == ["a.sqlite"]


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
    assert main(["batch", str(inputs), "-o", str(tmp_path / "c.parquet"), "-j", "1"]) == 0
    assert "3 reports: 3 diagnosed" in capsys.readouterr().out
    assert main(["batch", str(inputs), "-o", str(tmp_path / "c.csv")]) == 2
