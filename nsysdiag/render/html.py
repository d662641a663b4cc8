"""A self-contained HTML report of a diagnosis: verdict, plots, timelines and findings.

The page opens offline: styles are inline, plots are inline SVG drawn here in Python
(:mod:`nsysdiag.render.svg`), and there is no script, font, image or stylesheet to fetch.
Every string that comes from a trace (kernel names, NVTX text, process names, paths,
finding text) is escaped with :func:`html.escape`, in element content, attributes and
SVG ``<title>``/``<text>`` alike.

Sections, each skipped with a note when its analysis did not run or has no data:

1. the verdict (layer, confidence, summary) and the tail in numbers;
2. the unit latency histogram (log-spaced bins) with the fitted model's density;
3. the launch-gap distribution (log scale) with the normal and P99 thresholds (5 us / 20 us
   by default: ``Settings.gap_normal_ns``, ``gap_p99_ns``);
4. transfer bandwidth by copy kind against the host link;
5. the tail attribution: median band vs slowest units, stacked by component;
6. timelines of a few slowest units (and a median one) - these need the open report, so
   they are gathered by :func:`collect_timelines` before the report is closed (it lives
   in :mod:`nsysdiag.diagnosis.timelines`, its queries in the analyses layer, and is
   re-exported here: this module runs no SQL, it draws what it is given);
7. kernel duration jitter;
8. findings with evidence and fixes; what was captured; settings.

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
import math
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..analyses.base import AnalysisResult
from ..analyses.gpu_idle import MEANING as IDLE_MEANING
from ..analyses.gpu_idle import GpuIdleResult
from ..analyses.interference import InterferenceResult
from ..analyses.jitter import JitterResult
from ..analyses.launch_gaps import LaunchGapsResult
from ..analyses.ranges import Component, RangesResult
from ..analyses.timelines import ApiSpan, GpuSpan, NvtxSpan, UnitTimeline
from ..analyses.transfers import TransfersResult
from ..analyses.workload import WorkloadResult
from ..diagnosis.model import LINK_SOURCES
from ..diagnosis.timelines import collect_timelines
from ..formatting import fmt_bytes, fmt_ns
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
    esc,
    fmt_num,
    histogram,
    legend,
    scatter,
    stacked_hbars,
    timeline,
)

if TYPE_CHECKING:

    from ..diagnosis.model import Diagnosis
    from ..report import Report

__all__ = ["collect_timelines", "render_html", "write_html"]

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

# ============================================================================ public API


def render_html(
    diagnosis: Diagnosis, *, timelines: Sequence[UnitTimeline] | None = None,
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
    title = title or f"nsysdiag: {name}"
    sections = [
        ("latency", "Latency", _section_latency(d)),
        ("gaps", "Launch gaps", _section_gaps(d)),
        ("idle", "GPU idle by cause", _section_idle(d)),
        ("transfers", "Transfers", _section_transfers(d)),
        ("attribution", "Tail attribution", _section_attribution(d)),
        ("timelines", "Slowest units", _section_timelines(d, timelines)),
        ("jitter", "Kernel jitter", _section_jitter(d)),
        ("culprit", "Culprit", _section_culprit(d)),
        ("findings", f"Findings ({len(d.findings)})", _section_findings(d)),
        ("captured", "Captured data", _section_captured(d)),
    ]
    nav = "".join(f'<a href="#{sid}">{esc(label)}</a>' for sid, label, _ in sections)
    body = "".join(f'<section id="{sid}">{html_}</section>' for sid, _, html_ in sections)
    from .._version import __version__

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="generator" content="nsysdiag">'
        f"<title>{esc(title)}</title><style>{_CSS}</style></head><body>"
        f'<header class="top"><div class="brand">nsysdiag</div>'
        f'<div class="trace" title="{esc(d.path)}">{esc(d.path)}</div>'
        f'<div class="stamp">nsysdiag {esc(__version__)} &middot; {esc(stamp)}</div></header>'
        f'<main>{_section_verdict(d)}<nav class="toc">{nav}</nav>{body}</main>'
        "<footer>Generated offline by nsysdiag. Plots are inline SVG; hover a bar or span "
        "for its figures.</footer></body></html>\n"
    )


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
    text = render_html(diagnosis, timelines=timelines, title=title)
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


def _analysis(d: Diagnosis, name: str) -> AnalysisResult | None:
    r = (d.analyses or {}).get(name)
    return r if r is not None and getattr(r, "ok", False) else None


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{esc(text)}</p>'


def _missing(d: Diagnosis, analysis: str, what: str) -> str:
    """Why a section is empty, from the analysis' status and message."""
    r = (d.analyses or {}).get(analysis)
    if r is None:
        return _note(f"{what}: the {analysis} analysis did not run for this trace.")
    reason = f"{r.status}" + (f" - {r.message}" if r.message else "")
    return _note(f"{what}: {reason}")


def _h2(text: str, sub: str = "") -> str:
    s = f'<p class="sub">{sub}</p>' if sub else ""
    return f"<h2>{esc(text)}</h2>{s}"


def _kv_cards(items: Sequence[tuple[str, str, str]]) -> str:
    """Small figure cards: (label, value, sub-text); all escaped here."""
    cells = "".join(
        f'<div class="card"><div class="k">{esc(k)}</div><div class="v">{esc(v)}</div>'
        + (f'<div class="s">{esc(s)}</div>' if s else "")
        + "</div>"
        for k, v, s in items
    )
    return f'<div class="cards">{cells}</div>'


