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

from ..engine.steps import bind
from ..formatting import fmt_ns
from ..links import Link, parse_nvbandwidth, resolve_links
from ..settings import DEFAULTS, Settings
from .base import OK, AnalysisResult, figure, load_sql, not_captured, records, run_query

if TYPE_CHECKING:
    from ..engine.protocols import ReportLike as Report

NAME = "transfers"

DIRECTIONS = ("htod", "dtoh")


@dataclass(frozen=True)
class DirectionFigures:
    """One direction's figures (host to device or back) of the device that moved the most
    bytes in that direction (see :meth:`TransfersResult.direction`)."""

    direction: str
    link_gbps: float | None
    copies: int
    bytes: int
    median_gbps: float | None
    p90_gbps: float | None
    aggregate_gbps: float | None
    pinned_median_gbps: float | None
    pageable_median_gbps: float | None
    pageable_vs_pinned_pct: float | None
    achieved_pct_of_link: float | None
    aggregate_pct_of_link: float | None
    expected_pct: float | None
    slow_copies: int | None
    contention_share_pct: float | None
    overlapped_median_gbps: float | None
    alone_median_gbps: float | None


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
    contention (check E1). Per-direction figures (``htod_``/``dtoh_`` prefix) are those of
    the device that moved the most bytes in that direction; :meth:`direction` gives them
    as one record.

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
    link_htod_gbps: float | None = figure("host-to-device link bandwidth, GB/s")
    htod_copies: int = figure("host-to-device copies", 0)
    htod_bytes: int = figure("host-to-device bytes", 0)
    htod_median_gbps: float | None = figure("median bandwidth of a host-to-device copy, GB/s")
    htod_p90_gbps: float | None = figure("P90 host-to-device copy bandwidth (large copies "
                                         "when any), GB/s")
    htod_aggregate_gbps: float | None = figure("host-to-device bytes over their busy time, "
                                               "GB/s")
    htod_pinned_median_gbps: float | None = figure("median bandwidth of pinned host-to-device "
                                                   "copies, GB/s")
    htod_pageable_median_gbps: float | None = figure("median bandwidth of pageable "
                                                     "host-to-device copies, GB/s")
    htod_pageable_vs_pinned_pct: float | None = figure("pageable median over pinned median, %")
    htod_achieved_pct_of_link: float | None = figure("P90 bandwidth over the link, %")
    htod_expected_pct: float | None = figure(
        "host-to-device copies' expected time (latency + bytes / bandwidth by memory kind) over "
        "their time: 100 is as fast as was possible, %")
    htod_slow_copies: int | None = figure("host-to-device copies below low_link_pct of their "
                                         "expected speed")
    htod_aggregate_pct_of_link: float | None = figure("aggregate bandwidth over the link, %")
    htod_contention_share_pct: float | None = figure(
        "share of host-to-device copy time overlapping another host-to-device copy, %")
    htod_overlapped_median_gbps: float | None = figure(
        "median bandwidth of host-to-device copies while overlapped, GB/s")
    htod_alone_median_gbps: float | None = figure(
        "median bandwidth of host-to-device copies alone, GB/s")
    link_dtoh_gbps: float | None = figure("device-to-host link bandwidth, GB/s")
    dtoh_copies: int = figure("device-to-host copies", 0)
    dtoh_bytes: int = figure("device-to-host bytes", 0)
    dtoh_median_gbps: float | None = figure("median bandwidth of a device-to-host copy, GB/s")
    dtoh_p90_gbps: float | None = figure("P90 device-to-host copy bandwidth (large copies "
                                         "when any), GB/s")
    dtoh_aggregate_gbps: float | None = figure("device-to-host bytes over their busy time, "
                                               "GB/s")
    dtoh_pinned_median_gbps: float | None = figure("median bandwidth of pinned device-to-host "
                                                   "copies, GB/s")
    dtoh_pageable_median_gbps: float | None = figure("median bandwidth of pageable "
                                                     "device-to-host copies, GB/s")
    dtoh_pageable_vs_pinned_pct: float | None = figure("pageable median over pinned median, %")
    dtoh_achieved_pct_of_link: float | None = figure("P90 bandwidth over the link, %")
    dtoh_expected_pct: float | None = figure(
        "device-to-host copies' expected time (latency + bytes / bandwidth by memory kind) over "
        "their time: 100 is as fast as was possible, %")
    dtoh_slow_copies: int | None = figure("device-to-host copies below low_link_pct of their "
                                         "expected speed")
    dtoh_aggregate_pct_of_link: float | None = figure("aggregate bandwidth over the link, %")
    dtoh_contention_share_pct: float | None = figure(
        "share of device-to-host copy time overlapping another device-to-host copy, %")
    dtoh_overlapped_median_gbps: float | None = figure(
        "median bandwidth of device-to-host copies while overlapped, GB/s")
    dtoh_alone_median_gbps: float | None = figure(
        "median bandwidth of device-to-host copies alone, GB/s")

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
        """The figures of direction ``d`` (``htod`` or ``dtoh``) as one record."""
        if d not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}, got {d!r}")
        return DirectionFigures(
            direction=d, link_gbps=getattr(self, f"link_{d}_gbps"),
            **{f: getattr(self, f"{d}_{f}") for f in _PER_DIRECTION})


