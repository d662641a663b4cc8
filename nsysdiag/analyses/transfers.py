"""Memory transfers: bandwidth per copy kind, pinned vs pageable, the host link, contention.

Check E1 of the method: is the PCIe transfer layer the bottleneck? Per-copy bandwidth
(bytes / ns = GB/s) grouped by copy kind and memory kinds, NVIDIA's memcpy time summary,
achieved host<->device bandwidth against the link (recorded in the trace, measured with
nvbandwidth and given with --baseline, or a default by GPU), and how much copy time overlapped
other copies of the same direction (a shared host link).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..formatting import fmt_ns
from ..links import Link, parse_nvbandwidth, resolve_links
from ..settings import DEFAULTS, Settings
from .base import (
    OK,
    AnalysisResult,
    figure,
    nested,
    not_captured,
    records,
    run_query,
    stepped,
)

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "transfers"

DIRECTIONS = ("htod", "dtoh")


@dataclass(frozen=True)
class DirectionFigures:
    """One direction's figures (host to device or back) of the device that moved the most
    bytes in that direction: ``TransfersResult.htod`` and ``.dtoh``. In the JSON summary
    they are flat keys: ``htod_median_gbps``, ``link_htod_gbps``, ..."""

    link_gbps: float | None = figure("the link's bandwidth, GB/s", key="link_{group}_gbps")
    copies: int = figure("copies", 0)
    bytes: int = figure("bytes", 0)
    median_gbps: float | None = figure("median bandwidth of a copy, GB/s")
    p90_gbps: float | None = figure("P90 copy bandwidth (large copies when any), GB/s")
    aggregate_gbps: float | None = figure("bytes over their busy time, GB/s")
    pinned_median_gbps: float | None = figure("median bandwidth of pinned copies, GB/s")
    pageable_median_gbps: float | None = figure("median bandwidth of pageable copies, GB/s")
    pageable_vs_pinned_pct: float | None = figure("pageable median over pinned median, %")
    achieved_pct_of_link: float | None = figure("P90 bandwidth over the link, %")
    expected_pct: float | None = figure(
        "the copies' expected time (latency + bytes / bandwidth by memory kind) over their "
        "time: 100 is as fast as was possible, %")
    slow_copies: int | None = figure("copies below low_link_pct of their expected speed")
    aggregate_pct_of_link: float | None = figure("aggregate bandwidth over the link, %")
    contention_share_pct: float | None = figure(
        "share of the copy time overlapping another copy of the same direction, %")
    overlapped_median_gbps: float | None = figure(
        "median bandwidth of the copies while overlapped, GB/s")
    alone_median_gbps: float | None = figure("median bandwidth of the copies alone, GB/s")


@dataclass(frozen=True)
class CopyKind:
    """One row of the ``by_kind`` table: the copies (or memsets) of one kind."""

    op: str  #: memcpy or memset
    copy_kind: str | None  #: HtoD, DtoH, DtoD, ...
    src_kind: str | None  #: source memory kind (pageable, pinned, device, ...)
    dst_kind: str | None  #: destination memory kind
    is_pageable: bool | None  #: host side in pageable memory
    is_uvm: bool | None  #: unified-memory migration
    copies: int  #: operations
    total_bytes: int | None  #: bytes
    total_time_ns: int | None  #: GPU time, ns
    zero_duration: int  #: operations of zero duration (no bandwidth)
    mean_gbps: float | None  #: mean bandwidth, GB/s
    median_gbps: float | None  #: median bandwidth, GB/s
    p10_gbps: float | None  #: P10 bandwidth, GB/s
    p90_gbps: float | None  #: P90 bandwidth, GB/s
    aggregate_gbps: float | None  #: bytes over busy time, GB/s


@dataclass(frozen=True)
class HostDirection:
    """One row of the ``host`` table: one device's host copies in one direction."""

    device_id: int | None  #: GPU
    direction: str  #: HtoD or DtoH
    copies: int  #: copies
    total_bytes: int | None  #: bytes
    median_bytes: float | None  #: median copy size, bytes
    median_gbps: float | None  #: median bandwidth, GB/s
    p90_gbps: float | None  #: P90 bandwidth, GB/s
    aggregate_gbps: float | None  #: bytes over busy time, GB/s
    pageable_copies: int  #: copies from or to pageable memory
    pageable_vs_pinned_pct: float | None  #: pageable median over pinned median, %
    link_gbps: float | None  #: the link's bandwidth, GB/s
    link_source: str | None  #: trace, nvbandwidth or default
    link_note: str | None  #: where the link figure comes from, in words
    achieved_basis: str  #: p90_large (copies of at least large_copy_bytes) or p90_all
    achieved_pct_of_link: float | None  #: the P90 bandwidth over the link, %
    aggregate_pct_of_link: float | None  #: the aggregate bandwidth over the link, %
    expected_pct: float | None  #: expected time over actual time (the model), %
    pinned_expected_pct: float | None  #: the same with every copy modelled as pinned, %
    slow_copies: int  #: copies below low_link_pct of their expected speed
    suspect_copies: int  #: copies faster than physically possible (left out)


