"""Materialize normalized views as Parquet files and expose them to DuckDB.

A view is built the first time a query names it: its raw inputs are read (only the
columns it declares) as Arrow streams, its SQL runs in DuckDB, and the result streams into
``<cache>/<view>.parquet`` through a temporary file and an atomic rename. Queries then read
that file, so DuckDB pushes each query's column list and filters down to Parquet.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..adapters.base import Source
from ..errors import InputError
from .definitions import (
    API_CATEGORIES,
    API_CATEGORY_SQL,
    CHECK_MACROS,
    VIEWS,
    RawInput,
    ViewSpec,
)
from .enums import ENUM_TABLES, enum_table
from .launch import LaunchCalls, arrow_values

#: bump when a view's columns or meaning change, so old caches are not reused
VIEW_FORMAT = 9

#: How views are written. zstd level 1: at 5M kernels 17% faster to write than the default
#: level 3 for 5% more bytes (snappy: as fast, twice the bytes). Format version 2 (delta
#: encoding of integers): at 10M kernels the kernels view is written in 1.6 s instead of
#: 2.1 s, 35% smaller, and scans and sorts of it run 10-50% faster.
PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1, PARQUET_VERSION V2"
#: How analysis steps (scratch files on disk, read once or twice) are written: uncompressed,
#: since lz4 cost more to write and read than the bytes it saved (10M kernels: ranges
#: 7.5 -> 7.3 s)
STEP_OPTIONS = "FORMAT parquet, COMPRESSION uncompressed, PARQUET_VERSION V2"


def _placed(reader: pa.RecordBatchReader, columns: tuple[str, ...],
            ids: np.ndarray) -> pa.RecordBatchReader:
    """``reader`` with each id in ``columns`` replaced by its place (from 1) in the sorted
    ``ids``, which hold every id those columns have (``ViewStore._view_strings``)."""
    fields = {name: reader.schema.get_field_index(name) for name in columns}
    schema = reader.schema
    for name, i in fields.items():
        schema = schema.set(i, pa.field(name, pa.int64()))

    def batches() -> Iterable[pa.RecordBatch]:
        for batch in reader:
            arrays = batch.columns
            for i in fields.values():
                values, valid = arrow_values(arrays[i])
                arrays[i] = pa.array(np.searchsorted(ids, values) + 1,
                                     mask=~valid if arrays[i].null_count else None)
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


class ViewStore:
    """Builds the normalized views of one source into a directory of Parquet files."""

    def __init__(self, source: Source, con: duckdb.DuckDBPyConnection, directory: Path,
                 tracer: Callable[[str], None] | None = None):
        self.source = source
        self.con = con
        self.directory = directory
        self.tracer = tracer
        self._helpers_ready = False
        self._lock = threading.RLock()
        self._ready: set[str] = set()

    def path(self, name: str) -> Path:
        return self.directory / f"{name}.parquet"

    def built(self, name: str) -> bool:
        """Whether view ``name`` is ready to query without building it."""
        return name in self._ready

    def ensure(self, names: Iterable[str]) -> None:
        """Make sure each named view exists (building it, and what it depends on, if needed)."""
        with self._lock:
            for name in names:
                if name in VIEWS and name not in self._ready:
                    self._ensure_one(VIEWS[name])

    def _ensure_one(self, spec: ViewSpec) -> None:
        self.ensure(spec.depends)
        target = self.path(spec.name)
        if not target.exists():
            self._build(spec, target)
        try:
            self._create_view(spec, target)
        except duckdb.Error:
            # a damaged cache file (disk full, edited by hand, ...): build it again, once
            target.unlink(missing_ok=True)
            self._build(spec, target)
            self._create_view(spec, target)
        self._ready.add(spec.name)

    def _create_view(self, spec: ViewSpec, target: Path) -> None:
        columns = ", ".join(f"{spec.derived[c]} AS {c}" if c in spec.derived else c
                            for c in spec.columns) if spec.derived else "*"
        self.con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS SELECT {columns} "
                         f"FROM read_parquet({sql_string(str(target))})")

    def _build(self, spec: ViewSpec, target: Path) -> None:
        self._ensure_helpers()
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{spec.name}.", suffix=".tmp", dir=self.directory)
            os.close(fd)
        except OSError as exc:
            raise InputError(
                f"cannot write the view cache in {self.directory} ({exc.strerror or exc})",
                hint="set NSYSDIAG_CACHE_DIR or --cache-dir to a writable directory, "
                     "or pass --no-cache",
            ) from None
        registered = []
        try:
            with ThreadPoolExecutor(max_workers=1) as pool:
                # the ids of the strings the view uses are read from the export while the
                # launch calls are read from api_calls and sorted (10M kernels: about 0.1 s)
                ids = pool.submit(self._string_ids, spec) if spec.string_ids else None
                calls = LaunchCalls(self.con) if spec.launch_calls else None
                places = self._view_strings(ids.result()) if ids is not None else None
            for raw in spec.inputs:
                name = f"raw_{raw.alias}"
                reader = self._read(raw)
                if raw is spec.inputs[0]:
                    if places is not None:
                        reader = _placed(reader, spec.string_ids, places)
                    if calls is not None:
                        reader = calls.added_to(reader)
                self.con.register(name, reader)
                registered.append(name)
            # DuckDB cannot see how long an Arrow stream is (it guesses one row) and would
            # build its hash tables on the raw table: keep the join order as written, big
            # raw input on the probe side, small lookup tables on the build side.
            self.con.execute("SET disabled_optimizers = 'join_order,build_side_probe_side'")
            if spec.in_export_order:
                self.con.execute("SET preserve_insertion_order = true")
            self._run(f"COPY ({spec.sql}) TO {sql_string(tmp)} ({PARQUET_OPTIONS})")
            os.replace(tmp, target)
        finally:
            self.con.execute("RESET disabled_optimizers")
            self.con.execute("SET preserve_insertion_order = false")
            for name in registered:
                self.con.unregister(name)
            if os.path.exists(tmp):
                os.unlink(tmp)

    def _read(self, raw: RawInput, columns: dict[str, str] | None = None) -> pa.RecordBatchReader:
        tables = self.source.tables()
        table = next((t for t in raw.tables if t in tables), raw.tables[0])
        return self.source.read(table, columns or raw.columns, where=raw.where)

    def _string_ids(self, spec: ViewSpec) -> set[int]:
        """The ids in the columns ``spec.string_ids`` of the view's first raw input."""
        ids: set[int] = set()
        for batch in self._read(spec.inputs[0], dict.fromkeys(spec.string_ids, "int")):
            for column in batch.columns:
                ids.update(pc.unique(column.drop_null()).to_pylist())
        return ids

    def _view_strings(self, ids: set[int]) -> np.ndarray:
        """The ENUM ``_view_string`` of the strings with these ids (``_string_ids``) and the
        macro ``_view_string(place)``, the value of the id at that place (from 1) of the
        returned sorted ids (NULL where the export has no such string). Just those strings:
        kernel names are a few hundred among all the strings of the export, and an ENUM
        of every string would put them all in each dictionary page of the view's file, so
        that every GROUP BY on it would hash them all."""
        places = np.array(sorted(ids), dtype=np.int64)
        self.con.register("_view_string_ids", pa.table({"id": places,
                                                        "place": np.arange(1, len(places) + 1)}))
        try:
            self._run("DROP TYPE IF EXISTS _view_string")
            self._run("CREATE TYPE _view_string AS ENUM (SELECT DISTINCT value FROM _strings "
                      "SEMI JOIN _view_string_ids USING (id) WHERE value IS NOT NULL)")
            self._run("SET VARIABLE _view_strings = (SELECT list(s.value::_view_string ORDER BY "
                      "i.place) FROM _view_string_ids i LEFT JOIN _strings s USING (id))")
            self._run("CREATE OR REPLACE TEMP MACRO _view_string(place) AS "
                      "getvariable('_view_strings')[place]")
        finally:
            self.con.unregister("_view_string_ids")
        return places

    def _run(self, sql: str) -> None:
        if self.tracer:
            self.tracer(sql)
        try:
            self.con.execute(sql)
        except duckdb.Error as exc:
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, InputError):
                raise cause from None
            raise InputError(
                f"could not be normalized ({str(exc).splitlines()[0]})", path=str(self.source.path)
            ) from None

    def _ensure_helpers(self) -> None:
        if self._helpers_ready:
            return
        for macro in CHECK_MACROS:
            self._run(macro)
        strings = self.source.read("StringIds", {"id": "int", "value": "text"}).read_all()
        self.con.register("_strings_arrow", strings)
        self._run("CREATE OR REPLACE TEMP TABLE _strings AS "
                  "SELECT DISTINCT ON (id) id, value FROM _strings_arrow")
        self.con.unregister("_strings_arrow")
        # The category is ENUM typed: DuckDB writes it to Parquet from its seven values
        # instead of hashing the string of every call. (Names are not: an ENUM of every
        # string of the export makes each Parquet dictionary page hold them all, and a join
        # or GROUP BY on the column then hashes the whole dictionary for every vector.)
        self._run("DROP TYPE IF EXISTS _api_category")
        values = ", ".join(map(sql_string, API_CATEGORIES))
        self._run(f"CREATE TYPE _api_category AS ENUM ({values})")
        self._run(
            "CREATE OR REPLACE TEMP TABLE _api_names AS "
            f"SELECT id, n AS name, ({API_CATEGORY_SQL})::_api_category AS category FROM "
            "(SELECT id, regexp_replace(value, '_v[0-9]+$', '') AS n FROM _strings)"
        )
        for kind, (table, _, _) in ENUM_TABLES.items():
            rows = self.source.read(table, {"id": "int", "name": "text", "label": "text"}).read_all()
            arrow = enum_table(kind, [tuple(r.values()) for r in rows.to_pylist()])
            self.con.register(f"_enum_{kind}_arrow", arrow)
            self._run(f"CREATE OR REPLACE TEMP TABLE _enum_{kind} AS SELECT * FROM _enum_{kind}_arrow")
            self.con.unregister(f"_enum_{kind}_arrow")
        self._helpers_ready = True
