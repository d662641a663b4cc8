"""A self-contained HTML report of a diagnosis: verdict, plots, timelines and findings.

The page opens offline: styles are inline, plots are inline SVG drawn in Python
(:mod:`nsysdiag.render.svg`), and there is no script, font, image or stylesheet to fetch.

The markup lives in Jinja2 templates (``templates/``: ``report.html.j2``, the layout;
one template per section; ``_macros.html.j2``, the cards, tables and legends they share;
``report.css``). This module shapes the diagnosis into small view models - frozen
records of already formatted text - and renders them. Autoescaping is on, so every
string from a trace (kernel names, NVTX text, process names, paths, finding text) is
escaped wherever a template puts it; the only markup handed to the templates is the SVG
of :mod:`nsysdiag.render.svg`, built from values escaped with :func:`html.escape` and
marked safe here (:class:`markupsafe.Markup`).

Sections, each skipped with a note when its analysis did not run or has no data:

1. the verdict (layer, confidence, summary) and the tail in numbers;
2. the unit latency histogram (log-spaced bins) with the fitted model's density;
3. the launch-gap distribution (log scale) with the normal and P99 thresholds (5 us / 20 us
   by default: ``Settings.gap_normal_ns``, ``gap_p99_ns``);
4. GPU idle time by cause;
5. transfer bandwidth by copy kind against the host link;
6. the tail attribution: median band vs slowest units, stacked by component;
7. timelines of a few slowest units (and a median one) - these need the open report, so
   they are gathered by :func:`collect_timelines` before the report is closed (it lives
   in :mod:`nsysdiag.diagnosis.timelines`, its queries in the analyses layer, and is
   re-exported here: this module runs no SQL, it draws what it is given);
8. kernel duration jitter; the culprit (other GPU work, work per unit);
9. findings with evidence and fixes; what was captured; settings.

Examples
--------
>>> from nsysdiag.diagnosis.engine import diagnose            # doctest: +SKIP
>>> with nsysdiag.open("trace.sqlite") as rep:                 # doctest: +SKIP
...     d = diagnose(rep)
...     write_html(d, "report.html", timelines=collect_timelines(rep, d))
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import math
import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from dataclasses import replace as _replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import numpy as np
from markupsafe import Markup

from .._version import __version__
from ..analyses.gpu_idle import MEANING as IDLE_MEANING
from ..analyses.ranges import Component, RangesResult
from ..analyses.timelines import ApiSpan, GpuSpan, NvtxSpan, UnitTimeline
from ..analyses.workload import WorkloadResult
from ..diagnosis.model import LINK_SOURCES, TailSummary
from ..diagnosis.timelines import collect_timelines
from ..formatting import finite, fmt_bytes, fmt_ns
from .svg import (
    BAR,
    CURVE,
    INK,
    PALETTE,
    Bar,
    Curve,
    Lane,
    Span,
    VLine,
    bar_chart,
    fmt_num,
    histogram,
    scatter,
    stacked_hbars,
    timeline,
)

if TYPE_CHECKING:

    from ..diagnosis.model import Diagnosis
    from ..report import Report

__all__ = ["TEMPLATES", "collect_timelines", "render_html", "write_html", "write_text_atomic"]

#: the templates of the pages (the diagnosis report; ``ranks.html.j2`` is
#: ``nsysdiag ranks``'), in the package's ``render/templates`` folder
TEMPLATES = (
    "report.html.j2",
    "_macros.html.j2",
    "report.css",
    "verdict.html.j2",
    "latency.html.j2",
    "gaps.html.j2",
    "idle.html.j2",
    "transfers.html.j2",
    "attribution.html.j2",
    "timelines.html.j2",
    "jitter.html.j2",
    "culprit.html.j2",
    "findings.html.j2",
    "captured.html.j2",
    "ranks.html.j2",
)

LAYER_COLORS = {
    "healthy": "#2f9e44",
    "cpu": "#e8890c",
    "gpu": "#ae3ec9",
    "pcie": "#1098ad",
    "workload": "#3b5bdb",
    "undetermined": "#7b8794",
    "insufficient": "#7b8794",
    "graph": "#1098ad",
    "info": "#7b8794",
}
SEVERITY_COLORS = {"critical": "#e03131", "warning": "#e8890c", "info": "#4c78a8"}
LAYER_NAMES = {
    "healthy": "Healthy",
    "cpu": "CPU scheduling",
    "gpu": "GPU execution",
    "pcie": "PCIe transfers",
    "workload": "Workload size",
    "undetermined": "Undetermined",
    "insufficient": "Too few units",
}
#: CUDA API categories of the ``api_calls`` view and their colours in the timelines
CATEGORY_COLORS = {
    "launch": "#4c78a8",
    "graph_launch": "#72b7b2",
    "memcpy": "#f58518",
    "memset": "#eeca3b",
    "sync": "#e45756",
    "memory": "#b279a2",
    "other": "#9aa5b1",
}
#: NVTX ranges by nesting depth (neutral, so they do not read as API or GPU work)
NVTX_COLORS = ("#52606d", "#7b8794", "#9aa5b1", "#616e7c")
GPU_COLORS = {
    "kernel": "#54a24b",
    "HtoD": "#f58518",
    "DtoH": "#9d755d",
    "DtoD": "#b279a2",
    "memset": "#eeca3b",
    "copy": "#ff9da6",
}
SHAPE_TEXT = {
    "tight": "The distribution is tight: the tail is not abnormal.",
    "right_skewed": "One mode with a long right tail: the method reads this as CPU-side "
    "queueing or scheduling delay (check C).",
    "multimodal": "Two or more modes: the method reads this as GPU execution time that is "
    "intermittently inflated (check D).",
    "flat_tail": "A flat, uniform long tail: the method reads this as PCIe bandwidth "
    "contention (check E).",
    "insufficient_data": "Too few units to judge the shape.",
}


# ============================================================================ view models
# What the templates are given: frozen records of text already formatted for people
# (durations with fmt_ns, sizes with fmt_bytes, shares as percentages) and, for plots,
# the SVG as Markup. The templates add markup only; autoescaping escapes every value.


@dataclass(frozen=True)
class Card:
    """A small figure card: a label, the value and an optional line under it."""

    label: str
    value: str
    sub: str = ""


@dataclass(frozen=True)
class Table:
    """A table of text cells (None shows empty); ``numeric`` columns align right."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]
    cls: str = ""


