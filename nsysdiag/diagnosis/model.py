"""Result objects of the diagnosis: findings, the verdict on the tail, and the whole diagnosis.

The JSON form (``Diagnosis.to_dict``) is a versioned contract described by
``nsysdiag/schema/diagnosis-v1.schema.json``: fields are only ever added within a major
version.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..render.tables import dumps

if TYPE_CHECKING:
    import numpy as np

    from ..analyses.base import AnalysisResult
    from ..stats.classifier import TailShapeResult

SCHEMA = "nsysdiag.diagnosis/1"
LAYERS = ("cpu", "gpu", "pcie", "graph", "info")
VERDICT_LAYERS = ("healthy", "cpu", "gpu", "pcie", "undetermined")
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
class Diagnosis:
    """Everything ``nsysdiag diagnose`` reports for one trace."""

    path: str
    tail: TailSummary
    verdict: Verdict
    findings: tuple[Finding, ...]
    launch_gaps: dict[str, Any]
    cuda_graphs: dict[str, Any]
    evidence: dict[str, dict[str, Any]]
    captured: dict[str, str]
    settings: dict[str, Any]
    classifier: TailShapeResult | None = None
    durations_ns: np.ndarray | None = None
    analyses: dict[str, AnalysisResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "path": self.path,
            "tail": self.tail.to_dict(),
            "verdict": self.verdict.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "launch_gaps": self.launch_gaps,
            "cuda_graphs": self.cuda_graphs,
            "classifier": self.classifier.to_dict() if self.classifier is not None else None,
            "evidence": self.evidence,
            "captured": self.captured,
            "settings": self.settings,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def __str__(self) -> str:
        from ..render.terminal import diagnosis_text

        return diagnosis_text(self)

    def _repr_html_(self) -> str:
        from ..render.notebook import diagnosis_html

        return diagnosis_html(self)
