"""Small inline-SVG plots for the HTML report: no JavaScript, no external files.

Every function returns one ``<svg>`` element as a string. Each piece of text that reaches
the markup (labels, tooltips in ``<title>``) goes through :func:`esc`, so strings
from a trace (kernel names, NVTX text, process names) can never become markup.

Plots scale with the page (``viewBox`` plus ``width="100%"``); sizes below are in
viewBox units, which are CSS pixels at the default width.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..formatting import fmt_ns

#: default plot size (viewBox units)
WIDTH, HEIGHT = 760, 300
#: plot margins: left, right, top, bottom
MARGIN = (70, 20, 26, 46)

#: colours shared by the report's CSS and plots
INK = "#1f2933"
MUTED = "#616e7c"
GRID = "#e4e7eb"
BAR = "#4c78a8"
CURVE = "#e45756"
PALETTE = (
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#b279a2",
    "#eeca3b",
    "#9d755d",
    "#ff9da6",
    "#bab0ac",
)


def esc(value: Any) -> str:
    """Text escaped for HTML and SVG (element content and attribute values)."""
    return html.escape("" if value is None else str(value), quote=True)


def _f(v: float) -> str:
    """A coordinate with at most two decimals (keeps the markup small)."""
    return f"{v:.2f}".rstrip("0").rstrip(".") if math.isfinite(v) else "0"


def fmt_num(v: float | None, digits: int = 3) -> str:
    """A plain number with ``digits`` significant digits and no exponent for everyday sizes."""
    if v is None or not math.isfinite(float(v)):
        return "-"
    v = float(v)
    if v == 0:
        return "0"
    if abs(v) >= 10**digits:
        return f"{v:,.0f}"
    return f"{v:.{digits}g}"


# ----------------------------------------------------------------------------- scales


@dataclass(frozen=True)
class Scale:
    """Maps data values in ``[lo, hi]`` to pixels in ``[p0, p1]``, linearly or in log10."""

    lo: float
    hi: float
    p0: float
    p1: float
    log: bool = False

    def __call__(self, v: float) -> float:
        lo, hi, x = self.lo, self.hi, v
        if self.log:
            lo, hi = math.log10(lo), math.log10(hi)
            x = math.log10(max(v, self.lo * 1e-3)) if v > 0 else lo - 1
        if hi == lo:
            return (self.p0 + self.p1) / 2
        return self.p0 + (x - lo) / (hi - lo) * (self.p1 - self.p0)

    def ticks(self, fmt: Callable[[float], str], max_ticks: int = 8) -> list[tuple[float, str]]:
        """Tick positions with labels: decades (and 2, 5 multiples when few) on a log scale,
        1/2/5 steps on a linear one."""
        if self.log:
            lo_e, hi_e = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            decades = hi_e - lo_e
            mults = (1,) if decades > 4 else ((1, 3) if decades > 2 else (1, 2, 5))
            step = max(1, math.ceil(decades / max_ticks)) if len(mults) == 1 else 1
            out = []
            for e in range(lo_e, hi_e + 1):
                if len(mults) == 1 and (e - lo_e) % step:
                    continue
                for m in mults:
                    v = m * 10.0**e
                    if self.lo * (1 - 1e-9) <= v <= self.hi * (1 + 1e-9):
                        out.append((v, fmt(v)))
            return out
        span = self.hi - self.lo
        if span <= 0:
            return [(self.lo, fmt(self.lo))]
        raw = span / max(1, max_ticks - 1)
        mag = 10 ** math.floor(math.log10(raw))
        step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
        start = math.ceil(self.lo / step - 1e-9) * step
        out, v = [], start
        while v <= self.hi + step * 1e-9:
            out.append((v, fmt(v)))
            v += step
        return out


def nice_max(v: float) -> float:
    """The smallest 1/2/2.5/5 x 10^k at or above ``v`` (an axis top)."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    steps = (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)
    return next(m * mag for m in steps if m * mag >= v * (1 - 1e-12))


# ----------------------------------------------------------------------------- pieces


def _svg_open(width: float, height: float, label: str, cls: str) -> str:
    return (
        f'<svg class="plot {esc(cls)}" role="img" '
        f'viewBox="0 0 {_f(width)} {_f(height)}" width="100%" '
        f'preserveAspectRatio="xMidYMid meet" aria-label="{esc(label)}">'
        f"<title>{esc(label)}</title>"
    )


