"""The diagnosis for a terminal: verdict first, then the tail, findings with evidence, fixes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .text import fmt_ns

if TYPE_CHECKING:
    from ..diagnosis.model import Diagnosis

_COLORS = {
    "healthy": "green",
    "cpu": "yellow",
    "gpu": "magenta",
    "pcie": "cyan",
    "workload": "bright_blue",
    "undetermined": "white",
    "critical": "red",
    "warning": "yellow",
    "info": "blue",
    "graph": "cyan",
}


def diagnosis_lines(d: Diagnosis, *, max_findings: int = 8, markup: bool = False) -> list[str]:
    def c(text: str, key: str) -> str:
        if not markup:
            return text
        from rich.markup import escape

        return f"[bold {_COLORS.get(key, 'white')}]{escape(text)}[/]"

    def e(text: str) -> str:
        if not markup:
            return text
        from rich.markup import escape

        return escape(text)

    v, t = d.verdict, d.tail
    lines = [
        f"{c('VERDICT: ' + v.layer.upper(), v.layer)}  (confidence {v.confidence:.2f})",
        e(v.summary),
        "",
        e(f"trace      {d.path}"),
    ]
    if t.unit:
        lines += [
            e(f"unit       {t.unit} ({t.unit_source}), n = {t.n}"),
            f"latency    P50 {fmt_ns(t.p50_ns)}  P90 {fmt_ns(t.p90_ns)}  P99 {fmt_ns(t.p99_ns)}  "
            f"P99/P50 {t.p99_over_p50:.2f} ({t.level})"
            if t.p99_over_p50
            else "latency    -",
            f"shape      {t.shape} (confidence {t.shape_confidence:.2f})",
        ]
    g = d.launch_gaps
    if g.count:
        lines.append(
            f"launch gaps {g.count} gaps, P50 {fmt_ns(g.p50_ns)}, "
            f"P99 {fmt_ns(g.p99_ns)}"
        )
    lines.append(f"CUDA Graphs {'in use' if d.cuda_graphs.in_use else 'not used'}")
    lines.append("")
    shown = d.findings[:max_findings]
    lines.append(f"FINDINGS ({len(d.findings)}, most important first)")
    for i, f in enumerate(shown, 1):
        lines.append(f"{i}. {c(f.severity.upper(), f.severity)} [{f.layer}] {e(f.title)}")
        lines += [f"     - {e(x)}" for x in f.evidence]
        if f.fix:
            lines.append(f"     fix: {e(f.fix)}")
    if len(d.findings) > max_findings:
        lines.append(f"... {len(d.findings) - max_findings} more (use --json for all)")
    missing = [k for k, s in d.captured.items() if s == "not_captured"]
    if missing:
        lines += ["", f"not captured: {', '.join(missing)}"]
    return lines


def diagnosis_text(d: Diagnosis) -> str:
    return "\n".join(diagnosis_lines(d))


def print_diagnosis(d: Diagnosis, *, color: bool | None = None) -> None:
    """Print with colours when stdout is a terminal."""
    from rich.console import Console

    console = Console(highlight=False, soft_wrap=True, force_terminal=color)
    if console.is_terminal:
        for line in diagnosis_lines(d, markup=True):
            console.print(line)
    else:
        print(diagnosis_text(d))
