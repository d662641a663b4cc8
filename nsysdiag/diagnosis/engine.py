"""The diagnosis chain of ``docs/diagnosis.md``: from a latency distribution to a layer.

Step A  is the tail abnormal?  p99/p50 of the unit's latency against two thresholds:
        ``tail_ratio`` (default 2.0: abnormal) and ``elevated_ratio`` (default 1.3: elevated).
Step B  its shape, from the tail-shape classifier (right-skewed -> cpu, multimodal -> gpu,
        flat tail -> pcie).
Steps C/D/E  the checks, each scoring the layer it examines from measured evidence:
        C1 dispatch queue and launch gaps, C2 CPU threads (the rule the os_blocking
        analysis declares: rules.py); D1 kernel duration jitter and
        interference from other GPU work, D2 GPU metrics; E1 transfer bandwidth, pageable
        memory and same-direction contention, E2 topology. CUDA Graphs branch: launch
        overhead ~0, the search moves to memory bandwidth.
The verdict rests on the tail attribution (which components of the slowest units grew
against the median band) and the checks; the shape is one vote among them. When they
disagree the verdict says so and its confidence drops. An abnormal tail gets a layer when
the evidence clears a minimum score; an elevated one only when the attribution and an
independent check of the same layer agree; otherwise it is healthy.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

import numpy as np

from ..analyses import results as results_of
from ..analyses.base import views_read
from ..analyses.capture import CaptureResult
from ..analyses.graphs import GraphsResult
from ..analyses.host_stall import HostStall
from ..analyses.host_stall import measure as measure_host_stall
from ..analyses.ranges import Component, RangesResult
from ..analyses.whole_run import WholeRunResult
from ..analyses.workload import (
    WorkloadResult,
    is_new_size_tail,
    is_size_tail,
    is_transfer_volume_tail,
)
from ..engine import runner
from ..formatting import fmt_ns
from ..layers import CAUSE_LAYERS, Layer
from ..report import Report
from ..settings import Settings
from ..stats.classifier import TailShapeResult, classify_tail
from . import checks, consistency, rules, support
from .model import (
    Analyses,
    Diagnosis,
    Finding,
    GapSummary,
    GraphUse,
    Mechanism,
    Platform,
    TailSummary,
    Verdict,
)

SHAPE_LAYER = {"right_skewed": Layer.CPU, "multimodal": Layer.GPU, "flat_tail": Layer.PCIE}
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


def diagnose(
    target: str | Path | Report,
    *,
    range_name: str | None = None,
    baseline: str | Path | None = None,
    settings: Settings | None = None,
    **open_kwargs: Any,
) -> Diagnosis:
    """Diagnose a trace: the tail's shape, the layer it comes from, and the evidence.

    Parameters
    ----------
    target
        A path (SQLite, Parquet directory, raw report) or an open :class:`~nsysdiag.Report`.
    range_name
        NVTX range to use as the unit of latency (default: chosen automatically).
    baseline
        nvbandwidth ``-j`` JSON output measured on the same machine (transfer check E1).
    settings
        Thresholds; see :class:`Settings`.

    Returns
    -------
    Diagnosis
        ``verdict`` (layer, confidence, summary), ordered ``findings``, ``tail`` figures.
    """
    settings = settings or Settings()
    if isinstance(target, Report):
        return _diagnose(target, range_name, baseline, settings)
    with Report(target, **open_kwargs) as report:
        return _diagnose(report, range_name, baseline, settings)


def _diagnose(
    report: Report, range_name: str | None, baseline: str | Path | None, settings: Settings
) -> Diagnosis:
    probe = report.probe
    baseline_option = str(baseline) if baseline else None
    # the analyses every diagnosis reads, in the order of its evidence, then those that
    # declare a rule (rules.py); the runner orders and overlaps them as each declares
    # (engine.runner)
    plan = [
        results_of.task("launch_gaps", settings=settings, detail=False),
        results_of.task("launch_latency", detail=False, settings=settings),
        results_of.task("transfers", baseline=baseline_option, settings=settings),
        results_of.task("overlap", settings=settings),
        results_of.task("graphs", settings=settings),
        results_of.task("capture", baseline=baseline_option, settings=settings),
        results_of.task("ranges", range_name=range_name, settings=settings),
        results_of.task("gpu_metrics", settings=settings),
        results_of.task("whole_run", settings=settings),
    ]
    plan += rules.tasks(settings, {t.name for t in plan}, range_name=range_name,
                        baseline=baseline_option)
    results = Analyses(runner.run(report, plan))

    ranges = results.ranges
    durations = _durations(ranges)

    def shape(_: None) -> TailShapeResult | None:
        """The tail's shape (the mixture fits: one core), beside jitter (DuckDB)."""
        if durations is None or not durations.size:
            return None
        return classify_tail(durations, rng=settings.seed, min_n=settings.min_units,
                             tight_ratio=settings.tail_ratio,
                             elevated_ratio=settings.elevated_ratio)

    # gpu_idle (a row per gap: up to idle_cause_max_kernels) needs ranges; it runs mostly
    # on one core, beside jitter (DuckDB), and the tail's shape beside jitter without it
    beside_jitter = []
    if probe["kernels"].source_rows <= settings.idle_cause_max_kernels:
        beside_jitter.append(results_of.task("gpu_idle", range_name=range_name,
                                             settings=settings, detail=False))
    beside_jitter.append(runner.Task("tail shape", shape, runner.Runs(one_core=True),
                                     on_report=False))
    if probe.present("kernels"):
        beside_jitter.append(results_of.task("jitter", settings=settings))
    done = runner.run(report, beside_jitter)
    classifier = done.pop("tail shape")
    results.update(done)
    # the evidence in its order: gpu_idle before whole_run, jitter last
    results["whole_run"] = results.pop("whole_run")
    if "jitter" in results:
        results["jitter"] = results.pop("jitter")
    unmeasured = results.get("ranges")  # its message says why there is no unit
    tail = _tail_summary(ranges, durations, classifier, settings,
                         why=unmeasured.message if unmeasured is not None
                         and not unmeasured.ok else None)
    # the host stall's measurement (mostly one core) beside interference and workload
    host = runner.Task("host stall", functools.partial(_host_stall, ranges=ranges, tail=tail,
                                                       settings=settings),
                       runner.Runs(one_core=True), views=views_read("host_stall"))
    done = runner.run(report, [host, *_culprit_tasks(ranges, tail, range_name, settings)])
    host_stall = done.pop("host stall")
    results.update(done)
    tail = _oneoff_with_sizes(tail, results.typed(WorkloadResult))

    graphs = results.typed(GraphsResult)  # an empty one too: in_use False, with its figures
    in_use = bool(graphs.in_use) if graphs is not None else False
    capture = results.capture
    ev = checks.Evidence(results, settings, in_use,
                         host_stall=host_stall,
                         unit_time_ns=float(durations.sum()) if durations is not None else None,
                         lone_outlier=tail.lone_outlier_ns is not None)
    # the declared rules' findings first: sorted by severity and weight below, findings
    # that tie keep this order
    findings = rules.findings(results, settings) + ev.run_all()
    findings += checks.tail_findings(tail, ranges)
    verdict = _verdict(tail, ev, settings, in_use, capture)
    verdict = _without_unit(verdict, tail, results.whole_run)
    # what the capture lost comes first among findings of its severity: it undermines the rest
    findings.sort(key=lambda f: (SEVERITY_ORDER.get(f.severity, 3), f.check != "capture",
                                 -f.weight))
    findings = consistency.relabelled(findings, verdict)
    findings = consistency.annotated(consistency.ordered(findings, verdict), verdict)

    gaps = results.get("launch_gaps")  # its status, whatever it is
    measured = results.launch_gaps
    launch_gaps = GapSummary(
        status=gaps.status if gaps is not None else "not_captured",
        count=int(measured.count or 0) if measured else 0,
        p50_ns=measured.p50_ns if measured else None,
        p90_ns=measured.p90_ns if measured else None,
        p99_ns=measured.p99_ns if measured else None,
        max_ns=measured.max_ns if measured else None,
        share_above_normal_pct=measured.share_above_normal_pct if measured else None,
    )
    return Diagnosis(
        path=str(report.path),
        tail=tail,
        verdict=verdict,
        findings=tuple(findings),
        launch_gaps=launch_gaps,
        cuda_graphs=GraphUse(in_use, graphs),
        captured={k: v.status for k, v in probe.views.items()},
        settings=settings,
        range_name=range_name,
        baseline=str(baseline) if baseline else None,
        classifier=classifier,
        durations_ns=durations,
        analyses=results,
        platform=_platform(capture),
        pid=report.pid,
    )


