"""Compute/copy overlap per GPU: is copy time hidden behind kernels, and do streams overlap?

Per device: kernel busy time and copy busy time (interval unions), the time both ran at
once, the exposed copy time (copies with no kernel running), kernel concurrency across
streams, and serializing patterns: everything on one stream, synchronous ``cudaMemcpy``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compute import intervals
from ..engine.accelerate import register, rows_of
from ..engine.runner import Runs
from ..engine.steps import registered
from ..formatting import fmt_ns
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, not_captured, run_query, stepped

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "overlap"


@dataclass(frozen=True, kw_only=True)
class OverlapResult(AnalysisResult):
    """Compute/copy overlap, all devices together (the ``devices`` table has them one by
    one).

    Tables: ``devices`` (main), ``streams``, ``copy_apis``.
    """

    analysis: str = field(default="overlap", init=False)
    devices: int = figure("devices that ran kernels or copies", 0)
    wall_span_ns: int | None = figure("first operation's start to last one's end, ns")
    kernel_busy_ns: int | None = figure("time with a kernel running (union), ns")
    copy_busy_ns: int | None = figure("time with a copy or memset running (union), ns")
    both_busy_ns: int | None = figure("time with both running, ns")
    exposed_copy_ns: int | None = figure("copy time with no kernel running, ns")
    overlap_pct: float | None = figure("both_busy_ns over copy_busy_ns, %")
    kernel_busy_pct: float | None = figure("kernel_busy_ns over the wall span, %")
    copy_busy_pct: float | None = figure("copy_busy_ns over the wall span, %")
    kernels: int | None = figure("kernels")
    copies: int | None = figure("copies and memsets")
    streams: int | None = figure("streams with kernels or copies")
    kernel_streams: int | None = figure("streams with kernels")
    copy_streams: int | None = figure("streams with copies")
    concurrent_kernel_ns: int | None = figure("time with two or more kernels running, ns")
    kernel_concurrency_pct: float | None = figure("concurrent_kernel_ns over kernel_busy_ns, %")
    max_concurrent_kernels: int | None = figure("most kernels running at once on a device")
    single_stream: bool = figure("a device ran all its kernels and copies on one stream", False)
    sync_copies: int = figure("copies made by synchronous copy APIs", 0)
    sync_copy_time_pct: float | None = figure("their share of copy time, % (None: no copy "
                                              "API traced)")


RESULT = OverlapResult
#: how it runs (``engine.runner``): its pass keeps each GPU's busy union for ranges when a
#: plan runs both
RUNS = Runs(makes=(intervals.GPU_BUSY,))


def run(report: Report, *, settings: Settings | None = None) -> OverlapResult | AnalysisResult:
    """Kernel/copy busy time, their overlap and stream concurrency, per device.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        The findings' ``sync_copy_pct`` and ``low_overlap_pct``.

    Returns
    -------
    OverlapResult
        figures (all devices together): ``devices``, ``wall_span_ns``, ``kernel_busy_ns``,
        ``copy_busy_ns``, ``both_busy_ns``, ``exposed_copy_ns``, ``overlap_pct`` (both /
        copy busy), ``kernel_busy_pct`` and ``copy_busy_pct`` (of the wall span),
        ``streams``, ``concurrent_kernel_ns``, ``kernel_concurrency_pct`` (share of kernel
        busy time with >= 2 kernels running), ``max_concurrent_kernels``, ``single_stream``
        (a device ran all its kernels and copies on one stream), ``sync_copies``,
        ``sync_copy_time_pct``. Tables: ``devices`` (main), ``streams``, ``copy_apis``.
    """
    probe = report.probe
    if not any(probe.present(v) for v in ("kernels", "memcpys", "memsets", "cuda_graphs")):
        return not_captured(NAME, report, "kernels")  # type: ignore[return-value]
    with stepped(report, NAME) as sql, contextlib.ExitStack() as stack:
        sql.need("ops")  # the pass reads it, as the method's busy does
        stack.enter_context(registered(report, "_overlap_busy", BUSY(report)))
        stack.enter_context(registered(report, "_overlap_streams", sql.query("op_streams")))
        per = sql.query("devices")
        streams = sql.query("streams")
    total = next(r for r in per.to_pylist() if r["device_id"] is None)
    devices = per.filter(pc.is_valid(per.column("device_id")))
    apis = run_query(report, NAME, "copy_apis")
    dev_rows = devices.to_pylist()
    api_rows = apis.to_pylist()
    sync = [r for r in api_rows if r["synchronous"]]
    summary: dict[str, Any] = {"devices": len(dev_rows)}
    summary.update({k: v for k, v in total.items() if k != "device_id"})
    summary["single_stream"] = any(_single_stream(r) for r in dev_rows)
    summary["sync_copies"] = sum(r["copies"] for r in sync)
    summary["sync_copy_time_pct"] = (
        sum(r["copy_time_pct"] or 0.0 for r in sync) if api_rows else None
    )
    tables = {"devices": devices, "streams": streams, "copy_apis": apis}
    result = OverlapResult(status=OK, tables=tables, main="devices", **summary)
    return replace(result, message=_message(result),
                   findings=tuple(_findings(dev_rows, sync, result, settings or DEFAULTS)))


def method(report: Report) -> pa.Table:
    """Per device: kernel, copy and any busy time, time with >= 2 kernels, peak kernels
    (the query busy of overlap.sql)."""
    with stepped(report, NAME) as sql:
        return sql.query("busy")


def accelerated(report: Report) -> pa.Table:
    """:func:`method`'s table from a sorted pass over each device's operations.

    When a later analysis expects it (``Workspace.handover``), the pass also keeps each
    device's union as ``gpu_busy`` (``intervals.Coverage``) for ranges: the operations it
    counts are these, less those that start at or before 0 (ranges.sql, rg_busy_intervals).
    """
    try:
        return _busy_pass(report, device_operations(report))
    except intervals.OutOfOrder:
        return _busy_pass(report, intervals.segments(
            report, "SELECT device_id, cls = 'kernel' AS kernel, start_ns, end_ns FROM ops",
            ("device_id",), ("kernel", "start_ns", "end_ns")))


def _busy_pass(report: Report, runs: Iterator[tuple[tuple[int, ...], dict[str, np.ndarray]]]
               ) -> pa.Table:
    """:func:`_busy` over each device's operations in start order (``runs``)."""
    devices: dict[int, tuple[intervals.Busy, intervals.Union, intervals.Union]] = {}
    gpu_busy = intervals.Coverage() if report.workspace.expects(intervals.GPU_BUSY) else None
    with contextlib.closing(runs):  # closed early (out of order), it ends its query
        for (device,), op in runs:
            kernels, copies, either = devices.setdefault(
                device, (intervals.Busy(), intervals.Union(), intervals.Union()))
            k = op["kernel"]
            start, end = (op[c].astype(np.int64, copy=False) for c in ("start_ns", "end_ns"))
            kernels.feed(start[k], end[k])
            copies.feed(start[~k], end[~k])
            either.feed(start, end)
            if gpu_busy is not None:
                # sorted by start: those after 0 are the end of the device's operations
                after = int(np.searchsorted(start, 0, side="right"))
                gpu_busy.feed(device, start[after:], end[after:])
    if gpu_busy is not None:
        report.workspace.hand(intervals.GPU_BUSY, gpu_busy.done())
    return pa.table({
        "device_id": list(devices),
        "kernel_ns": [k.ns for k, _, _ in devices.values()],
        "copy_ns": [c.ns for _, c, _ in devices.values()],
        "any_ns": [a.ns for _, _, a in devices.values()],
        "concurrent_ns": [k.twice_ns for k, _, _ in devices.values()],
        "max_in_flight": [k.peak for k, _, _ in devices.values()],
    }, schema=_BUSY_SCHEMA)


