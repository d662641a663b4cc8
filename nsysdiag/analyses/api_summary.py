"""API summary: where the host's CUDA time went, per CUDA API call name.

Every traced CUDA runtime and driver call (``--trace=cuda``), per call name: how many
calls, their time in all (summed over threads), its share of every call's time, the
median and longest call, on how many threads, and how many failed (returned another
value than cudaSuccess). What ``nsys stats --report cuda_api_sum`` lists, as a typed
result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import OK, AnalysisResult, figure, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "api_summary"


@dataclass(frozen=True)
class ApiCall:
    """One row of the ``per_name`` table: one CUDA API call name."""

    name: str  #: the call (cudaLaunchKernel, cudaMemcpyAsync, ...)
    calls: int  #: traced calls of that name
    total_ns: int  #: time in them, summed over threads, ns
    share_pct: float | None  #: share of every call's time, %
    failed: int  #: calls that returned another value than cudaSuccess


@dataclass(frozen=True, kw_only=True)
class ApiSummaryResult(AnalysisResult):
    """CUDA API calls per name (``sql/api_summary.sql`` defines them).

    Tables: ``per_name`` (main; one row per call name, most time first).
    """

    analysis: str = field(default="api_summary", init=False)
    calls: int = figure("traced CUDA API calls", 0)
    total_ns: int = figure("time in them, summed over threads, ns", 0)
    names: int = figure("distinct call names", 0)
    threads: int = figure("threads that made them", 0)
    failed: int = figure("calls that returned another value than cudaSuccess", 0)

    def top(self, k: int = 3) -> list[ApiCall]:
        """The ``k`` call names with the most time."""
        return records(self.tables["per_name"].slice(0, k), ApiCall)


RESULT = ApiSummaryResult


def run(report: Report, *, settings: Settings | None = None) -> ApiSummaryResult | AnalysisResult:
    """Summarize the traced CUDA API calls per call name.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    ApiSummaryResult
        ``calls``, ``total_ns``, ``names``, ``threads``, ``failed``; table ``per_name``
        (main: ``name``, ``calls``, ``total_ns``, ``share_pct``, ``median_ns``,
        ``max_ns``, ``threads``, ``failed``).
    """
    missing = not_captured(NAME, report, "api_calls")
    if missing:
        return missing
    per_name = run_query(report, NAME, "per_name")
    summary = run_query(report, NAME, "summary").to_pylist()[0]
    failed = f", {summary['failed']} failed" if summary["failed"] else ""
    return ApiSummaryResult(
        status=OK, tables={"per_name": per_name}, main="per_name",
        message=f"{summary['calls']} CUDA API calls of {summary['names']} names on "
                f"{summary['threads']} threads{failed}",
        **summary)