def _host_stall(report: Report, ranges: RangesResult | None, tail: TailSummary,
                settings: Settings) -> HostStall | None:
    """How the slow units' extra host time is laid out (check C3's measurement), when the
    tail attribution compares slow units with the median band (not a lone outlier)."""
    if ranges is None or not ranges.attribution \
            or tail.lone_outlier_ns is not None:
        return None
    return measure_host_stall(report, ranges, report.probe.present("os_runtime"),
                              settings.host_signature_ratio)


def _culprit_tasks(ranges: RangesResult | None, tail: TailSummary, range_name: str | None,
                   settings: Settings) -> list[runner.Task]:
    """Interference and workload, when the tail is elevated or abnormal (enough units to
    judge it) and what they explain grew: other GPU work (gpu_other) names its culprit; own
    kernel or copy time, launch or copy calls: more work vs slower work. None otherwise,
    so a healthy trace costs nothing more."""
    if ranges is None or tail.level not in ("elevated", "abnormal") \
            or _too_few_units(tail, settings) is not None:
        return []

    def grew(c: Component) -> bool:
        g = ranges.growth(c)
        return g is not None and (g.share_of_growth or 0) >= settings.culprit_share

    # workload always: slow units that are simply bigger may absorb the time on any side
    # (more host time preparing a bigger input as much as more kernels)
    return [results_of.task(name, range_name=range_name, settings=settings)
            for name, components in (("interference", (Component.GPU_OTHER,)),
                                     ("workload", tuple(Component)))
            if any(grew(c) for c in components)]


