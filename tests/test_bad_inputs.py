"""Bad inputs through the command line: one clear line and exit 0, 3 or 4, never a traceback.

Every input here is broken in one way a real user can meet (empty, truncated, corrupt,
not an export, a table missing, nonsense values, text that is not UTF-8, a damaged Parquet
directory, ...). For each, ``info`` and ``diagnose`` must exit 0 (it still works), 3 (the
input cannot be read) or 4 (it lacks the data), print at most three lines on stderr and no
traceback, and leave the input's bytes and mtime as they were.

``test_corpus_diagnose_clean_and_untouched`` runs ``diagnose`` over every export of the
shared corpus (skipped without it) in two worker processes, with the same checks. The last
tests pin what the views make of nonsense values and how a damaged or unwritable view
cache is handled.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CORPUS, H200, ROOT, need

from fixtures.fuzz import BAD_UTF8, INJECTION, steps_trace
from fixtures.make_fixtures import standard
from fixtures.parquetdir import sqlite_to_parquet_dir
from nsysdiag.cli.main import main

EXIT_OK, EXIT_INPUT, EXIT_MISSING, EXIT_RESOURCE = 0, 3, 4, 75
ANY = frozenset({EXIT_OK, EXIT_INPUT, EXIT_MISSING})
UNREADABLE = frozenset({EXIT_INPUT})
USABLE = frozenset({EXIT_OK, EXIT_MISSING})

ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
            "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


# ------------------------------------------------------------------------------ helpers

def fingerprint(path: Path) -> dict:
    """Bytes (sha256), size and mtime of a file, or of every file of a directory, plus
    what the enclosing directory holds (nothing may be written next to the input)."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*")) if path.is_dir() else [path]
    out = {"listing": sorted(os.listdir(path.parent)), "self_mtime": path.stat().st_mtime_ns}
    for f in files:
        st = f.stat()
        digest = hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else "dir"
        out[str(f)] = (digest, st.st_size, st.st_mtime_ns)
    return out


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_clean_exit(rc: int, err: str, allowed: frozenset[int], what: str) -> None:
    lines = err.strip().splitlines()
    assert "Traceback" not in err, f"{what}: traceback on stderr:\n{err}"
    assert rc in allowed, f"{what}: exit {rc}, expected one of {sorted(allowed)}; stderr: {err!r}"
    assert len(lines) <= 3, f"{what}: {len(lines)} lines on stderr:\n{err}"
    if rc != EXIT_OK:
        assert lines and lines[0].startswith("nsysdiag: error:"), f"{what}: stderr {err!r}"


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _edit(path: Path, *statements: str | tuple) -> Path:
    db = sqlite3.connect(path)
    try:
        for s in statements:
            db.execute(*s) if isinstance(s, tuple) else db.execute(s)
        db.commit()
    finally:
        db.close()
    return path


def _fixture(d: Path, name: str) -> Path:
    return standard("current").write(d / name)