def _html_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    cls: str = "",
    numeric: Sequence[bool] | None = None,
) -> str:
    """An escaped table; cells are given as text (already formatted) or None."""
    numeric = numeric or [False] * len(columns)
    head = "".join(
        f'<th class="{"num" if n else ""}">{esc(c)}</th>'
        for c, n in zip(columns, numeric, strict=False)
    )
    body = []
    for r in rows:
        cells = []
        for v, n in zip(r, numeric, strict=False):
            text = "" if v is None else str(v)
            short = text if len(text) <= 90 else text[:89] + "…"
            title = f' title="{esc(text)}"' if short != text else ""
            cells.append(f'<td class="{"num" if n else ""}"{title}>{esc(short)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (
        f'<div class="tablewrap"><table class="{esc(cls)}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _pct(v: float | None, digits: int = 0) -> str:
    return "-" if v is None else f"{v:.{digits}f}%"


def _gbps(v: float | None) -> str:
    return "-" if v is None else f"{fmt_num(v)} GB/s"


# ============================================================================ sections


def _section_verdict(d: Diagnosis) -> str:
    v, t = d.verdict, d.tail
    color = LAYER_COLORS.get(v.layer, INK)
    conf = max(0.0, min(1.0, float(v.confidence or 0.0)))
    scores = ""
    if v.scores:
        rows = []
        for layer, s in sorted(v.scores.items(), key=lambda kv: -kv[1]):
            w = max(0.0, min(1.0, float(s))) * 100
            rows.append(
                f'<div class="score"><span class="sl">{esc(layer)}</span>'
                f'<span class="sbar"><span style="width:{w:.1f}%;background:'
                f'{LAYER_COLORS.get(layer, INK)}"></span></span>'
                f'<span class="sv">{float(s):.2f}</span></div>'
            )
        scores = (
            '<div class="scores"><div class="k">evidence score by layer</div>'
            + "".join(rows)
            + "</div>"
        )
    head = (
        f'<div class="verdict" style="border-color:{color}">'
        f'<div class="vhead"><span class="vlabel">Verdict</span>'
        f'<span class="vlayer" style="background:{color}">{esc(v.layer.upper())}</span>'
        f'<span class="vname">{esc(LAYER_NAMES.get(v.layer, v.layer))}</span>'
        f'<span class="vconf">confidence {conf:.2f}<span class="meter"><span style="width:'
        f'{conf * 100:.1f}%;background:{color}"></span></span></span></div>'
        f'<p class="vsummary">{esc(v.summary)}</p>'
        + (f'<p class="unit-reason">Unit choice: {esc(t.unit_reason)}</p>'
           if t.unit_reason else "")
        + f"{scores}</div>"
    )
    cards: list[tuple[str, str, str]] = []
    if t.unit:
        cards += [
            ("unit", str(t.unit), f"{t.unit_source or ''}, n = {t.n}"
             + (f"; runner-up {t.runner_up}" if t.runner_up else "")),
            ("P50", fmt_ns(t.p50_ns), ""),
            ("P90", fmt_ns(t.p90_ns), ""),
            ("P99", fmt_ns(t.p99_ns), ""),
            ("P99 / P50", "-" if t.p99_over_p50 is None else f"{t.p99_over_p50:.2f}", t.level),
            ("shape", t.shape.replace("_", " "), f"confidence {t.shape_confidence:.2f}"),
        ]
    if t.n_warmup:
        cards.append(("warm-up", f"{t.n_warmup} set apart", ", ".join(t.warmup_calls)))
    whole = d.analyses.get("whole_run")
    if whole is not None and whole.ok and getattr(whole, "dominated_by", None):
        cards.append(("whole run", str(whole.dominated_by).replace("_", " "),
                      f"{(getattr(whole, 'kernel_busy_pct', None) or 0):.0f}% kernels, "
                      f"{(getattr(whole, 'gpu_idle_pct', None) or 0):.0f}% idle"))
    g = d.launch_gaps
    if g.count:
        cards.append(
            (
                "launch gaps",
                f"P99 {fmt_ns(g.p99_ns)}",
                f"P50 {fmt_ns(g.p50_ns)}, {int(g.count)} gaps",
            )
        )
    graphs = "in use" if d.cuda_graphs.in_use else "not used"
    cards.append(("CUDA Graphs", graphs, ""))
    for gpu in d.platform.gpus:
        where = LINK_SOURCES.get(gpu.link_source, gpu.link_source)
        cards.append((f"GPU {gpu.device_id} host link",
                      "none" if gpu.link_gbps is None else f"{gpu.link_gbps:.1f} GB/s",
                      f"{gpu.name or '?'}; {where}: {gpu.link_note}"))
    if d.platform.driver_version or d.platform.cuda_version:
        cards.append(("driver", d.platform.driver_version or "-",
                      f"CUDA {d.platform.cuda_version}" if d.platform.cuda_version else ""))
    tail = _kv_cards(cards)
    if not t.unit:
        tail = (
            _note(
                "No repeated unit of work was found to measure latency on; the figures "
                "below describe the whole trace."
            )
            + tail
        )
    return f'<section id="verdict">{head}{tail}</section>'


def _section_latency(d: Diagnosis) -> str:
    t = d.tail
    head = _h2(
        "Unit latency distribution",
        esc(
            f"Latency of each '{t.unit}' ({t.n} units), log-spaced bins; the line is the "
            "density of the model the tail classifier fitted, scaled to counts."
        )
        if t.unit
        else "",
    )
    x = d.durations_ns
    if x is None or len(x) == 0:
        return head + _missing(d, "ranges", "No unit latencies")
    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    if x.size == 0:
        return head + _note("No positive unit latencies to plot.")
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
    if c is not None and getattr(c, "best_model", ""):
        grid = np.geomspace(edges[0], edges[-1], 400)
        n_fit = c.n if getattr(c, "n", 0) else x.size
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
    leg = legend([("units per bin", BAR)] + ([("fitted model density", CURVE)] if curves else []))
    shape = t.shape
    shape_box = (
        f'<div class="callout shape-{esc(shape)}">'
        f"<b>Shape: {esc(shape.replace('_', ' '))}</b>"
        f" (confidence {t.shape_confidence:.2f}). {esc(SHAPE_TEXT.get(shape, ''))}"
    )
    if c is not None:
        st = getattr(c, "statistics", {}) or {}
        bits = []
        if getattr(c, "best_model", ""):
            bits.append(f"best model {c.best_model}")
        if "dip_pvalue" in st:
            bits.append(f"dip test p = {float(st['dip_pvalue']):.3g}")
        if "n_modes" in st:
            bits.append(f"modes {st['n_modes']}")
        if "tail_flatness" in st:
            bits.append(f"tail flatness {float(st['tail_flatness']):.2f}")
        if bits:
            shape_box += f'<br><span class="muted">{esc("; ".join(bits))}</span>'
        cands = getattr(c, "candidates", {}) or {}
        if cands:
            best = min(cf.bic for cf in cands.values())
            rows = [
                (cf.name, f"{cf.bic - best:+.1f}", f"{cf.log_likelihood:.1f}", cf.n_params)
                for cf in sorted(cands.values(), key=lambda cf: cf.bic)
            ]
            shape_box += (
                "<details><summary>model comparison (BIC)</summary>"
                + _html_table(
                    ["model", "ΔBIC", "log-likelihood", "parameters"],
                    rows,
                    numeric=[False, True, True, True],
                )
                + "</details>"
            )
    shape_box += "</div>"
    return head + f'<div class="plotbox">{svg}{leg}</div>' + shape_box


def _section_gaps(d: Diagnosis) -> str:
    head = _h2(
        "Launch gaps",
        "Idle time between consecutive kernels on a GPU (start minus the "
        f"running maximum of earlier kernels' ends). Normal is under "
        f"{fmt_ns(d.settings.gap_normal_ns)}; a P99 above "
        f"{fmt_ns(d.settings.gap_p99_ns)} signals a CPU-side scheduling bottleneck.",
    )
    r = _analysis(d, "launch_gaps")
    if not isinstance(r, LaunchGapsResult):
        return head + _missing(d, "launch_gaps", "No launch gaps")
    # the thresholds the analysis judged with (the settings')
    normal = float(r.normal_threshold_ns)
    p99t = float(r.p99_threshold_ns)
    bins: list[tuple[float, float, float]] = []
    hist = r.tables.get("histogram")
    if (
        hist is not None
        and hist.num_rows
        and {"bin_lo_ns", "bin_hi_ns", "gaps"} <= set(hist.column_names)
    ):
        for row in hist.to_pylist():
            lo_, hi_, n_ = _num(row["bin_lo_ns"]), _num(row["bin_hi_ns"]), _num(row["gaps"])
            if lo_ and hi_ and n_ is not None:
                bins.append((lo_, hi_, n_))
    else:
        dist = r.tables.get("distribution")
        if dist is not None and dist.num_rows and "gap_ns" in dist.column_names:
            g = np.asarray(dist.column("gap_ns").to_numpy(zero_copy_only=False), dtype=float)
            g = g[np.isfinite(g) & (g > 0)]
            if g.size:
                edges = 10 ** np.arange(
                    math.floor(math.log10(g.min()) * 5) / 5, math.log10(g.max()) + 0.2, 0.2
                )
                cnt, _ = np.histogram(g, bins=edges)
                bins = [
                    (float(edges[i]), float(edges[i + 1]), float(cnt[i])) for i in range(len(cnt))
                ]
    # trim empty bins at both ends, keeping the thresholds in view
    nz = [i for i, b in enumerate(bins) if b[2] > 0]
    if nz:
        first, last = nz[0], nz[-1]
        while first > 0 and bins[first][0] > normal / 10:
            first -= 1
        while last < len(bins) - 1 and bins[last][1] < p99t * 3:
            last += 1
        bins = bins[first : last + 1]
    cards = _kv_cards(
        [
            (
                "gaps",
                f"{int(r.count or 0):,}",
                f"over {int(r.kernels or 0):,} kernels",
            ),
            ("P50", fmt_ns(_num(r.p50_ns)), ""),
            ("P90", fmt_ns(_num(r.p90_ns)), ""),
            (
                "P99",
                fmt_ns(_num(r.p99_ns)),
                "CPU-bound" if r.cpu_bound else "within threshold",
            ),
            ("above normal", _pct(_num(r.share_above_normal_pct), 1), f"> {fmt_ns(normal)}"),
            ("idle total", fmt_ns(_num(r.total_ns)), "sum of gaps"),
        ]
    )
    if not bins or not any(b[2] for b in bins):
        return head + cards + _note(r.message or "No gaps between kernels.")

    def color(lo_: float, hi_: float) -> str:
        mid = math.sqrt(lo_ * hi_)
        return "#54a24b" if mid < normal else ("#e8890c" if mid < p99t else "#e45756")

    vl = [
        VLine(normal, f"{fmt_ns(normal)} normal", "#2f9e44"),
        VLine(p99t, f"{fmt_ns(p99t)} P99 threshold", "#c92a2a"),
    ]
    for lab, v in (("P50", _num(r.p50_ns)), ("P99", _num(r.p99_ns))):
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
    leg = legend(
        [
            (f"normal (< {fmt_ns(normal)})", "#54a24b"),
            (f"{fmt_ns(normal)} - {fmt_ns(p99t)}", "#e8890c"),
            (f"> {fmt_ns(p99t)}", "#e45756"),
        ]
    )
    extra = ""
    per_stream = r.per_stream()
    if len(per_stream) > 1:
        rows = [
            (
                row.device_id,
                row.pid,
                row.stream_id,
                row.kernels,
                row.gaps,
                fmt_ns(_num(row.p50_ns)),
                fmt_ns(_num(row.p99_ns)),
                _pct(_num(row.share_above_normal_pct), 1),
            )
            for row in per_stream[:20]
        ]
        extra = (
            "<details><summary>gaps per stream</summary>"
            + _html_table(
                ["device", "pid", "stream", "kernels", "gaps", "P50", "P99", "above normal"],
                rows,
                numeric=[True] * 8,
            )
            + "</details>"
        )
    return head + cards + f'<div class="plotbox">{svg}{leg}</div>' + extra


def _section_idle(d: Diagnosis) -> str:
    head = _h2(
        "GPU idle by cause",
        "Why the GPU waited before each kernel: each gap gets one cause from the unit "
        "windows and the launching thread's CUDA calls. Only launch-bound gaps are launch "
        "overhead (check C1).",
    )
    r = _analysis(d, "gpu_idle")
    if not isinstance(r, GpuIdleResult):
        return head + _missing(d, "gpu_idle", "No GPU idle breakdown")
    cards = _kv_cards([
        ("gaps", f"{r.gaps:,}", f"unit {r.unit}" if r.unit else "no unit: whole run"),
        ("idle total", fmt_ns(_num(r.idle_ns)), "sum of gaps"),
        ("launch-bound P99", fmt_ns(_num(r.launch_bound_p99_ns)),
         "launch overhead" if r.launch_overhead else "within threshold"),
        ("launch-bound gaps", f"{r.launch_bound_gaps:,}",
         _pct(_num(r.launch_bound_idle_pct), 1) + " of idle time"),
    ])
    rows = [(c.cause.replace("_", " "), c.gaps, fmt_ns(_num(c.idle_ns)), _pct(c.share_pct, 1),
             IDLE_MEANING[c.cause]) for c in r.causes() if c.gaps]
    table = _html_table(["cause", "gaps", "idle", "share", "what it means"], rows,
                        numeric=[False, True, True, True, False])
    streams = r.tables.get("per_stream")
    extra = ""
    if streams is not None and streams.num_rows:
        srows = [(x["pid"], x["device_id"], x["stream_id"], x["cause"].replace("_", " "),
                  x["gaps"], fmt_ns(_num(x["idle_ns"])), _pct(x["share_pct"], 1))
                 for x in sorted(streams.to_pylist(), key=lambda x: -x["idle_ns"])[:30]]
        extra = ("<details><summary>per process, GPU and stream</summary>"
                 + _html_table(["pid", "device", "stream", "cause", "gaps", "idle", "share"],
                               srows, numeric=[True, True, True, False, True, True, True])
                 + "</details>")
    return head + cards + table + extra


def _direction(kind: str) -> str:
    k = str(kind or "")
    for d_ in ("HtoD", "DtoH", "DtoD", "PtoP", "HtoH"):
        if d_ in k:
            return d_
    return k


def _section_transfers(d: Diagnosis) -> str:
    head = _h2(
        "Transfer bandwidth",
        "Median bandwidth per copy kind (whiskers: P10 to P90 of "
        "single copies) against the host link's per-direction rate (dashed).",
    )
    r = _analysis(d, "transfers")
    if not isinstance(r, TransfersResult):
        return head + _missing(d, "transfers", "No transfers")
    by_kind = r.by_kind()
    links: dict[str, tuple[float, str]] = {}
    for lk in r.links():
        g = _num(lk.link_gbps)
        if g is None:
            continue
        dirn = str(lk.direction)
        if dirn not in links or g > links[dirn][0]:
            links[dirn] = (g, str(lk.link_note or lk.link_source or ""))
    for dirn, p in (("HtoD", "htod"), ("DtoH", "dtoh")):
        g = _num(r.direction(p).link_gbps)
        if dirn not in links and g:
            links[dirn] = (g, str(r.link_source or ""))
    bars: list[Bar] = []
    if by_kind:
        for row in sorted(by_kind, key=lambda r_: -(r_.total_bytes or 0))[:10]:
            op = str(row.op or "memcpy")
            kind = "memset" if op == "memset" else str(row.copy_kind or "?")
            dirn = _direction(kind)
            med = _num(row.median_gbps) or 0.0
            src, dst = row.src_kind, row.dst_kind
            sub = f"{src}→{dst}" if src and dst and op != "memset" else (str(dst or src or ""))
            link = links.get(dirn)
            tip = (
                f"{kind} {sub}: {int(row.copies or 0):,} copies, "
                f"{fmt_bytes(row.total_bytes)}; median {_gbps(med)}, "
                f"P10 {_gbps(_num(row.p10_gbps))}, "
                f"P90 {_gbps(_num(row.p90_gbps))}, "
                f"aggregate {_gbps(_num(row.aggregate_gbps))}"
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
                    lo=_num(row.p10_gbps),
                    hi=_num(row.p90_gbps),
                )
            )
    parts = [head]
    cards = [
        ("copies", f"{int(r.copies or 0):,}", f"{fmt_bytes(r.total_bytes)}"),
        ("copy time", fmt_ns(_num(r.total_time_ns)), ""),
    ]
    for dirn, p in (("HtoD", "htod"), ("DtoH", "dtoh")):
        f = r.direction(p)
        if f.copies:
            cards.append(
                (
                    f"{dirn} aggregate",
                    _gbps(_num(f.aggregate_gbps)),
                    f"{_pct(_num(f.aggregate_pct_of_link))} of the link",
                )
            )
    if r.pageable_copies:
        cards.append(
            (
                "pageable copies",
                f"{int(r.pageable_copies):,}",
                f"{_pct(_num(r.pageable_time_pct))} of copy time",
            )
        )
    cards.append(
        (
            "same-direction contention",
            _pct(_num(r.contention_share_pct)),
            "of copy time overlapped",
        )
    )
    parts.append(_kv_cards(cards))
    if bars:
        svg = bar_chart(
            bars,
            title="Transfer bandwidth by copy kind",
            y_label="GB/s",
            y_fmt=lambda v: fmt_num(v),
        )
        leg = legend(
            [(k, c) for k, c in GPU_COLORS.items() if any(b.color == c for b in bars)]
            + [("host link rate", CURVE)]
        )
        parts.append(f'<div class="plotbox">{svg}{leg}</div>')
    else:
        parts.append(_note(r.message or "No copies to plot."))
    notes = sorted({v[1] for v in links.values() if v[1]})
    if notes:
        parts.append(
            _note(
                "Link: "
                + "; ".join(notes)
                + (
                    ""
                    if r.link_source != "default"
                    else " - pass --baseline with nvbandwidth -j output for a measured figure."
                ),
                "note small",
            )
        )
    host = r.host()
    if host:
        rows = [
            (
                row.device_id,
                row.direction,
                f"{int(row.copies or 0):,}",
                fmt_bytes(row.median_bytes),
                _gbps(_num(row.median_gbps)),
                _gbps(_num(row.p90_gbps)),
                _gbps(_num(row.aggregate_gbps)),
                _gbps(_num(row.link_gbps)),
                _pct(_num(row.achieved_pct_of_link)),
            )
            for row in host
        ]
        parts.append(
            "<details><summary>host link per device and direction</summary>"
            + _html_table(
                [
                    "device",
                    "direction",
                    "copies",
                    "median size",
                    "median",
                    "P90",
                    "aggregate",
                    "link",
                    "achieved of link",
                ],
                rows,
                numeric=[True, False] + [True] * 7,
            )
            + "</details>"
        )
    return "".join(parts)


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