@dataclass(frozen=True)
class PageFaults:
    """One row of the ``page_faults`` table: a process's unified-memory page faults."""

    pid: int | None  #: process id
    global_pid: int | None  #: nsys packed process key
    cpu_faults: int  #: faults on the host
    gpu_faults: int  #: faults raised by kernels (sum of numberOfPageFaults)
    gpu_fault_groups: int  #: GPU fault records
    gpu_fault_time_ns: int  #: union of the GPU fault groups per GPU, summed, ns
    devices: int  #: GPUs that faulted
    first_ns: int | None  #: first fault, ns
    last_ns: int | None  #: last fault (end of its handling on a GPU), ns

    def line(self) -> str:
        """The process's faults in words."""
        gpu = (f"{self.gpu_faults} GPU faults in {self.gpu_fault_groups} groups "
               f"({fmt_ns(self.gpu_fault_time_ns)} of GPU time resolving them)")
        return f"pid {self.pid}: {self.cpu_faults} CPU faults, {gpu}"


@dataclass(frozen=True)
class LinkFigure:
    """One row of the ``links`` table: a device's link bandwidth in one direction."""

    device_id: int | None  #: GPU
    direction: str  #: HtoD or DtoH
    link_gbps: float | None  #: GB/s
    link_source: str | None  #: trace, nvbandwidth or default
    link_note: str | None  #: where the figure comes from, in words


@dataclass(frozen=True, kw_only=True)
class TransfersResult(AnalysisResult):
    """Transfers: copy bandwidth against the host link, pageable memory and same-direction
    contention (check E1). The figures of each direction, :attr:`htod` and :attr:`dtoh`
    (:class:`DirectionFigures`; flat ``htod_``/``dtoh_`` keys in the JSON summary), are
    those of the device that moved the most bytes in that direction.

    Tables: ``by_kind`` (main), ``mem_time``, ``host``, ``contention``, ``copies`` (one row
    per memcpy/memset), ``links`` and ``page_faults`` (unified-memory page faults per
    process).
    """

    analysis: str = field(default="transfers", init=False)
    copies: int = figure("memcpys", 0)
    memsets: int = figure("memsets", 0)
    total_bytes: int = figure("bytes copied and set", 0)
    total_time_ns: int = figure("GPU time of copies and memsets, ns", 0)
    zero_duration_copies: int = figure("copies of zero duration (left out of bandwidths)", 0)
    suspect_copies: int = figure("copies and memsets faster than physically possible (the "
                                 "link, the GPU's memory): suspect data, left out of every "
                                 "bandwidth and contention figure", 0)
    faster_than_link: int = figure("host copies faster than their link (suspect)", 0)
    faster_than_memory: int = figure("memsets and device copies faster than the GPU's "
                                     "memory bandwidth (suspect)", 0)
    host_copies: int = figure("copies between host and device", 0)
    uvm_copies: int = figure("unified-memory migrations (kept apart)", 0)
    uvm_bytes: int = figure("bytes of the unified-memory migrations", 0)
    uvm_time_ns: int = figure("GPU time of the unified-memory migrations, ns", 0)
    uvm_htod_bytes: int = figure("bytes migrated host to device on demand (UVM_HtoD)", 0)
    uvm_dtoh_bytes: int = figure("bytes migrated device to host on demand (UVM_DtoH)", 0)
    managed_copies: int = figure("explicit copies from or to managed memory", 0)
    um_faults_recorded: bool = figure("the export holds unified-memory page-fault tables "
                                      "(captured with --cuda-um-cpu-page-faults / "
                                      "--cuda-um-gpu-page-faults)", False)
    um_cpu_faults: int = figure("unified-memory page faults on the host (CPU accesses to "
                                "pages resident on a GPU)", 0)
    um_gpu_faults: int = figure("unified-memory page faults raised by kernels", 0)
    um_gpu_fault_groups: int = figure("GPU fault records (the faults of one page handled "
                                      "together)", 0)
    um_gpu_fault_time_ns: int = figure("GPU time resolving page faults: the union of the "
                                       "fault groups per GPU and process, summed, ns", 0)
    pageable_copies: int = figure("copies from or to pageable host memory", 0)
    pageable_bytes: int = figure("bytes of the pageable copies", 0)
    pageable_time_pct: float | None = figure("pageable copies' share of host copy time, %")
    contention_share_pct: float | None = figure(
        "share of copy time overlapping another copy of the same direction, %")
    link_source: str | None = figure("where the link bandwidth comes from: trace, "
                                     "nvbandwidth, default")
    htod: DirectionFigures = nested("host to device", DirectionFigures)
    dtoh: DirectionFigures = nested("device to host", DirectionFigures)

    def host(self) -> list[HostDirection]:
        """The ``host`` table as records (empty without it)."""
        table = self.tables.get("host")
        return records(table, HostDirection) if table is not None else []

    def links(self) -> list[LinkFigure]:
        """The ``links`` table as records (empty without it)."""
        table = self.tables.get("links")
        return records(table, LinkFigure) if table is not None else []

    def page_faults(self) -> list[PageFaults]:
        """The ``page_faults`` table as records (empty without it)."""
        table = self.tables.get("page_faults")
        return records(table, PageFaults) if table is not None else []

    @property
    def um_faults(self) -> int:
        """Unified-memory page faults, host and GPU."""
        return self.um_cpu_faults + self.um_gpu_faults

    def by_kind(self) -> list[CopyKind]:
        """The ``by_kind`` table as records (empty without it)."""
        table = self.tables.get("by_kind")
        return records(table, CopyKind) if table is not None else []

    def direction(self, d: str) -> DirectionFigures:
        """The figures of direction ``d`` (``htod`` or ``dtoh``): :attr:`htod` or
        :attr:`dtoh`, for a loop over :data:`DIRECTIONS`."""
        if d not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {d!r}")
        return self.htod if d == "htod" else self.dtoh