def _platform(capture: CaptureResult | None) -> Platform:
    """The GPUs with the host link assumed for each, and the versions the export records."""
    if capture is None:
        return Platform()
    return Platform(tuple(capture.gpus()), capture.driver_version, capture.cuda_version)


def _durations(ranges: RangesResult | None) -> np.ndarray | None:
    """The counted units' durations (ranges: the ranges analysis' result when it
    measured), ns; None without."""
    if ranges is None or "instances" not in ranges.tables:
        return None
    table = ranges.tables["instances"]
    if "counted" in table.column_names:  # warm-up units left out (ranges.warmup)
        table = table.filter(table.column("counted"))
    col = table.column("duration_ns").to_numpy(zero_copy_only=False)
    col = np.asarray(col, dtype=float)
    return col[np.isfinite(col) & (col > 0)]


def _tail_summary(
    ranges: RangesResult | None, d: np.ndarray | None, classifier, settings: Settings,
    why: str | None = None,
) -> TailSummary:
    """The tail's figures from the units' durations ``d``; without units, ``why`` (the
    ranges analysis' message when it did not measure) is the reason."""
    if ranges is None or d is None or d.size == 0:
        return TailSummary(
            None, None, 0, None, None, None, None, "insufficient_data", 0.0, "unknown",
            unit_reason=why,
            min_units=settings.min_units,
        )
    p50, p90, p99 = (float(v) for v in np.percentile(d, [50, 90, 99]))
    outlier, outlier_ratio = lone_outlier(d, settings)
    ratio = p99 / p50 if p50 > 0 else None
    shape = classifier.shape if classifier is not None else "insufficient_data"
    if shape == "insufficient_data" or ratio is None:
        level = "unknown"
    elif ratio > settings.tail_ratio:
        level = "abnormal"
    elif ratio > settings.elevated_ratio:
        level = "elevated"
    else:
        level = "normal"
    return TailSummary(
        unit=ranges.unit,
        unit_source=ranges.unit_source,
        n=int(d.size),
        p50_ns=p50,
        p90_ns=p90,
        p99_ns=p99,
        p99_over_p50=ratio,
        shape=shape,
        shape_confidence=float(classifier.confidence) if classifier is not None else 0.0,
        shape_probabilities=(
            classifier.probabilities.to_dict()
            if classifier is not None and classifier.probabilities is not None
            else None
        ),
        level=level,
        runner_up=ranges.unit_runner_up,
        unit_reason=ranges.unit_reason,
        n_warmup=ranges.n_warmup,
        warmup_calls=ranges.warmup_calls,
        warmup_reason=ranges.warmup_reason,
        later_oneoff=ranges.later_oneoff_reason,
        tail_n=int(ranges.tail_n or 0),
        min_units=settings.min_units,
        n_standing_out=int(np.count_nonzero(d > settings.elevated_ratio * p50)),
        lone_outlier_ns=outlier,
        lone_outlier_ratio=outlier_ratio,
    )


