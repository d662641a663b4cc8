"""Capture completeness and the machine: what the capture lost or lacks, before judging it.

A diagnosis is only as good as the capture it reads. This analysis names what undermines
one: kernel launch calls whose kernels were never recorded (CUDA activity lost or not
flushed), kernel records without their launch call, the warnings nsys itself wrote into
the export about events it may have dropped (``DIAGNOSTIC_EVENT``; a generic "might not
all have been collected" only where nsys's own count of the kind disagrees with the
export's rows), NVTX ranges the end of the capture cut open, and a capture of NVTX alone
(no CUDA trace: the latency of the units can be measured, their cause not attributed). It
also states the machine: each GPU with the host link its copies are judged against and
where that figure comes from (the platform table of :mod:`nsysdiag.links`, an nvbandwidth
baseline, or none for integrated and unknown GPUs), the driver and CUDA versions the export
records, and how many blocking host waits (synchronization points) the threads made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..engine.steps import temp_views
from ..formatting import cuda_version, driver_version
from ..links import parse_nvbandwidth, resolve_links
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records, run_query
from .ranges import BLOCKING_WAITS

if TYPE_CHECKING:
    import pyarrow as pa

    from ..engine.protocols import ReportLike as Report

NAME = "capture"


#: what nsys writes into DIAGNOSTIC_EVENT when events may be missing from the export
#: ("Not all CUDA events might have been collected", lost or dropped events, full buffers)
DROPPED = re.compile(
    r"not all .* (might have been|were|have been) collected|\b(lost|dropped|discarded)\b"
    r"|buffer (overflow|is full|was full)",
    re.IGNORECASE,
)

_TRACE_CUDA = "nsys profile --trace=cuda,nvtx"


@dataclass(frozen=True)
class GpuLink:
    """One row of the ``gpus`` table: a GPU and the host link assumed for it."""

    device_id: int | None  #: GPU
    name: str | None  #: product name
    link_gbps: float | None  #: host-to-device link bandwidth assumed, GB/s (None: no figure)
    link_source: str  #: trace, baseline, default (platform table), integrated, not_cuda, unknown
    link_note: str  #: why, in words


@dataclass(frozen=True)
class ProcessLaunches:
    """One row of the ``launches`` table: a process's launch calls and kernel records."""

    global_pid: int | None  #: nsys process key
    pid: int | None  #: operating-system process id
    launch_calls: int  #: successful kernel launch calls
    kernels: int  #: kernel records outside CUDA graphs
    launches_without_kernel: int  #: launch calls whose kernel was not recorded
    kernels_without_launch: int  #: kernels whose launch call was not recorded


@dataclass(frozen=True, kw_only=True)
class CaptureResult(AnalysisResult):
    """What the capture lost or lacks, and the machine it ran on.

    Tables: ``launches`` (main, per process), ``gpus`` (the link assumed per GPU),
    ``open_ranges`` (NVTX ranges left open, by name) and ``notes`` (nsys's own warnings
    about events it may have dropped).
    """

    analysis: str = field(default="capture", init=False)
    launch_calls: int = figure("successful kernel launch calls", 0)
    kernels: int = figure("kernel records outside CUDA graphs", 0)
    launches_without_kernel: int = figure("launch calls whose kernel was not recorded", 0)
    kernels_without_launch: int = figure("kernel records whose launch call was not recorded", 0)
    missing_kernels_pct: float | None = figure(
        "launch calls without a kernel record, share of all launch calls, %")
    orphan_kernels_pct: float | None = figure(
        "kernel records without a launch call, share of all kernel records, %")
    dropped_warnings: int = figure("nsys's warnings that events may have been dropped", 0)
    open_ranges: int = figure("NVTX ranges the capture left open", 0)
    blocking_waits: int = figure("blocking host waits: synchronizations, synchronous copies "
                                 "and memsets (ranges.BLOCKING_WAITS)", 0)
    nvtx_only: bool = figure("NVTX ranges captured without any CUDA trace", False)
    incomplete: bool = figure("kernel records or launch calls are missing at or above "
                              "incomplete_pct, or nsys warns it dropped events (other than "
                              "OS runtime calls only)", False)
    driver_version: str | None = figure("NVIDIA driver version the export records")
    cuda_version: str | None = figure("CUDA version of the driver the export records")
    gpu_count: int = figure("GPUs the export lists", 0)

    def launches(self) -> list[ProcessLaunches]:
        """The ``launches`` table as records (empty without it)."""
        table = self.tables.get("launches")
        return records(table, ProcessLaunches) if table is not None else []

    def gpus(self) -> list[GpuLink]:
        """The ``gpus`` table as records (empty without it)."""
        table = self.tables.get("gpus")
        return records(table, GpuLink) if table is not None else []


RESULT = CaptureResult


