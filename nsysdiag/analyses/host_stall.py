"""Host-side signature of a latency tail: how the slow units' extra host time is laid out.

The tail attribution (ranges) says *which component* of the slow units grew; when it is
the host's time outside CUDA, this says *how*, which names the mechanism:

- one long stretch of the launching thread without a CUDA call (the longest stretch grew
  by most of what the units grew), before the unit's first kernel launch (input
  preparation, data loading in the launching thread; the copy of the input that may come
  first is part of the unit's start) or between its launches (another thread holding
  the GIL, garbage collection, Python work);
- the unit opened but its work began late while the thread was busy with the previous
  unit or waiting in the OS (a queue, a lock, a sleep): queueing;
- the extra time spread over many short stretches: more or slower host work per unit.

Natural jitter (many short stretches a little longer each, a stretch as long in the
median units) does not show the first two. The figures compare the slowest units (the
ranges analysis' tail set) with its median band (45th to 55th percentile).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..compute import compiled, intervals
from ..engine.accelerate import accelerate
from ..engine.database import stored_order
from ..engine.steps import registered
from .base import load_sql, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from .ranges import RangesResult

NAME = "host_stall"
#: the most (measured unit, CUDA call of its thread) pairs the SQL may compare: its join
#: on the thread tests every call of the thread against every measured unit, so where the
#: accelerated pass does not run (NSYSDIAG_ACCELERATE=never, units the pass does not take)
#: past this the layout is not measured (None) rather than run for minutes
#: (docs/analyses/host_stall.md)
MAX_PAIRS = 1_000_000_000
#: OS calls in which a thread waits rather than works (queues, locks, sleeps, polls)
WAITS = (r"^(pthread_cond_(timed)?wait|pthread_mutex_(timed)?lock|pthread_join|"
         r"sem_(timed|clock)?wait|(clock_)?nanosleep|usleep|sleep|poll|ppoll|select|pselect6?|"
         r"epoll_p?wait|futex|accept4?|recv(from|msg)?|msgrcv|sigwait(info)?|wait(pid)?)$")
#: a share of the units' growth from which a layout of it is the mechanism
DECIDES = 0.5


class Layout(str, enum.Enum):
    """How the slow units' extra host time is laid out."""

    QUEUED = "queued"  #: the work began late: the thread was busy or waiting
    STALL_BEFORE = "stall_before"  #: one long stretch before the first kernel launch
    STALL_BETWEEN = "stall_between"  #: one long stretch between CUDA calls
    SPREAD = "spread"  #: many short stretches


