"""`Report`: one opened export, its normalized views, and SQL over them.

Its readable forms (``str(report.info())``, the notebook table of ``Report._repr_html_``)
are built here from the neutral helpers of :mod:`nsysdiag.formatting`: the domain never
imports the renderers (``[tool.importlinter]`` in pyproject.toml).
"""

from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ._version import __version__
from .adapters.base import Source
from .adapters.detect import open_source
from .adapters.process import only_process
from .config import cache_dir as default_cache_dir
from .engine.database import connect, environment_error, lock_down, refuse_writes
from .engine.workspace import Workspace
from .errors import InputError, ResourceError, UsageError
from .facade import AnalysisMethods
from .fileio import content_identity
from .formatting import (
    cuda_version,
    driver_version,
    fmt_bytes,
    fmt_ns,
    format_rows,
    html_table,
)
from .views.build import VIEW_FORMAT, ViewStore
from .views.cache import note
from .views.definitions import STORED, VIEWS
from .views.probe import Probe, cached_probe

if TYPE_CHECKING:
    from .analyses.base import AnalysisResult


#: SQL comments: ``-- ...`` to the end of the line, and ``/* ... */``
_SQL_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


@dataclass(frozen=True)
class ReportInfo:
    """What `nsysdiag info` prints: versions, GPUs, processes, time span, row counts."""

    path: str
    format: str
    nsys_version: str | None
    schema_version: str | None
    gpus: list[dict]
    processes: list[dict]
    start_ns: int | None
    end_ns: int | None
    duration_ns: int | None
    row_counts: dict[str, int]
    captured: dict[str, dict]
    extra: dict[str, Any] = field(default_factory=dict)
    driver_version: str | None = None  #: NVIDIA driver version (TARGET_INFO_SYSTEM_ENV)
    cuda_version: str | None = None  #: CUDA version of the driver, e.g. 12.2

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        """The text ``nsysdiag info`` prints."""
        info = self
        lines = [
            f"report      {info.path}",
            f"format      {info.format}",
            f"nsys        {info.nsys_version or 'unknown (exporter older than 2022.1)'}",
            f"schema      {info.schema_version or 'unknown'}",
            f"driver      {info.driver_version or 'not recorded'}"
            + (f"  (CUDA {info.cuda_version})" if info.cuda_version else ""),
            f"time span   {fmt_ns(info.duration_ns)}"
            + (f"  [{info.start_ns} .. {info.end_ns}] ns" if info.start_ns is not None else ""),
            "",
            "GPUs",
        ]
        if info.gpus:
            lines.append(
                format_rows(
                    ["id", "name", "bus", "memory", "SMs", "cc"],
                    [
                        [
                            g["device_id"],
                            g["name"],
                            g["bus_location"],
                            fmt_bytes(g["total_memory_bytes"]),
                            g["sm_count"],
                            g["compute_capability"],
                        ]
                        for g in info.gpus
                    ],
                )
            )
        else:
            lines.append("  none recorded")
        lines += ["", "processes with CUDA activity"]
        if info.processes:
            lines.append(
                format_rows(
                    ["pid", "name", "kernels", "api_calls"],
                    [[p["pid"], p["name"], p["kernels"], p["api_calls"]] for p in info.processes],
                )
            )
        else:
            lines.append("  none")
        lines += ["", "captured"]
        lines.append(
            format_rows(
                ["view", "status", "source rows", "note"],
                [
                    [
                        k,
                        v["status"],
                        info.row_counts[k],
                        (v["reason"] + (f" [{v['hint']}]" if v["hint"] else "")),
                    ]
                    for k, v in info.captured.items()
                ],
                max_width=100,
            )
        )
        return "\n".join(lines)