def _text(
    x: float,
    y: float,
    s: str,
    *,
    anchor: str = "middle",
    cls: str = "",
    size: float | None = None,
    fill: str | None = None,
    weight: str | None = None,
    rotate: float | None = None,
) -> str:
    attrs = [f'x="{_f(x)}"', f'y="{_f(y)}"', f'text-anchor="{anchor}"']
    if cls:
        attrs.append(f'class="{cls}"')
    if size:
        attrs.append(f'font-size="{_f(size)}"')
    if fill:
        attrs.append(f'fill="{fill}"')
    if weight:
        attrs.append(f'font-weight="{weight}"')
    if rotate is not None:
        attrs.append(f'transform="rotate({_f(rotate)} {_f(x)} {_f(y)})"')
    return f"<text {' '.join(attrs)}>{esc(s)}</text>"


def _rect(
    x: float,
    y: float,
    w: float,
    h: float,
    fill: str,
    tip: str = "",
    *,
    cls: str = "",
    extra: str = "",
) -> str:
    c = f' class="{cls}"' if cls else ""
    body = f"<title>{esc(tip)}</title>" if tip else ""
    attrs = (
        f'x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0.0))}" height="{_f(max(h, 0.0))}" '
        f'fill="{fill}"{c}{(" " + extra) if extra else ""}'
    )
    return f"<rect {attrs}>{body}</rect>" if body else f"<rect {attrs}/>"


def _axes(
    xs: Scale,
    ys: Scale,
    *,
    x_fmt: Callable[[float], str],
    y_fmt: Callable[[float], str],
    x_label: str,
    y_label: str,
    height: float,
    x_ticks: int = 9,
    y_ticks: int = 6,
) -> list[str]:
    """Grid lines, tick labels and axis titles."""
    out = []
    top, bottom = ys.p1, ys.p0
    for v, lab in ys.ticks(y_fmt, y_ticks):
        y = ys(v)
        out.append(
            f'<line class="grid" x1="{_f(xs.p0)}" x2="{_f(xs.p1)}" y1="{_f(y)}" '
            f'y2="{_f(y)}" stroke="{GRID}"/>'
        )
        out.append(_text(xs.p0 - 6, y + 3.5, lab, anchor="end", cls="tick"))
    for v, lab in xs.ticks(x_fmt, x_ticks):
        x = xs(v)
        out.append(
            f'<line class="grid" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(top)}" '
            f'y2="{_f(bottom)}" stroke="{GRID}"/>'
        )
        out.append(_text(x, bottom + 15, lab, cls="tick"))
    out.append(
        f'<line class="axis" x1="{_f(xs.p0)}" x2="{_f(xs.p1)}" y1="{_f(bottom)}" '
        f'y2="{_f(bottom)}" stroke="{MUTED}"/>'
    )
    out.append(
        f'<line class="axis" x1="{_f(xs.p0)}" x2="{_f(xs.p0)}" y1="{_f(top)}" '
        f'y2="{_f(bottom)}" stroke="{MUTED}"/>'
    )
    if x_label:
        out.append(_text((xs.p0 + xs.p1) / 2, height - 8, x_label, cls="axis-label"))
    if y_label:
        out.append(_text(16, (top + bottom) / 2, y_label, cls="axis-label", rotate=-90))
    return out


def _path(points: Sequence[tuple[float, float]]) -> str:
    return "M" + " L".join(f"{_f(x)},{_f(y)}" for x, y in points)


# ----------------------------------------------------------------------------- plots


@dataclass(frozen=True)
class Curve:
    """A line over a plot: ``x`` and ``y`` in data units."""

    x: Sequence[float]
    y: Sequence[float]
    label: str
    color: str = CURVE
    dash: str = ""
    width: float = 2.0


@dataclass(frozen=True)
class VLine:
    """A vertical marker at ``x`` (data units) with a label."""

    x: float
    label: str
    color: str = INK
    dash: str = "5 4"