def lone_outlier(d: np.ndarray, settings: Settings) -> tuple[float | None, float | None]:
    """The slowest unit and its ratio to the second slowest when that ratio exceeds
    ``settings.lone_outlier_ratio`` (one extreme unit, not a tail); else (None, None)."""
    if d.size < 2:
        return None, None
    second, top = (float(v) for v in np.partition(d, d.size - 2)[-2:])
    if second > 0 and top > settings.lone_outlier_ratio * second:
        return top, top / second
    return None, None


def _without_unit(verdict: Verdict, tail: TailSummary,
                  whole: WholeRunResult | None) -> Verdict:
    """The answer without units: when no unit repeats (or too few do), what dominated the
    whole run (the whole_run analysis) instead of a bare "undetermined"."""
    if verdict.layer not in (Layer.UNDETERMINED, Layer.INSUFFICIENT) \
            or whole is None or not whole.dominant_summary:
        return verdict
    if tail.unit is None:
        return dataclasses.replace(
            verdict, summary=f"No repeated unit: {whole.dominant_summary}. "
                             f"(Why no unit: {verdict.summary.split(': ', 1)[-1]})")
    if verdict.layer == Layer.INSUFFICIENT or tail.shape == "insufficient_data" \
            or tail.level == "unknown":
        return dataclasses.replace(
            verdict, summary=f"{verdict.summary} Over the whole run: {whole.dominant_summary}.")
    return verdict


def _verdict(
    tail: TailSummary,
    ev: checks.Evidence,
    settings: Settings,
    graphs_in_use: bool,
    capture: CaptureResult | None = None,
) -> Verdict:
    if tail.unit is None:
        # what the capture lost is said even without a unit (it may be why there is none)
        return _incomplete_capture(Verdict(
            Layer.UNDETERMINED,
            0.0,
            "No repeated unit of work to measure latency on: " + ev.unit_reason(),
        ), capture, settings)
    verdict = (_too_few_units(tail, settings) or _nvtx_only(tail, capture)
               or _layer_verdict(tail, ev, settings, graphs_in_use))
    verdict = _supported(_lone_outlier_note(verdict, tail), tail, ev, settings)
    return _incomplete_capture(verdict, capture, settings)