@dataclass(frozen=True)
class HostStall:
    """The slow units' host-side layout against the median band (means per unit, ns).

    A *long stretch* is one without a CUDA call of at least ``threshold_ns``: the
    stretch-ratio times the median band's longest (at least 50 us), so no stretch of an
    ordinary unit is one; before the unit's first launch, the stretch-ratio times the
    median band's longest there is enough (``lead_threshold_ns``)."""

    slow_n: int  #: slow units measured
    median_n: int  #: median-band units measured
    duration_growth_ns: float  #: how much longer the slow units are
    outside_growth_ns: float  #: growth of their time outside CUDA calls
    longest_slow_ns: float  #: their longest stretch without a CUDA call
    longest_median_ns: float  #: the median band's
    threshold_ns: float  #: from this a stretch is long
    long_slow_ns: float  #: the slow units' long stretches, summed per unit
    long_median_ns: float  #: the median band's
    long_count: float  #: long stretches per slow unit
    queued_growth_ns: float  #: growth of the wait before the work began (busy or blocked)
    lead_share: float  #: share of the slow units' long-stretch time before the 1st launch
    lead_threshold_ns: float = 0.0  #: from this a stretch before the first launch is long
    #: each slow unit's own layout against the median band's means, and the share of its
    #: growth the layout's figure holds (None: it did not grow, or no layout holds half)
    units: tuple[tuple[Layout | None, float], ...] = ()

    @property
    def long_growth_ns(self) -> float:
        return self.long_slow_ns - self.long_median_ns

    @property
    def layout(self) -> Layout | None:
        """The layout that holds at least half the units' growth (queued first, then long
        stretches, then spread outside CUDA); None when none does."""
        return self._read()[0]

    def explains(self) -> float:
        """The share of the units' growth the layout's own figure holds (0..1)."""
        return self._read()[1]

    def _read(self) -> tuple[Layout | None, float]:
        return layout_of(self.duration_growth_ns, self.queued_growth_ns,
                         self.outside_growth_ns, self.long_growth_ns, self.lead_share)

    def most_units(self) -> tuple[Layout, int, float] | None:
        """The layout at least half of the slow units show each on its own, how many show
        it, and the median share of their own growth it holds; None when none does. A
        stall before the first launch and one between launches count as one layout here
        (a stall), named after the kind more of them show. The slow units' means can hide
        a layout half of them show: a few natural hiccups among them (a slow launch, a
        page of GC) weigh the means with growth of another kind."""
        family = {Layout.STALL_BEFORE: Layout.STALL_BETWEEN}  # both are a stall
        kinds = [family.get(layout, layout) for layout, _ in self.units if layout is not None]
        if not kinds:
            return None
        top = max(sorted(set(kinds)), key=kinds.count)
        n = kinds.count(top)
        if 2 * n < len(self.units):
            return None
        members = [(layout, s) for layout, s in self.units
                   if layout is not None and family.get(layout, layout) is top]
        if top is Layout.STALL_BETWEEN:
            before = sum(layout is Layout.STALL_BEFORE for layout, _ in members)
            top = Layout.STALL_BEFORE if 2 * before > n else Layout.STALL_BETWEEN
        return top, n, float(np.median([s for _, s in members]))


#: the shortest stretch that can be long, ns
MIN_LONG_NS = 50_000