def device_operations(report: Report) -> Iterator[tuple[tuple[int], dict[str, np.ndarray]]]:
    """Each device's operations in runs in start order, as ``intervals.segments`` gives
    them: the kernels as the view stores them (``intervals.OutOfOrder`` where they are
    not in start order), with the other operations (other_ops, read sorted: a few) merged
    in, those of a device that start by the last kernel of each run with that run."""
    with stepped(report, NAME) as sql:
        sql.need("other_ops")
        other = report.sql(
            "SELECT device_id, cls = 'kernel' AS kernel, start_ns, end_ns FROM other_ops "
            "WHERE device_id IS NOT NULL AND start_ns IS NOT NULL AND end_ns IS NOT NULL "
            "ORDER BY device_id, start_ns").to_arrow_table()
    columns = {c: other.column(c).to_numpy(zero_copy_only=False)
               for c in ("kernel", "start_ns", "end_ns")}
    pending = {int(d): {c: v[lo:hi] for c, v in columns.items()}
               for d, lo, hi in zip(*intervals.runs(other.column("device_id").to_numpy()))}
    taken = dict.fromkeys(pending, 0)
    with contextlib.closing(intervals.segments(
        report, "SELECT device_id, start_ns, end_ns FROM kernels WHERE end_ns >= start_ns",
        ("device_id",), ("start_ns", "end_ns"), in_order=True,
    )) as kernels:
        for (device,), run in kernels:
            kernel = np.ones(len(run["start_ns"]), dtype=bool)
            rest = pending.get(device)
            if rest is not None:
                lo = taken[device]
                hi = lo + int(np.searchsorted(rest["start_ns"][lo:], run["start_ns"][-1],
                                              side="right"))
                if hi > lo:
                    taken[device] = hi
                    merged = {c: np.r_[v, rest[c][lo:hi]] for c, v in
                              (("kernel", kernel), ("start_ns", run["start_ns"]),
                               ("end_ns", run["end_ns"]))}
                    order = np.argsort(merged["start_ns"], kind="stable")
                    yield (device,), {c: v[order] for c, v in merged.items()}
                    continue
            yield (device,), {"kernel": kernel, **run}
    for device, rest in pending.items():
        lo = taken[device]
        if lo < len(rest["start_ns"]):
            yield (device,), {c: v[lo:] for c, v in rest.items()}


