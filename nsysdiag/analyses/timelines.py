"""Per-unit timelines: what the CPU and the GPU did inside the window of a few units of
latency (the slowest, and one median unit for contrast).

Not an analysis command of its own: the HTML report draws these timelines, and the
diagnosis layer (:func:`nsysdiag.diagnosis.timelines.collect_timelines`) picks the units
from a diagnosis and calls :func:`unit_timelines` while the report is open. The queries
are in ``sql/timelines.sql``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import AnalysisResult, _bind, load_sql

if TYPE_CHECKING:
    import pyarrow as pa

    from ..report import Report

NAME = "timelines"

#: most events of one kind kept per timeline (the rest are counted, not drawn)
MAX_TIMELINE_EVENTS = 2500

#: the operation views whose rows are a timeline's GPU work, with their query
_GPU_QUERIES = (("kernels", "gpu_kernels"), ("memcpys", "gpu_memcpys"), ("memsets", "gpu_memsets"))


def unit_timelines(
    report: Report,
    *,
    unit: str | None,
    p50_ns: float | None,
    ranges: AnalysisResult | None,
    n: int = 3,
    median: bool = True,
    max_events: int = MAX_TIMELINE_EVENTS,
) -> list[dict]:
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
    list of dict
        One dict per unit, slowest first (the median one last): ``label``, ``name``,
        ``rank`` (1-based among the slowest; 0 for the median unit), ``start_ns``,
        ``end_ns``, ``duration_ns``, ``pid``, ``tid`` (None when unknown), and the events
        overlapping the window: ``nvtx`` (``start_ns``, ``end_ns``, ``name``, ``tid``),
        ``cpu`` (CUDA API calls on the unit's thread: ``start_ns``, ``end_ns``, ``name``,
        ``category``, ``tid``), ``gpu`` (kernels, memcpys, memsets of the process:
        ``start_ns``, ``end_ns``, ``kind``, ``name``, ``device_id``, ``stream_id``,
        ``bytes``), ``truncated`` (events left out over ``max_events``) and ``note``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    units = _select_units(report, unit, p50_ns, ranges, n, median)
    return [_unit_timeline(report, u, max_events) for u in units]


def _query(report: Report, name: str, params: dict[str, Any]) -> list[tuple]:
    sql = load_sql(NAME)[name]
    return report.execute(sql, _bind(sql, params))


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _select_units(
    report: Report,
    unit: str | None,
    p50_ns: float | None,
    ranges: AnalysisResult | None,
    n: int,
    median: bool,
) -> list[dict]:
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
    units = []
    for row in picked:
        s = _num(row.get("start_ns"))
        e = _num(row.get("end_ns"))
        if e is None and s is not None and _num(row.get("duration_ns")) is not None:
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
            {
                "start_ns": int(s),
                "end_ns": int(e),
                "pid": pid,
                "tid": tid,
                "rank": rank,
                "name": unit or "unit",
                "skipped_note": (
                    f"{skipped} slower unit(s) passed over: CUDA was not traced while they ran"
                    if skipped
                    else ""
                ),
                "label": (
                    f"#{rank} slowest {unit or 'unit'}" if rank else f"median {unit or 'unit'}"
                ),
            }
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


def _unit_timeline(report: Report, u: dict, max_events: int) -> dict:
    probe = report.probe
    s, e, pid, tid = u["start_ns"], u["end_ns"], u["pid"], u["tid"]
    out = {
        **{k: v for k, v in u.items() if k != "skipped_note"},
        "duration_ns": e - s,
        "nvtx": [],
        "cpu": [],
        "gpu": [],
        "truncated": 0,
        "note": "",
    }
    win = {"s": s, "e": e, "lim": max_events + 1}
    notes = [u["skipped_note"]] if u.get("skipped_note") else []
    params = {**win, "pid": pid, "tid": tid}
    if pid is None:
        out["note"] = "; ".join([*notes, "the unit's process is unknown: no events shown"])
        return out

    def take(rows: list, cols: tuple[str, ...], key: str) -> None:
        if len(rows) > max_events:
            out["truncated"] += len(rows) - max_events
            rows = rows[:max_events]
        out[key] = [dict(zip(cols, r, strict=False)) for r in rows]

    if probe.present("nvtx_ranges"):
        take(_query(report, "nvtx", params), ("start_ns", "end_ns", "name", "tid"), "nvtx")
    if probe.present("api_calls"):
        take(
            _query(report, "cpu", params),
            ("start_ns", "end_ns", "name", "category", "tid"),
            "cpu",
        )
    else:
        notes.append("CUDA API calls not captured")
    if tid is None:
        notes.append("the unit's thread is unknown: CPU calls of every thread of the process")
    sql = load_sql(NAME)
    parts = [sql[query] for view, query in _GPU_QUERIES if probe.present(view)]
    if parts:
        q = " UNION ALL ".join(f"({p})" for p in parts) + " ORDER BY start_ns LIMIT $lim"
        take(
            report.execute(q, {**win, "pid": pid}),
            ("start_ns", "end_ns", "kind", "name", "device_id", "stream_id", "bytes"),
            "gpu",
        )
    for key in ("nvtx", "cpu", "gpu"):
        for ev in out[key]:
            for k in ("start_ns", "end_ns", "device_id", "stream_id", "bytes", "tid"):
                if ev.get(k) is not None and not isinstance(ev[k], (int, float)):
                    ev[k] = int(ev[k])
    out["note"] = "; ".join(notes)
    return out
