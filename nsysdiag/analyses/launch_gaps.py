"""Launch gaps: idle time between consecutive kernels on each GPU (launch overhead).

The method's definition: per process and GPU, kernels sorted by start; keep the running
maximum of the end times seen so far; each kernel that starts after it follows one gap
(start - running max end). A normal gap is under 5 us; a P99 gap above 20 us is the
quantitative signal of a CPU-side scheduling bottleneck. Kernels launched inside CUDA
graphs are reported apart; gaps per stream are given too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click
import numpy as np
import pyarrow as pa

from ..errors import UsageError
from ..report import Report
from . import _compiled, intervals
from .base import (
    OK,
    AnalysisResult,
    expose,
    load_sql,
    not_captured,
    run_query,
    step_file,
    step_writer,
    temp_views,
)

NAME = "launch_gaps"

#: queries of the SQL file named as views over the pass' step gap_rows
_VIEWS = ("gaps", "main_gaps")
#: gap_rows.kind_id of the gap before each unit of the sequence (kernel, graph node,
#: graph-level execution); a graph node's gap is a graph_launch gap when the node is the
#: first of its launch
KERNEL, GRAPH_LAUNCH, GRAPH_NODE = 0, 1, 2

#: the end of a unit whose end is unknown: below every valid timestamp (views.TS_LIMIT), so
#: it extends no busy period and is no kernel's predecessor
NO_END = -(1 << 62)

_STREAM_KEYS = ("global_pid", "device_id", "context_id", "stream_id")
_SCHEMAS = {
    "gap_rows": pa.schema([(c, pa.int64()) for c in (
        "device_id", "pid", "global_pid", "kind_id", "correlation_id", "gap_ns", "start_ns",
        "launch_end_ns")]),
    "stream_gaps": pa.schema([(c, pa.int64()) for c in (*_STREAM_KEYS, "gap_ns")]),
}

#: share of idle time in prelaunched gaps (%) from which a finding says so
_PRELAUNCHED_PCT = 10.0

CLI_OPTIONS = [
    click.option(
        "--normal-threshold-us",
        type=click.FloatRange(min=0),
        default=5.0,
        show_default=True,
        help="Gaps above this are not normal (us).",
    ),
    click.option(
        "--p99-threshold-us",
        type=click.FloatRange(min=0),
        default=20.0,
        show_default=True,
        help="A P99 gap above this signals a CPU-side bottleneck (us).",
    ),
]


def _thresholds(normal_threshold_us: float, p99_threshold_us: float) -> dict[str, int]:
    for name, value in (
        ("normal_threshold_us", normal_threshold_us),
        ("p99_threshold_us", p99_threshold_us),
    ):
        if not value >= 0:
            raise UsageError(f"{name} must be a number >= 0, got {value!r}")
    return {
        "normal_ns": round(normal_threshold_us * 1000),
        "p99_ns": round(p99_threshold_us * 1000),
    }


def gap_summary(
    report: Report, *, normal_threshold_us: float = 5.0, p99_threshold_us: float = 20.0
) -> dict[str, Any]:
    """The main launch-gap distribution in figures (gaps before non-graph kernels).

    Parameters
    ----------
    report : Report
        An opened export. A report without kernels gives ``count`` 0 and None percentiles.
    normal_threshold_us, p99_threshold_us : float
        The method's thresholds, in microseconds.

    Returns
    -------
    dict
        ``count``, ``p50_ns``, ``p90_ns``, ``p99_ns``, ``p999_ns``, ``max_ns``, ``mean_ns``,
        ``total_ns`` (idle time summed), ``share_above_normal_pct``,
        ``share_above_p99_threshold_pct``, ``cpu_bound`` (P99 above the P99 threshold),
        ``kernels`` (non-graph kernels), ``graph_kernels``, ``normal_threshold_ns``,
        ``p99_threshold_ns``; and the gaps' attribution (None or 0 without a CUDA API
        trace): ``prelaunched_gaps`` (the kernel after the gap had been launched before
        the GPU went idle: not launch overhead), ``prelaunched_idle_pct`` (their share of
        the idle time), ``starved_gaps``, ``starved_p50_ns``, ``starved_p99_ns`` (the
        others: the GPU ran out of work before the next launch call returned).
    """
    params = _thresholds(normal_threshold_us, p99_threshold_us)
    with _gaps(report, streams=False):
        return _summary(report, params)


@contextlib.contextmanager
def _gaps(report: Report, streams: bool) -> Iterator[None]:
    """The steps of the SQL file, written by the sorted pass (``stream_gaps`` only with
    ``streams``), and the views over them."""
    with contextlib.ExitStack() as stack:
        files = {name: stack.enter_context(step_file(report, NAME, name))
                 for name in ("gap_rows", "stream_gaps")[: 2 if streams else 1]}
        with contextlib.ExitStack() as writers:
            out = {name: writers.enter_context(step_writer(target, _SCHEMAS[name]))
                   for name, target in files.items()}
            for name, table in _sequence_pass(report, streams):
                out[name].write_table(table.cast(_SCHEMAS[name]))
        for name, target in files.items():
            expose(report, name, target)
        stack.enter_context(temp_views(report, NAME, _VIEWS))
        yield


def _graph_first(report: Report) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """global_pid -> (sorted correlation ids of its graph launches, first node start)."""
    rows = report.sql(load_sql(NAME)["graph_first"]).fetchnumpy()
    pids = np.asarray(rows["global_pid"], dtype=np.int64)
    out = {}
    for pid in np.unique(pids).tolist():
        mine = pids == pid
        out[pid] = tuple(np.asarray(rows[c], dtype=np.int64)[mine]
                         for c in ("correlation_id", "first_start_ns"))
    return out


def _sequence_pass(report: Report, streams: bool) -> Iterator[tuple[str, pa.Table]]:
    """Per process and GPU, the units that start after the furthest end of the earlier ones,
    with the kind of their gap (``gap_rows``); with ``streams``, per stream the own kernels
    that start after the end of the kernel before them (``stream_gaps``: a stream's kernels
    come in the same order, so one sorted read serves both)."""
    furthest: dict[tuple[int, ...], int | None] = {}
    first = _graph_first(report)
    per_stream = _Streams() if streams else None
    # a generator closed early (an error while writing) ends the query it streams, which
    # holds the connection
    with contextlib.closing(intervals.segments(
        report, load_sql(NAME)["sequence"], ("global_pid", "device_id"),
        ("pid", "correlation_id", "unit", "start_ns", "end_ns", "launch_end_ns",
         "context_id", "stream_id", "in_stream"),
        order="start_ns, sort_end", params={"no_end": NO_END},
    )) as sequence:
        for key, unit in sequence:
            start = unit["start_ns"].astype(np.int64, copy=False)
            end = unit["end_ns"].astype(np.int64, copy=False)
            if per_stream is not None:
                yield "stream_gaps", per_stream.gaps(key, unit, start, end)
            before, furthest[key] = intervals.ends_before(start, end, furthest.get(key))
            gap = (start > before) & (before > NO_END)
            kind, correlation = unit["unit"][gap], unit["correlation_id"][gap]
            kind = np.where(kind == 0, KERNEL, np.where(kind == 2, GRAPH_LAUNCH, GRAPH_NODE))
            if key[0] in first and (kind == GRAPH_NODE).any():
                ids, starts = first[key[0]]
                at = np.minimum(np.searchsorted(ids, correlation), len(ids) - 1)
                first_node = (ids[at] == correlation) & (starts[at] == start[gap])
                kind[(kind == GRAPH_NODE) & first_node] = GRAPH_LAUNCH
            launch_end = unit["launch_end_ns"][gap]
            yield "gap_rows", pa.table({
                "device_id": np.full(gap.sum(), key[1]),
                "pid": unit["pid"][gap],
                "global_pid": np.full(gap.sum(), key[0]),
                "kind_id": kind,
                "correlation_id": pa.array(correlation, mask=correlation == -1),
                "gap_ns": (start - before)[gap],
                "start_ns": start[gap],
                "launch_end_ns": pa.array(launch_end, mask=launch_end == NO_END),
            })


class _Streams:
    """The streams met in the device sequence, each with a code, its key and the end of its
    last kernel so far (``_compiled.follow_streams`` measures the gaps)."""

    def __init__(self) -> None:
        self.codes: dict[tuple[int, ...], int] = {}
        self.keys = np.empty((0, len(_STREAM_KEYS)), dtype=np.int64)  # by code
        self.last_end = np.empty(0, dtype=np.int64)

    def gaps(self, key: tuple[int, ...], unit: dict[str, np.ndarray], start: np.ndarray,
             end: np.ndarray) -> pa.Table:
        mine = unit["in_stream"].astype(bool, copy=False)
        codes = self._codes(key, unit["context_id"][mine], unit["stream_id"][mine])
        gap_code, gap_ns = (np.empty(len(codes), dtype=np.int64) for _ in range(2))
        n = _compiled.follow_streams(codes, start[mine], end[mine], unit["unit"][mine] == 0,
                                     self.last_end, NO_END, gap_code, gap_ns)
        keys = self.keys[gap_code[:n]]
        return pa.table({**{c: keys[:, i] for i, c in enumerate(_STREAM_KEYS)},
                         "gap_ns": gap_ns[:n]})

    def _codes(self, key: tuple[int, ...], context: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """The code of each row's stream (``intervals.run_codes``: a run of rows on one
        stream is looked up once)."""
        local, pairs = intervals.run_codes((context, stream))
        streams = [(*key, *p) for p in pairs.tolist()]
        new = [s for s in streams if s not in self.codes]
        if new:
            self.codes.update(zip(new, range(len(self.codes), len(self.codes) + len(new))))
            self.keys = np.concatenate([self.keys, np.array(new, dtype=np.int64)])
            self.last_end = np.r_[self.last_end, np.full(len(new), NO_END, dtype=np.int64)]
        return np.array([self.codes[s] for s in streams], dtype=np.int64)[local]


def _summary(report: Report, params: dict[str, int]) -> dict[str, Any]:
    """The summary row (the steps must be materialized)."""
    summary = run_query(report, NAME, "summary", params).to_pylist()[0]
    summary["normal_threshold_ns"] = params["normal_ns"]
    summary["p99_threshold_ns"] = params["p99_ns"]
    return summary


def run(
    report: Report,
    *,
    normal_threshold_us: float = 5.0,
    p99_threshold_us: float = 20.0,
    detail: bool = True,
) -> AnalysisResult:
    """Measure the gaps between kernels per GPU, per stream and inside CUDA graphs.

    Parameters
    ----------
    report : Report
        An opened export.
    normal_threshold_us : float
        Gaps above this are not normal (the method: 5 us).
    p99_threshold_us : float
        A P99 gap above this flags a CPU-side scheduling bottleneck (the method: 20 us).
    detail : bool
        With False (what the diagnosis uses), leave out the ``distribution`` table, one
        row per gap (millions on a big trace); the summary and histogram are the same.

    Returns
    -------
    AnalysisResult
        ``summary``: the keys of :func:`gap_summary`, plus ``graph_gaps`` (gaps before
        graph work, both kinds), ``intra_graph_gap_p50_ns``, ``intra_graph_gap_p99_ns`` and
        ``gaps_per_device`` (device id as a string -> main gaps).
        ``tables``: ``per_device`` (main; one row per device and process), ``per_stream``,
        ``graph`` (one row per graph gap kind), ``distribution`` (every main gap:
        ``device_id``, ``pid``, ``gap_ns``, ``start_ns`` of the kernel after the gap,
        ``launched_before_idle``: prelaunched or not, None when unknown) and
        ``histogram`` (5 log-spaced bins per decade of ns: ``bin_lo_ns``, ``bin_hi_ns``,
        ``gaps``, ``share_pct``).

    Notes
    -----
    Graph-node kernels and graph-level executions (``cuda_graphs`` rows traced per
    launch) stay in the device sequence (they keep the GPU busy), but the gap before
    graph work is not in the main distribution: it is a ``graph_launch`` gap before a
    graph-level execution or the first node of a launch, else a ``graph_node``
    (intra-graph) gap. See ``docs/analyses/launch_gaps.md``.
    """
    params = _thresholds(normal_threshold_us, p99_threshold_us)
    missing = not_captured(NAME, report, "kernels")
    if missing:
        return missing
    with _gaps(report, streams=True):
        summary = _summary(report, params)
        tables = {
            name: run_query(report, NAME, name, params)
            for name in (
                "per_device",
                "per_stream",
                "graph",
                *(("distribution",) if detail else ()),
                "histogram",
                "device_counts",
            )
        }
    device_counts = tables.pop("device_counts")
    graph = {r["kind"]: r for r in tables["graph"].to_pylist()}
    intra = graph.get("graph_node", {})
    summary.update(
        {
            "graph_gaps": sum(r["count"] for r in graph.values()),
            "intra_graph_gap_p50_ns": intra.get("p50_ns"),
            "intra_graph_gap_p99_ns": intra.get("p99_ns"),
            "gaps_per_device": {str(r["device_id"]): r["gaps"] for r in device_counts.to_pylist()},
        }
    )
    return AnalysisResult(
        NAME, OK, _message(summary), summary, tables, main="per_device", findings=_findings(summary)
    )


def _message(s: dict[str, Any]) -> str:
    if not s["count"]:
        return f"no gap between kernels ({s['kernels']} kernels outside CUDA graphs)"
    verdict = "CPU-bound" if s["cpu_bound"] else "within the P99 threshold"
    return (
        f"{s['count']} gaps over {s['kernels']} kernels: P50 {s['p50_ns'] / 1e3:.2f} us, "
        f"P99 {s['p99_ns'] / 1e3:.2f} us ({verdict})"
    )


def _findings(s: dict[str, Any]) -> tuple[str, ...]:
    out = []
    if s["cpu_bound"]:
        out.append(
            f"P99 launch gap {s['p99_ns'] / 1e3:.1f} us > "
            f"{s['p99_threshold_ns'] / 1e3:g} us: CPU-side scheduling bottleneck"
        )
    if s["count"] and s["share_above_normal_pct"]:
        out.append(
            f"{s['share_above_normal_pct']:.1f}% of gaps exceed the normal "
            f"{s['normal_threshold_ns'] / 1e3:g} us"
        )
    if s["prelaunched_gaps"] and s["prelaunched_idle_pct"] >= _PRELAUNCHED_PCT:
        out.append(
            f"{s['prelaunched_idle_pct']:.1f}% of the idle time is in gaps before kernels "
            "already launched: not launch overhead (GPU shared, stream waits or copies)"
        )
    if s["graph_kernels"]:
        out.append(
            f"{s['graph_kernels']} kernels ran inside CUDA graphs; their gaps are "
            "reported apart (table graph)"
        )
    return tuple(out)