def run(report: Report, *, baseline: str | None = None,
        settings: Settings | None = None) -> CaptureResult | AnalysisResult:
    """What the capture lost or lacks, and the machine it ran on.

    Parameters
    ----------
    report : Report
        An opened export.
    baseline : str, optional
        nvbandwidth ``-j`` JSON output: the link figures of the GPUs it measured.
    settings : Settings, optional
        ``incomplete_pct``.

    Returns
    -------
    CaptureResult
        figures as documented on :class:`CaptureResult`; tables ``launches``, ``gpus``,
        ``open_ranges``, ``notes``.

    Notes
    -----
    A launch call and its kernel share a correlation id within a process. The join runs
    only for a process whose launch-call and kernel counts differ; where they are equal,
    every call is taken to have its kernel. Launch calls that returned an error launch
    nothing and are not counted. Kernels run as CUDA graph nodes are launched by a graph
    launch and are left out of both counts.
    """
    import pyarrow as pa

    settings = settings or DEFAULTS
    probe = report.probe
    has_calls, has_kernels = probe.present("api_calls"), probe.present("kernels")
    has_nvtx = probe.present("nvtx_ranges")
    if not (has_calls or has_kernels or has_nvtx or probe.present("devices")):
        missing = not_captured(NAME, report, "api_calls")
        return missing if missing is not None else AnalysisResult(NAME, "empty", "nothing")
    params = {"blocking": BLOCKING_WAITS}
    if has_calls and has_kernels:
        launches = _launches(report)
    elif has_calls:
        launches = run_query(report, NAME, "launches_no_kernels")
    elif has_kernels:
        launches = run_query(report, NAME, "launches_no_calls")
    else:
        launches = pa.table({c: pa.array([], pa.int64()) for c in (
            "global_pid", "pid", "launch_calls", "kernels", "launches_without_kernel",
            "kernels_without_launch")})
    rows = launches.to_pylist()
    calls = sum(r["launch_calls"] for r in rows)
    kernels = sum(r["kernels"] for r in rows)
    lost = sum(r["launches_without_kernel"] for r in rows)
    orphans = sum(r["kernels_without_launch"] for r in rows)
    blocking = (run_query(report, NAME, "blocking", params).to_pylist()[0]["blocking_waits"]
                if has_calls else 0)
    open_ranges = run_query(report, NAME, "open_ranges") if has_nvtx else pa.table(
        {"name": pa.array([], pa.string()), "n": pa.array([], pa.int64())})
    rows_by_kind = {kind: sum(probe[v].source_rows or 0 for v in views if probe.present(v))
                    for kind, views in COUNTED_ROWS.items()}
    notes = _dropped(report.diagnostics(), rows_by_kind)
    env = report.system_env()
    measured = parse_nvbandwidth(baseline) if baseline else None
    devices = (run_query(report, NAME, "devices").to_pylist()
               if probe.present("devices") else [])
    gpus = _gpus(devices, measured)
    missing_pct = 100.0 * lost / calls if calls else None
    orphan_pct = 100.0 * orphans / kernels if kernels else None
    incomplete = bool(
        (missing_pct or 0.0) >= settings.incomplete_pct and lost
        or (orphan_pct or 0.0) >= settings.incomplete_pct and orphans
        or any(k not in AUXILIARY_KINDS for k in notes.column("kind").to_pylist())
    )
    result = CaptureResult(
        status=OK,
        tables={"launches": launches, "gpus": gpus, "open_ranges": open_ranges, "notes": notes},
        main="launches",
        launch_calls=calls, kernels=kernels, launches_without_kernel=lost,
        kernels_without_launch=orphans, missing_kernels_pct=missing_pct,
        orphan_kernels_pct=orphan_pct, dropped_warnings=int(sum(notes.column("n").to_pylist())),
        open_ranges=int(sum(open_ranges.column("n").to_pylist())), blocking_waits=int(blocking),
        nvtx_only=has_nvtx and not has_calls and not has_kernels, incomplete=incomplete,
        driver_version=driver_version(env.get("NvDriverVersion")),
        cuda_version=cuda_version(env.get("CudaDriverVersion")), gpu_count=gpus.num_rows,
    )
    findings = tuple(_findings(result, open_ranges.to_pylist(), notes.to_pylist()))
    return replace(result, findings=findings, message=_message(result))


def _launches(report: Report) -> pa.Table:
    """The ``launches`` table: launch calls outside stream capture windows, where the
    export has any, else every launch call."""
    sql = load_sql(NAME)
    windows = run_query(report, NAME, "capturing").num_rows > 0
    launched = sql["launched_outside_capture" if windows else "launched_all"]
    names = ("capturing", "launched") if windows else ("launched",)
    with temp_views(report, {"capturing": sql["capturing"], "launched": launched}, names):
        return run_query(report, NAME, "launches")


