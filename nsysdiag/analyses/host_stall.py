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

from ..engine.steps import registered
from .base import run_query

if TYPE_CHECKING:
    from ..report import Report
    from .ranges import RangesResult

NAME = "host_stall"
#: the most (measured unit, CUDA call of its thread) pairs the SQL may compare: its join
#: on the thread tests every call of the thread against every measured unit, so past this
#: the layout is not measured (None) rather than run for minutes (docs/analyses/host_stall.md)
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

    @property
    def long_growth_ns(self) -> float:
        return self.long_slow_ns - self.long_median_ns

    @property
    def layout(self) -> Layout | None:
        """The layout that holds at least half the units' growth (queued first, then long
        stretches, then spread outside CUDA); None when none does."""
        d = self.duration_growth_ns
        if d <= 0:
            return None
        if self.queued_growth_ns >= DECIDES * d:
            return Layout.QUEUED
        if self.outside_growth_ns < DECIDES * d:
            return None
        if self.long_growth_ns >= DECIDES * d:
            return Layout.STALL_BEFORE if self.lead_share >= 0.5 else Layout.STALL_BETWEEN
        return Layout.SPREAD

    def explains(self) -> float:
        """The share of the units' growth the layout's own figure holds (0..1)."""
        d = self.duration_growth_ns
        layout = self.layout
        if layout is None or d <= 0:
            return 0.0
        part = {Layout.QUEUED: self.queued_growth_ns, Layout.SPREAD: self.outside_growth_ns
                }.get(layout, self.long_growth_ns)
        return float(min(1.0, max(0.0, part / d)))


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
        (calls,), = report.execute("SELECT count(*) FROM api_calls WHERE (pid, tid) IN "
                                   "(SELECT (pid, tid) FROM hs_units)")
        if units.num_rows * calls > MAX_PAIRS:
            return None
        rows = run_query(report, NAME, "stretches").to_pydict()
        blocked = ({r["instance"]: r["blocked_ns"] for r in
                    run_query(report, NAME, "blocked", {"waits": WAITS}).to_pylist()}
                   if has_osrt else {})
    stretches: dict[int, list[tuple[float, bool]]] = {}
    overlap: dict[int, float] = {}
    for inst, ns, lead, ov in zip(rows["instance"], rows["stretch_ns"], rows["lead"],
                                  rows["overlap_ns"]):
        stretches.setdefault(inst, []).append((float(ns), bool(lead)))
        if ov:  # the stretch from the unit's start carries it (others carry 0)
            overlap[inst] = max(overlap.get(inst, 0.0), float(ov))
    ids_slow = [t["instance"][i] for i in slow]
    ids_band = [t["instance"][i] for i in band]

    def longest(inst: int) -> float:
        return max((ns for ns, _ in stretches.get(inst, ())), default=0.0)

    longest_median = float(np.mean([longest(k) for k in ids_band]))
    threshold = max(MIN_LONG_NS, ratio * longest_median)
    # a stretch before the first launch is measured against the median band's own stretches
    # there: a step whose thread waits mid-unit (for a backward pass on another thread)
    # has a long stretch there in every unit, none before its first launch
    lead_median = float(np.mean([max((ns for ns, lead in stretches.get(k, ()) if lead),
                                     default=0.0) for k in ids_band]))
    lead_threshold = min(threshold, max(MIN_LONG_NS, ratio * lead_median))

    def is_long(ns: float, lead: bool) -> bool:
        return ns >= (lead_threshold if lead else threshold)

    def long_sum(inst: int, lead_only: bool = False) -> float:
        return sum(ns for ns, lead in stretches.get(inst, ())
                   if is_long(ns, lead) and (lead or not lead_only))

    def queued(inst: int) -> float:
        return max(overlap.get(inst, 0.0), float(blocked.get(inst, 0) or 0))

    long_slow = float(np.mean([long_sum(k) for k in ids_slow]))
    lead_slow = float(np.mean([long_sum(k, True) for k in ids_slow]))
    outside = np.asarray(t["cpu_outside_cuda_ns"], dtype=float)
    return HostStall(
        slow_n=int(slow.size), median_n=int(band.size),
        duration_growth_ns=float(d[slow].mean() - d[band].mean()),
        outside_growth_ns=float(np.nanmean(outside[slow]) - np.nanmean(outside[band])),
        longest_slow_ns=float(np.mean([longest(k) for k in ids_slow])),
        longest_median_ns=longest_median,
        threshold_ns=float(threshold),
        long_slow_ns=long_slow,
        long_median_ns=float(np.mean([long_sum(k) for k in ids_band])),
        long_count=float(np.mean([sum(is_long(ns, lead) for ns, lead in stretches.get(k, ()))
                                  for k in ids_slow])),
        queued_growth_ns=float(np.mean([queued(k) for k in ids_slow])
                               - np.mean([queued(k) for k in ids_band])),
        lead_share=lead_slow / long_slow if long_slow > 0 else 0.0,
        lead_threshold_ns=float(lead_threshold),
    )