def measure(report: Report, ranges: RangesResult, has_osrt: bool,
            ratio: float) -> HostStall | None:
    """The layout of the slow units' extra host time (None without instances, a tail set
    or a median band); ``ratio``: a long stretch is this many times the median band's
    longest."""
    table = ranges.tables.get("instances")
    if (table is None or not ranges.tail_n
            or not {"counted", "cpu_outside_cuda_ns"} <= set(table.column_names)):
        return None  # no host side measured (an export without the runtime's times)
    t = table.filter(table.column("counted")).select(
        ["instance", "start_ns", "end_ns", "duration_ns", "pid", "tid",
         "cpu_outside_cuda_ns"]).to_pydict()
    n = len(t["instance"])
    if n < 10:
        return None
    d = np.asarray(t["duration_ns"], dtype=float)
    order = np.argsort(d, kind="stable")
    slow = order[n - int(ranges.tail_n):]
    band = order[int(np.floor(0.45 * n)):int(np.ceil(0.55 * n))]
    if slow.size == 0 or band.size == 0:
        return None
    cols = ["instance", "start_ns", "end_ns", "pid", "tid"]
    every = pa.table({c: pa.array(t[c], pa.int64()) for c in cols})
    units = every.take(pa.array(np.concatenate([slow, band])))
    with registered(report, "hs_units", units), registered(report, "hs_all", every):
        calls = _threads_calls(report)
        if accelerate(calls) and _passable(units, every):
            tables = accelerated(report, units, every, has_osrt)
        elif units.num_rows * calls > MAX_PAIRS:
            return None
        else:
            tables = method(report, has_osrt)
    ids_slow = np.asarray([t["instance"][i] for i in slow], dtype=np.int64)
    ids_band = np.asarray([t["instance"][i] for i in band], dtype=np.int64)
    per = _per_instance(tables[0], tables[1] if has_osrt else None)
    longest_median = float(np.mean(per.of(ids_band, per.longest)))
    threshold = max(MIN_LONG_NS, ratio * longest_median)
    # a stretch before the first launch is measured against the median band's own stretches
    # there: a step whose thread waits mid-unit (for a backward pass on another thread)
    # has a long stretch there in every unit, none before its first launch
    lead_median = float(np.mean(per.of(ids_band, per.longest_lead)))
    lead_threshold = min(threshold, max(MIN_LONG_NS, ratio * lead_median))
    long_ns, long_lead_ns, long_n = per.long(threshold, lead_threshold)
    long_slow = float(np.mean(per.of(ids_slow, long_ns)))
    lead_slow = float(np.mean(per.of(ids_slow, long_lead_ns)))
    queued = np.maximum(per.overlap, per.blocked)
    outside = np.asarray(t["cpu_outside_cuda_ns"], dtype=float)
    units = _unit_layouts(
        d[slow] - d[band].mean(),
        per.of(ids_slow, queued) - np.mean(per.of(ids_band, queued)),
        outside[slow] - np.nanmean(outside[band]),
        per.of(ids_slow, long_ns) - np.mean(per.of(ids_band, long_ns)),
        per.of(ids_slow, long_ns), per.of(ids_slow, long_lead_ns))
    return HostStall(
        slow_n=int(slow.size), median_n=int(band.size),
        duration_growth_ns=float(d[slow].mean() - d[band].mean()),
        outside_growth_ns=float(np.nanmean(outside[slow]) - np.nanmean(outside[band])),
        longest_slow_ns=float(np.mean(per.of(ids_slow, per.longest))),
        longest_median_ns=longest_median,
        threshold_ns=float(threshold),
        long_slow_ns=long_slow,
        long_median_ns=float(np.mean(per.of(ids_band, long_ns))),
        long_count=float(np.mean(per.of(ids_slow, long_n))),
        queued_growth_ns=float(np.mean(per.of(ids_slow, queued))
                               - np.mean(per.of(ids_band, queued))),
        lead_share=lead_slow / long_slow if long_slow > 0 else 0.0,
        lead_threshold_ns=float(lead_threshold),
        units=units,
    )


def layout_of(growth: float, queued: float, outside: float, long_growth: float,
              lead_share: float) -> tuple[Layout | None, float]:
    """The layout that holds at least ``DECIDES`` of a growth (queued first, then long
    stretches, then spread outside CUDA; None when none does), and the share of the growth
    its own figure holds (0..1). ``lead_share``: the long stretches' share before the
    first launch."""
    if growth <= 0:
        return None, 0.0
    if queued >= DECIDES * growth:
        layout, part = Layout.QUEUED, queued
    elif outside < DECIDES * growth:
        return None, 0.0
    elif long_growth >= DECIDES * growth:
        layout = Layout.STALL_BEFORE if lead_share >= 0.5 else Layout.STALL_BETWEEN
        part = long_growth
    else:
        layout, part = Layout.SPREAD, outside
    return layout, float(min(1.0, max(0.0, part / growth)))


def _unit_layouts(growth: np.ndarray, queued: np.ndarray, outside: np.ndarray,
                  long_growth: np.ndarray, long_ns: np.ndarray, lead_ns: np.ndarray
                  ) -> tuple[tuple[Layout | None, float], ...]:
    """Each slow unit's layout (:func:`layout_of`) on its own figures: its growth over the
    median band's means."""
    return tuple(layout_of(g, q, o, lg, ld / ln if ln > 0 else 0.0)
                 for g, q, o, lg, ln, ld in zip(growth, queued, np.nan_to_num(outside),
                                                long_growth, long_ns, lead_ns))


