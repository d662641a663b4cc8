"""Comments say what the code does and why; measured timings live in docs/performance.md.

Every comment, docstring and SQL comment of the package is read (consecutive comment lines
joined, so a phrase broken over lines still counts) and must not quote a measurement: a
benchmark's trace size ("10M kernels", "ten million"), a before/after pair ("0.65 -> 0.4 s"),
a timed cost ("took 0.6 s", "2.4 s of the 4.5 s", "0.4 s sooner"), alternating runs, or a
measured memory figure ("180 MB more", "peaks at 1.85 GB"). Durations that are values the
code uses or prints (thresholds, defaults, examples of output) are not measurements and
pass.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "nsysdiag"

_NUM = r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?"  # 0.4, 2.7-2.9
_TIME = rf"{_NUM}\s?(?:s|ms)\b"
MEASUREMENT = re.compile(
    "|".join(
        [
            r"\b\d+(?:\.\d+)?M\b",  # a trace size: 10M kernels, 22M calls
            r"\b(?:ten|twenty|a hundred)\s+million\b",
            r"\balternating\b",  # alternating runs of a benchmark
            rf"\b{_NUM}\s?(?:s|ms)?\s?->\s?{_TIME}",  # before -> after
            rf"\b{_TIME}\s*(?:of the\b|instead of\b|against\b|sooner\b|faster\b|slower\b"
            r"|more\b|less\b|on average\b)",
            rf"\b(?:took|takes|cost|costs|spent|spends)\s+(?:about\s+)?{_TIME}",
            rf"\b{_NUM}\s?(?:MB|GB)\s+(?:more|less|each)\b",
            r"\bpeaks?\s+at\s+(?:about\s+)?\d",
        ]
    ),
    re.IGNORECASE,
)


def _blocks_py(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every docstring and every run of consecutive comment lines."""
    text = path.read_text()
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                line = node.body[0].lineno
                out.append((line, doc))
    run: list[str] = []
    start = last = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if run and line != last + 1:
            out.append((start, " ".join(run)))
            run = []
        if not run:
            start = line
        run.append(tok.string.lstrip("#:").strip())
        last = line
    if run:
        out.append((start, " ".join(run)))
    return out


def _blocks_sql(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of every run of consecutive lines holding an SQL comment."""
    out: list[tuple[int, str]] = []
    run: list[str] = []
    start = 0
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if "--" in line:
            if not run:
                start = i
            run.append(line.split("--", 1)[1].strip())
        elif run:
            out.append((start, " ".join(run)))
            run = []
    if run:
        out.append((start, " ".join(run)))
    return out


def measurements(text: str) -> list[str]:
    return [m.group(0) for m in MEASUREMENT.finditer(" ".join(text.split()))]


def test_no_comment_quotes_a_measurement():
    found = []
    files = sorted(PACKAGE.rglob("*.py")) + sorted(PACKAGE.rglob("*.sql"))
    assert len(files) > 40
    for path in files:
        blocks = _blocks_py(path) if path.suffix == ".py" else _blocks_sql(path)
        for line, text in blocks:
            found += [f"{path.relative_to(ROOT)}:{line}: {hit!r}" for hit in measurements(text)]
    assert not found, (
        "comments quoting measurements (move them to docs/performance.md):\n" + "\n".join(found)
    )


@pytest.mark.parametrize(
    "text",
    [
        "choosing them first cost a second pass and a join: 0.65 -> 0.4 s at ten million",
        "(ranges' own work at 10M kernels: 0.93-1.0 -> 0.79-0.87 s)",
        "one core (ranges 3.8 -> 3.6 s on average, five alternating pairs)",
        "DuckDB's aggregate and hash join did this in 2.4 s of the 4.5 s that the view took",
        "scanning the kernels for one took 0.6 s",
        "(importing numba costs about 0.3 s)",
        "beside the next four analyses (about\n    0.4 s sooner)",
        "joining the pieces at the end held two copies, 180 MB more",
        "a diagnose peaks at about 1.85 GB",
        "SQLite's count(*) read 22M runtime calls",
    ],
)
def test_the_check_flags_measurements(text):
    assert measurements(text), text


@pytest.mark.parametrize(
    "text",
    [
        "A duration in ns as a human unit: 850 ns, 12.3 us, 4.56 ms, 7.89 s.",
        "the launch-gap distribution (log scale) with the 5 us / 20 us thresholds",
        "numpy asks for transparent huge pages for arrays of 4 MB or more",
        "NVLink-C2C between Grace and Hopper/Blackwell: 900 GB/s total",
        "DuckDB's memory limit: ``$NSYSDIAG_MEMORY_LIMIT`` (e.g. ``4GB``), default 1000MB.",
        "a worker stuck for more than 60 s stops the command with exit 70",
        "Step A  is the tail abnormal?  right-skewed -> cpu, multimodal -> gpu",
        "gaps above 5 us are not normal; a P99 above 20 us signals a CPU bottleneck",
    ],
)
def test_the_check_passes_values_the_code_uses(text):
    assert not measurements(text), measurements(text)