def _supported(verdict: Verdict, tail: TailSummary, ev: checks.Evidence,
               settings: Settings) -> Verdict:
    """Rule: a named cause is no surer than the slow units, judged one by one, support it
    (:mod:`.support`): its confidence is at most the chance that most of them carry it,
    and under ``support_min_units`` units not confident (at most ``unsettled_confidence``,
    however large their growth); the verdict says on how many it rests when that bound
    lowers it. A cause that fewer than half of them carry is the cause of a few units,
    not of the tail: the verdict is undetermined and says what the units carry. Where what
    grew decides (the layer explains at least ``decisive_share`` of the tail's extra
    latency), the verdict is as sure as that bound, above the score's margin too."""
    r = ev.results.ranges
    if verdict.layer not in (*CAUSE_LAYERS, Layer.WORKLOAD) or r is None:
        return verdict
    found = support.measure(r, verdict.layer, settings, ev.pageable_dominant(),
                            queueing=verdict.mechanism is Mechanism.QUEUEING)
    if found is None:
        return verdict
    if verdict.confidence <= found.bound:
        # what grew decides (the layer explains most of the tail's extra latency) and the
        # slow units, one by one, carry it: the verdict is as sure as they make it
        if verdict.layer in CAUSE_LAYERS \
                and _evidence_decides(verdict.layer, ev.attribution_shares(), settings):
            return dataclasses.replace(verdict, confidence=round(
                min(found.bound, settings.confidence_max), 3))
        return verdict
    if 2 * found.carried < found.judged:
        # the slow units' mean names a cause most of them do not carry: a few units (or
        # one) carry the mean, and the cause is theirs, not the tail's
        others = {layer: s for layer in (*CAUSE_LAYERS, Layer.WORKLOAD) if layer != verdict.layer
                  and (s := support.measure(r, layer, settings, ev.pageable_dominant()))
                  is not None and 2 * s.carried >= s.judged > 0}
        carry = "; ".join(f"{s.carried} carry {layer}" for layer, s in others.items())
        return dataclasses.replace(
            verdict, layer=Layer.UNDETERMINED, mechanism=None,
            confidence=round(float(found.bound), 3),
            summary=f"The {tail.level} tail of '{tail.unit}' ({_ratio_text(tail)}) is not "
            f"settled: the slowest units' mean points at {verdict.layer} "
            f"({verdict.mechanism.words.split(':')[0] if verdict.mechanism else 'its growth'}"
            "), but "
            f"judged one by one {found.text()}"
            + (f" ({carry})" if carry else "")
            + ": a few units carry the mean, and what they carry is not the tail's cause.")
    return dataclasses.replace(
        verdict, confidence=round(float(found.bound), 3),
        summary=verdict.summary + f" The cause rests on {found.carried} "
        f"unit{'s' if found.carried != 1 else ''}: {found.text()}, so most such units "
        f"carry it with confidence {found.bound:.2f}.")


def _ratio_text(tail: TailSummary) -> str:
    return f"p99/p50 = {tail.p99_over_p50:.2f}" if tail.p99_over_p50 is not None else "no p99/p50"


def _too_few_units(tail: TailSummary, settings: Settings) -> Verdict | None:
    """Rule: no verdict from a handful of units (fewer than ``settings.min_units``) or from
    too few for the shape classifier."""
    if tail.n >= settings.min_units and tail.shape != "insufficient_data" \
            and tail.level != "unknown":
        return None
    need = max(settings.min_units, tail.n + 1)
    return Verdict(
        Layer.INSUFFICIENT,
        0.0,
        f"Insufficient data: {tail.n} instances of '{tail.unit}' are too few to judge a "
        f"latency tail (at least {need} needed; {_ratio_text(tail)} rests on {tail.n}).",
    )


def _nvtx_only(tail: TailSummary, capture: CaptureResult | None) -> Verdict | None:
    """Rule: a capture of NVTX ranges alone measures the units' latency and shape but cannot
    say which layer a tail comes from."""
    if capture is None or not capture.nvtx_only:
        return None
    return Verdict(
        Layer.UNDETERMINED,
        0.0,
        f"The tail of '{tail.unit}' is {tail.level} ({_ratio_text(tail)}, shape {tail.shape_word}, "
        f"{tail.n} instances), but the capture holds NVTX ranges only: without a CUDA trace "
        "no CPU, GPU or transfer time can be attributed to it (capture with nsys profile "
        "--trace=cuda,nvtx).",
    )


def _lone_outlier_note(verdict: Verdict, tail: TailSummary) -> Verdict:
    """Rule: one extreme unit is named, and the slow-unit comparison it would carry is not
    counted (``Evidence(lone_outlier=True)`` leaves the attribution out)."""
    if tail.lone_outlier_ns is None:
        return verdict
    note = (f" One unit ({fmt_ns(tail.lone_outlier_ns)}, {tail.lone_outlier_ratio:.0f}x the "
            "next slowest) is a lone outlier: the slow-unit comparison is left out of the "
            "verdict.")
    return dataclasses.replace(verdict, summary=verdict.summary + note)