@dataclass(frozen=True)
class _PerInstance:
    """The stretches and blocked time of the measured units, per instance (``ids``,
    sorted): the longest stretch, the part of the lead other units held (overlap) or an OS
    wait did (blocked), and each stretch with its instance's place (``at``)."""

    ids: np.ndarray
    at: np.ndarray
    ns: np.ndarray
    lead: np.ndarray
    longest: np.ndarray
    longest_lead: np.ndarray  #: the longest stretch before the first launch, 0 if none
    overlap: np.ndarray
    blocked: np.ndarray

    def of(self, instances: np.ndarray, values: np.ndarray) -> np.ndarray:
        """``values`` (one per instance of ``ids``) of ``instances``, 0 for one with no
        stretch."""
        i = np.minimum(np.searchsorted(self.ids, instances), max(len(self.ids) - 1, 0))
        found = (self.ids[i] == instances) if len(self.ids) else np.zeros(len(instances), bool)
        return np.where(found, values[i] if len(self.ids) else 0.0, 0.0)

    def long(self, threshold: float, lead_threshold: float
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per instance: its long stretches (of at least ``threshold``; before the first
        launch, of at least ``lead_threshold``) summed, those before the first launch
        summed, and their count. (Stretches are whole nanoseconds: float sums of them are
        exact in any order.)"""
        is_long = self.ns >= np.where(self.lead, lead_threshold, threshold)
        n = len(self.ids)
        return (np.bincount(self.at, weights=np.where(is_long, self.ns, 0.0), minlength=n),
                np.bincount(self.at, weights=np.where(is_long & self.lead, self.ns, 0.0),
                            minlength=n),
                np.bincount(self.at, weights=is_long.astype(float), minlength=n))


def _per_instance(stretches: pa.Table, blocked: pa.Table | None) -> _PerInstance:
    inst = stretches.column("instance").to_numpy(zero_copy_only=False).astype(np.int64)
    ns = stretches.column("stretch_ns").to_numpy(zero_copy_only=False).astype(float)
    lead = stretches.column("lead").to_numpy(zero_copy_only=False).astype(bool)
    ov = stretches.column("overlap_ns").to_numpy(zero_copy_only=False).astype(float)
    ids, at = np.unique(inst, return_inverse=True)
    at = at.ravel()
    longest = np.zeros(len(ids))
    np.maximum.at(longest, at, ns)  # every stretch is >= 0
    longest_lead = np.zeros(len(ids))
    np.maximum.at(longest_lead, at[lead], ns[lead])
    overlap = np.zeros(len(ids))
    np.maximum.at(overlap, at, ov)  # the stretch from the unit's start carries it, others 0
    waited = np.zeros(len(ids))
    if blocked is not None and blocked.num_rows:
        b_inst = blocked.column("instance").to_numpy(zero_copy_only=False).astype(np.int64)
        b_ns = blocked.column("blocked_ns").fill_null(0).to_numpy(
            zero_copy_only=False).astype(float)
        i = np.searchsorted(ids, b_inst)
        ok = i < len(ids)
        ok[ok] = ids[i[ok]] == b_inst[ok]
        waited[i[ok]] = b_ns[ok]
    return _PerInstance(ids, at, ns, lead, longest, longest_lead, overlap, waited)


def method(report: Report, has_osrt: bool) -> tuple[pa.Table, pa.Table | None]:
    """The queries ``stretches`` and ``blocked`` (the latter with ``has_osrt`` only) of the
    units hs_units among hs_all, as host_stall.sql states them."""
    stretches = run_query(report, NAME, "stretches")
    blocked = run_query(report, NAME, "blocked", {"waits": WAITS}) if has_osrt else None
    return stretches, blocked


def _passable(units: pa.Table, every: pa.Table) -> bool:
    """Whether the accelerated pass gives the method's rows for these units: each measured
    once, every unit's bounds set and in order (the pass takes a unit that ends inside
    another as starting before that one ends)."""
    if len(set(units.column("instance").to_pylist())) != units.num_rows:
        return False
    for t in (units, every):
        start, end = (t.column(c).to_numpy(zero_copy_only=False) for c in ("start_ns", "end_ns"))
        if t.column("start_ns").null_count or t.column("end_ns").null_count \
                or (end < start).any():
            return False
    return True


_INT64_MIN = np.iinfo(np.int64).min


def _codes(table: pa.Table, threads: dict[tuple[int, int], int]) -> np.ndarray:
    """Each row's thread code in ``threads`` ((pid, tid) -> code), -1 for any other."""
    return np.array([threads.get((p, t), -1) if p is not None and t is not None else -1
                     for p, t in zip(table.column("pid").to_pylist(),
                                     table.column("tid").to_pylist())], dtype=np.int64)


