"""More work or slower work: what the slowest units' extra kernel time is made of.

The tail attribution (ranges) says the slowest units' own kernels ran longer; this analysis
says whether they ran *more* kernels at the median band's per-kernel speed (a workload-size
tail: longer prompts, bigger batches) or the *same* work slower (GPU execution jitter, the
method's D1). The growth of own kernel time per unit, slow minus median, splits into

* more work: (slow kernels - median kernels) x the median's time per kernel, and
* slower work: slow kernels x (slow time per kernel - the median's),

and ``kind`` is ``more_work`` when the first is at least half the growth, ``slower_work``
when the second is more, ``no_growth`` when own kernel time did not grow. A workload-size
tail (:func:`is_workload_tail`) is more work of at least ``workload_ratio`` times the median
band's kernel time at its speed, with kernels not ``slow_ratio`` times slower. The relation
of latency with work per unit (correlation, slope, a table in quintiles) is over every unit.

Size on every side (``sizes``, ``size_relation``): per unit, the bytes it moves each way,
its kernels and launch calls (the work), its kernel time and host time outside CUDA (where
the time goes); for each, the rank correlation (Spearman) of latency with it, the slow
units' mean over the median band's, and how much of their extra latency size explains,
size-matched: the latency expected at a size is a monotone fit over size bins' medians
(``size_bins``, which a few stalled units cannot move), and the share is the expected
latency at the slow units' sizes less that at the band's, over their extra latency. A size
tail (:func:`is_size_tail`) is slow units that are simply bigger (a work measure latency
follows, ``workload_ratio`` times the band's, explaining at least ``work_explains``) or
the first of their size (:func:`is_new_size_tail`: a cost paid once per new size),
whichever side absorbs the time. Latency over the latency expected at its size
(``normalized_p99_over_p50``) is what the rest of the tail is judged on.
Definitions: docs/analyses/workload.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compute import compiled, intervals
from ..compute.fits import isotonic, spearman_rho
from ..engine.accelerate import register
from ..engine.database import stored_order
from ..engine.runner import Runs
from ..engine.steps import bind, registered
from ..formatting import fmt_ns, fmt_ratio
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, load_sql, records, run_query
from .interference import slow_count
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "workload"
#: per-unit measures of size: column -> (what it is, "work" done or "time" where it went)
SIZE_MEASURES = {
    "htod_bytes": ("host-to-device bytes", "work"),
    "dtoh_bytes": ("device-to-host bytes", "work"),
    "n_kernels": ("kernels", "work"),
    "launch_calls": ("launch calls", "work"),
    "kernel_ns": ("own kernel time", "time"),
    "host_ns": ("host time outside CUDA", "time"),
}
KINDS = ("more_work", "slower_work", "no_growth")


@dataclass(frozen=True)
class WorkBin:
    """One row of the ``bins`` table: units in one quintile of kernels per unit."""

    bin: int  #: quintile, 1 (fewest kernels) to 5
    units: int  #: units in it
    min_kernels: int  #: fewest own kernels of a unit in it
    max_kernels: int  #: most own kernels of a unit in it
    mean_kernels: float  #: mean own kernels per unit
    p50_ns: float  #: median latency, ns
    mean_per_kernel_ns: float | None  #: own kernel time over own kernels, ns


@dataclass(frozen=True)
class SizeRelation:
    """One row of the ``size_relation`` table: latency against one measure of size."""

    measure: str  #: the ``sizes`` column (SIZE_MEASURES)
    what: str  #: what it is, in words
    side: str  #: work (done by the unit) or time (where its time went)
    slow_mean: float  #: its mean over the slowest units
    median_mean: float | None  #: its mean over the median band (None: no unit in the band)
    ratio: float | None  #: slow_mean / median_mean (None when the median's is 0 or None)
    rho: float | None  #: Spearman rank correlation of latency with it, over every unit
    slope: float | None  #: least-squares latency growth per unit of it, ns
    explains: float | None  #: the latency expected at the slow units' sizes less that at
    #: the median band's, over the slow units' extra latency, clipped to 0-1
    follows: bool  #: latency follows it: rho at least ``size_min_rho``

    def amount(self, x: float | None) -> str:
        if x is None:
            return "-"
        if self.measure.endswith("bytes"):
            return _mb(x)
        if self.measure.endswith("_ns"):
            return _us(x)
        return f"{x:.4g}"


@dataclass(frozen=True, kw_only=True)
class WorkloadResult(AnalysisResult):
    """More work or slower work in the slowest units, and latency against work per unit.

    Tables: ``bins`` (main), ``compare``, ``relation``, ``sizes``, ``size_relation``,
    ``size_bins``.
    """

    analysis: str = field(default="workload", init=False)
    kind: str = figure("more_work, slower_work or no_growth (own kernel time did not grow)",
                       "no_growth")
    slow_n: int = figure("slowest units compared", 0)
    median_n: int = figure("median-band units compared", 0)
    slow_kernels: float | None = figure("own kernels per slow unit (mean)")
    median_kernels: float | None = figure("own kernels per median-band unit (mean)")
    kernel_ratio: float | None = figure("slow_kernels / median_kernels (ratio)")
    slow_kernel_ns: float | None = figure("own kernel time per slow unit (mean), ns")
    median_kernel_ns: float | None = figure("own kernel time per median-band unit (mean), ns")
    per_kernel_ratio: float | None = figure("time per own kernel, slow units over the median "
                                            "band (ratio): 1 is the median's speed")
    work_ratio: float | None = figure("the slow units' own kernels at the median band's time "
                                      "per kernel, over the median band's kernel time (ratio)")
    more_work_share: float | None = figure("share of the growth of own kernel time that is "
                                           "more kernels at the median's speed (fraction)")
    r_kernels: float | None = figure("correlation of latency with own kernels per unit, over "
                                     "every unit (Pearson r)")
    slope_ns_per_kernel: float | None = figure("latency growth per extra own kernel "
                                               "(least squares), ns")
    r_kernel_ns: float | None = figure("correlation of latency with own kernel time per unit "
                                       "(Pearson r)")
    extra_latency_ns: float | None = figure("mean latency of the slow units minus the median "
                                            "band's, ns")
    kernels_explain: float | None = figure(
        "share of extra_latency_ns that the slow units' extra kernels explain at the "
        "latency-per-kernel slope over every unit (fraction, 0-1)")
    slow_copy_bytes: float | None = figure("host-device bytes per slow unit (mean), bytes")
    median_copy_bytes: float | None = figure("host-device bytes per median-band unit (mean), "
                                             "bytes")
    slow_collective_ns: float | None = figure(
        "NCCL collective kernel time per slow unit (mean; the unit's process, within its "
        "span), ns: a collective's kernel waits on the GPU until every rank has arrived")
    median_collective_ns: float | None = figure(
        "NCCL collective kernel time per median-band unit (mean), ns")
    collective_share: float | None = figure(
        "share of the growth of own kernel time that is NCCL collective time (fraction, "
        "0-1): the slow units waited at collectives for another rank")
    slow_copy_ns: float | None = figure("own copy time per slow unit (mean), ns")
    median_copy_ns: float | None = figure("own copy time per median-band unit (mean), ns")
    extra_copy_gbps: float | None = figure("the slow units' extra bytes over their extra own "
                                           "copy time (GB/s): the speed of the extra copies")
    copies_explain: float | None = figure(
        "share of extra_latency_ns that the slow units' extra own copy time is (fraction, 0-1)")
    size_measure: str | None = figure(
        "the work measure (sizes column) that explains most of the slow units' extra latency, "
        "among those latency follows (rank correlation >= size_min_rho)")
    size_rho: float | None = figure("rank correlation of latency with size_measure over "
                                    "every unit (Spearman rho)")
    size_ratio: float | None = figure("size_measure in the slow units over the median band's "
                                      "(ratio)")
    size_explains: float | None = figure(
        "share of extra_latency_ns that size_measure explains: the latency expected at the "
        "slow units' sizes less that expected at the median band's (a monotone fit of "
        "latency on size over bins' medians), over extra_latency_ns (fraction, 0-1)")
    normalized_p99_over_p50: float | None = figure(
        "P99/P50 of latency over the latency expected at each unit's size_measure: the tail "
        "that size does not explain (ratio)")
    normalized_level: str | None = figure(
        "that tail's level against tail_ratio and elevated_ratio: normal, elevated or "
        "abnormal (what is left to judge once size is accounted for)")
    new_size_n: int | None = figure("units whose size_measure no earlier counted unit had "
                                    "(units)")
    slow_new_size_n: int | None = figure("of the slow units, those of a new size (units)")
    new_size_p50_ns: float | None = figure("median latency of the units of a new size, ns")
    seen_size_p50_ns: float | None = figure("median latency of the units of a size seen "
                                            "before, ns")
    new_size_oneoff_n: int | None = figure("units of a new size that hold a one-off call "
                                           "(ranges: a module load, an allocation) (units)")
    oneoff_n: int | None = figure("counted units that hold a one-off call (units)")
    oneoff_new_sizes: bool | None = figure(
        "the one-off calls come with new sizes: at least new_size_share of the units that "
        "hold one are of a new size, new_size_lift times all units' share (a cache that "
        "grows with each new size)")
    new_size_tail: bool | None = figure(
        "the slow units are the first of their size: at least new_size_share of them, "
        "new_size_lift times all units' share, and new_size_ratio >= new_size_min_ratio "
        "(a cost paid once per size)")
    new_size_ratio: float | None = figure(
        "median latency over the latency expected at its size (the fit over the units of a "
        "size seen before), of the units of a new size within the sizes seen before, over "
        "that of the units of a size seen before (ratio)")

    def bins(self) -> list[WorkBin]:
        """The ``bins`` table as records (empty without it)."""
        table = self.tables.get("bins")
        return records(table, WorkBin) if table is not None else []

    def size_relation(self) -> list[SizeRelation]:
        """The ``size_relation`` table as records (empty without it)."""
        table = self.tables.get("size_relation")
        return records(table, SizeRelation) if table is not None else []

    def size_line(self) -> str | None:
        """One line: how much bigger the slow units are on every side, how closely latency
        follows size and how much of the tail size explains; when the slow units are the
        first of their size (:func:`is_new_size_tail`), what the new sizes cost; None
        without a size measure."""
        rows = {r.measure: r for r in self.size_relation()}
        best = rows.get(self.size_measure or "")
        if best is None:
            return None
        bigger = [r for r in rows.values() if r.ratio is not None
                  and r.ratio >= BIGGER and r.follows]
        bigger.sort(key=lambda r: (r.side != "work", -(r.ratio or 0)))
        parts = [f"{fmt_ratio(r.ratio)} the {r.what} ({r.amount(r.slow_mean)} vs "
                 f"{r.amount(r.median_mean)})" for r in bigger]
        text = (f"slow units are bigger: {', '.join(parts)}; latency follows "
                f"{best.what}, rank correlation {best.rho:.2f}; at the latency expected "
                f"for their sizes, size explains {self.size_explains:.0%} of their extra "
                "latency")
        if is_new_size_tail(self):
            return (f"{text}; the rest is new sizes: {self.slow_new_size_n} of the "
                    f"{self.slow_n} slowest units are the first of their {best.what}, the "
                    f"{self.new_size_n} units of a size no earlier unit had take a median "
                    f"{fmt_ns(self.new_size_p50_ns)} against {fmt_ns(self.seen_size_p50_ns)} "
                    f"at a size seen before"
                    + (f" ({self.new_size_oneoff_n} of them hold a one-off call)"
                       if self.new_size_oneoff_n else ""))
        if self.normalized_p99_over_p50 is not None:
            rest = {"normal": "tight once size is accounted for",
                    "elevated": "still elevated beyond size",
                    "abnormal": "still abnormal beyond size: something besides size slows "
                                "some units"}.get(self.normalized_level or "", "")
            text += (f" (size-normalized p99/p50 {self.normalized_p99_over_p50:.2f}"
                     + (f": {rest}" if rest else "") + ")")
        return text

    def oneoff_line(self) -> str | None:
        """One line tying the one-off calls mid-run to new sizes, when they come with them
        (``oneoff_new_sizes``); None otherwise."""
        what = SIZE_MEASURES.get(self.size_measure or "", ("", ""))[0]
        if not self.oneoff_new_sizes or not self.oneoff_n:
            return None
        held = ("all" if self.new_size_oneoff_n == self.oneoff_n
                else f"{self.new_size_oneoff_n} of the {self.oneoff_n}")
        return (f"{held} units with a one-off call are the first of their {what}: a cache "
                "(kernels for a shape, pinned or device memory) that grows with each new size")

    def copy_line(self) -> str:
        """One line: what the slow units' host-device copies are, against the median band."""
        extra = (self.slow_copy_bytes or 0.0) - (self.median_copy_bytes or 0.0)
        speed = (f" at {self.extra_copy_gbps:.3g} GB/s"
                 if self.extra_copy_gbps is not None else "")
        share = (f", {self.copies_explain:.0%} of their extra latency"
                 if self.copies_explain is not None else "")
        return (f"slow units move {_mb(self.slow_copy_bytes)} between host and device against "
                f"the median band's {_mb(self.median_copy_bytes)} ({_mb(extra)} more{speed}); "
                f"own copy time {_us(self.slow_copy_ns)} vs {_us(self.median_copy_ns)}{share}")

    def line(self) -> str:
        """One line: what the slow units' kernels are, against the median band."""
        if self.kernel_ratio is None or self.per_kernel_ratio is None:
            return "no own kernels to compare"
        rel = (f"; latency against kernels per unit: r = {self.r_kernels:.2f}, "
               f"{_us(self.slope_ns_per_kernel)} per kernel"
               if self.r_kernels is not None and self.slope_ns_per_kernel is not None else "")
        return (f"slow units launch {fmt_ratio(self.kernel_ratio)} the kernels of the median band "
                f"({self.slow_kernels:.4g} vs {self.median_kernels:.4g}) at "
                f"{fmt_ratio(self.per_kernel_ratio)} its time per kernel (own kernel time "
                f"{_us(self.slow_kernel_ns)} vs {_us(self.median_kernel_ns)}){rel}")


