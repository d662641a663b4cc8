"""GPU idle time by cause: for each gap before a kernel, why the GPU waited.

The gaps are the method's launch gaps (per process and GPU, a kernel that starts after the
furthest end of the earlier work; ``launch_gaps``). Each gets one cause, tried in this
order (``settings.idle_cause_pct`` of the gap is "most of it"):

``copy``           the process's own copies or memsets ran for most of the gap, or the
                   launching thread was in a copy call when the GPU went idle (and not
                   outside CUDA for most of the host window after it), or spent
                   most of the gap's host window in copy calls (a blocking copy on the path)
``other_process``  other work on the GPU (another process or context) ran for most of it
``between_units``  no unit of the process (an instance of the ranges analysis' unit that
                   its tail figures count: warm-up units set apart are not) was in flight
                   for most of the gap: the GPU waited for the next request
``unknown``        the kernel's launch call was not traced (no CUDA API trace)
``dependency``     the kernel had been launched before the GPU went idle: it waited on
                   another stream, an event or GPU-side scheduling, not on the host
``host_sync``      the launching thread was in a synchronization call when the GPU went
                   idle (and did not spend most of the host window outside CUDA after
                   it), or spent most of the host window in one
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

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..compute import compiled, figures, intervals, sweep
from ..engine.accelerate import register, rows_of
from ..engine.runner import Runs
from ..engine.steps import registered
from ..formatting import fmt_ns
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records, stepped
from .launch_gaps import NO_END
from .overlap import device_operations
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "gpu_idle"

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
    "dependency": "the kernel had been launched before the GPU went idle and still waited "
                  "(a dependency on an event or other work, or GPU-side scheduling)",
    "host_sync": "the launching thread was waiting in a synchronization for most of the gap",
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
#: how it runs (``engine.runner``): ranges' unit windows; mostly compiled loops and numpy
#: on one core (the sweep of the threads' calls, the sequence pass)
RUNS = Runs(needs=("ranges",), one_core=True)


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
    cause = gpu_causes(gap_ns, own_copy_ns, other_ns, inside_ns, launch_known, prelaunched,
                       cause_pct)
    rest = cause < 0
    cause[rest] = host_causes(at_sync[rest], at_copy[rest], window[rest, :4], window[rest, 4],
                              cause_pct)
    return cause


def gpu_causes(gap_ns: np.ndarray, own_copy_ns: np.ndarray, other_ns: np.ndarray,
               inside_ns: np.ndarray | None, launch_known: np.ndarray,
               prelaunched: np.ndarray, cause_pct: float) -> np.ndarray:
    """The causes :func:`classify` gives before it reads the host window (same
    parameters), -1 where the host window decides: every such gap's launch call is known
    and had not returned when the GPU went idle."""
    most = gap_ns * (cause_pct / 100.0)
    cause = np.full(len(gap_ns), -1, dtype=np.int8)
    _put(cause, COPY, own_copy_ns >= most)
    _put(cause, OTHER, other_ns >= most)
    if inside_ns is not None:
        _put(cause, BETWEEN, inside_ns < most)
    _put(cause, UNKNOWN, ~launch_known)
    _put(cause, DEPENDENCY, prelaunched)
    return cause


def _put(cause: np.ndarray, code: int, where: np.ndarray) -> None:
    """Give ``code`` to the gaps of ``where`` that have no cause yet (the first rule that
    holds wins: :func:`run` applies :func:`gpu_causes`' rules one at a time, in its
    order, freeing each rule's input before the next is computed)."""
    cause[(cause < 0) & where] = code


def host_causes(at_sync: np.ndarray, at_copy: np.ndarray, calls_ns: np.ndarray,
                outside_ns: np.ndarray, cause_pct: float = 50.0) -> np.ndarray:
    """The causes :func:`classify` gives from the host window to the gaps the GPU side
    leaves open: the call the thread was in when the GPU went idle (a sync before a copy),
    unless the thread spent most of the window (``cause_pct``) outside CUDA after it --
    the cause is taken over the whole gap, not where the GPU drained --, else the window's
    dominant state (ties: the earlier column of :func:`classify`'s ``window``, here split
    into ``calls_ns``, its first four columns, and ``outside_ns``, its last)."""
    dominant = np.argmax(calls_ns, axis=1) if len(calls_ns) else np.empty(0, dtype=np.int64)
    cause = np.array([LAUNCH, COPY, SYNC, CUDA_OTHER], dtype=np.int8)[dominant]
    if len(calls_ns):
        cause[outside_ns > calls_ns.max(axis=1)] = CPU
    total = outside_ns + (calls_ns.sum(axis=1) if len(calls_ns) else 0)
    busy_elsewhere = outside_ns >= total * (cause_pct / 100.0)
    cause[at_copy & ~busy_elsewhere] = COPY
    cause[at_sync & ~busy_elsewhere] = SYNC
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
    fast = GAPS.takes(report)
    g = GAPS(report)
    # gpu_causes' rules one at a time, in its order
    most = (g.end - g.start) * (s.idle_cause_pct / 100.0)
    cause = np.full(len(most), -1, dtype=np.int8)
    own_copy, other = _gpu_side(report, g, fast)
    _put(cause, COPY, own_copy >= most)
    _put(cause, OTHER, other >= most)
    del own_copy, other
    ranges = report.analysis("ranges", range_name=range_name, settings=s)
    unit = None
    if isinstance(ranges, RangesResult) and ranges.ok and "instances" in ranges.tables:
        unit = ranges.unit
        _put(cause, BETWEEN, _inside_units(ranges, g) < most)
    del most
    launch_end, tid = g.launch_end, g.tid
    g.launch_end = g.tid = None  # only the host windows' rows are kept below
    launch_known = (launch_end != NO_END) & (tid != NO_END)
    _put(cause, UNKNOWN, ~launch_known)
    _put(cause, DEPENDENCY, launch_known & (launch_end <= g.start))
    del launch_known
    if fast and report.probe.present("api_calls") and (cause < 0).any():
        # each host window finished inside the sweep: no per-window rows kept
        got = sweep.window_causes(report, load_sql(NAME)["thread_calls"], cause, tid,
                                  g.start, g.end, launch_end, _HOST_CODES, s.idle_cause_pct,
                                  in_order=True)
        if got is not None:
            np.copyto(cause, got, where=cause < 0)
            del got, tid, launch_end
            return _result(s, unit, _gap(g), cause, g, detail)
    # the host windows of the gaps the GPU side leaves open (without a CUDA API trace,
    # empty windows: their first state)
    host = np.flatnonzero(cause < 0)
    w_start = g.start[host]
    w_end = np.minimum(g.end[host], launch_end[host])
    tid = tid[host]
    del launch_end
    gap = _gap(g)
    calls = np.zeros((len(host), 4), dtype=np.int64)
    at = np.full(len(host), -1, dtype=np.int8)
    if len(host) and report.probe.present("api_calls"):
        calls, at = HOST_WINDOWS(report, tid, w_start, w_end)
    outside = np.maximum((w_end - w_start) - calls.sum(axis=1), 0)
    del tid, w_start, w_end
    cause[host] = host_causes(at == SYNC_CALL, at == COPY_CALL, calls, outside,
                              s.idle_cause_pct)
    del calls, outside, at, host
    return _result(s, unit, gap, cause, g, detail)


def _gap(g: Gaps) -> np.ndarray:
    """Each gap's length, in place of its end (``g.end`` is None after)."""
    gap = np.subtract(g.end, g.start, out=g.end if g.end.flags.writeable else None)
    g.end = None
    return gap


#: thread_calls' classes (gpu_idle.sql): launch, memcpy/memset, sync, other CUDA calls
LAUNCH_CALL, COPY_CALL, SYNC_CALL, OTHER_CALL = range(4)
#: host_causes' rule for the compiled sweep (``sweep.window_causes``): the cause of each
#: class's dominance, of time outside CUDA, the copy and sync calls' classes, and their
#: causes at the drain point
_HOST_CODES = np.array([LAUNCH, COPY, SYNC, CUDA_OTHER, CPU, COPY_CALL, SYNC_CALL, COPY,
                        SYNC], dtype=np.int64)


@dataclass
class Gaps:
    """The gaps before kernels: what :func:`method` and :func:`accelerated` find, one row
    per gap, in the order of the device sequences (by process, GPU, then the order of the
    kernels). A sequence's gaps are one slice of the rows: its process and GPU are kept
    once per sequence."""

    #: (global_pid, pid, device_id) of each device sequence with gaps, in their order
    sequences: np.ndarray
    #: sequence i's gaps are rows ``bounds[i]`` to ``bounds[i + 1]``
    bounds: np.ndarray
    stream_id: np.ndarray  #: the kernel's stream (-1: unknown)
    start: np.ndarray  #: idle_start_ns: the furthest end of the earlier work
    end: np.ndarray | None  #: idle_end_ns: the kernel's start
    launch_end: np.ndarray | None  #: the kernel's launch call's return (NO_END: unknown)
    tid: np.ndarray | None  #: the launching thread's global_tid (NO_END: unknown)

    def slices(self) -> Iterator[tuple[int, int, int, slice]]:
        """(global_pid, pid, device_id, rows) of each sequence."""
        for (gpid, pid, dev), lo, hi in zip(self.sequences.tolist(), self.bounds[:-1].tolist(),
                                            self.bounds[1:].tolist()):
            yield gpid, pid, dev, slice(lo, hi)

    def per_gap(self, column: int) -> np.ndarray:
        """Column ``column`` of ``sequences`` (0 global_pid, 1 pid, 2 device_id) per gap."""
        return np.repeat(self.sequences[:, column], np.diff(self.bounds))


def method(report: Report) -> Gaps:
    """The gaps by gpu_idle.sql ``gaps``: a running maximum (a window function) over each
    device sequence."""
    g = report.sql(load_sql(NAME)["gaps"], {"no_end": NO_END}).fetchnumpy()
    gpid, pid, dev = (np.asarray(g.pop(c), dtype=np.int64)
                      for c in ("global_pid", "pid", "device_id"))
    head = np.flatnonzero(np.r_[True, (gpid[1:] != gpid[:-1]) | (dev[1:] != dev[:-1])]) \
        if len(gpid) else np.empty(0, dtype=np.int64)
    return Gaps(np.stack([gpid[head], pid[head], dev[head]], axis=1).reshape(-1, 3),
                np.r_[head, len(gpid)], *(np.asarray(g[c], dtype=np.int64) for c in (
                    "stream_id", "idle_start_ns", "idle_end_ns", "launch_end_ns",
                    "launch_global_tid")))


def accelerated(report: Report) -> Gaps:
    """:func:`method`'s gaps from one pass over the device sequences as stored
    (``_sequence_pass``): no window function, no sort where the kernels come in order."""
    keys, bounds, *columns = _sequence_pass(report)
    sequences = np.stack([keys[:, 0], (keys[:, 0] >> 24) & 0xFFFFFF, keys[:, 1]], axis=1)
    return Gaps(sequences.reshape(-1, 3), bounds, *columns)


def host_windows_method(report: Report, tid: np.ndarray, start: np.ndarray,
                        end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per window ``[start, end]`` of thread ``tid``: the time of each class of CUDA call
    in it (columns as gpu_idle.sql ``thread_calls``' cls) and the class of the call the
    thread was in at ``start`` (-1: none), by gpu_idle.sql ``host_pieces`` (the calls cut
    into pieces with running totals) and ``host_windows`` (ASOF joins at the bounds)."""
    windows = pa.table({"id": np.arange(len(tid)), "key": tid, "start_ns": start,
                        "end_ns": end})
    with registered(report, "_gpu_idle_windows", windows), stepped(report, NAME) as sql:
        got = sql.query("host_windows")
    sums = np.stack([got.column(c).to_numpy() for c in ("launch_ns", "copy_ns", "sync_ns",
                                                         "other_ns")], axis=1)
    return sums.astype(np.int64), got.column("at_cls").to_numpy().astype(np.int8)


def host_windows_accelerated(report: Report, tid: np.ndarray, start: np.ndarray,
                             end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`host_windows_method`'s answer from one sweep of the threads' calls over the
    windows' bounds sorted in numpy (``sweep.covered_windows``): no probe table, no sort
    in DuckDB."""
    return sweep.covered_windows(report, load_sql(NAME)["thread_calls"], tid, start, end, 4,
                                 in_order=True)


#: the order of the device sequence (gpu_idle.sql gaps): the columns of ``sequence`` the
#: window of ``gaps`` orders by, in that order
_ORDER = ("start_ns", "sort_end", "in_graph", "stream_id", "launch_end_ns",
          "launch_global_tid")


class _Tie(Exception):
    """Two rows of a device sequence read as stored are tied on start and end: the pass
    reads the sequence again, sorted on the whole order."""


def _sequence_pass(report: Report) -> tuple[np.ndarray, ...]:
    """gpu_idle.sql ``gaps`` (a running maximum of the ends per process and GPU) as
    :func:`_pass` gives them.

    The kernels are read as the view stores them, in the export's order, which is start
    order in every export seen, so no sort is paid, unless graph-level executions join
    them, a row comes out of order (``intervals.OutOfOrder``) or two rows of one sequence
    tie on start and end (the order of a tie is the SQL's tie-breaks): then sorted."""
    rows, graph_rows = report.execute(load_sql(NAME)["sequence_rows"])[0]
    if not graph_rows:
        try:
            return _pass(report, rows, in_order=True)
        except (intervals.OutOfOrder, _Tie):
            pass
    return _pass(report, rows, in_order=False)


def _pass(report: Report, rows: int, in_order: bool) -> tuple[np.ndarray, ...]:
    """:func:`_sequence_pass` over the sequence as stored (``in_order``) or sorted: the
    (global_pid, device_id) of each sequence with gaps, the bounds of its rows (as
    ``Gaps``), then the gaps' columns. One compiled loop (``compiled.sequence_gaps``)
    carries each sequence's furthest end from batch to batch and writes the gaps."""
    codes: dict[tuple[int, int], int] = {}
    state = np.zeros((0, 4), dtype=np.int64)
    # room for one gap per row, filled in the pass's order; pages touched only as they fill
    out = [np.empty(rows, dtype=np.int64) for _ in range(6)]
    n = 0
    keys = ("global_pid", "device_id")
    names = ("start_ns", "end_ns", "sort_end", "in_graph", "stream_id", "launch_end_ns",
             "launch_global_tid")
    read = (f"SELECT {', '.join((*keys, *names))} FROM ({load_sql(NAME)['sequence']}) "
            "WHERE global_pid IS NOT NULL AND device_id IS NOT NULL AND start_ns IS NOT NULL")
    with contextlib.ExitStack() as stack:
        if in_order:
            reader = stack.enter_context(intervals.stored_order(
                report, read, {"no_end": NO_END}))
        else:
            reader = report.sql(f"{read} ORDER BY {', '.join((*keys, *_ORDER))}",
                                {"no_end": NO_END}).to_arrow_reader(intervals.BATCH_ROWS)
        for batch in reader:
            if not batch.num_rows:
                continue
            cols = [batch.column(c).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                    for c in (*keys, *names)]
            code, distinct = intervals.run_codes((cols[0], cols[1]))
            known = np.array([codes.setdefault(tuple(k), len(codes))
                              for k in distinct.tolist()], dtype=np.int64)
            code = known[code]
            if len(codes) > len(state):
                state = np.r_[state, np.zeros((len(codes) - len(state), 4), dtype=np.int64)]
            n = compiled.sequence_gaps(code, *cols[2:], in_order, NO_END, state, *out, n)
            if n == compiled.SEQ_OUT_OF_ORDER:
                raise intervals.OutOfOrder("a device sequence's rows out of order")
            if n == compiled.SEQ_TIE:
                raise _Tie("rows of a device sequence tied on start and end")
    keys_ = np.array(list(codes), dtype=np.int64).reshape(-1, 2)
    code = out[0][:n]
    columns = [c[:n] for c in out[1:]]
    del out
    # by process and GPU, each sequence's gaps in their order (a stable sort of the codes
    # by their keys' rank; none where the pass met the sequences in that order)
    by_key = np.lexsort((keys_[:, 1], keys_[:, 0]))
    rank = by_key.argsort()
    if len(code) and not (np.diff(rank[code]) >= 0).all():
        order = np.argsort(rank[code], kind="stable")
        for i in range(len(columns)):  # one column at a time: one copy alive at most
            columns[i] = columns[i][order]
        del order
    counts = np.bincount(code, minlength=len(keys_))[by_key]
    has = counts > 0
    return (keys_[by_key][has], np.r_[0, np.cumsum(counts[has])], *columns)


def _gpu_side(report: Report, g: Gaps, fast: bool) -> tuple[np.ndarray, np.ndarray]:
    """The time of each gap covered by the process's own copies and memsets, and by other
    work on the GPU (0 on a GPU whose operations are all the process's own,
    gpu_idle.sql ``device_processes``): unions of gpu_idle.sql ``copies_busy`` and
    ``device_busy`` (:func:`_device_busy`)."""
    sql = load_sql(NAME)
    copies = intervals.Coverage.of_query(report, sql["copies_busy"])
    own_copy = np.empty(len(g.start), dtype=np.int64)
    for gpid, _, dev, rows in g.slices():
        own_copy[rows] = copies.between_key(gpid + dev, g.start[rows], g.end[rows])
    other = np.zeros(len(g.start), dtype=np.int64)
    single = {r[0] for r in report.execute(sql["device_processes"]) if r[1]}
    if not all(dev in single for _, _, dev, _ in g.slices()):
        busy = _device_busy(report, fast)
        for _, _, dev, rows in g.slices():
            if dev not in single:
                other[rows] = busy.between_key(dev, g.start[rows], g.end[rows])
        del busy
    np.subtract(other, own_copy, out=other)
    np.maximum(other, 0, out=other)
    return own_copy, other


def _device_busy(report: Report, fast: bool) -> intervals.Coverage:
    """Each GPU's busy time, the union of gpu_idle.sql ``device_busy``; with ``fast``, from
    overlap's pass over each GPU's operations in start order (the kernels as stored, where
    they come in that order: no sort of every kernel)."""
    if fast:
        busy = intervals.Coverage()
        try:
            # device_busy's operations (overlap.sql ops), each GPU's in start order
            with contextlib.closing(device_operations(report)) as runs:
                for (device,), op in runs:
                    busy.feed(device, *(op[c].astype(np.int64, copy=False)
                                        for c in ("start_ns", "end_ns")))
            return busy.done()
        except intervals.OutOfOrder:
            pass
    return intervals.Coverage.of_query(report, load_sql(NAME)["device_busy"])


def _inside_units(ranges: RangesResult, g: Gaps) -> np.ndarray:
    """Time of each gap inside the process's units (the instances the tail figures
    count)."""
    inst = ranges.counted_instances(["pid", "start_ns", "end_ns"])
    windows = intervals.Coverage()
    ipid, istart, iend = (np.asarray(inst.column(c).to_numpy(zero_copy_only=False),
                                     dtype=np.int64) for c in ("pid", "start_ns", "end_ns"))
    for p in np.unique(ipid).tolist():
        rows = np.flatnonzero(ipid == p)
        rows = rows[np.argsort(istart[rows], kind="stable")]
        windows.feed(p, istart[rows], iend[rows])
    windows.done()
    inside = np.empty(len(g.start), dtype=np.int64)
    for _, pid, _, rows in g.slices():
        inside[rows] = windows.between_key(pid, g.start[rows], g.end[rows])
    return inside


def _result(s: Settings, unit: str | None, gap: np.ndarray, cause: np.ndarray, g: Gaps,
            detail: bool) -> GpuIdleResult:
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
    per_stream = _per_stream(g, cause, gap)
    tables = {"by_cause": by_cause, "per_stream": per_stream}
    if detail:
        tables["gaps"] = pa.table({"pid": g.per_gap(1), "device_id": g.per_gap(2),
                                   "stream_id": g.stream_id, "idle_start_ns": g.start,
                                   "idle_end_ns": g.start + gap, "gap_ns": gap,
                                   "cause": pa.array(CAUSES, pa.string()).take(cause)})
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


def _per_stream(g: Gaps, cause: np.ndarray, gap: np.ndarray) -> pa.Table:
    schema = pa.schema([("pid", pa.int64()), ("device_id", pa.int64()),
                        ("stream_id", pa.int64()), ("cause", pa.string()),
                        ("gaps", pa.int64()), ("idle_ns", pa.int64()),
                        ("share_pct", pa.float64())])
    if not len(gap):
        return schema.empty_table()
    # one code per (pid, device, stream, cause), in their lexicographic order: each
    # column's rank among its distinct values, combined; the rows per code counted (no
    # np.unique of rows: it sorts tuples, far slower at millions of gaps)
    pids, pid_rank = np.unique(g.sequences[:, 1], return_inverse=True)
    devs, dev_rank = np.unique(g.sequences[:, 2], return_inverse=True)
    streams, combined = _ranks(g.stream_id)
    sizes = (len(pids), len(devs), len(streams), len(CAUSES))
    size = math.prod(sizes)
    if size >= 1 << 62:  # the codes would overflow: rows sorted as tuples
        distinct, inv = np.unique(np.stack([g.per_gap(1), g.per_gap(2), g.stream_id,
                                            cause.astype(np.int64)], axis=1),
                                  axis=0, return_inverse=True)
        n = np.bincount(inv.ravel())
        t = np.bincount(inv.ravel(), weights=gap).astype(np.int64)
    else:
        # ((pid * devices + device) * streams + stream) * causes + cause, in place
        for (_, _, _, rows), p, d in zip(g.slices(), pid_rank.ravel().tolist(),
                                         dev_rank.ravel().tolist()):
            combined[rows] += (p * len(devs) + d) * len(streams)
        combined *= len(CAUSES)
        combined += cause
        if size <= max(4 * len(gap), 1 << 20):  # counted in an array of every code
            n = np.bincount(combined, minlength=size)
            used = np.flatnonzero(n)
            n = n[used]
            t = np.bincount(combined, weights=gap, minlength=size)[used].astype(np.int64)
        else:  # by their index among the codes used
            used, inv = _ranks(combined)
            n = np.bincount(inv)
            t = np.bincount(inv, weights=gap).astype(np.int64)
        del combined
        distinct = np.empty((len(used), 4), dtype=np.int64)
        for i, values in ((3, np.arange(len(CAUSES))), (2, streams), (1, devs), (0, pids)):
            distinct[:, i] = values[used % sizes[i]]
            used = used // sizes[i]
    _, sinv = np.unique(distinct[:, :3], axis=0, return_inverse=True)
    stream_total = np.bincount(sinv.ravel(), weights=t)
    return pa.table({
        "pid": distinct[:, 0], "device_id": distinct[:, 1], "stream_id": distinct[:, 2],
        "cause": [CAUSES[c] for c in distinct[:, 3].tolist()], "gaps": n, "idle_ns": t,
        "share_pct": 100.0 * t / np.maximum(stream_total[sinv.ravel()], 1),
    }, schema=schema)


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sorted distinct values of an int64 array and each element's index among them
    (a new int64 array): by a table of every value where they span a small range, else
    a hash table (no sort of every element either way)."""
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < max(len(values), 1 << 16):
        rank = values - lo
        present = np.bincount(rank, minlength=hi - lo + 1) > 0
        np.take(np.cumsum(present) - 1, rank, out=rank, mode="clip")  # in place: unbuffered
        return np.flatnonzero(present) + lo, rank
    import pandas as pd  # on first use, as analyses.base imports it

    rank, distinct = pd.factorize(values, sort=True)
    return np.asarray(distinct, dtype=np.int64), rank.astype(np.int64, copy=False)


def breakdown(r: GpuIdleResult, limit: int = 4) -> str:
    """The largest causes in words: ``cpu_work 61%, host_sync 30%, ...``."""
    parts = sorted(((c, v) for c, v in (r.by_cause or {}).items() if v["idle_ns"] > 0),
                   key=lambda cv: -cv[1]["share_pct"])
    return ", ".join(f"{c} {v['share_pct']:.0f}%" for c, v in parts[:limit])


def _message(r: GpuIdleResult) -> str:
    if not r.gaps:
        return "no gap before a kernel"
    return (f"{r.gaps} gaps, {fmt_ns(r.idle_ns)} idle: {breakdown(r)}"
            + (f" (unit {r.unit})" if r.unit else " (no unit: the whole run)"))


def _findings(r: GpuIdleResult) -> tuple[str, ...]:
    out = []
    if r.gaps and r.top_cause:
        out.append(f"most GPU idle time is {r.top_cause}: {MEANING[r.top_cause]}")
    if r.launch_bound_gaps:
        out.append(f"{r.launch_bound_gaps} launch-bound gaps: P50 "
                   f"{fmt_ns(r.launch_bound_p50_ns)}, P99 {fmt_ns(r.launch_bound_p99_ns)}"
                   + (" (launch overhead)" if r.launch_overhead else ""))
    return tuple(out)


#: the gaps before kernels, and the host side of each window, by the SQL method or the
#: pass, as the engine chooses for the rows of kernels and API calls
GAPS = register(NAME, "gaps", method=method, accelerated=accelerated,
                rows=rows_of("kernels", "api_calls"))
HOST_WINDOWS = register(NAME, "host_windows", method=host_windows_method,
                        accelerated=host_windows_accelerated,
                        rows=rows_of("kernels", "api_calls"))
