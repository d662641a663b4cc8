"""Plain-text renderings shared by the CLI and the result objects' ``__str__``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .tables import format_rows

if TYPE_CHECKING:
    from ..diagnosis.model import Platform
    from ..report import ReportInfo

#: where a GPU's host-link figure comes from, in words (link.Link.source)
LINK_SOURCES = {
    "trace": "recorded in the export",
    "baseline": "nvbandwidth baseline",
    "default": "platform table",
    "integrated": "integrated GPU, memory shared with the CPU: no PCIe link",
    "not_cuda": "not a CUDA device",
    "unknown": "GPU not in the platform table: no link figure assumed",
}


def platform_lines(p: Platform) -> list[str]:
    """One line per GPU (its host link and where the figure comes from), then the versions."""
    out = []
    for g in p.gpus:
        where = LINK_SOURCES.get(g.link_source, g.link_source)
        link = (f"host link {g.link_gbps:.1f} GB/s per direction ({where}: {g.link_note})"
                if g.link_gbps is not None else f"no host-link figure ({where})")
        out.append(f"GPU {g.device_id} {g.name or '?'}: {link}")
    versions = [f"driver {p.driver_version}" if p.driver_version else "",
                f"CUDA {p.cuda_version}" if p.cuda_version else ""]
    if any(versions):
        out.append(", ".join(v for v in versions if v))
    return out


def fmt_ns(ns: float | int | None) -> str:
    """A duration in ns as a human unit: 850 ns, 12.3 us, 4.56 ms, 7.89 s."""
    if ns is None:
        return "-"
    v = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(v) >= scale:
            return f"{v / scale:.3g} {unit}"
    return f"{v:.0f} ns"


def fmt_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"


def info_text(info: ReportInfo) -> str:
    lines = [
        f"report      {info.path}",
        f"format      {info.format}",
        f"nsys        {info.nsys_version or 'unknown (exporter older than 2022.1)'}",
        f"schema      {info.schema_version or 'unknown'}",
        f"driver      {info.driver_version or 'not recorded'}"
        + (f"  (CUDA {info.cuda_version})" if info.cuda_version else ""),
        f"time span   {fmt_ns(info.duration_ns)}"
        + (f"  [{info.start_ns} .. {info.end_ns}] ns" if info.start_ns is not None else ""),
        "",
        "GPUs",
    ]
    if info.gpus:
        lines.append(
            format_rows(
                ["id", "name", "bus", "memory", "SMs", "cc"],
                [
                    [
                        g["device_id"],
                        g["name"],
                        g["bus_location"],
                        fmt_bytes(g["total_memory_bytes"]),
                        g["sm_count"],
                        g["compute_capability"],
                    ]
                    for g in info.gpus
                ],
            )
        )
    else:
        lines.append("  none recorded")
    lines += ["", "processes with CUDA activity"]
    if info.processes:
        lines.append(
            format_rows(
                ["pid", "name", "kernels", "api_calls"],
                [[p["pid"], p["name"], p["kernels"], p["api_calls"]] for p in info.processes],
            )
        )
    else:
        lines.append("  none")
    lines += ["", "captured"]
    lines.append(
        format_rows(
            ["view", "status", "source rows", "note"],
            [
                [
                    k,
                    v["status"],
                    info.row_counts[k],
                    (v["reason"] + (f" [{v['hint']}]" if v["hint"] else "")),
                ]
                for k, v in info.captured.items()
            ],
            max_width=100,
        )
    )
    return "\n".join(lines)
