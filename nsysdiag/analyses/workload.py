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
Definitions: docs/analyses/workload.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..engine.steps import registered
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, records, run_query
from .interference import slow_count
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..report import Report

NAME = "workload"
#: the settings this analysis reads (its results are cached per their values)
SETTINGS = ("tail_pct", "range_min_instances", "culprit_min_units")
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

    def bins(self) -> list[WorkBin]:
        """The ``bins`` table as records (empty without it)."""
        table = self.tables.get("bins")
        return records(table, WorkBin) if table is not None else []

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
    with registered(report, "_workload_instances", instances):
        compare = run_query(report, NAME, "compare", {"slow_n": slow_n, "scope": ranges.scope})
        relation = run_query(report, NAME, "relation")
        bins = run_query(report, NAME, "bins")
    c = compare.to_pylist()[0]
    rel = relation.to_pylist()[0]
    figures = judge(c, settings)
    # a constant number of kernels per unit has no correlation (NaN): None
    figures.update({k: (None if rel[k] is None or math.isnan(rel[k]) else rel[k])
                    for k in ("r_kernels", "slope_ns_per_kernel", "r_kernel_ns")})
    figures.update(explained(c, figures["slope_ns_per_kernel"]))
    result = WorkloadResult(status=OK, main="bins",
                            tables={"bins": bins, "compare": compare, "relation": relation},
                            **figures)
    return WorkloadResult(status=OK, main="bins", tables=result.tables,
                          message=f"{result.kind}: {result.line()}", **figures)


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


def is_transfer_volume_tail(w: WorkloadResult, settings: Settings) -> bool:
    """A transfer-volume tail: the slow units move at least ``workload_ratio`` times the
    median band's host-device bytes, and their extra own copy time is at least
    ``work_explains`` of their extra latency (weights or inputs loaded on some units)."""
    slow, median = w.slow_copy_bytes or 0.0, w.median_copy_bytes or 0.0
    return (slow > 0 and slow >= settings.workload_ratio * median
            and (w.copies_explain or 0.0) >= settings.work_explains)
