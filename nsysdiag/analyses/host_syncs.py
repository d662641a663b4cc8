"""Host synchronization waits: time host threads spent blocked waiting for the GPU.

Per call name and per thread: how often the host blocked in cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize (and their driver forms) or a synchronous
cudaMemcpy, for how long in total, and the median and P99 wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import OK, AnalysisResult, figure, not_captured, stepped

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "host_syncs"


@dataclass(frozen=True, kw_only=True)
class HostSyncsResult(AnalysisResult):
    """Host synchronization waits (the outermost blocking sync and synchronous memcpy
    calls of each thread; ``sql/host_syncs.sql`` defines them).

    Tables: ``per_call`` (main; one row per call name), ``per_thread`` (one row per thread
    and call name).
    """

    analysis: str = field(default="host_syncs", init=False)
    waits: int = figure("waits (outermost blocking calls)", 0)
    threads: int = figure("threads that waited", 0)
    total_ns: int = figure("time blocked, all waits together, ns", 0)
    p50_ns: float | None = figure("median wait, ns")
    p99_ns: float | None = figure("99th percentile wait, ns")
    max_ns: int | None = figure("longest wait, ns")
    sync_waits: int = figure("waits in synchronize calls", 0)
    memcpy_waits: int = figure("waits in synchronous copies", 0)


RESULT = HostSyncsResult


def run(report: Report, *, settings: Settings | None = None) -> HostSyncsResult | AnalysisResult:
    """Measure the host's synchronization waits per call name and per thread.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    HostSyncsResult
        The figures of :class:`HostSyncsResult`; ``tables``: ``per_call`` (main; one row
        per call name: ``kind``, ``waits``, ``threads``, ``total_ns``, ``mean_ns``,
        ``p50_ns``, ``p99_ns``, ``max_ns``, ``share_pct``) and ``per_thread`` (one row
        per thread and call name).
    """
    missing = not_captured(NAME, report, "api_calls")
    if missing:
        return missing
    with stepped(report, NAME) as sql:
        tables = {name: sql.query(name) for name in ("per_call", "per_thread")}
        summary = sql.query("summary").to_pylist()[0]
    top = tables["per_call"].slice(0, 1).to_pylist()
    findings: tuple[str, ...] = ()
    if top:
        t = top[0]
        findings = (f"{t['name']}: {t['total_ns'] / 1e6:.3f} ms of host waits in {t['waits']} "
                    f"calls ({t['share_pct']:.1f}% of all waits)",) if t["share_pct"] else ()
        message = (f"{summary['waits']} waits on {summary['threads']} threads, "
                   f"{summary['total_ns'] / 1e6:.3f} ms blocked")
    else:
        message = "no host synchronization wait"
    return HostSyncsResult(status=OK, message=message, tables=tables, main="per_call",
                           findings=findings, **summary)
