"""Scratch steps: intermediate queries of an analysis computed once and read by the next.

A step is a query of an analysis' SQL file (or a table Python computes) kept for the
duration of a block under its name, so the queries after it read it instead of
recomputing it. What a step computes, what it reads (``-- @needs``) and how it is kept
(``-- @keep``) are stated in the analysis' SQL; :class:`Steps` makes them from those
declarations alone: asking it for an output query makes every step the query needs,
directly or through other steps, in the order their needs give, each once, and drops
them at the end of the block. A step is kept

* as a Parquet file in the report's scratch directory (``file``, the default): a step
  over tens of millions of rows streams to disk instead of holding the memory that the
  queries after it need;
* as a temporary view (``-- @keep view``), computed again by each query that reads it:
  for a step that costs less so than written out and read back (one that projects a
  view's columns, a small aggregate);
* as the table it creates, for a step whose SQL is ``CREATE TEMP TABLE t AS ...``.

A table that Python computes is kept with :func:`step_file` and :func:`step_writer`, or
:func:`registered` as an Arrow table; a step already on the connection under its name
(such a table, or a step an enclosing block of the same analysis made) is read as it is.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

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


#: how a step is kept (``-- @keep``): a Parquet file (the default) or a temporary view
KEEPS = ("file", "view")


class Declared(Protocol):
    """A step as its SQL file declares it (``analyses.base.Step``)."""

    @property
    def name(self) -> str: ...

    @property
    def sql(self) -> str: ...

    @property
    def keep(self) -> str: ...

    @property
    def yields(self) -> str: ...

    @property
    def after(self) -> tuple[str, ...]:
        """The steps of the same file it reads (its ``-- @needs`` that name one)."""
        ...


def order(declared: Mapping[str, Declared], outputs: tuple[str, ...] = (),
          relations: tuple[str, ...] = (),
          present: Callable[[str], bool] = lambda name: False) -> list[str]:
    """The steps of ``declared`` that the queries ``outputs`` read, and the steps
    ``relations`` with those they read, directly or through other steps, each after the
    steps it reads (depth first, in the order of the needs); a step ``present`` already
    (by the relation it yields) is left out with what only it reads.

    Raises ValueError for steps that read one another."""
    out: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in out or present(declared[name].yields):
            return
        if name in visiting:
            raise ValueError(f"steps read one another: {', '.join(sorted(visiting))}")
        visiting.add(name)
        for before in declared[name].after:
            visit(before)
        visiting.discard(name)
        out.append(name)

    for output in outputs:
        for before in declared[output].after:
            visit(before)
    for name in relations:
        visit(name)
    return out


class Steps:
    """The steps of one analysis' SQL file on a report for the duration of a block (use
    :func:`made`): :meth:`query` runs an output query after making the steps it reads;
    :meth:`need` makes the steps that the analysis' Python reads itself."""

    def __init__(self, report: Any, module: str, declared: Mapping[str, Declared],
                 params: dict | None, stack: contextlib.ExitStack) -> None:
        self._report, self._module, self._declared = report, module, declared
        self._params = params or {}
        self._stack = stack

    def need(self, *relations: str) -> None:
        """Make the steps ``relations``, which Python reads, and the steps they read (each
        once per block)."""
        self._make_all(order(self._declared, relations=relations, present=self._present))

    def query(self, output: str, params: dict | None = None) -> pa.Table:
        """Query ``output`` as an Arrow table, after the steps it reads; ``params`` beside
        the block's (those the query names are bound)."""
        sql = self.text(output)
        with values_checked(self._report.path, self._module):
            return self._report.sql(sql, bind(sql, {**self._params, **(params or {})})
                                    ).to_arrow_table()

    def text(self, output: str) -> str:
        """The SQL of query ``output``, after the steps it reads: for Python that runs it
        its own way (streamed in batches, swept)."""
        self._make_all(order(self._declared, outputs=(output,), present=self._present))
        return self._declared[output].sql

    def lend(self, other: Any, *outputs: str) -> None:
        """Make the steps that the queries ``outputs`` read, and name them on ``other`` (a
        forked report, whose connection sees no temporary view of this one's) as here, for
        a thread that runs those queries on it."""
        self._make_all(order(self._declared, outputs=outputs, present=self._present))
        for name in order(self._declared, outputs=outputs):
            step = self._declared[name]
            if self._report.workspace.steps.get(step.yields) == self._module:
                shared(self._report, other, step.yields)
                other.workspace.steps[step.yields] = self._module

    def _make_all(self, names: list[str]) -> None:
        for name in names:
            self._make(self._declared[name])

    def _present(self, name: str) -> bool:
        """Whether relation ``name`` is on the connection already, to be read as it is: a
        step of this analysis that an enclosing block made, or a table Python made.

        Raises RuntimeError for a step of another analysis (of an enclosing block, which
        still reads it)."""
        owner = self._report.workspace.steps.get(name)
        if owner not in (None, self._module):
            raise RuntimeError(f"step {name} of {self._module} would replace the one of "
                               f"{owner} that an enclosing block reads")
        return owner is not None or _on_connection(self._report, name)

    def _make(self, step: Declared) -> None:
        made = self._report.workspace.steps
        if step.yields != step.name:  # a step that creates a table, as its SQL says
            with values_checked(self._report.path, self._module):
                self._report.sql(step.sql, bind(step.sql, self._params))
            self._stack.callback(self._drop, step.yields, "TABLE")
        elif step.keep == "view":
            self._report.sql(f"CREATE TEMP VIEW {step.yields} AS\n{step.sql}")
            self._stack.callback(self._drop, step.yields, "VIEW")
        else:
            target = self._stack.enter_context(step_file(self._report, self._module,
                                                         step.yields))
            with values_checked(self._report.path, self._module):
                self._report.sql(
                    f"COPY (\n{step.sql}\n) TO {sql_string(str(target))} ({STEP_OPTIONS})",
                    bind(step.sql, self._params),
                ).fetchall()
            expose(self._report, step.yields, target)
            self._stack.callback(made.pop, step.yields, None)
        made[step.yields] = self._module

    def _drop(self, name: str, kind: str) -> None:
        self._report.workspace.steps.pop(name, None)
        self._report.con.execute(f"DROP {kind} IF EXISTS {name}")


def _on_connection(report: Any, name: str) -> bool:
    """Whether a temporary relation ``name`` (a registered table, a view or table Python
    made) is on ``report``'s connection."""
    ((n,),) = report.con.execute(
        "SELECT count(*) FROM (SELECT view_name FROM duckdb_views() "
        "WHERE temporary AND view_name = $1 UNION ALL SELECT table_name FROM duckdb_tables() "
        "WHERE temporary AND table_name = $1)", [name]).fetchall()
    return bool(n)


@contextlib.contextmanager
def made(report: Any, module: str, declared: Mapping[str, Declared],
         params: dict | None = None) -> Iterator[Steps]:
    """The steps of ``declared`` (the SQL file of analysis ``module``) made as the block
    asks for the queries that read them (:class:`Steps`), dropped at its end; ``params``:
    the values the steps and queries name as ``$name``."""
    with contextlib.ExitStack() as stack:
        yield Steps(report, module, declared, params, stack)


@contextlib.contextmanager
def temp_views(report: Any, queries: Mapping[str, str], names: tuple[str, ...]
               ) -> Iterator[None]:
    """The queries ``names`` of ``queries`` named as temporary views for the duration of
    the block: for a relation whose SQL the Python chooses or builds (one of several
    queries by what the export holds, a query with a part made in Python); a step of an
    analysis' SQL file is made by :class:`Steps` from its declarations.
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