def _us(ns: float | None) -> str:
    ns = ns or 0.0
    return f"{ns / 1e6:.3g} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.3g} us"


def _mb(b: float | None) -> str:
    return f"{(b or 0.0) / 1e6:.3g} MB"


RESULT = WorkloadResult
#: how it runs (``engine.runner``): ranges' units
RUNS = Runs(needs=("ranges",))


def run(report: Report, *, settings: Settings | None = None,
        range_name: str | None = None) -> WorkloadResult | AnalysisResult:
    """Tell more work from slower work in the slowest units.

    Parameters
    ----------
    report : Report
        The opened trace.
    settings : Settings, optional
        ``tail_pct``, ``range_min_instances`` (the unit, as ranges chooses it),
        ``culprit_min_units`` (slowest units compared).
    range_name : str, optional
        The unit's NVTX range (default: chosen as ranges does).

    Returns
    -------
    WorkloadResult
        ``kind`` and the figures; tables ``bins`` (main), ``compare``, ``relation``. The
        ranges analysis' result when it has no units.
    """
    settings = settings or DEFAULTS
    ranges = report.analysis("ranges", range_name=range_name, settings=settings)
    if not isinstance(ranges, RangesResult) or not ranges.ok:
        return AnalysisResult(NAME, ranges.status, ranges.message)
    instances = ranges.counted_instances(
        ["instance", "start_ns", "end_ns", "duration_ns", "pid", "tid", "n_kernels",
         "own_kernel_total_ns", "own_copy_total_ns", "cuda_covered"])
    slow_n = slow_count(ranges.n_attributed, ranges.tail_n, settings)
    # every unit, the warm-up's too: a size the warm-up had is no new size
    table = ranges.tables["instances"]
    all_instances = table.select(
        [c for c in ("instance", "pid", "tid", "start_ns", "end_ns", "duration_ns",
                     "n_kernels", "own_kernel_total_ns", "cpu_outside_cuda_ns",
                     "cuda_covered", "oneoff", "counted") if c in table.column_names])
    if "oneoff" not in all_instances.column_names:
        all_instances = all_instances.append_column(
            "oneoff", pa.nulls(all_instances.num_rows, pa.bool_()))
    if "cpu_outside_cuda_ns" in all_instances.column_names:
        all_instances = all_instances.rename_columns(
            [("host_ns" if c == "cpu_outside_cuda_ns" else c)
             for c in all_instances.column_names])
    else:
        all_instances = all_instances.append_column(
            "host_ns", pa.nulls(all_instances.num_rows, pa.float64()))
    with registered(report, "_workload_instances", instances):
        compare = run_query(report, NAME, "compare", {"slow_n": slow_n, "scope": ranges.scope})
        relation = run_query(report, NAME, "relation")
        bins = run_query(report, NAME, "bins")
    every_size = SIZES(report, all_instances, ranges.scope)
    sizes = every_size.filter(every_size.column("counted")).drop_columns(["counted"])
    c = compare.to_pylist()[0]
    rel = relation.to_pylist()[0]
    figures = judge(c, settings)
    # a constant number of kernels per unit has no correlation (NaN): None
    figures.update({k: (None if rel[k] is None or math.isnan(rel[k]) else rel[k])
                    for k in ("r_kernels", "slope_ns_per_kernel", "r_kernel_ns")})
    figures.update(explained(c, figures["slope_ns_per_kernel"]))
    size_relation, bins_of_size, size_figures = size_relations(
        report, sizes, slow_n, every_size.filter(pc.invert(every_size.column("counted"))),
        settings)
    figures.update(size_figures)
    rest = figures.get("normalized_p99_over_p50")
    if rest is not None:
        figures["normalized_level"] = ("abnormal" if rest > settings.tail_ratio
                                       else "elevated" if rest > settings.elevated_ratio
                                       else "normal")
    tables = {"bins": bins, "compare": compare, "relation": relation, "sizes": sizes,
              "size_relation": size_relation, "size_bins": bins_of_size}
    result = WorkloadResult(status=OK, main="bins", tables=tables, **figures)
    size = result.size_line()
    return WorkloadResult(status=OK, main="bins", tables=tables,
                          message=f"{result.kind}: {result.line()}"
                          + (f"; {size}" if size else ""), **figures)


