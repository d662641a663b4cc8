"""CUDA Graph use: how much work is replayed as graphs, and what a graph launch costs.

Under CUDA Graphs a whole sequence of kernels is launched by one call, so per-kernel
launch overhead is about zero and a latency tail must be sought elsewhere (memory
bandwidth, L2 contention). ``in_use`` is always in the summary, false when the trace has
no graph launch, for the diagnosis to branch on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..settings import DEFAULTS, Settings
from .base import EMPTY, OK, AnalysisResult, figure, not_captured, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "graphs"


@dataclass(frozen=True, kw_only=True)
class GraphsResult(AnalysisResult):
    """CUDA Graph use. ``in_use`` is reported whatever the status, for the diagnosis to
    branch on: None when CUDA was not traced (then it is the only figure), False in an
    ``empty`` result (no graph launch; every figure reported).

    Tables: ``per_graph`` (main), ``launches``.
    """

    analysis: str = field(default="graphs", init=False)
    in_use: bool | None = figure("the trace has graph launches (None: CUDA not traced)")
    node_tracing: bool = figure("kernels carry graph node ids (node-level tracing)", False)
    graph_launches: int = figure("graph launches", 0)
    host_launches: int = figure("graph launches with a host launch call", 0)
    device_launches: int = figure("graph launches with no host launch call", 0)
    gpu_traced: int = figure("graph launches with GPU records", 0)
    trace_level: str | None = figure("node | graph | mixed | api_only (None: no launch)")
    graphs: int = figure("distinct graphs launched", 0)
    kernels_per_launch: float | None = figure("kernels per graph launch")
    kernels: int = figure("kernels in the trace", 0)
    kernels_in_graphs: int = figure("kernels run inside graphs", 0)
    kernels_in_graphs_pct: float | None = figure("their share of kernels, %")
    graph_gpu_ns: int | None = figure("GPU time of kernels inside graphs, ns")
    graph_gpu_time_pct: float | None = figure("their share of kernel GPU time, %")
    launch_to_start_p50_ns: float | None = figure("P50 from a graph launch call to its first "
                                                  "GPU work, ns")
    launch_to_start_p90_ns: float | None = figure("P90 of launch_to_start, ns")
    launch_to_start_p99_ns: float | None = figure("P99 of launch_to_start, ns")
    launch_to_start_max_ns: int | None = figure("largest launch_to_start, ns")
    api_duration_p50_ns: float | None = figure("P50 CPU time of a graph launch call, ns")
    api_duration_p99_ns: float | None = figure("P99 CPU time of a graph launch call, ns")
    gpu_duration_p50_ns: float | None = figure("P50 GPU time of a graph launch, ns")
    gpu_duration_p90_ns: float | None = figure("P90 GPU time of a graph launch, ns")
    gpu_duration_p99_ns: float | None = figure("P99 GPU time of a graph launch, ns")

    def reported(self) -> tuple[str, ...]:
        if self.in_use is None:  # CUDA not traced: nothing else was measured
            return ("in_use",)
        return tuple(f.name for f in self.summary_fields())


RESULT = GraphsResult


def run(report: Report, *, top: int = 10, settings: Settings | None = None) -> GraphsResult:
    """Graph launches, the share of GPU work inside graphs, and launch overhead.

    Parameters
    ----------
    report : Report
        An opened export.
    top : int, default 10
        Rows of the ``per_graph`` table.
    settings : Settings, optional
        The findings' ``graphs_outside_pct``.

    Returns
    -------
    GraphsResult
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
        return GraphsResult(status=res.status, message=res.message)  # type: ignore[union-attr]
    (s,) = run_query(report, NAME, "summary").to_pylist()
    summary: dict[str, Any] = {
        "in_use": s["graph_launches"] > 0,
        "node_tracing": s["kernels_in_graphs"] > 0,
        **s,
    }
    if not summary["in_use"]:
        return GraphsResult(
            status=EMPTY,
            message="no CUDA graph launches: kernels are launched one "
            "by one, so per-launch CPU overhead applies",
            **summary,
        )
    tables = {
        "per_graph": run_query(report, NAME, "per_graph", {"top": int(top)}),
        "launches": run_query(report, NAME, "launches"),
    }
    result = GraphsResult(status=OK, tables=tables, main="per_graph", **summary)
    return replace(result, message=_message(result),
                   findings=tuple(_findings(result, settings or DEFAULTS)))


def _message(r: GraphsResult) -> str:
    share = (
        f", {r.graph_gpu_time_pct:.0f}% of GPU kernel time inside graphs"
        if r.graph_gpu_time_pct is not None
        else ""
    )
    per = (
        f"one call per {r.kernels_per_launch:.0f} kernels, "
        if r.kernels_per_launch is not None
        else ""
    )
    lat = (
        f" ({per}p50 launch call -> GPU start {r.launch_to_start_p50_ns / 1e3:.1f} us)"
        if r.launch_to_start_p50_ns is not None
        else ""
    )
    return (
        f"{r.graph_launches} CUDA graph launches ({r.trace_level} trace){share}; "
        f"under graphs per-kernel launch overhead is ~0{lat}, so look for the tail in "
        "memory bandwidth and L2 contention"
    )


def _findings(r: GraphsResult, settings: Settings) -> list[str]:
    out = []
    level = r.trace_level
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
            f"(p50 {(r.api_duration_p50_ns or 0) / 1e3:.1f} us): launch overhead "
            "figures are upper bounds"
        )
    outside = r.graph_gpu_time_pct
    if outside is not None and 100 - outside >= settings.graphs_outside_pct:
        out.append(
            f"{100 - outside:.0f}% of GPU kernel time runs outside graphs "
            f"({r.kernels - r.kernels_in_graphs} kernels launched one by one)"
        )
    if r.device_launches:
        out.append(
            f"{r.device_launches} graph launches have no host launch call "
            "(device-side launches, or the call fell outside the capture)"
        )
    return out