def _incomplete_capture(verdict: Verdict, capture: CaptureResult | None,
                        settings: Settings) -> Verdict:
    """Rule: a capture that lost kernel records or launch calls (or that nsys says dropped
    events) caps a named layer's confidence at ``incomplete_confidence``, and the verdict
    says what is missing."""
    if capture is None or not capture.incomplete or verdict.layer == Layer.INSUFFICIENT:
        return verdict
    lost = []
    if capture.launches_without_kernel:
        lost.append(f"{capture.launches_without_kernel} of {capture.launch_calls} launch calls "
                    "have no kernel record")
    if capture.kernels_without_launch:
        lost.append(f"{capture.kernels_without_launch} of {capture.kernels} kernels have no "
                    "launch call")
    if capture.dropped_warnings:
        lost.append("nsys warns that events may have been dropped")
    conf = (min(verdict.confidence, settings.incomplete_confidence)
            if verdict.layer in CAUSE_LAYERS else verdict.confidence)
    return dataclasses.replace(
        verdict, confidence=round(conf, 3),
        summary=verdict.summary + " The capture is incomplete (" + "; ".join(lost)
        + "): the figures miss that work.")


def _layer_verdict(
    tail: TailSummary, ev: checks.Evidence, settings: Settings, graphs_in_use: bool
) -> Verdict:
    shape_layer = SHAPE_LAYER.get(tail.shape)
    attr = ev.attribution_shares()  # layer -> share of the tail's extra latency
    scores = {}
    for layer in CAUSE_LAYERS:
        s = (settings.score_attribution_weight * attr.get(layer, 0.0)
             + settings.score_check_weight * ev.check_score(layer))
        if shape_layer == layer:
            s += settings.score_shape_weight * tail.shape_confidence
        scores[layer] = round(min(1.0, s), 4)
    best = max(scores, key=lambda k: scores[k])
    top_attr = max(attr, key=lambda k: attr[k]) if attr else None
    ratio = f"p99/p50 = {tail.p99_over_p50:.2f}"
    if graphs_in_use:
        ratio += ", CUDA Graphs in use"

    signature = ev.host_signature()
    corroborated = (
        attr.get(best, 0.0) >= settings.corroborate_attribution
        and ev.check_score(best) >= settings.corroborate_check
        and (best != Layer.CPU or tail.shape == "right_skewed"
             or _slow_mode_decides(tail, best, attr, settings) or signature is not None)
    ) or (best == Layer.CPU and signature is not None) or ev.more_work()
    if tail.level == "normal" or (tail.level == "elevated" and not corroborated):
        conf = (settings.normal_healthy_confidence if tail.level == "normal"
                else settings.elevated_healthy_confidence)
        if tail.shape == "tight" and tail.level == "normal":
            conf = max(conf, min(settings.confidence_max, tail.shape_confidence))
        if tail.level == "elevated":
            text = (
                f"The latency tail of '{tail.unit}' is mildly elevated ({ratio}) but no "
                f"layer's evidence corroborates a cause (best: {best}, score {scores[best]:.2f})."
            )
        else:
            text = f"The latency tail of '{tail.unit}' is tight ({ratio})."
        return consistency.healthy_checked(Verdict(Layer.HEALTHY, conf, text, scores), ev)
    best, vetoed = _agreeing(best, scores, ev)
    # more work per unit, measured, names the workload whatever the layers score
    more_work = next((w for layer in dict.fromkeys((best, Layer.GPU, Layer.CPU))
                      if (w := _workload_explains(layer, ev, settings)) is not None), None) \
        if ev.more_work() else None
    if vetoed and scores[best] < settings.min_score and more_work is None:
        return Verdict(
            Layer.UNDETERMINED,
            round(scores[best], 3),
            f"The tail of '{tail.unit}' is {tail.level} ({ratio}, shape {tail.shape_word}); the "
            f"evidence leans to {vetoed[0]}, but {vetoed[1]}, and no other layer's evidence "
            "is strong enough to name a cause.",
            scores,
        )
    if scores[best] < settings.min_score and more_work is None:
        return Verdict(
            Layer.UNDETERMINED,
            round(scores[best], 3),
            f"The tail of '{tail.unit}' is {tail.level} ({ratio}, shape {tail.shape_word}) "
            "but no layer's evidence is strong enough to name a cause.",
            scores,
        )
    others = sorted((v for k, v in scores.items()
                     if k != best and not (vetoed and k == vetoed[0])), reverse=True)
    margin = scores[best] - (others[0] if others else 0.0)
    conf = settings.confidence_base + settings.confidence_span * min(1.0, scores[best]) \
        * min(1.0, settings.confidence_margin_floor + settings.confidence_margin_gain * margin)
    notes = []
    if shape_layer and shape_layer != best:
        conf *= (settings.shape_outvoted_factor if _evidence_decides(best, attr, settings)
                 else settings.shape_disagrees_factor)
        notes.append(_shape_disagreement(tail, shape_layer, best))
    if top_attr and top_attr != best \
            and attr.get(top_attr, 0) > settings.attribution_leans_share:
        conf *= settings.attribution_leans_factor
        notes.append(f"the tail attribution leans to {top_attr}")
    if tail.level == "elevated":
        conf *= settings.elevated_factor
    if vetoed:
        conf *= settings.vetoed_factor
        notes.append(f"{vetoed[0]} scored higher, but {vetoed[1]}")
    mechanism = ev.mechanism(best)
    strength = _signature(best, mechanism, ev)
    if strength is not None:
        # a mechanism's own signature was measured: the verdict is as sure as it is strong
        conf = max(conf, settings.signature_base + settings.signature_span * strength)
    what = mechanism.words if mechanism is not None else best
    if mechanism is Mechanism.SLOW_TRANSFERS and ev.pcie_faults:
        # the verdict names what E1 measured: no contention is no "contention"
        what = ("slow host-device transfers (" + ", ".join(ev.pcie_faults)
                + "; no same-direction contention)")
    summary = (
        f"The {tail.level} tail of '{tail.unit}' ({ratio}, shape {tail.shape_word}) comes from "
        f"{what}: {ev.reason(best)}"
    )
    workload = _workload_explains(best, ev, settings) or more_work
    if workload is not None:
        best = Layer.WORKLOAD
        w = ev.results.workload
        # the size clause of slow units that are the first of their size: a cost per size
        mechanism = (Mechanism.NEW_SIZES if w is not None and is_new_size_tail(w)
                     and workload == w.size_line() else Mechanism.MORE_WORK)
        if w is not None and w.kernels_explain is not None:
            conf = max(conf, settings.signature_base
                       + settings.signature_span * min(1.0, max(0.0, w.kernels_explain)))
        summary = (f"The {tail.level} tail of '{tail.unit}' ({ratio}, shape {tail.shape_word}) "
                   f"comes from {mechanism.words}: {workload}")
        notes = [n for n in notes if not n.startswith("the shape")]
    elif best == Layer.GPU and (culprit := _culprit_clause(ev)):
        summary += f"; {culprit}"
    if notes:
        summary += " (note: " + "; ".join(notes) + ")"
    return Verdict(best, round(min(conf, settings.confidence_max), 3), summary + ".", scores,
                   mechanism)


