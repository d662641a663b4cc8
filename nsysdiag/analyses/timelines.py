"""Per-unit timelines: what the CPU and the GPU did inside the window of a few units of
latency (the slowest, and one median unit for contrast).

Not an analysis command of its own: the HTML report draws these timelines, and the
diagnosis layer (:func:`nsysdiag.diagnosis.timelines.collect_timelines`) picks the units
from a diagnosis and calls :func:`unit_timelines` while the report is open. The queries
are in ``sql/timelines.sql``. Each unit's timeline is a frozen :class:`UnitTimeline`
whose events are typed records (:class:`NvtxSpan`, :class:`ApiSpan`, :class:`GpuSpan`);
times are ns on the trace clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..engine.steps import bind
from ..formatting import finite
from .base import AnalysisResult, load_sql

if TYPE_CHECKING:
    import pyarrow as pa

    from ..engine.protocols import ReportLike as Report

NAME = "timelines"

#: most events of one kind kept per timeline (the rest are counted, not drawn)
MAX_TIMELINE_EVENTS = 2500

#: the operation views whose rows are a timeline's GPU work, with their query
_GPU_QUERIES = (("kernels", "gpu_kernels"), ("memcpys", "gpu_memcpys"), ("memsets", "gpu_memsets"))


@dataclass(frozen=True)
class NvtxSpan:
    """An NVTX range of the unit's thread that overlaps the unit's window."""

    start_ns: int  #: start, ns on the trace clock
    end_ns: int  #: end, ns on the trace clock
    name: str | None  #: the range's text
    tid: int | None  #: the thread that pushed it


@dataclass(frozen=True)
class ApiSpan:
    """A CUDA API call of the unit's thread that overlaps the unit's window."""

    start_ns: int  #: start, ns on the trace clock
    end_ns: int  #: end, ns on the trace clock
    name: str | None  #: the API function's name
    category: str | None  #: the ``api_calls`` view's category (launch, memcpy, sync, ...)
    tid: int | None  #: the calling thread


@dataclass(frozen=True)
class GpuSpan:
    """A kernel, copy or memset of the unit's process that overlaps the unit's window."""

    start_ns: int  #: start on the GPU, ns on the trace clock
    end_ns: int  #: end on the GPU, ns on the trace clock
    kind: str  #: kernel, memcpy or memset
    name: str | None  #: a kernel's short name, a copy's kind (HtoD, ...), or memset
    device_id: int | None  #: the GPU
    stream_id: int | None  #: the CUDA stream
    bytes: int | None  #: bytes copied or set (None for a kernel)


@dataclass(frozen=True)
class UnitTimeline:
    """What the CPU and the GPU did inside the window of one unit of latency.

    The events are those overlapping ``[start_ns, end_ns)``, ordered by start, at most
    ``max_events`` of each kind (``truncated`` counts the rest).
    """

    label: str  #: a heading: "#1 slowest <unit>", "median <unit>"
    name: str  #: the unit's name (its NVTX range), "unit" when it has none
    rank: int  #: 1-based among the slowest; 0 for the median unit; -1 when none was collected
    start_ns: int  #: the window's start, ns on the trace clock
    end_ns: int  #: the window's end, ns on the trace clock
    pid: int | None  #: the unit's process (None when unknown: then no events)
    tid: int | None  #: the unit's thread (None when unknown: every thread of the process)
    nvtx: tuple[NvtxSpan, ...] = ()  #: NVTX ranges of the unit's thread
    cpu: tuple[ApiSpan, ...] = ()  #: CUDA API calls of the unit's thread
    gpu: tuple[GpuSpan, ...] = ()  #: GPU work of the unit's process
    truncated: int = 0  #: events left out over ``max_events``
    note: str = ""  #: what the timeline lacks and why ("" when complete)

    @property
    def duration_ns(self) -> int:
        """The unit's latency: ``end_ns - start_ns``, ns."""
        return self.end_ns - self.start_ns

    @classmethod
    def unavailable(cls, note: str) -> UnitTimeline:
        """The stand-in for timelines that could not be collected; ``note`` says why."""
        return cls("timelines unavailable", "", -1, 0, 0, None, None, note=note)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict: the fields, ``duration_ns``, and the events as dicts."""
        return {**dataclasses.asdict(self), "duration_ns": self.duration_ns}


@dataclass(frozen=True)
class _Window:
    """A unit picked for a timeline, before its events are read."""

    start_ns: int
    end_ns: int
    pid: int | None
    tid: int | None
    rank: int
    name: str
    label: str
    skipped_note: str


def unit_timelines(
    report: Report,
    *,
    unit: str | None,
    p50_ns: float | None,
    ranges: AnalysisResult | None,
    n: int = 3,
    median: bool = True,
    max_events: int = MAX_TIMELINE_EVENTS,
) -> list[UnitTimeline]:
    """CPU and GPU activity inside the windows of the slowest units (and one median unit).

    Parameters
    ----------
    report : Report
        The open report.
    unit : str or None
        The unit of latency (an NVTX range name); None gives no timelines.
    p50_ns : float or None
        The median unit latency, ns: the median unit is the one closest to it.
    ranges : AnalysisResult or None
        The ``ranges`` result whose ``slowest``/``instances`` tables give the units'
        windows; without it (or without rows) the NVTX ranges named ``unit`` do.
    n : int, default 3
        How many of the slowest units.
    median : bool, default True
        Add the unit closest to the median latency.
    max_events : int
        At most this many events of each kind (CPU calls, GPU work, NVTX) per unit.

    Returns
    -------
    list of UnitTimeline
        One per unit, slowest first (the median one last), with the NVTX ranges, CUDA API
        calls and GPU work overlapping its window.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    units = _select_units(report, unit, p50_ns, ranges, n, median)
    return [_unit_timeline(report, u, max_events) for u in units]


