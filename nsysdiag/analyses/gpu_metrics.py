"""GPU metrics: the sampled DRAM bandwidth, SM activity and PCIe figures, per metric.

What ``nsys profile --gpu-metrics-devices`` sampled of memory, SM and link activity: per
metric, its mean and 99th percentile over the samples (the method's check D2: memory-bound
phases show as DRAM bandwidth near its peak).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .base import OK, AnalysisResult, figure, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report
    from ..settings import Settings

NAME = "gpu_metrics"


@dataclass(frozen=True)
class Metric:
    """One row of the ``per_metric`` table."""

    metric_name: str  #: nsys's name of the metric
    mean: float  #: mean over the samples (nsys's unit, mostly % of peak)
    p99: float  #: 99th percentile of the samples
    samples: int  #: samples of it


@dataclass(frozen=True, kw_only=True)
class GpuMetricsResult(AnalysisResult):
    """DRAM, SM and PCIe metrics (``sql/gpu_metrics.sql`` defines which).

    Tables: ``per_metric`` (main; one row per metric, by name).
    """

    analysis: str = field(default="gpu_metrics", init=False)
    metrics: int = figure("DRAM, SM and PCIe metrics sampled", 0)
    samples: int = figure("samples of them", 0)

    def rows(self) -> list[Metric]:
        """Each metric's mean, 99th percentile and samples."""
        return records(self.tables["per_metric"], Metric)


RESULT = GpuMetricsResult


def run(report: Report, *, settings: Settings | None = None) -> GpuMetricsResult | AnalysisResult:
    """Summarize the sampled DRAM, SM and PCIe metrics.

    Parameters
    ----------
    report : Report
        An opened export.
    settings : Settings, optional
        Accepted as by every analysis; this one reads none.

    Returns
    -------
    GpuMetricsResult
        ``metrics``, ``samples``; table ``per_metric`` (main: ``metric_name``, ``mean``,
        ``p99``, ``samples``).
    """
    missing = not_captured(NAME, report, "gpu_metrics")
    if missing:
        return missing
    per_metric = run_query(report, NAME, "per_metric")
    summary = run_query(report, NAME, "summary").to_pylist()[0]
    return GpuMetricsResult(status=OK, tables={"per_metric": per_metric}, main="per_metric",
                            message=f"{summary['metrics']} metrics, {summary['samples']} "
                                    "samples", **summary)