#: the per-direction figures (``htod_<name>``, ``dtoh_<name>``)
_PER_DIRECTION = tuple(f for f in DirectionFigures.__dataclass_fields__
                       if f not in ("direction", "link_gbps"))

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
        ``link_htod_gbps``, ``link_dtoh_gbps``, ``contention_share_pct`` and per direction
        (``htod_``/``dtoh_`` prefix): ``copies``, ``bytes``, ``median_gbps``, ``p90_gbps``,
        ``aggregate_gbps``, ``pinned_median_gbps``, ``pageable_median_gbps``,
        ``pageable_vs_pinned_pct``, ``achieved_pct_of_link``, ``aggregate_pct_of_link``,
        ``contention_share_pct``, ``overlapped_median_gbps``, ``alone_median_gbps``.
        Per-direction figures are those of the device that moved the most bytes in that
        direction. Tables: ``by_kind`` (main), ``mem_time``, ``host``, ``contention``,
        ``links``, ``copies`` (one row per memcpy/memset), ``page_faults`` (per process).

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
    ops = load_sql(NAME)["_ops"]
    report.sql(ops, _bind_params(ops, params))
    try:
        tables = {
            q: run_query(report, NAME, q, params)
            for q in ("by_kind", "mem_time", "host", "contention", "copies")
        }
        (totals,) = run_query(report, NAME, "totals").to_pylist()
    finally:
        report.sql(load_sql(NAME)["_drop"])
    tables["links"] = _links_table(links)
    summary = _summary(totals, tables["host"].to_pylist(), tables["contention"].to_pylist(), links)
    tables["page_faults"] = run_query(report, NAME, "page_faults")
    summary.update(_fault_figures(report, tables["page_faults"].to_pylist()))
    result = TransfersResult(status=OK, tables=tables, main="by_kind", **summary)
    return replace(result, message=_message(result), findings=tuple(_findings(
        result, tables["host"].to_pylist(), tables["contention"].to_pylist(), settings)))


def _bind_params(sql: str, params: dict) -> dict | None:
    return bind(sql, params)


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
        p = d.lower()
        lk = dev_links.get(d)
        summary[f"link_{p}_gbps"] = lk.gbps if lk else None
        row = chosen[d] or {}
        for key, col in (
            ("copies", "copies"),
            ("bytes", "total_bytes"),
            ("median_gbps", "median_gbps"),
            ("p90_gbps", "p90_gbps"),
            ("aggregate_gbps", "aggregate_gbps"),
            ("pinned_median_gbps", "pinned_median_gbps"),
            ("pageable_median_gbps", "pageable_median_gbps"),
            ("pageable_vs_pinned_pct", "pageable_vs_pinned_pct"),
            ("achieved_pct_of_link", "achieved_pct_of_link"),
            ("aggregate_pct_of_link", "aggregate_pct_of_link"),
            ("expected_pct", "expected_pct"),
            ("slow_copies", "slow_copies"),
        ):
            summary[f"{p}_{key}"] = row.get(col, 0 if key in ("copies", "bytes") else None)
        c = by_dir.get(d) or {}
        for key in ("contention_share_pct", "overlapped_median_gbps", "alone_median_gbps"):
            summary[f"{p}_{key}"] = c.get(key)
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