def _attribution_rows(r: RangesResult) -> list[dict]:
    """Components of the tail attribution: ``component``, ``family`` (cpu, gpu or ""),
    ``median_ns``, ``tail_ns``, ``delta_ns``, ``share``, from the ``attribution`` table.
    The ``total`` row is left out.
    """
    out: list[dict] = [
        {
            "component": str(row.component),
            "family": str(row.family or ""),
            "median_ns": _num(row.median_mean_ns) or 0.0,
            "tail_ns": _num(row.tail_mean_ns) or 0.0,
            "delta_ns": _num(row.delta_ns),
            "share": _num(row.share_of_delta),
        }
        for row in r.attribution_rows()
    ]
    out = [
        row
        for row in out
        if row["family"] != "total" and row["component"] not in ("duration", "total", "duration_ns")
    ]
    for row in out:
        if not row["family"]:
            prefix = row["component"].split("_", 1)[0].lower()
            row["family"] = prefix if prefix in FAMILY_NAMES else ""
        if row["delta_ns"] is None:
            row["delta_ns"] = row["tail_ns"] - row["median_ns"]
    for fam in {row["family"] for row in out}:
        rows = [row for row in out if row["family"] == fam]
        total = sum(max(row["delta_ns"], 0) for row in rows)
        for row in rows:
            if row["share"] is None and total:
                row["share"] = max(row["delta_ns"], 0) / total
    return out


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