def _query(report: Report, name: str, params: dict[str, Any]) -> list[tuple]:
    sql = load_sql(NAME)[name]
    return report.execute(sql, bind(sql, params))


def _select_units(
    report: Report,
    unit: str | None,
    p50_ns: float | None,
    ranges: AnalysisResult | None,
    n: int,
    median: bool,
) -> list[_Window]:
    """Windows of the ``n`` slowest units and of one median unit."""
    picked: list[dict] = []
    if ranges is not None and ranges.ok:
        for name in ("slowest", "instances"):
            t = ranges.tables.get(name)
            if (
                t is not None
                and t.num_rows
                and "start_ns" in t.column_names
                and ("end_ns" in t.column_names or "duration_ns" in t.column_names)
            ):
                picked = _rows_by_duration(t, n, slowest=True)
                break
        inst = ranges.tables.get("instances")
        if (
            median
            and p50_ns
            and inst is not None
            and inst.num_rows
            and "start_ns" in inst.column_names
            and "duration_ns" in inst.column_names
        ):
            dur = np.asarray(inst.column("duration_ns").to_numpy(zero_copy_only=False), dtype=float)
            i = int(np.nanargmin(np.abs(dur - p50_ns)))
            row = inst.slice(i, 1).to_pylist()[0]
            picked.append({**row, "_rank": 0})
    if not picked and unit:
        if not report.probe.present("nvtx_ranges"):
            return []
        cols = ("start_ns", "end_ns", "pid", "tid")
        slow = _query(report, "slowest_ranges", {"u": unit, "n": n})
        picked = [{**dict(zip(cols, r, strict=False)), "_rank": k + 1} for k, r in enumerate(slow)]
        if median and p50_ns:
            mid = _query(report, "median_range", {"u": unit, "p": float(p50_ns)})
            picked += [{**dict(zip(cols, r, strict=False)), "_rank": 0} for r in mid]
    units: list[_Window] = []
    for row in picked:
        s = finite(row.get("start_ns"))
        e = finite(row.get("end_ns"))
        if e is None and s is not None and finite(row.get("duration_ns")) is not None:
            e = s + float(row["duration_ns"])
        if s is None or e is None:
            continue
        pid, tid = row.get("pid"), row.get("tid")
        if tid is None and row.get("global_tid") is not None:
            g = int(row["global_tid"])
            pid, tid = (g >> 24) & 0xFFFFFF, g & 0xFFFFFF
        if (pid is None or tid is None) and unit and report.probe.present("nvtx_ranges"):
            hit = _query(report, "range_thread", {"u": unit, "s": int(s)})
            if hit:
                pid, tid = hit[0]
        rank = int(row.get("_rank", 0))
        skipped = int(row.get("_skipped", 0) or 0)
        units.append(
            _Window(
                start_ns=int(s),
                end_ns=int(e),
                pid=pid,
                tid=tid,
                rank=rank,
                name=unit or "unit",
                skipped_note=(
                    f"{skipped} slower unit(s) passed over: CUDA was not traced while they ran"
                    if skipped
                    else ""
                ),
                label=(
                    f"#{rank} slowest {unit or 'unit'}" if rank else f"median {unit or 'unit'}"
                ),
            )
        )
    return units


