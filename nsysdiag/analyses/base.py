"""The shape every analysis shares: SQL modules run over views, one frozen result object.

An analysis is a module in this package with

* a documented SQL file ``sql/<name>.sql`` whose header comment names its inputs, outputs
  and units; the file holds one or more queries (steps), each introduced by a line
  ``-- @query <table name>`` followed by one or more lines ``-- @needs a, b`` naming every
  relation the step reads: normalized views (``views/definitions.py``), other steps of
  the file (a step that creates a table, ``CREATE TEMP TABLE t AS``, is read as ``t``),
  and tables the module's Python registers under a name of its own (``_ranges_units``,
  ...); a view's name means the view. The declarations are no part of the step's SQL
  (:class:`Step`); ``tests/test_step_needs.py`` checks with DuckDB's parser that they
  name exactly what each step reads, and :func:`views_read` gives from them the views a
  step reads through the steps before it. A step that a later step reads may declare how
  it is kept (``-- @keep view``: a temporary view, computed again by each query that
  reads it, for a step that costs less so than written out and read back; a Parquet file
  by default; a ``CREATE TEMP TABLE`` step yields its table). The Python asks for
  output queries only (:func:`stepped`, ``Steps.query``); the engine makes the steps each
  reads from these declarations, in their order, once per block (``engine.steps``), and
  ``Steps.need`` makes the steps the Python reads itself. User values are bound as
  ``$parameters``, never formatted in;
* ``RESULT``: its result class, a frozen subclass of :class:`AnalysisResult` whose fields
  are the figures it measures (each documented with its unit, :func:`figure`);
* ``run(report, *, settings=None, **options) -> RESULT`` (or a bare
  :class:`AnalysisResult` when there is nothing to measure), its keyword arguments
  documented (the command line maps them to the options of ``nsysdiag <name> PATH`` in
  ``nsysdiag/cli/options.py``). It judges with the fields of
  :class:`nsysdiag.settings.Settings` it reads; it lists none of them: the results cache
  records which fields a run read (``analyses/results.py``);
* an accelerated pass (optional): a function of the SQL method's signature and results,
  registered for the output it computes (``engine.accelerate.register``: the analysis,
  the output, the input rows that decide); the analysis calls the registered
  ``Accelerator``, and the engine chooses. ``tests/test_accelerated.py`` runs every
  analysis with a registered pass both ways and compares the results;
* ``RUNS`` (optional, :class:`nsysdiag.engine.runner.Runs`): what its Python reads beside
  its SQL steps (the other analyses whose results it reads, an intermediate another's pass
  makes, views) and what it costs (one core, a large memory peak). The runner orders and
  overlaps a plan of analyses from these alone; ``tests/test_runner.py`` checks them
  against what each analysis reads.

Results are frozen: the figures are attributes (units in the names); ``summary`` is their
JSON form, made from the fields; ``tables`` named Arrow tables (per device, per stream,
the full distribution, ...), which a result class may also give as typed records
(:func:`records`). Their ``__str__`` and ``_repr_html_`` are built from
:mod:`nsysdiag.formatting`, not from the renderers, which sit above the analyses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from ..engine.database import values_checked
from ..engine.steps import KEEPS, Steps, bind, made
from ..formatting import dumps, format_rows, html_table
from ..views.definitions import STORED, VIEWS

if TYPE_CHECKING:
    import pandas as pd

    from ..engine.protocols import ReportLike as Report

OK, NOT_CAPTURED, EMPTY = "ok", "not_captured", "empty"

T = TypeVar("T")

_QUERY_MARK = re.compile(r"^--\s*@query\s+(\w+)\s*$", re.M)
#: the declaration lines right after ``-- @query NAME``: what the step reads (``@needs``),
#: how it is kept when a later query reads it (``@keep``)
_DECLARATION = re.compile(r"\A\s*--\s*@(needs|keep)\b([^\n]*)\n")
#: a step that creates a table yields that table, not a relation named after the step
_CREATES = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?TABLE\s+(\w+)", re.I)


@dataclass(frozen=True)
class Step:
    """One query of an analysis' SQL file: its name, its SQL (the text after the
    declarations, as :func:`run_query` runs it) and the relations it reads (``needs``, its
    ``-- @needs`` lines: normalized views, other steps of the file, tables the analysis'
    Python registers)."""

    name: str
    sql: str
    needs: tuple[str, ...]
    #: how the step is kept where a later query reads it (``-- @keep``,
    #: ``engine.steps.KEEPS``): a Parquet file (default) or a temporary view
    keep: str = "file"
    #: the steps of the same file it reads (the needs that name one, not a view)
    after: tuple[str, ...] = ()

    @property
    def yields(self) -> str:
        """The relation the step makes: the table a ``CREATE ... TABLE t AS`` step creates,
        else a relation named as the step (a view, a step file or a registered table)."""
        created = _CREATES.match(self.sql)
        return created.group(1) if created else self.name


def parse_steps(text: str, source: str = "SQL") -> dict[str, Step]:
    """The steps of an analysis' SQL file by name, in the file's order.

    Raises ValueError for a step without a ``-- @needs`` line or with a ``-- @keep`` that
    is none of ``engine.steps.KEEPS`` (``source`` names the file in the message)."""
    parts = _QUERY_MARK.split(text)
    out: dict[str, Step] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        needs: list[str] = []
        keep, declares_needs, declared = None, False, _DECLARATION.match(body)
        while declared is not None:
            if declared.group(1) == "needs":
                declares_needs = True
                needs += [n.strip() for n in declared.group(2).split(",") if n.strip()]
            else:
                keep = declared.group(2).strip()
                if keep not in KEEPS:
                    raise ValueError(f"{source}: step {name} keeps as {keep!r}, none of "
                                     f"{', '.join(KEEPS)}")
            body = body[declared.end():]
            declared = _DECLARATION.match(body)
        if not declares_needs:
            raise ValueError(f"{source}: step {name} declares no '-- @needs' line")
        out[name] = Step(name, body.strip().rstrip(";"), tuple(needs), keep or "file")
    by_yield = {step.yields: step.name for step in out.values()}
    return {name: dataclasses.replace(step, after=tuple(
        by_yield[n] for n in step.needs
        if n not in VIEWS and n not in STORED and n in by_yield and by_yield[n] != name))
        for name, step in out.items()}


@functools.cache
def load_steps(module: str) -> dict[str, Step]:
    """The steps of ``sql/<module>.sql`` by name (:func:`parse_steps`)."""
    text = resources.files(__package__).joinpath("sql", f"{module}.sql").read_text()
    return parse_steps(text, f"sql/{module}.sql")


@functools.cache
def load_sql(module: str) -> dict[str, str]:
    """The queries of ``sql/<module>.sql`` by name (each step's SQL, declarations left
    out)."""
    return {name: step.sql for name, step in load_steps(module).items()}


def views_read(module: str, *names: str) -> tuple[str, ...]:
    """The normalized views that the steps ``names`` of ``sql/<module>.sql`` read (all its
    steps without ``names``), directly or through the steps of the file they need, in the
    order of ``views.definitions.VIEWS``: what to build before running them, as their
    ``-- @needs`` declarations say."""
    steps = load_steps(module)
    by_yield = {step.yields: step for step in steps.values()}
    todo = [steps[n] for n in names] if names else list(steps.values())
    seen: set[str] = set()
    views: set[str] = set()
    while todo:
        step = todo.pop()
        if step.name in seen:
            continue
        seen.add(step.name)
        for need in step.needs:
            if need in VIEWS or need in STORED:
                views.add(STORED.get(need, need))
            elif need in by_yield:
                todo.append(by_yield[need])
    return tuple(v for v in VIEWS if v in views)


def stepped(report: Report, module: str, params: dict | None = None
            ) -> contextlib.AbstractContextManager[Steps]:
    """The steps of ``sql/<module>.sql`` for the duration of a block: each output query
    asked of it (``Steps.query``) runs after the steps it needs, made from their
    declarations (``-- @needs``, ``-- @keep``) each once and dropped at the block's end
    (``engine.steps``); ``params``: the values its steps and queries name as ``$name``."""
    return made(report, module, load_steps(module), params)


def run_query(report: Report, module: str, query: str, params: dict | None = None) -> pa.Table:
    """Run one named query of an analysis' SQL file and return an Arrow table."""
    sql = load_sql(module)[query]
    with values_checked(report.path, module):
        return report.sql(sql, bind(sql, params)).to_arrow_table()


