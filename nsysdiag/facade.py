"""The typed facade of :class:`~nsysdiag.report.Report`: one method per analysis.

``rep.transfers(baseline=...)`` is ``rep.analysis("transfers", baseline=...)`` with the
analysis' own keyword options, documented where the analysis is (its module's ``run``),
and its result class as the return type: a caller reads figures as attributes
(``rep.transfers().htod.median_gbps``), checked by a type checker, instead of finding a
result by name. Results are computed once per report and options (``analyses.results``:
an option given its default counts as left out, so ``rep.ranges()`` and
``rep.analysis("ranges")`` share one result).

An analysis added to ``nsysdiag.analyses.ANALYSES`` gets its method here, with ``run``'s
signature (and its typed accessor, ``diagnosis.model.Analyses``); ``tests/test_facade.py``
checks that every analysis has both and that a method's options are those of ``run``.
A method returns the bare :class:`AnalysisResult` when the analysis had nothing to
measure (``not_captured``, ``empty``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .analyses.base import AnalysisResult
    from .analyses.capture import CaptureResult
    from .analyses.gpu_idle import GpuIdleResult
    from .analyses.gpu_metrics import GpuMetricsResult
    from .analyses.graphs import GraphsResult
    from .analyses.host_syncs import HostSyncsResult
    from .analyses.interference import InterferenceResult
    from .analyses.jitter import JitterResult
    from .analyses.kernel_summary import KernelSummaryResult
    from .analyses.launch_gaps import LaunchGapsResult
    from .analyses.launch_latency import LaunchLatencyResult
    from .analyses.os_blocking import OsBlockingResult
    from .analyses.overlap import OverlapResult
    from .analyses.ranges import RangesResult
    from .analyses.transfers import TransfersResult
    from .analyses.whole_run import WholeRunResult
    from .analyses.workload import WorkloadResult
    from .settings import Settings


class AnalysisMethods:
    """One method per analysis, each running it through :meth:`analysis` (which the class
    that takes these methods, :class:`~nsysdiag.report.Report`, defines)."""

    def analysis(self, name: str, **options: Any) -> AnalysisResult:
        """The result of analysis ``name`` with ``options`` (the class defines it)."""
        raise NotImplementedError

    def capture(
        self, *, baseline: str | None = None, settings: Settings | None = None
    ) -> CaptureResult | AnalysisResult:
        """What the capture lost or lacks, and the machine it ran on
        (:func:`nsysdiag.analyses.capture.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "capture", baseline=baseline, settings=settings)

    def kernel_summary(
        self, *, top: int | None = None, settings: Settings | None = None
    ) -> KernelSummaryResult | AnalysisResult:
        """Summarize kernel execution time per kernel name
        (:func:`nsysdiag.analyses.kernel_summary.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "kernel_summary", top=top, settings=settings)

    def launch_gaps(
        self, *, settings: Settings | None = None, normal_threshold_us: float | None = None,
        p99_threshold_us: float | None = None, detail: bool = True
    ) -> LaunchGapsResult | AnalysisResult:
        """Measure the gaps between kernels per GPU, per stream and inside CUDA graphs
        (:func:`nsysdiag.analyses.launch_gaps.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "launch_gaps", settings=settings, normal_threshold_us=normal_threshold_us,
            p99_threshold_us=p99_threshold_us, detail=detail)

    def launch_latency(
        self, *, top: int | None = None, detail: bool = True, settings: Settings | None = None
    ) -> LaunchLatencyResult | AnalysisResult:
        """Time every kernel launch and follow the dispatch queue
        (:func:`nsysdiag.analyses.launch_latency.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "launch_latency", top=top, detail=detail, settings=settings)

    def transfers(
        self, *, baseline: str | None = None, large_bytes: int | None = None, settings:
        Settings | None = None
    ) -> TransfersResult | AnalysisResult:
        """Bandwidth of every memcpy and memset, against the host link, with contention
        (:func:`nsysdiag.analyses.transfers.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "transfers", baseline=baseline, large_bytes=large_bytes, settings=settings)

    def overlap(self, *, settings: Settings | None = None) -> OverlapResult | AnalysisResult:
        """Kernel/copy busy time, their overlap and stream concurrency, per device
        (:func:`nsysdiag.analyses.overlap.run`)."""
        return self.analysis("overlap", settings=settings)  # type: ignore[return-value]

    def graphs(self, *, top: int = 10, settings: Settings | None = None) -> GraphsResult:
        """Graph launches, the share of GPU work inside graphs, and launch overhead
        (:func:`nsysdiag.analyses.graphs.run`)."""
        return self.analysis("graphs", top=top, settings=settings)  # type: ignore[return-value]

    def jitter(
        self, *, top: int | None = None, slow: float | None = None, settings: Settings | None = None
    ) -> JitterResult | AnalysisResult:
        """Per-kernel duration spread for the kernels that use the most GPU time
        (:func:`nsysdiag.analyses.jitter.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "jitter", top=top, slow=slow, settings=settings)

    def ranges(
        self, range_name: str | None = None, tail_pct: float | None = None,
        min_instances: int | None = None, scope: str = "auto", keep_warmup: bool | None = None,
        *, settings: Settings | None = None
    ) -> RangesResult | AnalysisResult:
        """Decompose every request/iteration and attribute the latency tail to components
        (:func:`nsysdiag.analyses.ranges.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "ranges", range_name=range_name, tail_pct=tail_pct,
            min_instances=min_instances, scope=scope, keep_warmup=keep_warmup,
            settings=settings)

    def gpu_idle(
        self, *, settings: Settings | None = None, range_name: str | None = None, detail:
        bool = True
    ) -> GpuIdleResult | AnalysisResult:
        """Give each gap before a kernel a cause and sum the GPU's idle time by cause
        (:func:`nsysdiag.analyses.gpu_idle.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "gpu_idle", settings=settings, range_name=range_name, detail=detail)

    def whole_run(
        self, *, top: int = 5, settings: Settings | None = None
    ) -> WholeRunResult | AnalysisResult:
        """Split the whole run's time on its busiest GPU; name what dominates it
        (:func:`nsysdiag.analyses.whole_run.run`)."""
        return self.analysis("whole_run", top=top, settings=settings)  # type: ignore[return-value]

    def host_syncs(self, *, settings: Settings | None = None) -> HostSyncsResult | AnalysisResult:
        """Measure the host's synchronization waits per call name and per thread
        (:func:`nsysdiag.analyses.host_syncs.run`)."""
        return self.analysis("host_syncs", settings=settings)  # type: ignore[return-value]

    def os_blocking(self, *, settings: Settings | None = None) -> OsBlockingResult | AnalysisResult:
        """Measure the traced OS runtime calls per call name
        (:func:`nsysdiag.analyses.os_blocking.run`)."""
        return self.analysis("os_blocking", settings=settings)  # type: ignore[return-value]

    def gpu_metrics(self, *, settings: Settings | None = None) -> GpuMetricsResult | AnalysisResult:
        """Summarize the sampled DRAM, SM and PCIe metrics
        (:func:`nsysdiag.analyses.gpu_metrics.run`)."""
        return self.analysis("gpu_metrics", settings=settings)  # type: ignore[return-value]

    def interference(
        self, *, settings: Settings | None = None, range_name: str | None = None
    ) -> InterferenceResult | AnalysisResult:
        """Name the other GPU work that ran during the slowest units
        (:func:`nsysdiag.analyses.interference.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "interference", settings=settings, range_name=range_name)

    def workload(
        self, *, settings: Settings | None = None, range_name: str | None = None
    ) -> WorkloadResult | AnalysisResult:
        """Tell more work from slower work in the slowest units
        (:func:`nsysdiag.analyses.workload.run`)."""
        return self.analysis(  # type: ignore[return-value]
            "workload", settings=settings, range_name=range_name)