def _rows_by_duration(t: pa.Table, n: int, *, slowest: bool) -> list[dict]:
    """The ``n`` longest (or shortest) rows; rows with ``cuda_covered`` false (CUDA was not
    traced during the unit, so its timeline would be empty) are passed over and counted in
    the first row's ``_skipped``."""
    if "duration_ns" in t.column_names:
        dur = np.asarray(t.column("duration_ns").to_numpy(zero_copy_only=False), dtype=float)
    else:
        dur = np.asarray(
            t.column("end_ns").to_numpy(zero_copy_only=False), dtype=float
        ) - np.asarray(t.column("start_ns").to_numpy(zero_copy_only=False), dtype=float)
    dur = np.where(np.isfinite(dur), dur, -np.inf)
    order = np.argsort(-dur if slowest else dur, kind="stable")
    covered = (
        t.column("cuda_covered").to_pylist()
        if "cuda_covered" in t.column_names
        else [None] * t.num_rows
    )
    out: list[dict] = []
    skipped = 0
    for i in order:
        if len(out) >= n:
            break
        if covered[int(i)] is False:
            skipped += 1
            continue
        out.append({**t.slice(int(i), 1).to_pylist()[0], "_rank": len(out) + 1})
    if out and skipped:
        out[0]["_skipped"] = skipped
    return out


def _int(v: Any) -> int | None:
    """An id, time or size from the database as a Python int (None stays None)."""
    return None if v is None else int(v)


def _unit_timeline(report: Report, u: _Window, max_events: int) -> UnitTimeline:
    probe = report.probe
    win = {"s": u.start_ns, "e": u.end_ns, "lim": max_events + 1}
    notes = [u.skipped_note] if u.skipped_note else []
    found: dict[str, tuple] = {}
    truncated = 0

    def timeline(note_: list[str]) -> UnitTimeline:
        return UnitTimeline(
            label=u.label, name=u.name, rank=u.rank, start_ns=u.start_ns, end_ns=u.end_ns,
            pid=u.pid, tid=u.tid, nvtx=found.get("nvtx", ()), cpu=found.get("cpu", ()),
            gpu=found.get("gpu", ()), truncated=truncated, note="; ".join(note_),
        )

    if u.pid is None:
        return timeline([*notes, "the unit's process is unknown: no events shown"])
    params = {**win, "pid": u.pid, "tid": u.tid}

    def take(rows: list[tuple]) -> list[tuple]:
        nonlocal truncated
        if len(rows) > max_events:
            truncated += len(rows) - max_events
            rows = rows[:max_events]
        return rows

    if probe.present("nvtx_ranges"):
        found["nvtx"] = tuple(
            NvtxSpan(_int(s), _int(e), name, _int(tid))
            for s, e, name, tid in take(_query(report, "nvtx", params))
        )
    if probe.present("api_calls"):
        found["cpu"] = tuple(
            ApiSpan(_int(s), _int(e), name, category, _int(tid))
            for s, e, name, category, tid in take(_query(report, "cpu", params))
        )
    else:
        notes.append("CUDA API calls not captured")
    if u.tid is None:
        notes.append("the unit's thread is unknown: CPU calls of every thread of the process")
    sql = load_sql(NAME)
    parts = [sql[query] for view, query in _GPU_QUERIES if probe.present(view)]
    if parts:
        q = " UNION ALL ".join(f"({p})" for p in parts) + " ORDER BY start_ns LIMIT $lim"
        found["gpu"] = tuple(
            GpuSpan(_int(s), _int(e), kind, name, _int(dev), _int(stream), _int(size))
            for s, e, kind, name, dev, stream, size in take(
                report.execute(q, {**win, "pid": u.pid})
            )
        )
    return timeline(notes)
