"""Requests / iterations: what each one spent its time on, and what grew in the slowest.

The unit is an NVTX range (``--range NAME``, or chosen automatically), or, without NVTX,
the interval between two blocking host waits (synchronizations, synchronous copies and
memsets). Each instance is split on the CPU side
(launch, copy, sync and other CUDA calls, time outside CUDA) and on the GPU side (own
kernels, own copies, other work, idle with own work pending, idle); the slowest
``--tail-pct`` percent are compared with the median band (45th to 55th percentile).
``totals`` reproduces ``nsys stats --report nvtx_sum``. Definitions: docs/analyses/ranges.md.
"""

from __future__ import annotations

import contextlib
import enum
import math
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..compute import compiled, cycles, intervals, sweep
from ..engine import threads
from ..engine.accelerate import register, rows_of
from ..engine.database import BATCH_ROWS
from ..engine.runner import Runs
from ..engine.schedule import forked
from ..engine.steps import Steps, expose, registered, step_file, step_writer
from ..errors import UsageError
from ..layers import Layer
from ..settings import DEFAULTS, Settings
from ..views.launch import arrow_values
from .base import (
    EMPTY,
    NOT_CAPTURED,
    OK,
    AnalysisResult,
    figure,
    load_sql,
    records,
    run_query,
    stepped,
    views_read,
)

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "ranges"
MIN_INSTANCES = DEFAULTS.range_min_instances
SLOWEST = 20
SCOPES = ("auto", "thread", "process")
#: API calls (and library NVTX ranges) that make a unit holding them warm-up: module
#: loading, context and handle creation, JIT compilation and linking, allocation
WARMUP_CALLS = (r"^(cuModuleLoad|cuLibraryLoad|cuCtxCreate|cuDevicePrimaryCtxRetain|"
                r"cublasCreate|cublasLtCreate|cudnnCreate|cufftPlan|cusparseCreate|"
                r"cusolverDnCreate|nvrtc|cuLink|cudaMalloc|cuMemAlloc|cudaHostAlloc|"
                r"cuMemHostAlloc|cudaMallocHost|cuMemCreate)")


class Component(str, enum.Enum):
    """A part of a unit's time in the tail attribution, with what it is as data: its side
    (``cpu``: the host thread's time, ``gpu``: the device's), the layer its growth points
    at (None: waiting, a consequence rather than a cause), whether it is time inside CUDA
    calls, and what its growth in the tail means."""

    def __new__(cls, value: str, side: str, layer: Layer | None, cuda_call: bool,
                meaning: str) -> Component:
        member = str.__new__(cls, value)
        member._value_ = value
        member.side = side
        member.layer = layer
        member.cuda_call = cuda_call
        member.meaning = meaning
        return member

    side: str
    layer: Layer | None
    cuda_call: bool
    meaning: str

    CPU_LAUNCH = ("cpu_launch", "cpu", Layer.CPU, True,
                  "launch calls took longer: CPU-side launch overhead or CPU contention")
    CPU_MEMCPY = ("cpu_memcpy", "cpu", Layer.PCIE, True,
                  "copy calls took longer on the host (synchronous or pageable copies)")
    CPU_SYNC = ("cpu_sync", "cpu", None, False, "the host waited longer in synchronizations")
    CPU_OTHER_API = ("cpu_other_api", "cpu", Layer.CPU, True,
                     "other CUDA calls took longer (allocation, module loading: often warm-up)")
    CPU_OUTSIDE_CUDA = ("cpu_outside_cuda", "cpu", Layer.CPU, False,
                        "the host spent longer outside CUDA: CPU work, queueing or scheduling")
    GPU_OWN_KERNEL = ("gpu_own_kernel", "gpu", Layer.GPU, False,
                      "its own kernels ran longer: GPU execution")
    GPU_OWN_COPY = ("gpu_own_copy", "gpu", Layer.PCIE, False,
                    "its own copies ran longer: transfers")
    GPU_OTHER = ("gpu_other", "gpu", Layer.GPU, False,
                 "other GPU work ran meanwhile: contention from other streams or processes")
    # the unit's work was submitted but nothing ran: the GPU (or work the trace does not
    # show) held it back
    GPU_PENDING_IDLE = ("gpu_pending_idle", "gpu", Layer.GPU, False,
                        "submitted work waited while the GPU looked idle: work this trace "
                        "does not show (another process) or GPU-side scheduling delayed it")
    GPU_IDLE = ("gpu_idle", "gpu", None, False, "the GPU waited for the host")

    @property
    def waits_for_host(self) -> bool:
        """The GPU side's waiting: idle with none of the unit's work pending."""
        return self is Component.GPU_IDLE

    def __str__(self) -> str:
        return self.value


CPU_COMPONENTS = tuple(c.value for c in Component if c.side == "cpu")
GPU_COMPONENTS = tuple(c.value for c in Component if c.side == "gpu")
#: what a component's growth in the tail points at (findings)
MEANING = {c.value: c.meaning for c in Component}


@dataclass(frozen=True)
class ComponentGrowth:
    """How much one component grew in the slowest units against the median band."""

    component: Component
    tail_mean_ns: float | None  #: mean over the slowest units, ns
    median_mean_ns: float | None  #: mean over the median band, ns
    delta_ns: float | None  #: tail_mean_ns - median_mean_ns, ns
    #: delta_ns over the growth of its side (the sum of the side's positive deltas): 0..1,
    #: 0 for a component that did not grow (fraction)
    share_of_growth: float | None


@dataclass(frozen=True)
class SideBalance:
    """What grew and what shrank on one side (CPU or GPU) of the tail attribution.

    Each side's components add up to the unit's duration, so their deltas add up to the
    duration's: ``growth_ns - shrink_ns``. A component that shrank lets another grow by
    more than the duration did; shares are of ``growth_ns`` for that reason.
    """

    side: str  #: cpu or gpu
    growth_ns: float  #: sum of the side's positive deltas, ns
    shrink_ns: float  #: sum of the side's negative deltas, as a positive figure, ns
    shrunk: tuple[ComponentGrowth, ...]  #: the components that shrank, most first
    top: ComponentGrowth | None  #: the component that grew most

    @property
    def delta_ns(self) -> float:
        """The duration's delta, as this side adds it up, ns."""
        return self.growth_ns - self.shrink_ns

    def offset_note(self) -> str | None:
        """Why the side's top component grew by more than the units did: the components
        that shrank, by how much. None when its growth, as a percentage of the units', would
        read 100% or less (rounded to a whole percent)."""
        if self.top is None or not self.shrunk:
            return None
        top = self.top.delta_ns or 0.0
        if self.delta_ns > 0 and round(100 * top / self.delta_ns) <= 100:
            return None
        shrank = ", ".join(f"{g.component.value} shrank by {_duration(-(g.delta_ns or 0))}"
                           for g in self.shrunk[:2])
        if len(self.shrunk) > 2:
            shrank += f" and {len(self.shrunk) - 2} more"
        return (f"{self.side.upper()} side: {shrank}, so {self.top.component.value}'s growth "
                f"({_duration(self.top.delta_ns or 0)}) exceeds the units' "
                f"({_duration(self.delta_ns)}); shares are of the side's growth "
                f"({_duration(self.growth_ns)}), which the shrinking offsets by "
                f"{_duration(self.shrink_ns)}")


def side_balance(attribution: tuple[ComponentGrowth, ...], side: str) -> SideBalance | None:
    """The growth and shrinking of ``side`` (``cpu`` or ``gpu``) in ``attribution``; None
    when the side was not measured."""
    parts = [g for g in attribution if g.component.side == side and g.delta_ns is not None]
    if not parts:
        return None
    grown = sorted((g for g in parts if g.delta_ns > 0), key=lambda g: -g.delta_ns)
    shrunk = sorted((g for g in parts if g.delta_ns < 0), key=lambda g: g.delta_ns)
    return SideBalance(side, float(sum(g.delta_ns for g in grown)),
                       float(-sum(g.delta_ns for g in shrunk)), tuple(shrunk),
                       grown[0] if grown else None)


@dataclass(frozen=True)
class AttributionRow:
    """One row of the ``attribution`` table (a component, or the units' ``total``)."""

    component: str  #: a :class:`Component`'s value, or ``duration`` for the total
    family: str  #: cpu, gpu or total
    tail_mean_ns: float | None  #: mean over the slowest units, ns
    median_mean_ns: float | None  #: mean over the median band, ns
    delta_ns: float | None  #: tail_mean_ns - median_mean_ns, ns
    #: delta_ns over family_growth_ns for a component that grew, else 0 (fraction)
    share_of_growth: float | None
    family_growth_ns: float | None  #: sum of the family's positive deltas, ns
    family_shrink_ns: float | None  #: sum of the family's negative deltas (positive), ns


