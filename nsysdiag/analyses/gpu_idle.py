"""GPU idle time by cause: for each gap before a kernel, why the GPU waited.

The gaps are the method's launch gaps (per process and GPU, a kernel that starts after the
furthest end of the earlier work; ``launch_gaps``). Each gets one cause, tried in this
order (``settings.idle_cause_pct`` of the gap is "most of it"):

``copy``           the process's own copies or memsets ran for most of the gap, or the
                   launching thread was in a copy call when the GPU went idle, or spent
                   most of the gap's host window in copy calls (a blocking copy on the path)
``other_process``  other work on the GPU (another process or context) ran for most of it
``between_units``  no unit of the process (an instance of the ranges analysis' unit) was
                   in flight for most of the gap: the GPU waited for the next request
``unknown``        the kernel's launch call was not traced (no CUDA API trace)
``dependency``     the kernel had been launched before the GPU went idle: it waited on
                   another stream, an event or GPU-side scheduling, not on the host
``host_sync``      the launching thread was in a synchronization call when the GPU went
                   idle, or spent most of the host window in one
``launch_bound``   the thread spent most of the host window in launch calls: issuing
                   launches back to back, the method's launch overhead
``cuda_other``     most of it in other CUDA calls (allocation, module loading, events)
``cpu_work``       most of it outside CUDA: preprocessing, Python, data loading

The host window of a gap is ``[idle start, min(kernel start, its launch call's return)]``
on the launching thread. The method's launch-gap figures (P50/P99 against
``gap_normal_ns``/``gap_p99_ns``) are taken over the ``launch_bound`` gaps only: inside
units when there are units, else over the whole run (check C1 reads them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..engine.steps import registered
from ..settings import DEFAULTS, Settings
from . import figures, intervals, sweep
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records
from .launch_gaps import NO_END
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..report import Report

NAME = "gpu_idle"
SETTINGS = ("gap_normal_ns", "gap_p99_ns", "idle_cause_pct", "tail_pct",
            "range_min_instances")

#: the causes, in the order they are tried (codes are the indices)
CAUSES = ("copy", "other_process", "between_units", "unknown", "dependency", "host_sync",
          "launch_bound", "cuda_other", "cpu_work")
COPY, OTHER, BETWEEN, UNKNOWN, DEPENDENCY, SYNC, LAUNCH, CUDA_OTHER, CPU = range(len(CAUSES))
#: what each cause means, one line (findings, docs, HTML)
MEANING = {
    "copy": "copies on the GPU or blocking copy calls on the path",
    "other_process": "other processes' or contexts' work held the GPU",
    "between_units": "no unit (request/iteration) was in flight",
    "unknown": "the launch call was not traced",
    "dependency": "the kernel was queued already: waits on another stream or event",
    "host_sync": "the launching thread was in a synchronization when the GPU drained",
    "launch_bound": "the thread was issuing launches back to back (launch overhead)",
    "cuda_other": "the thread was in other CUDA calls (allocation, module loading)",
    "cpu_work": "the thread was outside CUDA (CPU work: preprocessing, Python, data loading)",
}


@dataclass(frozen=True)
class CauseTime:
    """One row of the ``by_cause`` table."""

    cause: str  #: one of CAUSES
    gaps: int  #: gaps of this cause
    idle_ns: int  #: their idle time, ns
    share_pct: float  #: share of all idle time, %


@dataclass(frozen=True)
class StreamCause:
    """One row of the ``per_stream`` table: one cause's gaps on one stream."""

    pid: int  #: process id
    device_id: int  #: GPU
    stream_id: int  #: CUDA stream
    cause: str  #: one of CAUSES
    gaps: int  #: gaps of this cause on the stream
    idle_ns: int  #: their idle time, ns
    share_pct: float  #: share of the stream's idle time, %