@dataclass(frozen=True)
class LegendItem:
    label: str
    color: str


@dataclass(frozen=True)
class Plot:
    """An inline SVG plot (built by :mod:`nsysdiag.render.svg`) and the legend under it."""

    svg: Markup
    legend: tuple[LegendItem, ...] = ()


@dataclass(frozen=True)
class Score:
    layer: str
    value: str  #: the evidence score, two decimals
    width_pct: str  #: the bar's width, % of its track
    color: str


@dataclass(frozen=True)
class VerdictView:
    layer: str  #: the verdict's layer, upper case
    name: str  #: the layer's name for people
    color: str
    confidence: str
    meter_pct: str  #: the confidence meter's width, %
    summary: str
    unit_reason: str
    scores: tuple[Score, ...]
    has_unit: bool
    cards: tuple[Card, ...]


@dataclass(frozen=True)
class LatencyView:
    unit: str  #: "" when there is no unit
    n: int
    missing: str = ""  #: why there is no histogram ("" when there is one)
    plot: Plot | None = None
    shape: str = ""
    shape_name: str = ""
    shape_confidence: str = ""
    shape_text: str = ""
    fit: str = ""  #: best model, dip test, modes, tail flatness
    models: Table | None = None  #: the classifier's model comparison (BIC)


@dataclass(frozen=True)
class GapsView:
    normal: str  #: the settings' normal gap
    p99: str  #: the settings' P99 threshold
    missing: str = ""
    cards: tuple[Card, ...] = ()
    plot: Plot | None = None
    empty: str = ""  #: shown instead of the plot when there are no gaps
    streams: Table | None = None


@dataclass(frozen=True)
class IdleView:
    missing: str = ""
    cards: tuple[Card, ...] = ()
    causes: Table | None = None
    streams: Table | None = None


@dataclass(frozen=True)
class TransfersView:
    missing: str = ""
    cards: tuple[Card, ...] = ()
    plot: Plot | None = None
    empty: str = ""
    link_note: str = ""
    host: Table | None = None


@dataclass(frozen=True)
class AttributionView:
    band: str  #: "the median band (n units around P50)"
    who: str  #: "the slowest 5% (n units)"
    missing: str = ""
    plot: Plot | None = None
    table: Table | None = None
    slowest: Table | None = None
    #: per side, why a component grew by more than the units (what shrank)
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimelineView:
    label: str
    stats: str  #: duration, multiple of the median, GPU busy share, ... ("" without a window)
    note: str
    svg: Markup | None


@dataclass(frozen=True)
class TimelinesView:
    units: tuple[TimelineView, ...] | None  #: None when no timelines were collected
    legend: tuple[LegendItem, ...] = ()


@dataclass(frozen=True)
class JitterView:
    missing: str = ""
    table: Table | None = None


@dataclass(frozen=True)
class CulpritView:
    streams: Table | None = None
    workload: str = ""
    scatter: Markup | None = None
    bins: Table | None = None


@dataclass(frozen=True)
class FindingView:
    number: int
    severity: str
    color: str
    layer: str
    layer_color: str
    title: str
    check: str
    evidence: tuple[str, ...]
    fix: str


@dataclass(frozen=True)
class FindingsView:
    findings: tuple[FindingView, ...]


@dataclass(frozen=True)
class CapturedView:
    views: Table
    analyses: Table
    settings: Table


@dataclass(frozen=True)
class Section:
    """One ``<section>`` of the page: its id, its entry in the table of contents, the
    template that draws it and that template's view."""

    id: str
    label: str
    template: str
    view: Any


# ============================================================================ public API


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment: autoescaping on, and an undefined name (a view field
    that was renamed) is an error, not an empty string."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(__package__, "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_html(
    diagnosis: Diagnosis,
    *,
    timelines: Sequence[UnitTimeline] | None = None,
    title: str | None = None,
) -> str:
    """The report of ``diagnosis`` as one self-contained HTML document.

    Parameters
    ----------
    diagnosis : Diagnosis
        The result of :func:`nsysdiag.diagnosis.engine.diagnose`.
    timelines : sequence of UnitTimeline, optional
        Per-unit timelines from :func:`collect_timelines` (gathered while the report was
        open). Without them the timeline section says how to get them.
    title : str, optional
        Page title; default ``nsysdiag: <trace file name>``.

    Returns
    -------
    str
        The HTML text (UTF-8 when written).
    """
    d = diagnosis
    name = Path(str(d.path)).name or str(d.path)
    sections = (
        Section("latency", "Latency", "latency.html.j2", _latency(d)),
        Section("gaps", "Launch gaps", "gaps.html.j2", _gaps(d)),
        Section("idle", "GPU idle by cause", "idle.html.j2", _idle(d)),
        Section("transfers", "Transfers", "transfers.html.j2", _transfers(d)),
        Section("attribution", "Tail attribution", "attribution.html.j2", _attribution(d)),
        Section("timelines", "Slowest units", "timelines.html.j2", _timelines(d, timelines)),
        Section("jitter", "Kernel jitter", "jitter.html.j2", _jitter(d)),
        Section("culprit", "Culprit", "culprit.html.j2", _culprit(d)),
        Section("findings", f"Findings ({len(d.findings)})", "findings.html.j2", _findings(d)),
        Section("captured", "Captured data", "captured.html.j2", _captured(d)),
    )
    page = environment().get_template("report.html.j2").render(
        title=title or f"nsysdiag: {name}",
        path=str(d.path),
        version=__version__,
        stamp=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        verdict=_verdict(d),
        sections=sections,
    )
    return page + "\n"


