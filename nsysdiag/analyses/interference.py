"""Interference by name: which other GPU work ran during the slowest units.

When the tail attribution (ranges) says the slowest units spent longer with other GPU work
running (``gpu_other``), this analysis names that work: per process, stream and kernel (or
copy) name, in how many of the slowest units and of the median-band units it ran, and its
GPU time inside their windows. The slowest units are the tail (``tail_pct``) widened to
``culprit_min_units`` when the slowest tenth holds as many. Definitions:
docs/analyses/interference.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..engine.runner import Runs
from ..engine.steps import registered
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, records, run_query, stepped
from .ranges import RangesResult

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "interference"
_CULPRIT = ("culprit_pid", "culprit_process", "culprit_stream", "culprit_names",
            "culprit_slow_units", "culprit_median_units", "culprit_slow_overlap_mean_ns",
            "culprit_median_overlap_mean_ns", "own_work")


@dataclass(frozen=True)
class OtherWork:
    """One row of the ``per_stream`` table: a process's stream of other work."""

    pid: int | None  #: process id
    process_name: str | None  #: process name
    stream_id: int | None  #: CUDA stream
    #: the program's own work: launched by the units' own thread (process) before each unit
    #: began, or by their process on a stream their own work runs on (an autograd thread,
    #: earlier units' work still queued while the host runs ahead of the GPU)
    own_stream: bool
    names: str  #: its operation names with the most time in the slow units, '; '-separated
    slow_units: int  #: slowest units during which it ran
    median_units: int  #: median-band units during which it ran
    slow_n: int  #: slowest units compared
    median_n: int  #: median-band units compared
    slow_overlap_mean_ns: float | None  #: its GPU time inside a slow unit's window (mean), ns
    median_overlap_mean_ns: float | None  #: the same for a median-band unit, ns
    delta_ns: float  #: slow_overlap_mean_ns - median_overlap_mean_ns, ns

    def line(self) -> str:
        """One line: who, what, in how many slow and median units, how much time."""
        who = (f"stream {self.stream_id}" if self.stream_id is not None else "no stream") + (
            f" of {self.process_name} (pid {self.pid})" if self.process_name
            else f" of pid {self.pid}")
        if self.own_stream:
            who = (f"the program's own work on its own stream ({who}: earlier units' work "
                   "or another of its threads)")
        return (f"{who}: {self.names} ran in {self.slow_units} of {self.slow_n} slow units "
                f"and {self.median_units} of {self.median_n} median-band units "
                f"({_ms(self.slow_overlap_mean_ns)} vs {_ms(self.median_overlap_mean_ns)} "
                "of GPU time each)")


@dataclass(frozen=True, kw_only=True)
class InterferenceResult(AnalysisResult):
    """Other GPU work during the slowest units against the median band, by process, stream
    and name. The culprit's figures (the stream whose time grew most) are reported when
    other work ran in a slow unit.

    Tables: ``per_stream`` (main), ``per_name``, ``units``.
    """

    analysis: str = field(default="interference", init=False)
    slow_n: int = figure("slowest units compared", 0)
    median_n: int = figure("median-band units compared", 0)
    streams: int = figure("streams of other work seen in the compared units", 0)
    culprit_pid: int | None = figure("process of the stream whose time in the slow units "
                                     "grew most")
    culprit_process: str | None = figure("its process name")
    culprit_stream: int | None = figure("its CUDA stream")
    culprit_names: tuple[str, ...] = figure("its operation names with the most time in the "
                                            "slow units (up to 3)", ())
    culprit_slow_units: int | None = figure("slowest units during which it ran")
    culprit_median_units: int | None = figure("median-band units during which it ran")
    culprit_slow_overlap_mean_ns: float | None = figure("its GPU time inside a slow unit "
                                                        "(mean), ns")
    culprit_median_overlap_mean_ns: float | None = figure("its GPU time inside a median-band "
                                                          "unit (mean), ns")
    own_work: bool = figure(
        "the other work that grew most is the program's own (its earlier units' work, or "
        "another of its threads', on the units' own stream): a GPU-bound run whose host "
        "runs ahead; no one else's work interferes", False)

    def per_stream(self) -> list[OtherWork]:
        """The ``per_stream`` table as records (empty without it)."""
        table = self.tables.get("per_stream")
        return records(table, OtherWork) if table is not None else []

    def reported(self) -> tuple[str, ...]:
        names = super().reported()
        return names if self.culprit_stream is not None or self.culprit_pid is not None \
            else tuple(n for n in names if n not in _CULPRIT)

    def figure_json(self, name: str):
        if name == "culprit_names":
            return list(self.culprit_names)
        return super().figure_json(name)

    @classmethod
    def _figures_from_json(cls, summary: dict) -> dict:
        out = dict(summary)
        if "culprit_names" in out:
            out["culprit_names"] = tuple(out["culprit_names"])
        return out

    def culprit_line(self) -> str | None:
        """One line naming the culprit, e.g. "stream 13 of python3 (pid 495): nvjet_...
        ran in 9 of 10 slow units and 1 of 20 median-band units (5.1 ms vs 0.2 ms each)"."""
        rows = self.per_stream()
        return rows[0].line() if rows and rows[0].slow_units else None