@dataclass(frozen=True, kw_only=True)
class GpuIdleResult(AnalysisResult):
    """GPU idle time before kernels, by cause (per process, GPU and stream in tables).

    Tables: ``by_cause`` (main), ``per_stream`` (pid, device_id, stream_id, cause, gaps,
    idle_ns, share_pct of that stream's idle time) and ``gaps`` (every gap with its cause,
    unless the run left details out).
    """

    analysis: str = field(default="gpu_idle", init=False)
    gaps: int = figure("gaps before kernels (launch gaps' main gaps)", 0)
    idle_ns: int = figure("their idle time summed, ns", 0)
    unit: str | None = figure("the unit whose windows tell gaps inside units from those "
                              "between (None: no unit, causes over the whole run)")
    by_cause: dict[str, dict[str, float]] | None = figure(
        "cause -> {gaps, idle_ns, share_pct (of the idle time, %)}, every cause")
    top_cause: str | None = figure("the cause with the most idle time")
    launch_bound_gaps: int = figure("launch-bound gaps (inside units when there are units)",
                                    0)
    launch_bound_p50_ns: float | None = figure("P50 of the launch-bound gaps, ns")
    launch_bound_p99_ns: float | None = figure("P99 of the launch-bound gaps, ns")
    launch_bound_max_ns: int | None = figure("largest launch-bound gap, ns")
    launch_bound_above_normal_pct: float | None = figure(
        "share of the launch-bound gaps above gap_normal_ns, %")
    launch_bound_idle_pct: float | None = figure("launch-bound share of the idle time, %")
    launch_overhead: bool = figure("the P99 launch-bound gap is above gap_p99_ns: the "
                                   "method's launch-overhead signal (check C1)", False)
    normal_threshold_ns: int = figure("settings.gap_normal_ns used, ns", DEFAULTS.gap_normal_ns)
    p99_threshold_ns: int = figure("settings.gap_p99_ns used, ns", DEFAULTS.gap_p99_ns)

    def causes(self) -> list[CauseTime]:
        """The ``by_cause`` table as records (empty without it)."""
        table = self.tables.get("by_cause")
        return records(table, CauseTime) if table is not None else []

    def per_stream(self) -> list[StreamCause]:
        """The ``per_stream`` table as records (empty without it)."""
        table = self.tables.get("per_stream")
        return records(table, StreamCause) if table is not None else []


RESULT = GpuIdleResult


def classify(gap_ns: np.ndarray, own_copy_ns: np.ndarray, other_ns: np.ndarray,
             inside_ns: np.ndarray | None, launch_known: np.ndarray,
             prelaunched: np.ndarray, at_sync: np.ndarray, at_copy: np.ndarray,
             window: np.ndarray, cause_pct: float) -> np.ndarray:
    """The cause code of each gap (indices into ``CAUSES``).

    Parameters
    ----------
    gap_ns, own_copy_ns, other_ns : int arrays
        The gap's length, and the time in it covered by the process's own copies and by
        other work on the GPU.
    inside_ns : int array or None
        Time of the gap inside the process's units (None: no units).
    launch_known, prelaunched, at_sync, at_copy : bool arrays
        The launch call was traced; it had returned before the GPU went idle; the thread
        was in a sync (a copy) call at that instant.
    window : int array of shape (n, 5)
        The host window's time in launch, copy, sync and other CUDA calls and outside CUDA.
    cause_pct : float
        "Most of the gap", %.
    """
    most = gap_ns * (cause_pct / 100.0)
    cause = np.full(len(gap_ns), -1, dtype=np.int8)

    def put(code: int, where: np.ndarray) -> None:
        cause[(cause < 0) & where] = code

    put(COPY, own_copy_ns >= most)
    put(OTHER, other_ns >= most)
    if inside_ns is not None:
        put(BETWEEN, inside_ns < most)
    put(UNKNOWN, ~launch_known)
    put(DEPENDENCY, prelaunched)
    put(SYNC, at_sync)
    put(COPY, at_copy)
    # the host window's dominant state (ties: the earlier column)
    dominant = np.argmax(window, axis=1) if len(window) else np.empty(0, dtype=np.int64)
    state = np.array([LAUNCH, COPY, SYNC, CUDA_OTHER, CPU], dtype=np.int8)
    put_all = cause < 0
    cause[put_all] = state[dominant[put_all]]
    return cause


