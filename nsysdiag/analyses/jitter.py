"""Kernel duration jitter: which kernels sometimes run much slower than their median.

Check D1 of the method. A kernel whose p99 is far above its median, or a sizeable share
of launches beyond 1.5x the median, means GPU execution time is intermittently inflated
(contention with other GPU work, clocks, memory behaviour). ``concurrency`` gives the share
of kernel time during which two or more kernels overlapped on a device (another stream or
process competing for SMs), as measured by the overlap analysis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from .base import OK, AnalysisResult, not_captured, run_query

if TYPE_CHECKING:
    from ..report import Report


def run(report: Report, *, top: int = 10, slow: float = 1.5) -> AnalysisResult:
    """Per-kernel duration spread for the kernels that use the most GPU time.

    Returns
    -------
    AnalysisResult
        summary: ``kernels_examined``, ``worst_kernel``, ``worst_p99_over_p50``,
        ``worst_slow_pct``, ``time_weighted_slow_pct``, ``concurrent_pct`` (max over devices);
        tables ``per_kernel`` (main) and ``concurrency``.
    """
    missing = not_captured("jitter", report, "kernels")
    if missing:
        return missing
    per = run_query(report, "jitter", "per_kernel", {"top": top, "slow": slow})
    conc = _concurrency(report)
    rows = per.to_pylist()
    summary: dict = {"kernels_examined": len(rows)}
    if rows:
        worst = max(rows, key=lambda r: r["p99_over_p50"] or 0)
        total = sum(r["total_ns"] for r in rows) or 1
        summary.update(
            {
                "worst_kernel": worst["name"],
                "worst_p99_over_p50": worst["p99_over_p50"],
                "worst_slow_pct": worst["slow_pct"],
                "time_weighted_slow_pct": sum(r["slow_pct"] * r["total_ns"] for r in rows) / total,
                "time_weighted_p99_over_p50": sum(
                    (r["p99_over_p50"] or 1) * r["total_ns"] for r in rows
                )
                / total,
            }
        )
    pct = [r["concurrent_pct"] for r in conc.to_pylist() if r["concurrent_pct"] is not None]
    summary["concurrent_pct"] = max(pct) if pct else 0.0
    msg = (
        f"{len(rows)} kernels examined; time-weighted "
        f"{summary.get('time_weighted_slow_pct', 0):.1f}% "
        f"of launches slower than {slow}x their median"
    )
    return AnalysisResult(
        "jitter", OK, msg, summary, {"per_kernel": per, "concurrency": conc}, main="per_kernel"
    )


def _concurrency(report: Report) -> pa.Table:
    """Per device: time with >= 1 and with >= 2 kernels in flight, from the overlap
    analysis (its kernel sweep; the diagnosis runs it anyway, and its result is cached)."""
    overlap = report.analysis("overlap")
    rows = []
    if overlap.ok:
        rows = [
            {"device_id": r["device_id"], "busy_ns": r["kernel_busy_ns"],
             "concurrent_ns": r["concurrent_kernel_ns"],
             "concurrent_pct": r["kernel_concurrency_pct"]}
            for r in overlap.table("devices").to_pylist() if r["device_id"] is not None
        ]
    return pa.Table.from_pylist(rows, schema=_CONCURRENCY)


_CONCURRENCY = pa.schema([("device_id", pa.int64()), ("busy_ns", pa.int64()),
                          ("concurrent_ns", pa.int64()), ("concurrent_pct", pa.float64())])
