"""Scratch steps: intermediate queries of an analysis computed once and read by the next.

A step is a query of an analysis' SQL file (or a table Python computes) kept for the
duration of a block under its name, so the queries after it read it instead of
recomputing it: as a Parquet file in the report's scratch directory (:func:`steps`,
:func:`step_file` with :func:`step_writer`), as a temporary view (:func:`temp_views`) or
as a registered Arrow table (:func:`registered`). What a step computes is stated in the
analysis' SQL; how it is kept is decided here.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import threads
from .database import sql_path, sql_string, values_checked

#: How analysis steps (scratch files on disk, read once or twice) are written: uncompressed,
#: since lz4 cost more to write and read than the bytes it saved
STEP_OPTIONS = "FORMAT parquet, COMPRESSION uncompressed, PARQUET_VERSION V2"


def bind(sql: str, params: dict | None) -> dict | None:
    """The ``params`` that ``sql`` names as ``$name`` (DuckDB refuses unused ones)."""
    used = set(re.findall(r"\$(\w+)", sql))
    return {k: v for k, v in (params or {}).items() if k in used} or None


@contextlib.contextmanager
def steps(
    report: Any, module: str, queries: Mapping[str, str], names: tuple[str, ...],
    params: dict | None = None,
) -> Iterator[None]:
    """Compute the queries ``names`` of ``queries`` (an analysis' SQL file) once, as
    temporary Parquet files.

    Each step (in order; a step may read the earlier ones) is written to a Parquet file in
    the report's scratch directory and named as a view for the duration of the block, so
    the output queries that read it do not recompute it. Files, not in-memory tables:
    a step over tens of millions of kernels streams to disk instead of holding the memory
    that the queries after it need.
    """
    with contextlib.ExitStack() as stack:
        for name in names:
            target = stack.enter_context(step_file(report, module, name))
            with values_checked(report.path, module):
                report.sql(
                    f"COPY (\n{queries[name]}\n) TO {sql_string(str(target))} "
                    f"({STEP_OPTIONS})",
                    bind(queries[name], params),
                ).fetchall()
            expose(report, name, target)
        yield


@contextlib.contextmanager
def temp_views(report: Any, queries: Mapping[str, str], names: tuple[str, ...]
               ) -> Iterator[None]:
    """The queries ``names`` of ``queries`` named as temporary views for the duration of
    the block.

    For a step that only projects a view's columns (no join, sort or aggregate): the
    queries after it read the view's file directly, which costs less than writing the
    step out and reading it back.
    """
    try:
        for name in names:
            report.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS\n{queries[name]}")
        yield
    finally:
        for name in names:
            report.con.execute(f"DROP VIEW IF EXISTS {name}")


def shared(report: Any, other: Any, *names: str) -> None:
    """Create the temporary views ``names`` of ``report`` on ``other`` too (a forked
    report: a temporary view belongs to its connection)."""
    for name in names:
        ((sql,),) = report.con.execute(
            "SELECT sql FROM duckdb_views() WHERE view_name = ? AND temporary", [name]
        ).fetchall()
        other.con.execute(sql)


@contextlib.contextmanager
def step_file(report: Any, module: str, name: str) -> Iterator[Path]:
    """A scratch Parquet path for step ``name``, removed (with its view) after the block.

    For a step that Python writes: write the file, then :func:`expose` it as ``name``.
    """
    target = report.workspace.scratch_dir() / f"{module}.{name}.{uuid.uuid4().hex}.parquet"
    try:
        yield target
    finally:
        report.con.execute(f"DROP VIEW IF EXISTS {name}")
        target.unlink(missing_ok=True)


@contextlib.contextmanager
def step_writer(target: Path, schema: pa.Schema) -> Iterator[Callable[[pa.Table], None]]:
    """A function that writes tables to a step that Python writes, in a thread of its own:
    Arrow encodes without the GIL, so the next table is computed meanwhile. No dictionary
    pages: step columns are mostly distinct integers, and trying a dictionary first costs
    more than the write itself. Uncompressed, as ``STEP_OPTIONS``: lz4 costs more to write
    than the bytes it saves. Integers delta-encoded, as DuckDB's
    format version 2 writes them: timestamps and ids in rough order take a few bits each,
    so the file is a fraction of the size and each read of it faster."""
    delta = {f.name: "DELTA_BINARY_PACKED" for f in schema if pa.types.is_integer(f.type)}
    stage = "writing step " + ".".join(target.name.split(".")[:2])
    with pq.ParquetWriter(target, schema, compression="none", use_dictionary=False,
                          column_encoding=delta) as out, threads.Workers(1, stage=stage) as pool:
        # the writer's error is raised by the next write (or at the end), once; an error of
        # the caller waits only for the write under way, within the stage bound
        pending: threads.Call | None = None

        def write(table: pa.Table) -> None:
            nonlocal pending
            if pending is not None:
                pending.result()
            pending = pool.submit(out.write_table, table)

        yield write
        if pending is not None:
            pending.result()


def expose(report: Any, name: str, target: Path) -> None:
    """Name a step's Parquet file as a temporary view."""
    report.con.execute(
        f"CREATE OR REPLACE TEMP VIEW {name} AS "
        f"SELECT * FROM read_parquet({sql_path(target)})"
    )


@contextlib.contextmanager
def registered(report: Any, name: str, table: pa.Table) -> Iterator[None]:
    """Expose an Arrow table to the report's SQL as ``name`` for the duration of a block."""
    report.con.register(name, table)
    try:
        yield
    finally:
        report.con.unregister(name)