def write_html(
    diagnosis: Diagnosis,
    path: str | os.PathLike[str],
    *,
    timelines: Sequence[UnitTimeline] | None = None,
    report: Report | None = None,
    title: str | None = None,
) -> Path:
    """Write the HTML report of ``diagnosis`` to ``path`` atomically.

    The text goes to a temporary file in the destination directory which then replaces
    ``path`` (:func:`os.replace`), so a reader never sees a half-written report.

    Parameters
    ----------
    diagnosis : Diagnosis
        What to report.
    path : path-like
        Destination file; its directory must exist.
    timelines : sequence of UnitTimeline, optional
        From :func:`collect_timelines`.
    report : Report, optional
        The still-open report of the diagnosis: when given and ``timelines`` is None, the
        timelines are collected from it.
    title : str, optional
        Page title.

    Returns
    -------
    pathlib.Path
        The written file.
    """
    if timelines is None and report is not None:
        timelines = collect_timelines(report, diagnosis)
    return write_text_atomic(render_html(diagnosis, timelines=timelines, title=title), path)


def write_text_atomic(text: str, path: str | os.PathLike[str]) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file in its directory that
    then replaces it (:func:`os.replace`), so a reader never sees a half-written file."""
    dest = Path(path)
    directory = dest.parent if str(dest.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return dest


# ============================================================================ helpers


def _missing(d: Diagnosis, analysis: str, what: str) -> str:
    """Why a section is empty, from the analysis' status and message."""
    r = d.analyses.get(analysis)
    if r is None:
        return f"{what}: the {analysis} analysis did not run for this trace."
    return f"{what}: {r.status}" + (f" - {r.message}" if r.message else "")


def _table(
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    numeric: Sequence[bool] | None = None,
    cls: str = "",
) -> Table:
    """A :class:`Table` of ``rows`` (cells as given, made text; None shows empty)."""
    return Table(
        tuple(columns),
        tuple(tuple("" if v is None else str(v) for v in row) for row in rows),
        tuple(numeric or [False] * len(columns)),
        cls,
    )


def _legend(items: Iterable[tuple[str, str]]) -> tuple[LegendItem, ...]:
    return tuple(LegendItem(label, color) for label, color in items)


def _pct(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}%"


def _gbps(v: float | None) -> str:
    return "-" if v is None else f"{fmt_num(v)} GB/s"


# ============================================================================ sections


def _verdict(d: Diagnosis) -> VerdictView:
    v, t = d.verdict, d.tail
    color = LAYER_COLORS.get(v.layer, INK)
    conf = max(0.0, min(1.0, float(v.confidence or 0.0)))
    scores = tuple(
        Score(layer, f"{float(s):.2f}", f"{max(0.0, min(1.0, float(s))) * 100:.1f}",
              LAYER_COLORS.get(layer, INK))
        for layer, s in sorted((v.scores or {}).items(), key=lambda kv: -kv[1])
    )
    cards: list[Card] = []
    if t.unit:
        cards += [
            Card("unit", str(t.unit), f"{t.unit_source or ''}, n = {t.n}"
                 + (f"; runner-up {t.runner_up}" if t.runner_up else "")),
            Card("P50", fmt_ns(t.p50_ns)),
            Card("P90", fmt_ns(t.p90_ns)),
            Card("P99", fmt_ns(t.p99_ns)),
            Card("P99 / P50", "-" if t.p99_over_p50 is None else f"{t.p99_over_p50:.2f}",
                 t.level),
            Card("shape", t.shape.replace("_", " "), _shape_confidence(t)),
        ]
    if t.n_warmup:
        cards.append(Card("warm-up", f"{t.n_warmup} set apart", ", ".join(t.warmup_calls)))
    whole = d.analyses.whole_run
    if whole is not None and whole.dominated_by:
        cards.append(Card("whole run", str(whole.dominated_by).replace("_", " "),
                          f"{(whole.kernel_busy_pct or 0):.0f}% kernels, "
                          f"{(whole.gpu_idle_pct or 0):.0f}% idle"))
    g = d.launch_gaps
    if g.count:
        cards.append(Card("launch gaps", f"P99 {fmt_ns(g.p99_ns)}",
                          f"P50 {fmt_ns(g.p50_ns)}, {int(g.count)} gaps"))
    cards.append(Card("CUDA Graphs", "in use" if d.cuda_graphs.in_use else "not used"))
    for gpu in d.platform.gpus:
        where = LINK_SOURCES.get(gpu.link_source, gpu.link_source)
        cards.append(Card(f"GPU {gpu.device_id} host link",
                          "none" if gpu.link_gbps is None else f"{gpu.link_gbps:.1f} GB/s",
                          f"{gpu.name or '?'}; {where}: {gpu.link_note}"))
    if d.platform.driver_version or d.platform.cuda_version:
        cards.append(Card("driver", d.platform.driver_version or "-",
                          f"CUDA {d.platform.cuda_version}" if d.platform.cuda_version else ""))
    return VerdictView(
        layer=v.layer.upper(), name=LAYER_NAMES.get(v.layer, v.layer), color=color,
        confidence=f"{conf:.2f}", meter_pct=f"{conf * 100:.1f}", summary=v.summary,
        unit_reason=t.unit_reason or "", scores=scores, has_unit=bool(t.unit),
        cards=tuple(cards),
    )


