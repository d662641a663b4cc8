"""OS blocking: where host threads blocked in traced OS runtime calls, per call name.

The time threads spent in poll, futex, ioctl, read and the other OS calls nsys traces
(``--trace=osrt``): per call name, how many calls, on how many threads, for how long in
all (summed over threads) and at most. Its rule (:func:`rule`) is the diagnosis' check C2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..findings import Finding
from ..formatting import fmt_ns
from ..layers import Layer
from .base import OK, AnalysisResult, figure, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "os_blocking"


@dataclass(frozen=True)
class BlockingCall:
    """One row of the ``per_name`` table: one OS call name."""

    name: str  #: the OS call (poll, futex, ...)
    calls: int  #: traced calls of that name
    total_ns: int  #: time in them, summed over threads, ns
    threads: int  #: threads that made the call


@dataclass(frozen=True, kw_only=True)
class OsBlockingResult(AnalysisResult):
    """OS runtime calls per name (``sql/os_blocking.sql`` defines them).

    Tables: ``per_name`` (main; one row per call name, most blocked time first).
    """

    analysis: str = field(default="os_blocking", init=False)
    calls: int = figure("traced OS runtime calls", 0)
    total_ns: int = figure("time in them, summed over threads, ns", 0)
    threads: int = figure("threads that made them", 0)

    def top(self, k: int = 3) -> list[BlockingCall]:
        """The ``k`` call names with the most blocked time."""
        return records(self.tables["per_name"].slice(0, k), BlockingCall)


RESULT = OsBlockingResult


def run(report: Report, *, settings: Settings | None = None) -> OsBlockingResult | AnalysisResult:
    """Measure the traced OS runtime calls per call name.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    OsBlockingResult
        ``calls``, ``total_ns``, ``threads``; table ``per_name`` (main: ``name``,
        ``calls``, ``total_ns``, ``threads``, ``max_ns``).
    """
    missing = not_captured(NAME, report, "os_runtime")
    if missing:
        return missing
    per_name = run_query(report, NAME, "per_name")
    summary = run_query(report, NAME, "summary").to_pylist()[0]
    return OsBlockingResult(
        status=OK, tables={"per_name": per_name}, main="per_name",
        message=f"{summary['calls']} OS runtime calls on {summary['threads']} threads",
        **summary)


def rule(result: OsBlockingResult, settings: Settings) -> list[Finding]:
    """Check C2 of the diagnosis: where CPU threads blocked, the three call names with the
    most blocked time, as information (CPU time outside CUDA calls is measured per unit
    by the ranges analysis; this adds what the threads waited on). Reads no setting."""
    rows = result.top(3)
    if not rows:
        return []
    ev = tuple(f"{c.name}: {c.calls} calls, {fmt_ns(c.total_ns)} blocked"
               + (f", summed over {c.threads} threads" if c.threads > 1 else " in total")
               for c in rows)
    return [Finding(Layer.CPU, "info", "Where CPU threads blocked (OS runtime trace)", ev,
                    check="C2", weight=0.05)]