@dataclass(frozen=True, kw_only=True)
class RangesResult(AnalysisResult):
    """Requests / iterations: the unit's latency distribution and the tail attribution.

    Tables: ``attribution`` (main; one row per component and the ``total``),
    ``instances`` (one row per unit with its components), ``slowest``, ``totals``
    (``nsys stats --report nvtx_sum``).
    """

    analysis: str = field(default="ranges", init=False)
    unit: str | None = figure("the unit: an NVTX range name, FIRST..LAST (a group of sibling "
                              "ranges), launch-cycle or sync-interval")
    unit_source: str | None = figure("nvtx_named (--range), nvtx_auto, nvtx_group, "
                                     "launch_cycle or sync_fallback")
    unit_runner_up: str | None = figure("the range that came second in the unit choice")
    unit_reason: str | None = figure("why the unit was chosen (and the runner-up was not)")
    scope: str | None = figure("whose CUDA calls counted into a unit: thread or process")
    n: int = figure("units in the tail figures (warm-up left out unless kept)", 0)
    n_warmup: int = figure("warm-up units: the leading stretch of the run whose units hold "
                           "one-off calls or stand far off the median", 0)
    warmup_kept: bool = figure("the warm-up units count in the tail figures", False)
    warmup_calls: tuple[str, ...] = figure("the one-off calls the warm-up units hold", ())
    warmup_reason: str | None = figure("how many units were set apart as warm-up, and why")
    n_later_oneoff: int = figure("units after the warm-up that hold a one-off call "
                                 "(allocation, module loading): counted, as the run's work", 0)
    later_oneoff_calls: tuple[str, ...] = figure("the one-off calls those units hold, most "
                                                 "units first", ())
    later_oneoff_reason: str | None = figure("one line on those units (how many, which calls, "
                                             "their median latency against the others')")
    p50_ns: float | None = figure("P50 of the units' durations, ns")
    p90_ns: float | None = figure("P90 of the units' durations, ns")
    p99_ns: float | None = figure("P99 of the units' durations, ns")
    p999_ns: float | None = figure("P99.9 of the units' durations, ns")
    max_ns: int | None = figure("longest unit, ns")
    mean_ns: float | None = figure("mean unit duration, ns")
    p99_over_p50: float | None = figure("P99/P50 of the durations (ratio)")
    n_attributed: int = figure("units inside the span the CUDA trace covers", 0)
    tail_pct: float | None = figure("the slowest percent compared with the median band, %")
    tail_n: int = figure("units in the tail", 0)
    median_band_n: int = figure("units in the median band (45th-55th percentile)", 0)
    top_component: Component | None = figure("the component that grew most (the GPU side's, "
                                             "unless only the GPU's idle time grew)")
    top_cpu_component: Component | None = figure("the CPU-side component that grew most")
    top_gpu_component: Component | None = figure("the GPU-side component that grew most")
    attribution: tuple[ComponentGrowth, ...] = figure(
        "each component's growth in the tail, largest first (JSON: component -> "
        "tail_mean_ns, median_mean_ns, delta_ns, share_of_growth: of its side's growth)", ())

    def attribution_rows(self) -> list[AttributionRow]:
        """The ``attribution`` table as records (empty without it)."""
        table = self.tables.get("attribution")
        return records(table, AttributionRow) if table is not None else []

    def counted_instances(self, columns: list[str]) -> pa.Table:
        """The instances the tail figures count (warm-up set apart unless kept), with
        ``columns``: the units the slow-unit comparisons choose from."""
        table = self.tables["instances"]
        return table.filter(table.column("counted")).select(columns)

    def growth(self, component: Component) -> ComponentGrowth | None:
        """The growth of ``component`` (None when the capture could not measure it)."""
        return next((g for g in self.attribution if g.component is component), None)

    def balance(self, side: str) -> SideBalance | None:
        """The growth and shrinking of ``side`` (``cpu`` or ``gpu``) in the attribution."""
        return side_balance(self.attribution, side)

    def offset_notes(self) -> list[str]:
        """Per side, why a component grew by more than the units did (the components that
        shrank and offset it); empty when none did."""
        notes = (b.offset_note() for b in map(self.balance, ("cpu", "gpu")) if b is not None)
        return [n for n in notes if n]

    def figure_json(self, name: str) -> Any:
        if name in ("warmup_calls", "later_oneoff_calls"):
            return list(getattr(self, name))
        if name == "attribution":
            return {g.component.value: {"tail_mean_ns": g.tail_mean_ns,
                                        "median_mean_ns": g.median_mean_ns,
                                        "delta_ns": g.delta_ns,
                                        "share_of_growth": g.share_of_growth}
                    for g in self.attribution}
        return super().figure_json(name)

    @classmethod
    def _figures_from_json(cls, summary: dict[str, Any]) -> dict[str, Any]:
        out = dict(summary)
        for name in ("top_component", "top_cpu_component", "top_gpu_component"):
            if out.get(name) is not None:
                out[name] = Component(out[name])
        for name in ("warmup_calls", "later_oneoff_calls"):
            if out.get(name) is not None:
                out[name] = tuple(out[name])
        if "attribution" in out:
            out["attribution"] = tuple(ComponentGrowth(Component(c), **v)
                                       for c, v in out["attribution"].items())
        return out


RESULT = RangesResult
#: how it runs (``engine.runner``): each GPU's busy union when overlap's pass made it (else
#: its own pass makes it); a large memory peak at millions of kernels
RUNS = Runs(needs=(intervals.GPU_BUSY,), large_peak=True)


#: API names (api_calls.name) of the calls that block the calling host thread until the
#: GPU has done something: every *Synchronize (device, context, stream, event; the event
#: and stream waits), synchronous copies (cudaMemcpy, cudaMemcpy2D/3D, cudaMemcpyPeer,
#: cudaMemcpyFromSymbol/ToSymbol, cuMemcpyHtoD/DtoH/...: a cu(da)Memcpy name without Async)
#: and synchronous memsets (cudaMemset*, cuMemsetD*, without Async). Each is a
#: synchronization point: the intervals between them are the units when no NVTX range
#: repeats. cudaStreamWaitEvent (a GPU-side wait) and the *Query polls do not block. A
#: name matching this expression blocks unless it contains "Async" (DuckDB's regular
#: expressions have no lookahead to say both in one).
BLOCKING_WAITS = r"Synchronize|^cu(da)?Mem(cpy|set)"

_NVTX_HINT = "annotate requests/iterations with NVTX ranges and run nsys profile --trace=cuda,nvtx"


@dataclass(frozen=True)
class Unit:
    """The unit of work chosen for a report.

    Attributes
    ----------
    name : str
        Range name, ``FIRST..LAST`` for a group of sibling ranges, ``launch-cycle`` or
        ``sync-interval``.
    source : str
        ``nvtx_named`` (``--range``), ``nvtx_auto``, ``nvtx_group``, ``launch_cycle`` or
        ``sync_fallback``.
    instances : pyarrow.Table
        One row per instance (``units_nvtx`` / ``units_sync`` columns).
    """

    name: str
    source: str
    instances: pa.Table
    runner_up: str | None = None
    reason: str | None = None

    @property
    def thread_local(self) -> bool:
        """True when every instance is a push/pop range (or sync interval) on one thread."""
        styles = set(self.instances.column("style").to_pylist())
        return (
            styles <= {"push_pop", "sync_interval", "launch_cycle"}
            and self.instances.column("end_tid").null_count == self.instances.num_rows
        )


class Durations(NamedTuple):
    """Instance durations of the unit, in start order (see :func:`durations`)."""

    unit: str | None
    durations_ns: np.ndarray
    unit_source: str | None


def _check(tail_pct: float, min_instances: int, scope: str) -> None:
    if not 0 < tail_pct <= 50:
        raise UsageError(f"--tail-pct must be in (0, 50], not {tail_pct!r}")
    if min_instances < 1:
        raise UsageError(f"--min-instances must be at least 1, not {min_instances!r}")
    if scope not in SCOPES:
        raise UsageError(f"--scope must be one of {', '.join(SCOPES)}, not {scope!r}")


def select_unit(
    report: Report, range_name: str | None = None, min_instances: int = MIN_INSTANCES,
    *, settings: Settings | None = None,
) -> Unit | AnalysisResult:
    """Choose the unit of work; an ``empty``/``not_captured`` result when there is none.

    Parameters
    ----------
    report : Report
        The opened trace.
    range_name : str, optional
        An NVTX range name (or ``DOMAIN:NAME``). Without it the unit is chosen by structure
        (ranges.sql ``candidates``, docs/analyses/ranges.md): a range name that repeats
        ``min_instances`` times, encloses GPU work of its own (calls that launch kernels or
        copies inside most of its instances), lasts at least
        ``settings.unit_min_median_ns`` at the median, is no framework operator or library
        call (``aten::``, emit_nvtx's ``seq =``, CUDA/cuBLAS/MPI/... domains) and does not
        lie inside another such name; among several, the one covering the most time. When
        it is one of several sibling ranges that repeat as often, one after the other in
        the same order, their group (:func:`_group`). When none qualifies, the cycles of
        the repeating GPU work (:func:`_launch_cycle`) or the intervals between blocking
        host waits (:data:`BLOCKING_WAITS`).
    min_instances : int
        Instances a range name needs to be chosen automatically.
    settings : Settings, optional
        Where ``unit_min_median_ns`` comes from.

    Returns
    -------
    Unit or AnalysisResult
        The unit with its runner-up and the reason of the choice.

    Raises
    ------
    UsageError
        ``range_name`` names no closed NVTX range of the trace.
    """
    settings = settings or DEFAULTS
    names = (
        run_query(report, NAME, "names").to_pylist() if report.probe.present("nvtx_ranges") else []
    )
    top = ", ".join(f"{r['name']} ({r['n']})" for r in names)
    if range_name is not None:
        if not names:
            return _no_unit(
                NOT_CAPTURED,
                f"no closed NVTX ranges, so no range {range_name!r} (capture with: {_NVTX_HINT})",
            )
        units = run_query(report, NAME, "units_nvtx", {"name": range_name})
        if units.num_rows == 0:
            raise UsageError(f"no closed NVTX range named {range_name!r}; most frequent: {top}")
        return Unit(range_name, "nvtx_named", units, None, "named with --range")
    rejected = ""
    if names:
        cuda_traced = report.probe.present("api_calls")
        cands = candidates(report, {
            "min_instances": min_instances, "min_median_ns": settings.unit_min_median_ns,
            "cuda_traced": cuda_traced,
        })
        found = [Candidate.of(r) for r in cands]
        choice = choose_unit(found, settings, cuda_traced)
        if choice.unit is not None:
            unit = Unit(choice.unit, "nvtx_auto",
                        run_query(report, NAME, "units_nvtx", {"name": choice.unit}),
                        choice.runner_up, choice.reason)
            return _group(report, unit, found, min_instances, settings, cuda_traced) or unit
        rejected = choice.reason
    units = run_query(report, NAME, "units_sync", {"blocking": BLOCKING_WAITS})
    cycle, aligned, units = _launch_cycle(report, units, min_instances, rejected)
    if cycle is not None:
        return cycle
    if units.num_rows:
        reason = "intervals between blocking host waits" + (
            f" ({rejected})" if rejected else " (no repeated NVTX range)") + aligned
        # a handful of intervals carries no tail to judge: kept (their decomposition is
        # still what they hold)
        apart = _sync_work_differs(report, units) if units.num_rows >= min_instances else None
        if apart is None:
            return Unit("sync-interval", "sync_fallback", units, None, reason)
        return _no_unit(EMPTY, reason + "; but " + apart)
    if not names and not _has_syncs(report):
        return _no_unit(
            NOT_CAPTURED,
            "no closed NVTX ranges, no blocking host waits and "
            + (aligned.removeprefix("; ") if aligned else "no repeating GPU work")
            + f" (capture with: {_NVTX_HINT})",
        )
    return _no_unit(
        EMPTY,
        (rejected or f"no NVTX range repeats {min_instances} times")
        + (f" (most frequent: {top}; pass --range NAME)" if top and not rejected else "")
        + "; no thread waits on the GPU twice and "
        + (aligned.removeprefix("; ") if aligned else "its GPU work does not repeat"),
    )


