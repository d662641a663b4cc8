"""Result objects of the diagnosis: findings, the verdict on the tail, and the whole diagnosis.

The JSON form (``Diagnosis.to_dict``) is a versioned contract described by
``nsysdiag/schema/diagnosis-v1.schema.json``: fields are only ever added within a major
version.

The readable forms live here too, built from the neutral helpers of
:mod:`nsysdiag.formatting`: ``Diagnosis.lines`` lays out the plain-text report
(``__str__``) and ``_repr_html_`` a compact table for notebooks. The domain never imports
the renderers; the terminal renderer (:mod:`nsysdiag.render.terminal`) colours the same
lines through ``lines(style=...)`` and the HTML report (:mod:`nsysdiag.render.html`) reads
the fields.
"""

from __future__ import annotations

import dataclasses
import enum
import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..analyses.base import AnalysisResult
from ..analyses.gpu_idle import breakdown
from ..analyses.graphs import GraphsResult
from ..facade import Declared
from ..findings import Finding
from ..formatting import dumps, fmt_ns, html_table
from ..layers import Layer
from ..settings import Settings

if TYPE_CHECKING:
    import numpy as np

    from ..analyses.capture import GpuLink
    from ..stats.classifier import TailShapeResult

R = TypeVar("R", bound=AnalysisResult)

SCHEMA = "nsysdiag.diagnosis/1"


class Mechanism(str, enum.Enum):
    """What the verdict measured inside its layer: the mechanism, its layer, its name in
    words and what to do about it."""

    def __new__(cls, value: str, layer: Layer, words: str, action: str) -> Mechanism:
        member = str.__new__(cls, value)
        member._value_ = value
        member.layer = layer
        member.words = words
        member.action = action
        return member

    layer: Layer
    words: str
    action: str

    QUEUEING = ("queueing", Layer.CPU,
                "CPU-side queueing: the units waited before their work began",
                "serve sooner: more workers, smaller batches, or less load per worker")
    HOST_STALL_BEFORE_WORK = (
        "host_stall_before_work", Layer.CPU,
        "a host stall before the work began: the launching thread ran without a CUDA call "
        "before its first launch (input preparation, data loading on that thread)",
        "move input preparation off the launching thread (DataLoader workers, prefetch, "
        "pinned-memory staging) so the next unit's input is ready when it starts")
    HOST_STALL = (
        "host_stall", Layer.CPU,
        "a host stall between launches: the launching thread ran without a CUDA call in "
        "long stretches (another thread holding the GIL, garbage collection, Python work)",
        "find what holds the launching thread (py-spy dump, nsys --sample=cpu, the GIL "
        "holder); move that work off the thread or release the GIL around it")
    HOST_WORK = (
        "host_work", Layer.CPU,
        "more host time outside CUDA, spread over the unit in many short stretches (slower "
        "or more Python work per unit, CPU contention)",
        "profile the host code of the slow units (nsys --sample=cpu, py-spy); pin the "
        "process to free cores; CUDA Graphs or torch.compile to cut per-launch Python work")
    LAUNCH_BOUND = ("launch_bound", Layer.CPU,
                    "slower launch calls (CPU-side launch overhead or contention)",
                    "fewer, larger kernels (fusion, CUDA Graphs); free CPU cores")
    SYNC_WAIT = ("sync_wait", Layer.CPU, "longer host waits in synchronizations",
                 "remove synchronizations from the loop (.item(), .cpu(), blocking copies)")
    GPU_EXECUTION = ("gpu_execution", Layer.GPU,
                     "GPU execution jitter: the same kernels ran slower",
                     "check clocks and power (nvidia-smi -q -d PERFORMANCE), memory behaviour")
    COLLECTIVE_WAIT = (
        "collective_wait", Layer.GPU,
        "waiting at collectives for another rank: the slow units' extra GPU time is in NCCL "
        "kernels, which wait on the GPU until the last rank arrives",
        "look at the other ranks, not this one's kernels: profile every rank (nsys profile -o "
        "rank%q{RANK} ...) and run nsysdiag ranks on all the exports, which names the rank "
        "the others wait for and its own cause")
    OTHER_GPU_WORK = ("other_gpu_work", Layer.GPU,
                      "other GPU work: other streams or processes held the GPU",
                      "keep other work off the serving GPU, or give it a lower stream "
                      "priority, MPS or MIG partition")
    GPU_BOUND = ("gpu_bound", Layer.GPU,
                 "a GPU-bound run with the host ahead: the units wait for the program's own "
                 "earlier work on its own stream, not for anyone else's",
                 "the GPU is the bottleneck: make the kernels faster or fewer (profile them "
                 "with ncu) or submit less work per unit; time the units on the GPU (CUDA "
                 "events, an NVTX range ending in a sync), since launches return long before "
                 "their work runs")
    GPU_PENDING = ("gpu_pending", Layer.GPU,
                   "submitted work waited while the GPU looked idle (work this trace does "
                   "not show, or GPU-side scheduling)",
                   "capture every process on the GPU (nsys --trace=cuda for all)")
    TRANSFER_CONTENTION = ("transfer_contention", Layer.PCIE,
                           "PCIe transfer contention: copies shared the link in the same "
                           "direction", "stagger or pin the competing transfers")
    SLOW_TRANSFERS = ("slow_transfers", Layer.PCIE, "slow host-device transfers",
                      "use pinned host memory and larger, asynchronous copies")
    TRANSFER_VOLUME = ("transfer_volume", Layer.PCIE,
                       "host-device transfer volume: more bytes per unit, not slower copies",
                       "keep the data on the device, or move it before the unit starts")
    MORE_WORK = ("more_work", Layer.WORKLOAD, "more work per unit, not slower work",
                 "bound the work per unit (batch size, sequence length) or set the slow "
                 "units' latency target apart")
    NEW_SIZES = ("new_sizes", Layer.WORKLOAD,
                 "units of a new size: a cost paid once per size (kernels loaded or tuned "
                 "for a new shape, an allocator growing)",
                 "pad or bucket the work per unit to a few sizes and warm each one up "
                 "before serving (or reserve the allocator's largest size)")

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verdict:
    """Which layer the latency tail comes from, how sure, and why in one sentence;
    ``mechanism`` says what was measured inside the layer (None: no cause named).
    ``layer`` is a :class:`~nsysdiag.layers.Layer` of ``VERDICT_LAYERS`` (its name is
    accepted and read as the member)."""

    layer: Layer
    confidence: float
    summary: str
    scores: dict[str, float] = field(default_factory=dict)
    mechanism: Mechanism | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", Layer(self.layer))

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer.value,
            "mechanism": self.mechanism.value if self.mechanism is not None else None,
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "scores": {str(k): round(v, 3) for k, v in self.scores.items()},
        }


