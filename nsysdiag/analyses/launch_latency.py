"""Launch latency and the dispatch queue: launch call cost, launch-to-start time, queue depth.

Each kernel launched on its own (not inside a CUDA graph) is joined to its launch API call:
the call's own CPU time, the time from the call's entry and from its return to the kernel's
start (queue time), per kernel and per kernel name. The dispatch queue counts kernels
launched but not started, per GPU and per stream, over time (check C1 of the method): a
queue that stays deep means the GPU is the bottleneck; a near-empty queue with large
launch gaps means the CPU cannot feed the GPU. Graph launches are timed per launch.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..compute import figures, intervals
from ..engine.accelerate import register, rows_of
from ..engine.steps import registered
from ..errors import UsageError
from ..settings import DEFAULTS, Settings
from ..views.launch import arrow_values
from .base import OK, AnalysisResult, figure, load_sql, nested, not_captured, run_query, stepped

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "launch_latency"

#: the depth series' keys and the tables of their pass (launch_latency.sql)
_SERIES_KEYS = ("level", "device_id", "global_pid", "pid", "context_id", "stream_id")
_SERIES_FIELDS = [pa.field("level", pa.string())] + [
    pa.field(k, pa.int64()) for k in _SERIES_KEYS[1:]]
_DEPTH_SCHEMAS = {
    "_depth_hist": pa.schema([*_SERIES_FIELDS, ("depth", pa.int64()), ("time_ns", pa.int64())]),
    "_depth_at_launch": pa.schema([("depth", pa.int64()), ("launches", pa.int64())]),
    "_depth_changes": pa.schema([*_SERIES_FIELDS, ("t_ns", pa.int64()), ("depth", pa.int64())]),
}

#: rows of the ``latency`` table: the result's LatencyFigures fields (the JSON summary's
#: ``<metric>_<stat>_ns`` keys)
_METRICS = (
    "api_duration",
    "api_start_to_kernel_start",
    "api_end_to_kernel_start",
    "queue",
    "graph_api_duration",
    "graph_launch_to_start",
)


@dataclass(frozen=True)
class LatencyFigures:
    """One row of the ``latency`` table: a metric's percentiles (``result.queue.p50_ns``).
    In the JSON summary they are flat keys: ``queue_p50_ns``, ``api_duration_max_ns``, ..."""

    p50_ns: float | None = figure("P50, ns")
    p90_ns: float | None = figure("P90, ns")
    p99_ns: float | None = figure("P99, ns")
    max_ns: int | None = figure("largest, ns")


@dataclass(frozen=True, kw_only=True)
class LaunchLatencyResult(AnalysisResult):
    """Launch latency: the launch calls' cost, launch-to-start times and the dispatch
    queue's depth (check C1). Each metric of the ``latency`` table is a
    :class:`LatencyFigures` record (``result.api_duration.p50_ns``; the JSON summary's
    ``api_duration_p50_ns``).

    Tables: ``latency`` (main; one row per metric), ``queue_depth_hist`` (time at each
    depth), ``graph_launches``; with details also ``per_kernel``, ``per_name`` and
    ``queue_depth`` (every change of depth).
    """

    analysis: str = field(default="launch_latency", init=False)
    kernels: int = figure("kernels launched one by one (outside CUDA graphs)", 0)
    matched: int = figure("kernels joined to their launch call", 0)
    unmatched: int = figure("kernels with no traced launch call", 0)
    unmatched_pct: float | None = figure("unmatched share of kernels, %")
    queued: int = figure("kernels that started after their launch call returned", 0)
    negative_queue: int = figure("kernels that started before their launch call returned", 0)
    negative_queue_pct: float | None = figure("negative_queue share of matched kernels, %")
    graph_launches: int = figure("graph launch calls", 0)
    depth_at_launch_p50: float | None = figure(
        "P50 of the dispatch queue's depth when a kernel is launched (kernels launched but "
        "not started, on its GPU)")
    depth_at_launch_p90: float | None = figure("P90 of the depth at launch (kernels)")
    depth_at_launch_p99: float | None = figure("P99 of the depth at launch (kernels)")
    depth_at_launch_max: int | None = figure("largest depth at launch (kernels)")
    mean_depth: float | None = figure("time-weighted mean depth per GPU, GPUs pooled (kernels)")
    queue_nonempty_pct: float | None = figure("share of the time the queue held a kernel, %")
    api_duration: LatencyFigures = nested("the launch call's CPU time", LatencyFigures)
    api_start_to_kernel_start: LatencyFigures = nested(
        "from the launch call's entry to the kernel's start", LatencyFigures)
    api_end_to_kernel_start: LatencyFigures = nested(
        "from the launch call's return to the kernel's start (negative: started before the "
        "return)", LatencyFigures)
    queue: LatencyFigures = nested(
        "queue time: the positive part of api_end_to_kernel_start", LatencyFigures)
    graph_api_duration: LatencyFigures = nested("a graph launch call's CPU time",
                                                LatencyFigures)
    graph_launch_to_start: LatencyFigures = nested(
        "from a graph launch call's entry to the graph's first GPU work", LatencyFigures)


RESULT = LaunchLatencyResult



def run(report: Report, *, top: int | None = None, detail: bool = True,
        settings: Settings | None = None) -> LaunchLatencyResult | AnalysisResult:
    """Time every kernel launch and follow the dispatch queue.

    Parameters
    ----------
    report : Report
        An opened export with kernels and CUDA API calls.
    top : int, optional
        ``per_name`` keeps the ``top`` names launched most often. Default: every name.
    detail : bool
        With False (what the diagnosis uses), skip the per-stream queue depth and the
        per-kernel, per-name and depth-series tables (per name: one quantile sort per
        name,); the summary is the same.
    settings : Settings, optional
        ``shallow_queue_depth`` and ``deep_queue_depth``: the depths at launch the
        findings call near-empty and deep.

    Returns
    -------
    LaunchLatencyResult
        figures: ``kernels`` (non-graph), ``matched``, ``unmatched``, ``unmatched_pct``,
        ``queued``, ``negative_queue``, ``negative_queue_pct``, ``graph_launches``;
        each metric of ``latency`` as a :class:`LatencyFigures` (``p50_ns``, ``p90_ns``,
        ``p99_ns``, ``max_ns``; JSON keys ``<metric>_p50_ns``, ...);
        ``depth_at_launch_p50``, ``_p90``, ``_p99``, ``_max``, ``mean_depth``
        (time-weighted) and ``queue_nonempty_pct`` (per GPU, all GPUs pooled).
        ``tables``: ``latency`` (main; one row per metric), ``per_kernel``, ``per_name``,
        ``queue_depth`` (every change of depth), ``queue_depth_hist`` (time at each depth)
        and ``graph_launches``.

    Notes
    -----
    Metrics, all in ns: ``api_duration`` (the launch call's CPU time),
    ``api_start_to_kernel_start``, ``api_end_to_kernel_start`` (negative when the kernel
    started before the call returned), ``queue`` (its positive part: 0 for those),
    ``graph_api_duration`` and ``graph_launch_to_start`` (per graph launch). Kernels are
    joined to launch calls on (global_pid, correlation_id).
    """
    if top is not None and top < 1:
        raise UsageError(f"top must be a positive integer, got {top!r}")
    missing = not_captured(NAME, report, "kernels", "api_calls")
    if missing:
        return missing
    names = ("latency", "queue_depth_hist", "graph_launches")
    if detail:
        names += ("per_kernel", "per_name", "queue_depth")
    with stepped(report, NAME, {"top": top}) as sql, ExitStack() as stack:
        sql.need("launches", "graph_latency")  # the pass reads them
        measured = TABLES(report, detail)
        for name in _DEPTH_SCHEMAS:
            stack.enter_context(registered(report, name, measured[name]))
        tables = {name: measured["latency"] if name == "latency" else sql.query(name)
                  for name in names}
        summary = sql.query("summary").to_pylist()[0]
    latency = {r["metric"]: r for r in tables["latency"].to_pylist()}
    for metric in _METRICS:
        row = latency.get(metric, {})
        summary[metric] = LatencyFigures(row.get("p50_ns"), row.get("p90_ns"),
                                         row.get("p99_ns"), row.get("max_ns"))
    result = LaunchLatencyResult(status=OK, tables=tables, main="latency", **summary)
    return replace(result, message=_message(result),
                   findings=_findings(result, settings or DEFAULTS))


_LATENCY_SCHEMA = pa.schema([("metric", pa.string()), ("count", pa.int64()),
                             *((f"{q}_ns", pa.float64()) for q in ("p50", "p90", "p99")),
                             ("max_ns", pa.int64()), ("mean_ns", pa.float64())])


def method(report: Report, detail: bool) -> dict[str, pa.Table]:
    """The SQL method (launch_latency.sql, over the temporary views launches and
    graph_latency): the tables ``latency``, ``_depth_hist``, ``_depth_at_launch`` and
    (with ``detail``, else empty) ``_depth_changes``."""
    with stepped(report, NAME) as sql:
        out = {name: sql.query(name).cast(schema)
               for name, schema in _DEPTH_SCHEMAS.items()
               if detail or name != "_depth_changes"}
        out.setdefault("_depth_changes", _DEPTH_SCHEMAS["_depth_changes"].empty_table())
        out["latency"] = sql.query("latency").cast(_LATENCY_SCHEMA)
    return out


def accelerated(report: Report, detail: bool) -> dict[str, pa.Table]:
    """:func:`method`'s tables from a compiled pass per depth series and the latency
    figures in numpy."""
    return {"latency": _latency(report), **_depth(report, detail)}


def _latency(report: Report) -> pa.Table:
    """The latency table: per metric (``_METRICS``) with values, count, p50/p90/p99 (as
    DuckDB's quantile_cont), max and mean; the kernel metrics from one read of the matched
    launches, batch by batch into one array per metric (launch_latency.sql says why), the
    graph metrics from SQL."""
    (n,), = report.execute("SELECT count(*) FROM launches")
    values = [np.empty(n, dtype=np.int64) for _ in range(4)]
    filled = [0] * 4
    launches = report.sql("SELECT start_ns, api_start_ns, api_end_ns FROM launches "
                          "WHERE api_start_ns IS NOT NULL OR api_end_ns IS NOT NULL")
    for batch in launches.to_arrow_reader(intervals.BATCH_ROWS):
        (start, start_ok), (api_start, api_start_ok), (api_end, api_end_ok) = (
            arrow_values(column) for column in batch.columns)
        for k, (x, x_ok, y, y_ok) in enumerate((
            (api_end, api_end_ok, api_start, api_start_ok),  # api_duration
            (start, start_ok, api_start, api_start_ok),  # api_start_to_kernel_start
            (start, start_ok, api_end, api_end_ok),  # api_end_to_kernel_start
            # queue: greatest(start - end, 0), which is 0 where the start is NULL
            (np.where(start_ok, start, api_end), api_end_ok, api_end, api_end_ok),
        )):
            ok = x_ok & y_ok
            if not ok.all():
                x, y = x[ok], y[ok]
            out = values[k][filled[k]:filled[k] + len(x)]
            np.subtract(x, y, out=out)
            if k == 3:
                np.maximum(out, 0, out=out)
            filled[k] += len(x)
    rows = []
    for metric, v, m in zip(_METRICS, values, filled):
        if m:
            v = v[:m]
            q = figures.quantiles(v, (0.5, 0.9, 0.99), scratch=True)  # sorted in place
            rows.append({"metric": metric, "count": m, "p50_ns": q[0], "p90_ns": q[1],
                         "p99_ns": q[2], "max_ns": int(v.max()),
                         "mean_ns": figures.mean(figures.exact_sum(v), m)})
    del values
    graphs = run_query(report, NAME, "graph_latency_rows").cast(_LATENCY_SCHEMA)
    return pa.concat_tables([pa.Table.from_pylist(rows, schema=_LATENCY_SCHEMA), graphs])


def _depth(report: Report, streams: bool) -> dict[str, pa.Table]:
    """The queue depth series of each GPU (and stream): ``_depth_hist``,
    ``_depth_at_launch`` and ``_depth_changes`` of launch_latency.sql."""
    sql = load_sql(NAME)
    hist, marked = [], {}
    changes = [_DEPTH_SCHEMAS["_depth_changes"].empty_table()]

    def series(level: str, keys: dict[str, int], up: np.ndarray, same: np.ndarray,
               down: np.ndarray) -> dict[int, int]:
        # a series counts from its first to its last +1 or -1 event: the first queued
        # return and the last start (each start comes after its return)
        lo, hi = (int(up.min()), int(down.max())) if len(up) else (None, None)
        time_at, marked_at, (t, depth) = intervals.queue_depth(up, same, down, lo, hi,
                                                              keep_changes=streams)
        row = _series_row(level, keys)
        hist.extend({**row, "depth": k, "time_ns": v} for k, v in sorted(time_at.items()))
        if len(t):
            changes.append(pa.table(
                {**{k: pa.repeat(pa.scalar(row[k], f.type), len(t))
                    for k, f in zip(_SERIES_KEYS, _SERIES_FIELDS)},
                 "t_ns": t, "depth": depth}, schema=_DEPTH_SCHEMAS["_depth_changes"]))
        return marked_at

    for device, launches in report.sql(sql["queue_devices"]).fetchall():
        for k, v in series("device", {"device_id": device},
                           *_device_events(report, sql["queue_launches"], device, launches)
                           ).items():
            marked[k] = marked.get(k, 0) + v
        if streams:
            rows = {k: np.asarray(v, dtype=np.int64) for k, v in
                    report.sql(sql["queue_streams"], {"device": device}).fetchnumpy().items()}
            keys = ("global_pid", "context_id", "stream_id")
            codes, distinct = intervals.run_codes(tuple(rows[k] for k in keys))
            for code, at in intervals.by_code(codes, len(distinct)):
                series("stream", {"device_id": device, **dict(zip(keys, distinct[code].tolist()))},
                       rows["api_end_ns"][at], np.empty(0, dtype=np.int64), rows["start_ns"][at])
    return {
        "_depth_hist": pa.Table.from_pylist(hist, schema=_DEPTH_SCHEMAS["_depth_hist"]),
        "_depth_at_launch": pa.table({"depth": list(marked), "launches": list(marked.values())},
                                     schema=_DEPTH_SCHEMAS["_depth_at_launch"]),
        "_depth_changes": pa.concat_tables(changes),
    }


def _device_events(report: Report, sql: str, device: int, launches: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One GPU's queue events: the returns of the queued launches (+1), of the others (0)
    and the starts of the queued kernels (-1). Filled batch by batch into two arrays of
    one slot per launch (queued returns from the front, the others from the back): two
    integers per launch, not a table of them."""
    up, down = np.empty(launches, dtype=np.int64), np.empty(launches, dtype=np.int64)
    front, back = 0, launches
    for batch in report.sql(sql, {"device": device}).to_arrow_reader(intervals.BATCH_ROWS):
        end = batch.column("api_end_ns").to_numpy()
        start = batch.column("queued_start_ns")
        queued = start.is_valid().to_numpy(zero_copy_only=False)
        n = int(queued.sum())
        up[front:front + n] = end[queued]
        down[front:front + n] = start.drop_null().to_numpy()
        up[back - (len(end) - n):back] = end[~queued]
        front, back = front + n, back - (len(end) - n)
    return up[:front], up[back:], down[:front]


def _series_row(level: str, keys: dict[str, int]) -> dict[str, Any]:
    """A depth series' identity: level and its keys (the stream's, NULL at device level)."""
    row = {k: None for k in _SERIES_KEYS} | {"level": level, **keys}
    if level == "stream":
        row["pid"] = (keys["global_pid"] >> 24) & 0xFFFFFF
    return row


def _us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e3:.2f} us"


def _message(r: LaunchLatencyResult) -> str:
    depth = "n/a" if r.mean_depth is None else f"{r.mean_depth:.2f}"
    return (
        f"{r.kernels} kernels: launch call P50 {_us(r.api_duration.p50_ns)}, "
        f"call to start P50 {_us(r.api_start_to_kernel_start.p50_ns)}, "
        f"queue P50 {_us(r.queue.p50_ns)}; mean queue depth {depth}"
    )


def _findings(r: LaunchLatencyResult, s: Settings) -> tuple[str, ...]:
    out = []
    if r.unmatched:
        out.append(
            f"{r.unmatched} kernels ({r.unmatched_pct:.1f}%) have no traced launch call"
        )
    if r.negative_queue:
        out.append(
            f"{r.negative_queue} kernels ({r.negative_queue_pct:.1f}%) started "
            "before their launch call returned"
        )
    p50, p90, p99 = r.depth_at_launch_p50, r.depth_at_launch_p90, r.depth_at_launch_p99
    if p90 is not None and p90 <= s.shallow_queue_depth:
        out.append(
            f"dispatch queue near-empty (depth at launch P90 {p90:g}): the GPU waits on "
            "the CPU whenever launch gaps are large"
        )
    elif p50 is not None and p50 >= s.deep_queue_depth:
        out.append(
            f"dispatch queue stays deep (depth at launch P50 {p50:g}): the GPU is the bottleneck"
        )
    elif p99 is not None and p99 >= s.deep_queue_depth:
        out.append(
            f"dispatch queue backs up at times (depth at launch P90 {p90:g}, P99 {p99:g}):"
            " the GPU falls behind in bursts"
        )
    return tuple(out)


#: the latency and queue depth tables by the SQL method or the pass, as the engine chooses
#: for the kernels' rows
TABLES = register(NAME, "latency", method=method, accelerated=accelerated,
                  rows=rows_of("kernels"))
