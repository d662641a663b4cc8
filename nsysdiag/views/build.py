"""Materialize normalized views as Parquet files and expose them to DuckDB.

A view is built the first time a query names it: its raw inputs are read (only the
columns it declares) as Arrow streams, its SQL runs in DuckDB, and the result streams into
a Parquet file of the cache entry, written once and published when complete
(:mod:`nsysdiag.views.cache`). Queries then read that file, so DuckDB pushes each query's
column list and filters down to Parquet.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..adapters.base import Source
from ..engine import threads
from ..engine.database import environment_error, sql_path, sql_string
from ..errors import InputError, ResourceError, StageTimeout
from . import _compiled
from .cache import ViewFiles, note
from .definitions import (
    API_CATEGORIES,
    API_CATEGORY_SQL,
    API_VERSION_STAMP,
    CHECK_MACROS,
    VIEWS,
    RawInput,
    Strings,
    ViewSpec,
)
from .enums import ENUM_TABLES, enum_table
from .launch import LaunchCalls, arrow_values

#: bump when a view's columns or meaning change, so old caches are not reused
VIEW_FORMAT = 12

#: How views are written. zstd level 1: faster to write than the default level 3 for a few
#: percent more bytes (snappy is as fast with twice the bytes). Format version 2 (delta
#: encoding of integers): faster to write, smaller, and faster to scan and sort. The
#: measurements are in docs/performance.md.
PARQUET_OPTIONS = "FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL 1, PARQUET_VERSION V2"


class _Unlisted(Exception):
    """A column of ``Strings`` holds an id outside the listed ones (``_placed``)."""


#: ids below this are placed by a table lookup (``_compiled.place_ids``; 4 bytes each)
PLACE_TABLE_LIMIT = 1 << 22


def _placed(reader: pa.RecordBatchReader, columns: tuple[str, ...], ids: np.ndarray,
            misses: list[str]) -> pa.RecordBatchReader:
    """``reader`` with each id in ``columns`` replaced by its place (from 1) in the sorted
    ``ids`` (``ViewStore._view_strings``). The stream stops at an id not among them, with
    its column appended to ``misses`` (DuckDB, reading the stream, keeps only the message
    of an exception)."""
    fields = {name: reader.schema.get_field_index(name) for name in columns}
    schema = reader.schema
    for name, i in fields.items():
        schema = schema.set(i, pa.field(name, pa.int64()))
    table = np.zeros(min(max(int(ids[-1]) + 1, 0), PLACE_TABLE_LIMIT) if len(ids) else 0,
                     dtype=np.int32)
    tabled = np.flatnonzero((ids >= 0) & (ids < len(table)))
    table[ids[tabled]] = tabled + 1

    def batches() -> Iterable[pa.RecordBatch]:
        for batch in reader:
            arrays = batch.columns
            for name, i in fields.items():
                values, valid = arrow_values(arrays[i])
                place = np.empty(len(values), dtype=np.int64)
                if _compiled.place_ids(values, valid, ids, table, place):
                    misses.append(name)
                    raise _Unlisted(f"{name} holds an id outside the listed strings")
                arrays[i] = pa.array(place, mask=~valid if arrays[i].null_count else None)
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return pa.RecordBatchReader.from_batches(schema, batches())


class ViewStore:
    """Builds the normalized views of one source into a directory of Parquet files."""

    def __init__(self, source: Source, con: duckdb.DuckDBPyConnection, directory: Path,
                 tracer: Callable[[str], None] | None = None,
                 unchanged: Callable[[], None] | None = None):
        self.source = source
        self.con = con
        self.directory = directory
        self.files = ViewFiles(directory)
        #: raises when the input changed since it was opened (called after each build)
        self.unchanged = unchanged
        self.tracer = tracer
        self._helpers_ready = False
        self._lock = threading.RLock()
        self._ready: set[str] = set()

    def built(self, name: str) -> bool:
        """Whether view ``name`` is ready to query without building it."""
        return name in self._ready

    def ensure(self, names: Iterable[str]) -> None:
        """Make sure each named view exists (building it, and what it depends on, if needed)."""
        # another thread (an analysis on a forked report) may be building one: wait for
        # it within the stage bound
        bound = threads.stage_timeout()
        if not self._lock.acquire(timeout=bound):
            raise StageTimeout("building views", bound, "the thread building a view")
        try:
            for name in names:
                if name in VIEWS and name not in self._ready:
                    self._ensure_one(VIEWS[name])
        finally:
            self._lock.release()

    def _ensure_one(self, spec: ViewSpec) -> None:
        self.ensure(spec.depends)
        target = self.files.lookup(spec.name) or self._build(spec)
        try:
            self._create_view(spec, target)
        except duckdb.Error as exc:
            # intact by its CRC-32 yet unreadable (written by another nsysdiag version
            # under the same key, say): build it again, once
            note(f"cached view {spec.name} in {self.directory} cannot be read "
                 f"({str(exc).splitlines()[0]}); rebuilding it")
            self.files.discard(spec.name)
            target = self._build(spec)
            self._create_view(spec, target)
        self._ready.add(spec.name)

    def _create_view(self, spec: ViewSpec, target: Path) -> None:
        columns = ", ".join(f"{spec.derived[c]} AS {c}" if c in spec.derived else c
                            for c in spec.columns) if spec.derived or spec.hidden else "*"
        self.con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS SELECT {columns} "
                         f"FROM read_parquet({sql_path(target)})")
        if spec.hidden:
            self.con.execute(f"CREATE OR REPLACE VIEW _{spec.name}_stored AS SELECT {columns}, "
                             f"{', '.join(spec.hidden)} FROM read_parquet({sql_path(target)})")

    def _build(self, spec: ViewSpec) -> Path:
        """Write view ``spec`` to a new file of the entry and publish it; returns the file
        to read (another process' when it published the same view first)."""
        self._ensure_helpers()
        try:
            file = self.files.new_file(spec.name)
        except OSError as exc:
            raise ResourceError(
                f"cannot write the view cache in {self.directory} ({exc.strerror or exc})",
                hint="set NSYSDIAG_CACHE_DIR or --cache-dir to a writable directory, "
                     "or pass --no-cache",
            ) from None
        try:
            try:
                self._write(spec, str(file), likely=True)
            except _Unlisted:
                self._write(spec, str(file), likely=False)
            if self.unchanged is not None:
                self.unchanged()  # what was read is one version of the input
            return self.files.publish(spec.name, file)
        except OSError as exc:
            file.unlink(missing_ok=True)
            raise environment_error(exc, self.directory) or ResourceError(
                f"cannot write the view cache in {self.directory} ({exc.strerror or exc})",
                hint="run again; `nsysdiag cache clear` if it persists") from None
        except BaseException:
            file.unlink(missing_ok=True)
            raise

    def _write(self, spec: ViewSpec, tmp: str, likely: bool) -> None:
        """Write the view to ``tmp``; with ``likely``, list the strings ``Strings.likely``
        names where it names any (raises ``_Unlisted`` when the rows use others)."""
        strings = spec.strings
        guess = likely and strings is not None and strings.likely is not None
        registered = []
        misses: list[str] = []
        try:
            with threads.Workers(1, stage=f"building view {spec.name}: string ids") as pool:
                # the ids of the strings the view uses are read from the export while the
                # launch calls are read from api_calls and sorted
                ids = (pool.submit(self._string_ids, spec)
                       if strings is not None and not guess else None)
                calls = LaunchCalls(self.con) if spec.launch_calls else None
                places = (self._view_strings(strings, ids.result() if ids is not None else None)
                          if strings is not None else None)
            for raw in spec.inputs:
                name = f"raw_{raw.alias}"
                reader = self._read(raw)
                if raw is spec.inputs[0]:
                    if places is not None:
                        reader = _placed(reader, strings.columns, places, misses)
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
            try:
                self._run(f"COPY ({spec.sql}) TO {sql_string(tmp)} ({PARQUET_OPTIONS})")
            except InputError:
                if misses:
                    raise _Unlisted(misses[0]) from None
                raise
        finally:
            self.con.execute("RESET disabled_optimizers")
            self.con.execute("SET preserve_insertion_order = false")
            for name in registered:
                self.con.unregister(name)

    def _read(self, raw: RawInput, columns: dict[str, str] | None = None) -> pa.RecordBatchReader:
        tables = self.source.tables()
        table = next((t for t in raw.tables if t in tables), raw.tables[0])
        return self.source.read(table, columns or raw.columns, where=raw.where)

    def _string_ids(self, spec: ViewSpec) -> set[int]:
        """The ids in the columns ``spec.strings`` of the view's first raw input."""
        ids: set[int] = set()
        for batch in self._read(spec.inputs[0], dict.fromkeys(spec.strings.columns, "int")):
            for column in batch.columns:
                ids.update(pc.unique(column.drop_null()).to_pylist())
        return ids

    def _view_strings(self, strings: Strings, ids: set[int] | None) -> np.ndarray:
        """The ENUM ``_view_string`` of the strings with these ids (``_string_ids``; None:
        those ``strings.likely`` names) and the macros ``_view_string(place)``, the value
        of the id at that place (from 1) of the returned sorted ids (NULL where the export
        has no such string), and ``_view_<c>(place)`` for each other column ``c`` of
        ``strings.table``. Just those strings: kernel names are a few hundred among all
        the strings of the export (see ``Strings``)."""
        if ids is None:
            places = self.con.execute(f"SELECT DISTINCT id FROM {strings.table} "
                                      f"WHERE {strings.likely} ORDER BY id").fetchnumpy()["id"]
            places = np.asarray(places, dtype=np.int64)
        else:
            places = np.array(sorted(ids), dtype=np.int64)
        table = strings.table
        self.con.register("_view_string_ids", pa.table({"id": places,
                                                        "place": np.arange(1, len(places) + 1)}))
        try:
            extra = f" UNION SELECT {sql_string(strings.fallback)}" if strings.fallback else ""
            self._run("DROP TYPE IF EXISTS _view_string")
            self._run(f"CREATE TYPE _view_string AS ENUM (SELECT DISTINCT value FROM {table} "
                      f"SEMI JOIN _view_string_ids USING (id) WHERE value IS NOT NULL{extra})")
            others = [c for c in self.con.sql(f"SELECT * FROM {table} LIMIT 0").columns
                      if c not in ("id", "value")]
            for column, expr in (("string", "s.value::_view_string"),
                                 *((c, f"s.{c}") for c in others)):
                self._run(f"SET VARIABLE _view_{column}s = (SELECT list({expr} ORDER BY "
                          f"i.place) FROM _view_string_ids i LEFT JOIN {table} s USING (id))")
                self._run(f"CREATE OR REPLACE TEMP MACRO _view_{column}(place) AS "
                          f"getvariable('_view_{column}s')[place]")
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
            other = environment_error(exc, self.directory)  # Ctrl-C, disk full, ...
            if other is not None:
                raise other from None
            stuck = threads.quoted_timeout(str(exc))  # a reader's thread gave up waiting
            if stuck is not None:
                raise stuck from None
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
        # instead of hashing the string of every call. API names without their version
        # stamp, with their category, for the api_calls view (``Strings``).
        self._run("DROP TYPE IF EXISTS _api_category")
        values = ", ".join(map(sql_string, API_CATEGORIES))
        self._run(f"CREATE TYPE _api_category AS ENUM ({values})")
        self._run(
            "CREATE OR REPLACE TEMP TABLE _api_names AS "
            f"SELECT id, n AS value, ({API_CATEGORY_SQL})::_api_category AS category FROM "
            f"(SELECT id, regexp_replace(value, {sql_string(API_VERSION_STAMP)}, '') AS n "
            "FROM _strings)"
        )
        for kind, (table, _, _) in ENUM_TABLES.items():
            columns = {"id": "int", "name": "text", "label": "text"}
            rows = self.source.read(table, columns).read_all()
            arrow = enum_table(kind, [tuple(r.values()) for r in rows.to_pylist()])
            self.con.register(f"_enum_{kind}_arrow", arrow)
            self._run(f"CREATE OR REPLACE TEMP TABLE _enum_{kind} AS "
                      f"SELECT * FROM _enum_{kind}_arrow")
            self.con.unregister(f"_enum_{kind}_arrow")
        self._helpers_ready = True