def sizes_method(report: Report, units: pa.Table, scope: str) -> pa.Table:
    """The ``sizes`` table of ``units`` (every unit, with the columns ``run`` selects), by
    the SQL method."""
    with registered(report, "_workload_instances", units):
        return run_query(report, NAME, "sizes", {"scope": scope})


def sizes_accelerated(report: Report, units: pa.Table, scope: str) -> pa.Table:
    """:func:`sizes_method`'s table, each call placed by a search among the sorted starts
    of its key's units (``np.searchsorted``) instead of DuckDB's ASOF join, which sorts
    every call (workload.sql, ``size_calls``, says what is read)."""
    covered = pc.invert(pc.fill_null(pc.equal(units.column("cuda_covered"), False), False))
    u = units.filter(covered)
    pid, pid_ok = _ints(u.column("pid"))
    if scope == "process":
        k, k_ok = np.zeros(len(pid), dtype=np.int64), np.ones(len(pid), dtype=bool)
    else:
        k, k_ok = _ints(u.column("tid"))
    start, start_ok = _ints(u.column("start_ns"))
    end, end_ok = _ints(u.column("end_ns"))
    instance = _ints(u.column("instance"))[0]
    keyed = np.flatnonzero(pid_ok & k_ok & start_ok)
    keys, code = np.unique(np.stack([pid[keyed], k[keyed]], axis=1), axis=0,
                           return_inverse=True)
    code = code.ravel()
    # the units of each key by start (ties: the later instance last, the one an equal
    # start finds)
    order = np.lexsort((instance[keyed], start[keyed], code))
    rows = keyed[order]
    u_code, u_start, u_instance = code[order], start[rows], instance[rows]
    u_end, u_end_ok = end[rows], end_ok[rows]
    heads = np.searchsorted(u_code, np.arange(len(keys) + 1))
    n = len(u_instance)

    def place(batches: Iterable[pa.RecordBatch]) -> tuple[np.ndarray, ...]:
        htod, dtoh = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        launches = np.zeros(n, dtype=np.int64)
        for batch in batches:
            c = _ints(batch.column("code"))[0]
            t = _ints(batch.column("call_ns"))[0]
            # the unit of each call: the last of its key's to start at or before it
            j = np.empty(len(c), dtype=np.int64)
            for kc, at in intervals.by_code(c, len(keys)):
                lo, hi = heads[kc], heads[kc + 1]
                j[at] = np.searchsorted(u_start[lo:hi], t[at], side="right") + (lo - 1)
                j[at[j[at] < lo]] = -1
            inside = j >= 0
            inside[inside] = u_end_ok[j[inside]] & (t[inside] <= u_end[j[inside]])
            placed = j[inside]
            launch = batch.column("launch").to_numpy(zero_copy_only=False)[inside]
            launches += np.bincount(placed[launch.astype(bool)], minlength=n)
            for column, total in (("htod_bytes", htod), ("dtoh_bytes", dtoh)):
                b, b_ok = _ints(batch.column(column))
                b_ok &= inside
                np.add.at(total, j[b_ok], b[b_ok])
        return htod, dtoh, launches

    # the calls grouped per (process, correlation id) and placed by a compiled loop as they
    # stream, where they come in runs of one id; else grouped by DuckDB (the query
    # size_calls) and placed in numpy
    try:
        htod, dtoh, launches = _placed_in_order(report, scope, keys, heads, u_start, u_end,
                                                u_end_ok, n)
    except _NotRuns:
        key_table = pa.table({"pid": keys[:, 0], "k": keys[:, 1],
                              "code": np.arange(len(keys), dtype=np.int64)})
        with registered(report, "_workload_keys", key_table):
            sql = load_sql(NAME)["size_calls"]
            htod, dtoh, launches = place(
                report.sql(sql, bind(sql, {"scope": scope})).to_arrow_reader(1 << 20))
    work = pa.table({"instance": u_instance, "htod_bytes": htod, "dtoh_bytes": dtoh,
                     "launch_calls": launches})
    with registered(report, "_workload_instances", units), \
            registered(report, "_workload_unit_work", work):
        return run_query(report, NAME, "sizes_of")


