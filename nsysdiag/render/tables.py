"""Rows to text: aligned table, CSV or JSON (the three --format choices)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from typing import Any

FORMATS = ("table", "csv", "json")


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
    return str(value)


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
