"""Compare two traces: did B regress against A?

:func:`diff` takes two diagnoses (or paths, diagnosed here) and compares, figure by
figure: the unit latency percentiles, the tail's shape and level, the verdict layer, GPU
time per kernel name, launch gaps and transfer bandwidth per copy kind. Each figure gets
its value in A and in B, the relative change and a status:

``regressed`` / ``improved``
    The change is beyond the noise floor and makes things worse / better. Latency,
    kernel time and gaps are worse when higher; bandwidth is worse when lower.
``unchanged``
    Within the noise floor: ``|B - A| / A < noise`` **or** ``|B - A|`` below an absolute
    floor (``min_abs_ns`` for times, ``min_abs_gbps`` for bandwidth). A change has to clear
    both to count, so tiny figures do not flap on nanoseconds and big ones not on
    fractions of a percent.
``changed``
    A categorical figure changed without a direction (shape multimodal -> right-skewed,
    verdict cpu -> gpu).
``added`` / ``removed`` / ``missing``
    Only in B / only in A / not measured on one side (for example transfers not
    captured). Informational: they do not make B regressed.
``info``
    Shown for context, not judged (instance counts, kernels launched too few times).

The verdict layer regresses when it goes from ``healthy`` to a cause (cpu, gpu, pcie) and
improves the other way; the tail level regresses when it rises (normal < elevated <
abnormal); the shape regresses when it leaves ``tight``.

``DiffResult.regressed`` is True when any row regressed. ``nsysdiag diff A B
--fail-on-regression`` exits 1 then (a CI gate).

Examples
--------
>>> from nsysdiag.diff import diff                              # doctest: +SKIP
>>> r = diff("baseline.sqlite", "candidate.sqlite", noise=0.05)  # doctest: +SKIP
>>> r.regressed                                                  # doctest: +SKIP
True
>>> print(r)                                                     # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .formatting import dumps, finite, fmt_ns, format_rows

if TYPE_CHECKING:
    from .analyses.base import AnalysisResult
    from .analyses.kernel_summary import KernelName
    from .analyses.transfers import CopyKind
    from .diagnosis.engine import Settings
    from .diagnosis.model import Diagnosis
    from .report import Report

__all__ = ["DEFAULT_NOISE", "DiffResult", "DiffRow", "STATUSES", "diff"]

SCHEMA = "nsysdiag.diff/1"

#: relative change below which a figure is unchanged (5 %)
DEFAULT_NOISE = 0.05
#: absolute change of a time below which it is unchanged, ns
DEFAULT_MIN_ABS_NS = 250.0
#: absolute change of a bandwidth below which it is unchanged, GB/s
DEFAULT_MIN_ABS_GBPS = 0.25
#: kernels and copy kinds with fewer instances on either side are shown, not judged
DEFAULT_MIN_COUNT = 10
#: kernel names compared: the union of each side's top names by total GPU time
DEFAULT_TOP_KERNELS = 15

REGRESSED, IMPROVED, UNCHANGED = "regressed", "improved", "unchanged"
CHANGED, ADDED, REMOVED, MISSING, INFO = "changed", "added", "removed", "missing", "info"
STATUSES = (REGRESSED, IMPROVED, UNCHANGED, CHANGED, ADDED, REMOVED, MISSING, INFO)

SECTIONS = ("verdict", "latency", "launch_gaps", "kernels", "transfers")
_LEVELS = {"normal": 0, "elevated": 1, "abnormal": 2}
_CAUSES = ("cpu", "gpu", "pcie", "workload")


@dataclass(frozen=True)
class DiffRow:
    """One compared figure.

    Attributes
    ----------
    section : str
        ``verdict``, ``latency``, ``launch_gaps``, ``kernels`` or ``transfers``.
    metric : str
        What is compared, e.g. ``p99_ns`` or a kernel name.
    a, b : float, str or None
        The value in A and in B (None: not measured on that side).
    unit : str
        ``ns``, ``GB/s``, ``ratio``, ``count`` or ``""`` for categorical figures.
    change : float or None
        ``(b - a) / a`` for numbers (None when not defined).
    status : str
        One of :data:`STATUSES`.
    note : str
        Context (which key, why not judged).
    """

    section: str
    metric: str
    a: float | str | None
    b: float | str | None
    unit: str
    change: float | None
    status: str
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "metric": self.metric,
            "a": self.a,
            "b": self.b,
            "unit": self.unit,
            "change_pct": None if self.change is None else round(100 * self.change, 3),
            "status": self.status,
            "note": self.note,
        }


@dataclass(frozen=True)
class DiffResult:
    """The comparison of trace B against trace A.

    Attributes
    ----------
    a, b : str
        The two traces (paths as diagnosed).
    rows : tuple of DiffRow
        Every compared figure, grouped by section.
    noise : float
        Relative noise floor (0.05 = 5 %).
    min_abs_ns, min_abs_gbps : float
        Absolute noise floors for times and bandwidths.
    notes : tuple of str
        What could not be compared and why.
    """

    a: str
    b: str
    rows: tuple[DiffRow, ...]
    noise: float = DEFAULT_NOISE
    min_abs_ns: float = DEFAULT_MIN_ABS_NS
    min_abs_gbps: float = DEFAULT_MIN_ABS_GBPS
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def regressed(self) -> bool:
        """True when any figure regressed beyond the noise floor."""
        return any(r.status == REGRESSED for r in self.rows)

    @property
    def improved(self) -> bool:
        """True when any figure improved beyond the noise floor."""
        return any(r.status == IMPROVED for r in self.rows)

    def counts(self) -> dict[str, int]:
        """Rows per status (every status present, 0 when none)."""
        out = dict.fromkeys(STATUSES, 0)
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    def rows_with(self, status: str) -> list[DiffRow]:
        """The rows of one status."""
        return [r for r in self.rows if r.status == status]

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "a": self.a,
            "b": self.b,
            "regressed": self.regressed,
            "noise_pct": round(self.noise * 100, 6),
            "min_abs_ns": self.min_abs_ns,
            "min_abs_gbps": self.min_abs_gbps,
            "counts": self.counts(),
            "rows": [r.to_dict() for r in self.rows],
            "notes": list(self.notes),
        }

    def to_json(self, indent: int | None = 2) -> str:
        return dumps(self.to_dict(), indent=indent)

    def to_pandas(self):
        """The rows as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame([r.to_dict() for r in self.rows])

    def __str__(self) -> str:
        c = self.counts()
        head = "REGRESSED" if self.regressed else ("improved" if self.improved else "no regression")
        lines = [
            f"nsysdiag diff: B {head} ({c[REGRESSED]} regressed, {c[IMPROVED]} improved, "
            f"{c[UNCHANGED]} unchanged, {c[CHANGED]} changed)",
            f"A  {self.a}",
            f"B  {self.b}",
            f"noise floor: unchanged when |change| < {self.noise * 100:g}% or below "
            f"{fmt_ns(self.min_abs_ns)} / {self.min_abs_gbps:g} GB/s",
            "",
        ]
        rows = [
            (
                r.section,
                _compact(r.metric),
                _fmt(r.a, r.unit),
                _fmt(r.b, r.unit),
                _fmt_change(r.change),
                r.status.upper() if r.status in (REGRESSED, IMPROVED) else r.status,
                r.note,
            )
            for r in self.rows
        ]
        lines.append(
            format_rows(
                ["section", "figure", "A", "B", "change", "status", "note"], rows, max_width=64
            )
        )
        if self.notes:
            lines += ["", *(f"note: {n}" for n in self.notes)]
        return "\n".join(lines)


