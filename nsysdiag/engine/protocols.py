"""What an analysis uses of the export it runs on: :class:`ReportLike` (one export) and
:class:`ReportSetLike` (several, for the cross-report analyses).

The analyses annotate with these, not with :class:`nsysdiag.report.Report`, which sits
above them and runs them (``Report.analysis``): the import contracts of
``[tool.importlinter]`` then hold with type-checking imports counted. ``Report`` and
``ReportSet`` satisfy them (``tests/test_layers.py`` checks their members and signatures).
They are defined here, below every stage, so that this package's helpers, which take a
report, can name them too; so a result of an analysis is ``Any`` here (its classes are in
``analyses``), and the probe and its view statuses are protocols too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import duckdb

from .workspace import Workspace

T = TypeVar("T")


@runtime_checkable
class ViewStatusLike(Protocol):
    """Whether one view has data, and if not, why (``nsysdiag.views.probe.ViewStatus``)."""

    #: "present", "empty" or "not_captured"
    status: str
    #: rows of the export's tables the view is made of
    source_rows: int
    #: why the view has no rows (empty when it has)
    reason: str
    #: the nsys option that would have captured it (empty when none would)
    hint: str

    @property
    def present(self) -> bool:
        """Whether the view has rows."""


@runtime_checkable
class ProbeLike(Protocol):
    """Which views of an export have data (``nsysdiag.views.probe.Probe``)."""

    #: whether the capture traced CUDA (without, no view of CUDA activity has rows)
    cuda_traced: bool

    def __getitem__(self, name: str) -> ViewStatusLike:
        """The status of view ``name``."""

    def present(self, name: str) -> bool:
        """Whether view ``name`` has rows."""

    def settle(self) -> None:
        """Decide every view's status now (before another thread reads the export)."""


@runtime_checkable
class ReportLike(Protocol):
    """One opened export, as the analyses and the engine's helpers use it
    (``nsysdiag.report.Report``)."""

    #: the export's path as given
    path: Path
    #: the directory of its cached views and results
    cache_path: Path
    #: the DuckDB connection its SQL runs on (a forked report has a cursor of its own)
    con: duckdb.DuckDBPyConnection
    #: scratch steps and the hand-overs between analyses
    workspace: Workspace
    #: the results computed on it, kept by ``analyses.results``
    results_memo: dict[str, Any]

    @property
    def probe(self) -> ProbeLike:
        """Which views have data."""

    def sql(self, query: str, params: Any = None) -> duckdb.DuckDBPyRelation:
        """A lazy relation of ``query`` over the views (those it names built first)."""

    def execute(self, query: str, params: Any = None) -> list[tuple]:
        """The rows of ``query`` over the views."""

    def ensure_views(self, *names: str) -> None:
        """Build (or load from the cache) views ``names`` now."""

    def analysis(self, name: str, **options: Any) -> Any:
        """The result of analysis ``name`` with ``options`` (computed once, then reused)."""

    def system_env(self) -> dict[str, str]:
        """The capture host's facts that nsys records (name -> value)."""

    def session_start_utc_ns(self) -> int | None:
        """Wall-clock time of the trace's t = 0, ns since the Unix epoch (None: not
        recorded)."""

    def diagnostics(self) -> list[tuple[int, str]]:
        """The capture's own warnings: (severity, text)."""


@runtime_checkable
class ReportSetLike(Protocol):
    """Several exports of one job (``nsysdiag.reportset.ReportSet``): a cross-report
    analysis reads each on its own with :meth:`map`."""

    paths: list[Path]  #: the exports, in the order given

    def __iter__(self) -> Iterator[ReportLike]:
        """The exports, opened, in the order given."""

    def __len__(self) -> int:
        """How many exports."""

    def map(self, fn: Callable[[ReportLike], T]) -> list[T]:
        """``fn(report)`` of each export, in the order given, each export opened for it
        (in this process or in a worker)."""
