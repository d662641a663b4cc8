"""Verdict and evidence agree: the verdict never stands against its own measurements.

Three rules, applied after the checks and the verdict's scores:

* a layer whose own check measured and found nothing wrong is not the verdict
  (:func:`contradicted`: PCIe when check E1 measured the transfers and found no
  same-direction contention, no copy slow against the copy model and no pageable copy
  slower than pinned would be); the next layer that clears the minimum score is, else the
  verdict is undetermined and says why;
* the findings the verdict rests on come first (:func:`ordered`): the tail, then the
  verdict layer's warnings;
* a warning of another layer, or an all-clear of the verdict's layer, says that it does
  not match the verdict (:func:`annotated`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .model import Finding, Verdict

if TYPE_CHECKING:
    from .checks import Evidence

CAUSE_LAYERS = ("cpu", "gpu", "pcie")


def contradicted(layer: str, ev: Evidence) -> str | None:
    """Why ``layer``'s own measurements speak against it as the verdict (None: they do
    not)."""
    if layer == "pcie" and ev.pcie_faults is not None and not ev.pcie_faults:
        return ("the transfers analysis measured nothing wrong on the link (no "
                "same-direction contention, no copy slow against the copy model, no "
                "pageable copy slower than pinned would be)")
    return None


def ordered(findings: list[Finding], verdict: Verdict) -> list[Finding]:
    """The findings with those the verdict rests on first (the tail's, then the verdict
    layer's warnings, by severity and weight), the rest after in their order."""
    if verdict.layer not in CAUSE_LAYERS:
        return findings

    def rests_on(f: Finding) -> int:
        if f.check == "A/B":
            return 0
        if f.layer == verdict.layer and f.severity != "info":
            return 1
        if f.layer == verdict.layer:
            return 2
        return 3

    return sorted(findings, key=rests_on)  # stable: severity and weight order within


def annotated(findings: list[Finding], verdict: Verdict) -> list[Finding]:
    """A warning that points at another layer than the verdict, and an all-clear of the
    verdict's own layer, each get an evidence line saying so."""
    if verdict.layer not in CAUSE_LAYERS:
        return findings
    out = []
    for f in findings:
        note = None
        if f.check != "A/B" and f.layer in CAUSE_LAYERS and f.layer != verdict.layer \
                and f.severity != "info":
            note = (f"this points at {f.layer}, not at the verdict ({verdict.layer}): "
                    "the tail attribution and the other checks outweigh it")
        elif f.layer == verdict.layer and f.severity == "info" and f.check in (
                "C1", "D1", "E1"):
            note = (f"this check measured nothing wrong, although the verdict names "
                    f"{verdict.layer}: the verdict rests on the tail attribution")
        out.append(dataclasses.replace(f, evidence=(*f.evidence, note)) if note else f)
    return out
