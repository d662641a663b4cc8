"""Neutral text helpers: durations and sizes for people, strict JSON, rows as a text
table, CSV or JSON, and small escaped HTML tables.

They sit below every stage of the pipeline and import nothing of nsysdiag, so that domain
objects (analysis results, the diagnosis, the diff) can give a readable ``__str__`` and
``_repr_html_`` without importing the renderers, and the renderers and the command line
use the same units.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import re
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

FORMATS = ("table", "csv", "json")

#: characters a terminal acts on rather than shows: C0 controls (ESC starts the CSI, OSC
#: 52 clipboard and OSC 8 link sequences; BEL, BS and CR rewrite what is shown), DEL, C1
#: controls (U+009B is a one-character CSI) and the bidirectional overrides that reorder
#: what is shown; tab and newline excepted (see :func:`printable`)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                      "\u2066-\u2069]")
_CONTROL_OR_BREAK = re.compile(f"[\t\n{_CONTROL.pattern[1:-1]}]")


def _escaped(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, breaks: bool = True) -> str:
    """``text`` safe to print on a terminal: each character it would act on (a control
    character, a bidirectional override) is shown as its escape, ``\\x1b`` or
    ``\\u202e``. Kernel and NVTX names are the trace's text, written by whoever ran the
    traced program. With ``breaks`` False tabs and newlines are escaped too (one cell of a
    table)."""
    return (_CONTROL if breaks else _CONTROL_OR_BREAK).sub(_escaped, text)


def json_default(value: Any) -> Any:
    """JSON encoder fallback for numpy scalars, decimals, dates and sets."""
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def clean_json(value: Any) -> Any:
    """Replace NaN/inf with None recursively, so the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean_json(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text (no NaN) for any nsysdiag result."""
    return json.dumps(clean_json(value), indent=indent, default=json_default, allow_nan=False)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    return printable(str(value), breaks=False)


def format_rows(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table", max_width: int = 60
) -> str:
    """Render rows as an aligned text table, CSV, or a JSON list of objects."""
    if fmt == "json":
        return dumps([dict(zip(columns, r)) for r in rows])
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow(["" if v is None else v for v in r])
        return buf.getvalue().rstrip("\n")
    cells = [[_cell(v) for v in r] for r in rows]
    cells = [[c if len(c) <= max_width else c[: max_width - 1] + "…" for c in r] for r in cells]
    widths = [len(c) for c in columns]
    for r in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, r)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(values, widths)).rstrip()

    out = [line(columns), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number (or a numeric string), else None."""
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _figure(v: float) -> str:
    """Three significant digits, in fixed notation from 1000 on: 4.56, 12.3, 616, 20600
    (never 2.06e+04)."""
    text = f"{v:.3g}"
    return f"{v:.0f}" if "e+" in text else text


def fmt_ns(ns: float | int | None) -> str:
    """A duration in ns as a human unit: 850 ns, 12.3 us, 4.56 ms, 7.89 s, 20600 s."""
    if ns is None:
        return "-"
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{_figure(v / scale)} {unit}"
    return f"{v:.0f} ns"


def fmt_ratio(x: float | None) -> str:
    """A ratio as a person reads it: 1.5x, 12x, 590x (never 5.9e+02x); '-' for None."""
    if x is None or not math.isfinite(x):
        return "-"
    return f"{_figure(x)}x"


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


def html_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> str:
    """A small escaped HTML table."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{'' if v is None else html.escape(str(v))}</td>" for v in r)
        + "</tr>"
        for r in rows
    )
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def driver_version(value: str | None) -> str | None:
    """``NvDriverVersion`` in the dotted form nsys shows.

    Newer exports record it dotted ("535.216.01"); older ones, and Windows exports, as one
    number: the major version, the minor (2 digits, or 3 for Linux minors above 99) and,
    on Linux, a 2-digit patch. "0" means the driver was not recorded (None). A number of
    another length, which no such packing gives, is kept as it is.

    >>> driver_version("58160"), driver_version("41867"), driver_version("5355403")
    ('581.60', '418.67', '535.54.03')
    >>> driver_version("52510517"), driver_version("535.216.01"), driver_version("0")
    ('525.105.17', '535.216.01', None)
    """
    if value is None or not str(value).strip().isdigit():
        return value
    digits = str(value).strip()
    if int(digits) == 0:
        return None
    major, rest = digits[:3], digits[3:]
    if len(digits) == 5:  # major.minor (Windows; Linux before patch numbers)
        return f"{major}.{rest}"
    if len(digits) in (7, 8):  # major.minor.patch, minor of 2 or 3 digits
        return f"{major}.{rest[:-2]}.{rest[-2:]}"
    return digits


def cuda_version(value: str | None) -> str | None:
    """``CudaDriverVersion`` as nsys records it (12020) in the usual form ("12.2").

    >>> cuda_version("12020"), cuda_version("11080"), cuda_version(None)
    ('12.2', '11.8', None)
    """
    if value is None or not str(value).strip().isdigit():
        return value
    n = int(value)
    return f"{n // 1000}.{n % 1000 // 10}"