def run(report: Report, *, settings: Settings | None = None, range_name: str | None = None,
        detail: bool = True) -> GpuIdleResult | AnalysisResult:
    """Give each gap before a kernel a cause and sum the GPU's idle time by cause.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        ``idle_cause_pct`` (what "most of a gap" is), ``gap_normal_ns`` and ``gap_p99_ns``
        (the launch-bound gaps' judgement); the unit's settings (ranges).
    range_name : str, optional
        The unit's NVTX range (as ranges); default: chosen as ranges chooses it.
    detail : bool
        With False, leave out the ``gaps`` table (one row per gap).

    Returns
    -------
    GpuIdleResult
        A bare :class:`AnalysisResult` without kernels.
    """
    s = settings or DEFAULTS
    missing = not_captured(NAME, report, "kernels")
    if missing:
        return missing
    sql = load_sql(NAME)
    g = report.sql(sql["gaps"], {"no_end": NO_END}).fetchnumpy()
    gpid, pid, dev, stream, b, e = (np.asarray(g[c], dtype=np.int64) for c in (
        "global_pid", "pid", "device_id", "stream_id", "idle_start_ns", "idle_end_ns"))
    launch_end = _filled(g["launch_end_ns"])
    tid = _filled(g["launch_global_tid"])
    n = len(b)
    gap = e - b
    copies = intervals.Coverage.of_query(report, sql["copies_busy"])
    busy = intervals.Coverage.of_query(report, sql["device_busy"])
    own_copy = copies.between(gpid + dev, b, e)
    other = np.maximum(busy.between(dev, b, e) - own_copy, 0)
    ranges = report.analysis("ranges", range_name=range_name, settings=s)
    unit, inside = None, None
    if isinstance(ranges, RangesResult) and ranges.ok and "instances" in ranges.tables:
        inst = ranges.tables["instances"]
        unit = ranges.unit
        windows = intervals.Coverage()
        ipid, istart, iend = (np.asarray(inst.column(c).to_numpy(zero_copy_only=False),
                                         dtype=np.int64) for c in ("pid", "start_ns", "end_ns"))
        for p in np.unique(ipid).tolist():
            rows = np.flatnonzero(ipid == p)
            rows = rows[np.argsort(istart[rows], kind="stable")]
            windows.feed(p, istart[rows], iend[rows])
        windows.done()
        inside = windows.between(pid, b, e)
    launch_known = (launch_end != NO_END) & (tid != NO_END)
    prelaunched = launch_known & (launch_end <= b)
    host = np.flatnonzero(launch_known & ~prelaunched)
    window = np.zeros((n, 5), dtype=np.int64)
    at_sync = np.zeros(n, dtype=bool)
    at_copy = np.zeros(n, dtype=bool)
    if len(host) and report.probe.present("api_calls"):
        w_end = np.minimum(e[host], launch_end[host])
        k = len(host)
        idx = np.arange(k)
        probes = pa.table({
            "key": np.concatenate([tid[host]] * 4),
            "ts": np.concatenate([b[host], w_end, b[host], b[host] + 1]),
            "grp": np.concatenate([idx, idx, idx + k, idx + k]),
            "sign": np.concatenate([np.full(k, -1), np.full(k, 1), np.full(k, -1),
                                    np.full(k, 1)]),
        })
        with registered(report, "_gpu_idle_probes", probes):
            sums = sweep.covered_sums(report, sql["thread_calls"], sql["probes"], 4, 2 * k,
                                      in_order=True)
        window[host, :4] = sums[:k]
        window[host, 4] = np.maximum((w_end - b[host]) - sums[:k].sum(axis=1), 0)
        at_copy[host] = sums[k:, 1] > 0
        at_sync[host] = sums[k:, 2] > 0
    cause = classify(gap, own_copy, other, inside, launch_known, prelaunched, at_sync,
                     at_copy, window, s.idle_cause_pct)
    return _result(s, unit, gap, cause, pid, dev, stream, b, e, detail)


def _filled(values: Any) -> np.ndarray:
    """A nullable integer column as int64 with NO_END for NULL."""
    if isinstance(values, np.ma.MaskedArray):
        return values.filled(NO_END).astype(np.int64)
    return np.asarray(values, dtype=np.int64)