def _segments(codes: np.ndarray, n: int) -> np.ndarray:
    """Where each code's rows begin in ``codes`` (sorted), and the end: n + 1 bounds."""
    return np.searchsorted(codes, np.arange(n + 1))


def accelerated(report: Report, units: pa.Table, every: pa.Table,
                has_osrt: bool) -> tuple[pa.Table, pa.Table | None]:
    """:func:`method`'s tables by searches among sorted arrays instead of comparing every
    unit with every call of its thread: the calls inside some measured unit of their
    thread, sorted by thread, start and end, hold each unit's calls as one slice; the
    units' ends sorted per thread give the latest end inside a unit by one search; the
    units' starts sorted per thread give the units whose start a wait holds as one slice.
    Rows come in another order than the SQL's (the diagnosis reads them as sets)."""
    pairs = sorted({(p, t) for p, t in zip(units.column("pid").to_pylist(),
                                           units.column("tid").to_pylist())
                    if p is not None and t is not None})
    threads = {pt: c for c, pt in enumerate(pairs)}
    n_threads = len(pairs)
    ucode = _codes(units, threads)
    inst, start, end = (units.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                        for c in ("instance", "start_ns", "end_ns"))
    busy = _busy_until(start, end, ucode, _codes(every, threads),
                       every.column("end_ns").to_numpy(zero_copy_only=False).astype(np.int64),
                       n_threads)
    lo = np.maximum(busy, start)
    # a thread is pid << 24 | tid, global_tid's low 48 bits (host_stall.sql pass_calls);
    # -1, which no call has, where a pid or tid does not fit its 24 bits
    thread_table = pa.table({"thread": pa.array([_thread_key(p, t) for p, t in pairs],
                                                pa.int64()),
                             "code": pa.array(range(n_threads), pa.int64())})
    with registered(report, "hs_threads", thread_table):
        cc, cs, ce, ce_ok, cl = _calls_inside(report, start, end, ucode, n_threads)
        waits = (report.sql(load_sql(NAME)["pass_waits"], {"waits": WAITS}).fetchnumpy()
                 if has_osrt else None)
    heads = _segments(cc, n_threads)
    # each unit's calls: the slice [a, b) of the sorted calls (from lo to its end); f: the
    # first call from its start
    a, b, f = (np.zeros(len(start), dtype=np.int64) for _ in range(3))
    for k, rows in intervals.by_code(np.maximum(ucode, 0), max(n_threads, 1)):
        rows = rows[ucode[rows] >= 0]
        if k < n_threads and len(rows):
            ts = cs[heads[k]:heads[k + 1]]
            for out, at in ((a, lo), (b, end), (f, start)):
                out[rows] = heads[k] + np.searchsorted(ts, at[rows], side="left")
    # blocked's hi: the first call from the unit's start, else its end
    first_call = end.copy()
    first_call[f < b] = cs[f[f < b]]
    # the stretches of the measured units (counted, then written), then those of units of
    # no measured thread: the lead is the whole unit (no call, no other unit)
    measured = np.flatnonzero(ucode >= 0)
    nothing = np.empty(0, dtype=np.int64)
    n = compiled.unit_stretches(measured, inst, start, end, busy, a, b, cs, ce, ce_ok, cl,
                                nothing, nothing, nothing.astype(bool), nothing)
    rows_i, rows_ns, rows_ov = (np.empty(n, dtype=np.int64) for _ in range(3))
    rows_lead = np.empty(n, dtype=bool)
    compiled.unit_stretches(measured, inst, start, end, busy, a, b, cs, ce, ce_ok, cl,
                            rows_i, rows_ns, rows_lead, rows_ov)
    alone = np.flatnonzero(ucode < 0)
    rows_i = np.concatenate([rows_i, inst[alone]])
    rows_ns = np.concatenate([rows_ns, end[alone] - start[alone]])
    rows_lead = np.concatenate([rows_lead, np.ones(len(alone), dtype=bool)])
    rows_ov = np.concatenate([rows_ov, np.zeros(len(alone), dtype=np.int64)])
    stretches = pa.table({"instance": pa.array(rows_i, pa.int64()),
                          "stretch_ns": pa.array(rows_ns, pa.int64()),
                          "lead": pa.array(rows_lead, pa.bool_()),
                          "overlap_ns": pa.array(rows_ov, pa.int64())})
    if waits is None:
        return stretches, None
    return stretches, pa.table({
        "instance": pa.array(inst, pa.int64()),
        "blocked_ns": pa.array(_blocked(waits, start, first_call, ucode, n_threads),
                               pa.int64())})


