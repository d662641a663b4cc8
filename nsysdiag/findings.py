"""What a check of the method yields: a finding, and the form of a rule an analysis
declares.

A finding says what happened (``title``), with measured figures (``evidence``: where,
how much, what it cost), and what to do (``fix``); it sits in a layer and has a severity.
It lives below the analyses so that an analysis can declare its own rule: a module of
``nsysdiag.analyses`` that defines

``rule(result, settings) -> list[Finding]``

(``result``: its own result, status ok; ``settings``: the diagnosis'
:class:`~nsysdiag.settings.Settings`) is a check the diagnosis finds by itself: it runs
the analysis in every diagnosis and adds the findings the rule returns
(``nsysdiag/diagnosis/rules.py``). A rule is a pure function of measured figures: it runs
no SQL and no analysis. It yields findings only; the layers' scores and the verdict
are the diagnosis' own checks (``diagnosis/checks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .layers import Layer

SEVERITIES = ("critical", "warning", "info")


@dataclass(frozen=True)
class Finding:
    """One observation with its evidence and what to do about it.

    ``layer`` is a :class:`~nsysdiag.layers.Layer` of ``FINDING_LAYERS`` (its name is
    accepted and read as the member); ``severity`` one of critical, warning, info;
    ``evidence`` lines carry numbers with units; ``weight`` orders findings of the same
    severity (larger first).
    """

    layer: Layer
    severity: str
    title: str
    evidence: tuple[str, ...]
    fix: str = ""
    check: str = ""
    weight: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", Layer(self.layer))

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer.value,
            "severity": self.severity,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "check": self.check,
        }