def _signature(layer: Layer, mechanism: Mechanism | None, ev: checks.Evidence) -> float | None:
    """The strength (0-1) of the named mechanism's own signature, when one was measured:
    the host layout's share of the growth (C3), the share of slow units other GPU work ran
    in, the share of the growth the extra bytes explain (transfer volume)."""
    if layer in ev.signatures:
        return ev.signatures[layer]
    if mechanism is Mechanism.TRANSFER_VOLUME:
        w = ev.results.workload
        if w is not None and w.copies_explain is not None:
            return min(1.0, max(0.0, w.copies_explain))
    return None


def _agreeing(best: Layer, scores: dict[str, float], ev: checks.Evidence
              ) -> tuple[str, tuple[str, str] | None]:
    """The best-scoring layer whose own measurements do not speak against it, and (layer,
    reason) of the layer passed over (None when none was)."""
    reason = consistency.contradicted(best, ev)
    if reason is None:
        return best, None
    others = [k for k in sorted(scores, key=lambda k: -scores[k])
              if k != best and consistency.contradicted(k, ev) is None]
    return (others[0] if others else best), (best, reason)


def _evidence_decides(layer: Layer, attr: dict[Layer, float], settings: Settings) -> bool:
    """What grew in the slow units decides: ``layer`` explains most of their extra
    latency (at least ``decisive_share``), so a shape pointing elsewhere is outvoted."""
    return attr.get(layer, 0.0) >= settings.decisive_share