def _latency(d: Diagnosis) -> LatencyView:
    t = d.tail
    unit, n = str(t.unit or ""), t.n
    x = d.durations_ns
    if x is None or len(x) == 0:
        return LatencyView(unit, n, missing=_missing(d, "ranges", "No unit latencies"))
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return LatencyView(unit, n, missing="No positive unit latencies to plot.")
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo * 1.001:
        lo, hi = lo * 0.95, hi * 1.05
    # Freedman-Diaconis on the log scale, within bounds that keep the bars readable
    lx = np.log(x)
    iqr = float(np.subtract(*np.percentile(lx, [75, 25])))
    width_ln = 2 * iqr / x.size ** (1 / 3) if iqr > 0 else 0.0
    span_ln = math.log(hi / lo)
    nb = int(np.clip(math.ceil(span_ln / width_ln) if width_ln > 0 else 30, 15, 120))
    edges = np.geomspace(lo, hi * (1 + 1e-9), nb + 1)
    counts, _ = np.histogram(x, bins=edges)
    bins = [(float(edges[i]), float(edges[i + 1]), float(counts[i])) for i in range(nb)]
    curves: list[Curve] = []
    c = d.classifier
    if c is not None and c.best_model:
        grid = np.geomspace(edges[0], edges[-1], 400)
        n_fit = c.n or x.size
        # expected units per bin of width dln(x): n * f(x) * x * dln(x)
        dln = math.log(edges[1] / edges[0])
        try:
            dens = np.asarray(c.pdf(grid), dtype=float) * grid * dln * n_fit
            curves.append(
                Curve(list(grid), list(dens), f"fitted {c.best_model} model, scaled to counts")
            )
        except (ValueError, KeyError, TypeError, FloatingPointError):
            pass
    vlines = []
    for lab, v, col in (
        ("P50", t.p50_ns, INK),
        ("P90", t.p90_ns, "#616e7c"),
        ("P99", t.p99_ns, CURVE),
    ):
        if v:
            vlines.append(VLine(float(v), f"{lab} {fmt_ns(v)}", col))
    svg = histogram(
        bins,
        title=f"Latency of {t.unit or 'units'}",
        x_label="unit latency (log scale)",
        y_label="units",
        curves=curves,
        vlines=vlines,
        tip=lambda a, b, n: f"{fmt_ns(a)} - {fmt_ns(b)}: {int(n)} units",
    )
    plot = Plot(
        _safe_svg(svg),
        _legend([("units per bin", BAR)] + ([("fitted model density", CURVE)] if curves else [])),
    )
    fit, models = "", None
    if c is not None:
        bits = []
        if c.best_model:
            bits.append(f"best model {c.best_model}")
        if c.dip_pvalue is not None:
            bits.append(f"dip test p = {c.dip_pvalue:.3g}")
        if c.n_modes is not None:
            bits.append(f"modes {c.n_modes}")
        if c.tail_flatness is not None:
            bits.append(f"tail flatness {c.tail_flatness:.2f}")
        fit = "; ".join(bits)
        cands = c.candidates or {}
        if cands:
            best = min(cf.bic for cf in cands.values())
            models = _table(
                ["model", "ΔBIC", "log-likelihood", "parameters"],
                [
                    (cf.name, f"{cf.bic - best:+.1f}", f"{cf.log_likelihood:.1f}", cf.n_params)
                    for cf in sorted(cands.values(), key=lambda cf: cf.bic)
                ],
                numeric=[False, True, True, True],
            )
    return LatencyView(
        unit, n, plot=plot, shape=t.shape, shape_name=t.shape.replace("_", " "),
        shape_confidence=_shape_confidence(t), shape_text=SHAPE_TEXT.get(t.shape, ""),
        fit=fit, models=models,
    )


def _shape_confidence(t: TailSummary) -> str:
    """The shape's confidence, and the likelier shape when the probabilities favour one."""
    text = f"confidence {t.shape_confidence:.2f}"
    other = t.likelier_shape
    return text if other is None else f"{text}; the probabilities favour {other[0]}, {other[1]:.2f}"


def _gaps(d: Diagnosis) -> GapsView:
    view = GapsView(fmt_ns(d.settings.gap_normal_ns), fmt_ns(d.settings.gap_p99_ns))
    r = d.analyses.launch_gaps
    if r is None:
        return _replace(view, missing=_missing(d, "launch_gaps", "No launch gaps"))
    # the thresholds the analysis judged with (the settings')
    normal = float(r.normal_threshold_ns)
    p99t = float(r.p99_threshold_ns)
    bins = [(b.bin_lo_ns, b.bin_hi_ns, float(b.gaps)) for b in r.histogram()]
    # trim empty bins at both ends, keeping the thresholds in view
    nz = [i for i, b in enumerate(bins) if b[2] > 0]
    if nz:
        first, last = nz[0], nz[-1]
        while first > 0 and bins[first][0] > normal / 10:
            first -= 1
        while last < len(bins) - 1 and bins[last][1] < p99t * 3:
            last += 1
        bins = bins[first : last + 1]
    cards = (
        Card("gaps", f"{int(r.count or 0):,}", f"over {int(r.kernels or 0):,} kernels"),
        Card("P50", fmt_ns(finite(r.p50_ns))),
        Card("P90", fmt_ns(finite(r.p90_ns))),
        Card("P99", fmt_ns(finite(r.p99_ns)), "CPU-bound" if r.cpu_bound else "within threshold"),
        Card("above normal", _pct(finite(r.share_above_normal_pct), 1), f"> {fmt_ns(normal)}"),
        Card("idle total", fmt_ns(finite(r.total_ns)), "sum of gaps"),
    )
    if not bins or not any(b[2] for b in bins):
        return _replace(view, cards=cards, empty=r.message or "No gaps between kernels.")

    def color(lo_: float, hi_: float) -> str:
        mid = math.sqrt(lo_ * hi_)
        return "#54a24b" if mid < normal else ("#e8890c" if mid < p99t else "#e45756")

    vl = [
        VLine(normal, f"{fmt_ns(normal)} normal", "#2f9e44"),
        VLine(p99t, f"{fmt_ns(p99t)} P99 threshold", "#c92a2a"),
    ]
    for lab, v in (("P50", finite(r.p50_ns)), ("P99", finite(r.p99_ns))):
        if v and v > 0:
            vl.append(VLine(v, f"{lab} {fmt_ns(v)}", INK, dash="2 3"))
    total = sum(b[2] for b in bins) or 1.0
    svg = histogram(
        bins,
        title="Launch gap distribution",
        x_label="gap before a kernel (log scale)",
        y_label="gaps",
        vlines=vl,
        bar_color=color,
        tip=lambda a, b, n: f"{fmt_ns(a)} - {fmt_ns(b)}: {int(n):,} gaps ({n / total:.1%})",
    )
    plot = Plot(
        _safe_svg(svg),
        _legend([
            (f"normal (< {fmt_ns(normal)})", "#54a24b"),
            (f"{fmt_ns(normal)} - {fmt_ns(p99t)}", "#e8890c"),
            (f"> {fmt_ns(p99t)}", "#e45756"),
        ]),
    )
    streams = None
    per_stream = r.per_stream()
    if len(per_stream) > 1:
        streams = _table(
            ["device", "pid", "stream", "kernels", "gaps", "P50", "P99", "above normal"],
            [
                (row.device_id, row.pid, row.stream_id, row.kernels, row.gaps,
                 fmt_ns(finite(row.p50_ns)), fmt_ns(finite(row.p99_ns)),
                 _pct(finite(row.share_above_normal_pct), 1))
                for row in per_stream[:20]
            ],
            numeric=[True] * 8,
        )
    return _replace(view, cards=cards, plot=plot, streams=streams)


