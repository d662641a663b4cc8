"""GPU time per kernel name: instances, total, mean, median, min, max, stddev, share.

The same figures as NVIDIA's ``nsys stats --report cuda_gpu_kern_sum``, one row per
demangled kernel name, largest total GPU time first. CUDA graph nodes are included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import UsageError
from .base import OK, AnalysisResult, figure, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "kernel_summary"


@dataclass(frozen=True)
class KernelName:
    """One row of the ``per_name`` table: one kernel name's GPU time."""

    name: str  #: demangled kernel name
    short_name: str | None  #: the name without arguments and templates
    instances: int  #: executions
    total_ns: int  #: GPU time, ns
    avg_ns: float | None  #: mean duration, ns
    median_ns: float | None  #: median duration (linear interpolation), ns
    min_ns: int | None  #: shortest, ns
    max_ns: int | None  #: longest, ns
    stddev_ns: float | None  #: sample standard deviation, ns
    time_pct: float | None  #: share of all kernels' GPU time, %


@dataclass(frozen=True, kw_only=True)
class KernelSummaryResult(AnalysisResult):
    """GPU time per kernel name (``nsys stats --report cuda_gpu_kern_sum``). ``top_name``
    and ``top_time_pct`` are reported when the ``per_name`` table has a row.

    Tables: ``per_name`` (main).
    """

    analysis: str = field(default="kernel_summary", init=False)
    kernels: int = figure("kernel executions", 0)
    names: int = figure("distinct kernel names", 0)
    total_ns: int = figure("GPU time of all kernels, ns", 0)
    graph_kernels: int = figure("kernels run as CUDA graph nodes", 0)
    top_name: str | None = figure("the name with the most GPU time")
    top_time_pct: float | None = figure("its share of all kernels' GPU time, %")

    def per_name(self) -> list[KernelName]:
        """The ``per_name`` table as records (empty without it)."""
        table = self.tables.get("per_name")
        return records(table, KernelName) if table is not None else []

    def reported(self) -> tuple[str, ...]:
        names = super().reported()
        per_name = self.tables.get("per_name")
        if per_name is not None and per_name.num_rows == 0:
            names = tuple(n for n in names if n not in ("top_name", "top_time_pct"))
        return names


RESULT = KernelSummaryResult



def run(report: Report, *, top: int | None = None,
        settings: Settings | None = None) -> KernelSummaryResult | AnalysisResult:
    """Summarize kernel execution time per kernel name.

    Parameters
    ----------
    report : Report
        An opened export.
    top : int, optional
        Keep the ``top`` names with the most total GPU time (shares stay relative to all
        kernels). Default: every name.

    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    KernelSummaryResult
        figures: ``kernels`` (executions), ``names``, ``total_ns``, ``graph_kernels``,
        ``top_name``, ``top_time_pct``. ``tables``: ``per_name`` (main) with ``name``,
        ``short_name``, ``instances``, ``total_ns``, ``avg_ns``, ``median_ns``, ``min_ns``,
        ``max_ns``, ``stddev_ns`` (sample), ``time_pct``.

    Notes
    -----
    Medians interpolate linearly (``quantile_cont``), as ``nsys stats`` does; the standard
    deviation is the sample one (n - 1).
    """
    if top is not None and top < 1:
        raise UsageError(f"top must be a positive integer, got {top!r}")
    missing = not_captured(NAME, report, "kernels")
    if missing:
        return missing
    per_name = run_query(report, NAME, "per_name", {"top": top})
    summary = run_query(report, NAME, "totals").to_pylist()[0]
    first = per_name.slice(0, 1).to_pylist()
    findings: tuple[str, ...] = ()
    if first:
        summary["top_name"] = first[0]["name"]
        summary["top_time_pct"] = first[0]["time_pct"]
        if first[0]["time_pct"] is not None:  # NULL when no kernel has a positive duration
            findings = (
                f"{first[0]['short_name']} takes {first[0]['time_pct']:.1f}% of kernel time",
            )
    message = (
        f"{summary['kernels']} kernels of {summary['names']} names, "
        f"{summary['total_ns'] / 1e6:.3f} ms of GPU time"
    )
    return KernelSummaryResult(status=OK, message=message, tables={"per_name": per_name},
                               main="per_name", findings=findings, **summary)