def histogram(
    bins: Sequence[tuple[float, float, float]],
    *,
    title: str,
    x_log: bool = True,
    x_fmt: Callable[[float], str] = fmt_ns,
    x_label: str = "",
    y_label: str = "count",
    curves: Sequence[Curve] = (),
    vlines: Sequence[VLine] = (),
    bar_color: Callable[[float, float], str] | str = BAR,
    tip: Callable[[float, float, float], str] | None = None,
    y_log: bool = False,
    width: float = WIDTH,
    height: float = HEIGHT,
    cls: str = "histogram",
) -> str:
    """Bars over ``(lo, hi, count)`` bins, optional curves and vertical markers.

    ``bar_color`` is a colour or a function of the bin edges; ``tip`` gives each bar's
    tooltip. With ``x_log`` the bins are expected to be log-spaced (equal widths on screen).
    """
    bins = [
        (float(lo), float(hi), float(c)) for lo, hi, c in bins if hi > lo and (not x_log or lo > 0)
    ]
    if not bins:
        return ""
    ml, mr, mt, mb = MARGIN
    lo = min(b[0] for b in bins)
    hi = max(b[1] for b in bins)
    xs = Scale(lo, hi, ml, width - mr, log=x_log)
    marks = _layout_markers(vlines, xs, lo, hi, width)
    rows = 1 + max((m[2] for m in marks), default=-1)
    mt = max(12, 8 + 14 * rows)
    height += 14 * max(0, rows - 1)
    peak = max([b[2] for b in bins] + [max(c.y, default=0) for c in curves])
    if y_log:
        ys = Scale(0.8, nice_max(max(peak, 1.0) * 1.5), height - mb, mt, log=True)
    else:
        ys = Scale(0, nice_max(max(peak, 1.0) * 1.04), height - mb, mt)
    out = [_svg_open(width, height, title, cls)]
    out += _axes(
        xs,
        ys,
        x_fmt=x_fmt,
        y_fmt=lambda v: fmt_num(v),
        x_label=x_label,
        y_label=y_label,
        height=height,
    )
    out.append('<g class="bars">')
    base = ys(ys.lo) if y_log else ys(0)
    for b_lo, b_hi, c in bins:
        if c <= 0:
            continue
        x0, x1 = xs(b_lo), xs(b_hi)
        y = ys(max(c, ys.lo)) if y_log else ys(c)
        y = min(y, base - 2.0)  # a bin with a single unit stays visible
        color = bar_color(b_lo, b_hi) if callable(bar_color) else bar_color
        t = tip(b_lo, b_hi, c) if tip else f"{x_fmt(b_lo)} - {x_fmt(b_hi)}: {fmt_num(c)}"
        out.append(_rect(x0 + 0.5, y, max(x1 - x0 - 1.0, 0.8), base - y, color, t, cls="bar"))
    out.append("</g>")
    for cv in curves:
        pts = [
            (xs(x), ys(max(y, ys.lo) if y_log else y))
            for x, y in zip(cv.x, cv.y, strict=False)
            if lo <= x <= hi and math.isfinite(y)
        ]
        if len(pts) > 1:
            dash = f' stroke-dasharray="{cv.dash}"' if cv.dash else ""
            out.append(
                f'<path class="curve" d="{_path(pts)}" fill="none" stroke="{cv.color}" '
                f'stroke-width="{_f(cv.width)}"{dash}><title>{esc(cv.label)}</title></path>'
            )
    # lines first, then every label over them (labels carry a white halo)
    for vl, x, row, _ in marks:
        out.append(
            f'<line class="marker" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(4 + 14 * row)}" '
            f'y2="{_f(ys.p0)}" stroke="{vl.color}" stroke-width="1.5" '
            f'stroke-dasharray="{vl.dash}"/>'
        )
    for vl, x, row, anchor in marks:
        out.append(
            _text(
                x + 4 if anchor == "start" else x - 4,
                14 + 14 * row,
                vl.label,
                anchor=anchor,
                cls="marker-label",
                fill=vl.color,
            )
        )
    out.append("</svg>")
    return "".join(out)


def _layout_markers(
    vlines: Sequence[VLine], xs: Scale, lo: float, hi: float, width: float
) -> list[tuple[VLine, float, int, str]]:
    """Place marker labels in rows above the plot so that no two overlap:
    ``(marker, x, row, anchor)`` for the markers inside ``[lo, hi]``."""
    placed: list[list[tuple[float, float]]] = []
    out = []
    for vl in sorted(vlines, key=lambda v: v.x):
        if not (lo <= vl.x <= hi):
            continue
        x = xs(vl.x)
        w = 6.4 * len(vl.label) + 4
        if x + 4 + w <= width - 2:
            span, anchor = (x, x + 4 + w), "start"
        else:
            span, anchor = (x - 4 - w, x), "end"
        row = 0
        while row < len(placed) and any(
            a < span[1] + 6 and span[0] < b + 6 for a, b in placed[row]
        ):
            row += 1
        if row == len(placed):
            placed.append([])
        placed[row].append(span)
        out.append((vl, x, row, anchor))
    return out