def _idle(d: Diagnosis) -> IdleView:
    r = d.analyses.gpu_idle
    if r is None:
        return IdleView(missing=_missing(d, "gpu_idle", "No GPU idle breakdown"))
    cards = (
        Card("gaps", f"{r.gaps:,}", f"unit {r.unit}" if r.unit else "no unit: whole run"),
        Card("idle total", fmt_ns(finite(r.idle_ns)), "sum of gaps"),
        Card("launch-bound P99", fmt_ns(finite(r.launch_bound_p99_ns)),
             "launch overhead" if r.launch_overhead else "within threshold"),
        Card("launch-bound gaps", f"{r.launch_bound_gaps:,}",
             _pct(finite(r.launch_bound_idle_pct), 1) + " of idle time"),
    )
    causes = _table(
        ["cause", "gaps", "idle", "share", "what it means"],
        [(c.cause.replace("_", " "), c.gaps, fmt_ns(finite(c.idle_ns)), _pct(c.share_pct, 1),
          IDLE_MEANING[c.cause]) for c in r.causes() if c.gaps],
        numeric=[False, True, True, True, False],
    )
    streams = r.per_stream()
    per_stream = None
    if streams:
        per_stream = _table(
            ["pid", "device", "stream", "cause", "gaps", "idle", "share"],
            [(x.pid, x.device_id, x.stream_id, x.cause.replace("_", " "), x.gaps,
              fmt_ns(finite(x.idle_ns)), _pct(x.share_pct, 1))
             for x in sorted(streams, key=lambda x: -x.idle_ns)[:30]],
            numeric=[True, True, True, False, True, True, True],
        )
    return IdleView(cards=cards, causes=causes, streams=per_stream)


def _transfers(d: Diagnosis) -> TransfersView:
    r = d.analyses.transfers
    if r is None:
        return TransfersView(missing=_missing(d, "transfers", "No transfers"))
    links: dict[str, tuple[float, str]] = {}
    for lk in r.links():
        g = finite(lk.link_gbps)
        if g is None:
            continue
        dirn = str(lk.direction)
        if dirn not in links or g > links[dirn][0]:
            links[dirn] = (g, str(lk.link_note or lk.link_source or ""))
    for dirn, p in (("HtoD", "htod"), ("DtoH", "dtoh")):
        g = finite(r.direction(p).link_gbps)
        if dirn not in links and g:
            links[dirn] = (g, str(r.link_source or ""))
    bars: list[Bar] = []
    for row in sorted(r.by_kind(), key=lambda r_: -(r_.total_bytes or 0))[:10]:
        op = str(row.op or "memcpy")
        kind = "memset" if op == "memset" else str(row.copy_kind or "?")
        dirn = _direction(kind)
        med = finite(row.median_gbps) or 0.0
        src, dst = row.src_kind, row.dst_kind
        sub = f"{src}→{dst}" if src and dst and op != "memset" else (str(dst or src or ""))
        link = links.get(dirn)
        tip = (
            f"{kind} {sub}: {int(row.copies or 0):,} copies, "
            f"{fmt_bytes(row.total_bytes)}; median {_gbps(med)}, "
            f"P10 {_gbps(finite(row.p10_gbps))}, "
            f"P90 {_gbps(finite(row.p90_gbps))}, "
            f"aggregate {_gbps(finite(row.aggregate_gbps))}"
        )
        if link:
            tip += f"; link {_gbps(link[0])} ({link[1]})"
        bars.append(
            Bar(
                kind,
                med,
                GPU_COLORS.get(dirn, GPU_COLORS["copy"]),
                tip,
                ref=link[0] if link else None,
                ref_label=f"link {fmt_num(link[0])} GB/s" if link else "",
                sublabel=f"{sub} ×{int(row.copies or 0):,}",
                lo=finite(row.p10_gbps),
                hi=finite(row.p90_gbps),
            )
        )
    cards = [
        Card("copies", f"{int(r.copies or 0):,}", f"{fmt_bytes(r.total_bytes)}"),
        Card("copy time", fmt_ns(finite(r.total_time_ns))),
    ]
    for dirn, p in (("HtoD", "htod"), ("DtoH", "dtoh")):
        f = r.direction(p)
        if f.copies:
            cards.append(Card(f"{dirn} aggregate", _gbps(finite(f.aggregate_gbps)),
                              f"{_pct(finite(f.aggregate_pct_of_link))} of the link"))
    if r.pageable_copies:
        cards.append(Card("pageable copies", f"{int(r.pageable_copies):,}",
                          f"{_pct(finite(r.pageable_time_pct))} of copy time"))
    cards.append(Card("same-direction contention", _pct(finite(r.contention_share_pct)),
                      "of copy time overlapped"))
    plot = None
    if bars:
        svg = bar_chart(bars, title="Transfer bandwidth by copy kind", y_label="GB/s",
                        y_fmt=lambda v: fmt_num(v))
        plot = Plot(
            _safe_svg(svg),
            _legend([(k, c) for k, c in GPU_COLORS.items() if any(b.color == c for b in bars)]
                    + [("host link rate", CURVE)]),
        )
    notes = sorted({v[1] for v in links.values() if v[1]})
    link_note = ""
    if notes:
        link_note = "Link: " + "; ".join(notes) + (
            "" if r.link_source != "default"
            else " - pass --baseline with nvbandwidth -j output for a measured figure."
        )
    host = r.host()
    host_table = None
    if host:
        host_table = _table(
            ["device", "direction", "copies", "median size", "median", "P90", "aggregate",
             "link", "achieved of link"],
            [
                (row.device_id, row.direction, f"{int(row.copies or 0):,}",
                 fmt_bytes(row.median_bytes), _gbps(finite(row.median_gbps)),
                 _gbps(finite(row.p90_gbps)), _gbps(finite(row.aggregate_gbps)),
                 _gbps(finite(row.link_gbps)), _pct(finite(row.achieved_pct_of_link)))
                for row in host
            ],
            numeric=[True, False] + [True] * 7,
        )
    return TransfersView(cards=tuple(cards), plot=plot, empty=r.message or "No copies to plot.",
                         link_note=link_note, host=host_table)