class _NotRuns(Exception):
    """The calls of one (process, correlation id) do not come together (or a call lacks
    its thread or id, or the calls come from more processes than the pass keeps)."""


#: the most processes ``_placed_in_order`` follows (its table is at most half full)
_PROCESS_SLOTS = 1 << 12


def _placed_in_order(report: Report, scope: str, keys: np.ndarray, heads: np.ndarray,
                     u_start: np.ndarray, u_end: np.ndarray, u_end_ok: np.ndarray,
                     n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each unit's copied bytes (HtoD, DtoH) and launch calls, as the query ``size_calls``
    and the placement of ``sizes_accelerated`` give them, from the launch and copy calls
    in their stored order (start order, so correlation order in each process): the calls
    of one (process, correlation id) are one run of rows, grouped and placed as they
    stream by ``compiled.place_calls``. ``keys``: the units' (pid, k), sorted; key k's
    units start at ``u_start[heads[k]:heads[k + 1]]``, sorted. Raises ``_NotRuns``
    (perhaps after some batches) where a key would make two runs (ids not rising in a
    process) or a call lacks its thread or id: the caller starts over on DuckDB's
    aggregate."""
    copies = run_query(report, NAME, "size_copies")
    cp_gpid = _ints(copies.column("global_pid"))[0]
    cp_corr = _ints(copies.column("correlation_id"))[0]
    order = np.lexsort((cp_corr, cp_gpid))  # by process, then id
    cp_gpid, cp_corr = cp_gpid[order], cp_corr[order]
    (cp_htod, cp_htod_ok), (cp_dtoh, cp_dtoh_ok) = (
        tuple(a[order] for a in _ints(copies.column(c))) for c in ("htod_bytes", "dtoh_bytes"))
    key_pid = np.ascontiguousarray(keys[:, 0], dtype=np.int64)
    key_k = np.ascontiguousarray(keys[:, 1], dtype=np.int64)
    htod, dtoh = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    launches = np.zeros(n, dtype=np.int64)
    run = np.zeros(compiled.RUN_STATE, dtype=np.int64)
    u_last = np.zeros(len(keys), dtype=np.int64)
    procs = np.zeros(_PROCESS_SLOTS, dtype=np.int64)
    proc_last = np.zeros(_PROCESS_SLOTS, dtype=np.int64)
    proc_used = np.zeros(_PROCESS_SLOTS + 1, dtype=np.int64)  # the last slot: how many used

    def placed(gtid: np.ndarray, corr: np.ndarray, start: np.ndarray, timed: np.ndarray,
               launch: np.ndarray, last: bool) -> None:
        status = compiled.place_calls(
            gtid, corr, start, timed, launch, last, run, procs, proc_last, proc_used, key_pid,
            key_k, heads, u_start, u_last, u_end, u_end_ok, cp_gpid, cp_corr, cp_htod, cp_htod_ok,
            cp_dtoh, cp_dtoh_ok, scope == "process", htod, dtoh, launches)
        if status != compiled.PLACED:
            raise _NotRuns

    with stored_order(report, load_sql(NAME)["size_call_rows"]) as reader:
        for batch in reader:
            if batch.column("global_tid").null_count or batch.column("correlation_id").null_count:
                raise _NotRuns
            start, timed = _ints(batch.column("start_ns"))
            launch = batch.column("launch").fill_null(False).to_numpy(zero_copy_only=False)
            placed(_ints(batch.column("global_tid"))[0],
                   _ints(batch.column("correlation_id"))[0], start, timed, launch, False)
    none = np.zeros(0, dtype=np.int64)
    placed(none, none, none, none.astype(bool), none.astype(bool), True)  # the last run
    return htod, dtoh, launches


def _ints(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as int64 values (0 where NULL) and where it is set."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count == 0:
        return column.cast(pa.int64()).to_numpy(zero_copy_only=False), \
            np.ones(len(column), dtype=bool)
    return (column.fill_null(0).cast(pa.int64()).to_numpy(zero_copy_only=False),
            column.is_valid().to_numpy(zero_copy_only=False))


#: a measure the slow units hold this many times more of is named among what is bigger
BIGGER = 1.5
#: the fewest units in a bin of sizes of the monotone fit (at least 1/SIZE_BINS of the units)
SIZE_BIN_UNITS, SIZE_BINS = 5, 50


def size_bins(report: Report, sizes: pa.Table, fitted: dict[str, np.ndarray]) -> pa.Table:
    """Each size measure's bins of consecutive sizes with their median size and median
    latency (query ``size_bins``) over the units ``fitted[measure]`` marks: at least
    ``SIZE_BIN_UNITS`` units a bin, at most ``SIZE_BINS`` bins."""
    d = sizes.column("duration_ns").cast(pa.float64())
    parts = [pa.table({"measure": pa.array([name] * int(mask.sum()), pa.string()),
                       "instance": sizes.column("instance").filter(mask),
                       "x": sizes.column(name).cast(pa.float64()).fill_null(0.0).filter(mask),
                       "duration_ns": d.filter(mask)})
             for name, mask in fitted.items()]
    values = pa.concat_tables(parts) if parts else pa.table(
        {"measure": pa.array([], pa.string()), "instance": pa.array([], pa.int64()),
         "x": pa.array([], pa.float64()), "duration_ns": pa.array([], pa.float64())})
    n = max((int(m.sum()) for m in fitted.values()), default=0)
    with registered(report, "_workload_size_values", values):
        return run_query(report, NAME, "size_bins",
                         {"min_units": max(SIZE_BIN_UNITS, -(-n // SIZE_BINS))})


def expected_latency(bins: pa.Table, measure: str, x: np.ndarray) -> np.ndarray | None:
    """Latency expected at each size ``x``: the bins' median latencies made non-decreasing
    in size (isotonic regression weighted by units), interpolated linearly between the
    bins' median sizes and flat beyond them. None with fewer than two bins (the size does
    not vary enough to fit)."""
    rows = [r for r in bins.to_pylist() if r["measure"] == measure]
    if len(rows) < 2:
        return None
    fitted = isotonic([r["p50_ns"] for r in rows], [float(r["units"]) for r in rows])
    return np.interp(x, [r["x_median"] for r in rows], fitted)


def new_size_mask(sizes: pa.Table, measure: str, seen: set[float]) -> np.ndarray:
    """The units whose ``measure`` (its exact value) no earlier unit had, nor the warm-up
    (whose values are ``seen``)."""
    x = _column(sizes, measure)
    order = np.argsort(_column(sizes, "start_ns"), kind="stable")
    new = np.zeros(x.size, dtype=bool)
    _, first = np.unique(x[order], return_index=True)
    new[order[first]] = True
    return new & ~np.isin(x, list(seen))


def _column(table: pa.Table, name: str) -> np.ndarray:
    return np.nan_to_num(np.asarray(
        table.column(name).cast(pa.float64()).to_numpy(zero_copy_only=False), dtype=float))


def size_relations(report: Report, sizes: pa.Table, slow_n: int,
                   warmup: pa.Table | None = None, settings: Settings = DEFAULTS
                   ) -> tuple[pa.Table, pa.Table, dict]:
    """Latency against every measure of size (the ``size_relation`` table), the bins of the
    expected latency (``size_bins``), and the figures of the work measure that explains
    most of the slow units' extra latency.

    The slowest ``slow_n`` units and the median band (45th-55th percentile, linear, as
    ``compare``) give each measure's means; over every unit, its Spearman rank correlation
    with latency and the least-squares slope of latency on it. How much of the slow units'
    extra latency (mean minus the band's) a measure explains is a size-matched comparison:
    the latency expected at the slow units' sizes less that expected at the band's sizes
    (:func:`expected_latency`, a monotone fit over bins' medians that a few stalled units
    cannot move), over the extra latency. The fit is over the units of a size seen before
    (:func:`new_size_mask`; the ``warmup`` units' sizes count as seen) when they are at
    least half the units, so that a cost paid once per new size is not read as a cost of
    size. The size measure is the work measure (bytes, kernels, launch calls) with
    rho >= ``size_min_rho`` that explains the most; latency over the latency expected at each
    unit's size gives ``normalized_p99_over_p50``, and the units of a new size are
    compared with it (:func:`new_sizes`).
    """
    d = _column(sizes, "duration_ns")
    rows: list[dict] = []
    figures: dict = {}
    measures = {name: _column(sizes, name) for name in SIZE_MEASURES
                if sizes.column(name).null_count < sizes.num_rows}
    every = np.ones(d.size, dtype=bool)
    bins = size_bins(report, sizes, {name: every for name, x in measures.items()
                                     if np.ptp(x) > 0})
    if d.size < 3:
        return pa.Table.from_pylist(rows, schema=_SIZE_SCHEMA), bins, figures
    order = np.argsort(-d, kind="stable")
    slow = np.zeros(d.size, dtype=bool)
    slow[order[:slow_n]] = True
    lo, hi = np.quantile(d, [0.45, 0.55])
    band = (d >= lo) & (d <= hi)
    # no unit between the two quantiles (durations in two clusters): no median band to
    # compare with, as compare's SQL finds none
    banded = bool(band.any())
    extra = float(d[slow].mean() - d[band].mean()) if banded else None
    best: tuple[float, str, np.ndarray] | None = None
    for name, x in measures.items():
        what, side = SIZE_MEASURES[name]
        s_mean = float(x[slow].mean())
        m_mean = float(x[band].mean()) if banded else None
        varies = np.ptp(x) > 0
        rho = spearman_rho(x, d) if varies else None
        slope = float(np.polyfit(x, d, 1)[0]) if varies else None
        expected = expected_latency(bins, name, x) if varies else None
        explains = (float(max(0.0, min(1.0, (expected[slow].mean()
                                             - expected[band].mean()) / extra)))
                    if expected is not None and extra is not None and extra > 0 else None)
        rows.append({"measure": name, "what": what, "side": side, "slow_mean": s_mean,
                     "median_mean": m_mean,
                     "ratio": s_mean / m_mean if m_mean is not None and m_mean > 0 else None,
                     "rho": rho, "slope": slope, "explains": explains,
                     "follows": rho is not None and rho >= settings.size_min_rho})
        if side == "work" and rho is not None and rho >= settings.size_min_rho \
                and explains is not None \
                and (best is None or explains > best[0]):
            best = (explains, name, expected)
    if best is not None:
        explains, name, expected = best
        row = next(r for r in rows if r["measure"] == name)
        rest = d / np.maximum(expected, 1.0)
        p50, p99 = np.percentile(rest, [50, 99])
        figures.update(size_measure=name, size_rho=row["rho"], size_ratio=row["ratio"],
                       size_explains=explains,
                       normalized_p99_over_p50=float(p99 / p50) if p50 > 0 else None)
        new = new_size_mask(sizes, name, set(
            _column(warmup, name).tolist() if warmup is not None else []))
        seen_bins = size_bins(report, sizes, {name: ~new}) if (~new).sum() >= 2 else None
        seen_fit = (expected_latency(seen_bins, name, measures[name])
                    if seen_bins is not None else None)
        figures.update(new_sizes(sizes, measures[name], new, seen_fit, d, slow))
        figures["new_size_tail"] = new_size_judged(figures, d.size, slow_n, settings)
        if figures["oneoff_n"]:
            share = figures["new_size_oneoff_n"] / figures["oneoff_n"]
            figures["oneoff_new_sizes"] = bool(
                share >= settings.new_size_share
                and share >= settings.new_size_lift * figures["new_size_n"] / d.size)
    return pa.Table.from_pylist(rows, schema=_SIZE_SCHEMA), bins, figures


def new_sizes(sizes: pa.Table, x: np.ndarray, new: np.ndarray, seen_fit: np.ndarray | None,
              d: np.ndarray, slow: np.ndarray) -> dict:
    """The units of a new size (``new``): how many, how many of the slow units, their
    median latency and that of the units of a size seen before, how many hold a one-off
    call (ranges' ``oneoff``: a module load, an allocator growing), and, size-matched, the
    median latency over that expected at their size (``seen_fit``: the fit over the units
    of a size seen before) of the new units within the sizes seen before (the fit does not
    reach beyond them) over that of the others. A cost paid once per new size (kernels
    loaded or tuned for a new shape, a caching allocator growing) makes them the slow
    ones."""
    oneoff = np.asarray(sizes.column("oneoff").fill_null(False).to_numpy(
        zero_copy_only=False), dtype=bool)
    out = {"new_size_n": int(new.sum()), "slow_new_size_n": int((new & slow).sum()),
           "new_size_oneoff_n": int((new & oneoff).sum()), "oneoff_n": int(oneoff.sum())}
    if not new.any() or new.all():
        return out
    out.update(new_size_p50_ns=float(np.median(d[new])),
               seen_size_p50_ns=float(np.median(d[~new])))
    inside = new & (x >= x[~new].min()) & (x <= x[~new].max())
    if seen_fit is not None and inside.sum() >= NEW_SIZE_MIN_UNITS:
        rest = d / np.maximum(seen_fit, 1.0)
        out["new_size_ratio"] = float(np.median(rest[inside]) / np.median(rest[~new]))
    return out


#: the fewest units of a new size within the sizes seen before that judge new sizes' cost
NEW_SIZE_MIN_UNITS = 3


_SIZE_SCHEMA = pa.schema([("measure", pa.string()), ("what", pa.string()),
                          ("side", pa.string()), ("slow_mean", pa.float64()),
                          ("median_mean", pa.float64()), ("ratio", pa.float64()),
                          ("rho", pa.float64()), ("slope", pa.float64()),
                          ("explains", pa.float64()), ("follows", pa.bool_())])


def explained(c: dict, slope_ns_per_kernel: float | None) -> dict:
    """How much of the slow units' extra latency their extra work explains: extra kernels at
    the latency-per-kernel slope, and extra own copy time (with the extra bytes' speed)."""
    out = {k: c[k] for k in ("slow_copy_bytes", "median_copy_bytes", "slow_copy_ns",
                             "median_copy_ns")}
    d_s, d_m = c["slow_duration_ns"], c["median_duration_ns"]
    if d_s is None or d_m is None or d_s <= d_m:
        return out
    extra = d_s - d_m
    out["extra_latency_ns"] = extra
    k_s, k_m = c["slow_kernels"], c["median_kernels"]
    if slope_ns_per_kernel is not None and k_s is not None and k_m is not None:
        out["kernels_explain"] = max(0.0, min(1.0, slope_ns_per_kernel * (k_s - k_m) / extra))
    t_s, t_m = c["slow_copy_ns"], c["median_copy_ns"]
    if t_s is not None and t_m is not None:
        out["copies_explain"] = max(0.0, min(1.0, (t_s - t_m) / extra))
        b_s, b_m = c["slow_copy_bytes"] or 0.0, c["median_copy_bytes"] or 0.0
        if t_s > t_m and b_s > b_m:
            out["extra_copy_gbps"] = (b_s - b_m) / (t_s - t_m)
    return out


def judge(c: dict, settings: Settings) -> dict:
    """The figures and ``kind`` from the slow and median groups' means (``compare``)."""
    out: dict = {"slow_n": c["slow_n"] or 0, "median_n": c["median_n"] or 0}
    k_s, k_m = c["slow_kernels"], c["median_kernels"]
    t_s, t_m = c["slow_kernel_ns"], c["median_kernel_ns"]
    p_s, p_m = c["slow_per_kernel_ns"], c["median_per_kernel_ns"]
    c_s, c_m = c["slow_collective_ns"], c["median_collective_ns"]
    out.update(slow_kernels=k_s, median_kernels=k_m, slow_kernel_ns=t_s, median_kernel_ns=t_m,
               slow_collective_ns=c_s, median_collective_ns=c_m)
    if t_s is not None and t_m is not None and t_s > t_m and c_s is not None \
            and c_m is not None:
        out["collective_share"] = max(0.0, min(1.0, (c_s - c_m) / (t_s - t_m)))
    if not (k_s and k_m and p_s and p_m and t_m):
        return out
    out["kernel_ratio"] = k_s / k_m
    out["per_kernel_ratio"] = p_s / p_m
    out["work_ratio"] = k_s * p_m / t_m
    growth = t_s - t_m
    if growth <= 0:
        return out
    more = (k_s - k_m) * p_m
    share = max(0.0, min(1.0, more / growth))
    out["more_work_share"] = share
    out["kind"] = "more_work" if share >= 0.5 else "slower_work"
    return out


def is_workload_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A workload-size tail: the growth is more work (``more_work``), their kernels do not
    run ``slow_ratio`` times slower, and the work is large or explains the tail: the slow
    units launch at least ``workload_ratio`` times the median band's kernel time at its
    speed, or their extra kernels explain at least ``work_explains`` of their extra latency.
    The second reads a dose of extra work that the slow set's mean dilutes: a few natural
    hiccups among the slowest units lower the mean work, not the slope of latency on
    kernels that the extra units set (issue 35)."""
    return (w.kind == "more_work" and (w.per_kernel_ratio or 0) < settings.slow_ratio
            and ((w.work_ratio or 0) >= settings.workload_ratio
                 or (w.kernels_explain or 0) >= settings.work_explains))


def is_size_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A size tail: the slow units are simply bigger, or the first of their size. Latency
    follows a work measure (rank correlation at least ``size_min_rho``), and either the slow
    units hold at least ``workload_ratio`` times the median band's of it and the latency
    expected at their sizes explains at least ``work_explains`` of their extra latency, or
    they are the first of their size (:func:`is_new_size_tail`); whichever side absorbs the
    time."""
    if w.size_measure is None or (w.size_rho or 0) < settings.size_min_rho:
        return False
    return ((w.size_ratio or 0) >= settings.workload_ratio
            and (w.size_explains or 0) >= settings.work_explains) or is_new_size_tail(w)


def new_size_judged(figures: dict, n: int, slow_n: int, settings: Settings) -> bool:
    """A new-size tail: the slow units are the first of their size. At least
    ``new_size_share`` of the slow units hold a value of the size measure no earlier unit
    had, ``new_size_lift`` times the share of all ``n`` units that do (new sizes are no
    accident among the slow units), and the units of a new size take, at their size, a
    median ``new_size_min_ratio`` times the latency expected (the fit over units of a size seen
    before) that the others take: a cost paid once per size (kernels loaded or tuned for a
    new shape, a caching allocator growing), which a size-matched fit cannot show when
    most big sizes come once."""
    slow = min(slow_n, n)
    if not n or not slow or figures.get("new_size_n") is None:
        return False
    slow_share = figures["slow_new_size_n"] / slow
    return (slow_share >= settings.new_size_share
            and slow_share >= settings.new_size_lift * figures["new_size_n"] / n
            and (figures.get("new_size_ratio") or 0) >= settings.new_size_min_ratio)


def is_new_size_tail(w: WorkloadResult) -> bool:
    """The slow units are the first of their size (``new_size_tail``, judged by
    :func:`new_size_judged` with the settings the analysis ran with)."""
    return bool(w.new_size_tail)


def is_transfer_volume_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A transfer-volume tail: the slow units move at least ``workload_ratio`` times the
    median band's host-device bytes, and their extra own copy time is at least
    ``work_explains`` of their extra latency (weights or inputs loaded on some units)."""
    slow, median = w.slow_copy_bytes or 0.0, w.median_copy_bytes or 0.0
    return (slow > 0 and slow >= settings.workload_ratio * median
            and (w.copies_explain or 0.0) >= settings.work_explains)


def _call_rows(report: Report) -> int | None:
    """The API calls' rows (0 where none were captured)."""
    return report.probe["api_calls"].source_rows if report.probe.present("api_calls") else 0


#: the sizes of every unit by the SQL method or the pass, as the engine chooses for the
#: API calls' rows
SIZES = register(NAME, "sizes", method=sizes_method, accelerated=sizes_accelerated,
                 rows=_call_rows)