# ============================================================================ formatting


def _fmt(v: float | str | None, unit: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if unit == "ns":
        return fmt_ns(v)
    if unit == "GB/s":
        return f"{v:.3g} GB/s"
    if unit == "count":
        return f"{v:,.0f}"
    if unit == "%":
        return f"{v:.1f}%"
    return f"{v:.3g}"


_NAMESPACE = re.compile(r"(?<![\w)\]])(?:[A-Za-z_]\w*|\(anonymous namespace\)|<unnamed>)::")


def _compact(name: str) -> str:
    """A kernel name shortened for a text table: no ``void``, no namespace qualifiers.

    >>> _compact("void at::native::vectorized_elementwise_kernel<(int)8, at::native::Gelu>")
    'vectorized_elementwise_kernel<(int)8, Gelu>'
    """
    s = name[5:] if name.startswith("void ") else name
    prev = None
    while prev != s:
        prev, s = s, _NAMESPACE.sub("", s)
    return s


def _fmt_change(c: float | None) -> str:
    if c is None:
        return "-"
    if not math.isfinite(c):
        return "new" if c > 0 else "-"
    return f"{c * 100:+.1f}%"


# ============================================================================ judging


def _judge(
    a: float | None, b: float | None, *, higher_is_worse: bool, noise: float, floor: float
) -> tuple[float | None, str]:
    """Relative change and status of a number that is better when lower (or higher)."""
    if a is None and b is None:
        return None, MISSING
    if a is None or b is None:
        return None, MISSING
    delta = b - a
    rel = delta / abs(a) if a else (0.0 if delta == 0 else math.copysign(math.inf, delta))
    if abs(delta) <= floor or abs(rel) < noise:
        return rel, UNCHANGED
    worse = delta > 0 if higher_is_worse else delta < 0
    return rel, REGRESSED if worse else IMPROVED


class _Rows:
    """Collects rows with the thresholds at hand."""

    def __init__(self, noise: float, min_abs_ns: float, min_abs_gbps: float):
        self.noise, self.min_abs_ns, self.min_abs_gbps = noise, min_abs_ns, min_abs_gbps
        self.rows: list[DiffRow] = []

    def number(
        self,
        section: str,
        metric: str,
        a: Any,
        b: Any,
        unit: str,
        *,
        higher_is_worse: bool = True,
        floor: float | None = None,
        note: str = "",
        judge: bool = True,
    ) -> DiffRow:
        a_, b_ = finite(a), finite(b)
        if floor is None:
            floor = {"ns": self.min_abs_ns, "GB/s": self.min_abs_gbps}.get(unit, 0.0)
        change, status = _judge(
            a_, b_, higher_is_worse=higher_is_worse, noise=self.noise, floor=floor
        )
        if not judge and status in (REGRESSED, IMPROVED, UNCHANGED):
            status = INFO
        row = DiffRow(section, metric, a_, b_, unit, change, status, note)
        self.rows.append(row)
        return row

    def category(
        self, section: str, metric: str, a: str | None, b: str | None, status: str, note: str = ""
    ) -> None:
        self.rows.append(DiffRow(section, metric, a, b, "", None, status, note))


# ============================================================================ inputs


@dataclass
class _Side:
    """One trace: its diagnosis and its kernel summary."""

    diagnosis: Diagnosis
    kernels: AnalysisResult | None
    note: str = ""


def _is_diagnosis(x: Any) -> bool:
    from .diagnosis.model import Diagnosis

    return isinstance(x, Diagnosis)


def _kernel_summary(report: Report) -> AnalysisResult:
    from .analyses import module

    return module("kernel_summary").run(report)


def _load(
    target: Any, *, range_name: str | None, settings: Settings | None, open_kwargs: dict[str, Any]
) -> _Side:
    from .diagnosis.engine import diagnose
    from .report import Report

    if _is_diagnosis(target):
        d = target
        ks = d.analyses.get("kernel_summary")  # whatever its status: it ran
        note = ""
        if ks is None and d.path and Path(d.path).exists():
            with Report(d.path, **open_kwargs) as rep:
                ks = _kernel_summary(rep)
        elif ks is None:
            note = f"{d.path}: trace not found, per-kernel times not compared"
        return _Side(d, ks, note)
    with Report(target, **open_kwargs) as rep:
        note = ""
        try:
            d = diagnose(rep, range_name=range_name, settings=settings)
        except UsageError:
            if range_name is None:
                raise
            note = (
                f"{target}: no range {range_name!r} to match the other trace's unit; "
                "its own unit was chosen"
            )
            d = diagnose(rep, settings=settings)
        return _Side(d, _kernel_summary(rep), note)


# ============================================================================ the diff


def diff(
    a: Diagnosis | str | os.PathLike[str],
    b: Diagnosis | str | os.PathLike[str],
    *,
    noise: float = DEFAULT_NOISE,
    min_abs_ns: float = DEFAULT_MIN_ABS_NS,
    min_abs_gbps: float = DEFAULT_MIN_ABS_GBPS,
    min_count: int = DEFAULT_MIN_COUNT,
    top_kernels: int = DEFAULT_TOP_KERNELS,
    range_name: str | None = None,
    settings: Settings | None = None,
    **open_kwargs: Any,
) -> DiffResult:
    """Compare trace B against trace A, figure by figure.

    Parameters
    ----------
    a, b : Diagnosis or path
        The baseline (A) and the candidate (B): diagnoses from
        :func:`nsysdiag.diagnosis.engine.diagnose`, or export paths diagnosed here. For
        paths B is diagnosed with A's unit of latency (``--range``), so both sides
        measure the same thing.
    noise : float, default 0.05
        Relative change below which a figure is unchanged (0.05 = 5 %).
    min_abs_ns : float, default 250
        Absolute change of a time (ns) below which it is unchanged.
    min_abs_gbps : float, default 0.25
        Absolute change of a bandwidth (GB/s) below which it is unchanged.
    min_count : int, default 10
        Kernel names and copy kinds with fewer instances on either side are shown but not
        judged.
    top_kernels : int, default 15
        Kernel names compared: the union of each side's top names by total GPU time.
    range_name : str, optional
        NVTX range that is the unit of latency on both sides (paths only).
    settings : Settings, optional
        Diagnosis thresholds (paths only).
    **open_kwargs
        Passed to :class:`nsysdiag.Report` for paths (``cache``, ``cache_dir``, ``nsys``).

    Returns
    -------
    DiffResult
        ``regressed``, ``rows`` (value in A, in B, relative change, status), ``notes``.

    Raises
    ------
    UsageError
        A bad threshold, or an input that is neither a Diagnosis nor a path.
    """
    for name, value in (
        ("noise", noise),
        ("min_abs_ns", min_abs_ns),
        ("min_abs_gbps", min_abs_gbps),
    ):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            raise UsageError(f"{name} must be a number >= 0, got {value!r}")
    if noise >= 1:
        raise UsageError(f"noise is a fraction (0.05 = 5%), got {noise!r}")
    if not isinstance(min_count, int) or min_count < 0:
        raise UsageError(f"min_count must be an integer >= 0, got {min_count!r}")
    if not isinstance(top_kernels, int) or top_kernels < 1:
        raise UsageError(f"top_kernels must be a positive integer, got {top_kernels!r}")
    for name, target in (("a", a), ("b", b)):
        if not (_is_diagnosis(target) or isinstance(target, (str, os.PathLike))):
            raise UsageError(
                f"diff needs a Diagnosis or a path for {name}, got {type(target).__name__}"
            )

    same = not _is_diagnosis(a) and not _is_diagnosis(b) and Path(a).resolve() == Path(b).resolve()  # type: ignore[arg-type]
    side_a = _load(a, range_name=range_name, settings=settings, open_kwargs=open_kwargs)
    if same:
        side_b = side_a
    else:
        unit = range_name or side_a.diagnosis.tail.unit
        if side_a.diagnosis.tail.unit_source not in ("nvtx_auto", "nvtx_named") \
                and range_name is None:
            # not one NVTX range name (sync intervals, launch cycles, a group of
            # ranges): let B choose its unit the same way
            unit = None
        side_b = _load(b, range_name=unit, settings=settings, open_kwargs=open_kwargs)
    rows = _Rows(noise, min_abs_ns, min_abs_gbps)
    notes = [n for n in (side_a.note, side_b.note) if n]
    da, db = side_a.diagnosis, side_b.diagnosis
    _verdict_rows(rows, da, db)
    notes += _latency_rows(rows, da, db)
    notes += _gap_rows(rows, da, db)
    notes += _kernel_rows(rows, side_a, side_b, min_count, top_kernels)
    notes += _transfer_rows(rows, da, db, min_count)
    return DiffResult(
        str(da.path), str(db.path), tuple(rows.rows), noise, min_abs_ns, min_abs_gbps, tuple(notes)
    )


def _verdict_rows(rows: _Rows, da: Diagnosis, db: Diagnosis) -> None:
    la, lb = da.verdict.layer, db.verdict.layer
    if la == lb:
        status = UNCHANGED
    elif la == "healthy" and lb in _CAUSES:
        status = REGRESSED
    elif la in _CAUSES and lb == "healthy":
        status = IMPROVED
    else:
        status = CHANGED
    rows.category(
        "verdict",
        "layer",
        la,
        lb,
        status,
        f"confidence {da.verdict.confidence:.2f} -> {db.verdict.confidence:.2f}",
    )


def _latency_rows(rows: _Rows, da: Diagnosis, db: Diagnosis) -> list[str]:
    ta, tb = da.tail, db.tail
    if not ta.unit and not tb.unit:
        return ["latency: neither trace has a repeated unit of work; not compared"]
    if not ta.unit or not tb.unit:
        which = "A" if not ta.unit else "B"
        return [f"latency: trace {which} has no repeated unit of work; not compared"]
    if ta.unit != tb.unit:
        return [
            f"latency: the units differ ({ta.unit!r} in A, {tb.unit!r} in B); not compared "
            "(pass range_name / --range)"
        ]
    unit = ta.unit
    rows.number("latency", f"{unit} units", ta.n, tb.n, "count", judge=False)
    for key in ("p50_ns", "p90_ns", "p99_ns"):
        rows.number(
            "latency", f"{unit} {key[:-3].upper()}", getattr(ta, key), getattr(tb, key), "ns"
        )
    rows.number("latency", f"{unit} P99/P50", ta.p99_over_p50, tb.p99_over_p50, "ratio")
    la, lb = _LEVELS.get(ta.level), _LEVELS.get(tb.level)
    if la is None or lb is None:
        st = UNCHANGED if ta.level == tb.level else CHANGED
    else:
        st = UNCHANGED if la == lb else (REGRESSED if lb > la else IMPROVED)
    rows.category("latency", f"{unit} tail level", ta.level, tb.level, st)
    if ta.shape == tb.shape:
        st = UNCHANGED
    elif ta.shape == "tight" and tb.shape != "insufficient_data":
        st = REGRESSED
    elif tb.shape == "tight" and ta.shape != "insufficient_data":
        st = IMPROVED
    else:
        st = CHANGED
    rows.category(
        "latency",
        f"{unit} shape",
        ta.shape,
        tb.shape,
        st,
        f"confidence {ta.shape_confidence:.2f} -> {tb.shape_confidence:.2f}",
    )
    return []


def _gap_rows(rows: _Rows, da: Diagnosis, db: Diagnosis) -> list[str]:
    ga, gb = da.launch_gaps, db.launch_gaps
    if not ga.count and not gb.count:
        return ["launch gaps: no gaps between kernels in either trace"]
    rows.number("launch_gaps", "gaps", ga.count, gb.count, "count", judge=False)
    rows.number("launch_gaps", "P50", ga.p50_ns, gb.p50_ns, "ns")
    rows.number("launch_gaps", "P99", ga.p99_ns, gb.p99_ns, "ns")
    return []


def _per_name(ks: AnalysisResult | None) -> dict[str, KernelName]:
    from .analyses.kernel_summary import KernelSummaryResult

    if not isinstance(ks, KernelSummaryResult) or not ks.ok:
        return {}
    return {str(r.name): r for r in ks.per_name()}


def _top(names: dict[str, KernelName], n: int) -> list[str]:
    ranked = sorted(names.items(), key=lambda kv: -(finite(kv[1].total_ns) or 0))
    return [k for k, _ in ranked][:n]


def _kernel_rows(rows: _Rows, sa: _Side, sb: _Side, min_count: int, top: int) -> list[str]:
    ka, kb = _per_name(sa.kernels), _per_name(sb.kernels)
    if not ka and not kb:
        return ["kernels: no kernel summary on either side"]
    if not ka or not kb:
        return [f"kernels: no kernel summary in trace {'A' if not ka else 'B'}"]
    notes = []
    # GPU kernel time per unit of latency, when both traces have the same unit
    ta, tb = sa.diagnosis.tail, sb.diagnosis.tail
    tot_a = sum(finite(r.total_ns) or 0 for r in ka.values())
    tot_b = sum(finite(r.total_ns) or 0 for r in kb.values())
    if ta.unit and ta.unit == tb.unit and ta.n and tb.n:
        rows.number(
            "kernels",
            f"kernel time per {ta.unit}",
            tot_a / ta.n,
            tot_b / tb.n,
            "ns",
            note="all kernels' GPU time / units",
        )
    else:
        rows.number(
            "kernels",
            "kernel time (all)",
            tot_a,
            tot_b,
            "ns",
            judge=False,
            note="not per unit: depends on how long each capture ran",
        )
    names = list(dict.fromkeys(_top(ka, top) + _top(kb, top)))
    for name in names:
        ra, rb = ka.get(name), kb.get(name)
        label = name
        if ra is None or rb is None:
            r = ra or rb
            rows.category(
                "kernels",
                label,
                _fmt(finite(ra.median_ns), "ns") if ra else None,
                _fmt(finite(rb.median_ns), "ns") if rb else None,
                ADDED if ra is None else REMOVED,
                f"{int(r.instances or 0):,} launches, "
                f"{fmt_ns(finite(r.total_ns))} GPU time",
            )
            continue
        na, nb = int(ra.instances or 0), int(rb.instances or 0)
        few = min(na, nb) < min_count
        note = f"median per launch; {na:,} -> {nb:,} launches"
        if few:
            note += f" (fewer than {min_count}: not judged)"
        rows.number(
            "kernels",
            label,
            ra.median_ns,
            rb.median_ns,
            "ns",
            note=note,
            judge=not few,
        )
    dropped = len(set(ka) | set(kb)) - len(names)
    if dropped > 0:
        notes.append(
            f"kernels: {dropped} kernel names outside each side's top {top} by GPU time "
            "not compared"
        )
    return notes


def _kind_key(r: CopyKind) -> str:
    op = str(r.op or "memcpy")
    if op == "memset":
        return f"memset {r.dst_kind or r.src_kind or ''}".strip()
    return f"{r.copy_kind} {r.src_kind}->{r.dst_kind}"


def _by_kind(d: Diagnosis) -> dict[str, CopyKind] | None:
    t = d.analyses.transfers
    if t is None or "by_kind" not in t.tables:
        return None
    out: dict[str, CopyKind] = {}
    for r in t.by_kind():
        key = _kind_key(r)
        if key in out:  # the same kind split further (pageable / uvm flags): keep the larger
            if (r.copies or 0) <= (out[key].copies or 0):
                continue
        out[key] = r
    return out


def _transfer_rows(rows: _Rows, da: Diagnosis, db: Diagnosis, min_count: int) -> list[str]:
    ka, kb = _by_kind(da), _by_kind(db)
    if ka is None and kb is None:
        return ["transfers: no copies measured in either trace"]
    ka, kb = ka or {}, kb or {}
    for key in _ordered(ka, kb):
        ra, rb = ka.get(key), kb.get(key)
        if ra is None or rb is None:
            r = ra or rb
            va = _fmt(finite(ra.median_gbps), "GB/s") if ra else None
            vb = _fmt(finite(rb.median_gbps), "GB/s") if rb else None
            rows.category(
                "transfers",
                f"{key} median",
                va,
                vb,
                ADDED if ra is None else REMOVED,
                f"{int(r.copies or 0):,} copies",
            )
            continue
        na, nb = int(ra.copies or 0), int(rb.copies or 0)
        few = min(na, nb) < min_count
        note = f"median per copy; {na:,} -> {nb:,} copies"
        if few:
            note += f" (fewer than {min_count}: not judged)"
        rows.number(
            "transfers",
            f"{key} median",
            ra.median_gbps,
            rb.median_gbps,
            "GB/s",
            higher_is_worse=False,
            note=note,
            judge=not few,
        )
    return []


def _ordered(a: dict[str, CopyKind], b: dict[str, CopyKind]) -> Iterable[str]:
    def size(r: CopyKind | None) -> int:
        return (r.total_bytes or 0) if r is not None else 0

    return sorted(set(a) | set(b), key=lambda k: -max(size(a.get(k)), size(b.get(k))))