def _section_attribution(d: Diagnosis) -> str:
    pct = d.settings.tail_pct
    r = _analysis(d, "ranges")
    r = r if isinstance(r, RangesResult) else None
    tail_n = r.tail_n if r is not None else None
    med_n = r.median_band_n if r is not None else None
    who = (
        f"the slowest {fmt_num(pct)}% ({tail_n} units)"
        if tail_n
        else f"the slowest {fmt_num(pct)}%"
    )
    band = f"the median band ({med_n} units around P50)" if med_n else "the median band"
    head = _h2(
        "Tail attribution",
        esc(
            f"Mean time per unit in {band} against {who}. Each side of the unit adds up to its "
            "duration: the CPU side by what the unit's thread was doing, the GPU side by what "
            "its GPU was doing."
        ),
    )
    if r is None:
        return head + _missing(d, "ranges", "No tail attribution")
    rows = _attribution_rows(r)
    if not rows:
        return head + _note("The ranges analysis gave no attribution of the tail.")
    fams = [f for f in ("cpu", "gpu") if any(row["family"] == f for row in rows)]
    fams += sorted({row["family"] for row in rows} - set(fams))
    extra_colors = iter(PALETTE)
    colors = {
        row["component"]: COMPONENT_COLORS.get(row["component"]) or next(extra_colors, INK)
        for row in rows
    }
    bars = []
    for fam in fams:
        segs = [row for row in rows if row["family"] == fam]
        name = FAMILY_NAMES.get(fam, fam or "components")
        bars.append(
            (
                f"{name}: median",
                [(_pretty(x["component"]), x["median_ns"], colors[x["component"]]) for x in segs],
            )
        )
        bars.append(
            (
                f"{name}: slowest",
                [(_pretty(x["component"]), x["tail_ns"], colors[x["component"]]) for x in segs],
            )
        )
    svg = stacked_hbars(
        bars, title="Tail attribution: median band vs slowest units", x_label="mean time per unit"
    )
    leg = legend(
        [
            (
                f"{fam.upper() + ' ' if fam else ''}{_pretty(row['component'])}",
                colors[row["component"]],
            )
            for fam in fams
            for row in rows
            if row["family"] == fam
        ]
    )
    table = _html_table(
        ["side", "component", "points at", "median band", "slowest", "extra", "share of the extra"],
        [
            (
                FAMILY_NAMES.get(row["family"], row["family"]),
                _pretty(row["component"]),
                _layer(row["component"]) or "waiting (a consequence)",
                fmt_ns(row["median_ns"]),
                fmt_ns(row["tail_ns"]),
                ("+" if row["delta_ns"] > 0 else "") + fmt_ns(row["delta_ns"]),
                "-" if row["share"] is None else f"{row['share']:.0%}",
            )
            for fam in fams
            for row in sorted(
                (x for x in rows if x["family"] == fam), key=lambda x: -(x["delta_ns"] or 0)
            )
        ],
        numeric=[False, False, False, True, True, True, True],
    )
    slow = r.tables.get("slowest")
    extra = ""
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
        rows_ = [
            [
                fmt_ns(_num(v))
                if c.endswith("_ns") and c != "start_ns" and _num(v) is not None
                else v
                for c, v in ((c, row.get(c)) for c in cols)
            ]
            for row in slow.slice(0, 20).to_pylist()
        ]
        extra = (
            "<details><summary>the slowest units, decomposed</summary>"
            + _html_table(
                [c.replace("_ns", "").replace("_", " ") for c in cols],
                rows_,
                numeric=[True] * len(cols),
            )
            + "</details>"
        )
    return head + f'<div class="plotbox">{svg}{leg}</div>' + table + extra


