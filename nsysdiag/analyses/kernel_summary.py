"""GPU time per kernel name: instances, total, mean, median, min, max, stddev, share.

The same figures as NVIDIA's ``nsys stats --report cuda_gpu_kern_sum``, one row per
demangled kernel name, largest total GPU time first. CUDA graph nodes are included.
"""

from __future__ import annotations

from typing import TYPE_CHECKING


from ..errors import UsageError
from .base import OK, AnalysisResult, not_captured, run_query

if TYPE_CHECKING:
    from ..report import Report

NAME = "kernel_summary"


def run(report: Report, *, top: int | None = None) -> AnalysisResult:
    """Summarize kernel execution time per kernel name.

    Parameters
    ----------
    report : Report
        An opened export.
    top : int, optional
        Keep the ``top`` names with the most total GPU time (shares stay relative to all
        kernels). Default: every name.

    Returns
    -------
    AnalysisResult
        ``summary``: ``kernels`` (executions), ``names``, ``total_ns``, ``graph_kernels``,
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
    return AnalysisResult(
        NAME, OK, message, summary, {"per_name": per_name}, main="per_name", findings=findings
    )
