"""Kernel duration jitter: which kernels sometimes run much slower than their median.

Check D1 of the method. Kernels are told apart by name and launch configuration (grid
and block, when the export records them): one name run at two grids is two kernels whose
durations differ by design, not jitter. A kernel whose p99 is far above its median, or a
sizeable share of launches beyond 1.5x the median, means GPU execution time is
intermittently inflated (contention with other GPU work, clocks, memory behaviour).
``concurrency`` gives the share of kernel time during which two or more kernels overlapped
on a device (another stream or process competing for SMs), as measured by the overlap
analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from ..engine.runner import Runs
from ..engine.steps import temp_views
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

#: the figures of the worst kernel and the time-weighted ones: reported when a kernel was
#: examined
_PER_KERNEL = ("worst_kernel", "worst_p99_over_p50", "worst_slow_pct", "time_weighted_slow_pct",
               "time_weighted_p99_over_p50")


@dataclass(frozen=True)
class KernelJitter:
    """One row of the ``per_kernel`` table: the spread of one kernel name's durations."""

    name: str  #: kernel name
    instances: int  #: executions
    total_ns: int  #: GPU time, ns
    p50_ns: float | None  #: P50 duration, ns
    p90_ns: float | None  #: P90 duration, ns
    p99_ns: float | None  #: P99 duration, ns
    max_ns: int | None  #: longest, ns
    p99_over_p50: float | None  #: P99/P50 (ratio)
    slow_pct: float | None  #: launches over slow_ratio times the median, %
    cv: float | None  #: coefficient of variation (stddev / mean)


@dataclass(frozen=True, kw_only=True)
class JitterResult(AnalysisResult):
    """Kernel duration jitter of the kernel names with the most GPU time (check D1). The
    worst kernel's and the time-weighted figures are reported only when a kernel was
    examined.

    Tables: ``per_kernel`` (main), ``concurrency``.
    """

    analysis: str = field(default="jitter", init=False)
    kernels_examined: int = figure("kernel names examined", 0)
    worst_kernel: str | None = figure("the name with the largest P99/P50 of its durations")
    worst_p99_over_p50: float | None = figure("its P99/P50 (ratio)")
    worst_slow_pct: float | None = figure("its share of slow launches (over slow_ratio times "
                                          "its median), %")
    time_weighted_slow_pct: float | None = figure("share of slow launches, names weighted by "
                                                  "their GPU time, %")
    time_weighted_p99_over_p50: float | None = figure("P99/P50, names weighted by their GPU "
                                                      "time (ratio)")
    concurrent_pct: float = figure("largest share, over devices, of kernel time with two or "
                                   "more kernels running, %", 0.0)

    def per_kernel(self) -> list[KernelJitter]:
        """The ``per_kernel`` table as records (empty without it)."""
        table = self.tables.get("per_kernel")
        return records(table, KernelJitter) if table is not None else []

    def reported(self) -> tuple[str, ...]:
        names = super().reported()
        return names if self.kernels_examined else tuple(
            n for n in names if n not in _PER_KERNEL)


RESULT = JitterResult
#: how it runs (``engine.runner``): overlap's figures
# kernel_configs is read only where a kernel's grid or block does not pack (by_position,
# by_config): the diagnosis does not build it ahead
RUNS = Runs(needs=("overlap",), fallback_views=("kernel_configs",))



def run(report: Report, *, top: int | None = None, slow: float | None = None,
        settings: Settings | None = None) -> JitterResult | AnalysisResult:
    """Per-kernel duration spread for the kernels that use the most GPU time.

    Parameters
    ----------
    report : Report
        An opened export.
    top : int, optional
        Kernel names examined, by total GPU time (default ``settings.jitter_top``).
    slow : float, optional
        A launch is slow above this multiple of its name's median (default
        ``settings.slow_ratio``).
    settings : Settings, optional
        Where the defaults come from.

    Returns
    -------
    JitterResult
        summary: ``kernels_examined``, ``worst_kernel``, ``worst_p99_over_p50``,
        ``worst_slow_pct``, ``time_weighted_slow_pct``, ``concurrent_pct`` (max over devices);
        tables ``per_kernel`` (main) and ``concurrency``.
    """
    settings = settings or DEFAULTS
    top = settings.jitter_top if top is None else top
    slow = settings.slow_ratio if slow is None else slow
    missing = not_captured("jitter", report, "kernels")
    if missing:
        return missing
    with temp_views(report, {"jitter_kernels": load_sql("jitter")[_keyed(report)]},
                    ("jitter_kernels",)):
        per = run_query(report, "jitter", "per_kernel", {"top": top, "slow": slow})
    conc = _concurrency(report, settings)
    rows = per.to_pylist()
    summary: dict = {"kernels_examined": len(rows)}
    if rows:
        worst = max(rows, key=lambda r: r["p99_over_p50"] or 0)
        total = sum(r["total_ns"] for r in rows) or 1
        summary.update(
            {
                "worst_kernel": worst["name"],
                "worst_p99_over_p50": worst["p99_over_p50"],
                "worst_slow_pct": worst["slow_pct"],
                "time_weighted_slow_pct": sum(r["slow_pct"] * r["total_ns"] for r in rows) / total,
                "time_weighted_p99_over_p50": sum(
                    (r["p99_over_p50"] or 1) * r["total_ns"] for r in rows
                )
                / total,
            }
        )
    pct = [r["concurrent_pct"] for r in conc.to_pylist() if r["concurrent_pct"] is not None]
    summary["concurrent_pct"] = max(pct) if pct else 0.0
    msg = (
        f"{len(rows)} kernels examined; time-weighted "
        f"{summary.get('time_weighted_slow_pct', 0):.1f}% "
        f"of launches slower than {slow}x their median"
    )
    return JitterResult(status=OK, message=msg, tables={"per_kernel": per, "concurrency": conc},
                        main="per_kernel", **summary)


def _keyed(report: Report) -> str:
    """The query giving each kernel its configuration: ``by_shape`` (the grid and block
    the kernels' file holds) where every one packs; else ``by_position`` where the kernels
    and kernel_configs views are aligned row for row, ``by_config`` (a join on the keys)
    where not; ``by_name`` (no configuration) where the export records none."""
    if not report.probe.present("kernel_configs"):
        return "by_name"
    if run_query(report, "jitter", "shapes_pack").column(0)[0].as_py():
        return "by_shape"
    aligned = run_query(report, "jitter", "aligned").column(0)[0].as_py()
    return "by_position" if aligned else "by_config"


def _concurrency(report: Report, settings: Settings) -> pa.Table:
    """Per device: time with >= 1 and with >= 2 kernels in flight, from the overlap
    analysis (its kernel sweep; the diagnosis runs it anyway, and its result is cached)."""
    overlap = report.analysis("overlap", settings=settings)
    rows = []
    if overlap.ok:
        rows = [
            {"device_id": r["device_id"], "busy_ns": r["kernel_busy_ns"],
             "concurrent_ns": r["concurrent_kernel_ns"],
             "concurrent_pct": r["kernel_concurrency_pct"]}
            for r in overlap.table("devices").to_pylist() if r["device_id"] is not None
        ]
    return pa.Table.from_pylist(rows, schema=_CONCURRENCY)


_CONCURRENCY = pa.schema([("device_id", pa.int64()), ("busy_ns", pa.int64()),
                          ("concurrent_ns", pa.int64()), ("concurrent_pct", pa.float64())])