_BUSY_SCHEMA = pa.schema([("device_id", pa.int64())] + [
    (c, pa.int64())
    for c in ("kernel_ns", "copy_ns", "any_ns", "concurrent_ns", "max_in_flight")])


def _single_stream(row: dict) -> bool:
    return bool(row["kernels"] and row["copies"] and row["streams"] == 1)


def _message(r: OverlapResult) -> str:
    if not r.copy_busy_ns:
        return (
            f"{r.devices} device(s): kernels busy {fmt_ns(r.kernel_busy_ns)} "
            f"over {fmt_ns(r.wall_span_ns)}; no copy time to overlap"
        )
    return (
        f"{r.devices} device(s): {r.overlap_pct or 0:.1f}% of "
        f"{fmt_ns(r.copy_busy_ns)} copy time overlapped kernels, "
        f"{fmt_ns(r.exposed_copy_ns)} exposed; kernels busy "
        f"{fmt_ns(r.kernel_busy_ns)} over {fmt_ns(r.wall_span_ns)}"
    )


def _findings(devices: list[dict], sync: list[dict], result: OverlapResult,
              settings: Settings) -> list[str]:
    out = []
    for r in devices:
        if _single_stream(r):
            out.append(
                f"device {r['device_id']}: all {r['kernels']} kernels and {r['copies']} "
                "copies ran on a single stream: copies cannot overlap compute "
                "(use separate copy streams and pinned memory)"
            )
        elif r["copies"] and r["kernels"] and (r["overlap_pct"] or 0) < settings.low_overlap_pct:
            out.append(
                f"device {r['device_id']}: only {r['overlap_pct']:.1f}% of copy time "
                f"overlapped kernels across {r['streams']} streams "
                f"({fmt_ns(r['exposed_copy_ns'])} exposed)"
            )
    if sync and (result.sync_copy_time_pct or 0) >= settings.sync_copy_pct:
        names = ", ".join(sorted({r["api_name"] for r in sync}))
        out.append(
            f"{result.sync_copies} copies ({result.sync_copy_time_pct:.0f}% of copy time) come "
            f"from synchronous APIs ({names}): the host blocks on each and they run on "
            "the default stream; use cudaMemcpyAsync on a non-default stream"
        )
    return out


#: each device's busy time by the SQL method or the pass, as the engine chooses for the
#: operations' rows
BUSY = register(NAME, "busy", method=method, accelerated=accelerated,
                rows=rows_of("kernels", "memcpys", "memsets"))