@dataclass(frozen=True)
class TailSummary:
    """The latency distribution of the repeated unit (request, iteration, ...)."""

    unit: str | None
    unit_source: str | None
    n: int
    p50_ns: float | None
    p90_ns: float | None
    p99_ns: float | None
    p99_over_p50: float | None
    shape: str
    shape_confidence: float
    level: str = "unknown"
    tail_n: int = 0  #: units in the slow set the tail attribution compares with the median band
    min_units: int = 0  #: units a verdict needs (settings.min_units)
    #: units standing out of the body (longer than settings.elevated_ratio x P50): the
    #: units a named cause rests on
    n_standing_out: int = 0
    lone_outlier_ns: float | None = None  #: the slowest unit when it is a lone outlier, ns
    lone_outlier_ratio: float | None = None  #: the lone outlier over the second slowest unit
    #: the range that came second in the unit choice
    runner_up: str | None = None
    #: why the unit was chosen (or why no NVTX range was)
    unit_reason: str | None = None
    #: warm-up units set apart (left out of the figures unless kept)
    n_warmup: int = 0
    #: the one-off calls the warm-up units hold
    warmup_calls: tuple[str, ...] = ()
    #: how many units were set apart as warm-up and why (ranges.Warmup.describe)
    warmup_reason: str | None = None
    #: the units after the warm-up that hold one-off calls, counted (one line), or None
    later_oneoff: str | None = None
    #: the classifier's calibrated probability of each shape (None without a classification)
    shape_probabilities: dict[str, float] | None = None

    @property
    def likelier_shape(self) -> tuple[str, float] | None:
        """The shape the calibrated probabilities favour over ``shape``, with its
        probability, when they do: the decision rules (the method's gates) chose ``shape``,
        but the probability model, fitted on simulated mechanisms, finds another likelier.
        None when they agree or there are no probabilities."""
        probs = self.shape_probabilities
        if not probs or self.shape not in probs:
            return None
        best = max(probs, key=lambda s: probs[s])
        if best == self.shape or probs[best] <= probs[self.shape]:
            return None
        return best, probs[best]

    @property
    def shape_word(self) -> str:
        """The shape as the verdict's sentences name it. The gate calls a tail tight up to
        p99/p50 ``tail_ratio``; an elevated tail it passes is not tight to a reader, so it
        is named by the shape its probabilities favour (the rules still read it as tight:
        the shape votes only where the gate finds the tail abnormal)."""
        other = self.likelier_shape
        if self.shape == "tight" and self.level in ("elevated", "abnormal") and other:
            return f"{other[0]} by its probabilities, {other[1]:.2f}"
        return self.shape

    @property
    def shape_text(self) -> str:
        """``shape (confidence c)``, saying when another shape is likelier."""
        text = f"{self.shape} (confidence {self.shape_confidence:.2f}"
        other = self.likelier_shape
        if other is not None:
            text += f"; the probabilities favour {other[0]}, {other[1]:.2f}"
        return text + ")"

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "unit_source": self.unit_source,
            "runner_up": self.runner_up,
            "unit_reason": self.unit_reason,
            "n_warmup": self.n_warmup,
            "warmup_calls": list(self.warmup_calls),
            "warmup_reason": self.warmup_reason,
            "n_standing_out": self.n_standing_out,
            "later_oneoff": self.later_oneoff,
            "n": self.n,
            "p50_ns": self.p50_ns,
            "p90_ns": self.p90_ns,
            "p99_ns": self.p99_ns,
            "p99_over_p50": self.p99_over_p50,
            "shape": self.shape,
            "shape_confidence": round(self.shape_confidence, 3),
            "shape_probabilities": (
                {k: round(v, 3) for k, v in self.shape_probabilities.items()}
                if self.shape_probabilities is not None
                else None
            ),
            "level": self.level,
            "tail_n": self.tail_n,
            "min_units": self.min_units,
            "lone_outlier_ns": self.lone_outlier_ns,
            "lone_outlier_ratio": self.lone_outlier_ratio,
        }