def _ms(ns: float | None) -> str:
    ns = ns or 0.0
    return f"{ns / 1e6:.3g} ms" if ns >= 1e6 else f"{ns / 1e3:.3g} us"


RESULT = InterferenceResult
#: how it runs (``engine.runner``): ranges' slowest units
RUNS = Runs(needs=("ranges",))


def slow_count(n: int, tail_n: int, settings: Settings) -> int:
    """Slowest units compared: the tail, widened to ``culprit_min_units`` when the slowest
    tenth of the ``n`` units holds as many."""
    return max(tail_n, min(settings.culprit_min_units, math.ceil(n / 10)))


def run(report: Report, *, settings: Settings | None = None,
        range_name: str | None = None) -> InterferenceResult | AnalysisResult:
    """Name the other GPU work that ran during the slowest units.

    Parameters
    ----------
    report : Report
        The opened trace.
    settings : Settings, optional
        ``tail_pct``, ``range_min_instances`` (the unit, as ranges chooses it) and
        ``culprit_min_units``.
    range_name : str, optional
        The unit's NVTX range (default: chosen as ranges does).

    Returns
    -------
    InterferenceResult
        ``per_stream`` (main): each process and stream of other work, largest growth
        first; ``per_name``: the same per operation name; ``units``: the units compared.
        The ranges analysis' result when it has no units.
    """
    settings = settings or DEFAULTS
    ranges = report.analysis("ranges", range_name=range_name, settings=settings)
    if not isinstance(ranges, RangesResult) or not ranges.ok:
        return AnalysisResult(NAME, ranges.status, ranges.message)
    instances = ranges.counted_instances(
        ["instance", "start_ns", "end_ns", "duration_ns", "pid", "tid", "device_id",
         "cuda_covered"])
    slow_n = slow_count(ranges.n_attributed, ranges.tail_n, settings)
    with registered(report, "_interference_instances", instances):
        units = run_query(report, NAME, "units", {"slow_n": slow_n})
    with registered(report, "_interference_units", units), \
            stepped(report, NAME, {"scope": ranges.scope or "thread"}) as sql:
        per_name = sql.query("per_name")
        per_stream = sql.query("per_stream")
    grps = units.column("grp").to_pylist()
    figures: dict = {"slow_n": grps.count("slow"), "median_n": grps.count("median"),
                     "streams": per_stream.num_rows}
    rows = records(per_stream, OtherWork)
    top = rows[0] if rows and rows[0].slow_units else None
    if top is not None:
        figures.update(
            culprit_pid=top.pid, culprit_process=top.process_name, culprit_stream=top.stream_id,
            culprit_names=tuple(top.names.split("; ")), culprit_slow_units=top.slow_units,
            culprit_median_units=top.median_units,
            culprit_slow_overlap_mean_ns=top.slow_overlap_mean_ns,
            culprit_median_overlap_mean_ns=top.median_overlap_mean_ns,
            own_work=bool(top.own_stream))
    message = (top.line() if top is not None
               else f"no other GPU work ran during the {figures['slow_n']} slowest units")
    return InterferenceResult(status=OK, message=message, main="per_stream",
                              tables={"per_stream": per_stream, "per_name": per_name,
                                      "units": units},
                              findings=(message,) if top is not None else (), **figures)
