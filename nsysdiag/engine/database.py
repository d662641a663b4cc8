"""DuckDB connections and the database-wide settings the engine changes.

A setting such as ``preserve_insertion_order`` belongs to the whole database, not to one
cursor: it is changed here only, around the reads that need it (:func:`stored_order`).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ..config import MEMORY_ENV, memory_limit, spill_dir
from ..errors import InputError, UsageError

#: rows per batch of the engine's streamed reads
BATCH_ROWS = 1 << 20


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that never downloads or autoloads extensions."""
    config: dict[str, Any] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    if threads:
        config["threads"] = threads
    con = duckdb.connect(config=config)
    con.execute("SET enable_progress_bar = false")
    # views and analyses order explicitly; without this COPY buffers whole tables
    con.execute("SET preserve_insertion_order = false")
    # an ASOF join always runs as one (sorted, n log n): below this many estimated rows on
    # its left DuckDB runs it as a nested loop join with a per-row maximum instead, and an
    # estimate far under the real count made that a comparison of every row with every
    # other (the unit choice's look-up of each probe among a name's instances)
    con.execute("SET asof_loop_join_threshold = 0")
    spill = spill_dir()
    try:
        con.execute("SET memory_limit = ?", [memory_limit()])
    except duckdb.Error as exc:
        raise UsageError(f"bad ${MEMORY_ENV}: {str(exc).splitlines()[0]}") from None
    try:
        # DuckDB creates the spill directory but not its parents: a first run with --no-cache
        # (no cache directory yet) failed as soon as a view build spilled
        spill.mkdir(parents=True, exist_ok=True)
    except OSError:
        spill = Path(tempfile.gettempdir()) / "nsysdiag-spill"
    con.execute(f"SET temp_directory = {sql_string(str(spill))}")
    return con


@contextlib.contextmanager
def values_checked(path: Any, module: str) -> Iterator[None]:
    """Turn arithmetic overflow into an input error.

    Timestamps and sizes are validated in the views, yet sums of durations can still leave
    64 bits when an export holds absurd (but individually valid) values; that is a damaged
    input, not a bug, and gets one line instead of a traceback.
    """
    try:
        yield
    except (duckdb.ConversionException, duckdb.OutOfRangeException) as exc:
        raise InputError(
            f"{module}: values out of range ({str(exc).splitlines()[0]})",
            path=str(path),
            hint="the export holds corrupt timestamps, durations or sizes",
        ) from None


@contextlib.contextmanager
def stored_order(report: Any, sql: str, params: dict | None = None,
                 batch_rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatchReader]:
    """The rows of ``sql`` (run with ``report.sql``) streamed in batches in the order DuckDB
    reads them (a view written in the export's order: that order), with DuckDB's
    preserve_insertion_order on while they stream (a setting of the whole database, off
    otherwise)."""
    report.con.execute("SET preserve_insertion_order = true")
    reader = None
    try:
        reader = report.sql(sql, params).to_arrow_reader(batch_rows)
        yield reader
    finally:
        if reader is not None:
            reader.close()  # the connection takes no statement while a result is open
        report.con.execute("SET preserve_insertion_order = false")