RESULT = TransfersResult


def run(
    report: Report, *, baseline: str | None = None, large_bytes: int | None = None,
    settings: Settings | None = None,
) -> TransfersResult | AnalysisResult:
    """Bandwidth of every memcpy and memset, against the host link, with contention.

    Parameters
    ----------
    report : Report
        An opened export.
    baseline : str, optional
        Path of nvbandwidth ``-j`` output; its host<->device figures become the link
        (unless the trace records the PCIe link itself).
    large_bytes : int, optional
        Copies at least this large give the p90 bandwidth compared with the link; when
        there are none, all copies of the direction do (``achieved_basis`` says which).
        Default: ``settings.large_copy_bytes`` (1 MiB).
    settings : Settings, optional
        ``large_copy_bytes``; the findings' ``low_link_pct``, ``contention_pct`` and
        ``min_finding_copies``.

    Returns
    -------
    TransfersResult
        figures: ``copies``, ``memsets``, ``total_bytes``, ``total_time_ns``,
        ``zero_duration_copies``, ``host_copies``, ``uvm_copies``, ``uvm_bytes``,
        ``uvm_time_ns``, ``uvm_htod_bytes``, ``uvm_dtoh_bytes``, ``managed_copies``,
        ``um_faults_recorded``, ``um_cpu_faults``, ``um_gpu_faults``,
        ``um_gpu_fault_groups``, ``um_gpu_fault_time_ns``,
        ``pageable_copies``, ``pageable_bytes``, ``pageable_time_pct``, ``link_source``,
        ``contention_share_pct`` and per direction, ``htod`` and ``dtoh``
        (:class:`DirectionFigures`): ``link_gbps``, ``copies``, ``bytes``, ``median_gbps``,
        ``p90_gbps``, ``aggregate_gbps``, ``pinned_median_gbps``, ``pageable_median_gbps``,
        ``pageable_vs_pinned_pct``, ``achieved_pct_of_link``, ``expected_pct``,
        ``slow_copies``, ``aggregate_pct_of_link``, ``contention_share_pct``,
        ``overlapped_median_gbps``, ``alone_median_gbps`` (JSON keys ``htod_copies``,
        ``link_htod_gbps``, ...). Per-direction figures are those of the device that moved
        the most bytes in that direction. Tables: ``by_kind`` (main), ``mem_time``,
        ``host``, ``contention``, ``links``, ``copies`` (one row per memcpy/memset),
        ``page_faults`` (per process).

    Raises
    ------
    UsageError
        When ``baseline`` is not readable nvbandwidth JSON.
    """
    settings = settings or DEFAULTS
    if large_bytes is None:
        large_bytes = settings.large_copy_bytes
    measured = parse_nvbandwidth(baseline) if baseline else None
    # page faults without a copy (pages mapped over the link, or migrations the capture
    # did not record) are still unified-memory traffic
    if not any(report.probe.present(v) for v in ("memcpys", "memsets", "um_page_faults")):
        return not_captured(NAME, report, "memcpys")  # type: ignore[return-value]
    links = resolve_links(run_query(report, NAME, "devices").to_pylist(), measured)
    params = {
        "large_bytes": int(large_bytes),
        "link_device_ids": [lk.device_id for lk in links],
        "link_directions": [lk.direction for lk in links],
        "link_gbps": [lk.gbps for lk in links],
        "link_sources": [lk.source for lk in links],
        "link_notes": [lk.note for lk in links],
        "copy_latency_ns": settings.copy_latency_ns,
        "pageable_latency_ns": settings.pageable_copy_latency_ns,
        "managed_latency_ns": settings.managed_copy_latency_ns,
        "pageable_link_pct": settings.pageable_link_pct,
        "managed_link_pct": settings.managed_link_pct,
        "margin_pct": settings.plausible_margin_pct,
        "low_pct": settings.low_link_pct,
    }
    with stepped(report, NAME, params) as sql:
        tables = {q: sql.query(q) for q in ("by_kind", "mem_time", "host", "contention",
                                            "copies")}
        (totals,) = sql.query("totals").to_pylist()
    tables["links"] = _links_table(links)
    summary = _summary(totals, tables["host"].to_pylist(), tables["contention"].to_pylist(), links)
    tables["page_faults"] = run_query(report, NAME, "page_faults")
    summary.update(_fault_figures(report, tables["page_faults"].to_pylist()))
    result = TransfersResult(status=OK, tables=tables, main="by_kind", **summary)
    return replace(result, message=_message(result), findings=tuple(_findings(
        result, tables["host"].to_pylist(), tables["contention"].to_pylist(), settings)))


