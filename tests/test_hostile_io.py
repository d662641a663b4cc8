"""Inputs made to hang a reader, paths made to be globbed, and SQL made to escape (issue 39),
each run as a separate ``nsysdiag`` process under a time limit.

* hangs: a FIFO, b-tree bombs (a few pages claiming billions of rows), a view over an
  endless recursive CTE, a view that burns CPU, a virtual table, each in place of the
  kernel table: one line, exit 3, within seconds; a statement stuck on the export ends
  when the bound passes or the source is closed;
* globs: Parquet exports and cache directories named ``pq[1]``, ``pq*``, ``pq?`` read as
  named, never their siblings;
* WAL: an export whose rows lie in its ``-wal`` file (or a hot journal) is refused, not
  read without them;
* ``nsysdiag sql``: no statement but queries, no file but the views (unless
  ``--allow-files``), nothing written, the input and the cache least of all.

The inputs are made here (``fixtures/hostile_inputs.py``) and checked unchanged after.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
from conftest import ROOT
from test_bad_inputs import fingerprint

from fixtures import hostile_inputs as hostile
from nsysdiag.adapters import sqlite as sqlite_adapter
from nsysdiag.adapters.sqlite import SqliteSource
from nsysdiag.engine.database import sql_path, sql_string
from nsysdiag.errors import EXIT_INPUT, EXIT_USAGE, InputError

#: seconds a run may take; every refusal here comes far sooner
LIMIT_S = 60


def nsysdiag(*args: str, cache: Path | None = None, **env: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of one ``python -m nsysdiag`` process."""
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    cache_args = ["--cache-dir", str(cache)] if cache else ["--no-cache"]
    proc = subprocess.run([sys.executable, "-m", "nsysdiag", *cache_args, *args],
                          capture_output=True, text=True, timeout=LIMIT_S, env=environ,
                          cwd=ROOT)
    return proc.returncode, proc.stdout, proc.stderr


def assert_refused(rc: int, err: str, code: int, *words: str) -> None:
    lines = err.strip().splitlines()
    assert rc == code, err
    assert len(lines) == 1 and lines[0].startswith("nsysdiag: error:"), err
    for word in words:
        assert word in lines[0], err


# ---------------------------------------------------------------------------- hangs

HANGS = {
    "fifo": (hostile.fifo, "not a regular file or directory (a FIFO)"),
    "btree_bomb_2_levels": (lambda p: hostile.btree_bomb(p, 2), "more than a file of"),
    "btree_bomb_3_levels": (lambda p: hostile.btree_bomb(p, 3), "more than a file of"),
    "recursive_view": (hostile.recursive_view, "is a view, not a plain table"),
    "cpu_view": (hostile.cpu_view, "is a view, not a plain table"),
    "disguised_view": (hostile.disguised_view, "malformed database schema"),
    "virtual_table": (hostile.virtual_table, "is a virtual table"),
}


@pytest.mark.parametrize("command", ["info", "diagnose"])
@pytest.mark.parametrize("case", sorted(HANGS))
def test_inputs_that_would_hang_are_refused_at_once(case, command, tmp_path):
    make, words = HANGS[case]
    path = make(tmp_path / "trace.sqlite")
    before = fingerprint(path) if path.is_file() else None
    t = time.monotonic()
    rc, _, err = nsysdiag(command, str(path))
    assert_refused(rc, err, EXIT_INPUT, words)
    assert time.monotonic() - t < 20
    if before is None:
        assert stat.S_ISFIFO(os.stat(path).st_mode)
    else:
        assert fingerprint(path) == before


def test_a_fifo_among_the_files_of_a_parquet_export_is_refused(tmp_path):
    export = hostile.glob_named_parquet(tmp_path)["pq1"]
    table = export / f"{hostile.KERNEL}.parquet"
    table.unlink()
    os.mkfifo(table)
    rc, _, err = nsysdiag("info", str(export))
    assert_refused(rc, err, EXIT_INPUT, f"{table.name}: not a regular file", "FIFO")


@pytest.mark.parametrize("log", ["-journal", "-wal"])
def test_a_fifo_beside_the_export_in_place_of_its_log_is_not_opened(log, tmp_path):
    path = hostile.small_export(tmp_path / "trace.sqlite")
    os.mkfifo(f"{path}{log}")
    rc, out, err = nsysdiag("sql", str(path), "SELECT count(*) AS n FROM kernels",
                            "--format", "csv")
    assert (rc, out.split()) == (0, ["n", "20"]), err


def test_a_bomb_too_slow_to_count_is_counted_row_by_row_and_refused(tmp_path):
    # 4 levels: SQLite's count(*) alone walks ~1.5e12 rows' pages (over two minutes here);
    # past COUNT_QUICK_S the rows are counted one by one, up to the most the file can hold
    path = hostile.btree_bomb(tmp_path / "trace.sqlite", 4)
    before = fingerprint(path)
    t = time.monotonic()
    rc, _, err = nsysdiag("info", str(path))
    size = path.stat().st_size
    assert_refused(rc, err, EXIT_INPUT, f"claims {size // 2 + 1:,} rows",
                   f"more than a file of {size:,} bytes")
    assert time.monotonic() - t < 30
    assert fingerprint(path) == before


