"""Launch gaps: idle time between consecutive kernels on each GPU (launch overhead).

The method's definition: per process and GPU, kernels sorted by start; keep the running
maximum of the end times seen so far; each kernel that starts after it follows one gap
(start - running max end). A normal gap is under 5 us; a P99 gap above 20 us is the
quantitative signal of a CPU-side scheduling bottleneck. Kernels launched inside CUDA
graphs are reported apart; gaps per stream are given too.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..compute import compiled, figures, intervals
from ..engine.accelerate import register, rows_of
from ..engine.runner import Runs
from ..settings import DEFAULTS, Settings, us_to_ns
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records, run_query, stepped

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "launch_gaps"

#: kind of the gap before each unit of the sequence (kernel, graph node, graph-level
#: execution); a graph node's gap is a graph_launch gap when the node is the first of its
#: launch
KERNEL, GRAPH_LAUNCH, GRAPH_NODE = 0, 1, 2
_GRAPH_KINDS = {GRAPH_LAUNCH: "graph_launch", GRAPH_NODE: "graph_node"}

#: the end of a unit whose end is unknown: below every valid timestamp (views.TS_LIMIT), so
#: it extends no busy period and is no kernel's predecessor
NO_END = -(1 << 62)

_STREAM_KEYS = ("global_pid", "device_id", "context_id", "stream_id")

#: percentiles of the main gaps (per device too), of graph and stream gaps, of starved gaps
_MAIN_Q = (0.5, 0.9, 0.99, 0.999)
_OTHER_Q = (0.5, 0.9, 0.99)
_STARVED_Q = (0.5, 0.99)


@dataclass(frozen=True)
class StreamGaps:
    """One row of the ``per_stream`` table: the gaps between a stream's own kernels."""

    device_id: int | None  #: GPU
    pid: int | None  #: process id
    context_id: int | None  #: CUDA context
    stream_id: int | None  #: stream
    kernels: int  #: kernels launched one by one on the stream
    gaps: int  #: gaps between them
    p50_ns: float | None  #: P50 gap, ns
    p90_ns: float | None  #: P90 gap, ns
    p99_ns: float | None  #: P99 gap, ns
    max_ns: int | None  #: largest gap, ns
    mean_ns: float | None  #: mean gap, ns
    share_above_normal_pct: float | None  #: gaps above the normal threshold, %


@dataclass(frozen=True)
class GapBin:
    """One row of the ``histogram`` table: the main gaps in one log-spaced bin."""

    bin_lo_ns: float  #: the bin's lower edge, ns (5 bins per decade)
    bin_hi_ns: float  #: its upper edge, ns
    gaps: int  #: main gaps in the bin
    share_pct: float  #: their share of all main gaps, %


