"""SQLite exports (``nsys export --type sqlite``), read with the ADBC SQLite driver.

Why ADBC: measured on this project's 2-core machine (``docs/load-paths.md`` in the shared
docs), it reads projected columns 3-6x faster than the stdlib ``sqlite3`` module, works with
any DuckDB version (DuckDB's own SQLite scanner pins DuckDB 1.5.5 and would be downloaded
at run time), and is a small Apache Arrow project. Every query names its columns, so only
what a view needs leaves SQLite.

The file is opened with ``mode=ro&immutable=1``: SQLite takes no locks and writes nothing,
so the input's bytes and mtime never change. SQLite then also ignores a ``-wal`` file
beside it: an export whose WAL holds data is refused (:func:`refuse_pending_log`) rather
than read without that data.

Every read is bounded (``docs/concurrency.md``): nsys exports hold plain tables only, so a
view, a virtual table or a table with generated columns in place of an nsys table is
refused (reading one runs whatever SQL it holds, which may never end); a statement on the
export is interrupted once it has run longer than ``NSYSDIAG_STAGE_TIMEOUT``, or when the
source is closed; and a table whose b-tree claims more rows than the file can hold (a
damaged or crafted file whose pages point to one another over and over) is refused by its
row count, before anything scans it.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path

import pyarrow as pa

from ..engine import threads
from ..errors import InputError, NsysdiagError, StageTimeout
from . import sqlite_pages
from .base import Source

SQLITE_MAGIC = b"SQLite format 3\x00"

#: parallel cursors for a big table, and the row count from which a table counts as big
READERS = 2
PARALLEL_MIN_ROWS = 200_000
#: rows from which integer columns are decoded from the pages (``sqlite_pages``); below
#: it SQLite is as quick as loading the compiled decoder (numba itself is imported anyway
#: by every command that builds the kernels view: docs/performance.md)
FAST_MIN_ROWS = 100_000
#: rows from which ``any_nonzero`` decodes the column from the pages instead of SQLite's
#: EXISTS, which may stop at the first row
NONZERO_PAGES_MIN_ROWS = 1_000_000
#: the same once this file's page reader runs (the decoder loaded, so only the decoding
#: is compared with SQLite's cursors)
FAST_LOADED_MIN_ROWS = 50_000
#: file size from which row counts come from the page headers
FAST_MIN_BYTES = 256 << 20
#: rows per Arrow batch (the driver's default, 1024, costs a queue hand-off per 1024 rows)
BATCH_ROWS = 65_536


#: the fewest bytes a row takes in the file: the 2-byte pointer to its cell on a leaf page
#: (the cell itself takes more); a table that counts more rows than the file has room for
#: has a damaged or crafted b-tree
MIN_ROW_BYTES = 2

#: seconds SQLite's count(*) may take before rows are counted one by one instead
#: (``SqliteSource._count_rows``); a healthy export's count takes a small fraction of it
COUNT_QUICK_S = 5.0

#: the first bytes of a rollback journal that holds a transaction (a "hot" journal)
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
#: bytes of a WAL file's header: a WAL file longer than this holds frames
WAL_HEADER_BYTES = 32

#: the schema SQL of a view and of a virtual table (for a SQLite without ``table_list``)
_VIEW_SQL = re.compile(r"\s*CREATE\s+(TEMP\w*\s+)?VIEW\b", re.IGNORECASE)
_VIRTUAL_SQL = re.compile(r"\s*CREATE\s+VIRTUAL\b", re.IGNORECASE)

#: what the sqlite3 module raises on a damaged file: its error, or UnicodeDecodeError when
#: the message quotes damaged schema text that is not valid UTF-8
DB_ERRORS = (sqlite3.DatabaseError, UnicodeDecodeError)


def _message(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return exc.object.decode("utf-8", "replace")
    return str(exc)


def _uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def refuse_pending_log(path: Path, head: bytes) -> None:
    """Raise :class:`InputError` when changes to the database at ``path`` lie in a log
    beside it: a ``-wal`` file with frames (a WAL-mode database, ``head`` being its first
    100 bytes) or a hot ``-journal``.

    The export is read ``immutable``, which ignores both (reading them would need SQLite
    to write its lock or shared-memory files beside the input); read without them, the
    tables would miss the WAL's rows, or hold half of an interrupted transaction.
    """
    wal_mode = len(head) >= 20 and head[18] == 2 and head[19] == 2
    log = Path(f"{path}-wal")
    if wal_mode and log.is_file() and log.stat().st_size > WAL_HEADER_BYTES:
        raise InputError(
            f"the export is in WAL mode and {log.name} holds changes not yet in the file",
            path=str(path),
            hint="checkpoint it into the file, e.g. `sqlite3 FILE 'PRAGMA "
                 "wal_checkpoint(TRUNCATE)'` on a copy of both files, then read the copy",
        )
    log = Path(f"{path}-journal")
    hot = False
    if log.is_file():  # never open a FIFO put in its place: that blocks
        try:
            with log.open("rb") as fh:
                hot = fh.read(len(JOURNAL_MAGIC)) == JOURNAL_MAGIC
        except OSError:
            pass
    if hot:
        raise InputError(
            f"{log.name} holds an unfinished transaction: the file may be half written",
            path=str(path),
            hint="open a copy of both files once with sqlite3 to roll it back",
        )


class _Slow(Exception):
    """A statement ran past the short bound its caller gave (``SqliteSource._fetch``)."""


class SqliteSource(Source):
    """A SQLite export file."""

    kind = "sqlite"

    def __init__(self, path: Path):
        super().__init__(path)
        self._tables: dict[str, dict[str, str]] | None = None
        #: what each name that is not a plain table is ("view", "virtual table", ...)
        self._refused: dict[str, str] = {}
        self._counts: dict[str, int] = {}
        self._closing = False
        #: statements running on the connection (:meth:`_fetch`), which close() ends first
        self._running = 0
        self._idle = threading.Condition()
        # open (connection, cursor) pairs: closed by close() if never drained
        self._streams: set = set()
        self._pages: sqlite_pages.PageReader | None = None
        with path.open("rb") as fh:
            refuse_pending_log(path, fh.read(100))
        try:
            self._db = sqlite3.connect(_uri(path), uri=True, check_same_thread=False)
            self._db.text_factory = lambda b: b.decode("utf-8", "replace")
            self.tables()
        except DB_ERRORS as exc:
            raise InputError(f"not a readable SQLite database ({_message(exc)})",
                             path=str(path)) from None

    def tables(self) -> dict[str, dict[str, str]]:
        if self._tables is None:
            what = "the table list"
            found = self._fetch(
                what, "SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')")
            # what SQLite made of each entry's SQL (the type column is only a label):
            # 'table', 'view', 'virtual' or 'shadow'; SQLite 3.37 and later
            kinds = {r[1]: r[2] for r in self._fetch(what, "PRAGMA main.table_list")}
            tables, refused = {}, {}
            for name, kind, sql in found:
                # (cid, name, type, notnull, default, pk, hidden): hidden 2 and 3 are
                # generated columns, computed by an expression on every read
                cols = self._fetch(what, f"PRAGMA table_xinfo({_quote(name)})")
                tables[name] = {c[1]: (c[2] or "").upper() for c in cols if c[6] != 1}
                kind = kinds.get(name, kind)
                if kind == "view" or _VIEW_SQL.match(sql or ""):
                    refused[name] = "a view"
                elif kind == "virtual" or _VIRTUAL_SQL.match(sql or ""):
                    refused[name] = "a virtual table"
                elif any(c[6] in (2, 3) for c in cols):
                    refused[name] = "a table with generated columns"
            self._tables, self._refused = tables, refused
        return self._tables

    def _readable(self, table: str) -> None:
        """Raise :class:`InputError` when ``table`` is not a plain table: reading a view or
        a virtual table runs code of the file's own making, which may never end."""
        self.tables()
        if table in self._refused:
            raise InputError(
                f"{table} is {self._refused[table]}, not a plain table: nsys exports hold "
                "none, and reading it would run what the file defines, which may never end",
                path=str(self.path), hint="export the report again with nsys")

    def _fetch(self, what: str, sql: str, params: tuple = (), *,
               seconds: float | None = None) -> list[tuple]:
        """All rows of one statement on the export, interrupted once it has run longer
        than the stage bound (``engine.threads.stage_timeout``), or ``seconds``, or when
        the source is closed.

        A progress handler would not do: SQLite's count(*) walks the b-tree's pages
        without calling it, and an interrupt reaches that walk too. An interrupt stops
        every statement of the connection: one stopped by another's is run again.

        Raises
        ------
        InputError
            Past the stage bound, or closed meanwhile.
        _Slow
            Past ``seconds``, when that is shorter than the stage bound.
        """
        stage = threads.stage_timeout()
        bound = stage if seconds is None else min(seconds, stage)
        while True:
            fired = threading.Event()

            def interrupt(fired: threading.Event = fired) -> None:
                fired.set()
                self._db.interrupt()

            timer = threading.Timer(bound, interrupt)
            timer.daemon = True
            with self._idle:
                if self._closing:
                    raise InputError(f"reading {what} stopped: the export was closed",
                                     path=str(self.path))
                self._running += 1
            timer.start()
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if str(exc) != "interrupted":
                    raise
                if self._closing:
                    raise InputError(f"reading {what} stopped: the export was closed",
                                     path=str(self.path)) from None
                if fired.is_set() and bound < stage:
                    raise _Slow() from None
                if fired.is_set():
                    raise InputError(
                        f"reading {what} took longer than {bound:g} s and was stopped",
                        path=str(self.path),
                        hint=f"a damaged or crafted export; {threads.STAGE_TIMEOUT_ENV} "
                             "sets this bound",
                    ) from None
            finally:
                timer.cancel()
                with self._idle:
                    self._running -= 1
                    self._idle.notify_all()

    def row_count(self, table: str) -> int:
        if table not in self.tables():
            return 0
        self._readable(table)
        if table not in self._counts:
            size = self.path.stat().st_size
            n = self._count_pages(table)
            if n is None:
                try:
                    n = self._count_rows(table, size // MIN_ROW_BYTES)
                except DB_ERRORS as exc:
                    raise self._error(table, exc) from None
            if n * MIN_ROW_BYTES > size:
                raise InputError(
                    f"table {table} claims {n:,} rows, more than a file of {size:,} bytes "
                    "can hold (its b-tree is damaged or crafted)", path=str(self.path))
            self._counts[table] = n
        return self._counts[table]

    def _count_rows(self, table: str, most: int) -> int:
        """count(*), or, when that takes longer than ``COUNT_QUICK_S``, the rows counted one
        by one up to one more than ``most`` (the most the file can hold).

        count(*) sums the row counts of the leaf pages the b-tree names, without reading
        the rows: quick, but endless on a b-tree whose pages name the same pages over and
        over. Counting rows stops one past ``most``: a file's worth of rows at worst.
        """
        t = _quote(table)
        try:
            ((n,),) = self._fetch(table, f"SELECT count(*) FROM {t}", seconds=COUNT_QUICK_S)
        except _Slow:
            ((n,),) = self._fetch(table, f"SELECT count(*) FROM (SELECT 1 FROM {t} "
                                         f"LIMIT {most + 1})")
        return n

    def _count_pages(self, table: str) -> int | None:
        """Rows counted from the leaf pages' headers in a big file (``sqlite_pages``), or
        None: the headers give the count without reading the records, as count(*) does."""
        if self.path.stat().st_size < FAST_MIN_BYTES:
            return None
        try:
            return self._page_reader().rows(self._root_page(table))
        except sqlite_pages.Unsupported:
            return None

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
        """Stream the rows: integer columns of a big table straight from its pages
        (``sqlite_pages``), anything else through SQLite."""
        self._readable(table)
        fast_min = FAST_MIN_ROWS if self._pages is None else min(FAST_MIN_ROWS,
                                                                 FAST_LOADED_MIN_ROWS)
        if (
            where is None
            and all(kind == "int" for kind in columns.values())
            and self.row_count(table) >= fast_min
        ):
            try:
                return self._read_pages(table, columns)
            except sqlite_pages.Unsupported:
                pass
        return self._read_sqlite(table, columns, where)

    def _read_pages(self, table: str, columns: Mapping[str, str]) -> pa.RecordBatchReader:
        """The fast path; where it stops (a value or page it does not read), SQLite reads
        the rows after the last one it handed out."""
        layout = self._layout(table, columns)
        reader = self._page_reader()
        names = list(columns)
        schema = pa.schema([(n, pa.int64()) for n in names])
        progress: list[int | None] = [None]

        def batches() -> Iterator[pa.RecordBatch]:
            try:
                yield from reader.batches(layout, names, progress)
            except sqlite_pages.Unsupported:
                rest = None if progress[0] is None else f"rowid > {progress[0]}"
                for batch in self._read_sqlite(table, columns, rest):
                    yield pa.record_batch(batch.columns, schema=schema)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def _page_reader(self) -> sqlite_pages.PageReader:
        if self._pages is None:
            self._pages = sqlite_pages.PageReader(self.path)
        return self._pages

    def _root_page(self, table: str) -> int:
        """The root page of a table's b-tree, for the fast path."""
        try:
            found = self._fetch(
                table, "SELECT rootpage FROM sqlite_master WHERE type = 'table' AND name = ?",
                (table,))
        except DB_ERRORS:
            raise sqlite_pages.Unsupported("no schema") from None
        found = found[0] if found else None
        if not found or not isinstance(found[0], int) or found[0] < 1:
            raise sqlite_pages.Unsupported("no root page")
        return found[0]

    def _layout(self, table: str, columns: Mapping[str, str]) -> sqlite_pages.TableLayout:
        """Root page and column positions of a rowid table, for the fast path."""
        root = self._root_page(table)
        try:
            info = self._fetch(table, f"PRAGMA table_xinfo({_quote(table)})")
        except DB_ERRORS:
            raise sqlite_pages.Unsupported("no schema") from None
        # (cid, name, type, notnull, default, pk, hidden): hidden or generated columns are
        # not stored as written; a default would fill records shorter than the table
        keys = [r for r in info if r[5]]
        alias = keys[0][1] if len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" else None
        names = list(columns)
        column_map, rowid_column = [], -1
        for _, name, _, _, default, _, hidden in info:
            if hidden:
                raise sqlite_pages.Unsupported("hidden or generated columns")
            out = names.index(name) if name in columns else -1
            if out >= 0 and default is not None:
                raise sqlite_pages.Unsupported("a column with a default value")
            if name == alias:
                rowid_column, out = out, -1
            column_map.append(out)
        return sqlite_pages.TableLayout(root, tuple(column_map), rowid_column)

    def _read_sqlite(
        self, table: str, columns: Mapping[str, str], where: str | None
    ) -> pa.RecordBatchReader:
        """Stream the rows through SQLite; big tables are read as rowid ranges on parallel
        threads.

        SQLite decodes rows on one core per cursor, which bounds a single stream; the ADBC
        driver releases the GIL while it reads, so ``READERS`` cursors on disjoint rowid
        ranges fill a bounded queue while DuckDB consumes it. Row order is not kept (views
        never rely on it).
        """
        query = self._select(table, columns, where)
        ranges = self._rowid_ranges(table)
        if ranges:
            joiner = " AND " if where else " WHERE "
            queries = [f"{query}{joiner}rowid BETWEEN {lo} AND {hi}" for lo, hi in ranges]
        else:
            queries = [query]
        readers = [self._open_stream(table, q) for q in queries]
        if len(readers) == 1:
            return self._guarded(table, *readers[0])
        return pa.RecordBatchReader.from_batches(
            readers[0][1].schema, self._interleave(table, readers)
        )

    def _rowid_ranges(self, table: str) -> list[tuple[int, int]]:
        """Disjoint rowid ranges covering ``table`` for parallel reads (none when small)."""
        if READERS < 2 or self.row_count(table) < PARALLEL_MIN_ROWS:
            return []
        try:
            # one aggregate per query: SQLite then reads the first or last row of the
            # b-tree only, where min() and max() together would scan every row
            t = _quote(table)
            ((lo, hi),) = self._fetch(
                table, f"SELECT (SELECT min(rowid) FROM {t}), (SELECT max(rowid) FROM {t})")
        except DB_ERRORS:  # WITHOUT ROWID or damaged: read in one stream
            return []
        if lo is None:
            return []
        step = (hi - lo) // READERS + 1
        return [(lo + i * step, min(hi, lo + (i + 1) * step - 1)) for i in range(READERS)]

    def _open_stream(self, table: str, query: str):
        """(handle, reader) of one query, on a connection of its own, since SQLite
        serializes the statements of one connection. The cursor must outlive the reader."""
        import adbc_driver_sqlite.dbapi as adbc

        con = cur = None
        try:
            con = adbc.connect(_uri(self.path))
            cur = con.cursor()
            cur.adbc_statement.set_options(**{"adbc.sqlite.query.batch_rows": str(BATCH_ROWS)})
            handle = (con, cur)
            self._streams.add(handle)
            cur.execute(query)
            return handle, cur.fetch_record_batch()
        except Exception as exc:  # the driver raises its own DB-API error types
            for obj in (cur, con):
                if obj is not None:
                    obj.close()
            self._streams.discard((con, cur))
            raise self._error(table, exc) from None

    def _error(self, table: str, exc: BaseException) -> InputError:
        return InputError(
            f"table {table} cannot be read ({_message(exc).splitlines()[0]})", path=str(self.path)
        )

    def _finish(self, handle) -> None:
        if handle in self._streams:
            self._streams.discard(handle)
            con, cur = handle
            cur.close()
            con.close()

    def _guarded(self, table: str, handle, reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
        def batches():
            try:
                yield from reader
            except Exception as exc:
                raise self._error(table, exc) from None
            finally:
                self._finish(handle)

        return pa.RecordBatchReader.from_batches(reader.schema, batches())

    def _interleave(self, table: str, readers: list) -> Iterator[pa.RecordBatch]:
        """Batches of several streams, each drained by its own thread into one bounded
        hand-off (``engine.threads.merge``): the first reader error is raised here once and
        stops the other readers; a consumer that stops early stops them too."""
        try:
            yield from threads.merge([r for _, r in readers], stage=f"reading {table}")
        except StageTimeout:
            # a reader thread may still be inside its cursor: leave the handle open
            for handle, _ in readers:
                self._streams.discard(handle)
            raise
        except NsysdiagError:
            raise
        except Exception as exc:
            raise self._error(table, exc) from None
        finally:
            for handle, _ in readers:
                self._finish(handle)

    def any_nonzero(self, table: str, column: str) -> bool:
        """One EXISTS query in SQLite; on a big table, the column decoded from its pages
        (faster than SQLite's scan, which may read every row)."""
        if column not in self.tables().get(table, {}):
            return False
        if self.row_count(table) >= NONZERO_PAGES_MIN_ROWS:
            return super().any_nonzero(table, column)
        try:
            ((found,),) = self._fetch(
                table, f"SELECT EXISTS (SELECT 1 FROM {_quote(table)} "
                f"WHERE {_quote(column)} IS NOT NULL AND {_quote(column)} <> 0)")
        except DB_ERRORS as exc:
            raise self._error(table, exc) from None
        return bool(found)

    def identity(self) -> str:
        st = self.path.stat()
        key = f"sqlite|{self.path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
        return hashlib.sha256(key.encode()).hexdigest()[:24]

    def close(self) -> None:
        # a statement still running on another thread (abandoned past a bound) is
        # interrupted, and the connection closed once it has ended: closed under it, the
        # statement would read freed memory
        with self._idle:
            self._closing = True
            self._db.interrupt()
            ended = self._idle.wait_for(lambda: not self._running,
                                        timeout=threads.stage_timeout())
        if ended:
            self._db.close()
        self._pages = None  # unmaps the file
        for handle in list(self._streams):  # streams never read to the end (an error midway)
            self._finish(handle)