def _slow_mode_decides(tail: TailSummary, layer: Layer, attr: dict[Layer, float],
                       settings: Settings) -> bool:
    """An elevated tail with a slow mode of its own (multimodal or flat tail, not the
    tight body of a healthy trace) whose growth ``layer`` decides: the shape's map would
    send it elsewhere (a thread holding the GIL on some requests is cpu, not gpu)."""
    return tail.shape in ("multimodal", "flat_tail") \
        and _evidence_decides(layer, attr, settings)


def _shape_disagreement(tail: TailSummary, shape_layer: Layer, best: Layer) -> str:
    """The note saying that the shape points elsewhere than what grew in the slow units."""
    return (f"the shape ({tail.shape}) points at {shape_layer}, but what grew in the slow "
            f"units points at {best}; the shape is one vote, the growth decides")


def _workload_explains(best: Layer, ev: checks.Evidence, settings: Settings) -> str | None:
    """The workload clause when the slow units are simply bigger (``is_size_tail``: bytes,
    kernels or launch calls that latency follows and that explain most of the extra
    latency, whichever side absorbs it), or do more work at the median's per-kernel speed
    and that work is what grew: own kernel time (gpu) or launch calls (cpu) grew most, or
    the extra kernels explain at least ``work_explains`` of the extra latency (more work
    grows the host's time around each launch and the GPU's waits as well). None when the
    slow units queued behind their own earlier work: their windows hold its kernels."""
    w = ev.results.workload
    r = ev.results.ranges
    if w is None or r is None or ev.queued_behind_own_work():
        return None
    top = {Layer.GPU: r.top_gpu_component, Layer.CPU: r.top_cpu_component}.get(best)
    if not ev.more_work() or (
            top not in (Component.GPU_OWN_KERNEL, Component.CPU_LAUNCH)
            and (w.kernels_explain or 0.0) < settings.work_explains):
        # slow units that are simply bigger (bytes, kernels, launch calls), whichever side
        # absorbs the time; more bytes that the copies themselves absorb stay a
        # transfer-volume tail (check E1)
        if is_size_tail(w, settings) and not is_transfer_volume_tail(w, settings):
            return w.size_line()
        return None
    explains = (f"; the extra kernels explain {w.kernels_explain:.0%} of the slow units' "
                "extra latency" if w.kernels_explain is not None else "")
    return w.line() + explains


def _oneoff_with_sizes(tail: TailSummary, w: WorkloadResult | None) -> TailSummary:
    """The mid-run line says when the one-off calls come with new sizes (the workload
    analysis' ``oneoff_line``): a cache growing with the work, not a fault."""
    line = w.oneoff_line() if w is not None else None
    if line is None or not tail.later_oneoff:
        return tail
    return dataclasses.replace(tail, later_oneoff=f"{tail.later_oneoff}; {line}")


def _culprit_clause(ev: checks.Evidence) -> str | None:
    """The other GPU work of the slow units, by name, when other work is what grew."""
    i = ev.results.interference
    r = ev.results.ranges
    if i is None or r is None or r.top_gpu_component is not Component.GPU_OTHER:
        return None
    line = i.culprit_line()
    if line and i.own_work:
        return f"what ran instead: {line}"
    return f"other work: {line}" if line else None


__all__ = ["Diagnosis", "Finding", "Settings", "TailSummary", "Verdict", "diagnose"]
