"""Parquet directory exports (``nsys export --type parquetdir``): one file per table.

Tables are read with DuckDB's Parquet reader, which pushes the column list down to the
file; unsigned and narrow integer types are cast to BIGINT.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import duckdb
import pyarrow as pa

from ..engine.database import sql_path
from ..errors import InputError
from .base import Source, refuse_special


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_CAST = {"int": "BIGINT", "float": "DOUBLE", "text": "VARCHAR"}


class ParquetDirSource(Source):
    """A directory holding ``<TABLE>.parquet`` files."""

    kind = "parquet"

    def __init__(self, path: Path):
        super().__init__(path)
        self._con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                           "autoload_known_extensions": False})
        self._tables: dict[str, dict[str, str]] | None = None
        self._counts: dict[str, int] = {}
        self.tables()

    def _file(self, table: str) -> Path:
        return self.path / f"{table}.parquet"

    def tables(self) -> dict[str, dict[str, str]]:
        if self._tables is None:
            tables = {}
            for f in sorted(self.path.glob("*.parquet")):
                refuse_special(f)
                try:
                    rows = self._con.execute(
                        f"DESCRIBE SELECT * FROM read_parquet({sql_path(f)})"
                    ).fetchall()
                except duckdb.Error as exc:
                    raise InputError(
                        f"{f.name} is not a readable Parquet file ({str(exc).splitlines()[0]})",
                        path=str(self.path),
                    ) from None
                tables[f.stem] = {r[0]: r[1].upper() for r in rows}
            self._tables = tables
        return self._tables

    def row_count(self, table: str) -> int:
        if table not in self.tables():
            return 0
        if table not in self._counts:
            f = sql_path(self._file(table))
            try:
                (n,) = self._con.execute(f"SELECT count(*) FROM read_parquet({f})").fetchone()
            except duckdb.Error as exc:
                raise InputError(
                    f"{table}.parquet cannot be read ({str(exc).splitlines()[0]})",
                    path=str(self.path),
                ) from None
            self._counts[table] = n
        return self._counts[table]

    def _read_present(
        self, table: str, columns: Mapping[str, str], where: str | None
    ) -> pa.RecordBatchReader:
        exprs = ", ".join(
            f"TRY_CAST({_quote(c)} AS {_CAST[k]}) AS {_quote(c)}" for c, k in columns.items()
        )
        f = sql_path(self._file(table))
        try:
            sql = f"SELECT {exprs} FROM read_parquet({f})" + (f" WHERE {where}" if where else "")
            cur = self._con.cursor()
            reader = cur.sql(sql).to_arrow_reader()
        except duckdb.Error as exc:
            raise InputError(
                f"{table}.parquet cannot be read ({str(exc).splitlines()[0]})", path=str(self.path)
            ) from None

        def batches():
            try:
                yield from reader
            except duckdb.Error as exc:
                raise InputError(
                    f"{table}.parquet cannot be read ({str(exc).splitlines()[0]})",
                    path=str(self.path),
                ) from None
            finally:
                cur.close()

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def identity(self) -> str:
        parts = [f"parquet|{self.path.resolve()}"]
        for f in sorted(self.path.glob("*.parquet")):
            st = f.stat()
            parts.append(f"{f.name}|{st.st_size}|{st.st_mtime_ns}")
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]

    def close(self) -> None:
        self._con.close()