def _blocked(waits: dict, start: np.ndarray, hi: np.ndarray, ucode: np.ndarray,
             n_threads: int) -> np.ndarray:
    """Per unit, the time from its start to ``hi`` inside the waits of its thread that
    began before its start and end after it."""
    order = np.lexsort((start, ucode))
    order = order[ucode[order] >= 0]
    starts, heads = start[order], _segments(ucode[order], n_threads)
    wc, ws, we = (np.asarray(waits[c], dtype=np.int64) for c in ("code", "start_ns", "end_ns"))
    r0, r1 = np.zeros(len(wc), dtype=np.int64), np.zeros(len(wc), dtype=np.int64)
    for k, rows in intervals.by_code(wc, n_threads):
        seg = starts[heads[k]:heads[k + 1]]
        # the units whose start lies strictly inside the wait: a slice of the sorted starts
        r0[rows] = heads[k] + np.searchsorted(seg, ws[rows], side="right")
        r1[rows] = heads[k] + np.searchsorted(seg, we[rows], side="left")
    out = np.zeros(len(start), dtype=np.int64)
    for w in np.flatnonzero(r1 > r0):
        held = order[r0[w]:r1[w]]
        out[held] += np.minimum(we[w], hi[held]) - start[held]
    return out


def _busy_until(start: np.ndarray, end: np.ndarray, ucode: np.ndarray, ecode: np.ndarray,
                ends: np.ndarray, n_threads: int) -> np.ndarray:
    """Per measured unit, the latest end among the units of its thread (codes ``ecode``,
    ends ``ends``) that end inside it (after its start, before its end), else INT64_MIN.
    Units end no earlier than they start (``_passable``), so a unit ending before this one
    ends is another, which began before this one ends."""
    keep = ecode >= 0
    order = np.lexsort((ends[keep], ecode[keep]))
    codes, sorted_ends = ecode[keep][order], ends[keep][order]
    heads = _segments(codes, n_threads)
    out = np.full(len(start), _INT64_MIN, dtype=np.int64)
    for k, rows in intervals.by_code(np.maximum(ucode, 0), max(n_threads, 1)):
        rows = rows[ucode[rows] >= 0]
        if k >= n_threads or not len(rows):
            continue
        h0, h1 = heads[k], heads[k + 1]
        j = h0 + np.searchsorted(sorted_ends[h0:h1], end[rows], side="left") - 1
        inside = j >= h0
        inside[inside] = sorted_ends[j[inside]] > start[rows[inside]]
        out[rows[inside]] = sorted_ends[j[inside]]
    return out