def figure(doc: str, default: Any = None, *, key: str | None = None) -> Any:
    """A summary field of a result class: its documentation (with the unit) in the field's
    metadata, from which the JSON schema and the docs are generated.

    In a record of :func:`nested` (a direction's transfer figures, ...), ``key`` is the
    figure's JSON key as a template of ``{group}`` (the record field's name) and
    ``{name}`` (its own); the default is ``{group}_{name}``."""
    metadata = {"doc": doc} if key is None else {"doc": doc, "key": key}
    return field(default=default, metadata=metadata)


def nested(doc: str, record: type) -> Any:
    """A summary field holding a record of figures: a frozen dataclass whose fields are
    :func:`figure` fields with defaults (one direction of the transfers, ...).

    Its figures are attributes of the record (``result.htod.median_gbps``); in the JSON
    ``summary`` they stay flat keys (``htod_median_gbps``, see :func:`figure`'s ``key``),
    so that a nested record adds or renames no key of the documented format."""
    return field(default_factory=record, metadata={"doc": doc, "record": record})


def flat_key(group: str, f: dataclasses.Field) -> str:
    """The JSON key of figure ``f`` of the record held by field ``group``."""
    return f.metadata.get("key", "{group}_{name}").format(group=group, name=f.name)


def record_type(f: dataclasses.Field) -> type | None:
    """The record class a :func:`nested` field holds (None: a plain figure)."""
    return f.metadata.get("record")