@dataclass(frozen=True)
class Bar:
    """One bar of :func:`bar_chart`: its value, label, colour, tooltip and reference line."""

    label: str
    value: float
    color: str = BAR
    tip: str = ""
    ref: float | None = None
    ref_label: str = ""
    sublabel: str = ""
    lo: float | None = None
    hi: float | None = None


def scatter(
    x: Sequence[float],
    y: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_fmt: Callable[[float], str] = fmt_num,
    y_fmt: Callable[[float], str] = fmt_ns,
    line: tuple[float, float] | None = None,
    highlight: Sequence[bool] | None = None,
    width: float = WIDTH,
    height: float = HEIGHT,
    cls: str = "scatter",
) -> str:
    """Points ``(x, y)`` (at most a few thousand: the caller samples), an optional
    least-squares ``line`` (slope, intercept) and highlighted points (drawn on top)."""
    pts = [(float(a), float(b)) for a, b in zip(x, y, strict=False)
           if math.isfinite(a) and math.isfinite(b)]
    if not pts:
        return ""
    hl = list(highlight) if highlight is not None else [False] * len(pts)
    ml, mr, mt, mb = MARGIN
    xs = Scale(0, nice_max(max(p[0] for p in pts) * 1.04), ml, width - mr)
    ys = Scale(0, nice_max(max(p[1] for p in pts) * 1.04), height - mb, mt)
    out = [_svg_open(width, height, title, cls)]
    out += _axes(xs, ys, x_fmt=x_fmt, y_fmt=y_fmt, x_label=x_label, y_label=y_label,
                 height=height)
    for flag in (False, True):
        color = CURVE if flag else BAR
        for (a, b), h in zip(pts, hl, strict=False):
            if bool(h) is flag:
                out.append(f'<circle cx="{_f(xs(a))}" cy="{_f(ys(b))}" r="{3 if flag else 2}" '
                           f'fill="{color}" fill-opacity="0.7"/>')
    if line is not None and all(map(math.isfinite, line)):
        slope, icpt = line
        x0, x1 = xs.lo, xs.hi
        y0, y1 = icpt + slope * x0, icpt + slope * x1
        out.append(f'<path d="{_path([(xs(x0), ys(max(y0, 0))), (xs(x1), ys(min(y1, ys.hi)))])}" '
                   f'stroke="{INK}" stroke-dasharray="5 4" fill="none"/>')
    out.append("</svg>")
    return "".join(out)


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    y_label: str = "",
    y_fmt: Callable[[float], str] = fmt_num,
    width: float = WIDTH,
    height: float = HEIGHT,
    cls: str = "bars",
) -> str:
    """Vertical bars; each may carry a reference value drawn as a dashed line over its slot
    (a line across the whole plot when every bar has the same reference)."""
    if not bars:
        return ""
    ml, mr, mt, mb = MARGIN
    mb += 14
    refs = [b.ref for b in bars if b.ref is not None]
    peak = max([b.value for b in bars] + refs + [b.hi for b in bars if b.hi is not None] + [0.0])
    ys = Scale(0, nice_max(max(peak, 1e-9) * 1.12), height - mb, mt)
    n = len(bars)
    slot = (width - ml - mr) / n
    xs = Scale(0, n, ml, width - mr)
    out = [_svg_open(width, height, title, cls)]
    for v, lab in ys.ticks(y_fmt, 6):
        y = ys(v)
        out.append(
            f'<line class="grid" x1="{_f(ml)}" x2="{_f(width - mr)}" y1="{_f(y)}" '
            f'y2="{_f(y)}" stroke="{GRID}"/>'
        )
        out.append(_text(ml - 6, y + 3.5, lab, anchor="end", cls="tick"))
    out.append(
        f'<line class="axis" x1="{_f(ml)}" x2="{_f(width - mr)}" y1="{_f(ys.p0)}" '
        f'y2="{_f(ys.p0)}" stroke="{MUTED}"/>'
    )
    if y_label:
        out.append(_text(16, (ys.p0 + ys.p1) / 2, y_label, cls="axis-label", rotate=-90))
    bw = min(slot * 0.6, 90)
    out.append('<g class="bars">')
    for i, b in enumerate(bars):
        cx = xs(i + 0.5)
        y = ys(max(b.value, 0.0))
        out.append(
            _rect(
                cx - bw / 2,
                y,
                bw,
                ys.p0 - y,
                b.color,
                b.tip or f"{b.label}: {y_fmt(b.value)}",
                cls="bar",
            )
        )
        label_y = y - 5
        if b.lo is not None and b.hi is not None and b.hi > b.lo:
            y_lo, y_hi = ys(b.lo), ys(b.hi)
            caps = "".join(
                f'<line x1="{_f(cx - 6)}" x2="{_f(cx + 6)}" y1="{_f(v)}" y2="{_f(v)}"/>'
                for v in (y_lo, y_hi)
            )
            out.append(
                f'<g class="whisker" stroke="{INK}" stroke-width="1.2">'
                f'<line x1="{_f(cx)}" x2="{_f(cx)}" y1="{_f(y_lo)}" y2="{_f(y_hi)}"/>'
                f"{caps}</g>"
            )
            label_y = min(label_y, y_hi - 5)
        if b.lo is not None:  # whiskers sit over the bar: the value goes to its right
            out.append(
                _text(
                    cx + bw / 2 + 4,
                    min(y + 14, ys.p0 - 4),
                    y_fmt(b.value),
                    anchor="start",
                    cls="value-label",
                )
            )
        else:
            out.append(_text(cx, label_y, y_fmt(b.value), cls="value-label"))
        out.append(_text(cx, ys.p0 + 16, _clip(b.label, max(8, int(slot / 6.5))), cls="tick"))
        if b.sublabel:
            out.append(
                _text(cx, ys.p0 + 30, _clip(b.sublabel, max(8, int(slot / 6.5))), cls="tick muted")
            )
    out.append("</g>")
    # one dashed line per run of neighbouring bars that share a reference value
    runs: list[list[int]] = []
    for i, b in enumerate(bars):
        if b.ref is None:
            continue
        if runs and runs[-1][-1] == i - 1 and bars[runs[-1][0]].ref == b.ref:
            runs[-1].append(i)
        else:
            runs.append([i])
    for run in runs:
        b = bars[run[0]]
        y = ys(b.ref)
        whole = len(run) == n
        x0 = ml if whole else xs(run[0]) + 4
        x1 = width - mr if whole else xs(run[-1] + 1) - 4
        out.append(
            f'<g class="ref"><line x1="{_f(x0)}" x2="{_f(x1)}" y1="{_f(y)}" '
            f'y2="{_f(y)}" stroke="{CURVE}" stroke-width="2" stroke-dasharray="7 4">'
            f"<title>{esc(b.ref_label)}</title></line>"
            + _text(x1 - 4, y - 6, b.ref_label, anchor="end", cls="marker-label", fill=CURVE)
            + "</g>"
        )
    out.append("</svg>")
    return "".join(out)