#: where a GPU's host-link figure comes from, in words (link.Link.source)
LINK_SOURCES = {
    "trace": "recorded in the export",
    "baseline": "nvbandwidth baseline",
    "default": "platform table",
    "integrated": "integrated GPU, memory shared with the CPU: no PCIe link",
    "not_cuda": "not a CUDA device",
    "unknown": "GPU not in the platform table: no link figure assumed",
}


@dataclass(frozen=True)
class Platform:
    """The machine as the export records it: each GPU with the host link assumed for it and
    where that figure comes from, and the driver and CUDA versions."""

    gpus: tuple[GpuLink, ...] = ()  #: per GPU: name, link_gbps, link_source, link_note
    driver_version: str | None = None  #: NVIDIA driver version
    cuda_version: str | None = None  #: CUDA version of the driver

    def lines(self) -> list[str]:
        """One line per GPU (its host link and where the figure comes from), then the
        versions."""
        out = []
        for g in self.gpus:
            where = LINK_SOURCES.get(g.link_source, g.link_source)
            link = (f"host link {g.link_gbps:.1f} GB/s per direction ({where}: {g.link_note})"
                    if g.link_gbps is not None else f"no host-link figure ({where})")
            out.append(f"GPU {g.device_id} {g.name or '?'}: {link}")
        versions = [f"driver {self.driver_version}" if self.driver_version else "",
                    f"CUDA {self.cuda_version}" if self.cuda_version else ""]
        if any(versions):
            out.append(", ".join(v for v in versions if v))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [dataclasses.asdict(g) for g in self.gpus],
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
        }