@dataclass(frozen=True, kw_only=True)
class LaunchGapsResult(AnalysisResult):
    """Launch gaps: the main distribution (gaps before kernels launched one by one, all
    GPUs together), its attribution, and the gaps before CUDA graph work.

    Tables: ``per_device`` (main; one row per device and process), ``per_stream``,
    ``graph`` (one row per graph gap kind), ``distribution`` (every main gap, unless the
    run left details out) and ``histogram`` (5 log-spaced bins per decade of ns).
    """

    analysis: str = field(default="launch_gaps", init=False)
    count: int = figure("main gaps (kernels that start after the GPU was idle)", 0)
    p50_ns: float | None = figure("P50 of the main gaps, ns (None without a gap)")
    p90_ns: float | None = figure("P90 of the main gaps, ns")
    p99_ns: float | None = figure("P99 of the main gaps, ns")
    p999_ns: float | None = figure("P99.9 of the main gaps, ns")
    max_ns: int | None = figure("largest main gap, ns")
    mean_ns: float | None = figure("mean main gap, ns")
    total_ns: int | None = figure("idle time: the main gaps summed, ns")
    share_above_normal_pct: float | None = figure(
        "share of the main gaps above normal_threshold_ns, %")
    share_above_p99_threshold_pct: float | None = figure(
        "share of the main gaps above p99_threshold_ns, %")
    cpu_bound: bool = figure("the P99 gap is above p99_threshold_ns: the method's signal of a "
                             "CPU-side scheduling bottleneck (check C1 reads it)", False)
    kernels: int = figure("kernels launched one by one (outside CUDA graphs)", 0)
    graph_kernels: int = figure("kernels run inside CUDA graphs", 0)
    prelaunched_gaps: int = figure("gaps before a kernel launched before the GPU went idle: "
                                   "not launch overhead (0 without a CUDA API trace)", 0)
    prelaunched_idle_pct: float | None = figure(
        "share of the attributed idle time in prelaunched gaps, % (None: no API trace)")
    starved_gaps: int = figure("gaps before a kernel launched after the GPU went idle: the "
                               "GPU ran out of work before the launch call returned", 0)
    starved_p50_ns: float | None = figure("P50 of the starved gaps, ns")
    starved_p99_ns: float | None = figure("P99 of the starved gaps, ns")
    normal_threshold_ns: int = figure("the normal-gap threshold used (settings.gap_normal_ns)"
                                      ", ns", DEFAULTS.gap_normal_ns)
    p99_threshold_ns: int = figure("the P99 threshold used (settings.gap_p99_ns), ns",
                                   DEFAULTS.gap_p99_ns)
    graph_gaps: int | None = figure("gaps before graph work, both kinds (None from "
                                    ":func:`gap_summary`)")
    intra_graph_gap_p50_ns: float | None = figure("P50 of the gaps between nodes of a graph "
                                                  "launch, ns")
    intra_graph_gap_p99_ns: float | None = figure("P99 of the gaps between nodes of a graph "
                                                  "launch, ns")
    gaps_per_device: dict[str, int] | None = figure("main gaps per GPU (device id as a string)")

    def per_stream(self) -> list[StreamGaps]:
        """The ``per_stream`` table as records (empty without it)."""
        table = self.tables.get("per_stream")
        return records(table, StreamGaps) if table is not None else []

    def histogram(self) -> list[GapBin]:
        """The ``histogram`` table as records, empty bins included (empty without it)."""
        table = self.tables.get("histogram")
        return records(table, GapBin) if table is not None else []


RESULT = LaunchGapsResult
#: how it runs (``engine.runner``): its accelerated pass is mostly numpy on one core, with a
#: large memory peak at millions of kernels
RUNS = Runs(one_core=True, large_peak=True)


def _settings(settings: Settings | None, normal_threshold_us: float | None,
              p99_threshold_us: float | None) -> Settings:
    """``settings`` with the command line's thresholds (microseconds) put in."""
    s = settings or DEFAULTS
    changes = {}
    if normal_threshold_us is not None:
        changes["gap_normal_ns"] = us_to_ns(normal_threshold_us, "normal_threshold_us")
    if p99_threshold_us is not None:
        changes["gap_p99_ns"] = us_to_ns(p99_threshold_us, "p99_threshold_us")
    return s.replace(**changes) if changes else s


def gap_summary(
    report: Report, *, settings: Settings | None = None,
    normal_threshold_us: float | None = None, p99_threshold_us: float | None = None,
) -> LaunchGapsResult:
    """The main launch-gap distribution in figures (gaps before non-graph kernels).

    Parameters
    ----------
    report : Report
        An opened export. A report without kernels gives ``count`` 0 and None percentiles.
    settings : Settings, optional
        ``gap_normal_ns`` and ``gap_p99_ns`` are the method's thresholds.
    normal_threshold_us, p99_threshold_us : float, optional
        The same thresholds in microseconds (the command line's options), over
        ``settings``.

    Returns
    -------
    LaunchGapsResult
        The figures through ``p99_threshold_ns`` (no tables, no graph gap figures).
    """
    s = _settings(settings, normal_threshold_us, p99_threshold_us)
    summary, _ = GAPS(report, s, False)
    summary.pop("gaps_per_device")
    return LaunchGapsResult(status=OK, **summary)


