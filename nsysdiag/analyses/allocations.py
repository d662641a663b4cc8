"""Allocations: memory allocated and freed in the launch loop, per thread and call name.

The cudaMalloc, cudaFree, cudaMallocHost, cudaHostAlloc, cudaHostRegister calls (and
their driver forms) a thread makes between its first and its last kernel launch: how
many, how far over that window they recur (in how many of its ten tenths), and how much
of it they took. Allocations made once at setup or teardown fall outside the window;
stream-ordered ones (cudaMallocAsync, a memory pool's) are left out. Every diagnosis
runs it: its rule warns when the calls recur through the loop and cost the thread a
share of its launch window worth acting on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow.compute as pc

from ..findings import Finding
from ..formatting import fmt_ns
from ..layers import Layer
from .base import OK, AnalysisResult, figure, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "allocations"

#: the rule's thresholds (:func:`rule`): the calls recur through the loop when they fall
#: in at least MIN_TENTHS of the launch window's ten tenths and number MIN_CALLS at
#: least; they cost enough to act on from MIN_SHARE_PCT of the window
MIN_TENTHS = 5
MIN_CALLS = 10
MIN_SHARE_PCT = 5.0


@dataclass(frozen=True)
class AllocatingThread:
    """One row of the ``per_thread`` table: a thread with allocation calls between its
    launches."""

    pid: int  #: its process
    tid: int  #: the thread
    launches: int  #: its kernel launch calls
    window_ns: int  #: from its first launch call's entry to its last one's return, ns
    calls: int  #: allocation and free calls inside that window
    frees: int  #: of them, frees
    tenths: int  #: tenths of the window that hold a call (1-10)
    time_ns: int  #: their summed duration, ns
    share_pct: float  #: time_ns of window_ns, %

    def recurs(self) -> bool:
        """The calls recur through the loop: ``MIN_CALLS`` at least, in ``MIN_TENTHS`` of
        the window's tenths at least."""
        return self.calls >= MIN_CALLS and self.tenths >= MIN_TENTHS

    def costly(self) -> bool:
        """They recur and take ``MIN_SHARE_PCT`` of the window at least."""
        return self.recurs() and self.share_pct >= MIN_SHARE_PCT


@dataclass(frozen=True)
class AllocationCall:
    """One row of the ``per_name`` table: one call name on one thread."""

    pid: int
    tid: int
    name: str  #: cudaMalloc, cudaFree, cuMemAlloc_v2, ...
    calls: int  #: its calls inside the thread's launch window
    time_ns: int  #: their summed duration, ns
    median_ns: float  #: median duration, ns
    max_ns: int  #: longest, ns


@dataclass(frozen=True, kw_only=True)
class AllocationsResult(AnalysisResult):
    """Allocation and free calls inside the threads' launch windows
    (``sql/allocations.sql`` defines them).

    Tables: ``per_thread`` (main; one row per thread, most time first), ``per_name`` (one
    row per thread and call name, most time first).
    """

    analysis: str = field(default="allocations", init=False)
    threads: int = figure("threads with allocation calls between their launches", 0)
    calls: int = figure("allocation and free calls between launches, all threads", 0)
    time_ns: int = figure("their summed duration, ns", 0)

    def per_thread(self) -> list[AllocatingThread]:
        """The threads, most time first."""
        return records(self.tables["per_thread"], AllocatingThread)

    def names(self, thread: AllocatingThread) -> list[AllocationCall]:
        """The call names of ``thread``, most time first."""
        t = self.tables["per_name"]
        mine = t.filter(pc.and_(pc.equal(t["pid"], thread.pid), pc.equal(t["tid"], thread.tid)))
        return records(mine, AllocationCall)


RESULT = AllocationsResult