def _section_timelines(d: Diagnosis, timelines: Sequence[UnitTimeline] | None) -> str:
    head = _h2(
        "Slowest units on the timeline",
        "CUDA API calls on the unit's thread (coloured by category), NVTX ranges, and the "
        "process's GPU work (kernels, copies) inside each unit's window; the last one is "
        "a unit of median latency for contrast.",
    )
    if timelines is None:
        return head + _note(
            "Timelines need the open report: gather them with "
            "nsysdiag.render.html.collect_timelines(report, diagnosis) and pass "
            "them as timelines=... (nsysdiag diagnose --html does this)."
        )
    if not timelines:
        return head + _note("No unit of latency to show (the trace has no repeated unit of work).")
    parts = [head]
    seen_cats: set[str] = set()
    seen_gpu: set[str] = set()
    for tl in timelines:
        parts.append(_one_timeline(d, tl, seen_cats, seen_gpu))
    items = [
        (f"API: {c}", CATEGORY_COLORS.get(c, CATEGORY_COLORS["other"]))
        for c in CATEGORY_COLORS
        if c in seen_cats
    ]
    items += [(f"GPU: {k}", GPU_COLORS[k]) for k in GPU_COLORS if k in seen_gpu]
    if items:
        parts.insert(1, legend(items))
    return "".join(parts)


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