def method(report: Report, s: Settings, detail: bool
           ) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    """The SQL method (launch_gaps.sql): the figures (those of :func:`gap_summary` and
    ``gaps_per_device``) and the tables of :func:`run`."""
    params = {"normal_ns": s.gap_normal_ns, "p99_ns": s.gap_p99_ns}
    with stepped(report, NAME, params) as sql:
        summary = sql.query("summary").to_pylist()[0]
        summary["gaps_per_device"] = {
            str(r["device_id"]): r["gaps"] for r in sql.query("device_counts").to_pylist()}
        tables = {name: sql.query(name)
                  for name in ("per_device", "per_stream", "graph",
                               *(("distribution",) if detail else ()), "histogram")}
    return summary, tables


def accelerated(report: Report, s: Settings, detail: bool
                ) -> tuple[dict[str, Any], dict[str, pa.Table]]:
    """:func:`method`'s results from one sorted pass over the device sequences (numpy and
    compiled loops; the figures by ``figures``, equal to DuckDB's aggregates)."""
    gaps, counts = _sequence_pass(report, streams=True, starts=detail), _Counts(report)
    overall, per_sequence = _main_figures(gaps, s.gap_normal_ns)
    summary = _summary(gaps, overall, counts, s)
    summary["gaps_per_device"] = _device_counts(gaps, counts)
    tables = {
        "per_device": _per_device(per_sequence, counts),
        "per_stream": _per_stream(gaps, counts, s.gap_normal_ns),
        "graph": _graph(gaps),
        **({"distribution": _distribution(gaps)} if detail else {}),
        "histogram": _histogram(gaps),
    }
    return summary, tables


@dataclass
class _Gaps:
    """The gaps of the sequence pass, in memory (about one main gap per kernel, of 9 bytes,
    17 with its start, and as many stream gaps of 12): the main
    gaps in the order of the pass (by sequence, then start), the graph gaps and the stream
    gaps."""

    #: (global_pid, device_id, pid) of each sequence, by code
    keys: list[tuple[int, int, int]]
    #: (sequence code, number of main gaps) of each run of main gaps of one sequence
    key_runs: np.ndarray
    gap: np.ndarray  # int64 ns
    start: np.ndarray | None  # int64: start of the kernel after the gap (for detail)
    before: np.ndarray  # int8: launched before the GPU went idle 1, after 0, unknown -1
    graph_kind: np.ndarray  # int8: GRAPH_LAUNCH or GRAPH_NODE of each graph gap
    graph_gap: np.ndarray  # int64 ns
    #: _STREAM_KEYS of each stream, by code (rows of a 2-D array)
    streams: np.ndarray
    stream: np.ndarray  # int32: the stream's code of each stream gap
    stream_gap: np.ndarray  # int64 ns

    @property
    def key(self) -> np.ndarray:
        """The sequence's code of each main gap."""
        return np.repeat(self.key_runs[:, 0], self.key_runs[:, 1]).astype(np.int32)

    def per_key(self) -> np.ndarray:
        """The number of main gaps of each sequence, by code."""
        return np.bincount(self.key_runs[:, 0], weights=self.key_runs[:, 1],
                           minlength=len(self.keys)).astype(np.int64)


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


def _sequence_pass(report: Report, streams: bool, starts: bool = False) -> _Gaps:
    """Per process and GPU, the units that start after the furthest end of the earlier ones,
    with the kind of their gap; with ``streams``, per stream the own kernels that start
    after the end of the kernel before them (a stream's kernels come in the same order, so
    one sorted read serves both). The main gaps' starts only with ``starts``.

    The kernels are read as the view stores them, in the export's order, which is start
    order in every export seen (``ViewSpec.in_export_order``), so no sort is paid, unless
    graph-level executions join them or a row comes out of order
    (``intervals.OutOfOrder``): then sorted."""
    rows, graph_rows = report.execute(load_sql(NAME)["sequence_rows"])[0]
    if not graph_rows:
        try:
            return _pass(report, rows, streams, starts, in_order=True)
        except intervals.OutOfOrder:
            pass
    return _pass(report, rows, streams, starts, in_order=False)


