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
the time goes); for each, the rank correlation (Spearman) and least-squares slope of
latency on it, and the slow units' mean over the median band's. A size tail
(:func:`is_size_tail`) is slow units that are simply bigger: a work measure that latency
follows (rank correlation at least ``SIZE_RHO``), ``workload_ratio`` times the median
band's in the slow units, whose slope explains at least ``work_explains`` of their extra
latency, whichever side absorbs the time. Latency less that share
(``normalized_p99_over_p50``) is what the rest of the tail is judged on.
Definitions: docs/analyses/workload.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
from scipy import stats as sps

from ..engine.steps import registered
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, records, run_query
from .interference import slow_count
from .ranges import SETTINGS as RANGES_SETTINGS
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..report import Report

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
#: the rank correlation of latency with a work measure from which latency follows size
SIZE_RHO = 0.5
#: the settings this analysis reads, with those of the ranges analysis whose units it
#: compares (its results are cached per their values)
SETTINGS = (*RANGES_SETTINGS, "culprit_min_units")
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
    median_mean: float  #: its mean over the median band
    ratio: float | None  #: slow_mean / median_mean (None when the median's is 0)
    rho: float | None  #: Spearman rank correlation of latency with it, over every unit
    slope: float | None  #: least-squares latency growth per unit of it, ns
    explains: float | None  #: slope x (slow_mean - median_mean) over the slow units'
    #: extra latency, clipped to 0-1

    def amount(self, x: float) -> str:
        if self.measure.endswith("bytes"):
            return _mb(x)
        if self.measure.endswith("_ns"):
            return _us(x)
        return f"{x:.4g}"