COMPONENT_COLORS = {
    "cpu_launch": "#4c78a8",
    "cpu_memcpy": "#f58518",
    "cpu_sync": "#e45756",
    "cpu_other_api": "#9aa5b1",
    "cpu_outside_cuda": "#d4c5a9",
    "gpu_own_kernel": "#54a24b",
    "gpu_own_copy": "#f58518",
    "gpu_other": "#b279a2",
    "gpu_pending_idle": "#ff9da6",
    "gpu_idle": "#cbd2d9",
}
FAMILY_NAMES = {"cpu": "CPU side", "gpu": "GPU side"}


@dataclass(frozen=True)
class _Growth:
    """One component of the tail attribution, as the section draws it."""

    component: str
    family: str  #: cpu, gpu or ""
    median_ns: float
    tail_ns: float
    delta_ns: float
    share: float | None  #: of the family's growth (fraction; share_of_growth)


def _attribution_rows(r: RangesResult) -> list[_Growth]:
    """Components of the tail attribution from the ``attribution`` table (the ``total``
    row left out); a missing family is read from the component's prefix, a missing delta
    is tail minus median, a missing share the delta over its family's positive deltas."""
    rows = [
        row for row in r.attribution_rows()
        if str(row.family or "") != "total"
        and str(row.component) not in ("duration", "total", "duration_ns")
    ]
    out: list[_Growth] = []
    for row in rows:
        component, family = str(row.component), str(row.family or "")
        if not family:
            prefix = component.split("_", 1)[0].lower()
            family = prefix if prefix in FAMILY_NAMES else ""
        median, tail = finite(row.median_mean_ns) or 0.0, finite(row.tail_mean_ns) or 0.0
        delta = finite(row.delta_ns)
        out.append(_Growth(component, family, median, tail,
                           tail - median if delta is None else delta,
                           finite(row.share_of_growth)))
    totals = {
        fam: sum(max(g.delta_ns, 0) for g in out if g.family == fam)
        for fam in {g.family for g in out}
    }
    return [
        _replace(g, share=max(g.delta_ns, 0) / totals[g.family])
        if g.share is None and totals[g.family] else g
        for g in out
    ]


def _layer(component: str) -> str | None:
    """The layer a component's growth points at (its :class:`Component` data)."""
    try:
        return Component(component).layer
    except ValueError:
        return None


def _pretty(component: str) -> str:
    c = component
    for p in ("cpu_", "gpu_"):
        if c.startswith(p):
            c = c[len(p) :]
    return c.replace("_", " ").replace("api", "API").replace("cuda", "CUDA")




def _attribution(d: Diagnosis) -> AttributionView:
    pct = d.settings.tail_pct
    r = d.analyses.ranges
    tail_n = r.tail_n if r is not None else None
    med_n = r.median_band_n if r is not None else None
    view = AttributionView(
        band=f"the median band ({med_n} units around P50)" if med_n else "the median band",
        who=(f"the slowest {fmt_num(pct)}% ({tail_n} units)" if tail_n
             else f"the slowest {fmt_num(pct)}%"),
    )
    if r is None:
        return _replace(view, missing=_missing(d, "ranges", "No tail attribution"))
    rows = _attribution_rows(r)
    if not rows:
        return view
    fams = [f for f in ("cpu", "gpu") if any(row.family == f for row in rows)]
    fams += sorted({row.family for row in rows} - set(fams))
    extra_colors = iter(PALETTE)
    colors = {
        row.component: COMPONENT_COLORS.get(row.component) or next(extra_colors, INK)
        for row in rows
    }
    bars = []
    for fam in fams:
        segs = [row for row in rows if row.family == fam]
        name = FAMILY_NAMES.get(fam, fam or "components")
        bars.append((f"{name}: median",
                     [(_pretty(x.component), x.median_ns, colors[x.component])
                      for x in segs]))
        bars.append((f"{name}: slowest",
                     [(_pretty(x.component), x.tail_ns, colors[x.component])
                      for x in segs]))
    svg = stacked_hbars(
        bars, title="Tail attribution: median band vs slowest units", x_label="mean time per unit"
    )
    plot = Plot(
        _safe_svg(svg),
        _legend(
            (f"{fam.upper() + ' ' if fam else ''}{_pretty(row.component)}", colors[row.component])
            for fam in fams
            for row in rows
            if row.family == fam
        ),
    )
    table = _table(
        ["side", "component", "points at", "median band", "slowest", "extra",
         "share of the side's growth"],
        [
            (
                FAMILY_NAMES.get(row.family, row.family),
                _pretty(row.component),
                _layer(row.component) or "waiting (a consequence)",
                fmt_ns(row.median_ns),
                fmt_ns(row.tail_ns),
                ("+" if row.delta_ns > 0 else "") + fmt_ns(row.delta_ns),
                "-" if row.share is None or row.delta_ns <= 0 else f"{row.share:.0%}",
            )
            for fam in fams
            for row in sorted(
                (x for x in rows if x.family == fam), key=lambda x: -(x.delta_ns or 0)
            )
        ],
        numeric=[False, False, False, True, True, True, True],
    )
    slow = r.tables.get("slowest")
    slowest = None
    if slow is not None and slow.num_rows:
        want = [
            "instance",
            "start_ns",
            "duration_ns",
            "cpu_launch_ns",
            "cpu_sync_ns",
            "cpu_outside_cuda_ns",
            "gpu_own_kernel_ns",
            "gpu_pending_idle_ns",
            "gpu_idle_ns",
            "n_kernels",
        ]
        cols = [c for c in want if c in slow.column_names] or slow.column_names[:9]
        slowest = _table(
            [c.replace("_ns", "").replace("_", " ") for c in cols],
            [
                [
                    fmt_ns(finite(v))
                    if c.endswith("_ns") and c != "start_ns" and finite(v) is not None
                    else v
                    for c, v in ((c, row.get(c)) for c in cols)
                ]
                for row in slow.slice(0, 20).to_pylist()
            ],
            numeric=[True] * len(cols),
        )
    # why a component's growth can pass the units' own: others on its side shrank
    return _replace(view, plot=plot, table=table, slowest=slowest,
                    notes=tuple(r.offset_notes()))


