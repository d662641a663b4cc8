"""HTML for Jupyter: reports and results render as tables."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..report import Report


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


def report_html(report: Report) -> str:
    pr = report.probe
    rows = [[k, v.status, v.source_rows, v.reason] for k, v in pr.views.items()]
    return html_table(
        ["view", "status", "source rows", "note"],
        rows,
        caption=f"nsysdiag report {report.path} ({report.source.kind})",
    )


def diagnosis_html(d) -> str:
    """A compact HTML view of a diagnosis for notebooks."""
    v, t = d.verdict, d.tail
    head = (
        f"<p><b>Verdict: {html.escape(v.layer)}</b> (confidence {v.confidence:.2f}) - "
        f"{html.escape(v.summary)}</p>"
    )
    tail = html_table(
        ["unit", "n", "p50_ns", "p99_ns", "p99/p50", "shape"],
        [[t.unit, t.n, t.p50_ns, t.p99_ns, t.p99_over_p50, t.shape]],
    )
    rows = [[f.severity, f.layer, f.title, "; ".join(f.evidence)] for f in d.findings]
    return head + tail + html_table(["severity", "layer", "finding", "evidence"], rows)
