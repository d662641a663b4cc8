"""Bad inputs at scale: every parallel reader and the page decoder meet each kind of damage.

The bad-input suite (``test_bad_inputs.py``) uses small exports, which never reach the
SQLite adapter's parallel readers (``PARALLEL_MIN_ROWS``) or its page decoder
(``FAST_MIN_ROWS``); a reader error there once left ``diagnose`` waiting forever (issue 24).
Here one big export is made per session from the shared H200 baseline with
``bench/make_large.py`` (nine copies back to back: over a million kernels and two million
runtime calls, read by the page decoder; never committed, skipped without the corpus), and
each case damages a copy of it cheaply (an UPDATE or a RENAME on the copy, or a byte
truncation); each case is also made from the baseline itself, whose runtime table the
parallel readers read. Each ``diagnose``
runs in a subprocess under a hard timeout, so a hang fails its test instead of stalling
the suite; the checks are those of the small suite (exit 0, 3 or 4, no traceback, at most
three lines on stderr, the input unchanged). The same for ``batch``, with a bad file among
good ones, on local processes and on a Dask local cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import H200, ROOT, need, standard
from test_bad_inputs import ANY, USABLE, assert_clean_exit, fingerprint
from test_bad_inputs import _edit as edit_db

from fixtures.fuzz import BAD_UTF8
from nsysdiag.adapters import sqlite as sqlite_adapter

KERNEL, RUNTIME = "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"
#: copies of the baseline (112,489 kernels and 251,825 runtime calls each)
COPIES = 9
#: seconds after which a run counts as hung (a healthy one takes a small fraction)
HARD_TIMEOUT_S = 300


@pytest.fixture(scope="session")
def large_export(tmp_path_factory) -> Path:
    """The big export, made once per session; its sizes checked against the thresholds of
    the parallel readers and the page decoder."""
    src = need(H200 / "baseline.sqlite")
    out = tmp_path_factory.mktemp("large") / "large.sqlite"
    subprocess.run([sys.executable, str(ROOT / "bench" / "make_large.py"), "--src", str(src),
                    "--copies", str(COPIES), "--out", str(out)],
                   check=True, capture_output=True, timeout=600)
    db = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        kernels, runtime = (db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                            for t in (KERNEL, RUNTIME))
    finally:
        db.close()
    assert kernels >= 1_000_000 and runtime >= 2_000_000, (kernels, runtime)
    assert min(kernels, runtime) >= max(sqlite_adapter.PARALLEL_MIN_ROWS,
                                        sqlite_adapter.FAST_MIN_ROWS)
    return out


def _edit(*statements: str | tuple) -> Callable[[Path, Path], Path]:
    def build(src: Path, dst: Path) -> Path:
        shutil.copyfile(src, dst)
        return edit_db(dst, *statements)
    return build


def _truncate(pct: int) -> Callable[[Path, Path], Path]:
    def build(src: Path, dst: Path) -> Path:
        with open(src, "rb") as f, open(dst, "wb") as out:
            out.write(f.read(src.stat().st_size * pct // 100))
        return dst
    return build


_NOT_UTF8 = "CAST(? || CAST({c} AS BLOB) AS TEXT)"

#: name -> (damage(src, dst) -> dst, exit codes allowed)
CASES: dict[str, tuple[Callable[[Path, Path], Path], frozenset[int]]] = {
    "invalid_utf8_names": (_edit(
        (f"UPDATE StringIds SET value = {_NOT_UTF8.format(c='value')}", (BAD_UTF8,)),
        (f"UPDATE NVTX_EVENTS SET text = {_NOT_UTF8.format(c='text')} WHERE text IS NOT NULL",
         (BAD_UTF8,))), USABLE),
    "missing_stringids": (_edit("DROP TABLE StringIds"), USABLE),
    "renamed_columns": (_edit(f"ALTER TABLE {KERNEL} RENAME COLUMN start TO begin_ns",
                              f"ALTER TABLE {RUNTIME} RENAME COLUMN correlationId TO corr"),
                        USABLE),
    # a few rows deep in each table: the page decoder stops there and SQLite reads the rest
    "text_in_integer_columns": (_edit(
        f"UPDATE {KERNEL} SET start = 'abc', globalPid = 'pid' WHERE rowid % 100003 = 7",
        f"UPDATE {RUNTIME} SET correlationId = 'x', globalTid = x'00ff' "
        "WHERE rowid % 400009 = 11"), USABLE),
    "null_keys": (_edit(f"UPDATE {KERNEL} SET correlationId = NULL, globalPid = NULL "
                        "WHERE rowid % 3 = 0",
                        f"UPDATE {RUNTIME} SET globalTid = NULL, correlationId = NULL "
                        "WHERE rowid % 5 = 0"), USABLE),
    **{f"truncated_{pct}pct": (_truncate(pct), ANY) for pct in (30, 60, 95)},
}


def _diagnose(path: Path, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(cache)}
    try:
        return subprocess.run([sys.executable, "-m", "nsysdiag", "--no-cache", "diagnose",
                               str(path), "--json"], capture_output=True, text=True,
                              timeout=HARD_TIMEOUT_S, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"diagnose {path.name} still running after {HARD_TIMEOUT_S} s (a hang)")


@pytest.mark.parametrize("scale", ["large", "baseline"])
@pytest.mark.parametrize("case", list(CASES))
def test_large_bad_input_gives_clean_exit(case, scale, request, tmp_path):
    """``large``: the kernel and runtime tables go through the page decoder, and through
    the parallel readers from where it stops (text in integer columns); ``baseline``: the
    baseline itself (252k runtime calls), whose runtime table the parallel readers read
    (the size at which issue 24's hang was found)."""
    src = (request.getfixturevalue("large_export") if scale == "large"
           else need(H200 / "baseline.sqlite"))
    damage, allowed = CASES[case]
    (tmp_path / "in").mkdir()
    path = damage(src, tmp_path / "in" / f"{case}.sqlite")
    before = fingerprint(path)
    proc = _diagnose(path, tmp_path / "cache")
    assert_clean_exit(proc.returncode, proc.stderr, allowed, f"diagnose {scale} {case}")
    if proc.returncode == 0:
        assert json.loads(proc.stdout)["verdict"]
    assert fingerprint(path) == before, f"diagnose changed the input {case}"
    path.unlink()


# -------------------------------------------------------------------------------- batch

_BATCH = textwrap.dedent("""
    import json, sys
    from nsysdiag.batch.run import run_batch
    out, dask, inputs = sys.argv[1], sys.argv[2], sys.argv[3:]
    if dask == "dask":
        import distributed
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                      dashboard_address=None) as cluster:
            s = run_batch(inputs, out, dask=cluster.scheduler_address)
    else:
        s = run_batch(inputs, out, workers=2)
    print(json.dumps([s.total, s.done, s.failed]))
""")


@pytest.fixture(scope="module")
def batch_inputs(tmp_path_factory) -> list[Path]:
    """Good exports and bad ones at the baseline's size (its runtime table is read by the
    parallel readers): damage that once stalled ``diagnose``, and damage that fails."""
    src = need(H200 / "baseline.sqlite")
    d = tmp_path_factory.mktemp("batch_in")
    return [
        standard("current").write(d / "good_small.sqlite"),
        CASES["invalid_utf8_names"][0](src, d / "bad_utf8.sqlite"),
        CASES["missing_stringids"][0](src, d / "no_stringids.sqlite"),
        _truncate(50)(src, d / "truncated.sqlite"),
        standard("old").write(d / "good_old.sqlite"),
    ]


@pytest.mark.parametrize("where", ["local", "dask"])
def test_batch_with_bad_files_does_not_stall(where, batch_inputs, tmp_path):
    if where == "dask":
        pytest.importorskip("distributed")
    out = tmp_path / "res.parquet"
    env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(tmp_path / "cache")}
    try:
        proc = subprocess.run([sys.executable, "-c", _BATCH, str(out), where,
                               *map(str, batch_inputs)], capture_output=True, text=True,
                              timeout=HARD_TIMEOUT_S, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"batch ({where}) still running after {HARD_TIMEOUT_S} s (a hang)")
    assert proc.returncode == 0, proc.stderr
    total, done, _ = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (total, done) == (5, 5)
    import pyarrow.parquet as pq

    rows = {Path(r["report"]).name: r for r in pq.read_table(out).to_pylist()}
    for name in ("good_small.sqlite", "good_old.sqlite", "bad_utf8.sqlite",
                 "no_stringids.sqlite"):
        assert rows[name]["status"] == "ok", rows[name]
    bad = rows["truncated.sqlite"]
    assert bad["status"] == "ok" or not bad["error"].startswith("internal error"), bad