def stacked_hbars(
    rows: Sequence[tuple[str, Sequence[tuple[str, float, str]]]],
    *,
    title: str,
    x_label: str = "",
    x_fmt: Callable[[float], str] = fmt_ns,
    width: float = WIDTH,
    row_height: float = 46,
    cls: str = "stacked",
) -> str:
    """Horizontal stacked bars: ``rows`` of ``(label, [(segment, value, colour), ...])``."""
    if not rows:
        return ""
    ml, mr, mt, mb = 130, 64, 12, 44
    height = mt + mb + row_height * len(rows)
    total = max((sum(max(v, 0.0) for _, v, _ in segs) for _, segs in rows), default=0.0)
    xs = Scale(0, nice_max(max(total, 1e-9) * 1.02), ml, width - mr)
    out = [_svg_open(width, height, title, cls)]
    bottom = height - mb
    for v, lab in xs.ticks(x_fmt, 8):
        x = xs(v)
        out.append(
            f'<line class="grid" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(mt)}" y2="{_f(bottom)}" '
            f'stroke="{GRID}"/>'
        )
        out.append(_text(x, bottom + 15, lab, cls="tick"))
    if x_label:
        out.append(_text((ml + width - mr) / 2, height - 8, x_label, cls="axis-label"))
    for i, (label, segs) in enumerate(rows):
        y = mt + i * row_height + row_height * 0.18
        h = row_height * 0.64
        out.append(_text(ml - 8, y + h / 2 + 4, _clip(label, 18), anchor="end", cls="row-label"))
        x = 0.0
        seg_total = sum(max(v, 0.0) for _, v, _ in segs) or 1.0
        for name, v, color in segs:
            if v <= 0:
                continue
            x0, x1 = xs(x), xs(x + v)
            out.append(
                _rect(
                    x0,
                    y,
                    x1 - x0,
                    h,
                    color,
                    f"{label} - {name}: {x_fmt(v)} ({v / seg_total:.0%})",
                    cls="segment",
                    extra='stroke="#fff" stroke-width="0.6"',
                )
            )
            if x1 - x0 > 44:
                out.append(
                    _text((x0 + x1) / 2, y + h / 2 + 4, x_fmt(v), cls="seg-label", fill="#fff")
                )
            x += v
        out.append(_text(xs(x) + 6, y + h / 2 + 4, x_fmt(x), anchor="start", cls="value-label"))
    out.append(
        f'<line class="axis" x1="{_f(ml)}" x2="{_f(ml)}" y1="{_f(mt)}" y2="{_f(bottom)}" '
        f'stroke="{MUTED}"/>'
    )
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True)
class Span:
    """One interval of a timeline lane (ns on the trace clock)."""

    start: float
    end: float
    color: str
    tip: str
    label: str = ""
    depth: int = 0