def _pass(report: Report, rows: int, streams: bool, starts: bool, in_order: bool) -> _Gaps:
    """:func:`_sequence_pass` over the sequence sorted or, with ``in_order``, as stored."""
    codes: dict[tuple[int, ...], int] = {}
    keys: list[tuple[int, int, int]] = []
    furthest: dict[int, int | None] = {}
    main_gaps = _Columns(rows, {"gap": np.int64, "before": np.int8,
                                **({"start": np.int64} if starts else {})})
    runs: list[list[int]] = []  # [code, main gaps] of each run of one sequence
    stream_gaps = _Columns(rows if streams else 0, {"stream": np.int32, "stream_gap": np.int64})
    graph: dict[str, list[np.ndarray]] = {"graph_kind": [], "graph_gap": []}
    first = _graph_first(report)
    per_stream = _Streams() if streams else None
    # a generator closed early (an error) ends the query it streams, which holds the
    # connection
    with contextlib.closing(intervals.segments(
        report, load_sql(NAME)["sequence"], ("global_pid", "device_id"),
        ("correlation_id", "unit", "start_ns", "end_ns", "launch_end_ns",
         "context_id", "stream_id", "in_stream"),
        order="start_ns, sort_end", params={"no_end": NO_END}, in_order=in_order,
    )) as sequence:
        for key, unit in sequence:
            start = unit["start_ns"].astype(np.int64, copy=False)
            end = unit["end_ns"].astype(np.int64, copy=False)
            if per_stream is not None:
                stream_gaps.add(*per_stream.gaps(key, unit, start, end))
            code = codes.setdefault(key, len(codes))
            if code == len(keys):
                keys.append((*key, (key[0] >> 24) & 0xFFFFFF))  # the pid (views' _PID)
            before, furthest[code] = intervals.ends_before(start, end, furthest.get(code))
            gap = (start > before) & (before > NO_END)
            kind, correlation = unit["unit"][gap], unit["correlation_id"][gap]
            kind = np.where(kind == 0, KERNEL, np.where(kind == 2, GRAPH_LAUNCH, GRAPH_NODE))
            if key[0] in first and (kind == GRAPH_NODE).any():
                ids, first_start = first[key[0]]
                at = np.minimum(np.searchsorted(ids, correlation), len(ids) - 1)
                first_node = (ids[at] == correlation) & (first_start[at] == start[gap])
                kind[(kind == GRAPH_NODE) & first_node] = GRAPH_LAUNCH
            main = kind == KERNEL
            if not main.all():
                graph["graph_kind"].append(kind[~main].astype(np.int8))
                graph["graph_gap"].append((start - before)[gap][~main])
            at = np.flatnonzero(gap)[main]
            busy, launch_end = before[at], unit["launch_end_ns"][at]
            if runs and runs[-1][0] == code:
                runs[-1][1] += len(at)
            else:
                runs.append([code, len(at)])
            main_gaps.add(start[at] - busy,
                          np.where(launch_end == NO_END, -1, launch_end < busy),
                          *((start[at],) if starts else ()))
    no_starts = {} if starts else {"start": None}
    return _Gaps(keys=keys, key_runs=np.array(runs, dtype=np.int64).reshape(-1, 2),
                 streams=per_stream.keys if per_stream else _Streams().keys,
                 **main_gaps.arrays(), **no_starts, **stream_gaps.arrays(),
                 **{c: np.concatenate(v) if v else np.empty(0, np.int64 if c == "graph_gap"
                                                            else np.int8)
                    for c, v in graph.items()})


class _Columns:
    """Columns filled run by run into arrays allocated once for at most ``capacity`` rows
    (their pages are touched only as they fill), instead of joining pieces at the end,
    which holds two copies."""

    def __init__(self, capacity: int, dtypes: dict[str, type]) -> None:
        self.n = 0
        self._arrays = {c: np.empty(capacity, dtype=t) for c, t in dtypes.items()}

    def add(self, *values: np.ndarray) -> None:
        """Append one run: an array of equal length per column, in order."""
        m = len(values[0])
        for array, v in zip(self._arrays.values(), values):
            array[self.n:self.n + m] = v
        self.n += m

    def arrays(self) -> dict[str, np.ndarray]:
        return {c: a[:self.n] for c, a in self._arrays.items()}