def _truncate(src: bytes, dst: Path, pct: int) -> Path:
    dst.write_bytes(src[: len(src) * pct // 100])
    return dst


def _truncated_steps(d: Path, pct: int) -> Path:
    full = steps_trace("current").write(d / "full.sqlite")
    out = _truncate(full.read_bytes(), d / f"trunc{pct}.sqlite", pct)
    full.unlink()
    return out


def _flip_middle_pages(d: Path) -> Path:
    p = steps_trace("current").write(d / "flipped.sqlite")
    data = bytearray(p.read_bytes())
    rnd = random.Random(3)
    for i in range(len(data) // 3, 2 * len(data) // 3, 61):
        data[i] = rnd.randrange(256)
    p.write_bytes(bytes(data))
    return p


def _schema_not_utf8(d: Path) -> Path:
    """A CREATE statement in sqlite_master damaged into bytes that are not UTF-8: SQLite's
    error message quotes them (the sqlite3 module then raised UnicodeDecodeError)."""
    p = _fixture(d, "schema.sqlite")
    data = bytearray(p.read_bytes())
    at = data.find(b"CREATE TABLE")
    data[at + 10] = 0xA3
    p.write_bytes(bytes(data))
    return p


def _all_tables_empty(d: Path) -> Path:
    p = _fixture(d, "all_empty.sqlite")
    db = sqlite3.connect(p)
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    db.close()
    return _edit(p, *(f'DELETE FROM "{n}"' for n in names))


def _not_nsys(d: Path) -> Path:
    p = d / "other.sqlite"
    return _edit(p, "CREATE TABLE customers (id INTEGER, name TEXT)",
                 "INSERT INTO customers VALUES (1, 'x')")


def _odd_table_names(d: Path) -> Path:
    p = _fixture(d, "odd_names.sqlite")
    return _edit(p, 'CREATE TABLE "x""; DROP TABLE StringIds; --" ("a""b" INTEGER)',
                 "CREATE TABLE \"it's\" (v)",
                 "CREATE VIEW \"broken view\" AS SELECT * FROM missing_t")


def _bad_utf8(d: Path, as_blob: bool) -> Path:
    p = _fixture(d, f"bad_utf8_{'blob' if as_blob else 'text'}.sqlite")
    cast = "CAST(? || CAST({c} AS BLOB) AS %s)" % ("BLOB" if as_blob else "TEXT")
    blob = sqlite3.Binary(BAD_UTF8)
    return _edit(
        p,
        (f"UPDATE StringIds SET value = {cast.format(c='value')}", (blob,)),
        (f"UPDATE NVTX_EVENTS SET text = {cast.format(c='text')} WHERE text IS NOT NULL", (blob,)),
        (f"UPDATE PROCESSES SET name = {cast.format(c='name')}", (blob,)),
        (f"UPDATE TARGET_INFO_GPU SET name = {cast.format(c='name')}", (blob,)),
        (f"UPDATE META_DATA_EXPORT SET value = {cast.format(c='value')}", (blob,)),
    )


def _times(d: Path, name: str, start: str, end: str) -> Path:
    p = _fixture(d, name)
    return _edit(p, *(f'UPDATE {t} SET start = {start}, "end" = {end}' for t in ACTIVITY))


def _text_in_int(d: Path) -> Path:
    p = _fixture(d, "text_in_int.sqlite")
    return _edit(
        p,
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc', \"end\" = '12x', globalPid = 'pid', "
        "deviceId = 'gpu0', streamId = x'00ff' WHERE rowid = 1",
        ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = ?, correlationId = 'q', nameId = 'n'",
         (INJECTION,)),
        "UPDATE StringIds SET id = 'one' WHERE id = 1",
        "UPDATE NVTX_EVENTS SET eventType = 'push'",
        "UPDATE TARGET_INFO_GPU SET smCount = 'many', totalMemory = 1e300",
    )


def _missing(d: Path, *tables: str) -> Path:
    p = _fixture(d, f"missing_{'_'.join(t[-8:] for t in tables)}.sqlite")
    return _edit(p, *(f'DROP TABLE "{t}"' for t in tables))


def _random_bytes(d: Path, magic: bool) -> Path:
    rnd = random.Random(7)
    body = bytes(rnd.randrange(256) for _ in range(8192))
    p = d / ("magic_then_random.sqlite" if magic else "random.sqlite")
    p.write_bytes((b"SQLite format 3\x00" + body) if magic else body)
    return p


# Parquet directories ---------------------------------------------------------------------

def _pq_dir(d: Path, name: str) -> Path:
    src = _fixture(d, f"{name}.src.sqlite")
    out = sqlite_to_parquet_dir(src, d / name)
    src.unlink()
    return out


def _pq_missing(d: Path, table: str) -> Path:
    out = _pq_dir(d, f"pq_missing_{table}")
    (out / f"{table}.parquet").unlink()
    return out


def _pq_truncated(d: Path, table: str) -> Path:
    out = _pq_dir(d, f"pq_truncated_{table}")
    f = out / f"{table}.parquet"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return out


def _pq_garbled(d: Path, table: str) -> Path:
    out = _pq_dir(d, f"pq_garbled_{table}")
    f = out / f"{table}.parquet"
    data = bytearray(f.read_bytes())
    for i in range(8, len(data) - 8, 7):
        data[i] ^= 0x5A
    f.write_bytes(bytes(data))
    return out


def _pq_bad_values(d: Path) -> Path:
    """Parquet tables with wrong column types, invalid UTF-8 and absurd times."""
    out = _pq_dir(d, "pq_bad_values")
    n = pq.read_table(out / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").num_rows
    t = pq.read_table(out / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    t = t.set_column(t.schema.get_field_index("start"), "start",
                     pa.array(["abc"] * n, pa.string()))
    t = t.set_column(t.schema.get_field_index("end"), "end",
                     pa.array([2**64 - 1] * n, pa.uint64()))
    t = t.set_column(t.schema.get_field_index("globalPid"), "globalPid",
                     pa.array([[1, 2]] * n, pa.list_(pa.int64())))
    pq.write_table(t, out / "CUPTI_ACTIVITY_KIND_KERNEL.parquet")
    s = pq.read_table(out / "StringIds.parquet")
    s = s.set_column(1, "value", pa.array([BAD_UTF8] * s.num_rows, pa.binary()))
    pq.write_table(s, out / "StringIds.parquet")
    r = pq.read_table(out / "CUPTI_ACTIVITY_KIND_RUNTIME.parquet")
    r = r.set_column(r.schema.get_field_index("start"), "start",
                     pa.array([float("nan"), float("inf")] + [-1e300] * (r.num_rows - 2)))
    pq.write_table(r, out / "CUPTI_ACTIVITY_KIND_RUNTIME.parquet")
    return out


def _pq_odd_file_names(d: Path) -> Path:
    out = _pq_dir(d, "pq_odd_names")
    pq.write_table(pa.table({"a": [1]}), out / "x'; DROP TABLE kernels; --.parquet")
    pq.write_table(pa.table({"a": [1]}), out / 'q"uote.parquet')
    return out


def _pq_not_nsys(d: Path) -> Path:
    out = d / "pq_not_nsys"
    out.mkdir()
    pq.write_table(pa.table({"a": [1, 2]}), out / "customers.parquet")
    return out


def _dir_not_export(d: Path) -> Path:
    out = d / "not_an_export"
    out.mkdir()
    (out / "notes.txt").write_text("not a trace\n")
    return out


#: name -> (builder(tmp_dir) -> input path, exit codes allowed)
CASES: dict[str, tuple[Callable[[Path], Path], frozenset[int]]] = {
    "zero_bytes": (lambda d: _write(d / "empty.sqlite", b""), UNREADABLE),
    "random_bytes": (lambda d: _random_bytes(d, magic=False), UNREADABLE),
    "sqlite_magic_then_random": (lambda d: _random_bytes(d, magic=True), UNREADABLE),
    "plain_text": (lambda d: _write(d / "notes.txt", b"hello\nworld\n"), UNREADABLE),
    "raw_report_garbage": (lambda d: _write(d / "r.nsys-rep", b"garbage"), UNREADABLE),
    "missing_path": (lambda d: d / "does-not-exist.sqlite", UNREADABLE),
    **{f"truncated_{pct}pct": (lambda d, pct=pct: _truncated_steps(d, pct), ANY)
       for pct in (10, 50, 90)},
    "corrupt_middle_pages": (_flip_middle_pages, ANY),
    "schema_not_utf8": (_schema_not_utf8, UNREADABLE),
    "sqlite_not_nsys": (_not_nsys, UNREADABLE),
    "odd_table_names": (_odd_table_names, ANY),
    "missing_kernel_table": (lambda d: _missing(d, "CUPTI_ACTIVITY_KIND_KERNEL"), USABLE),
    "missing_runtime_table": (lambda d: _missing(d, "CUPTI_ACTIVITY_KIND_RUNTIME"), USABLE),
    "missing_stringids_table": (lambda d: _missing(d, "StringIds"), USABLE),
    "missing_kernel_and_runtime": (lambda d: _missing(d, "CUPTI_ACTIVITY_KIND_KERNEL",
                                                      "CUPTI_ACTIVITY_KIND_RUNTIME"), USABLE),
    "null_end_times": (lambda d: _times(d, "null_end.sqlite", "start", "NULL"), USABLE),
    "null_start_times": (lambda d: _times(d, "null_start.sqlite", "NULL", '"end"'), USABLE),
    "end_before_start": (lambda d: _times(d, "end_before_start.sqlite", "start",
                                          "start - 1000000"), USABLE),
    "huge_timestamps": (lambda d: _times(d, "huge.sqlite", "9223372036854775000 + rowid",
                                         "9223372036854775807"), USABLE),
    "negative_timestamps": (lambda d: _times(d, "negative.sqlite", "-start - 10000000",
                                             '-"end" + 10000000'), USABLE),
    "extreme_timestamps": (lambda d: _times(d, "extreme.sqlite", "-9223372036854775807 + rowid",
                                            "9223372036854775807 - rowid"), USABLE),
    "real_timestamps": (lambda d: _times(d, "real.sqlite", "1e300", "-1e300"), USABLE),
    # each time valid (within +-(2**62 - 1)), each duration near 2**63: their sums overflow
    "durations_summing_past_64_bits": (lambda d: _times(
        d, "overflow.sqlite", "-4611686018427387903 + rowid", "4611686018427387903 - rowid"),
        ANY),
    "zero_durations": (lambda d: _times(d, "zero.sqlite", "start", "start"), USABLE),
    "negative_global_ids": (lambda d: _edit(
        _fixture(d, "neg_ids.sqlite"),
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = -globalPid",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = -9223372036854775807 - 1",
        "UPDATE NVTX_EVENTS SET globalTid = -1", "UPDATE PROCESSES SET globalPid = -5",
        "UPDATE ThreadNames SET globalTid = -globalTid"), USABLE),
    "duplicate_correlation_ids": (lambda d: _edit(
        _fixture(d, "dup_corr.sqlite"),
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = 1",
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 1",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL",
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME",
        "INSERT INTO StringIds SELECT * FROM StringIds"), USABLE),
    "invalid_utf8_text": (lambda d: _bad_utf8(d, as_blob=False), USABLE),
    "invalid_utf8_blob": (lambda d: _bad_utf8(d, as_blob=True), USABLE),
    "text_in_integer_columns": (_text_in_int, USABLE),
    "all_tables_empty": (_all_tables_empty, USABLE),
    "two_valued_unit_durations": (lambda d: steps_trace("current", jitter=False)
                                  .write(d / "two_valued.sqlite"), USABLE),
    "directory_not_export": (_dir_not_export, UNREADABLE),
    "empty_directory": (lambda d: _mkdir(d / "empty_dir"), UNREADABLE),
    "parquet_not_nsys": (_pq_not_nsys, UNREADABLE),
    "parquet_missing_kernel": (lambda d: _pq_missing(d, "CUPTI_ACTIVITY_KIND_KERNEL"), USABLE),
    "parquet_missing_stringids": (lambda d: _pq_missing(d, "StringIds"), USABLE),
    "parquet_truncated_kernel": (lambda d: _pq_truncated(d, "CUPTI_ACTIVITY_KIND_KERNEL"),
                                 UNREADABLE),
    "parquet_garbled_stringids": (lambda d: _pq_garbled(d, "StringIds"), UNREADABLE),
    "parquet_garbled_nvtx": (lambda d: _pq_garbled(d, "NVTX_EVENTS"), UNREADABLE),
    "parquet_bad_values": (_pq_bad_values, ANY),
    "parquet_odd_file_names": (_pq_odd_file_names, ANY),
}


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory) -> dict[str, Path]:
    """Every case built once, each in its own directory (so the listing check is exact)."""
    root = tmp_path_factory.mktemp("bad")
    built = {}
    for name, (build, _) in CASES.items():
        d = root / name
        d.mkdir()
        built[name] = build(d)
    return built


#: (case, command) that fail because of a bug in code owned elsewhere, reported to its owner
#: (none open at the moment; overlap.py's NULL kernel_busy_ns, found here, is fixed)
KNOWN_BUGS: dict[tuple[str, str], str] = {}


def _params():
    for case in CASES:
        for command in ("info", "diagnose"):
            reason = KNOWN_BUGS.get((case, command))
            marks = [pytest.mark.xfail(reason=reason, strict=False)] if reason else []
            yield pytest.param(case, command, marks=marks, id=f"{case}-{command}")


@pytest.mark.parametrize(("case", "command"), list(_params()))
def test_bad_input_gives_clean_exit(case, command, bad_inputs, capsys, monkeypatch):
    monkeypatch.setenv("NSYSDIAG_NSYS", "/nonexistent/nsys")  # raw reports: no nsys here
    path = bad_inputs[case]
    before = fingerprint(path) if path.exists() else None
    rc, _, err = run_cli(capsys, command, str(path))
    assert_clean_exit(rc, err, CASES[case][1], f"{command} {case}")
    if before is not None:
        assert fingerprint(path) == before, f"{command} changed the input {case}"


def test_specific_messages(bad_inputs, capsys):
    """The one line names the problem (spot checks)."""
    expect = {
        "zero_bytes": "empty",
        "sqlite_not_nsys": "no Nsight Systems tables",
        "plain_text": "not an SQLite file",
        "parquet_truncated_kernel": "CUPTI_ACTIVITY_KIND_KERNEL.parquet",
        "directory_not_export": "no .parquet tables",
    }
    for case, words in expect.items():
        rc, _, err = run_cli(capsys, "info", str(bad_inputs[case]))
        assert rc == EXIT_INPUT and words in err, (case, err)


def test_all_empty_diagnose_says_missing_data(bad_inputs, capsys):
    rc, _, err = run_cli(capsys, "diagnose", str(bad_inputs["all_tables_empty"]))
    assert rc == EXIT_MISSING and "kernels" in err


def test_truncated_corpus_export(tmp_path, capsys):
    """The H200 baseline export cut at 10, 50 and 90 percent of its size."""
    data = need(H200 / "baseline.sqlite").read_bytes()
    for pct in (10, 50, 90):
        path = _truncate(data, tmp_path / f"baseline_{pct}.sqlite", pct)
        before = fingerprint(path)
        for command in ("info", "diagnose"):
            rc, _, err = run_cli(capsys, command, str(path))
            assert_clean_exit(rc, err, ANY, f"{command} baseline cut at {pct}%")
        assert fingerprint(path) == before
        path.unlink()


def test_damaged_corpus_parquet_dir(tmp_path, capsys):
    """A copy of the H200 Parquet export with a corrupt kernel table, another without it."""
    src = need(H200 / "baseline_pq")
    corrupt = shutil.copytree(src, tmp_path / "corrupt")
    f = corrupt / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    f.write_bytes(f.read_bytes()[:-100])
    missing = shutil.copytree(src, tmp_path / "missing")
    (missing / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").unlink()
    for path, command, allowed in ((corrupt, "diagnose", UNREADABLE),
                                   (missing, "info", USABLE)):
        before = fingerprint(path)
        rc, _, err = run_cli(capsys, command, str(path))
        assert_clean_exit(rc, err, allowed, f"{command} {path.name}")
        assert fingerprint(path) == before


@pytest.mark.parametrize("case", ["zero_bytes", "truncated_50pct", "parquet_truncated_kernel",
                                  "text_in_integer_columns"])
def test_bad_input_real_process(case, bad_inputs):
    """The installed entry point in its own process: real stderr, real exit status."""
    path = bad_inputs[case]
    before = fingerprint(path)
    proc = subprocess.run([sys.executable, "-m", "nsysdiag", "info", str(path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert_clean_exit(proc.returncode, proc.stderr, CASES[case][1], f"subprocess info {case}")
    assert fingerprint(path) == before


# ------------------------------------------------------------------------ the corpus

_CORPUS_WORKER = r"""
import contextlib, io, json, sys, time, warnings
warnings.simplefilter("error")
from nsysdiag.cli.main import main
for path in sys.argv[1:]:
    err = io.StringIO()
    t = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["--no-cache", "diagnose", path])
    print(json.dumps({"path": path, "rc": rc, "stderr": err.getvalue(),
                      "seconds": round(time.monotonic() - t, 2)}), flush=True)
"""


def corpus_inputs() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    pq_dirs = [H200 / "baseline_pq"] if (H200 / "baseline_pq").is_dir() else []
    return sorted(CORPUS.rglob("*.sqlite")) + pq_dirs


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*")) if p.is_dir() else p.stat().st_size


@pytest.mark.skipif(not corpus_inputs(), reason="shared corpus not available")
def test_corpus_diagnose_clean_and_untouched(tmp_path):
    """``diagnose`` over every corpus export (two worker processes, largest files first,
    dealt alternately): exit 0, 3 or 4, no traceback, at most three stderr lines, inputs
    unchanged."""
    inputs = sorted(corpus_inputs(), key=_size, reverse=True)
    before = {p: fingerprint(p) for p in inputs}
    env = {**os.environ, "NSYSDIAG_CACHE_DIR": str(tmp_path / "cache")}
    workers = [
        subprocess.Popen([sys.executable, "-c", _CORPUS_WORKER, *map(str, inputs[i::2])],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         cwd=ROOT)
        for i in range(2)
    ]
    results = []
    for w in workers:
        out, err = w.communicate(timeout=900)
        assert w.returncode == 0, f"worker failed:\n{err}"
        assert "Traceback" not in err, err
        results += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert sorted(r["path"] for r in results) == sorted(map(str, inputs))
    bad = []
    for r in results:
        try:
            assert_clean_exit(r["rc"], r["stderr"], ANY, r["path"])
        except AssertionError as exc:
            bad.append(str(exc).splitlines()[0])
    assert not bad, "\n".join(bad)
    for p in inputs:
        assert fingerprint(p) == before[p], f"{p} changed"


# ------------------------------------------------------------- values the views reject

def test_views_null_out_invalid_values(tmp_path):
    """Hand-computed: what the views make of nonsense values (``views/definitions.py``:
    timestamps beyond +-(2**62 - 1) and ends before starts read as NULL, byte counts outside
    [0, 2**48] too; negative packed ids still decode)."""
    import nsysdiag

    path = _edit(
        _fixture(tmp_path, "values.sqlite"),
        # kernels (start order 5000, 9500, 20000): an end before its start, a huge start,
        # and a packed process key with the top bit set
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = 4000 WHERE start = 5000',
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 9223372036854775807 WHERE start = 9500",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = -9223372036854775808 + (7 << 24) "
        "WHERE start = 20000",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = -5",
        "UPDATE CUPTI_ACTIVITY_KIND_MEMSET SET bytes = 9223372036854775807",
        "UPDATE TARGET_INFO_GPU SET memoryBandwidth = NULL, clockRate = NULL",
    )
    with nsysdiag.open(path, cache=False) as rep:
        got = rep.sql("SELECT start_ns, end_ns, duration_ns, pid, global_pid FROM kernels "
                      "ORDER BY correlation_id").fetchall()
        assert got == [
            (5000, None, None, 4242, (1 << 48) | (4242 << 24)),
            (None, 12000, None, 4242, (1 << 48) | (4242 << 24)),
            (20000, 21000, 1000, 7, -(2**63) + (7 << 24)),
        ]
        assert rep.sql("SELECT bytes FROM memcpys").fetchall() == [(None,)]
        assert rep.sql("SELECT bytes FROM memsets").fetchall() == [(None,)]
        for view in ("kernels", "memcpys", "memsets", "api_calls", "nvtx_ranges", "syncs"):
            (n,) = rep.sql(f"SELECT count(*) FROM {view} WHERE duration_ns < 0").fetchall()[0]
            assert n == 0, view


def test_views_legacy_device_sizes_do_not_overflow(tmp_path):
    import nsysdiag

    path = _edit(standard("legacy").write(tmp_path / "legacy.sqlite"),
                 "ALTER TABLE TARGET_INFO_CUDA_GPU ADD COLUMN coreClockRate INTEGER",
                 "UPDATE TARGET_INFO_CUDA_GPU SET globalMemoryBandwidth = 9223372036854775807, "
                 "coreClockRate = -9223372036854775807, globalMemorySize = -1")
    with nsysdiag.open(path, cache=False) as rep:
        got = rep.sql("SELECT memory_bandwidth_bytes_per_s, clock_rate_hz, total_memory_bytes "
                      "FROM devices").fetchall()
    assert got == [(None, None, -1)]


def test_sql_syntax_error_is_usage_error(tmp_path, capsys):
    path = _fixture(tmp_path, "t.sqlite")
    rc, _, err = run_cli(capsys, "sql", str(path), "SELEC count(*) FROM kernels")
    assert rc == 2 and err.startswith("nsysdiag: error: SQL error") and "Traceback" not in err


def test_sql_runtime_error_is_usage_error(tmp_path, capsys):
    path = _fixture(tmp_path, "t.sqlite")
    rc, _, err = run_cli(capsys, "sql", str(path),
                         "SELECT 9223372036854775807 + start_ns FROM kernels")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert rc == 2, err


# ---------------------------------------------------------------------- the view cache

def test_unwritable_cache_dir_is_one_line(tmp_path, capsys, monkeypatch):
    path = _fixture(tmp_path, "t.sqlite")
    blocker = _write(tmp_path / "not_a_dir", b"")
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(blocker / "sub"))
    rc, _, err = run_cli(capsys, "kernel-summary", str(path))
    # the environment's fault, not the input's
    assert_clean_exit(rc, err, frozenset({EXIT_RESOURCE}), "unwritable cache")
    assert "cache" in err and "--no-cache" in err


@pytest.mark.parametrize("damage", [b"", b"PAR1garbagePAR1", None])
def test_damaged_cache_file_is_rebuilt(damage, tmp_path, capsys, monkeypatch):
    path = _fixture(tmp_path, "t.sqlite")
    monkeypatch.setenv("NSYSDIAG_CACHE_DIR", str(tmp_path / "cache"))
    rc, first, _ = run_cli(capsys, "kernel-summary", str(path))
    assert rc == 0
    (cached,) = (tmp_path / "cache").rglob("kernels-*.parquet")
    cached.write_bytes(cached.read_bytes()[:100] if damage is None else damage)
    rc, again, err = run_cli(capsys, "kernel-summary", str(path))
    assert rc == 0, err
    assert again == first
