"""The whole run: where its time went, with or without a repeated unit.

On the busiest GPU (the most kernel and copy time), the span from its first operation to
its last is split into time with a kernel running, time with only copies running (copies
no kernel hides) and idle time; the host's time in synchronization and copy calls, the
kernels and the copies with the most GPU time complete the picture. It is the diagnosis'
answer when no unit of work repeats ("no repeated unit: the run is dominated by ...").
The busy unions are the ``overlap`` analysis'. Definitions: docs/analyses/whole_run.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..engine.runner import Runs
from ..settings import Settings
from .base import OK, AnalysisResult, figure, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "whole_run"
TOP = 5
#: what dominated_by names, as words
DOMINANT = {
    "kernels": "GPU kernels",
    "copies": "copies no kernel hides",
    "gpu_idle": "GPU idle time (the GPU waited for the host)",
}


@dataclass(frozen=True)
class TopKernel:
    """One row of the ``top_kernels`` table."""

    name: str  #: kernel name (its base name when known)
    instances: int  #: executions on the device
    total_ns: int  #: GPU time, ns
    time_pct: float | None  #: share of the device's kernel time, %


@dataclass(frozen=True)
class TopCopy:
    """One row of the ``top_copies`` table."""

    kind: str  #: direction (HtoD, DtoH, ...) or memset
    instances: int  #: copies
    bytes: int  #: bytes moved or set
    total_ns: int  #: GPU time, ns
    time_pct: float | None  #: share of the device's copy time, %


@dataclass(frozen=True, kw_only=True)
class WholeRunResult(AnalysisResult):
    """Where the whole run's time went on its busiest GPU.

    Tables: ``top_kernels`` (main), ``top_copies``.
    """

    analysis: str = field(default="whole_run", init=False)
    device_id: int | None = figure("the device described: the one with the most GPU time")
    wall_span_ns: int | None = figure("its first operation's start to its last one's end, ns")
    kernel_busy_ns: int | None = figure("time with a kernel running (union), ns")
    exposed_copy_ns: int | None = figure("time with only copies or memsets running, ns")
    gpu_idle_ns: int | None = figure("time with nothing running, ns")
    kernel_busy_pct: float | None = figure("kernel_busy_ns over the span, %")
    exposed_copy_pct: float | None = figure("exposed_copy_ns over the span, %")
    gpu_idle_pct: float | None = figure("gpu_idle_ns over the span, %")
    host_sync_ns: int = figure("host time inside synchronization calls (all threads), ns", 0)
    host_copy_call_ns: int = figure("host time inside copy and memset calls (all threads), ns",
                                    0)
    top_kernel: str | None = figure("the kernel name with the most GPU time")
    top_kernel_pct: float | None = figure("its share of the device's kernel time, %")
    dominated_by: str | None = figure("kernels, copies or gpu_idle: the largest part of the "
                                      "span")
    dominant_summary: str | None = figure("the run is dominated by ...: the sentence")

    def top_kernels(self) -> list[TopKernel]:
        """The ``top_kernels`` table as records."""
        t = self.tables.get("top_kernels")
        return records(t, TopKernel) if t is not None else []

    def top_copies(self) -> list[TopCopy]:
        """The ``top_copies`` table as records."""
        t = self.tables.get("top_copies")
        return records(t, TopCopy) if t is not None else []


RESULT = WholeRunResult
#: how it runs (``engine.runner``): overlap's unions
RUNS = Runs(needs=("overlap",))


def run(report: Report, *, top: int = TOP,
        settings: Settings | None = None) -> WholeRunResult | AnalysisResult:
    """Split the whole run's time on its busiest GPU; name what dominates it.

    Parameters
    ----------
    report : Report
        The opened trace.
    top : int
        Rows of the top kernels and copies tables.
    settings : Settings, optional
        Passed to the ``overlap`` analysis, whose busy unions are used.

    Returns
    -------
    WholeRunResult
        The figures of :class:`WholeRunResult`; a bare :class:`AnalysisResult` (overlap's
        status) when the trace has no GPU work.
    """
    overlap = report.analysis("overlap", settings=settings)
    devices = overlap.tables.get("devices") if overlap.ok else None
    rows = [r for r in devices.to_pylist() if r["device_id"] is not None] if devices else []
    if not rows:
        return AnalysisResult(NAME, overlap.status, overlap.message or "no GPU work")
    dev = max(rows, key=lambda r: ((r["kernel_busy_ns"] or 0) + (r["copy_busy_ns"] or 0),
                                   -r["device_id"]))
    span = int(dev["wall_span_ns"] or 0)
    kernel = int(dev["kernel_busy_ns"] or 0)
    exposed = int(dev["exposed_copy_ns"] or 0)
    idle = max(0, span - kernel - exposed)
    host = run_query(report, NAME, "host").to_pylist()[0] if report.probe.present(
        "api_calls") else {"host_sync_ns": 0, "host_copy_call_ns": 0}
    params = {"device": dev["device_id"], "top": top}
    kernels = run_query(report, NAME, "top_kernels", params)
    copies = run_query(report, NAME, "top_copies", params)

    def pct(x: int) -> float | None:
        return 100.0 * x / span if span > 0 else None

    first = kernels.slice(0, 1).to_pylist()
    result = WholeRunResult(
        status=OK, tables={"top_kernels": kernels, "top_copies": copies}, main="top_kernels",
        device_id=dev["device_id"], wall_span_ns=span, kernel_busy_ns=kernel,
        exposed_copy_ns=exposed, gpu_idle_ns=idle, kernel_busy_pct=pct(kernel),
        exposed_copy_pct=pct(exposed), gpu_idle_pct=pct(idle),
        host_sync_ns=int(host["host_sync_ns"]), host_copy_call_ns=int(host["host_copy_call_ns"]),
        top_kernel=first[0]["name"] if first else None,
        top_kernel_pct=first[0]["time_pct"] if first else None,
    )
    parts = {"kernels": kernel, "copies": exposed, "gpu_idle": idle}
    dominant = max(parts, key=lambda k: parts[k]) if span > 0 else None
    summary = _sentence(result, dominant, copies.to_pylist()) if dominant else None
    findings = [f"GPU {dev['device_id']} over {_duration(span)}: kernels "
                f"{_pct(result.kernel_busy_pct)}, copies alone {_pct(result.exposed_copy_pct)}, "
                f"idle {_pct(result.gpu_idle_pct)}"]
    if result.host_sync_ns or result.host_copy_call_ns:
        findings.append(f"the host waited {_duration(result.host_sync_ns)} in synchronizations "
                        f"and spent {_duration(result.host_copy_call_ns)} in copy calls")
    if first:
        findings.append(f"top kernel {first[0]['name']}: {_pct(first[0]['time_pct'])} of "
                        "kernel time")
    return replace(result, dominated_by=dominant, dominant_summary=summary,
                   message=summary or "no GPU time", findings=tuple(findings))


def _sentence(r: WholeRunResult, dominant: str, copies: list[dict]) -> str:
    share = {"kernels": r.kernel_busy_pct, "copies": r.exposed_copy_pct,
             "gpu_idle": r.gpu_idle_pct}[dominant]
    text = f"the run is dominated by {DOMINANT[dominant]} ({_pct(share)} of GPU {r.device_id}'s " \
           f"{_duration(r.wall_span_ns or 0)})"
    if dominant == "kernels" and r.top_kernel:
        text += f"; top kernel {r.top_kernel} ({_pct(r.top_kernel_pct)} of kernel time)"
    elif dominant == "copies" and copies:
        text += f"; mostly {copies[0]['kind']} ({_pct(copies[0]['time_pct'])} of copy time)"
    elif dominant == "gpu_idle" and r.host_sync_ns:
        text += f"; the host waited {_duration(r.host_sync_ns)} in synchronizations"
    return text


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}%"


def _duration(ns: float) -> str:
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.3g} s"
    return f"{ns / 1e6:.3g} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.3g} us"