def _one_timeline(
    d: Diagnosis, tl: UnitTimeline, seen_cats: set[str], seen_gpu: set[str]
) -> str:
    t0, t1 = _num(tl.start_ns), _num(tl.end_ns)
    label = str(tl.label or tl.name or "unit")
    if t0 is None or t1 is None or t1 <= t0:
        return (
            f'<div class="tl"><h3>{esc(label)}</h3>'
            + _note(str(tl.note or "no window"))
            + "</div>"
        )
    dur = t1 - t0
    lanes: list[Lane] = []
    nvtx = [e for e in tl.nvtx if _num(e.start_ns) is not None]
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
    body = (
        timeline(lanes, t0, t1, title=f"Timeline of {label}")
        if lanes
        else _note("No CUDA API calls, NVTX ranges or GPU work inside this window.")
    )
    note = _note(tl.note, "note small") if tl.note else ""
    return (
        f'<div class="tl"><h3>{esc(label)} <span class="muted">{esc(" · ".join(stats))}'
        f"</span></h3>{note}{body}</div>"
    )


def _section_jitter(d: Diagnosis) -> str:
    head = _h2(
        "Kernel duration jitter",
        "Kernels with the most GPU time: how far their slow "
        "launches stray from the median (check D1).",
    )
    j = _analysis(d, "jitter")
    per_kernel = j.per_kernel() if isinstance(j, JitterResult) else []
    if not per_kernel:
        return head + _missing(d, "jitter", "No kernel jitter figures")
    rows = []
    for row in per_kernel[:15]:
        rows.append(
            (
                row.name,
                f"{int(row.instances or 0):,}",
                fmt_ns(_num(row.total_ns)),
                fmt_ns(_num(row.p50_ns)),
                fmt_ns(_num(row.p99_ns)),
                "-" if _num(row.p99_over_p50) is None else f"{row.p99_over_p50:.2f}",
                _pct(_num(row.slow_pct), 1),
            )
        )
    return head + _html_table(
        ["kernel", "launches", "GPU time", "P50", "P99", "P99/P50", "slow"],
        rows,
        numeric=[False] + [True] * 6,
    )