class _Streams:
    """The streams met in the device sequence, each with a code, its key and the end of its
    last kernel so far (``compiled.follow_streams`` measures the gaps)."""

    def __init__(self) -> None:
        self.codes: dict[tuple[int, ...], int] = {}
        self.keys = np.empty((0, len(_STREAM_KEYS)), dtype=np.int64)  # by code
        self.last_end = np.empty(0, dtype=np.int64)

    def gaps(self, key: tuple[int, ...], unit: dict[str, np.ndarray], start: np.ndarray,
             end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(stream code, gap) of each stream gap of this run of the sequence."""
        mine = unit["in_stream"].astype(bool, copy=False)
        codes = self._codes(key, unit["context_id"][mine], unit["stream_id"][mine])
        gap_code, gap_ns = (np.empty(len(codes), dtype=np.int64) for _ in range(2))
        n = compiled.follow_streams(codes, start[mine], end[mine], unit["unit"][mine] == 0,
                                     self.last_end, NO_END, gap_code, gap_ns)
        return gap_code[:n], gap_ns[:n]

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


class _Counts:
    """Kernels per stream (query stream_counts), and per process and GPU."""

    def __init__(self, report: Report) -> None:
        #: (global_pid, device_id, context_id, stream_id) -> (pid, kernels, graph kernels)
        self.streams = {
            (r["global_pid"], r["device_id"], r["context_id"], r["stream_id"]):
                (r["pid"], r["kernels"], r["graph_kernels"])
            for r in run_query(report, NAME, "stream_counts").to_pylist()}
        self.devices: dict[tuple[Any, Any], list] = {}
        for (gpid, device, _, _), (pid, kernels, graph) in self.streams.items():
            row = self.devices.setdefault((gpid, device), [pid, 0, 0])
            row[1] += kernels
            row[2] += graph


def _main_figures(gaps: _Gaps, normal_ns: int) -> tuple[dict, dict[tuple[int, int], dict]]:
    """``figures.describe`` of the main gaps, all together and per (global_pid,
    device_id); one partial sort where there is one sequence."""
    overall = figures.describe(gaps.gap, _MAIN_Q, normal_ns)
    if len(gaps.keys) == 1:
        return overall, {gaps.keys[0][:2]: overall}
    return overall, {gaps.keys[code][:2]: figures.describe(gaps.gap[rows], _MAIN_Q, normal_ns,
                                                           scratch=True)
                     for code, rows in intervals.by_code(gaps.key, len(gaps.keys))}


def _summary(gaps: _Gaps, f: dict, counts: _Counts, s: Settings) -> dict[str, Any]:
    """The figures of :func:`gap_summary` (``f``: the main gaps' figures)."""
    attributed = gaps.before >= 0
    prelaunched, starved = gaps.before == 1, gaps.before == 0
    p99 = f["q"][2] if f["q"] else None
    return {
        "count": f["count"],
        **figures.q_columns(f["q"], ("p50_ns", "p90_ns", "p99_ns", "p999_ns")),
        "max_ns": f["max_ns"],
        "mean_ns": f["mean_ns"],
        "total_ns": f["total_ns"],
        "share_above_normal_pct": f["share_above_pct"],
        "share_above_p99_threshold_pct": figures.share_pct(
            int(np.count_nonzero(gaps.gap > s.gap_p99_ns)), f["count"]),
        "cpu_bound": p99 is not None and p99 > s.gap_p99_ns,
        "kernels": sum(r[1] for r in counts.devices.values()),
        "graph_kernels": sum(r[2] for r in counts.devices.values()),
        "prelaunched_gaps": int(np.count_nonzero(prelaunched)),
        "prelaunched_idle_pct": figures.share_pct(
            figures.total(gaps.gap, prelaunched), figures.total(gaps.gap, attributed))
        if attributed.any() else None,
        "starved_gaps": int(np.count_nonzero(starved)),
        **figures.q_columns(figures.quantiles(gaps.gap[starved], _STARVED_Q, scratch=True),
                            ("starved_p50_ns", "starved_p99_ns")),
        "normal_threshold_ns": s.gap_normal_ns,
        "p99_threshold_ns": s.gap_p99_ns,
    }


def _nulls_last(*values: Any) -> tuple:
    """A sort key that orders like SQL's ORDER BY (NULLs last)."""
    return tuple(x for v in values for x in (v is None, v if v is not None else 0))


def _per_device(per: dict[tuple[int, int], dict], counts: _Counts) -> pa.Table:
    """One row per process and GPU: its kernels and its main gaps' figures (``per``)."""
    none = figures.describe(np.empty(0, np.int64), _MAIN_Q, 0)
    rows = []
    for (gpid, device), (pid, kernels, graph) in counts.devices.items():
        f = per.get((gpid, device), none)
        rows.append({"device_id": device, "pid": pid, "kernels": kernels, "graph_kernels": graph,
                     "gaps": f["count"],
                     **figures.q_columns(f["q"], ("p50_ns", "p90_ns", "p99_ns", "p999_ns")),
                     "max_ns": f["max_ns"], "mean_ns": f["mean_ns"], "total_ns": f["total_ns"],
                     "share_above_normal_pct": f["share_above_pct"], "_gpid": gpid})
    rows.sort(key=lambda r: _nulls_last(r["device_id"], r["pid"], r.pop("_gpid")))
    return _table(rows, ("device_id", "pid", "kernels", "graph_kernels", "gaps", "p50_ns",
                         "p90_ns", "p99_ns", "p999_ns", "max_ns", "mean_ns", "total_ns",
                         "share_above_normal_pct"))


def _per_stream(gaps: _Gaps, counts: _Counts, normal_ns: int) -> pa.Table:
    """One row per stream: its kernels and its stream gaps' figures (one stream's gaps are
    partially sorted in place: nothing reads them after)."""
    groups = ([(0, gaps.stream_gap)] if len(gaps.streams) == 1 else
              ((code, gaps.stream_gap[rows])
               for code, rows in intervals.by_code(gaps.stream, len(gaps.streams))))
    per = {tuple(gaps.streams[code].tolist()): figures.describe(values, _OTHER_Q, normal_ns,
                                                                scratch=True)
           for code, values in groups}
    none = figures.describe(np.empty(0, np.int64), _OTHER_Q, normal_ns)
    rows = []
    for key, (pid, kernels, _) in counts.streams.items():
        f = per.get(key, none)
        rows.append({"device_id": key[1], "pid": pid, "context_id": key[2], "stream_id": key[3],
                     "kernels": kernels, "gaps": f["count"],
                     **figures.q_columns(f["q"], ("p50_ns", "p90_ns", "p99_ns")),
                     "max_ns": f["max_ns"], "mean_ns": f["mean_ns"],
                     "share_above_normal_pct": f["share_above_pct"], "_gpid": key[0]})
    rows.sort(key=lambda r: _nulls_last(r["device_id"], r["pid"], r["context_id"],
                                        r["stream_id"], r.pop("_gpid")))
    return _table(rows, ("device_id", "pid", "context_id", "stream_id", "kernels", "gaps",
                         "p50_ns", "p90_ns", "p99_ns", "max_ns", "mean_ns",
                         "share_above_normal_pct"))


def _graph(gaps: _Gaps) -> pa.Table:
    """One row per graph gap kind that occurs."""
    rows = []
    for kind, name in sorted(_GRAPH_KINDS.items(), key=lambda kv: kv[1]):
        values = gaps.graph_gap[gaps.graph_kind == kind]
        if len(values):
            f = figures.describe(values, _OTHER_Q, 0)
            rows.append({"kind": name, "count": f["count"],
                         **figures.q_columns(f["q"], ("p50_ns", "p90_ns", "p99_ns")),
                         "max_ns": f["max_ns"], "mean_ns": f["mean_ns"]})
    return _table(rows, ("kind", "count", "p50_ns", "p90_ns", "p99_ns", "max_ns", "mean_ns"))


def _device_counts(gaps: _Gaps, counts: _Counts) -> dict[str, int]:
    """Main gaps per GPU (the device id as a string), every GPU that ran kernels."""
    out = dict.fromkeys(sorted({d for _, d in counts.devices}, key=_nulls_last), 0)
    for code, n in enumerate(gaps.per_key().tolist()):
        out[gaps.keys[code][1]] += n
    return {str(d): n for d, n in out.items()}


def _distribution(gaps: _Gaps) -> pa.Table:
    """Every main gap, ordered by GPU, process and start."""
    keys = np.array(gaps.keys, dtype=np.int64).reshape(-1, 3)
    key = gaps.key  # made from the runs: once
    device, pid = keys[key, 1], keys[key, 2]
    if len(gaps.keys) <= 1:
        order = slice(None)
    elif len({(d, p) for _, d, p in gaps.keys}) == len(gaps.keys):
        # each (device, pid) is one sequence, its gaps already in start order
        rank = np.argsort(np.lexsort((keys[:, 2], keys[:, 1])))
        order = np.argsort(rank[key], kind="stable")
    else:
        order = np.lexsort((gaps.start, pid, device))
    return pa.table({
        "device_id": device[order], "pid": pid[order], "gap_ns": gaps.gap[order],
        "start_ns": gaps.start[order],
        "launched_before_idle": pa.array(gaps.before[order] == 1, mask=gaps.before[order] < 0),
    })


def _histogram(gaps: _Gaps) -> pa.Table:
    """Main gaps per log-spaced bin (5 per decade of ns), empty bins included."""
    names = ("bin", "bin_lo_ns", "bin_hi_ns", "gaps", "share_pct")
    if not len(gaps.gap):
        return _table([], names)
    values = gaps.gap
    lo, hi = _bin(int(values.min())), _bin(int(values.max()))
    edges = np.array([_first_in_bin(b) for b in range(lo + 1, hi + 1)], dtype=np.int64)
    count = np.bincount(np.searchsorted(edges, values, side="right"), minlength=hi - lo + 1)
    bins = list(range(lo, hi + 1))
    n = int(count.sum())
    return pa.table({
        "bin": pa.array(bins, pa.int64()),
        "bin_lo_ns": [10 ** (b / 5) for b in bins],
        "bin_hi_ns": [10 ** ((b + 1) / 5) for b in bins],
        "gaps": count.astype(np.int64),
        "share_pct": 100.0 * count / n,
    })


def _bin(gap: int) -> int:
    """The histogram bin of a gap, ``floor(log10(gap) * 5 + 1e-9)``, with the C library's
    log10 (DuckDB's; numpy's may differ in the last bit)."""
    return math.floor(math.log10(gap) * 5 + 1e-9)


def _first_in_bin(b: int) -> int:
    """The smallest gap in bin ``b`` or above (a search: the edge 10^(b/5) is irrational)."""
    lo, hi = max(1, int(10 ** ((b - 1) / 5))), int(10 ** ((b + 1) / 5)) + 2
    while lo < hi:
        mid = (lo + hi) // 2
        if _bin(mid) >= b:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _table(rows: list[dict[str, Any]], names: tuple[str, ...]) -> pa.Table:
    """The rows as a table of the columns ``names``, typed as the SQL types them: the
    percentiles (p*_ns), means, shares and bin edges doubles, ``kind`` a string, the rest
    BIGINT."""
    floats = ("mean_ns", "share_above_normal_pct", "share_pct", "bin_lo_ns", "bin_hi_ns")

    def typed(n: str) -> pa.DataType:
        if n == "kind":
            return pa.string()
        return pa.float64() if n in floats or n[0] == "p" and n.endswith("_ns") else pa.int64()

    return pa.Table.from_pylist(rows, schema=pa.schema([(n, typed(n)) for n in names]))


def run(
    report: Report,
    *,
    settings: Settings | None = None,
    normal_threshold_us: float | None = None,
    p99_threshold_us: float | None = None,
    detail: bool = True,
) -> LaunchGapsResult | AnalysisResult:
    """Measure the gaps between kernels per GPU, per stream and inside CUDA graphs.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        ``gap_normal_ns``: gaps above this are not normal (the method: 5 us);
        ``gap_p99_ns``: a P99 gap above this flags a CPU-side scheduling bottleneck (the
        method: 20 us); ``prelaunched_idle_pct``: from this share of idle time in
        prelaunched gaps a finding says so.
    normal_threshold_us, p99_threshold_us : float, optional
        ``gap_normal_ns`` and ``gap_p99_ns`` in microseconds (the command line's
        ``--normal-threshold-us`` and ``--p99-threshold-us``), over ``settings``.
    detail : bool
        With False (what the diagnosis uses), leave out the ``distribution`` table, one
        row per gap (millions on a big trace); the summary and histogram are the same.

    Returns
    -------
    LaunchGapsResult
        The figures of :class:`LaunchGapsResult`; ``tables``: ``per_device`` (main; one
        row per device and process), ``per_stream``, ``graph`` (one row per graph gap
        kind), ``distribution`` (every main gap: ``device_id``, ``pid``, ``gap_ns``,
        ``start_ns`` of the kernel after the gap, ``launched_before_idle``: prelaunched or
        not, None when unknown) and ``histogram`` (5 log-spaced bins per decade of ns:
        ``bin_lo_ns``, ``bin_hi_ns``, ``gaps``, ``share_pct``). A bare
        :class:`AnalysisResult` when the trace has no kernels.

    Notes
    -----
    Graph-node kernels and graph-level executions (``cuda_graphs`` rows traced per
    launch) stay in the device sequence (they keep the GPU busy), but the gap before
    graph work is not in the main distribution: it is a ``graph_launch`` gap before a
    graph-level execution or the first node of a launch, else a ``graph_node``
    (intra-graph) gap. See ``docs/analyses/launch_gaps.md``.
    """
    s = _settings(settings, normal_threshold_us, p99_threshold_us)
    missing = not_captured(NAME, report, "kernels")
    if missing:
        return missing
    summary, tables = GAPS(report, s, detail)
    graph = {r["kind"]: r for r in tables["graph"].to_pylist()}
    intra = graph.get("graph_node", {})
    per_device = summary.pop("gaps_per_device")
    result = LaunchGapsResult(
        status=OK, tables=tables, main="per_device", **summary,
        graph_gaps=sum(r["count"] for r in graph.values()),
        intra_graph_gap_p50_ns=intra.get("p50_ns"),
        intra_graph_gap_p99_ns=intra.get("p99_ns"),
        gaps_per_device=per_device,
    )
    return replace(result, message=_message(result), findings=_findings(result, s))


def _message(r: LaunchGapsResult) -> str:
    if not r.count:
        return f"no gap between kernels ({r.kernels} kernels outside CUDA graphs)"
    verdict = "CPU-bound" if r.cpu_bound else "within the P99 threshold"
    return (
        f"{r.count} gaps over {r.kernels} kernels: P50 {r.p50_ns / 1e3:.2f} us, "
        f"P99 {r.p99_ns / 1e3:.2f} us ({verdict})"
    )


def _findings(r: LaunchGapsResult, s: Settings) -> tuple[str, ...]:
    out = []
    if r.cpu_bound:  # the method's launch-overhead judgement (check C1 reads cpu_bound)
        out.append(
            f"P99 launch gap {r.p99_ns / 1e3:.1f} us > "
            f"{r.p99_threshold_ns / 1e3:g} us: CPU-side scheduling bottleneck"
        )
    if r.count and r.share_above_normal_pct:
        out.append(
            f"{r.share_above_normal_pct:.1f}% of gaps exceed the normal "
            f"{r.normal_threshold_ns / 1e3:g} us"
        )
    if r.prelaunched_gaps and r.prelaunched_idle_pct >= s.prelaunched_idle_pct:
        out.append(
            f"{r.prelaunched_idle_pct:.1f}% of the idle time is in gaps before kernels "
            "already launched: not launch overhead (GPU shared, stream waits or copies)"
        )
    if r.graph_kernels:
        out.append(
            f"{r.graph_kernels} kernels ran inside CUDA graphs; their gaps are "
            "reported apart (table graph)"
        )
    return tuple(out)


#: the figures and tables of :func:`run` by the SQL method or the pass, as the engine
#: chooses for the kernels' rows
GAPS = register(NAME, "gaps", method=method, accelerated=accelerated, rows=rows_of("kernels"))