def _threads_calls(report: Report) -> int:
    """The CUDA calls whose (pid, tid) is a measured unit's (hs_units), NULL pid and tid
    matching as equal (as a (pid, tid) IN query does), counted by global_tid's low 48 bits
    (a thread is pid << 24 | tid: one column read as stored)."""
    (calls,), = report.execute(
        "SELECT count(*) FROM api_calls WHERE global_tid & 281474976710655 IN ("
        "SELECT pid << 24 | tid FROM hs_units "
        "WHERE pid BETWEEN 0 AND 16777215 AND tid BETWEEN 0 AND 16777215)")
    (nulls,), = report.execute("SELECT count(*) FROM hs_units WHERE pid IS NULL AND tid IS NULL")
    if nulls:  # calls without a thread (pid and tid NULL together)
        (none,), = report.execute("SELECT count(*) FROM api_calls WHERE global_tid IS NULL")
        calls += none
    return int(calls)


def _thread_key(pid: int, tid: int) -> int:
    """Thread (pid, tid)'s key among the calls' ``global_tid & (2**48 - 1)``: pid << 24 |
    tid, or -1 (no call's) when either is outside the 24 bits the views decode them from."""
    fits = 0 <= pid < 1 << 24 and 0 <= tid < 1 << 24
    return pid << 24 | tid if fits else -1


def _calls_inside(report: Report, start: np.ndarray, end: np.ndarray, ucode: np.ndarray,
                  n_threads: int) -> tuple[np.ndarray, ...]:
    """(thread code, start, end, end set, is a kernel launch) of the calls (query
    pass_calls) that start inside some measured unit of their thread, sorted by code,
    start and end (NULL ends last, as DuckDB orders them)."""
    # the measured units of each thread by start, with the furthest end so far: a call
    # lies inside one when that reach, at the last unit to start at or before it, is after it
    order = np.lexsort((start, ucode))
    order = order[ucode[order] >= 0]
    wcode, ws = ucode[order], start[order]
    heads = _segments(wcode, n_threads)
    reach = end[order].copy()
    for k in range(n_threads):
        reach[heads[k]:heads[k + 1]] = np.maximum.accumulate(reach[heads[k]:heads[k + 1]])
    kept: list[tuple[np.ndarray, ...]] = []
    last = np.zeros(n_threads, dtype=np.int64)  # the searches' previous answers per thread
    with stored_order(report, load_sql(NAME)["pass_calls"], batch_rows=1 << 20) as reader:
        for batch in reader:
            c = _int64(batch.column("code"))
            s = _int64(batch.column("start_ns"))
            e_col = batch.column("end_ns")
            e_ok = (np.ones(len(c), dtype=bool) if e_col.null_count == 0
                    else e_col.is_valid().to_numpy(zero_copy_only=False))
            e = _int64(e_col.fill_null(0) if e_col.null_count else e_col)
            launch = batch.column("launch").fill_null(False).to_numpy(zero_copy_only=False)
            inside = np.empty(len(c), dtype=bool)
            compiled.inside_units(c, s, heads, ws, reach, last, inside)
            if inside.all():
                kept.append((c, s, e, e_ok, launch))
            elif inside.any():
                kept.append((c[inside], s[inside], e[inside], e_ok[inside], launch[inside]))
    if not kept:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, empty, np.empty(0, dtype=bool), np.empty(0, dtype=bool)
    c, s, e, e_ok, launch = (np.concatenate(x) for x in zip(*kept))
    last = np.where(e_ok, e, np.iinfo(np.int64).max)
    # stored in start order (the view keeps the export's), they need no sort
    same_c, same_s = c[1:] == c[:-1], s[1:] == s[:-1]
    if ((c[1:] > c[:-1]) | same_c & ((s[1:] > s[:-1]) | same_s & (last[1:] >= last[:-1]))).all():
        return c, s, e, e_ok, launch
    order = np.lexsort((last, s, c))
    return c[order], s[order], e[order], e_ok[order], launch[order]


def _int64(column: pa.Array) -> np.ndarray:
    """An integer column without NULLs as int64 values (no copy where it is int64)."""
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