#: the GPU operations a sync interval must hold at the median to be an iteration, not one
#: copy or kernel between two waits
SYNC_MIN_OPS = 2
#: the share of sync intervals that must run the same kinds of work for them to be units
SYNC_SAME_WORK = 0.5


def _sync_work_differs(report: Report, units: pa.Table) -> str | None:
    """Why the sync intervals are no population whose tail means anything, or None when
    they repeat the same work.

    An interval repeats the work of an iteration when it holds at least
    :data:`SYNC_MIN_OPS` GPU operations at the median (launches, copies, memsets: a wait
    that bounds a single copy or kernel, or nothing, marks no iteration), and at least
    :data:`SYNC_SAME_WORK` of the intervals run the same kinds of work (ranges.sql
    ``sync_work``: the same kernel names and copy kinds, however many of each).
    """
    if not report.probe.present("api_calls"):
        return None
    with registered(report, "_ranges_units", units):
        work = run_query(report, NAME, "sync_work")
    ops = work.column("ops").to_numpy(zero_copy_only=False)
    kinds = Counter(w for w in work.column("work").to_pylist() if w)
    same, same_n = kinds.most_common(1)[0] if kinds else ("", 0)
    median = float(np.median(ops)) if len(ops) else 0.0
    if median >= SYNC_MIN_OPS and same_n >= SYNC_SAME_WORK * len(ops):
        return None
    few = int(np.count_nonzero(ops <= 1))
    return (f"the {len(ops)} intervals do not repeat the same work ({few} hold one GPU "
            f"operation or none, the median {median:.3g}; the most common work, "
            f"{_shorten(same.replace('|', ', ')) or 'none'}, in {same_n / max(1, len(ops)):.0%} "
            "of them): they are no population whose tail means anything. Annotate the "
            "iteration with an NVTX range (nvtx.annotate, nvtxRangePush) and capture with "
            "--trace=cuda,nvtx, or pass --range NAME")


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def candidates(report: Report, params: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of ranges.sql ``candidates``: the numbered families of names
    (``unit_families``), the probes (``unit_probes``) and their calls
    (``unit_probe_calls``, by the SQL or the accelerated pass, as the engine chooses for
    the rows of API calls) first, as tables the query reads."""
    with families(report, params["min_instances"]):
        probes = run_query(report, NAME, "unit_probes", params)
        if not params["cuda_traced"]:
            calls = pa.table({"id": pa.array([], pa.int64()),
                              "calls": pa.array([], pa.int64())})
        else:
            with registered(report, "unit_probes", probes):
                calls = PROBE_CALLS(report, probes)
        with registered(report, "unit_probes", probes), \
                registered(report, "unit_probe_calls", calls):
            return run_query(report, NAME, "candidates", params).to_pylist()


@contextlib.contextmanager
def families(report: Report, min_instances: int) -> Iterator[None]:
    """ranges.sql ``unit_families`` registered as the table unit_probes and candidates read
    (numbered names such as ``token_0_processing`` ... as one range, ``token_#_processing``)."""
    table = run_query(report, NAME, "unit_families", {"min_instances": min_instances})
    with registered(report, "unit_families", table):
        yield


def _probe_calls_method(report: Report, probes: pa.Table) -> pa.Table:
    """ranges.sql ``unit_probe_calls`` (``probes`` registered as unit_probes)."""
    return run_query(report, NAME, "unit_probe_calls")


#: the API categories of the calls that put work on the GPU (ranges.sql unit_probe_calls)
_GPU_CATEGORIES = ("launch", "graph_launch", "memcpy", "memset")


def _probe_calls_accelerated(report: Report, probes: pa.Table) -> pa.Table:
    """:func:`_probe_calls_method`'s table from one streamed read of the calls: per process,
    the probes' bounds sorted, and for each bound the calls at or before it and those
    before it (a search of each call among the bounds, counted); a probe's calls are
    those at or before its end less those before its start."""
    pid, pid_ok = arrow_values(probes.column("global_pid"))
    start, start_ok = arrow_values(probes.column("start_ns"))
    end, end_ok = arrow_values(probes.column("end_ns"))
    ids = probes.column("id").to_numpy(zero_copy_only=False).astype(np.int64)
    # a probe with a NULL process or bound holds no call (as the SQL's join finds none)
    valid = pid_ok & start_ok & end_ok
    pids = np.unique(pid[valid])
    # per process: its probes' distinct bounds, and per bound the calls at or before it
    # (le) and those before it (lt), summed over the batches
    bounds = [np.unique(np.concatenate([start[valid & (pid == p)], end[valid & (pid == p)]]))
              for p in pids]
    heads = np.r_[0, np.cumsum([len(b) for b in bounds])].astype(np.int64)
    flat = np.concatenate(bounds).astype(np.int64) if bounds else np.zeros(0, np.int64)
    # histograms of the calls over each process' bounds (m + 1 slots for m bounds): a
    # compiled loop searches each call among its process' bounds (compiled.count_at_bounds)
    le_hist = np.zeros(len(flat) + len(pids), np.int64)
    lt_hist = np.zeros(len(flat) + len(pids), np.int64)
    last = np.zeros(len(pids), np.int64)
    pids = pids.astype(np.int64)
    categories = ", ".join(f"'{c}'" for c in _GPU_CATEGORIES)
    reader = report.sql(
        "SELECT global_pid, start_ns FROM api_calls "
        f"WHERE category IN ({categories}) AND start_ns IS NOT NULL "
        "AND global_pid IN (SELECT global_pid FROM unit_probes)").to_arrow_reader(BATCH_ROWS)
    with contextlib.closing(reader):
        for batch in reader:
            compiled.count_at_bounds(
                batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64),
                batch.column(1).to_numpy(zero_copy_only=False).astype(np.int64),
                pids, heads, flat, last, le_hist, lt_hist)
    # a call t is at or before bound j when j >= #bounds below t, before it when j >=
    # #bounds at or below t: the cumulative sums of the histograms
    le = [np.cumsum(le_hist[heads[k] + k:heads[k + 1] + k + 1])[:-1] for k in range(len(pids))]
    lt = [np.cumsum(lt_hist[heads[k] + k:heads[k + 1] + k + 1])[:-1] for k in range(len(pids))]
    calls = np.zeros(len(ids), np.int64)
    for k, p in enumerate(pids):
        rows = np.flatnonzero(valid & (pid == p))
        calls[rows] = (le[k][np.searchsorted(bounds[k], end[rows])]
                       - lt[k][np.searchsorted(bounds[k], start[rows])])
    # a probe whose end precedes its start holds no call (as BETWEEN finds none)
    keep = calls > 0
    return pa.table({"id": pa.array(ids[keep], pa.int64()),
                     "calls": pa.array(calls[keep], pa.int64())})


@dataclass(frozen=True)
class Candidate:
    """A repeated NVTX range name and the evidence the unit choice reads (a row of
    ranges.sql ``candidates``)."""

    name: str
    n: int  #: closed instances
    total_ns: float  #: their summed duration, ns
    median_ns: float  #: their median duration, ns
    domain: str | None  #: its most frequent NVTX domain
    gpu_share: float  #: share of sampled instances that launch GPU work (fraction)
    gpu_calls_mean: float  #: GPU-launching calls per sampled instance (mean)
    operator_like: bool  #: a framework operator or library call by its name or domain
    qualifies: bool  #: repeats, long enough, encloses GPU work, not operator_like
    inside_frac: float  #: share of its instances inside another qualifying name (fraction)
    usual_parent: str | None  #: the qualifying name it most often lies in
    #: the distinct names it stands for: 1, or the members of a numbered family
    #: (``token_#_processing``: ``token_0_processing`` ...; ranges.sql unit_families)
    members: int = 1
    first_member: str | None = None  #: the first of them in time
    last_member: str | None = None  #: the last of them in time

    @classmethod
    def of(cls, row: dict[str, Any]) -> Candidate:
        return cls(**{f: row[f] for f in cls.__dataclass_fields__})

    @property
    def nested(self) -> bool:
        return self.inside_frac >= 0.5

    @property
    def family(self) -> str:
        """What a numbered family's name stands for ("" for a plain name)."""
        if self.members < 2:
            return ""
        return (f"{self.members} numbered names, {self.first_member} ... {self.last_member}, "
                "each once in its process: one range with a counter in its name")

    def evidence(self, cuda_traced: bool = True) -> str:
        """What makes it a unit: what a family stands for, how often it repeats, the GPU
        work it launches, its median."""
        work = (f"launches GPU work in {100 * self.gpu_share:.0f}% of its instances "
                f"({self.gpu_calls_mean:.3g} calls each)" if cuda_traced
                else "GPU work not traced (NVTX only)")
        return ((f"{self.family}; " if self.family else "")
                + f"repeats {self.n} times, {work}, median {_duration(self.median_ns)}")

    def why_not(self, settings: Settings, cuda_traced: bool = True) -> str:
        """Why this name is not a unit (empty when it is one)."""
        if self.operator_like:
            where = f"domain {self.domain}" if self.domain else "its name"
            return f"an operator or library range ({where})"
        if self.median_ns < settings.unit_min_median_ns:
            return f"median {_duration(self.median_ns)}, too short for a unit of work"
        if cuda_traced and self.gpu_share < 0.5:
            return (f"launches GPU work in only {100 * self.gpu_share:.0f}% of its instances"
                    if self.gpu_share else "launches no GPU work")
        if self.nested:
            return f"lies inside {self.usual_parent}"
        return ""


class UnitChoice(NamedTuple):
    """The unit choice: the chosen name (None: none qualifies), the runner-up, the reason."""

    unit: str | None
    runner_up: str | None
    reason: str


def choose_unit(cands: list[Candidate], settings: Settings = DEFAULTS,
                cuda_traced: bool = True) -> UnitChoice:
    """The unit among the repeated range names: the qualifying, outermost one covering the
    most time (``cands`` in the order of ranges.sql ``candidates``: qualifying first, then
    not nested, then by total time). Without a CUDA trace (an NVTX-only capture) no range
    shows GPU work, and that rule is not applied."""
    if not cands:
        return UnitChoice(None, None, "")
    units = [c for c in cands if c.qualifies and not c.nested]
    if not units:
        best = cands[0]
        return UnitChoice(None, None, f"no repeated NVTX range qualifies as a unit: "
                          f"{len(cands)} repeated; the first, {best.name} "
                          f"({best.n} times): {best.why_not(settings, cuda_traced)}")
    chosen = units[0]
    rest = [c for c in cands if c is not chosen]
    runner = rest[0] if rest else None
    reason = chosen.evidence(cuda_traced)
    if len(units) > 1:
        reason += (f"; of {len(units)} outermost qualifying ranges it covers the most time "
                   f"({_duration(chosen.total_ns)})")
    if runner is not None:
        why = (runner.why_not(settings, cuda_traced)
               or f"covers less time ({_duration(runner.total_ns)})")
        reason += f"; runner-up {runner.name}: {why}"
    return UnitChoice(chosen.name, runner.name if runner else None, reason)


#: the columns of a unit's instances (ranges.sql units_nvtx, units_sync)
_UNIT_SCHEMA = pa.schema([
    ("instance", pa.int64()), ("name", pa.string()), ("domain", pa.string()),
    ("style", pa.string()), ("start_ns", pa.int64()), ("end_ns", pa.int64()),
    ("duration_ns", pa.int64()), ("pid", pa.int64()), ("tid", pa.int64()),
    ("global_pid", pa.int64()), ("global_tid", pa.int64()), ("end_tid", pa.int64())])


def _unit_table(name: str, style: str, start: np.ndarray, end: np.ndarray,
                who: dict[str, int | None]) -> pa.Table:
    """A unit's instances from their windows (one thread or process: ``who``)."""
    n = len(start)
    return pa.table({
        "instance": np.arange(1, n + 1, dtype=np.int64), "name": [name] * n,
        "domain": [""] * n, "style": [style] * n, "start_ns": start, "end_ns": end,
        "duration_ns": end - start,
        **{c: pa.array([who[c]] * n, pa.int64())
           for c in ("pid", "tid", "global_pid", "global_tid", "end_tid")},
    }, schema=_UNIT_SCHEMA)


def _launch_cycle(report: Report, sync_units: pa.Table, min_instances: int,
                  rejected: str) -> tuple[Unit | None, str, pa.Table]:
    """Iterations found in the repeating GPU work of the busiest launching thread
    (ranges.sql ``launch_sequence``, :func:`cycles.periods`), when no NVTX range is the
    unit.

    The sequence of kernels (by name), copies and memsets that thread submits repeats once
    per iteration of a training or serving loop; each iteration runs from a launch call of
    the cycle's first kernel to the next one (host time included; the last ends when its
    work ends on the GPU or its last call returns), or, when the cycles hold blocking host
    waits, from the return of the wait for that kernel to the next (:func:`_wait_bounds`):
    the host learns a cycle's result there. Every period the work repeats with
    (:func:`cycles.periods`: a layer inside a step inside ...) is weighed against the
    blocking host waits of that thread: the intervals between the waits stay the unit when
    the cycles of some period hold one wait each (the waits mark those iterations), or when
    none holds two or more and ``min_instances`` or more waits lie inside the loop (the
    waits mark a loop around the cycles). Else the cycles are the unit: of the periods
    whose cycles hold two or more waits (``loss.item()`` and a metric's ``.item()`` cut a
    step in two), or of all when none does, the one :func:`cycles.pick` takes.

    When the waits mark the iterations, only the intervals that end inside the loop (from
    the first cycle's start) and begin before its last cycle ends are kept: set-up and
    teardown waits outside the loop make no iterations.

    Returns
    -------
    (Unit or None, str, pyarrow.Table)
        The launch-cycle unit, or None, a note for the sync fallback's reason (empty when
        nothing repeats) and the sync intervals to use.
    """
    if not report.probe.present("api_calls"):
        return None, "", sync_units
    seq = run_query(report, NAME, "launch_sequence")
    if seq.num_rows < 2 * min_instances:
        return None, "", sync_units
    labels = seq.column("label").combine_chunks().dictionary_encode()
    start = seq.column("start_ns").to_numpy().astype(np.int64)
    end = seq.column("end_ns").to_numpy().astype(np.int64)
    reach = np.maximum.accumulate(end)
    gaps = np.maximum(start - np.r_[start[0], reach[:-1]], 0)
    found = cycles.periods(labels.indices.to_numpy(zero_copy_only=False), gaps,
                           min_cycles=min_instances, min_coverage=0.5)
    if not found:
        return None, "", sync_units
    names = labels.dictionary.to_pylist()
    who = {c: seq.column(c)[0].as_py() for c in ("pid", "tid", "global_pid", "global_tid")}
    blocking = run_query(report, NAME, "blocking_ends", {
        "tid": who["global_tid"], "blocking": BLOCKING_WAITS})
    waits = blocking.column("end_ns").to_numpy()

    def waits_per_cycle(c: cycles.Cycle) -> float:
        per_cycle = np.diff(np.searchsorted(waits, start[c.starts]))
        return float(np.median(per_cycle)) if len(per_cycle) else 0.0

    held = {c.period: waits_per_cycle(c) for c in found}
    # the waits mark the iterations when the cycles of some period hold one each; with
    # two or more per cycle, the finest such period is the iteration they cut up
    several = [c for c in found if held[c.period] >= 2]
    cyc = cycles.pick(several if sync_units.num_rows and several else found)
    if cyc is None:
        return None, "", sync_units
    first, last = names[cyc.boundary], names[cyc.last]
    bounds = start[cyc.starts]
    inside = int(np.count_nonzero((waits >= bounds[0]) & (waits <= bounds[-1])))
    loop = f"the GPU work repeats every {cyc.period} calls ({cyc.n} cycles from {first} to {last})"
    gpu_end = seq.column("gpu_end_ns").to_numpy(zero_copy_only=False)
    gpu_end = np.where(np.isnan(gpu_end.astype(float)), end, gpu_end).astype(np.int64)

    def last_stop(c: cycles.Cycle) -> int:
        """When the last cycle ends: its work on the GPU, or its last call's return."""
        tail = slice(int(c.starts[-1]), int(c.ends[-1]) + 1)
        return max(int(end[tail].max()), int(gpu_end[tail].max()))

    marked = next((c for c in found if held[c.period] == 1), None)
    if sync_units.num_rows and marked is not None:
        lo, hi = int(start[marked.starts[0]]), last_stop(marked)
        s_end = sync_units.column("end_ns").to_numpy(zero_copy_only=False)
        s_start = sync_units.column("start_ns").to_numpy(zero_copy_only=False)
        keep = (s_end >= lo) & (s_start < hi)
        note = "; one blocking wait per cycle of the repeating GPU work"
        if 2 <= keep.sum() < len(keep):
            note += (f" ({int(keep.sum())} intervals inside the loop; {int((~keep).sum())} "
                     "before or after it left out)")
            sync_units = sync_units.filter(pa.array(keep)).set_column(
                0, "instance", pa.array(np.arange(1, int(keep.sum()) + 1, dtype=np.int64)))
        return None, note, sync_units
    if sync_units.num_rows and not several and inside >= min_instances:
        return None, f"; {loop}, several cycles per interval: a loop inside each", sync_units
    if cyc.held < cycles.MIN_HELD:
        # a pattern inside the loop, not its iteration: most of the work lies in the
        # cycles that differ from it
        return None, (f"; the GPU work repeats only in part (every {cyc.period} calls, but "
                      f"the cycles alike hold {cyc.held:.0%} of it): no whole iteration"
                      ), sync_units
    per = held[cyc.period]
    syncs = ("no blocking host wait inside the loop" if inside == 0 else
             f"{per:.3g} blocking host waits per cycle, so the intervals between them are "
             "not iterations" if per >= 2 else
             f"{per:.3g} blocking host waits per cycle" if per >= 1 else
             f"only {inside} blocking host waits inside the loop")
    anchored = (_wait_bounds(cyc, start, gpu_end, blocking, min_instances) if per >= 1
                else None)
    if anchored is not None:
        bounds, stop, wait = anchored
        which = (f"{first} (the cycle's first call, itself a blocking wait)" if wait is None
                 else f"the {wait} that waits for {first} (the first blocking wait after its "
                 "launch to return after it ends, at the same place in every cycle)")
        how = (f"{len(bounds)} iterations, each from the return of {which} to the next "
               "one's: from the host learning one cycle's result to learning the next's, host "
               "work included")
    else:
        stop = np.r_[start[cyc.starts[1:]], last_stop(cyc)].astype(np.int64)
        how = f"each iteration runs from a launch of {first} to the next"
    reason = (("no NVTX unit (" + rejected + "); " if rejected else "no repeated NVTX range; ")
              + f"{loop}, {100 * cyc.agreement:.0f}% of them identical; "
              + (f"{syncs}; {how}" if anchored is not None else f"{how}; {syncs}"))
    return Unit("launch-cycle", "launch_cycle",
                _unit_table("launch-cycle", "launch_cycle", bounds, stop,
                            {**who, "end_tid": None}),
                None, reason), "", sync_units


def _wait_bounds(cyc: cycles.Cycle, start: np.ndarray, gpu_end: np.ndarray,
                 blocking: pa.Table, min_instances: int
                 ) -> tuple[np.ndarray, np.ndarray, str | None] | None:
    """Iterations of the launch cycles ``cyc`` bounded by a blocking wait rather than by a
    launch: in each cycle, the wait for its first call's work, the first blocking wait that
    begins at or after that call and returns at or after its work ends on the GPU. So that
    every iteration is bounded at the same place of its cycle, the wait taken is the k-th
    to begin after the cycle's first call in every cycle, k the most common place of that
    first wait (a blocking memset that returns before its work ends in some cycles and
    after it in others does not move the bound), and it must begin before the next cycle
    does. Each iteration runs from the return of one cycle's wait to the return of the
    next cycle's, so it holds the host's work between learning one result and the next
    (set-up before the first wait and teardown after the last are left out).

    Parameters
    ----------
    cyc : cycles.Cycle
        The cycles of the launch sequence.
    start, gpu_end : numpy.ndarray
        Per call of the sequence, when it was made and when its work ended on the GPU (the
        call's return when not recorded), ns.
    blocking : pyarrow.Table
        The thread's blocking waits (ranges.sql ``blocking_ends``), in order.
    min_instances : int
        Iterations needed.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray, str or None) or None
        The iterations' starts and ends (ns) and the bounding waits' most common API name
        (None when in most cycles the wait is the first call itself: a blocking copy);
        None when fewer than half of the cycles hold such a wait or fewer than
        ``min_instances`` iterations lie between consecutive ones.
    """
    w_start, w_end = (blocking.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                      for c in ("start_ns", "end_ns"))
    first = cyc.starts.astype(np.int64)
    launch, done = start[first], gpu_end[first]
    following = np.r_[launch[1:], np.iinfo(np.int64).max]

    def within(j: np.ndarray) -> np.ndarray:
        """Whether wait j exists and begins before the next cycle does."""
        ok = j < len(w_start)
        ok[ok] &= w_start[j[ok]] < following[ok]
        return ok

    # the waits do not overlap (one thread, nested calls merged): the first that begins at
    # or after the launch and the first that returns at or after the work are both found
    # by a search, and the later of the two is the first meeting both
    after = np.searchsorted(w_start, launch, "left")
    j = np.maximum(after, np.searchsorted(w_end, done, "left"))
    found = within(j)
    if not found.any():
        return None
    j = after + int(np.bincount(j[found] - after[found]).argmax())
    found = within(j)
    pair = found[:-1] & found[1:]
    if 2 * found.sum() < len(found) or pair.sum() < min_instances:
        return None
    lo, hi = w_end[j[:-1][pair]], w_end[j[1:][pair]]
    if 2 * np.count_nonzero(w_start[j[found]] == launch[found]) > found.sum():
        return lo, hi, None
    names = pc.value_counts(blocking.column("name").take(pa.array(j[found])))
    counts = names.field("counts").to_numpy()
    return lo, hi, names.field("values")[int(counts.argmax())].as_py()


def _group(report: Report, unit: Unit, cands: list[Candidate], min_instances: int,
           settings: Settings = DEFAULTS, cuda_traced: bool = True) -> Unit | None:
    """The group of sibling ranges the chosen range belongs to, when it is one step of an
    iteration rather than the iteration: several names that are not nested in another
    candidate repeat as often as it does (within 5%), one after the other in the same order
    each cycle (``layer_0`` ... ``layer_11`` per token; ``reader``, ``backbone``,
    ``find_centers``, ``transformer`` per frame). Each cycle of their sequence
    (:func:`cycles.find`) is one iteration, from its first range's start to its last
    range's end. None when the chosen range has no such siblings.

    A range that encloses the siblings and qualifies is the unit before any group is
    sought (they lie inside it); one that encloses most of the group's iterations without
    qualifying (:func:`_enclosing`) is named in the reason with why it was passed over."""
    chosen = next((c for c in cands if c.name == unit.name), None)
    if chosen is None:
        return None
    tol = max(2, chosen.n // 20)
    siblings = [c.name for c in cands if c is not chosen and not c.nested
                and not c.operator_like and abs(c.n - chosen.n) <= tol]
    if not siblings:
        return None
    pids = unit.instances.column("global_pid").to_numpy(zero_copy_only=False)
    pid = int(np.bincount(pids - pids.min()).argmax() + pids.min())
    rows = run_query(report, NAME, "units_named", {"names": [chosen.name, *siblings],
                                                   "pid": pid})
    # a name whose instances enclose the chosen range's is no sibling but the range
    # around them (one that does not qualify: it would have been chosen)
    around = _around(rows, chosen.name, siblings)
    if around:
        rows = rows.filter(pc.invert(pc.is_in(rows.column("name"), pa.array(around))))
        if rows.num_rows == 0 or set(rows.column("name").to_pylist()) == {chosen.name}:
            return None
    labels = rows.column("name").combine_chunks().dictionary_encode()
    start = rows.column("start_ns").to_numpy().astype(np.int64)
    end = rows.column("end_ns").to_numpy().astype(np.int64)
    reach = np.maximum.accumulate(end)
    gaps = np.maximum(start - np.r_[start[0], reach[:-1]], 0)
    codes = labels.indices.to_numpy(zero_copy_only=False)
    cyc = cycles.find(codes, gaps, min_cycles=min_instances)
    if cyc is None:
        return None
    names = labels.dictionary.to_pylist()
    own = names.index(chosen.name)
    span = codes[int(cyc.starts[0]):int(cyc.ends[-1]) + 1]
    members = np.unique(codes[int(cyc.starts[0]):int(cyc.starts[0]) + cyc.period])
    if own not in members or np.count_nonzero(span == own) < cyc.n - 1:
        return None
    stop = np.array([end[a:b + 1].max() for a, b in zip(cyc.starts, cyc.ends)], dtype=np.int64)
    first, last = names[cyc.boundary], names[cyc.last]
    styles = set(rows.column("style").to_pylist())
    tids = set(rows.column("global_tid").to_pylist())
    one_thread = styles == {"push_pop"} and len(tids) == 1
    r0 = rows.slice(int(cyc.starts[0]), 1).to_pylist()[0]
    who = {**{c: r0[c] for c in ("pid", "tid", "global_pid", "global_tid")}, "end_tid": None}
    name = f"{first}..{last}"
    order = [names[c] for c in codes[int(cyc.starts[0]):int(cyc.starts[0]) + cyc.period]]
    shown = ", ".join(order[:4]) + (", ..." if len(order) > 4 else "")
    reason = (f"{name} grouped, {cyc.n} iterations: {len(members)} sibling ranges repeat "
              f"{chosen.n} times each, one after the other in the same order ({shown}; "
              f"{100 * cyc.agreement:.0f}% of cycles identical), so an iteration is their "
              f"group, from {first}'s start to {last}'s end; {chosen.name} alone "
              + (unit.reason or "").replace("; runner-up", "; its runner-up", 1))
    grouped = {names[c] for c in members}
    outer = _enclosing(report, sorted((c for c in cands if c.name not in grouped),
                                      key=lambda c: (c.name not in around, -c.total_ns)),
                       start[cyc.starts], stop, pid, tol)
    if outer is not None:
        why = outer.why_not(settings, cuda_traced)
        if not why:  # it qualifies: the iteration it marks is the unit, not the group
            return Unit(outer.name, "nvtx_auto",
                        run_query(report, NAME, "units_nvtx", {"name": outer.name}), name,
                        f"{outer.evidence(cuda_traced)}; it encloses the {len(members)} "
                        f"sibling ranges of each iteration ({shown}), so it is the "
                        f"iteration rather than their group ({name})")
        reason += f"; the enclosing {outer.name} ({outer.n} times) was passed over: {why}"
    return Unit(name, "nvtx_group",
                _unit_table(name, "push_pop" if one_thread else "start_end",
                            start[cyc.starts], stop, who),
                chosen.name, reason)


def _around(rows: pa.Table, chosen: str, siblings: list[str]) -> list[str]:
    """The names among ``siblings`` whose instances (``rows``: units_named) enclose most of
    the ``chosen`` range's instances: the range around them, not one beside them."""
    name = rows.column("name")
    inner = _spans(rows.filter(pc.equal(name, chosen)))
    return [s for s in siblings if _encloses(*_spans(rows.filter(pc.equal(name, s))), *inner)]


def _enclosing(report: Report, cands: list[Candidate], start: np.ndarray, stop: np.ndarray,
               pid: int, tol: int) -> Candidate | None:
    """The first of ``cands`` whose instances in process ``pid`` enclose most of the
    iterations [``start``, ``stop``] of a group, one instance each (as many instances as
    iterations, within ``tol``): the range that marks the iteration around the siblings;
    None when none does."""
    for c in cands:
        if abs(c.n - len(start)) > tol:
            continue
        rows = run_query(report, NAME, "units_nvtx", {"name": c.name})
        mine = rows.filter(pc.equal(rows.column("global_pid"), pid))
        if _encloses(*_spans(mine), start, stop):
            return c
    return None


def _spans(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The start_ns and end_ns columns of ``rows`` as int64 arrays."""
    return tuple(rows.column(c).to_numpy(zero_copy_only=False).astype(np.int64)
                 for c in ("start_ns", "end_ns"))  # type: ignore[return-value]


def _encloses(lo: np.ndarray, hi: np.ndarray, start: np.ndarray, stop: np.ndarray) -> bool:
    """Whether the intervals [``lo``, ``hi``] enclose more than half of the intervals
    [``start``, ``stop``] (each inside one of them)."""
    if not len(lo) or not len(start):
        return False
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    # the interval that begins last at or before each inner one's start must end at or
    # after its stop
    k = np.searchsorted(lo, start, "right") - 1
    inside = (k >= 0) & (hi[np.maximum(k, 0)] >= stop)
    return 2 * int(np.count_nonzero(inside)) > len(start)


def _has_syncs(report: Report) -> bool:
    if not report.probe.present("api_calls"):
        return False
    return (
        report.sql(
            "SELECT count(*) FROM api_calls "
            "WHERE regexp_matches(name, $1) AND NOT contains(name, 'Async')", [BLOCKING_WAITS]
        ).fetchall()[0][0]
        > 0
    )


def _no_unit(status: str, message: str) -> AnalysisResult:
    return AnalysisResult(NAME, status, message)


def durations(
    report: Report, range_name: str | None = None, *, min_instances: int = MIN_INSTANCES,
    settings: Settings | None = None,
) -> Durations:
    """Durations of the unit's instances, without the decomposition (cheap).

    Parameters
    ----------
    report : Report
        The opened trace.
    range_name : str, optional
        NVTX range name; default: chosen as :func:`run` does.
    min_instances : int
        Instances a range name needs to be chosen automatically.
    settings : Settings, optional
        The unit choice's thresholds.

    Returns
    -------
    Durations
        ``(unit, durations_ns, unit_source)``: ``durations_ns`` is an int64 array in start
        order; ``unit`` and ``unit_source`` are None (and the array empty) when the trace
        has no unit.

    Examples
    --------
    >>> unit, d, source = durations(rep)                 # doctest: +SKIP
    >>> unit, source, np.percentile(d, 99)              # doctest: +SKIP
    ('request', 'nvtx_auto', 2893571.0)
    """
    unit = select_unit(report, range_name, min_instances, settings=settings)
    if isinstance(unit, AnalysisResult):
        return Durations(None, np.array([], dtype=np.int64), None)
    d = unit.instances.column("duration_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    return Durations(unit.name, d, unit.source)


def decompose(report: Report, unit: Unit, scope: str = "auto") -> tuple[pa.Table, str]:
    """One row per instance with its CPU and GPU components (the ``instances`` table).

    Parameters
    ----------
    report : Report
        The opened trace.
    unit : Unit
        From :func:`select_unit`.
    scope : {'auto', 'thread', 'process'}
        Whose CUDA calls count into an instance. ``auto``: the thread for push/pop ranges
        and sync intervals, the process for start/end ranges (and for push/pop ranges
        whose thread made no CUDA call inside any instance).

    Returns
    -------
    (pyarrow.Table, str)
        The instances and the scope used.
    """
    chosen = scope if scope != "auto" else ("thread" if unit.thread_local else "process")
    ids = np.sort(unit.instances.column("instance").to_numpy(zero_copy_only=False)
                  .astype(np.int64))
    with registered(report, "_ranges_units", unit.instances):
        table = _instances(report, chosen, ids)
        if scope == "auto" and chosen == "thread" and unit.source != "sync_fallback":
            api = sum(_total(table, f"{c}_ns") for c in CPU_COMPONENTS[:-1])
            if api == 0:
                chosen = "process"
                table = _instances(report, chosen, ids)
    return table, chosen


def _instances(report: Report, scope: str, ids: np.ndarray) -> pa.Table:
    """The instances table of the units registered as _ranges_units (``ids``: their
    instance numbers, sorted): :func:`method` or :func:`accelerated`, as the engine
    chooses for the rows of kernels and API calls."""
    return INSTANCES(report, scope, ids)


@contextlib.contextmanager
def _units(report: Report, scope: str) -> Iterator[Steps]:
    """The steps of ranges.sql for the instances of the units registered as
    _ranges_units, in ``scope`` (also set as the variable rg_scope, which steps read)."""
    with stepped(report, NAME, {"scope": scope}) as sql, ExitStack() as stack:
        report.con.execute("SET VARIABLE rg_scope = ?", [scope])
        stack.callback(report.con.execute, "RESET VARIABLE rg_scope")
        yield sql


def method(report: Report, scope: str, ids: np.ndarray) -> pa.Table:
    """The instances table by the SQL of ranges.sql: the steps rg_own (an ASOF join),
    rg_cpu, rg_busy and rg_own_union as queries."""
    with _units(report, scope) as sql:
        return sql.query("instances")


def accelerated(report: Report, scope: str, ids: np.ndarray) -> pa.Table:
    """:func:`method`'s table with the steps made by sorted passes and compiled loops: the
    placement by a search among the sorted instances (``_own``), the CPU side by a sweep
    (``sweep.covered_sums``), the GPU side by ``intervals.Coverage`` and the compiled
    loops of ``_gpu_side``."""
    with _units(report, scope) as sql, ExitStack() as stack:
        groups = int(ids.max()) + 1 if len(ids) else 1
        # The CPU side (the sweep: DuckDB's read and a compiled loop, every core) runs in a
        # thread beside the GPU side, whose passes are mostly numpy and compiled loops on
        # one core, so the two use both cores; the views either reads (those the method's
        # instances step needs, by the declarations of ranges.sql) are built first, and the
        # steps the sweep's queries read are named on its cursor
        other = stack.enter_context(forked(report, *views_read(NAME, "instances")))
        sql.lend(other, "rg_cpu_intervals", "rg_cpu_probes")
        other.con.execute("SET VARIABLE rg_scope = ?", [scope])
        # an error on this side interrupts the sweep's queries (``engine.threads``)
        pool = stack.enter_context(threads.Workers(1, stage="ranges: CPU sweep",
                                                   on_cancel=other.con.interrupt))
        own = stack.enter_context(step_file(report, NAME, "rg_own"))
        placed = _own(report, sql.text("rg_launched"), own, groups)
        expose(report, "rg_own", own)
        sql.need("rg_udev")  # the GPU side reads it
        sums = pool.submit(_sweep, other, "rg_cpu_intervals", "rg_cpu_probes", 4, groups)
        for name, table in zip(("rg_busy", "rg_own_union"), _gpu_side(report, sql, placed)):
            stack.enter_context(registered(report, name, table))
        cpu = sums.result()[ids]
        stack.enter_context(registered(report, "rg_cpu", pa.table({
            "instance": ids,
            **{f"{c}_ns": cpu[:, i] for i, c in enumerate(CPU_COMPONENTS[:4])}})))
        return sql.query("instances")


_OWN_SCHEMA = pa.schema([("instance", pa.int64()), ("kernel", pa.bool_()),
                         ("device_id", pa.int64()), ("start_ns", pa.int64()),
                         ("end_ns", pa.int64()), ("api_end_ns", pa.int64())])


def _own(report: Report, launched_sql: str, target: Path, groups: int) -> np.ndarray:
    """Write the step rg_own: each launched operation placed in its instance (ranges.sql,
    rg_launched, ``launched_sql``, says the rule); operations of no instance have a NULL
    one, or are left out. Returns the number of operations placed in each instance
    (``groups`` of them)."""
    units = report.sql(
        "SELECT key, start_ns, end_ns, instance FROM rg_units "
        "WHERE key IS NOT NULL AND start_ns IS NOT NULL ORDER BY key, start_ns, instance"
    ).fetchnumpy()
    keys = np.asarray(units["key"], dtype=np.int64)
    first = {int(k): (lo, hi) for k, lo, hi in zip(*intervals.runs(keys))}
    starts, ends, ids = (np.asarray(units[c], dtype=np.int64)
                         for c in ("start_ns", "end_ns", "instance"))
    launched = report.sql(launched_sql).to_arrow_reader(
        sweep.BATCH_ROWS)
    counts = np.zeros(groups, dtype=np.int64)
    with step_writer(target, _OWN_SCHEMA) as write:
        for batch in launched:
            (key, key_ok), (api_start, start_ok), (api_end, end_ok) = (
                arrow_values(batch.column(c)) for c in ("key", "api_start_ns", "api_end_ns"))
            known = key_ok & start_ok & end_ok
            instance = np.full(batch.num_rows, -1, dtype=np.int64)
            present = None if known.all() else np.flatnonzero(known)
            # the keys come in runs (a thread's or process's calls together): only the first
            # row of each run is looked up (intervals.run_codes)
            codes, distinct = intervals.run_codes((key if present is None else key[present],))
            for code, rows in intervals.by_code(codes, len(distinct)):
                k = int(distinct[code, 0])
                if k not in first:
                    continue
                lo, hi = first[k]
                if present is not None:
                    rows = present[rows]
                j = np.empty(len(rows), dtype=np.int64)
                compiled.search_right(starts[lo:hi], api_start[rows], j)
                j += lo - 1
                inside = (j >= lo) & (api_end[rows] <= ends[np.maximum(j, lo)])
                instance[rows[inside]] = ids[j[inside]]
            placed = instance >= 0
            n = int(np.count_nonzero(placed))
            if n:
                counts += np.bincount(instance[placed], minlength=groups)
                # mostly placed: the batch is written whole, rows of no instance with a NULL
                # one (which every query of rg_own leaves out), instead of copying each
                # column without them
                whole = 2 * n >= batch.num_rows
                rows = None if whole else np.flatnonzero(placed)
                write(pa.table({
                    "instance": (pa.array(instance, mask=None if n == len(placed) else ~placed)
                                 if whole else instance[rows]),
                    **{c: batch.column(c) if whole else batch.column(c).take(rows)
                       for c in ("kernel", "device_id", "start_ns", "end_ns", "api_end_ns")},
                }).cast(_OWN_SCHEMA))
    return counts


def _gpu_side(report: Report, sql: Steps, placed: np.ndarray) -> tuple[pa.Table, pa.Table]:
    """The steps rg_busy and rg_own_union.

    rg_busy: per instance with a device, the time the device was busy (the union of all
    its operations, rg_busy_intervals) in the instance's window, busy_ns; the merged
    stretches in which its own work was pending, pending_ns; and the busy time inside
    them, pending_busy_ns. rg_own_union: per instance, the unions of its own kernels and of
    all its own work in its window. ``placed``: the operations of each instance in rg_own
    (``_own``).

    The own work on each instance's device is read from rg_own once and put in instance
    order by a counting sort (``compiled.own_pieces``: each instance's rows get the slots
    after its offset), clipped to the window as ranges.sql (Own work) says; a compiled
    loop (``compiled.own_work``) makes the unions and stretches of each instance, instead
    of DuckDB joining rg_own to each instance's device and window and sorting it by
    instance, or window functions partitioned by instance."""
    busy = (report.workspace.take(intervals.GPU_BUSY)
            or intervals.Coverage.of_query(report, sql.text("rg_busy_intervals")))
    udev = report.sql("SELECT instance, device_id, start_ns, end_ns FROM rg_udev "
                      "WHERE device_id IS NOT NULL ORDER BY instance").to_arrow_table()
    instance, device = (udev.column(c).to_numpy().astype(np.int64, copy=False)
                        for c in ("instance", "device_id"))
    (w_start, w_start_ok), (w_end, w_end_ok) = (arrow_values(udev.column(c))
                                                for c in ("start_ns", "end_ns"))
    # a NULL instant covers nothing
    window = busy.covered(device, w_end) * w_end_ok - busy.covered(device, w_start) * w_start_ok
    # each instance's device and window, by instance number
    groups = len(placed)
    udevice, wstart, wend = (np.zeros(groups, dtype=np.int64) for _ in range(3))
    uknown, wend_ok = np.zeros(groups, dtype=bool), np.zeros(groups, dtype=bool)
    udevice[instance], uknown[instance] = device, True
    wstart[instance], wend[instance], wend_ok[instance] = w_start, w_end, w_end_ok
    offset = np.cumsum(placed) - placed
    fill = np.zeros(groups, dtype=np.int64)
    total = int(placed.sum())
    kernel = np.empty(total, dtype=bool)
    ws, ps, e = (np.empty(total, dtype=np.int64) for _ in range(3))
    own = report.sql("SELECT instance, kernel, device_id, start_ns, end_ns, api_end_ns "
                     "FROM rg_own WHERE instance IS NOT NULL")
    for batch in own.to_arrow_reader(sweep.BATCH_ROWS):
        (on, on_ok), (start, _), (end, end_ok), (api_end, api_ok) = (
            arrow_values(batch.column(c)) for c in ("device_id", "start_ns", "end_ns",
                                                    "api_end_ns"))
        compiled.own_pieces(batch.column("instance").to_numpy(),
                             batch.column("kernel").to_numpy(zero_copy_only=False), on,
                             on_ok, start, end, end_ok, api_end, api_ok, udevice, uknown,
                             wstart, wend, wend_ok, offset, fill, kernel, ws, ps, e)
    pending, pending_busy = (np.zeros(len(instance), dtype=np.int64) for _ in range(2))
    row_of = np.zeros(groups, dtype=np.int64)  # an instance's row of udev
    row_of[instance] = np.arange(len(instance))
    have = np.flatnonzero(fill)
    kernel_union, any_union = (np.empty(len(have), dtype=np.int64) for _ in range(2))
    # a chunk of instances at a time: the stretches' arrays hold one chunk's pieces
    ends = np.cumsum(fill[have])
    cuts = np.searchsorted(ends, np.arange(sweep.BATCH_ROWS, int(ends[-1]) if len(ends) else 0,
                                           sweep.BATCH_ROWS), side="right")
    for lo, hi in zip(np.r_[0, cuts], np.r_[cuts, len(have)]):
        if lo == hi:
            continue
        chunk = have[lo:hi]
        size = int(fill[chunk].sum())
        of, s, t = (np.empty(size, dtype=np.int64) for _ in range(3))
        m = compiled.own_work(chunk, offset[chunk], fill[chunk], kernel, ws, ps, e,
                               kernel_union[lo:hi], any_union[lo:hi], of, s, t)
        of, s, t = of[:m], s[:m], t[:m]
        at = row_of[of]  # pieces exist only where the device is known
        np.add.at(pending, at, t - s)
        np.add.at(pending_busy, at, busy.between(device[at], s, t))
    return (pa.table({"instance": instance, "busy_ns": window, "pending_ns": pending,
                      "pending_busy_ns": pending_busy}),
            pa.table({"instance": have, "kernel_union_ns": kernel_union,
                      "any_union_ns": any_union}))


def _sweep(
    report: Report, intervals: str, probes: str, classes: int, groups: int
) -> np.ndarray:
    """Covered time per group and class (compute/sweep.py) for two queries of ranges.sql;
    the calls read as api_calls stores them, in the export's order."""
    sql = load_sql(NAME)
    return sweep.covered_sums(report, sql[intervals], sql[probes], classes, groups,
                              in_order=True)


def _total(table: pa.Table, column: str) -> int:
    return pc.sum(table.column(column)).as_py() or 0


def run(
    report: Report,
    range_name: str | None = None,
    tail_pct: float | None = None,
    min_instances: int | None = None,
    scope: str = "auto",
    keep_warmup: bool | None = None,
    *,
    settings: Settings | None = None,
) -> RangesResult | AnalysisResult:
    """Decompose every request/iteration and attribute the latency tail to components.

    Parameters
    ----------
    report : Report
        The opened trace.
    range_name : str, optional
        NVTX range delimiting one unit (``NAME`` or ``DOMAIN:NAME``); default: chosen
        automatically (docs/analyses/ranges.md).
    tail_pct : float, optional
        Percent of slowest instances forming the tail (at least one instance), in (0, 50]
        (default ``settings.tail_pct``).
    min_instances : int, optional
        Instances a range name needs to be chosen automatically (default
        ``settings.range_min_instances``).
    scope : {'auto', 'thread', 'process'}
        Whose CUDA calls count into an instance (see :func:`decompose`).
    keep_warmup : bool, optional
        Count the warm-up units (:func:`warmup`) in the tail figures (default
        ``settings.keep_warmup``); either way the ``instances`` table marks them.
    settings : Settings, optional
        Where the defaults come from.

    Returns
    -------
    RangesResult
        The figures of :class:`RangesResult`. ``tables``: attribution (main), instances,
        slowest, totals (``nsys stats --report nvtx_sum``). A bare :class:`AnalysisResult`
        when the trace has no unit.

    Raises
    ------
    UsageError
        A bad option value, or ``range_name`` names no closed NVTX range.
    """
    settings = settings or DEFAULTS
    tail_pct = settings.tail_pct if tail_pct is None else tail_pct
    min_instances = settings.range_min_instances if min_instances is None else min_instances
    _check(tail_pct, min_instances, scope)
    keep = settings.keep_warmup if keep_warmup is None else bool(keep_warmup)
    unit = select_unit(report, range_name, min_instances, settings=settings)
    if isinstance(unit, AnalysisResult):
        return unit
    instances, used_scope = decompose(report, unit, scope)
    warm = warmup(report, unit, instances, settings)
    # counted: the unit counts in the tail figures (and the diagnosis' classifier)
    instances = instances.append_column("warmup", pa.array(warm.flags)).append_column(
        "counted", pa.array(np.ones(len(warm.flags), dtype=bool) if keep else ~warm.flags)
    ).append_column("oneoff", pa.array(warm.oneoff))
    counted = instances.filter(instances.column("counted"))
    with registered(report, "_ranges_instances", counted):
        params = {"tail_pct": tail_pct, "limit": SLOWEST}
        stats = run_query(report, NAME, "summary", params).to_pylist()[0]
        attribution = run_query(report, NAME, "attribution", params)
        slowest = run_query(report, NAME, "slowest", params)
    untraced = _untraced(report)
    attribution = attribution.filter(
        pa.array([c not in untraced for c in attribution.column("component").to_pylist()])
    )
    drop = [f"{c}_ns" for c in untraced]
    tables = {
        "attribution": attribution,
        "instances": instances.drop_columns(drop),
        "slowest": slowest.drop_columns(drop),
    }
    if report.probe.present("nvtx_ranges"):
        tables["totals"] = run_query(report, NAME, "totals")
    result = _summarize(unit, used_scope, tail_pct, stats, attribution, tables)
    dur = instances.column("duration_ns").to_numpy(zero_copy_only=False).astype(float)
    later = warm.describe_later(dur)
    result = replace(result, n_warmup=warm.n, warmup_kept=keep, warmup_calls=warm.calls,
                     warmup_reason=warm.describe(keep) if warm.n else None,
                     n_later_oneoff=int((warm.oneoff & ~warm.flags).sum()),
                     later_oneoff_calls=tuple(name for name, _ in warm.later),
                     later_oneoff_reason=later)
    findings = _findings(result, attribution)
    if later:
        findings.insert(0, later)
    if warm.n:
        findings.insert(0, result.warmup_reason)
    message = (
        f"{result.n} x {unit.name} ({unit.source}); p99/p50 "
        f"{_fmt(result.p99_over_p50)}"
        + (f"; tail grew most in {result.top_component}" if result.top_component else "")
    )
    return replace(result, message=message, findings=tuple(findings))


class Warmup(NamedTuple):
    """The warm-up units of a unit (see :func:`warmup`), and the one-off calls the units
    after it hold."""

    flags: np.ndarray  #: per row of the instances table: a warm-up unit
    calls: tuple[str, ...]  #: the one-off calls the warm-up units hold
    leading: int  #: warm-up units standing far off the median
    median_ns: float  #: the median duration they are judged against, ns
    leading_ns: tuple[int, ...]  #: those units' durations, ns
    oneoff: np.ndarray  #: per row: the unit holds a one-off call
    later: tuple[tuple[str, int], ...] = ()  #: one-off calls after the warm-up: (name, units)

    @property
    def n(self) -> int:
        return int(self.flags.sum())

    def describe(self, kept: bool) -> str:
        """Why the warm-up units were set apart, with their share of the units."""
        n, total = self.n, len(self.flags)
        parts = []
        if self.calls:
            parts.append("holding " + ", ".join(self.calls))
        if self.leading:
            parts.append(f"{self.leading} lasting "
                         + ", ".join(_duration(d) for d in self.leading_ns[:3])
                         + (" ..." if self.leading > 3 else "")
                         + f" against a median of {_duration(self.median_ns)}")
        text = (f"{n} warm-up unit{'s' if n != 1 else ''} of {total}, the leading stretch "
                f"before the first steady unit ({'; '.join(parts)}): "
                + ("kept in the tail figures (--keep-warmup)" if kept
                   else "left out of the tail figures (--keep-warmup keeps them)"))
        if n > WARMUP_MANY * total:
            text += (f"; {n / total:.0%} of the units is more than a warm-up usually takes: "
                     "the run may not reach a steady state")
        return text

    def describe_later(self, dur: np.ndarray) -> str | None:
        """The one-off calls of units after the warm-up: counted as the run's own work, with
        those units' median latency against the others'."""
        if not self.later:
            return None
        later = self.oneoff & ~self.flags
        k, rest = int(later.sum()), int((~self.oneoff & ~self.flags).sum())
        names = ", ".join(f"{name} in {units}" for name, units in self.later[:3])
        text = (f"one-off calls after the warm-up in {k} of {len(self.flags)} units "
                f"({k / len(self.flags):.0%}: {names}): counted as the run's own work (an "
                "allocator or module cache that grows as the run goes), not set apart")
        if k and rest:
            text += (f"; they take a median {_duration(float(np.median(dur[later])))} against "
                     f"{_duration(float(np.median(dur[~self.oneoff & ~self.flags])))} for the "
                     "others")
        return text


#: a warm-up holding more than this share of the units is worth a line of its own
WARMUP_MANY = 0.05


def warmup(report: Report, unit: Unit, instances: pa.Table,
           settings: Settings = DEFAULTS) -> Warmup:
    """The warm-up units: the leading stretch of the run, from its first unit up to the
    first steady one.

    A unit of the leading stretch holds a one-off call, or lasts more than
    ``settings.warmup_ratio`` times the median; the stretch ends at the first unit that
    does neither. A one-off call is a call named by :data:`WARMUP_CALLS` (module loading,
    context and handle creation, JIT compilation, allocation) that fewer than half of the
    units hold (a call every unit makes is the work itself); ranges.sql ``units_warmup``
    finds the calls inside each unit. Units after the stretch are never warm-up, whatever
    they hold: one-off calls mid-run (an allocator cache that grows with request size, a
    module loaded late) are evidence about those units (``Warmup.later``), not a reason to
    drop them from the figures.

    Parameters
    ----------
    report : Report
        The opened trace.
    unit : Unit
        The unit (its instances: the ``units_*`` columns).
    instances : pyarrow.Table
        The decomposed instances (``instance``, ``start_ns``, ``duration_ns``).
    settings : Settings
        ``warmup_ratio``.

    Returns
    -------
    Warmup
    """
    ids = instances.column("instance").to_numpy(zero_copy_only=False).astype(np.int64)
    dur = instances.column("duration_ns").to_numpy(zero_copy_only=False).astype(float)
    start = instances.column("start_ns").to_numpy(zero_copy_only=False).astype(float)
    flags = np.zeros(len(ids), dtype=bool)
    if len(ids) < 2:
        return Warmup(flags, (), 0, float(dur[0]) if len(dur) else 0.0, (), flags.copy())
    with registered(report, "_ranges_units", unit.instances):
        held = run_query(report, NAME, "units_warmup", {"pattern": WARMUP_CALLS}).to_pylist()
    holders: dict[str, set[int]] = {}
    for r in held:
        holders.setdefault(r["name"], set()).add(int(r["instance"]))
    oneoff_calls = {name: ins for name, ins in holders.items() if 2 * len(ins) < len(ids)}
    oneoff_ids = set().union(*oneoff_calls.values()) if oneoff_calls else set()
    oneoff = np.isin(ids, np.fromiter(oneoff_ids, dtype=np.int64, count=len(oneoff_ids)))
    median = float(np.nanmedian(dur))
    slow = dur > settings.warmup_ratio * median
    order = np.argsort(np.nan_to_num(start, nan=np.inf), kind="stable")
    for i in order:
        if not (oneoff[i] or slow[i]):
            break
        flags[i] = True
    warm_ids = set(ids[flags].tolist())
    calls = tuple(sorted(name for name, ins in oneoff_calls.items() if ins & warm_ids))
    later = tuple(sorted(((name, len(ins - warm_ids)) for name, ins in oneoff_calls.items()
                          if ins - warm_ids), key=lambda x: (-x[1], x[0])))
    leading = flags & slow
    return Warmup(flags, calls, int(leading.sum()), median,
                  tuple(int(dur[i]) for i in order if leading[i]), oneoff, later)


def _untraced(report: Report) -> list[str]:
    """Components the capture could not measure: left out rather than shown as zeros."""
    pr = report.probe
    out = [] if pr.present("api_calls") else list(CPU_COMPONENTS)
    if not any(pr.present(v) for v in ("kernels", "memcpys", "memsets", "cuda_graphs")):
        out += GPU_COMPONENTS
    return out


def _summarize(
    unit: Unit, scope: str, tail_pct: float, stats: dict, attribution: pa.Table,
    tables: dict[str, pa.Table],
) -> RangesResult:
    rows = attribution.to_pylist()
    parts = sorted((r for r in rows if r["family"] != "total"), key=lambda r: -(r["delta_ns"] or 0))

    def top(family: str) -> Component | None:
        return next((Component(r["component"]) for r in parts if r["family"] == family), None)

    top_cpu, top_gpu = top("cpu"), top("gpu")
    return RangesResult(
        status=OK, tables=tables, main="attribution",
        unit=unit.name, unit_source=unit.source, unit_runner_up=unit.runner_up,
        unit_reason=unit.reason, scope=scope,
        **{k: stats[k] for k in ("n", "p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns",
                                 "mean_ns", "p99_over_p50", "n_attributed")},
        tail_pct=tail_pct, tail_n=stats["tail_n"], median_band_n=stats["median_band_n"],
        # the GPU side names the work that grew; an idler GPU means the host side did
        top_component=(top_gpu if top_gpu not in (None, Component.GPU_IDLE)
                       else top_cpu or top_gpu),
        top_cpu_component=top_cpu,
        top_gpu_component=top_gpu,
        attribution=tuple(
            ComponentGrowth(Component(r["component"]), r["tail_mean_ns"], r["median_mean_ns"],
                            r["delta_ns"], r["share_of_growth"])
            for r in parts),
    )


def _findings(r: RangesResult, attribution: pa.Table) -> list[str]:
    total = next((row for row in attribution.to_pylist() if row["family"] == "total"), None)
    findings = []
    if total and total["delta_ns"]:
        sides = []
        for family in ("cpu", "gpu"):
            grew = [
                f"{g.component.value} {_fmt(100 * g.share_of_growth)}%"
                for g in r.attribution
                if g.component.side == family and (g.share_of_growth or 0) >= 0.2
            ]
            if grew:
                sides.append(f"{family.upper()} side: {', '.join(grew)}")
        findings.append(
            f"the slowest {r.tail_n} {r.unit} instances take "
            f"{_duration(total['delta_ns'])} longer than the median band"
            + (f" ({'; '.join(sides)} of each side's growth)" if sides else "")
        )
        findings.extend(r.offset_notes())
        if r.top_component is not None:
            findings.append(f"tail grew most in {r.top_component}: {r.top_component.meaning}")
    if r.n_attributed < r.n:
        findings.append(
            f"{r.n - r.n_attributed} of {r.n} instances lie outside the span "
            "with CUDA trace data (CUDA events lost, or tracing stopped early): they count in "
            "the percentiles, not in the attribution"
        )
    if r.n < 100:
        findings.append(f"only {r.n} instances: p99 and the tail rest on few samples")
    return findings


def _duration(ns: float) -> str:
    return f"{ns / 1e6:.3g} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.3g} us"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


#: the instances table, and the calls of each probe of the unit choice, by the SQL method
#: or the pass, as the engine chooses for the rows they read
INSTANCES = register(NAME, "instances", method=method, accelerated=accelerated,
                     rows=rows_of("kernels", "api_calls"))
PROBE_CALLS = register(NAME, "unit_probe_calls", method=_probe_calls_method,
                       accelerated=_probe_calls_accelerated, rows=rows_of("api_calls"))
