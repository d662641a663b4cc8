"""CUDA Graph use: how much work is replayed as graphs, and what a graph launch costs.

Under CUDA Graphs a whole sequence of kernels is launched by one call, so per-kernel
launch overhead is about zero and a latency tail must be sought elsewhere (memory
bandwidth, L2 contention). ``in_use`` is always in the summary, false when the trace has
no graph launch, for the diagnosis to branch on.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any


from .base import EMPTY, OK, AnalysisResult, not_captured, run_query

if TYPE_CHECKING:
    from ..report import Report

NAME = "graphs"


#: findings threshold: work outside graphs above this share is reported, %
OUTSIDE_PCT = 10.0


def run(report: Report, *, top: int = 10) -> AnalysisResult:
    """Graph launches, the share of GPU work inside graphs, and launch overhead.

    Parameters
    ----------
    report : Report
        An opened export.
    top : int, default 10
        Rows of the ``per_graph`` table.

    Returns
    -------
    AnalysisResult
        ``empty`` (summary ``in_use`` False) when CUDA was traced and no graph was
        launched. summary: ``in_use``, ``graph_launches``, ``host_launches``,
        ``device_launches``, ``gpu_traced``, ``trace_level`` (node | graph | mixed |
        api_only), ``node_tracing`` (kernels carry graph node ids), ``graphs``,
        ``kernels_per_launch``, ``kernels``, ``kernels_in_graphs``,
        ``kernels_in_graphs_pct``, ``graph_gpu_ns``, ``graph_gpu_time_pct``,
        ``launch_to_start_{p50,p90,p99,max}_ns``, ``api_duration_{p50,p99}_ns``,
        ``gpu_duration_{p50,p90,p99}_ns``.
        Tables: ``per_graph`` (main), ``launches``.
    """
    probe = report.probe
    if not (probe.cuda_traced or probe.present("cuda_graphs")):
        res = not_captured(NAME, report, "api_calls", "kernels")
        return replace(res, summary={"in_use": None})  # type: ignore[arg-type]
    (s,) = run_query(report, NAME, "summary").to_pylist()
    summary: dict[str, Any] = {
        "in_use": s["graph_launches"] > 0,
        "node_tracing": s["kernels_in_graphs"] > 0,
        **s,
    }
    if not summary["in_use"]:
        return AnalysisResult(
            NAME,
            EMPTY,
            "no CUDA graph launches: kernels are launched one "
            "by one, so per-launch CPU overhead applies",
            summary,
        )
    tables = {
        "per_graph": run_query(report, NAME, "per_graph", {"top": int(top)}),
        "launches": run_query(report, NAME, "launches"),
    }
    return AnalysisResult(
        NAME,
        OK,
        _message(summary),
        summary,
        tables,
        main="per_graph",
        findings=tuple(_findings(summary)),
    )


def _message(s: dict[str, Any]) -> str:
    share = (
        f", {s['graph_gpu_time_pct']:.0f}% of GPU kernel time inside graphs"
        if s["graph_gpu_time_pct"] is not None
        else ""
    )
    per = (
        f"one call per {s['kernels_per_launch']:.0f} kernels, "
        if s["kernels_per_launch"] is not None
        else ""
    )
    lat = (
        f" ({per}p50 launch call -> GPU start {s['launch_to_start_p50_ns'] / 1e3:.1f} us)"
        if s["launch_to_start_p50_ns"] is not None
        else ""
    )
    return (
        f"{s['graph_launches']} CUDA graph launches ({s['trace_level']} trace){share}; "
        f"under graphs per-kernel launch overhead is ~0{lat}, so look for the tail in "
        "memory bandwidth and L2 contention"
    )


def _findings(s: dict[str, Any]) -> list[str]:
    out = []
    level = s["trace_level"]
    if level == "api_only":
        out.append(
            "graph launches were recorded on the CPU only, with no GPU records: capture "
            "with --cuda-graph-trace=graph (or node) to time them"
        )
    elif level == "graph":
        out.append(
            "graph-level trace: kernels inside graphs are not in the kernels table; "
            "capture with --cuda-graph-trace=node for per-kernel detail"
        )
    elif level in ("node", "mixed"):
        out.append(
            "node-level graph tracing adds overhead to each launch call "
            f"(p50 {(s['api_duration_p50_ns'] or 0) / 1e3:.1f} us): launch overhead "
            "figures are upper bounds"
        )
    outside = s["graph_gpu_time_pct"]
    if outside is not None and 100 - outside >= OUTSIDE_PCT:
        out.append(
            f"{100 - outside:.0f}% of GPU kernel time runs outside graphs "
            f"({s['kernels'] - s['kernels_in_graphs']} kernels launched one by one)"
        )
    if s["device_launches"]:
        out.append(
            f"{s['device_launches']} graph launches have no host launch call "
            "(device-side launches, or the call fell outside the capture)"
        )
    return out