def test_a_statement_on_the_export_stops_at_the_stage_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_adapter, "COUNT_QUICK_S", 1000.0)
    monkeypatch.setenv("NSYSDIAG_STAGE_TIMEOUT", "1")
    source = SqliteSource(hostile.btree_bomb(tmp_path / "trace.sqlite", 4))
    t = time.monotonic()
    with pytest.raises(InputError, match="took longer than 1 s") as caught:
        source.row_count(hostile.KERNEL)
    assert time.monotonic() - t < 10
    assert "NSYSDIAG_STAGE_TIMEOUT" in caught.value.one_line()
    source.close()


def test_closing_the_source_ends_a_statement_running_on_another_thread(tmp_path):
    """What ``Report.close()`` relies on when a worker thread is stuck in SQLite: the
    connection is interrupted, the worker's statement ends with one error, close returns."""
    source = SqliteSource(hostile.btree_bomb(tmp_path / "trace.sqlite", 4))
    errors: list[BaseException] = []

    def count() -> None:
        try:
            source.row_count(hostile.KERNEL)
        except BaseException as exc:
            errors.append(exc)

    worker = threading.Thread(target=count, daemon=True)
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive()
    t = time.monotonic()
    source.close()
    worker.join(10)
    assert not worker.is_alive()
    assert time.monotonic() - t < 10
    assert len(errors) == 1 and isinstance(errors[0], InputError), errors
    assert "closed" in errors[0].message


def test_a_view_not_named_like_a_read_table_is_left_alone(tmp_path):
    path = hostile.small_export(tmp_path / "trace.sqlite")
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("CREATE VIEW my_notes AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL "
               "SELECT n + 1 FROM r) SELECT n FROM r")
    db.commit()
    db.close()
    rc, out, err = nsysdiag("sql", str(path), "SELECT count(*) AS n FROM kernels")
    assert rc == 0, err
    assert out.split()[-1] == "20"


# ---------------------------------------------------------------------------- globs

def test_sql_path_names_exactly_one_file(tmp_path):
    con = duckdb.connect()
    names = ["a*", "a?", "a[1]", "a[!b]", "x**y", "[", "a]b", "a{1,2}", "it's"]
    decoys = ["ab", "a1", "aX", "xy", "a", "x", "a1,2"]
    for i, name in enumerate(names + decoys):
        (tmp_path / name).mkdir()
        # COPY ... TO takes its path as written (no glob)
        con.execute(f"COPY (SELECT {i} AS i) TO {sql_string(str(tmp_path / name / 't.parquet'))}")
    for i, name in enumerate(names):
        target = tmp_path / name / "t.parquet"
        assert con.execute(f"SELECT file FROM glob({sql_path(target)})").fetchall() == [
            (str(target),)]
        assert con.execute(f"SELECT i FROM read_parquet({sql_path(target)})").fetchall() == [
            (i,)]


def test_parquet_exports_in_glob_named_directories_read_as_named(tmp_path):
    dirs = hostile.glob_named_parquet(tmp_path)
    for name, kernels in (("pq[1]", 5), ("pq*", 7), ("pq?", 7), ("pq1", 10)):
        before = fingerprint(dirs[name])
        rc, out, err = nsysdiag("sql", str(dirs[name]), "SELECT count(*) AS n FROM kernels",
                                "--format", "csv")
        assert rc == 0, err
        assert out.split() == ["n", str(kernels)], name
        assert fingerprint(dirs[name]) == before


def test_a_cache_directory_named_like_a_glob_holds_one_copy(tmp_path):
    path = hostile.small_export(tmp_path / "trace.sqlite")
    query = ("sql", str(path), "SELECT count(*) AS n FROM kernels", "--format", "csv")
    # "c*" matches "c" too: the views of both cache directories would be read as one
    for cache in ("c", "c*", "c*", "c[c]", "c?"):
        rc, out, err = nsysdiag(*query, cache=tmp_path / cache)
        assert rc == 0, err
        assert out.split() == ["n", "20"], cache


# ------------------------------------------------------------------------------- WAL

def test_a_wal_export_with_changes_in_its_log_is_refused(tmp_path):
    path = hostile.wal_export(tmp_path / "trace.sqlite")
    wal = Path(f"{path}-wal")
    before = (fingerprint(path), fingerprint(wal))
    rc, _, err = nsysdiag("info", str(path))
    assert_refused(rc, err, EXIT_INPUT, "WAL mode", "trace.sqlite-wal", "checkpoint")
    assert (fingerprint(path), fingerprint(wal)) == before
    assert sorted(os.listdir(tmp_path)) == ["trace.sqlite", "trace.sqlite-wal"]
    # what the refusal's advice gives: the copy, checkpointed, holds both halves
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in (path, wal):
        (copy / f.name).write_bytes(f.read_bytes())
    import sqlite3

    db = sqlite3.connect(copy / path.name)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    rc, out, err = nsysdiag("sql", str(copy / path.name), "SELECT count(*) AS n FROM kernels",
                            "--format", "csv")
    assert rc == 0, err
    assert out.split() == ["n", "40"]