@dataclass(frozen=True)
class AnalysisResult:
    """The outcome of one analysis: what every analysis' result class shares.

    Each analysis returns its own frozen subclass (``LaunchGapsResult``, ...) whose
    summary figures are documented attributes (units in the names: ``_ns``, ``_bytes``,
    ``_gbps``, ``_pct``); this base alone is what an analysis returns when there is
    nothing to measure (``not_captured``/``empty``, no figures).

    Attributes
    ----------
    analysis : str
        Name of the analysis (``launch_gaps``, ``transfers``, ...).
    status : str
        ``ok``; ``not_captured`` when the trace lacks the data (``message`` says which
        nsys option captures it); ``empty`` when it was captured but nothing happened.
    message : str
        One line for a human.
    tables : dict of str to pyarrow.Table
        Detail tables; ``main`` names the one shown first.
    findings : tuple of str
        What the analysis judged worth saying, one line each.
    summary : dict
        The figures as JSON scalars, by field name (read-only; made from the fields).
    """

    analysis: str
    status: str
    message: str = ""
    tables: dict[str, pa.Table] = field(default_factory=dict)
    main: str | None = None
    findings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == OK

    @classmethod
    def analysis_name(cls) -> str:
        """The analysis this class is the result of (``transfers`` for
        ``TransfersResult``: the default of its ``analysis`` field)."""
        default = cls.__dataclass_fields__["analysis"].default
        if not isinstance(default, str):
            raise TypeError(f"{cls.__name__} is the result of no one analysis")
        return default

    @classmethod
    def summary_fields(cls) -> tuple[dataclasses.Field, ...]:
        """The figures of this result class (its own fields, not the shared ones)."""
        return tuple(f for f in dataclasses.fields(cls) if f.name not in _BASE_FIELDS)

    @classmethod
    def summary_keys(cls) -> tuple[str, ...]:
        """The keys ``summary`` may have: one per figure, a record's figures flat
        (:func:`nested`)."""
        keys: list[str] = []
        for f in cls.summary_fields():
            record = record_type(f)
            keys += ([flat_key(f.name, g) for g in dataclasses.fields(record)]
                     if record is not None else [f.name])
        return tuple(keys)

    def reported(self) -> tuple[str, ...]:
        """The figures this result reports (the fields that make ``summary``): all of them
        when the analysis measured (status ``ok``), none otherwise; a class may say
        otherwise."""
        return tuple(f.name for f in self.summary_fields()) if self.ok else ()

    def figure_json(self, name: str) -> Any:
        """A figure as JSON-ready value (an enum as its value, records as dicts)."""
        return _json_value(getattr(self, name))

    @property
    def summary(self) -> dict[str, Any]:
        """The reported figures as a dict of JSON scalars (the JSON ``summary``); the
        figures of a record (:func:`nested`) as flat keys."""
        records = {f.name: record_type(f) for f in self.summary_fields()}
        out: dict[str, Any] = {}
        for name in self.reported():
            if records.get(name) is None:
                out[name] = self.figure_json(name)
                continue
            value = getattr(self, name)
            for g in dataclasses.fields(records[name]):
                out[flat_key(name, g)] = _json_value(getattr(value, g.name))
        return out

    @classmethod
    def from_summary(cls, analysis: str, status: str, message: str, summary: dict[str, Any],
                     tables: dict[str, pa.Table], main: str | None,
                     findings: tuple[str, ...]) -> AnalysisResult:
        """The result whose ``to_dict`` gave ``summary`` (the results cache reads it back).

        Raises KeyError for a summary key that is no field of the class."""
        if cls is AnalysisResult or not summary:
            return AnalysisResult(analysis, status, message, tables, main, findings)
        unknown = set(summary) - set(cls.summary_keys())
        if unknown:
            raise KeyError(f"{cls.__name__} has no field {', '.join(sorted(unknown))}")
        values = cls._figures_from_json(summary)
        for f in cls.summary_fields():
            record = record_type(f)
            if record is not None:
                values[f.name] = record(**{g.name: values.pop(flat_key(f.name, g))
                                           for g in dataclasses.fields(record)
                                           if flat_key(f.name, g) in values})
        return cls(status=status, message=message, tables=tables, main=main,
                   findings=findings, **values)

    @classmethod
    def _figures_from_json(cls, summary: dict[str, Any]) -> dict[str, Any]:
        """Field values from their JSON form (a class with records or enums converts)."""
        return dict(summary)

    def table(self, name: str | None = None) -> pa.Table:
        key = name or self.main or next(iter(self.tables), None)
        if key is None or key not in self.tables:
            raise KeyError(
                f"{self.analysis} has no table {name!r}; tables: {', '.join(self.tables)}"
            )
        return self.tables[key]

    def to_arrow(self, table: str | None = None) -> pa.Table:
        """A detail table as Arrow (the main one by default)."""
        return self.table(table)

    def to_pandas(self, table: str | None = None) -> pd.DataFrame:
        """A detail table as a pandas DataFrame (the main one by default)."""
        return self.table(table).to_pandas()

    def to_dict(self, tables: bool = True, max_rows: int | None = None) -> dict[str, Any]:
        """JSON-ready dict; ``tables=False`` keeps only the summary."""
        out: dict[str, Any] = {
            "analysis": self.analysis,
            "status": self.status,
            "message": self.message,
            "summary": self.summary,
            "findings": list(self.findings),
        }
        if tables:
            out["tables"] = {
                k: (t.slice(0, max_rows) if max_rows is not None else t).to_pylist()
                for k, t in self.tables.items()
            }
        return out

    def to_json(self, **kw: Any) -> str:
        return dumps(self.to_dict(**kw))

    def __str__(self) -> str:
        head = f"{self.analysis}: {self.status}" + (f" - {self.message}" if self.message else "")
        lines = [head]
        for k, v in self.summary.items():
            if not isinstance(v, (dict, list)):
                lines.append(f"  {k:<32} {v if not isinstance(v, float) else f'{v:.6g}'}")
        for f in self.findings:
            lines.append(f"  ! {f}")
        if self.tables:
            t = self.table()
            lines.append("")
            lines.append(
                format_rows(t.column_names, [tuple(r.values()) for r in t.slice(0, 20).to_pylist()])
            )
            if t.num_rows > 20:
                lines.append(f"  ... {t.num_rows - 20} more rows")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        parts = [
            html_table(
                ["figure", "value"],
                list(self.summary.items()),
                caption=f"{self.analysis}: {self.status} {self.message}",
            )
        ]
        if self.tables:
            t = self.table().slice(0, 50)
            parts.append(html_table(t.column_names, [tuple(r.values()) for r in t.to_pylist()]))
        return "".join(parts)


#: the fields every result has (the rest of a result class's fields are its figures)
_BASE_FIELDS = frozenset(f.name for f in dataclasses.fields(AnalysisResult))


def _json_value(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def records(table: pa.Table, record: type[T]) -> list[T]:
    """The rows of ``table`` as ``record`` dataclasses (one field per column it reads).

    Raises KeyError when the table lacks a column the record names: a renamed column
    fails here, not as a silently missing figure."""
    names = [f.name for f in dataclasses.fields(record)]  # type: ignore[arg-type]
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise KeyError(f"{record.__name__}: the table has no column {', '.join(missing)}")
    columns = table.select(names).to_pydict()
    return [record(*row) for row in zip(*(columns[n] for n in names))]


def not_captured(analysis: str, report: Report, *views: str) -> AnalysisResult | None:
    """A ``not_captured``/``empty`` result when any needed view has no rows, else None."""
    for view in views:
        st = report.probe[view]
        if not st.present:
            status = EMPTY if st.status == "empty" else NOT_CAPTURED
            hint = f" (capture with: {st.hint})" if st.hint and status == NOT_CAPTURED else ""
            return AnalysisResult(analysis, status, f"{view}: {st.reason}{hint}")
    return None