#: nsys's own count of the events of a kind it collected ("Number of NVTX events collected:
#: 180."), summed over its lines (one per process)
COLLECTED = re.compile(r"Number of (.+?) events collected:\s*(\d+)", re.IGNORECASE)
#: a generic warning that events of a kind might not all have been collected
MIGHT_MISS = re.compile(r"not all (.+?) events might have been collected", re.IGNORECASE)
#: kinds of events whose loss leaves the measured work whole: OS runtime calls are
#: auxiliary evidence (the time a thread was blocked), not work the figures count, so a
#: warning that only they might be missing is a note, not an incomplete capture
AUXILIARY_KINDS = frozenset({"os runtime libraries"})
#: the views whose source rows nsys's count of a kind covers (CUDA: API calls and GPU
#: activities)
COUNTED_ROWS = {"nvtx": ("nvtx_ranges",), "cuda": ("api_calls", "kernels", "memcpys", "memsets"),
                "os runtime libraries": ("os_runtime",)}


def _dropped(diagnostics: list[tuple[int, str]], rows_by_kind: dict[str, int] | None = None):
    """nsys's warnings about events it may have dropped, with how often each was written.

    A generic "Not all <kind> events might have been collected" is left out when nsys's own
    count of that kind's events ("Number of <kind> events collected: N") equals the rows
    the export holds (``rows_by_kind``, by lower-case kind): nothing was lost."""
    import pyarrow as pa

    rows_by_kind = rows_by_kind or {}
    collected: dict[str, int] = {}
    for _, text in diagnostics:
        m = COLLECTED.search(text)
        if m:
            kind = m.group(1).strip().lower()
            collected[kind] = collected.get(kind, 0) + int(m.group(2))
    counts: dict[str, int] = {}
    kinds: dict[str, str | None] = {}
    for severity, text in diagnostics:
        if severity < 2 or not DROPPED.search(text):
            continue
        might = MIGHT_MISS.search(text)
        kind = might.group(1).strip().lower() if might else None
        if kind in collected and kind in rows_by_kind \
                and collected[kind] == rows_by_kind[kind]:
            continue  # nsys counted as many events as the export holds
        counts[text] = counts.get(text, 0) + 1
        kinds[text] = kind
    return pa.table({"text": pa.array(list(counts), pa.string()),
                     "n": pa.array(list(counts.values()), pa.int64()),
                     "kind": pa.array([kinds[t] for t in counts], pa.string())})


def _gpus(devices: list[dict], measured):
    """The link assumed per GPU (host-to-device direction: the one copies are judged on)."""
    import pyarrow as pa

    names = {d["device_id"]: d["name"] for d in devices}
    rows = [
        {"device_id": lk.device_id, "name": names.get(lk.device_id), "link_gbps": lk.gbps,
         "link_source": lk.source, "link_note": lk.note}
        for lk in resolve_links(devices, measured) if lk.direction == "HtoD"
    ]
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("device_id", pa.int64()), ("name", pa.string()), ("link_gbps", pa.float64()),
        ("link_source", pa.string()), ("link_note", pa.string())]))


def _findings(r: CaptureResult, open_ranges: list[dict], notes: list[dict]) -> list[str]:
    out = []
    if r.nvtx_only:
        out.append("NVTX ranges only, no CUDA trace: unit latency can be measured but not "
                   f"attributed to CPU, GPU or transfers (capture with {_TRACE_CUDA})")
    if r.launches_without_kernel:
        out.append(f"{r.launches_without_kernel} of {r.launch_calls} kernel launch calls have "
                   "no kernel record: GPU activity was lost or not flushed (end the capture "
                   "after the work, e.g. cudaDeviceSynchronize before exit, or capture with "
                   f"{_TRACE_CUDA})")
    if r.kernels_without_launch:
        out.append(f"{r.kernels_without_launch} of {r.kernels} kernel records have no launch "
                   "call: the CUDA API trace is incomplete (launch latency and CPU-side "
                   "attribution miss them)")
    for n in notes:
        out.append(f"nsys warns: {n['text']}" + (f" ({n['n']} times)" if n["n"] > 1 else ""))
    if open_ranges:
        top = ", ".join(f"{o['name']} ({o['n']})" for o in open_ranges[:3])
        out.append(f"{r.open_ranges} NVTX ranges never closed (the capture ended inside "
                   f"them): {top}")
    return out


def _message(r: CaptureResult) -> str:
    parts = [f"{r.launch_calls} launch calls, {r.kernels} kernel records",
             f"{r.blocking_waits} blocking host waits"]
    if r.incomplete:
        parts.append("incomplete")
    if r.nvtx_only:
        parts.append("NVTX only")
    return "; ".join(parts)