@dataclass(frozen=True)
class GapSummary:
    """The launch gaps in brief (from the launch_gaps analysis; count 0 and None figures
    when it did not measure)."""

    status: str  #: the launch_gaps analysis' status
    count: int  #: main gaps
    p50_ns: float | None  #: P50 gap, ns
    p90_ns: float | None  #: P90 gap, ns
    p99_ns: float | None  #: P99 gap, ns
    max_ns: float | None  #: largest gap, ns
    share_above_normal_pct: float | None  #: share of gaps above the normal threshold, %

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class GraphUse:
    """Whether CUDA Graphs are in use, with the graphs analysis' figures (None when it did
    not run)."""

    in_use: bool
    graphs: GraphsResult | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"in_use": self.in_use}
        if self.graphs is not None:
            out.update({k: v for k, v in self.graphs.summary.items()
                        if not isinstance(v, (dict, list))})
            out["in_use"] = self.in_use
        return out


class Analyses(dict[str, AnalysisResult], Declared):
    """The analyses' results of a diagnosis, by name (the JSON ``evidence``), read by
    type: ``d.analyses.ranges`` is the ranges analysis' :class:`RangesResult` when it
    measured (status ok), else None (not run, not captured, nothing to measure).

    One typed accessor per analysis, declared with its method of ``Report`` by one line
    (``nsysdiag.facade.Declared``); :meth:`typed` gives a result whatever its status.
    """

    def typed(self, kind: type[R]) -> R | None:
        """The result of the analysis ``kind`` is the result class of, whatever its
        status; None when it did not run or measured nothing (a bare AnalysisResult)."""
        r = self.get(kind.analysis_name())
        return r if isinstance(r, kind) else None

    def measured(self, kind: type[R]) -> R | None:
        """The result of class ``kind`` when its analysis measured (status ok)."""
        r = self.typed(kind)
        return r if r is not None and r.ok else None


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``nsysdiag diagnose`` reports for one trace.

    ``analyses`` holds each analysis' result by name and by type
    (:class:`Analyses`: ``d.analyses.transfers.htod.median_gbps``)."""

    path: str
    tail: TailSummary
    verdict: Verdict
    findings: tuple[Finding, ...]
    launch_gaps: GapSummary
    cuda_graphs: GraphUse
    captured: dict[str, str]
    settings: Settings
    range_name: str | None = None
    baseline: str | None = None
    classifier: TailShapeResult | None = None
    durations_ns: np.ndarray | None = None
    analyses: Analyses = field(default_factory=Analyses)
    platform: Platform = field(default_factory=Platform)
    #: the one process of the export diagnosed (``Report(pid=...)``); None: every process
    pid: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.analyses, Analyses):  # a plain dict given: typed
            object.__setattr__(self, "analyses", Analyses(self.analyses or {}))

    @property
    def evidence(self) -> dict[str, dict[str, Any]]:
        """Each analysis' status, message and summary (the JSON ``evidence``)."""
        return {k: {"status": r.status, "message": r.message, "summary": r.summary}
                for k, r in self.analyses.items()}

    def settings_dict(self) -> dict[str, Any]:
        """The settings as the JSON ``settings`` section gives them."""
        return {
            "tail_ratio": self.settings.tail_ratio,
            "elevated_ratio": self.settings.elevated_ratio,
            "tail_pct": self.settings.tail_pct,
            "range": self.range_name,
            "baseline": self.baseline,
            "seed": self.settings.seed,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "path": self.path,
            "pid": self.pid,
            "tail": self.tail.to_dict(),
            "verdict": self.verdict.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "launch_gaps": self.launch_gaps.to_dict(),
            "cuda_graphs": self.cuda_graphs.to_dict(),
            "platform": self.platform.to_dict(),
            "classifier": self.classifier.to_dict() if self.classifier is not None else None,
            "evidence": self.evidence,
            "captured": self.captured,
            "settings": self.settings_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def lines(
        self, *, max_findings: int = 8, style: Callable[[str, str | None], str] | None = None
    ) -> list[str]:
        """The plain-text report, line by line: verdict first, then the tail, the findings
        with their evidence and fixes, and what was not captured.

        Parameters
        ----------
        max_findings : int
            Findings listed; the rest are counted.
        style : callable, optional
            ``style(text, key)`` is applied to every piece of text that comes from the
            trace or the verdict: ``key`` is the layer or severity it names (to emphasise)
            or None (plain). Default: the text unchanged.
        """

        def c(text: str, key: str) -> str:
            return style(text, key) if style else text

        def e(text: str) -> str:
            return style(text, None) if style else text

        v, t = self.verdict, self.tail
        head = f"{c('VERDICT: ' + v.layer.upper(), v.layer)}"
        if v.mechanism is not None:
            head += f" - {v.mechanism.words.split(':')[0]}"
        lines = [f"{head}  (confidence {v.confidence:.2f})", e(v.summary)]
        if v.mechanism is not None:
            lines.append(e(f"what to do: {v.mechanism.action}"))
        lines += [
            "",
            e(f"trace      {self.path}" + (f" (process {self.pid} alone)"
                                              if self.pid is not None else "")),
        ]
        if t.unit_reason:
            lines.append(e(f"unit choice {t.unit_reason}"))
        if t.n_warmup:
            lines.append(e(f"warm-up    {t.warmup_reason}" if t.warmup_reason else
                           f"warm-up    {t.n_warmup} unit{'s' if t.n_warmup != 1 else ''} "
                           f"set apart" + (f" ({', '.join(t.warmup_calls)})"
                                           if t.warmup_calls else "")))
        if t.later_oneoff:
            lines.append(e(f"mid-run    {t.later_oneoff}"))
        whole = self.analyses.whole_run
        if whole is not None and whole.dominant_summary:
            lines.append(e(f"whole run  {whole.dominant_summary}"))
        if t.unit:
            lines += [
                e(f"unit       {t.unit} ({t.unit_source}), n = {t.n}"
                  + (f"; runner-up {t.runner_up}" if t.runner_up else "")),
                f"latency    P50 {fmt_ns(t.p50_ns)}  P90 {fmt_ns(t.p90_ns)}  "
                f"P99 {fmt_ns(t.p99_ns)}  P99/P50 {t.p99_over_p50:.2f} ({t.level})"
                if t.p99_over_p50
                else "latency    -",
                f"shape      {t.shape_text}",
            ]
        g = self.launch_gaps
        if g.count:
            lines.append(
                f"launch gaps {g.count} gaps, P50 {fmt_ns(g.p50_ns)}, P99 {fmt_ns(g.p99_ns)}"
            )
        idle = self.analyses.gpu_idle
        if idle is not None and idle.gaps:
            lines.append(f"GPU idle   {fmt_ns(idle.idle_ns)} in {idle.gaps} gaps: "
                         f"{breakdown(idle)}")
        lines.append(f"CUDA Graphs {'in use' if self.cuda_graphs.in_use else 'not used'}")
        lines += [e(f"platform   {x}") for x in self.platform.lines()]
        lines.append("")
        shown = self.findings[:max_findings]
        lines.append(f"FINDINGS ({len(self.findings)}, most important first)")
        for i, f in enumerate(shown, 1):
            lines.append(f"{i}. {c(f.severity.upper(), f.severity)} [{f.layer}] {e(f.title)}")
            lines += [f"     - {e(x)}" for x in f.evidence]
            if f.fix:
                lines.append(f"     fix: {e(f.fix)}")
        if len(self.findings) > max_findings:
            lines.append(f"... {len(self.findings) - max_findings} more (use --json for all)")
        missing = [k for k, s in self.captured.items() if s == "not_captured"]
        if missing:
            lines += ["", f"not captured: {', '.join(missing)}"]
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_html_(self) -> str:
        """A compact HTML view for notebooks: the verdict, the tail and the findings."""
        v, t = self.verdict, self.tail
        head = (
            f"<p><b>Verdict: {html.escape(v.layer)}</b> (confidence {v.confidence:.2f}) - "
            f"{html.escape(v.summary)}</p>"
        )
        tail = html_table(
            ["unit", "n", "p50_ns", "p99_ns", "p99/p50", "shape"],
            [[t.unit, t.n, t.p50_ns, t.p99_ns, t.p99_over_p50, t.shape]],
        )
        rows = [[f.severity, f.layer, f.title, "; ".join(f.evidence)] for f in self.findings]
        return head + tail + html_table(["severity", "layer", "finding", "evidence"], rows)