@dataclass(frozen=True)
class Lane:
    """A row of a timeline: a label and its spans; ``depth`` rows for nested spans."""

    label: str
    spans: Sequence[Span]
    depth: int = 1


def timeline(
    lanes: Sequence[Lane],
    t0: float,
    t1: float,
    *,
    title: str,
    width: float = WIDTH + 140,
    lane_height: float = 22,
    label_width: float = 150,
    cls: str = "timeline",
    x_label: str = "time since the unit started",
) -> str:
    """Lanes of spans over ``[t0, t1]`` with a time axis relative to ``t0``."""
    if t1 <= t0:
        t1 = t0 + 1
    mt, mb, mr = 8, 34, 12
    rows = sum(max(1, ln.depth) for ln in lanes) or 1
    height = mt + mb + rows * lane_height + 4 * len(lanes)
    xs = Scale(0, t1 - t0, label_width, width - mr)
    out = [_svg_open(width, height, title, cls)]
    bottom = height - mb
    for v, lab in xs.ticks(fmt_ns, 9):
        x = xs(v)
        out.append(
            f'<line class="grid" x1="{_f(x)}" x2="{_f(x)}" y1="{_f(mt)}" y2="{_f(bottom)}" '
            f'stroke="{GRID}"/>'
        )
        out.append(_text(x, bottom + 14, ("+" if v else "") + lab, cls="tick"))
    out.append(
        _text(
            (label_width + width - mr) / 2,
            height - 4,
            x_label,
            cls="axis-label",
        )
    )
    y = mt
    for k, lane in enumerate(lanes):
        h = max(1, lane.depth) * lane_height
        if k % 2 == 0:
            out.append(_rect(0, y - 2, width, h + 4, "#f5f7fa", cls="lane-bg"))
        out.append(
            _text(
                label_width - 8,
                y + min(h, lane_height) / 2 + 4,
                _clip(lane.label, 22),
                anchor="end",
                cls="row-label",
            )
        )
        out.append('<g class="spans">')
        for s in lane.spans:
            a, b = max(s.start, t0), min(s.end, t1)
            if b < a:
                continue
            x0, x1 = xs(a - t0), xs(b - t0)
            sy = y + s.depth * lane_height + 2
            sh = lane_height - 4
            out.append(_rect(x0, sy, max(x1 - x0, 0.6), sh, s.color, s.tip, cls="span"))
            if s.label and x1 - x0 > 40:
                out.append(
                    _text(
                        x0 + 3,
                        sy + sh / 2 + 3.5,
                        _clip(s.label, int((x1 - x0) / 6)),
                        anchor="start",
                        cls="span-label",
                        fill="#fff",
                    )
                )
        out.append("</g>")
        y += h + 4
    out.append("</svg>")
    return "".join(out)


def _clip(s: str, n: int) -> str:
    s = str(s)
    return s if len(s) <= n else s[: max(1, n - 1)] + "…"


__all__ = [
    "Bar",
    "Curve",
    "Lane",
    "Scale",
    "Span",
    "VLine",
    "bar_chart",
    "esc",
    "fmt_num",
    "histogram",
    "nice_max",
    "stacked_hbars",
    "timeline",
]