def _links_table(links: list[Link]):
    import pyarrow as pa

    return pa.Table.from_pylist(
        [
            {
                "device_id": lk.device_id,
                "direction": lk.direction,
                "link_gbps": lk.gbps,
                "link_source": lk.source,
                "link_note": lk.note,
            }
            for lk in links
        ],
        schema=pa.schema(
            [
                ("device_id", pa.int64()),
                ("direction", pa.string()),
                ("link_gbps", pa.float64()),
                ("link_source", pa.string()),
                ("link_note", pa.string()),
            ]
        ),
    )


def _busiest(rows: list[dict], direction: str) -> dict | None:
    """The host-table row of the device that moved the most bytes in ``direction``."""
    rows = [r for r in rows if r["direction"] == direction]
    if not rows:
        return None
    return max(rows, key=lambda r: (r["total_bytes"] or 0, -(r["device_id"] or 0)))


def _summary(
    totals: dict, host: list[dict], contention: list[dict], links: list[Link]
) -> dict[str, Any]:
    summary: dict[str, Any] = dict(totals)
    by_dir = {r["direction"]: r for r in contention}
    summary["contention_share_pct"] = (by_dir.get("all") or {}).get("contention_share_pct")
    chosen = {d: _busiest(host, d) for d in ("HtoD", "DtoH")}
    link_device = next((r["device_id"] for r in chosen.values() if r), None)
    dev_links = {
        lk.direction: lk for lk in links if link_device is None or lk.device_id == link_device
    }
    first = dev_links.get("HtoD") or next(iter(dev_links.values()), None)
    summary["link_source"] = first.source if first else None
    for d in ("HtoD", "DtoH"):
        lk = dev_links.get(d)
        row = chosen[d] or {}
        c = by_dir.get(d) or {}
        summary[d.lower()] = DirectionFigures(
            link_gbps=lk.gbps if lk else None,
            copies=row.get("copies", 0),
            bytes=row.get("total_bytes", 0),
            median_gbps=row.get("median_gbps"),
            p90_gbps=row.get("p90_gbps"),
            aggregate_gbps=row.get("aggregate_gbps"),
            pinned_median_gbps=row.get("pinned_median_gbps"),
            pageable_median_gbps=row.get("pageable_median_gbps"),
            pageable_vs_pinned_pct=row.get("pageable_vs_pinned_pct"),
            achieved_pct_of_link=row.get("achieved_pct_of_link"),
            expected_pct=row.get("expected_pct"),
            slow_copies=row.get("slow_copies"),
            aggregate_pct_of_link=row.get("aggregate_pct_of_link"),
            contention_share_pct=c.get("contention_share_pct"),
            overlapped_median_gbps=c.get("overlapped_median_gbps"),
            alone_median_gbps=c.get("alone_median_gbps"),
        )
    return summary


