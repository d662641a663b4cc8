"""Memory transfers: bandwidth per copy kind, pinned vs pageable, the host link, contention.

Check E1 of the method: is the PCIe transfer layer the bottleneck? Per-copy bandwidth
(bytes / ns = GB/s) grouped by copy kind and memory kinds, NVIDIA's memcpy time summary,
achieved host<->device bandwidth against the link (recorded in the trace, measured with
nvbandwidth and given with --baseline, or a default by GPU), and how much copy time overlapped
other copies of the same direction (a shared host link).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any


from .base import OK, AnalysisResult, load_sql, not_captured, run_query
from .link import Link, parse_nvbandwidth, resolve_links

if TYPE_CHECKING:
    from ..report import Report

NAME = "transfers"

#: copies of at least this many bytes are "large": their p90 bandwidth is compared with the link
LARGE_BYTES = 1 << 20

#: findings thresholds: percent, and the copies a device and direction needs to be judged
LOW_LINK_PCT = 50.0
CONTENTION_PCT = 10.0
MIN_FINDING_COPIES = 3


def run(
    report: Report, *, baseline: str | None = None, large_bytes: int = LARGE_BYTES
) -> AnalysisResult:
    """Bandwidth of every memcpy and memset, against the host link, with contention.

    Parameters
    ----------
    report : Report
        An opened export.
    baseline : str, optional
        Path of nvbandwidth ``-j`` output; its host<->device figures become the link
        (unless the trace records the PCIe link itself).
    large_bytes : int, default 1 MiB
        Copies at least this large give the p90 bandwidth compared with the link; when
        there are none, all copies of the direction do (``achieved_basis`` says which).

    Returns
    -------
    AnalysisResult
        summary: ``copies``, ``memsets``, ``total_bytes``, ``total_time_ns``,
        ``zero_duration_copies``, ``host_copies``, ``uvm_copies``, ``uvm_bytes``,
        ``pageable_copies``, ``pageable_bytes``, ``pageable_time_pct``, ``link_source``,
        ``link_htod_gbps``, ``link_dtoh_gbps``, ``contention_share_pct`` and per direction
        (``htod_``/``dtoh_`` prefix): ``copies``, ``bytes``, ``median_gbps``, ``p90_gbps``,
        ``aggregate_gbps``, ``pinned_median_gbps``, ``pageable_median_gbps``,
        ``pageable_vs_pinned_pct``, ``achieved_pct_of_link``, ``aggregate_pct_of_link``,
        ``contention_share_pct``, ``overlapped_median_gbps``, ``alone_median_gbps``.
        Per-direction figures are those of the device that moved the most bytes in that
        direction. Tables: ``by_kind`` (main), ``mem_time``, ``host``, ``contention``,
        ``links``, ``copies`` (one row per memcpy/memset).

    Raises
    ------
    UsageError
        When ``baseline`` is not readable nvbandwidth JSON.
    """
    measured = parse_nvbandwidth(baseline) if baseline else None
    if not (report.probe.present("memcpys") or report.probe.present("memsets")):
        return not_captured(NAME, report, "memcpys")  # type: ignore[return-value]
    report.sql(load_sql(NAME)["_ops"])
    try:
        links = resolve_links(run_query(report, NAME, "devices").to_pylist(), measured)
        params = {
            "large_bytes": int(large_bytes),
            "link_device_ids": [lk.device_id for lk in links],
            "link_directions": [lk.direction for lk in links],
            "link_gbps": [lk.gbps for lk in links],
            "link_sources": [lk.source for lk in links],
            "link_notes": [lk.note for lk in links],
        }
        tables = {
            q: run_query(report, NAME, q, params)
            for q in ("by_kind", "mem_time", "host", "contention", "copies")
        }
        (totals,) = run_query(report, NAME, "totals").to_pylist()
    finally:
        report.sql(load_sql(NAME)["_drop"])
    tables["links"] = _links_table(links)
    summary = _summary(totals, tables["host"].to_pylist(), tables["contention"].to_pylist(), links)
    return AnalysisResult(
        NAME,
        OK,
        _message(summary),
        summary,
        tables,
        main="by_kind",
        findings=tuple(
            _findings(summary, tables["host"].to_pylist(), tables["contention"].to_pylist())
        ),
    )


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
        ):
            summary[f"{p}_{key}"] = row.get(col, 0 if key in ("copies", "bytes") else None)
        c = by_dir.get(d) or {}
        for key in ("contention_share_pct", "overlapped_median_gbps", "alone_median_gbps"):
            summary[f"{p}_{key}"] = c.get(key)
    return summary


def _message(s: dict[str, Any]) -> str:
    text = (
        f"{s['copies']} copies + {s['memsets']} memsets, {s['total_bytes'] / 1e6:.1f} MB "
        f"in {s['total_time_ns'] / 1e6:.3f} ms"
    )
    for d in ("htod", "dtoh"):
        figures = (f"{d}_aggregate_gbps", f"{d}_aggregate_pct_of_link", f"link_{d}_gbps")
        if s[f"{d}_copies"] and all(s.get(k) is not None for k in figures):
            text += (
                f"; {d[0].upper()}to{d[-1].upper()} {s[f'{d}_aggregate_gbps']:.1f} GB/s "
                f"aggregate = {s[f'{d}_aggregate_pct_of_link']:.0f}% of "
                f"{s[f'link_{d}_gbps']:.1f} GB/s ({s['link_source']} link)"
            )
    return text


def _findings(s: dict[str, Any], host: list[dict], contention: list[dict]) -> list[str]:
    out = []
    for r in host:
        if r["copies"] < MIN_FINDING_COPIES:
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
        pct = r["achieved_pct_of_link"]
        if pct is not None and pct < LOW_LINK_PCT:
            if r["achieved_basis"] == "p90_large":
                out.append(
                    f"{where}: p90 bandwidth of large copies is {pct:.0f}% of the "
                    f"{r['link_gbps']:.1f} GB/s link ({r['link_source']})"
                )
            else:
                out.append(
                    f"{where}: copies are small (median {r['median_bytes'] / 1024:.0f} KiB) "
                    f"and reach {pct:.0f}% of the {r['link_gbps']:.1f} GB/s link at p90: "
                    f"per-copy overhead dominates; batch them"
                )
    for c in contention:
        share = c["contention_share_pct"]
        if (
            c["direction"] != "all"
            and c["copies"] >= MIN_FINDING_COPIES
            and share is not None
            and share >= CONTENTION_PCT
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
    if s["uvm_copies"]:
        out.append(
            f"{s['uvm_copies']} unified-memory migrations ({s['uvm_bytes'] / 1e6:.1f} MB) "
            "are kept apart from explicit copies"
        )
    if s["zero_duration_copies"]:
        out.append(
            f"{s['zero_duration_copies']} copies have zero duration: no bandwidth, "
            "left out of the bandwidth figures"
        )
    return out