def _section_culprit(d: Diagnosis) -> str:
    """Other GPU work during the slow units by name, and latency against work per unit."""
    head = _h2(
        "Culprit",
        "Other GPU work that ran during the slowest units, and whether they do more work "
        "or the same work slower.",
    )
    parts = []
    inter = _analysis(d, "interference")
    streams = inter.per_stream() if isinstance(inter, InterferenceResult) else []
    if streams:
        parts.append(_html_table(
            ["process", "stream", "names", "slow units", "median units", "time / slow unit",
             "time / median unit"],
            [(f"{w.process_name or '-'} ({w.pid})", w.stream_id, w.names,
              f"{w.slow_units} of {w.slow_n}", f"{w.median_units} of {w.median_n}",
              fmt_ns(w.slow_overlap_mean_ns), fmt_ns(w.median_overlap_mean_ns))
             for w in streams[:10]],
            numeric=[False, True, False, True, True, True, True]))
    work = _analysis(d, "workload")
    if isinstance(work, WorkloadResult):
        parts.append(_note(f"{work.kind.replace('_', ' ')}: {work.line()}"))
        ranges = _analysis(d, "ranges")
        if isinstance(ranges, RangesResult) and "instances" in ranges.tables:
            t = ranges.tables["instances"].select(["n_kernels", "duration_ns"])
            if t.num_rows > 3000:  # a sample keeps the page small
                t = t.take(list(range(0, t.num_rows, t.num_rows // 3000 + 1)))
            cut = (d.tail.p99_ns or float("inf"))
            x, y = t.column("n_kernels").to_pylist(), t.column("duration_ns").to_pylist()
            line = ((work.slope_ns_per_kernel, _intercept(work))
                    if work.slope_ns_per_kernel is not None else None)
            parts.append(scatter(
                [v or 0 for v in x], [v or 0 for v in y],
                title="Latency against own kernels per unit", x_label="own kernels per unit",
                y_label="latency", line=line, highlight=[(v or 0) >= cut for v in y]))
        bins = work.bins()
        if bins:
            parts.append(_html_table(
                ["kernels per unit", "units", "median latency", "time per kernel"],
                [(f"{b.min_kernels}-{b.max_kernels}", b.units, fmt_ns(b.p50_ns),
                  fmt_ns(b.mean_per_kernel_ns)) for b in bins],
                numeric=[False, True, True, True]))
    if not parts:
        return head + _note("Not examined: other GPU work, own kernel time and launch calls "
                            "did not grow in the slowest units.")
    return head + "".join(parts)


def _intercept(work: WorkloadResult) -> float:
    rel = work.tables.get("relation")
    value = rel.column("intercept_ns")[0].as_py() if rel is not None and rel.num_rows else None
    return float(value) if value is not None else 0.0


def _section_findings(d: Diagnosis) -> str:
    head = _h2("Findings", "Most important first, with the measured evidence and what to do.")
    if not d.findings:
        return head + _note("No findings.")
    out = [head]
    for i, f in enumerate(d.findings, 1):
        sev = SEVERITY_COLORS.get(f.severity, INK)
        ev = "".join(f"<li>{esc(x)}</li>" for x in f.evidence)
        fix = f'<div class="fix"><b>Fix</b> {esc(f.fix)}</div>' if f.fix else ""
        check = f'<span class="chk">check {esc(f.check)}</span>' if f.check else ""
        out.append(
            f'<div class="finding" style="border-left-color:{sev}"><div class="fhead">'
            f'<span class="num">{i}</span>'
            f'<span class="badge" style="background:{sev}">{esc(f.severity)}</span>'
            f'<span class="badge layer" style="background:{LAYER_COLORS.get(f.layer, INK)}">'
            f"{esc(f.layer)}</span><b>{esc(f.title)}</b>{check}</div>"
            + (f"<ul>{ev}</ul>" if ev else "")
            + fix
            + "</div>"
        )
    return "".join(out)


def _section_captured(d: Diagnosis) -> str:
    head = _h2("Captured data and settings")
    rows = [(k, v) for k, v in (d.captured or {}).items()]
    status_rows = [(k, r.status, r.message) for k, r in (d.analyses or {}).items()]
    settings = [(k, "" if v is None else v) for k, v in d.settings_dict().items()]
    return (
        head
        + '<div class="cols">'
        + "<div><h3>views</h3>"
        + _html_table(["view", "status"], rows)
        + "</div>"
        + "<div><h3>analyses</h3>"
        + _html_table(["analysis", "status", "message"], status_rows)
        + "<h3>settings</h3>"
        + _html_table(["setting", "value"], settings)
        + "</div></div>"
    )


# ============================================================================ style

_CSS = """
:root{--ink:#1f2933;--muted:#616e7c;--line:#e4e7eb;--bg:#f5f7fa;--card:#fff;--accent:#4c78a8}
*{box-sizing:border-box}
body{margin:0;font:14px/1.5 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",
Arial,"DejaVu Sans",sans-serif;color:var(--ink);background:var(--bg)}
header.top{display:flex;gap:16px;align-items:baseline;padding:10px 24px;background:#1f2933;
color:#fff;flex-wrap:wrap}
header .brand{font-weight:700;font-size:16px;letter-spacing:.5px}
header .trace{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:13px;opacity:.9;overflow-wrap:anywhere;flex:1}
header .stamp{font-size:12px;opacity:.7}
main{max-width:1120px;margin:0 auto;padding:18px 24px 40px}
section{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:16px 20px;
margin:0 0 18px}
section#verdict{background:transparent;border:0;padding:0}
h2{font-size:18px;margin:0 0 4px}
h3{font-size:14px;margin:14px 0 6px}
p.sub{margin:0 0 12px;color:var(--muted);font-size:13px}
.verdict{background:var(--card);border:1px solid var(--line);border-left:8px solid;
border-radius:8px;padding:14px 18px;margin-bottom:14px}
.vhead{display:flex;align-items:center;gap:12px;flex-wrap:wrap}
.vlabel{text-transform:uppercase;font-size:12px;color:var(--muted);letter-spacing:1px}
.vlayer{color:#fff;font-weight:700;padding:3px 10px;border-radius:4px;font-size:16px;
letter-spacing:.5px}
.vname{font-size:18px;font-weight:600}
.vconf{margin-left:auto;color:var(--muted);font-size:13px;display:flex;align-items:center;gap:8px}
.meter,.sbar{display:inline-block;width:120px;height:8px;background:var(--line);border-radius:4px;
overflow:hidden}
.meter>span,.sbar>span{display:block;height:100%}
.vsummary{font-size:15px;margin:10px 0 4px}
.scores{display:flex;gap:18px;flex-wrap:wrap;align-items:center;font-size:12px;color:var(--muted);
margin-top:6px}
.score{display:flex;gap:6px;align-items:center}.score .sbar{width:80px}
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:4px 0 12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:8px 12px;
min-width:120px;flex:1 1 120px;overflow:hidden}
.card .k{font-size:11px;text-transform:uppercase;color:var(--muted);letter-spacing:.5px}
.card .v{font-size:18px;font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
.card .s{font-size:12px;color:var(--muted)}
nav.toc{display:flex;flex-wrap:wrap;gap:6px;margin:0 0 16px}
nav.toc a{font-size:13px;text-decoration:none;color:var(--accent);border:1px solid var(--line);
background:var(--card);padding:3px 10px;border-radius:14px}
.plotbox{margin:6px 0 8px}
svg.plot{display:block;max-width:100%;height:auto;font-family:inherit}
svg .tick{font-size:11px;fill:#52606d}
svg .tick.muted{fill:#9aa5b1;font-size:10px}
svg .axis-label{font-size:12px;fill:#52606d}
svg .marker-label{font-size:11px;font-weight:600;paint-order:stroke;stroke:#fff;stroke-width:3px}
svg .value-label{font-size:11px;fill:#1f2933;font-weight:600;paint-order:stroke;stroke:#fff;
stroke-width:3px}
svg .row-label{font-size:12px;fill:#1f2933}
svg .seg-label,svg .span-label{font-size:10px;pointer-events:none}
svg .bar:hover,svg .segment:hover,svg .span:hover{opacity:.75}
ul.legend{list-style:none;display:flex;flex-wrap:wrap;gap:4px 16px;padding:0;margin:4px 0 0 70px;
font-size:12px;color:var(--muted)}
ul.legend li{display:flex;align-items:center;gap:6px}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px}
.swatch.line{height:3px}
.callout{background:#f8f9fb;border:1px solid var(--line);border-radius:6px;padding:10px 14px;
margin-top:8px}
.muted{color:var(--muted);font-weight:400;font-size:12px}
p.note{color:var(--muted);font-style:italic;margin:6px 0}
p.note.small{font-size:12px}
.tablewrap{overflow-x:auto}
table{border-collapse:collapse;width:100%;font-size:13px;margin:6px 0}
th,td{padding:4px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{font-size:11px;text-transform:uppercase;color:var(--muted);letter-spacing:.4px}
td{overflow-wrap:break-word}
td.num,th.num{text-align:right;white-space:nowrap}
details{margin:8px 0}summary{cursor:pointer;color:var(--accent);font-size:13px}
.tl{border-top:1px solid var(--line);padding-top:4px;margin-top:8px}
.tl h3{margin-bottom:2px}
.finding{border:1px solid var(--line);border-left:5px solid;border-radius:6px;padding:8px 14px;
margin:10px 0}
.fhead{display:flex;gap:8px;align-items:center;flex-wrap:wrap}
.fhead .num{color:var(--muted);font-weight:600}
.badge{color:#fff;font-size:11px;padding:1px 7px;border-radius:10px;text-transform:uppercase;
letter-spacing:.4px}
.chk{margin-left:auto;font-size:12px;color:var(--muted)}
.finding ul{margin:6px 0;padding-left:22px}
.fix{background:#eef6ee;border-radius:4px;padding:6px 10px;font-size:13px}
.cols{display:grid;grid-template-columns:1fr 2fr;gap:20px}
footer{text-align:center;color:var(--muted);font-size:12px;padding:0 0 30px}
@media (max-width:760px){.cols{grid-template-columns:1fr}main{padding:10px}}
@media print{body{background:#fff}section{break-inside:avoid}nav.toc{display:none}}
"""
