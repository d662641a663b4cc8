"""Host-link speed per GPU: from the trace, a measured nvbandwidth baseline, or a default.

The transfers analysis compares achieved copy bandwidth with the link a GPU's host
copies cross. Each (device, direction) gets one figure, in this order of preference:

``trace``     PCIe generation and width recorded in the export (``devices.pcie_generation``,
              ``devices.pcie_width``): the theoretical per-direction rate of that link.
``baseline``  a measurement the user supplies: nvbandwidth's ``-j`` JSON output, testcases
              ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce`` (the copy-engine
              path ``cudaMemcpy*`` takes), falling back to the ``_sm`` variants.
``default``   a documented default by GPU name (:data:`DEFAULT_LINKS`), and PCIe Gen4 x16
              for a GPU not in that list, with the choice stated in the note.

All rates are GB/s (1e9 bytes/s) per direction.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

DIRECTIONS = ("HtoD", "DtoH")

#: theoretical payload rate of one PCIe lane per direction, GB/s, by generation
#: (transfer rate x line-code efficiency / 8: 8b/10b for Gen1-2, 128b/130b for Gen3-5,
#: FLIT mode 242/256 for Gen6)
PCIE_LANE_GBPS = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}

#: NVLink-C2C between Grace and Hopper/Blackwell: 900 GB/s total, 450 GB/s per direction
NVLINK_C2C_GBPS = 450.0

#: GPU name pattern (lower case, first match wins) -> (link description, per-direction GB/s)
DEFAULT_LINKS: tuple[tuple[str, str, float], ...] = (
    (r"\bg[hb]\d{3}\b|grace", "NVLink-C2C", NVLINK_C2C_GBPS),
    (
        r"\bh(100|200|800|20)\b|\bb(100|200)\b|rtx 50\d\d|blackwell",
        "PCIe Gen5 x16",
        16 * PCIE_LANE_GBPS[5],
    ),
    (r"\ba2\b", "PCIe Gen4 x8", 8 * PCIE_LANE_GBPS[4]),
    (
        r"\ba(100|800|30|40|10g?|16)\b|\bl(4|20|40s?)\b|rtx a\d{4}|rtx [34]0\d\d|\bada\b",
        "PCIe Gen4 x16",
        16 * PCIE_LANE_GBPS[4],
    ),
    (
        r"\bv100|\bt4\b|\bp(100|40|4)\b|rtx 20\d\d|titan|quadro|gtx",
        "PCIe Gen3 x16",
        16 * PCIE_LANE_GBPS[3],
    ),
)

#: what an unknown GPU is assumed to have
FALLBACK_LINK = ("PCIe Gen4 x16", 16 * PCIE_LANE_GBPS[4])

#: nvbandwidth testcases giving host->device and device->host copy bandwidth, preferred first
BASELINE_TESTCASES = {
    "HtoD": ("host_to_device_memcpy_ce", "host_to_device_memcpy_sm"),
    "DtoH": ("device_to_host_memcpy_ce", "device_to_host_memcpy_sm"),
}


@dataclass(frozen=True)
class Link:
    """The link figure used for one device and direction.

    Attributes
    ----------
    device_id : int
        GPU id as in the trace.
    direction : str
        ``HtoD`` or ``DtoH``.
    gbps : float
        Per-direction rate, GB/s.
    source : str
        ``trace``, ``baseline`` or ``default``.
    note : str
        Where the figure comes from, e.g. ``PCIe Gen5 x16 (theoretical)``.
    """

    device_id: int
    direction: str
    gbps: float
    source: str
    note: str


@dataclass(frozen=True)
class Baseline:
    """Host<->device bandwidth measured by nvbandwidth, per CUDA device ordinal.

    Attributes
    ----------
    path : str
        The JSON file read.
    gbps : dict
        ``{"HtoD": {device: GB/s}, "DtoH": {device: GB/s}}``.
    testcases : dict
        Direction -> the nvbandwidth testcase the figures come from.
    version : str or None
        nvbandwidth version when recorded.
    """

    path: str
    gbps: dict[str, dict[int, float]] = field(default_factory=dict)
    testcases: dict[str, str] = field(default_factory=dict)
    version: str | None = None


def pcie_gbps(generation: int, width: int) -> float | None:
    """Theoretical per-direction PCIe rate in GB/s, or None for an unknown generation.

    Examples
    --------
    >>> round(pcie_gbps(5, 16), 2)
    63.02
    >>> round(pcie_gbps(4, 16), 2)
    31.51
    """
    lane = PCIE_LANE_GBPS.get(int(generation))
    return None if lane is None or not width or width <= 0 else lane * int(width)


def default_link(name: str | None) -> tuple[float, str]:
    """The default link rate (GB/s per direction) and a note for a GPU product name.

    Examples
    --------
    >>> default_link("NVIDIA H200")[1]
    'default for NVIDIA H200: PCIe Gen5 x16 (theoretical)'
    >>> default_link(None)[1]
    'unknown GPU: assumed PCIe Gen4 x16 (theoretical)'
    """
    low = (name or "").lower()
    for pattern, link, gbps in DEFAULT_LINKS:
        if re.search(pattern, low):
            return gbps, f"default for {name}: {link} (theoretical)"
    link, gbps = FALLBACK_LINK
    who = f"GPU '{name}' not in the default list" if name else "unknown GPU"
    return gbps, f"{who}: assumed {link} (theoretical)"


def resolve_links(devices: list[dict[str, Any]], baseline: Baseline | None = None) -> list[Link]:
    """One :class:`Link` per device and direction, by the order of preference above.

    Parameters
    ----------
    devices : list of dict
        Rows with ``device_id``, ``name``, ``pcie_generation``, ``pcie_width``.
    baseline : Baseline, optional
        Parsed nvbandwidth output.

    Returns
    -------
    list of Link
    """
    links = []
    for dev in devices:
        gen, width = dev.get("pcie_generation"), dev.get("pcie_width")
        traced = pcie_gbps(gen, width) if gen and width else None
        for direction in DIRECTIONS:
            measured = (
                baseline.gbps.get(direction, {}).get(dev["device_id"])
                if baseline is not None
                else None
            )
            if traced is not None:
                link = Link(
                    dev["device_id"],
                    direction,
                    traced,
                    "trace",
                    f"PCIe Gen{gen} x{width} recorded in the trace (theoretical)",
                )
            elif measured is not None:
                link = Link(
                    dev["device_id"],
                    direction,
                    measured,
                    "baseline",
                    f"nvbandwidth {baseline.testcases[direction]} ({baseline.path})",
                )
            else:
                gbps, note = default_link(dev.get("name"))
                link = Link(dev["device_id"], direction, gbps, "default", note)
            links.append(link)
    return links


def _number(value: Any) -> float | None:
    """A matrix cell: a number or numeric string; ``N/A`` and the like give None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return out if math.isfinite(out) and out > 0 else None