class Report(AnalysisMethods):
    """An Nsight Systems export opened for analysis.

    Opening is cheap: views are built (and cached as Parquet) the first time a query
    names them. Use :func:`nsysdiag.open` to make one. Each analysis is a method
    (:class:`~nsysdiag.facade.AnalysisMethods`: ``rep.transfers()``, ``rep.ranges()``,
    ...) returning its typed result.

    Parameters
    ----------
    path
        A SQLite export, a Parquet directory export, or a raw ``.nsys-rep``/``.qdrep``
        (exported with the ``nsys`` CLI into the cache first).
    cache
        Keep normalized views in the cache directory between runs (default). With False
        they live in a temporary directory removed by :meth:`close`.
    cache_dir
        Cache root; default ``$NSYSDIAG_CACHE_DIR`` or the user cache directory.
    nsys
        Path of the ``nsys`` executable for raw reports.
    tracer
        Called with every SQL statement nsysdiag runs (``--explain``).
    pid
        Read only this process of the export (one rank of a multi-process capture):
        ``adapters.process``. Its views are cached apart from the whole export's. Other
        processes' work on the GPUs it used is left out too, so it cannot be named as
        other GPU work: a note on stderr says where that is so.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        cache: bool = True,
        cache_dir: str | Path | None = None,
        nsys: str | None = None,
        threads: int | None = None,
        tracer: Callable[[str], None] | None = None,
        pid: int | None = None,
    ):
        self.path = Path(path)
        self.source: Source = open_source(self.path, nsys=nsys)
        self.pid = pid
        if pid is not None:
            try:
                self.source = only_process(self.source, pid)
                shared = self.source.sharing()
            except BaseException:
                self.source.close()
                raise
            for device, others in shared.items():
                note(f"process {pid} shares GPU {device} with process"
                     f"{'es' if len(others) > 1 else ''} {', '.join(map(str, others))}: "
                     "their work there is left out with --pid (diagnose the whole export "
                     "to see it as other GPU work)")
        self.tracer = tracer
        self._tmp: str | None = None
        try:
            #: the input's content identity when opened (``fileio.content_identity``)
            self.identity = content_identity(self.source.path)
        except OSError as exc:
            self.source.close()
            raise InputError(f"cannot be read ({exc.strerror or exc})", path=str(path)) from None
        try:
            if cache:
                root = Path(cache_dir) if cache_dir else default_cache_dir()
                process = f"-pid{pid}" if pid is not None else ""
                directory = (root / "views"
                             / f"{self.identity}{process}-v{VIEW_FORMAT}-{__version__}")
                spill = root / "spill"  # under the cache directory given, not the default
            else:
                # nothing under the cache directory: views and spill files in a temporary
                # directory, removed by close()
                self._tmp = tempfile.mkdtemp(prefix="nsysdiag-")
                directory = Path(self._tmp)
                spill = directory / "spill"
        except OSError as exc:
            self.source.close()
            raise ResourceError(f"cannot make a temporary directory ({exc.strerror or exc})",
                                hint="free space in the temporary directory ($TMPDIR)") from None
        self.cache_path = directory
        self.con = connect(threads, spill)
        self._store = ViewStore(self.source, self.con, directory, tracer, self.check_unchanged)
        self._probe: Probe | None = None
        #: analysis results computed on this report (see ``analyses.results``)
        self.results_memo: dict[str, Any] = {}
        #: the engine's state for this report: scratch steps, hand-overs between analyses
        self.workspace = Workspace(spill)

    def check_unchanged(self) -> None:
        """Raise :class:`InputError` when the input's content changed since it was opened
        (it was being written or replaced while read): what was read may mix two versions
        and must not be kept or reported."""
        try:
            same = content_identity(self.source.path) == self.identity
        except OSError:
            same = False
        if not same:
            raise InputError("changed while it was being read (results would mix two versions)",
                             path=str(self.path),
                             hint="run again once whatever writes it has finished")

    # -- querying -------------------------------------------------------------------------
    def sql(self, query: str, params: Any = None) -> duckdb.DuckDBPyRelation:
        """Run SQL over the normalized views; returns a lazy DuckDB relation.

        Views named in the query are built on first use. Pass user values through
        ``params`` (``$name`` or ``?`` placeholders), never by formatting them into SQL.
        """
        self._store.ensure(self._views_named(query))
        if self.tracer:
            self.tracer(query)
        try:
            return self.con.sql(query, params=params)
        except duckdb.Error as exc:
            other = environment_error(exc, self.cache_path)  # Ctrl-C, cache removed, ...
            if other is not None:
                raise other from None
            raise UsageError(f"SQL error: {str(exc).splitlines()[0]}") from None

    def user_sql(self, query: str, *, files: bool = False) -> duckdb.DuckDBPyRelation:
        """Run SQL that a user wrote (``nsysdiag sql``) over the views, so that it can
        change nothing: only queries are taken, and DuckDB may read no file but the views'
        own (any file with ``files``), its configuration locked.

        The lock stays on this report's connection: run no analysis on the report after.

        Raises
        ------
        UsageError
            A statement that is not a query, or SQL that DuckDB refuses.
        """
        refuse_writes(self.con, query)
        self._store.ensure(self._views_named(query))
        lock_down(self.con, [self.cache_path], files=files)
        return self.sql(query)

    def _views_named(self, query: str) -> list[str]:
        """The views ``query`` names."""
        try:
            # on the report's own connection: DuckDB's default connection is shared by all
            # threads, and two threads naming tables on it at once deadlocked (one held the
            # GIL waiting for the connection, the other the connection waiting for the GIL)
            names = self.con.get_table_names(query)
        except duckdb.Error:
            # the parser refuses some parameterized statements (LIMIT $n): match names
            # instead, outside comments (a comment naming a view builds nothing)
            code = _SQL_COMMENT.sub(" ", query)
            names = {v for v in (*VIEWS, *STORED) if re.search(rf"\b{v}\b", code)}
        return [STORED.get(n, n) for n in names if n in VIEWS or n in STORED]

    def execute(self, query: str, params: Any = None) -> list[tuple]:
        """Run SQL over the views and fetch all rows as tuples."""
        return self.sql(query, params).fetchall()

    def view(self, name: str) -> duckdb.DuckDBPyRelation:
        """One normalized view as a relation."""
        if name not in VIEWS:
            raise UsageError(f"no view named {name!r}; views: {', '.join(VIEWS)}")
        return self.sql(f"SELECT * FROM {name}")

    def analysis(self, name: str, **options: Any) -> AnalysisResult:
        """Run analysis ``name`` (or reuse its cached result); see ``nsysdiag.analyses``.
        Its method (``rep.<name>(...)``) does the same with typed options and result."""
        from .analyses import results

        return results.run(self, name, **options)

    def ensure_views(self, *names: str) -> None:
        """Build (or load from cache) the named views now."""
        self._store.ensure(names)

    @property
    def probe(self) -> Probe:
        """Which views have data, and why not where they do not."""
        if self._probe is None:
            self._probe = cached_probe(self.source, self.cache_path, self._graph_nodes,
                                       self.check_unchanged)
        return self._probe

    def _graph_nodes(self) -> bool | None:
        """Whether some kernel carries a graph node id, from the kernels view once built
        (one column of its file), else None (the probe then scans the export)."""
        if not self._store.built("kernels"):
            return None
        return bool(self.execute("SELECT count(graph_node_id) > 0 FROM kernels")[0][0])

    # -- metadata ---------------------------------------------------------------------------
    def _meta(self) -> dict[str, str]:
        tables = self.source.tables()
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if table in tables:
                rows = self.source.read(table, {"name": "text", "value": "text"}).read_all()
                return {r["name"]: r["value"] for r in rows.to_pylist() if r["name"]}
        return {}

    def system_env(self) -> dict[str, str]:
        """The capture host's facts nsys records (``TARGET_INFO_SYSTEM_ENV``: name -> value,
        e.g. ``NvDriverVersion``, ``CudaDriverVersion``); empty when the export has none."""
        if "TARGET_INFO_SYSTEM_ENV" not in self.source.tables():
            return {}
        rows = self.source.read("TARGET_INFO_SYSTEM_ENV",
                                {"name": "text", "value": "text"}).read_all()
        return {r["name"]: r["value"] for r in rows.to_pylist()
                if r["name"] and r["value"] is not None}

    def session_start_utc_ns(self) -> int | None:
        """Wall-clock time of the trace's t = 0, ns since the Unix epoch
        (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``); None when the export lacks it."""
        if "TARGET_INFO_SESSION_START_TIME" not in self.source.tables():
            return None
        rows = self.source.read("TARGET_INFO_SESSION_START_TIME",
                                {"utcEpochNs": "int"}).read_all().column(0).to_pylist()
        return next((int(v) for v in rows if v is not None and v > 0), None)

    def diagnostics(self) -> list[tuple[int, str]]:
        """The capture's own warnings (``DIAGNOSTIC_EVENT``: severity, text; severity 1
        information, 2 warning, 3 error); empty when the export has none."""
        if "DIAGNOSTIC_EVENT" not in self.source.tables():
            return []
        rows = self.source.read("DIAGNOSTIC_EVENT", {"severity": "int", "text": "text"}).read_all()
        return [(int(r["severity"] or 0), r["text"]) for r in rows.to_pylist() if r["text"]]

    def info(self) -> ReportInfo:
        """Versions, GPUs, processes, time span, row counts and what was captured."""
        meta = self._meta()
        pr = self.probe
        gpus = self.sql(
            "SELECT device_id, name, bus_location, total_memory_bytes, sm_count, "
            "compute_capability FROM devices ORDER BY device_id"
        ).fetchall()
        gpu_cols = [
            "device_id",
            "name",
            "bus_location",
            "total_memory_bytes",
            "sm_count",
            "compute_capability",
        ]
        active = [v for v in ("kernels", "api_calls") if pr.present(v)]
        procs: list[dict] = []
        if active:
            union = " UNION ALL ".join(
                f"SELECT global_pid, pid, count(*) AS n, '{v}' AS v FROM {v} GROUP BY ALL"
                for v in active
            )
            rows = self.sql(
                f"SELECT u.pid, any_value(p.name), "
                f"sum(n) FILTER (WHERE v = 'kernels'), sum(n) FILTER (WHERE v = 'api_calls') "
                f"FROM ({union}) u LEFT JOIN processes p ON p.global_pid = u.global_pid "
                f"GROUP BY u.pid ORDER BY u.pid"
            ).fetchall()
            procs = [
                {"pid": r[0], "name": r[1], "kernels": int(r[2] or 0), "api_calls": int(r[3] or 0)}
                for r in rows
            ]
        start, end = self._time_span(active)
        env = self.system_env()
        return ReportInfo(
            driver_version=driver_version(env.get("NvDriverVersion")),
            cuda_version=cuda_version(env.get("CudaDriverVersion")),
            path=str(self.path),
            format=self.source.kind,
            nsys_version=meta.get("EXPORT_PRODUCT_VERSION"),
            schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
            gpus=[dict(zip(gpu_cols, g)) for g in gpus],
            processes=procs,
            start_ns=start,
            end_ns=end,
            duration_ns=None if start is None or end is None else end - start,
            row_counts={k: v.source_rows for k, v in pr.views.items()},
            captured={
                k: {"status": v.status, "reason": v.reason, "hint": v.hint}
                for k, v in pr.views.items()
            },
        )

    def _time_span(self, active: list[str]) -> tuple[int | None, int | None]:
        if "ANALYSIS_DETAILS" in self.source.tables():
            rows = self.source.read(
                "ANALYSIS_DETAILS", {"startTime": "int", "stopTime": "int"}
            ).read_all()
            spans = [
                (r["startTime"], r["stopTime"])
                for r in rows.to_pylist()
                if r["startTime"] is not None and r["stopTime"] is not None
            ]
            if spans:
                return min(s for s, _ in spans), max(e for _, e in spans)
        if not active:
            return None, None
        union = " UNION ALL ".join(
            f"SELECT min(start_ns) s, max(end_ns) e FROM {v}" for v in active
        )
        ((s, e),) = self.execute(f"SELECT min(s), max(e) FROM ({union})")
        return s, e

    # -- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection and remove temporary files (the input is never touched)."""
        try:
            if self._probe is not None:
                with contextlib.suppress(InputError, duckdb.Error, OSError):
                    self._probe.settle()  # so that the cached probe is complete
            self.con.close()
        finally:
            self.source.close()
            self.workspace.close()
            if self._tmp:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<nsysdiag.Report {str(self.path)!r} ({self.source.kind})>"

    def _repr_html_(self) -> str:
        rows = [[k, v.status, v.source_rows, v.reason] for k, v in self.probe.views.items()]
        return html_table(
            ["view", "status", "source rows", "note"],
            rows,
            caption=f"nsysdiag report {self.path} ({self.source.kind})",
        )


def open(path: str | Path, **kwargs: Any) -> Report:  # noqa: A001 - mirrors builtins.open on purpose
    """Open an Nsight Systems export (SQLite, Parquet directory or raw report).

    Examples
    --------
    >>> import nsysdiag
    >>> with nsysdiag.open("examples/gpu-jitter.sqlite") as rep:   # doctest: +SKIP
    ...     rep.sql("SELECT count(*) FROM kernels").fetchone()
    """
    try:
        return Report(path, **kwargs)
    except InputError:
        raise
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or exc})", path=str(path)) from None
