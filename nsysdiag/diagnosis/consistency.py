"""Verdict and evidence agree: the verdict never stands against its own measurements.

Five rules, applied after the checks and the verdict's scores:

* a layer whose own check measured and found nothing wrong is not the verdict
  (:func:`contradicted`: PCIe when check E1 measured the transfers and found no
  same-direction contention, no copy slow against the copy model and no pageable copy
  slower than pinned would be); the next layer that clears the minimum score is, else the
  verdict is undetermined and says why;
* the findings the verdict rests on come first (:func:`ordered`): the tail, then the
  verdict layer's warnings; the tail's finding names the verdict's layer, never another
  (:func:`relabelled`);
* a warning of another layer, or an all-clear of the verdict's layer, says that it does
  not match the verdict (:func:`annotated`);
* a healthy verdict on an elevated tail whose slow units' growth sits in one host stretch
  or wait, short of what names a cause, is not confident, and says where the growth sits
  (:func:`healthy_checked`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..analyses.host_stall import Layout
from ..formatting import fmt_ns
from ..layers import CAUSE_LAYERS, Layer
from .model import Finding, Verdict

if TYPE_CHECKING:
    from .checks import Evidence



def contradicted(layer: Layer, ev: Evidence) -> str | None:
    """Why ``layer``'s own measurements speak against it as the verdict (None: they do
    not)."""
    if layer == Layer.PCIE and ev.pcie_faults is not None and not ev.pcie_faults:
        return ("the transfers analysis measured nothing wrong on the link (no "
                "same-direction contention, no copy slow against the copy model, no "
                "pageable copy slower than pinned would be)")
    return None


def healthy_checked(verdict: Verdict, ev: Evidence) -> Verdict:
    """A healthy verdict that the slow units' host layout speaks against: most of their
    growth sits in one long stretch of the launching thread, or in a wait before their
    work began, but short of the signature that names a cause (the stretch not far enough
    above the median band's, or the GPU busy meanwhile). Its confidence is capped and the
    summary says where the growth sits."""
    if verdict.layer != Layer.HEALTHY:
        return verdict
    hs = ev.host_stall()
    if hs is None or hs.layout not in (Layout.QUEUED, Layout.STALL_BEFORE,
                                       Layout.STALL_BETWEEN) or hs.explains() < 0.5:
        return verdict
    where = ("a wait before their work began" if hs.layout is Layout.QUEUED
             else "one stretch of the launching thread without a CUDA call")
    return dataclasses.replace(
        verdict, confidence=min(verdict.confidence, ev.settings.unsettled_confidence),
        summary=verdict.summary + f" Yet {hs.explains():.0%} of the slow units' extra "
        f"{fmt_ns(hs.duration_growth_ns)} sits in {where}, short of what names a cause: "
        "a host stall the capture does not settle.")


def relabelled(findings: list[Finding], verdict: Verdict) -> list[Finding]:
    """The tail's own finding (check A/B) names the verdict's layer, or none ("info") when
    the verdict names no cause: what grew most in the slow units is in its evidence, and a
    "[pcie] latency tail" under a healthy verdict would read as a claim the verdict does
    not make."""
    layer = verdict.layer if verdict.layer in (*CAUSE_LAYERS, Layer.WORKLOAD) else Layer.INFO
    return [dataclasses.replace(f, layer=layer) if f.check == "A/B" and f.layer != layer
            else f for f in findings]


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
    verdict's own layer, each get an evidence line saying so; under a healthy verdict, a
    warning about a layer says that it is about the whole run, not the tail."""
    if verdict.layer == Layer.HEALTHY:
        return [dataclasses.replace(f, evidence=(
            *f.evidence, f"this is about the whole run's {f.layer} efficiency, not the latency "
            "tail: the verdict finds no cause of the tail"))
            if f.check != "A/B" and f.layer in CAUSE_LAYERS and f.severity != "info" else f
            for f in findings]
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