def _timelines(d: Diagnosis, timelines: Sequence[UnitTimeline] | None) -> TimelinesView:
    if timelines is None:
        return TimelinesView(None)
    seen_cats: set[str] = set()
    seen_gpu: set[str] = set()
    units = tuple(_one_timeline(d, tl, seen_cats, seen_gpu) for tl in timelines)
    items = [
        (f"API: {c}", CATEGORY_COLORS.get(c, CATEGORY_COLORS["other"]))
        for c in CATEGORY_COLORS
        if c in seen_cats
    ]
    items += [(f"GPU: {k}", GPU_COLORS[k]) for k in GPU_COLORS if k in seen_gpu]
    return TimelinesView(units, _legend(items))


def _one_timeline(
    d: Diagnosis, tl: UnitTimeline, seen_cats: set[str], seen_gpu: set[str]
) -> TimelineView:
    t0, t1 = finite(tl.start_ns), finite(tl.end_ns)
    label = str(tl.label or tl.name or "unit")
    if t0 is None or t1 is None or t1 <= t0:
        return TimelineView(label, "", str(tl.note or "no window"), None)
    dur = t1 - t0
    lanes: list[Lane] = []
    nvtx = [e for e in tl.nvtx if finite(e.start_ns) is not None]
    if nvtx:
        nested = _nest(nvtx)
        depth = min(4, max(dep for _, dep in nested) + 1)
        spans = [
            Span(
                e.start_ns,
                e.end_ns,
                NVTX_COLORS[dep % len(NVTX_COLORS)],
                f"NVTX {e.name}: {fmt_ns(e.end_ns - e.start_ns)}",
                str(e.name or ""),
                dep,
            )
            for e, dep in nested
            if dep < depth
        ]
        lanes.append(Lane("NVTX", spans, depth))
    by_tid: dict[int | None, list[ApiSpan]] = {}
    for e in tl.cpu:
        by_tid.setdefault(e.tid, []).append(e)
    api_ns: dict[str, float] = {}
    for tid, evs in by_tid.items():
        spans = []
        for e in evs:
            cat = str(e.category or "other")
            seen_cats.add(cat if cat in CATEGORY_COLORS else "other")
            a, b = max(e.start_ns, t0), min(e.end_ns, t1)
            api_ns[cat] = api_ns.get(cat, 0.0) + max(0.0, b - a)
            spans.append(
                Span(
                    e.start_ns,
                    e.end_ns,
                    CATEGORY_COLORS.get(cat, CATEGORY_COLORS["other"]),
                    f"{e.name} ({cat}): {fmt_ns(e.end_ns - e.start_ns)}",
                    str(e.name or ""),
                )
            )
        lanes.append(Lane(f"CPU tid {tid}" if tid is not None else "CPU", spans))
    by_stream: dict[tuple[int | None, int | None], list[GpuSpan]] = {}
    for e in tl.gpu:
        by_stream.setdefault((e.device_id, e.stream_id), []).append(e)
    busy: list[tuple[float, float]] = []
    for (dev, stream), evs in sorted(
        by_stream.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        spans = []
        for e in evs:
            key = _gpu_key(e)
            seen_gpu.add(key)
            busy.append((max(e.start_ns, t0), min(e.end_ns, t1)))
            what = e.name or e.kind
            size = f", {fmt_bytes(e.bytes)}" if e.bytes else ""
            spans.append(
                Span(
                    e.start_ns,
                    e.end_ns,
                    GPU_COLORS[key],
                    f"{what}: {fmt_ns(e.end_ns - e.start_ns)}{size}",
                )
            )
        lanes.append(Lane(f"GPU {dev} stream {stream}", spans))
    stats = [f"{fmt_ns(dur)}"]
    p50 = d.tail.p50_ns
    if p50 and tl.rank > 0:
        stats.append(f"{dur / p50:.1f}x the median")
    if busy:
        share = _union_ns([b for b in busy if b[1] > b[0]]) / dur
        stats.append(f"GPU busy {share:.0%} of the window")
    for cat in ("launch", "sync", "memcpy"):
        if api_ns.get(cat):
            stats.append(f"{cat} calls {fmt_ns(api_ns[cat])}")
    if tl.truncated:
        stats.append(f"{tl.truncated:,} events not drawn")
    svg = _safe_svg(timeline(lanes, t0, t1, title=f"Timeline of {label}")) if lanes else None
    return TimelineView(label, " · ".join(stats), tl.note, svg)


def _jitter(d: Diagnosis) -> JitterView:
    j = d.analyses.jitter
    per_kernel = j.per_kernel() if j is not None else []
    if not per_kernel:
        return JitterView(missing=_missing(d, "jitter", "No kernel jitter figures"))
    return JitterView(table=_table(
        ["kernel", "launches", "GPU time", "P50", "P99", "P99/P50", "slow"],
        [
            (
                row.name,
                f"{int(row.instances or 0):,}",
                fmt_ns(finite(row.total_ns)),
                fmt_ns(finite(row.p50_ns)),
                fmt_ns(finite(row.p99_ns)),
                "-" if finite(row.p99_over_p50) is None else f"{row.p99_over_p50:.2f}",
                _pct(finite(row.slow_pct), 1),
            )
            for row in per_kernel[:15]
        ],
        numeric=[False] + [True] * 6,
    ))


def _culprit(d: Diagnosis) -> CulpritView:
    """Other GPU work during the slow units by name, and latency against work per unit."""
    view = CulpritView()
    inter = d.analyses.interference
    streams = inter.per_stream() if inter is not None else []
    if streams:
        view = _replace(view, streams=_table(
            ["process", "stream", "names", "slow units", "median units", "time / slow unit",
             "time / median unit"],
            [(f"{w.process_name or '-'} ({w.pid})", w.stream_id, w.names,
              f"{w.slow_units} of {w.slow_n}", f"{w.median_units} of {w.median_n}",
              fmt_ns(w.slow_overlap_mean_ns), fmt_ns(w.median_overlap_mean_ns))
             for w in streams[:10]],
            numeric=[False, True, False, True, True, True, True]))
    work = d.analyses.workload
    if work is None:
        return view
    size = work.size_line()
    view = _replace(view, workload=f"{work.kind.replace('_', ' ')}: {work.line()}"
                    + (f"; {size}" if size else ""))
    ranges = d.analyses.ranges
    sizes = work.tables.get("sizes")
    measure = next((r for r in work.size_relation() if r.measure == work.size_measure), None)
    if measure is not None and sizes is not None and measure.measure != "n_kernels":
        # latency follows another measure of size (bytes, launch calls): plot that one
        t = sizes.select([measure.measure, "duration_ns"])
        if t.num_rows > 3000:  # a sample keeps the page small
            t = t.take(list(range(0, t.num_rows, t.num_rows // 3000 + 1)))
        cut = (d.tail.p99_ns or float("inf"))
        x, y = t.column(0).to_pylist(), t.column(1).to_pylist()
        in_mb = measure.measure.endswith("bytes")
        x = [(v or 0) / (1e6 if in_mb else 1) for v in x]
        slope = (measure.slope or 0.0) * (1e6 if in_mb else 1)
        # the least-squares line passes through the means
        mid_x, mid_y = float(np.mean(x)), float(np.mean([v or 0 for v in y]))
        what = measure.what + (" (MB)" if in_mb else "")
        view = _replace(view, scatter=_safe_svg(scatter(
            x, [v or 0 for v in y], title=f"Latency against {what} per unit",
            x_label=f"{what} per unit", y_label="latency",
            line=(slope, mid_y - slope * mid_x) if measure.slope is not None else None,
            highlight=[(v or 0) >= cut for v in y])))
    elif ranges is not None and "instances" in ranges.tables:
        t = ranges.tables["instances"].select(["n_kernels", "duration_ns"])
        if t.num_rows > 3000:  # a sample keeps the page small
            t = t.take(list(range(0, t.num_rows, t.num_rows // 3000 + 1)))
        cut = (d.tail.p99_ns or float("inf"))
        x, y = t.column("n_kernels").to_pylist(), t.column("duration_ns").to_pylist()
        line = ((work.slope_ns_per_kernel, _intercept(work))
                if work.slope_ns_per_kernel is not None else None)
        view = _replace(view, scatter=_safe_svg(scatter(
            [v or 0 for v in x], [v or 0 for v in y],
            title="Latency against own kernels per unit", x_label="own kernels per unit",
            y_label="latency", line=line, highlight=[(v or 0) >= cut for v in y])))
    bins = work.bins()
    if bins:
        view = _replace(view, bins=_table(
            ["kernels per unit", "units", "median latency", "time per kernel"],
            [(f"{b.min_kernels}-{b.max_kernels}", b.units, fmt_ns(b.p50_ns),
              fmt_ns(b.mean_per_kernel_ns)) for b in bins],
            numeric=[False, True, True, True]))
    return view


def _findings(d: Diagnosis) -> FindingsView:
    return FindingsView(tuple(
        FindingView(
            number=i, severity=f.severity, color=SEVERITY_COLORS.get(f.severity, INK),
            layer=f.layer, layer_color=LAYER_COLORS.get(f.layer, INK), title=f.title,
            check=f.check, evidence=tuple(f.evidence), fix=f.fix,
        )
        for i, f in enumerate(d.findings, 1)
    ))


def _captured(d: Diagnosis) -> CapturedView:
    return CapturedView(
        views=_table(["view", "status"], (d.captured or {}).items()),
        analyses=_table(["analysis", "status", "message"],
                        [(k, r.status, r.message) for k, r in d.analyses.items()]),
        settings=_table(["setting", "value"],
                        [(k, "" if v is None else v) for k, v in d.settings_dict().items()]),
    )


def _safe_svg(svg: str) -> Markup:
    """SVG from :mod:`nsysdiag.render.svg`, which escapes every text it places (labels,
    ``<title>`` tooltips): safe to put in the page as it is."""
    return Markup(svg)


def _gpu_key(ev: GpuSpan) -> str:
    kind = str(ev.kind or "kernel")
    if kind == "kernel":
        return "kernel"
    if kind == "memset":
        return "memset"
    dirn = _direction(str(ev.name or ""))
    return dirn if dirn in GPU_COLORS else "copy"


def _nest(spans: Sequence[NvtxSpan]) -> list[tuple[NvtxSpan, int]]:
    """Depths for (possibly nested) ranges: a range starts one level below every open one."""
    out: list[tuple[NvtxSpan, int]] = []
    stack: list[float] = []
    for s in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns)):
        while stack and stack[-1] <= s.start_ns:
            stack.pop()
        out.append((s, len(stack)))
        stack.append(s.end_ns)
    return out


def _union_ns(iv: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _intercept(work: WorkloadResult) -> float:
    rel = work.tables.get("relation")
    value = rel.column("intercept_ns")[0].as_py() if rel is not None and rel.num_rows else None
    return float(value) if value is not None else 0.0


def _direction(kind: str) -> str:
    k = str(kind or "")
    for d_ in ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH"):
        if d_ in k:
            return d_
    return k