@dataclass(frozen=True, kw_only=True)
class WorkloadResult(AnalysisResult):
    """More work or slower work in the slowest units, and latency against work per unit.

    Tables: ``bins`` (main), ``compare``, ``relation``.
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
    slow_copy_ns: float | None = figure("own copy time per slow unit (mean), ns")
    median_copy_ns: float | None = figure("own copy time per median-band unit (mean), ns")
    extra_copy_gbps: float | None = figure("the slow units' extra bytes over their extra own "
                                           "copy time (GB/s): the speed of the extra copies")
    copies_explain: float | None = figure(
        "share of extra_latency_ns that the slow units' extra own copy time is (fraction, 0-1)")
    size_measure: str | None = figure(
        "the work measure (sizes column) that explains most of the slow units' extra latency, "
        "among those latency follows (rank correlation >= 0.5) and the slow units hold "
        "workload_ratio times more of")
    size_rho: float | None = figure("rank correlation of latency with size_measure over "
                                    "every unit (Spearman rho)")
    size_ratio: float | None = figure("size_measure in the slow units over the median band's "
                                      "(ratio)")
    size_explains: float | None = figure(
        "share of extra_latency_ns that size_measure explains at its slope (fraction, 0-1)")
    normalized_p99_over_p50: float | None = figure(
        "P99/P50 of latency less size_measure's share (slope x its excess over the median "
        "unit's): the tail that size does not explain (ratio)")
    normalized_level: str | None = figure(
        "that tail's level against tail_ratio and elevated_ratio: normal, elevated or "
        "abnormal (what is left to judge once size is accounted for)")

    def bins(self) -> list[WorkBin]:
        """The ``bins`` table as records (empty without it)."""
        table = self.tables.get("bins")
        return records(table, WorkBin) if table is not None else []

    def size_relation(self) -> list[SizeRelation]:
        """The ``size_relation`` table as records (empty without it)."""
        table = self.tables.get("size_relation")
        return records(table, SizeRelation) if table is not None else []

    def size_line(self) -> str | None:
        """One line: how much bigger the slow units are on every side, and how closely
        latency follows size; None without a size measure."""
        rows = {r.measure: r for r in self.size_relation()}
        best = rows.get(self.size_measure or "")
        if best is None:
            return None
        bigger = [r for r in rows.values() if r.ratio is not None
                  and r.ratio >= BIGGER and (r.rho or 0) >= SIZE_RHO]
        bigger.sort(key=lambda r: (r.side != "work", -(r.ratio or 0)))
        parts = [f"{r.ratio:.2g}x the {r.what} ({r.amount(r.slow_mean)} vs "
                 f"{r.amount(r.median_mean)})" for r in bigger]
        text = (f"slow units are bigger: {', '.join(parts)}; latency follows "
                f"{best.what}, rank correlation {best.rho:.2f}, which explains "
                f"{self.size_explains:.0%} of their extra latency")
        if self.normalized_p99_over_p50 is not None:
            rest = {"normal": "tight once size is accounted for",
                    "elevated": "still elevated beyond size",
                    "abnormal": "still abnormal beyond size: something besides size slows "
                                "some units"}.get(self.normalized_level or "", "")
            text += (f" (size-normalized p99/p50 {self.normalized_p99_over_p50:.2f}"
                     + (f": {rest}" if rest else "") + ")")
        return text

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
        return (f"slow units launch {self.kernel_ratio:.2g}x the kernels of the median band "
                f"({self.slow_kernels:.4g} vs {self.median_kernels:.4g}) at "
                f"{self.per_kernel_ratio:.2g}x its time per kernel (own kernel time "
                f"{_us(self.slow_kernel_ns)} vs {_us(self.median_kernel_ns)}){rel}")


def _us(ns: float | None) -> str:
    ns = ns or 0.0
    return f"{ns / 1e6:.3g} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.3g} us"


def _mb(b: float | None) -> str:
    return f"{(b or 0.0) / 1e6:.3g} MB"


RESULT = WorkloadResult


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
    all_instances = ranges.counted_instances(
        [c for c in ("instance", "pid", "tid", "start_ns", "end_ns", "duration_ns",
                     "n_kernels", "own_kernel_total_ns", "cpu_outside_cuda_ns",
                     "cuda_covered") if c in ranges.tables["instances"].column_names])
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
    with registered(report, "_workload_instances", all_instances):
        sizes = run_query(report, NAME, "sizes", {"scope": ranges.scope})
    c = compare.to_pylist()[0]
    rel = relation.to_pylist()[0]
    figures = judge(c, settings)
    # a constant number of kernels per unit has no correlation (NaN): None
    figures.update({k: (None if rel[k] is None or math.isnan(rel[k]) else rel[k])
                    for k in ("r_kernels", "slope_ns_per_kernel", "r_kernel_ns")})
    figures.update(explained(c, figures["slope_ns_per_kernel"]))
    size_relation, size_figures = size_relations(sizes, slow_n)
    figures.update(size_figures)
    rest = figures.get("normalized_p99_over_p50")
    if rest is not None:
        figures["normalized_level"] = ("abnormal" if rest > settings.tail_ratio
                                       else "elevated" if rest > settings.elevated_ratio
                                       else "normal")
    tables = {"bins": bins, "compare": compare, "relation": relation, "sizes": sizes,
              "size_relation": size_relation}
    result = WorkloadResult(status=OK, main="bins", tables=tables, **figures)
    size = result.size_line()
    return WorkloadResult(status=OK, main="bins", tables=tables,
                          message=f"{result.kind}: {result.line()}"
                          + (f"; {size}" if size else ""), **figures)


#: a measure the slow units hold this many times more of is named among what is bigger
BIGGER = 1.5


def size_relations(sizes: pa.Table, slow_n: int) -> tuple[pa.Table, dict]:
    """Latency against every measure of size (the ``size_relation`` table), and the figures
    of the work measure that explains most of the slow units' extra latency.

    The slowest ``slow_n`` units and the median band (45th-55th percentile, linear, as
    ``compare``) give each measure's means; over every unit, its Spearman rank correlation
    with latency and the least-squares slope of latency on it. A measure explains
    slope x (slow mean - median mean) of the slow units' extra latency (mean minus the
    band's). The size measure is the work measure (bytes, kernels, launch calls) with
    rho >= ``SIZE_RHO`` that explains the most; latency less its share, slope x (x - the
    median unit's x), gives ``normalized_p99_over_p50``.
    """
    d = np.asarray(sizes.column("duration_ns").to_numpy(zero_copy_only=False), dtype=float)
    rows: list[dict] = []
    figures: dict = {}
    if d.size < 3:
        return pa.Table.from_pylist(rows, schema=_SIZE_SCHEMA), figures
    order = np.argsort(-d, kind="stable")
    slow = np.zeros(d.size, dtype=bool)
    slow[order[:slow_n]] = True
    lo, hi = np.quantile(d, [0.45, 0.55])
    band = (d >= lo) & (d <= hi)
    extra = d[slow].mean() - d[band].mean()
    best: tuple[float, str, float, np.ndarray] | None = None
    for name, (what, side) in SIZE_MEASURES.items():
        col = sizes.column(name)
        if col.null_count == len(col):
            continue
        x = np.asarray(col.to_numpy(zero_copy_only=False), dtype=float)
        x = np.nan_to_num(x)
        s_mean, m_mean = float(x[slow].mean()), float(x[band].mean())
        varies = np.ptp(x) > 0
        rho = float(sps.spearmanr(x, d).statistic) if varies else None
        slope = float(np.polyfit(x, d, 1)[0]) if varies else None
        explains = (max(0.0, min(1.0, slope * (s_mean - m_mean) / extra))
                    if slope is not None and extra > 0 else None)
        rows.append({"measure": name, "what": what, "side": side, "slow_mean": s_mean,
                     "median_mean": m_mean,
                     "ratio": s_mean / m_mean if m_mean > 0 else None,
                     "rho": rho, "slope": slope, "explains": explains})
        if side == "work" and rho is not None and rho >= SIZE_RHO and explains is not None \
                and (best is None or explains > best[0]):
            best = (explains, name, slope, x)
    if best is not None:
        explains, name, slope, x = best
        row = next(r for r in rows if r["measure"] == name)
        rest = d - slope * (x - np.median(x))
        p50, p99 = np.percentile(rest, [50, 99])
        figures.update(size_measure=name, size_rho=row["rho"], size_ratio=row["ratio"],
                       size_explains=explains,
                       normalized_p99_over_p50=float(p99 / p50) if p50 > 0 else None)
    return pa.Table.from_pylist(rows, schema=_SIZE_SCHEMA), figures


_SIZE_SCHEMA = pa.schema([("measure", pa.string()), ("what", pa.string()),
                          ("side", pa.string()), ("slow_mean", pa.float64()),
                          ("median_mean", pa.float64()), ("ratio", pa.float64()),
                          ("rho", pa.float64()), ("slope", pa.float64()),
                          ("explains", pa.float64())])


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
    out.update(slow_kernels=k_s, median_kernels=k_m, slow_kernel_ns=t_s, median_kernel_ns=t_m)
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
    """A workload-size tail: the growth is more work (``more_work``), the slow units launch
    at least ``workload_ratio`` times the median band's kernel time at its speed, and their
    kernels do not run ``slow_ratio`` times slower."""
    return (w.kind == "more_work" and (w.work_ratio or 0) >= settings.workload_ratio
            and (w.per_kernel_ratio or 0) < settings.slow_ratio)


def is_size_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A size tail: the slow units are simply bigger. Latency follows a work measure (rank
    correlation at least ``SIZE_RHO``), the slow units hold at least ``workload_ratio``
    times the median band's of it, and its slope explains at least ``work_explains`` of
    their extra latency, whichever side absorbs the time."""
    return (w.size_measure is not None and (w.size_rho or 0) >= SIZE_RHO
            and (w.size_ratio or 0) >= settings.workload_ratio
            and (w.size_explains or 0) >= settings.work_explains)


def is_transfer_volume_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A transfer-volume tail: the slow units move at least ``workload_ratio`` times the
    median band's host-device bytes, and their extra own copy time is at least
    ``work_explains`` of their extra latency (weights or inputs loaded on some units)."""
    slow, median = w.slow_copy_bytes or 0.0, w.median_copy_bytes or 0.0
    return (slow > 0 and slow >= settings.workload_ratio * median
            and (w.copies_explain or 0.0) >= settings.work_explains)
