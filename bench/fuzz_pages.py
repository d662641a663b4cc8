#!/usr/bin/env python3
"""Random damage to a SQLite table read through the page decoder (adapters/sqlite_pages.py).

usage: python bench/fuzz_pages.py CASES SEED

Each case overwrites or flips 1 to 64 bytes of a 20,000-row table (1 KiB pages), reads it
with the fast path forced and, where that succeeds, again through SQLite alone. It prints
how many reads succeeded, how many of those SQLite read alike (same rows) or refused, and
how many gave an InputError. A crash (segfault) ends the run. The test suite runs 150
such cases (tests/test_sqlite_pages.py); this is the long run.
"""

from __future__ import annotations

import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from nsysdiag.adapters import sqlite as sqlite_adapter
from nsysdiag.adapters import sqlite_pages
from nsysdiag.adapters.sqlite import SqliteSource
from nsysdiag.errors import InputError

COLUMNS = {"a": "int", "b": "int", "c": "int"}
ORDER = [("a", "ascending"), ("c", "ascending")]


def table(path: Path, rng: random.Random) -> bytes:
    con = sqlite3.connect(path)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t (a INTEGER, b INTEGER, s TEXT, c INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [
        (i, rng.randint(-(2**63), 2**63 - 1) if i % 3 else None, "x" * (i % 50), -i)
        for i in range(20000)])
    con.commit()
    con.close()
    return path.read_bytes()


def main(cases: int, seed: int) -> None:
    sqlite_adapter.FAST_MIN_ROWS = 0
    sqlite_pages.PAGES_PER_CHUNK = 5
    rng = random.Random(seed)
    work = Path(tempfile.mkdtemp(prefix="fuzz-pages-"))
    clean = table(work / "clean.sqlite", rng)
    counts = dict.fromkeys(("read", "same", "refused", "error"), 0)
    t0 = time.time()
    for _ in range(cases):
        data = bytearray(clean)
        for _ in range(rng.choice([1, 2, 8, 64])):
            pos = rng.randrange(100, len(data))
            flip = data[pos] ^ (1 << rng.randrange(8))
            data[pos] = rng.randrange(256) if rng.random() < 0.7 else flip
        damaged = work / "damaged.sqlite"
        damaged.write_bytes(bytes(data))
        try:
            src = SqliteSource(damaged)
            fast = src.read("t", COLUMNS).read_all()
            counts["read"] += 1
        except InputError:
            counts["error"] += 1
            continue
        try:
            slow = src._read_sqlite("t", COLUMNS, None).read_all()
            counts["same"] += fast.sort_by(ORDER).equals(slow.sort_by(ORDER))
        except InputError:
            counts["refused"] += 1
        src.close()
    print(f"seed {seed}: {cases} cases in {time.time() - t0:.0f} s: read {counts['read']} "
          f"(SQLite read the same rows in {counts['same']}, refused {counts['refused']}), "
          f"InputError {counts['error']}, crashes 0")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