def _fault_figures(report: Report, rows: list[dict]) -> dict[str, Any]:
    """The unified-memory page-fault figures: totals of the ``page_faults`` table, and
    whether the export holds the fault tables at all (nsys writes them only when asked)."""
    return {
        "um_faults_recorded": report.probe["um_page_faults"].status != "not_captured",
        **{f"um_{k}": int(sum(r[k] for r in rows))
           for k in ("cpu_faults", "gpu_faults", "gpu_fault_groups", "gpu_fault_time_ns")},
    }


def _message(r: TransfersResult) -> str:
    text = (
        f"{r.copies} copies + {r.memsets} memsets, {r.total_bytes / 1e6:.1f} MB "
        f"in {r.total_time_ns / 1e6:.3f} ms"
    )
    for d in DIRECTIONS:
        f = r.direction(d)
        if f.copies and None not in (f.aggregate_gbps, f.aggregate_pct_of_link, f.link_gbps):
            text += (
                f"; {d[0].upper()}to{d[-1].upper()} {f.aggregate_gbps:.1f} GB/s "
                f"aggregate = {f.aggregate_pct_of_link:.0f}% of "
                f"{f.link_gbps:.1f} GB/s ({r.link_source} link)"
            )
    return text


def _findings(result: TransfersResult, host: list[dict], contention: list[dict],
              settings: Settings) -> list[str]:
    out = []
    for r in host:
        if r["copies"] < settings.min_finding_copies:
            continue
        where = f"device {r['device_id']} {r['direction']}"
        if r["pageable_copies"]:
            ratio = (
                f"{r['pageable_vs_pinned_pct']:.0f}% of pinned bandwidth"
                if r["pageable_vs_pinned_pct"] is not None
                else "pageable copies typically reach 30-50% of pinned bandwidth"
            )
            out.append(
                f"{where}: {r['pageable_copies']} of {r['copies']} copies use pageable "
                f"host memory ({ratio}); pin the buffers (cudaHostAlloc/cudaHostRegister)"
            )
        expected = r["expected_pct"]
        if expected is not None and expected < settings.low_link_pct:
            out.append(
                f"{where}: copies take {100 * 100 / max(expected, 1e-9):.0f}% of the time a "
                f"latency + size/bandwidth model allows ({r['slow_copies']} slow copies; "
                f"{r['link_gbps']:.1f} GB/s link, {r['link_source']}; median copy "
                f"{r['median_bytes'] / 1024:.0f} KiB)"
            )
    for c in contention:
        share = c["contention_share_pct"]
        if (
            c["direction"] != "all"
            and c["copies"] >= settings.min_finding_copies
            and share is not None
            and share >= settings.contention_pct
        ):
            ov, alone = c["overlapped_median_gbps"], c["alone_median_gbps"]
            cmp = (
                f"; median {ov:.1f} GB/s overlapped vs {alone:.1f} GB/s alone"
                if ov is not None and alone is not None
                else ""
            )
            out.append(
                f"{share:.0f}% of {c['direction']} copy time overlapped other "
                f"{c['direction']} copies ({c['processes']} process(es), "
                f"{c['devices']} device(s)){cmp}"
            )
    if result.uvm_copies:
        out.append(
            f"{result.uvm_copies} unified-memory migrations ({result.uvm_bytes / 1e6:.1f} MB) "
            "are kept apart from explicit copies"
        )
    if result.um_faults:
        out.append(
            f"{result.um_faults} unified-memory page faults ({result.um_cpu_faults} on the "
            f"host, {result.um_gpu_faults} raised by kernels, "
            f"{fmt_ns(result.um_gpu_fault_time_ns)} of GPU time resolving them)"
        )
    if result.suspect_copies:
        out.append(
            f"{result.suspect_copies} copies/memsets are faster than physically possible "
            f"({result.faster_than_link} beyond their link, {result.faster_than_memory} beyond "
            "the GPU's memory bandwidth): suspect data, left out of the bandwidth and "
            "contention figures"
        )
    if result.zero_duration_copies:
        out.append(
            f"{result.zero_duration_copies} copies have zero duration: no bandwidth, "
            "left out of the bandwidth figures"
        )
    return out