def _root(doc: Any) -> tuple[list, str | None]:
    """The testcase list and version of an nvbandwidth document, tolerating wrappers."""
    if isinstance(doc, dict) and isinstance(doc.get("nvbandwidth"), dict):
        doc = doc["nvbandwidth"]
    if isinstance(doc, dict) and isinstance(doc.get("testcases"), list):
        version = doc.get("version")
        return doc["testcases"], str(version) if version is not None else None
    if isinstance(doc, list):
        return doc, None
    raise ValueError("no 'nvbandwidth.testcases' list")


def parse_nvbandwidth(path: str | Path) -> Baseline:
    """Read nvbandwidth ``-j`` output: host<->device copy bandwidth per GPU.

    nvbandwidth writes ``{"nvbandwidth": {"version": ..., "testcases": [{"name":
    "host_to_device_memcpy_ce", "status": "Passed", "bandwidth_matrix": [["55.6", ...]],
    ...}, ...]}}``; host<->device tests have one row (the CPU) and one column per GPU,
    cells are strings in GB/s or ``N/A``. Text before the JSON (a banner) is skipped.

    Parameters
    ----------
    path : str or Path
        The JSON file.

    Returns
    -------
    Baseline

    Raises
    ------
    UsageError
        When the file cannot be read, is not nvbandwidth JSON, or holds no passed
        host-to-device or device-to-host testcase.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UsageError(
            f"cannot read the bandwidth baseline ({exc.strerror or exc})", path=str(path)
        ) from None
    hint = "give the output of: nvbandwidth -j -t host_to_device_memcpy_ce device_to_host_memcpy_ce"
    start = text.find("{")
    try:
        if start < 0:
            raise ValueError("no JSON object")
        doc, _ = json.JSONDecoder().raw_decode(text, start)
        testcases, version = _root(doc)
    except ValueError as exc:
        msg = f"not nvbandwidth JSON output ({str(exc).splitlines()[0]})"
        raise UsageError(msg, path=str(path), hint=hint) from None
    by_name = {str(t.get("name")): t for t in testcases if isinstance(t, dict)}
    gbps: dict[str, dict[int, float]] = {}
    used: dict[str, str] = {}
    for direction, names in BASELINE_TESTCASES.items():
        for name in names:
            values = _host_row(by_name.get(name))
            if values:
                gbps[direction], used[direction] = values, name
                break
    if not gbps:
        raise UsageError(
            "the bandwidth baseline has no passed host_to_device_memcpy_ce or "
            "device_to_host_memcpy_ce result",
            path=str(path),
            hint=hint,
        )
    return Baseline(str(path), gbps, used, version)


def _host_row(testcase: dict | None) -> dict[int, float]:
    """GPU ordinal -> GB/s from a host<->device testcase (its single matrix row)."""
    if not testcase or str(testcase.get("status", "Passed")).lower() != "passed":
        return {}
    matrix = testcase.get("bandwidth_matrix")
    if not isinstance(matrix, list) or not matrix or not isinstance(matrix[0], list):
        return {}
    return {i: v for i, v in enumerate(_number(c) for c in matrix[0]) if v is not None}
