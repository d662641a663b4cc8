"""Integer columns decoded from SQLite pages (adapters/sqlite_pages.py) against SQLite itself.

Every test forces the fast path (``FAST_MIN_ROWS = 0``) and compares what it reads with
the SQLite path (``_read_sqlite``, which reads through SQLite with ``CAST``), row for row.
Small pages (512 bytes) give b-trees of three or four levels from a few thousand rows.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

import pyarrow as pa
import pytest

from nsysdiag.adapters import sqlite as sqlite_adapter
from nsysdiag.adapters import sqlite_pages
from nsysdiag.adapters.sqlite import SqliteSource
from nsysdiag.errors import InputError

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"

EDGES = [0, 1, -1, 127, -128, 128, -129, 32767, -32768, 32768, 2**23 - 1, -(2**23), 2**23,
         2**31 - 1, -(2**31), 2**31, 2**47 - 1, -(2**47), 2**47, 2**63 - 1, -(2**63), None]


@pytest.fixture(autouse=True)
def _always_fast(monkeypatch):
    monkeypatch.setattr(sqlite_adapter, "FAST_MIN_ROWS", 0)
    monkeypatch.setattr(sqlite_adapter, "NONZERO_PAGES_MIN_ROWS", 0)
    monkeypatch.setattr(sqlite_pages, "PAGES_PER_CHUNK", 7)  # many chunks, odd sizes


def _make(path: Path, create: str, rows: list[tuple], page_size: int = 512) -> None:
    con = sqlite3.connect(path)
    con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(create)
    marks = ", ".join("?" * len(rows[0]))
    con.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    con.commit()
    con.close()


def _both(path: Path, columns: dict[str, str]) -> tuple[pa.Table, pa.Table, SqliteSource]:
    src = SqliteSource(path)
    fast = src.read("t", columns).read_all()
    slow = src._read_sqlite("t", columns, None).read_all()
    return fast, slow, src


def _sorted(table: pa.Table) -> list[tuple]:
    rows = (tuple(r.values()) for r in table.to_pylist())
    return sorted(rows, key=lambda r: tuple((v is None, v or 0) for v in r))


def test_integers_of_every_width_and_nulls(tmp_path):
    rng = random.Random(1)
    rows = []
    for i in range(6000):
        a = EDGES[i % len(EDGES)]
        b = rng.randint(-(2**63), 2**63 - 1) if i % 3 else rng.randint(-300, 300)
        rows.append((a, b, "x" * rng.randint(0, 40), i))  # text column not read
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (a INTEGER, b INTEGER, s TEXT, i INTEGER NOT NULL)", rows)
    fast, slow, src = _both(path, {"i": "int", "a": "int", "b": "int"})
    assert src._pages is not None  # the fast path ran
    assert fast.num_rows == 6000
    assert fast.column("i").to_pylist() == list(range(6000))  # rowid order kept
    assert fast.column("a").to_pylist() == [r[0] for r in rows]
    assert fast.column("b").to_pylist() == [r[1] for r in rows]
    assert _sorted(fast) == _sorted(slow)
    assert fast.column("a").null_count == sum(r[0] is None for r in rows)


def test_rowid_alias_and_columns_added_later(tmp_path):
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (id INTEGER PRIMARY KEY, x INTEGER)",
          [(i * 3, -i) for i in range(1, 2000)])
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE t ADD COLUMN y INTEGER")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [(10_000 + i, i, 7 * i) for i in range(500)])
    con.commit()
    con.close()
    fast, slow, _ = _both(path, {"x": "int", "id": "int", "y": "int"})
    assert fast.column("id").to_pylist()[:3] == [3, 6, 9]
    assert fast.column("y").to_pylist()[:1999] == [None] * 1999  # records written before
    assert fast.column("y").to_pylist()[1999:] == [7 * i for i in range(500)]
    assert _sorted(fast) == _sorted(slow)


def test_values_it_does_not_read_are_read_by_sqlite_without_duplicates(tmp_path):
    rows = [(i, i * 10) for i in range(3000)]
    rows[1500] = (1500, 2.75)          # REAL in an integer column
    rows[2100] = (2100, "42abc")       # TEXT
    rows[2500] = (2500, b"\x00\x01")   # BLOB
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (k INTEGER, v INTEGER)", rows)
    fast, slow, src = _both(path, {"k": "int", "v": "int"})
    assert src._pages is not None
    assert fast.column("k").to_pylist() == list(range(3000))  # each row once, in order
    assert _sorted(fast) == _sorted(slow)  # SQLite's CAST rules where the fast path stopped
    assert fast.column("v")[1500].as_py() == 2


def test_payload_on_overflow_pages(tmp_path):
    rows = [(i, "y" * (2000 if i == 700 else 5)) for i in range(1500)]
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (k INTEGER, s TEXT)", rows)
    fast, slow, _ = _both(path, {"k": "int"})
    assert fast.column("k").to_pylist() == list(range(1500))
    assert _sorted(fast) == _sorted(slow)


def test_damaged_pages_give_one_input_error_and_leave_the_file_alone(tmp_path):
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (k INTEGER, v INTEGER)", [(i, -i) for i in range(20000)],
          page_size=1024)
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(path, damaged)
    size = damaged.stat().st_size
    with open(damaged, "r+b") as f:  # zero a run of pages in the middle of the table
        f.seek(size // 2 // 1024 * 1024)
        f.write(b"\x00" * 4096)
    before = (damaged.read_bytes(), damaged.stat().st_mtime_ns)
    src = SqliteSource(damaged)
    with pytest.raises(InputError, match="cannot be read"):
        src.read("t", {"k": "int", "v": "int"}).read_all()
    src.close()
    assert (damaged.read_bytes(), damaged.stat().st_mtime_ns) == before


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present")
def test_corpus_big_tables_read_alike():
    """Kernels and runtime calls of every corpus SQLite file: fast path == SQLite."""
    files = sorted(CORPUS.rglob("*.sqlite"))
    assert files
    for path in files:
        src = SqliteSource(path)
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"):
            have = src.tables().get(table)
            if not have:
                continue
            columns = {c: "int" for c, kind in have.items() if kind == "INTEGER"}
            fast = src.read(table, columns).read_all()
            slow = src._read_sqlite(table, columns, None).read_all()
            assert _sorted(fast) == _sorted(slow), (path.name, table)
        src.close()


def test_random_damage_never_crashes(tmp_path):
    """Bytes flipped anywhere in the file: rows that SQLite reads alike, or one InputError;
    never rows from a file that SQLite itself refuses."""
    path = tmp_path / "t.sqlite"
    _make(path, "CREATE TABLE t (k INTEGER, v INTEGER, w INTEGER)",
          [(i, i * 7919 - 10**6, None if i % 5 else -i) for i in range(4000)])
    clean = path.read_bytes()
    rng = random.Random(7)
    columns = {"k": "int", "v": "int", "w": "int"}
    outcomes = {"same": 0, "different": 0, "error": 0}
    for case in range(150):
        data = bytearray(clean)
        for _ in range(rng.choice([1, 4, 32])):
            data[rng.randrange(512, len(data))] = rng.randrange(256)
        damaged = tmp_path / f"d{case}.sqlite"
        damaged.write_bytes(bytes(data))
        try:
            src = SqliteSource(damaged)
            fast = src.read("t", columns).read_all()
        except InputError:
            outcomes["error"] += 1
            continue
        slow = src._read_sqlite("t", columns, None).read_all()  # raises if SQLite refuses
        outcomes["same" if _sorted(fast) == _sorted(slow) else "different"] += 1
        src.close()
    assert outcomes["same"] > 20 and outcomes["error"] > 20  # both kinds of damage occurred
    assert outcomes["different"] == 0


@pytest.mark.parametrize("fast", [True, False])
def test_any_nonzero(tmp_path, monkeypatch, fast):
    if not fast:
        monkeypatch.setattr(sqlite_adapter, "NONZERO_PAGES_MIN_ROWS", 10**9)
    path = tmp_path / "t.sqlite"
    rows = [(i, None if i % 2 else 0, 5 if i == 2999 else None) for i in range(3000)]
    _make(path, "CREATE TABLE t (k INTEGER, zeros INTEGER, late INTEGER)", rows)
    src = SqliteSource(path)
    assert [src.any_nonzero("t", c) for c in ("k", "zeros", "late", "absent")] == [
        True, False, True, False]
    assert (src._pages is not None) == fast
    assert not src.any_nonzero("no_such_table", "k")