def _result(s: Settings, unit: str | None, gap: np.ndarray, cause: np.ndarray,
            pid: np.ndarray, dev: np.ndarray, stream: np.ndarray, b: np.ndarray,
            e: np.ndarray, detail: bool) -> GpuIdleResult:
    total = int(gap.sum())
    counts = np.bincount(cause, minlength=len(CAUSES))
    times = np.bincount(cause, weights=gap, minlength=len(CAUSES)).astype(np.int64)
    rows = [CauseTime(c, int(counts[i]), int(times[i]), figures.share_pct(int(times[i]), total)
                      or 0.0) for i, c in enumerate(CAUSES)]
    by_cause = pa.Table.from_pylist([r.__dict__ for r in sorted(rows, key=lambda r: -r.idle_ns)],
                                    schema=pa.schema([("cause", pa.string()),
                                                      ("gaps", pa.int64()),
                                                      ("idle_ns", pa.int64()),
                                                      ("share_pct", pa.float64())]))
    lb = gap[cause == LAUNCH]
    d = figures.describe(lb.copy(), (0.5, 0.99), s.gap_normal_ns)
    p50, p99 = figures.q_columns(d["q"], ("p50", "p99")).values()
    per_stream = _per_stream(pid, dev, stream, cause, gap)
    tables = {"by_cause": by_cause, "per_stream": per_stream}
    if detail:
        tables["gaps"] = pa.table({"pid": pid, "device_id": dev, "stream_id": stream,
                                   "idle_start_ns": b, "idle_end_ns": e, "gap_ns": gap,
                                   "cause": pa.array([CAUSES[c] for c in cause.tolist()],
                                                     pa.string())})
    top = max(rows, key=lambda r: r.idle_ns).cause if total else None
    result = GpuIdleResult(
        status=OK, tables=tables, main="by_cause", gaps=len(gap), idle_ns=total, unit=unit,
        by_cause={r.cause: {"gaps": r.gaps, "idle_ns": r.idle_ns, "share_pct": r.share_pct}
                  for r in rows},
        top_cause=top, launch_bound_gaps=len(lb), launch_bound_p50_ns=p50,
        launch_bound_p99_ns=p99, launch_bound_max_ns=d["max_ns"],
        launch_bound_above_normal_pct=d["share_above_pct"],
        launch_bound_idle_pct=figures.share_pct(int(lb.sum()), total),
        launch_overhead=bool(p99 is not None and p99 > s.gap_p99_ns),
        normal_threshold_ns=s.gap_normal_ns, p99_threshold_ns=s.gap_p99_ns,
    )
    return replace(result, message=_message(result), findings=_findings(result))


def _per_stream(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray, cause: np.ndarray,
                gap: np.ndarray) -> pa.Table:
    schema = pa.schema([("pid", pa.int64()), ("device_id", pa.int64()),
                        ("stream_id", pa.int64()), ("cause", pa.string()),
                        ("gaps", pa.int64()), ("idle_ns", pa.int64()),
                        ("share_pct", pa.float64())])
    if not len(gap):
        return schema.empty_table()
    keys = np.stack([pid, dev, stream, cause.astype(np.int64)], axis=1)
    distinct, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.ravel()
    n = np.bincount(inv)
    t = np.bincount(inv, weights=gap).astype(np.int64)
    streams, sinv = np.unique(distinct[:, :3], axis=0, return_inverse=True)
    stream_total = np.bincount(sinv.ravel(), weights=t)
    return pa.table({
        "pid": distinct[:, 0], "device_id": distinct[:, 1], "stream_id": distinct[:, 2],
        "cause": [CAUSES[c] for c in distinct[:, 3].tolist()], "gaps": n, "idle_ns": t,
        "share_pct": 100.0 * t / np.maximum(stream_total[sinv.ravel()], 1),
    }, schema=schema)


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} us"


def breakdown(r: GpuIdleResult, limit: int = 4) -> str:
    """The largest causes in words: ``cpu_work 61%, host_sync 30%, ...``."""
    parts = sorted(((c, v) for c, v in (r.by_cause or {}).items() if v["idle_ns"] > 0),
                   key=lambda cv: -cv[1]["share_pct"])
    return ", ".join(f"{c} {v['share_pct']:.0f}%" for c, v in parts[:limit])


def _message(r: GpuIdleResult) -> str:
    if not r.gaps:
        return "no gap before a kernel"
    return (f"{r.gaps} gaps, {_ms(r.idle_ns)} idle: {breakdown(r)}"
            + (f" (unit {r.unit})" if r.unit else " (no unit: the whole run)"))


def _findings(r: GpuIdleResult) -> tuple[str, ...]:
    out = []
    if r.gaps and r.top_cause:
        out.append(f"most GPU idle time is {r.top_cause}: {MEANING[r.top_cause]}")
    if r.launch_bound_gaps:
        out.append(f"{r.launch_bound_gaps} launch-bound gaps: P50 "
                   f"{_ms(r.launch_bound_p50_ns)}, P99 {_ms(r.launch_bound_p99_ns)}"
                   + (" (launch overhead)" if r.launch_overhead else ""))
    return tuple(out)
