"""SQLite exports (``nsys export --type sqlite``), read with the ADBC SQLite driver.

Why ADBC: measured on this project's 2-core machine (``docs/load-paths.md`` in the shared
docs), it reads projected columns 3-6x faster than the stdlib ``sqlite3`` module, works with
any DuckDB version (DuckDB's own SQLite scanner pins DuckDB 1.5.5 and would be downloaded
at run time), and is a small Apache Arrow project. Every query names its columns, so only
what a view needs leaves SQLite.

The file is opened with ``mode=ro&immutable=1``: SQLite takes no locks and writes nothing,
so the input's bytes and mtime never change.
"""

from __future__ import annotations

import hashlib
import sqlite3
import urllib.parse
from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from .base import Source

SQLITE_MAGIC = b"SQLite format 3\x00"


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class SqliteSource(Source):
    """A SQLite export file."""

    kind = "sqlite"

    def __init__(self, path: Path):
        super().__init__(path)
        self._tables: dict[str, dict[str, str]] | None = None
        self._counts: dict[str, int] = {}
        self._adbc = None
        self._cursors: set = set()  # open ADBC cursors: closed by close() if never drained
        try:
            self._db = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
            self._db.text_factory = lambda b: b.decode("utf-8", "replace")
            self.tables()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a readable SQLite database ({exc})", path=str(path)) from None

    def tables(self) -> dict[str, dict[str, str]]:
        if self._tables is None:
            names = [
                r[0]
                for r in self._db.execute(
                    "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
                )
            ]
            tables = {}
            for name in names:
                cols = self._db.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
                tables[name] = {c[1]: (c[2] or "").upper() for c in cols}
            self._tables = tables
        return self._tables

    def row_count(self, table: str) -> int:
        if table not in self.tables():
            return 0
        if table not in self._counts:
            try:
                (n,) = self._db.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()
            except sqlite3.DatabaseError as exc:
                raise InputError(f"table {table} cannot be read ({exc})", path=str(self.path)) from None
            self._counts[table] = n
        return self._counts[table]

    def _select(self, table: str, columns: Mapping[str, str], where: str | None) -> str:
        exprs = []
        for name, kind in columns.items():
            col = _quote(name)
            if kind == "int":
                expr = f"CAST({col} AS INTEGER)"
            elif kind == "float":
                expr = f"CAST({col} AS REAL)"
            else:
                # BLOB keeps invalid UTF-8 intact for lenient decoding; ifnull keeps ADBC's
                # first-batch type inference from taking an all-NULL batch for int64.
                expr = f"ifnull(CAST({col} AS BLOB), X'')"
            exprs.append(f"{expr} AS {col}")
        sql = f"SELECT {', '.join(exprs)} FROM {_quote(table)}"
        return f"{sql} WHERE {where}" if where else sql

    def _read_present(
        self, table: str, columns: Mapping[str, str], where: str | None
    ) -> pa.RecordBatchReader:
        query = self._select(table, columns, where)
        try:
            if self._adbc is None:
                import adbc_driver_sqlite.dbapi as adbc

                self._adbc = adbc.connect(_uri(self.path))
            cur = self._adbc.cursor()
            self._cursors.add(cur)
            cur.execute(query)
            reader = cur.fetch_record_batch()
        except Exception as exc:  # the driver raises its own DB-API error types
            raise InputError(
                f"table {table} cannot be read ({str(exc).splitlines()[0]})", path=str(self.path)
            ) from None

        def batches():
            try:
                yield from reader
            except Exception as exc:
                raise InputError(
                    f"table {table} cannot be read ({str(exc).splitlines()[0]})",
                    path=str(self.path),
                ) from None
            finally:
                cur.close()
                self._cursors.discard(cur)

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def identity(self) -> str:
        st = self.path.stat()
        key = f"sqlite|{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        return hashlib.sha256(key.encode()).hexdigest()[:24]

    def close(self) -> None:
        self._db.close()
        for cur in list(self._cursors):  # streams never read to the end (an error midway)
            cur.close()
        self._cursors.clear()
        if self._adbc is not None:
            self._adbc.close()
            self._adbc = None
