"""Result objects of the diagnosis: findings, the verdict on the tail, and the whole diagnosis.

The JSON form (``Diagnosis.to_dict``) is a versioned contract described by
``nsysdiag/schema/diagnosis-v1.schema.json``: fields are only ever added within a major
version.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..render.tables import dumps
from ..settings import Settings

if TYPE_CHECKING:
    import numpy as np

    from ..analyses.base import AnalysisResult
    from ..analyses.graphs import GraphsResult
    from ..stats.classifier import TailShapeResult

SCHEMA = "nsysdiag.diagnosis/1"
LAYERS = ("cpu", "gpu", "pcie", "workload", "graph", "info")
#: workload: the slow units do more work (more kernels at the median's per-kernel speed)
VERDICT_LAYERS = ("healthy", "cpu", "gpu", "pcie", "workload", "undetermined")
SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One observation with its evidence and what to do about it.

    ``layer`` is one of cpu, gpu, pcie, graph, info; ``severity`` one of critical,
    warning, info; ``evidence`` lines carry numbers with units; ``weight`` orders findings
    of the same severity (larger first).
    """

    layer: str
    severity: str
    title: str
    evidence: tuple[str, ...]
    fix: str = ""
    check: str = ""
    weight: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "severity": self.severity,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "check": self.check,
        }


@dataclass(frozen=True)
class Verdict:
    """Which layer the latency tail comes from, how sure, and why in one sentence."""

    layer: str
    confidence: float
    summary: str
    scores: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "confidence": round(self.confidence, 3),
            "summary": self.summary,
            "scores": {k: round(v, 3) for k, v in self.scores.items()},
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

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "unit_source": self.unit_source,
            "n": self.n,
            "p50_ns": self.p50_ns,
            "p90_ns": self.p90_ns,
            "p99_ns": self.p99_ns,
            "p99_over_p50": self.p99_over_p50,
            "shape": self.shape,
            "shape_confidence": round(self.shape_confidence, 3),
            "level": self.level,
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


@dataclass(frozen=True)
class Diagnosis:
    """Everything ``nsysdiag diagnose`` reports for one trace."""

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
    analyses: dict[str, AnalysisResult] = field(default_factory=dict)

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
            "tail": self.tail.to_dict(),
            "verdict": self.verdict.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "launch_gaps": self.launch_gaps.to_dict(),
            "cuda_graphs": self.cuda_graphs.to_dict(),
            "classifier": self.classifier.to_dict() if self.classifier is not None else None,
            "evidence": self.evidence,
            "captured": self.captured,
            "settings": self.settings_dict(),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        from ..render.terminal import diagnosis_text

        return diagnosis_text(self)

    def _repr_html_(self) -> str:
        from ..render.notebook import diagnosis_html

        return diagnosis_html(self)
