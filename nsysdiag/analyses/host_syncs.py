"""Host synchronization waits: time host threads spent blocked waiting for the GPU.

Per call name and per thread: how often the host blocked in cudaDeviceSynchronize,
cudaStreamSynchronize, cudaEventSynchronize (and their driver forms) or a synchronous
cudaMemcpy, for how long in total, and the median and P99 wait.
"""

from __future__ import annotations

from ..engine.steps import temp_views
from ..report import Report
from .base import OK, AnalysisResult, load_sql, not_captured, run_query

NAME = "host_syncs"


def run(report: Report) -> AnalysisResult:
    """Measure the host's synchronization waits per call name and per thread.

    Parameters
    ----------
    report : Report
        An opened export.

    Returns
    -------
    AnalysisResult
        ``summary``: ``waits``, ``threads``, ``total_ns``, ``p50_ns``, ``p99_ns``,
        ``max_ns``, ``sync_waits``, ``memcpy_waits``. ``tables``: ``per_call`` (main; one
        row per call name: ``kind``, ``waits``, ``threads``, ``total_ns``, ``mean_ns``,
        ``p50_ns``, ``p99_ns``, ``max_ns``, ``share_pct``) and ``per_thread`` (one row
        per thread and call name). The definitions are in ``sql/host_syncs.sql``.
    """
    missing = not_captured(NAME, report, "api_calls")
    if missing:
        return missing
    with temp_views(report, load_sql(NAME), ("waits",)):
        tables = {name: run_query(report, NAME, name) for name in ("per_call", "per_thread")}
        summary = run_query(report, NAME, "summary").to_pylist()[0]
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
    return AnalysisResult(NAME, OK, message, summary, tables, main="per_call",
                          findings=findings)