def test_a_wal_mode_export_without_pending_changes_is_read(tmp_path):
    path = hostile.wal_export(tmp_path / "trace.sqlite")
    Path(f"{path}-wal").unlink()  # what the file holds is complete without it
    rc, out, err = nsysdiag("sql", str(path), "SELECT count(*) AS n FROM kernels",
                            "--format", "csv")
    assert rc == 0, err
    assert out.split() == ["n", "20"]


def test_an_export_with_a_hot_journal_is_refused(tmp_path):
    path = hostile.small_export(tmp_path / "trace.sqlite")
    Path(f"{path}-journal").write_bytes(bytes.fromhex("d9d505f920a163d7") + bytes(504))
    rc, _, err = nsysdiag("info", str(path))
    assert_refused(rc, err, EXIT_INPUT, "trace.sqlite-journal", "unfinished transaction")


# ----------------------------------------------------------------------- nsysdiag sql

ESCAPES = {
    "read a file": ("SELECT * FROM read_csv({secret})", "file system operations are disabled"),
    "list files": ("SELECT * FROM glob({tmp})", "file system operations are disabled"),
    "copy out": ("COPY kernels TO {out}", "not COPY"),
    "copy over the input": ("COPY (SELECT 1 AS x) TO {input} (FORMAT csv)", "not COPY"),
    "copy over a cached view": ("COPY (SELECT * FROM kernels LIMIT 1) TO {view}", "not COPY"),
    "query then copy": ("SELECT 1; COPY (SELECT 1) TO {out}", "not COPY"),
    "export": ("EXPORT DATABASE {tmp}", "not EXPORT"),
    "attach": ("ATTACH {input} AS x", "not ATTACH"),
    "install": ("INSTALL sqlite", "not LOAD"),
    "load": ("LOAD sqlite", "not LOAD"),
    "set": ("SET enable_external_access = true", "not SET"),
    "pragma": ("PRAGMA enable_profiling", "not PRAGMA"),
    "call": ("CALL pragma_version()", "not CALL"),
    "create": ("CREATE OR REPLACE VIEW kernels AS SELECT 1", "not CREATE"),
}


def _quoted(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


@pytest.mark.parametrize("case", sorted(ESCAPES))
def test_sql_cannot_escape(case, tmp_path):
    (tmp_path / "in").mkdir()
    path = hostile.small_export(tmp_path / "in" / "trace.sqlite")
    cache = tmp_path / "cache"
    rc, out, err = nsysdiag("sql", str(path), "SELECT count(*) AS n FROM kernels", cache=cache)
    assert rc == 0, err
    (view,) = cache.glob("views/*/kernels-*.parquet")
    secret = tmp_path / "secret.csv"
    secret.write_text("password\nhunter2\n")
    out_file = tmp_path / "out.csv"
    before = fingerprint(tmp_path)
    template, words = ESCAPES[case]
    query = template.format(secret=_quoted(secret), tmp=_quoted(tmp_path), out=_quoted(out_file),
                            input=_quoted(path), view=_quoted(view))
    rc, out, err = nsysdiag("sql", str(path), query, cache=cache)
    assert_refused(rc, err, EXIT_USAGE, words)
    assert "hunter2" not in out + err
    assert fingerprint(tmp_path) == before
    assert not out_file.exists()
    # later runs see the views as they were
    rc, out, err = nsysdiag("sql", str(path), "SELECT count(*) AS n FROM kernels",
                            "--format", "csv", cache=cache)
    assert (rc, out.split()) == (0, ["n", "20"]), err


def test_sql_reads_files_only_when_allowed_and_writes_none_even_then(tmp_path):
    path = hostile.small_export(tmp_path / "trace.sqlite")
    table = tmp_path / "extra.csv"
    table.write_text("x\n1\n2\n3\n")
    query = f"SELECT count(*) AS n FROM read_csv({_quoted(table)})"
    rc, _, err = nsysdiag("sql", str(path), query)
    assert_refused(rc, err, EXIT_USAGE, "file system operations are disabled")
    rc, out, err = nsysdiag("sql", str(path), query, "--allow-files", "--format", "csv")
    assert (rc, out.split()) == (0, ["n", "3"]), err
    before = fingerprint(tmp_path)
    rc, _, err = nsysdiag("sql", str(path), f"COPY kernels TO {_quoted(tmp_path / 'o.csv')}",
                          "--allow-files")
    assert_refused(rc, err, EXIT_USAGE, "not COPY")
    assert fingerprint(tmp_path) == before