def run(report: Report, *, settings: Settings | None = None
        ) -> AllocationsResult | AnalysisResult:
    """Measure the allocation and free calls each thread makes between its kernel
    launches.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    AllocationsResult
        ``threads``, ``calls``, ``time_ns``; tables ``per_thread`` (main: ``pid``,
        ``tid``, ``launches``, ``window_ns``, ``calls``, ``frees``, ``tenths``,
        ``time_ns``, ``share_pct``) and ``per_name`` (``pid``, ``tid``, ``name``,
        ``calls``, ``time_ns``, ``median_ns``, ``max_ns``).
    """
    missing = not_captured(NAME, report, "api_calls")
    if missing:
        return missing
    rows = run_query(report, NAME, "calls")
    thread_rows = pc.is_null(rows["name"])
    per_thread = rows.filter(thread_rows).select(
        ["pid", "tid", "launches", "window_ns", "calls", "frees", "tenths", "time_ns",
         "share_pct"])
    per_name = rows.filter(pc.invert(thread_rows)).select(
        ["pid", "tid", "name", "calls", "time_ns", "median_ns", "max_ns"])
    calls = int(pc.sum(per_thread["calls"]).as_py() or 0)
    time_ns = int(pc.sum(per_thread["time_ns"]).as_py() or 0)
    return AllocationsResult(
        status=OK, tables={"per_thread": per_thread, "per_name": per_name},
        main="per_thread",
        message=(f"{calls} allocation and free calls between kernel launches on "
                 f"{per_thread.num_rows} threads, {fmt_ns(time_ns)}" if calls
                 else "no allocation or free call between kernel launches"),
        threads=per_thread.num_rows, calls=calls, time_ns=time_ns)


def rule(result: AllocationsResult, settings: Settings) -> list[Finding]:
    """Memory allocated in the launch loop: a warning when a thread's allocation and free
    calls recur through its launch window (:meth:`AllocatingThread.recurs`) and take
    ``MIN_SHARE_PCT`` of it at least, naming the thread that lost most, its calls by name,
    and what they cost. Reads no setting."""
    costly = [t for t in result.per_thread() if t.costly()]
    if not costly:
        return []
    top = costly[0]
    ev = [f"thread {top.tid} (pid {top.pid}) made {top.calls} allocation and free calls "
          f"between its first and last kernel launch ({top.launches} launches over "
          f"{fmt_ns(top.window_ns)}), in {top.tenths} of that window's 10 tenths: they "
          "recur through the loop, not once between two phases",
          f"what it cost: {fmt_ns(top.time_ns)} in these calls"
          + (f" ({top.frees} of them frees)" if top.frees else "")
          + f", {top.share_pct:.1f}% of the launch window; a device or page-locked "
          "allocation is also an implicit synchronization (CUDA Programming Guide): the "
          "GPU's earlier work completes before it, later work waits for it"]
    ev += [f"{c.name}: {c.calls} calls, {fmt_ns(c.time_ns)} (median "
           f"{fmt_ns(c.median_ns)}, longest {fmt_ns(c.max_ns)})"
           for c in result.names(top)[:3]]
    ev += [f"thread {t.tid} (pid {t.pid}) as well: {t.calls} calls, {fmt_ns(t.time_ns)}, "
           f"{t.share_pct:.1f}% of its launch window" for t in costly[1:3]]
    return [Finding(
        Layer.CPU, "warning",
        f"Memory allocated in the launch loop: {top.calls} allocation and free calls take "
        f"{top.share_pct:.1f}% of thread {top.tid}'s launch window",
        tuple(ev),
        "Allocate the buffers once, before the loop, and reuse them; where sizes vary, "
        "allocate from a pool: cudaMallocAsync/cudaFreeAsync (stream-ordered, served by a "
        "memory pool), RMM's pool for cuDF and CuPy (rmm.reinitialize(pool_allocator="
        "True)), or the framework's caching allocator; with OpenACC, keep the arrays on "
        "the device with a data region (!$acc data) around the loop.",
        check="allocations", weight=min(1.0, top.share_pct / 100.0))]
