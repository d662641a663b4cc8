"""DuckDB connections and the database-wide settings the engine changes.

A setting such as ``preserve_insertion_order`` belongs to the whole database, not to one
cursor: it is changed here only, around the reads that need it (:func:`stored_order`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ..config import MEMORY_ENV, memory_limit, spill_dir
from ..errors import InputError, NsysdiagError, ResourceError, UsageError

#: rows per batch of the engine's streamed reads
BATCH_ROWS = 1 << 20


def sql_string(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def sql_path(path: str | os.PathLike) -> str:
    """A SQL string literal that DuckDB's file readers (``read_parquet``, ``read_csv``, ...)
    take for exactly the file ``path``.

    Those readers take glob patterns: a directory named ``pq[1]`` would read ``pq1``'s
    files, and one named ``runs*`` every run's. Here ``*``, ``?`` and ``[`` are each
    written as a class of one character (``[*]``), which matches only itself; the path is
    made absolute, so that a leading ``~`` is not taken for the home directory.
    """
    return sql_string(_glob_escaped(os.path.abspath(path)))


def _glob_escaped(path: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", path)


#: errors of the environment (OSError errno, and DuckDB's message for it)
_RESOURCE_ERRNOS = {errno.ENOSPC: "No space left on device", errno.EFBIG: "File too large",
                    errno.EDQUOT: "Disk quota exceeded"}


def environment_error(exc: BaseException, cache: Path | None = None) -> BaseException | None:
    """The error to raise in place of ``exc`` when the environment caused it, not the
    input: KeyboardInterrupt for DuckDB's interrupt (Ctrl-C during a query), or a
    :class:`ResourceError` for DuckDB's memory limit, a full disk, a file size limit
    (``ulimit -f``), or a file missing from the ``cache`` directory (removed by a
    concurrent ``nsysdiag cache clear``). None for any other error."""
    if isinstance(exc, NsysdiagError | KeyboardInterrupt):
        return None
    if isinstance(exc, duckdb.InterruptException):
        return KeyboardInterrupt()
    text = str(exc)
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ResourceError(
            f"out of memory: DuckDB's memory limit ({memory_limit()}) is too small for this "
            "trace", hint=f"raise {MEMORY_ENV}, e.g. {MEMORY_ENV}=8GB")
    if isinstance(exc, OSError) and exc.errno in _RESOURCE_ERRNOS:
        where = f" writing {exc.filename}" if exc.filename else ""
        return ResourceError(f"{_RESOURCE_ERRNOS[exc.errno]}{where}",
                             hint="free space or raise the limit and run again; "
                                  "the input is not at fault")
    reason = next((m for m in _RESOURCE_ERRNOS.values() if m in text), None)
    if isinstance(exc, duckdb.Error) and reason:
        file = re.search(r'file \\?"([^"\\]+)', text)
        return ResourceError(reason + (f" writing {file.group(1)}" if file else ""),
                             hint="free space or raise the limit and run again; "
                                  "the input is not at fault")
    if cache is not None and str(cache) in text and (
            isinstance(exc, FileNotFoundError | duckdb.IOException)
            or "No files found" in text):
        return ResourceError(f"the view cache {cache} was removed while in use",
                             hint="a concurrent `nsysdiag cache clear`? run again")
    return None


def connect(threads: int | None = None, spill: Path | None = None
            ) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection that never downloads or autoloads extensions,
    spilling to ``spill`` (default: ``config.spill_dir()``)."""
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
    with contextlib.suppress(duckdb.CatalogException):  # a DuckDB without the setting
        con.execute("SET asof_loop_join_threshold = 0")
    spill = spill or spill_dir()
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


#: the statements SQL that a user wrote may hold (``nsysdiag sql``): queries, which write
#: nothing (DESCRIBE, SHOW, SUMMARIZE and FROM-first queries are queries too)
USER_STATEMENTS = frozenset({"SELECT"})


def refuse_writes(con: duckdb.DuckDBPyConnection, query: str) -> None:
    """Raise :class:`UsageError` unless every statement of ``query`` is a query.

    COPY, EXPORT, ATTACH, INSTALL, LOAD, SET, PRAGMA, CALL, CREATE, INSERT, ... could
    write a file (the input export, a cached view that later runs would read), load
    code or change the database's settings; none of them is needed to ask a question of
    the views.
    """
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as exc:
        raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None
    for statement in statements:
        kind = statement.type.name
        if kind not in USER_STATEMENTS:
            raise UsageError(
                f"only queries (SELECT, DESCRIBE, ...) may run here, not {kind}",
                hint="nsysdiag sql reads the views; it never writes, attaches or installs")


def lock_down(con: duckdb.DuckDBPyConnection, readable: Iterable[Path], *,
              files: bool = False) -> None:
    """Settings for SQL that a user wrote, on ``con`` for good.

    DuckDB's file access is switched off (``enable_external_access``), but for the
    directories ``readable`` (the views' Parquet files), unless ``files``; the
    configuration is locked, so that no statement switches it on again. With
    :func:`refuse_writes`, nothing the user's SQL does can change a file.
    """
    if not files:
        # each directory as written and as :func:`sql_path` escapes it in the views
        dirs = {os.path.join(os.path.abspath(d), "") for d in readable}
        dirs |= {_glob_escaped(d) for d in dirs}
        con.execute(f"SET allowed_directories = [{', '.join(map(sql_string, sorted(dirs)))}]")
        con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


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
