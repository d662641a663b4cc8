"""Host-link speed per GPU: from the trace, a measured nvbandwidth baseline, or a default.

The transfers analysis compares achieved copy bandwidth with the link a GPU's host
copies cross. Each (device, direction) gets one figure, in this order of preference:

``trace``     PCIe generation and width recorded in the export (``devices.pcie_generation``,
              ``devices.pcie_width``): the theoretical per-direction rate of that link.
``baseline``  a measurement the user supplies: nvbandwidth's ``-j`` JSON output, testcases
              ``host_to_device_memcpy_ce`` / ``device_to_host_memcpy_ce`` (the copy-engine
              path ``cudaMemcpy*`` takes), falling back to the ``_sm`` variants.
``default``   the platform table (:func:`host_link`): the PCIe generation of the GPU's
              architecture (compute capability, else its name), its lane count where the
              chip fixes it (x8 parts) and x8 for a laptop part whose wiring is not
              recorded, NVLink-C2C for Grace Hopper/Blackwell.
``integrated`` / ``not_cuda`` / ``unknown``   no figure (``gbps`` None): an integrated GPU
              (Jetson, is_discrete false) shares the host's memory and has no PCIe link; a
              display adapter the export lists is no CUDA device; a GPU the table does not
              know is not judged against a guessed link.

All rates are GB/s (1e9 bytes/s) per direction.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UsageError

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

#: PCIe generation of a discrete GPU by architecture (compute capability major.minor, or
#: major alone): the generation its host interface supports. Hopper and Blackwell are
#: Gen5, Ampere and Ada Gen4, Volta, Turing, Pascal and older Gen3.
PCIE_GENERATION_BY_CC: dict[str, int] = {
    "12": 5, "10": 5, "9.0": 5, "8.9": 4, "8.6": 4, "8.0": 4, "7.5": 3, "7.0": 3,
    "6": 3, "5": 3, "3": 3,
}

#: compute capabilities of integrated GPUs (Tegra/Jetson: TX1 5.3, TX2 6.2, Xavier 7.2,
#: Orin 8.7, Thor 11.0) and DGX Spark's GB10 (12.1): CPU and GPU share one memory, no PCIe
INTEGRATED_CC = frozenset({"5.3", "6.2", "7.2", "8.7", "11.0", "12.1"})

#: chips wired with eight PCIe lanes on every board (GeForce RTX 4060/4060 Ti and their
#: laptop parts, RTX 3050 and A2, RTX 5060/5060 Ti/5050)
X8_CHIPS = frozenset({"AD106", "AD107", "GA107", "GB206", "GB207"})

#: lanes assumed for a laptop GPU whose chip does not fix the width: laptops wire x8 or
#: x16 and the export does not say which; the narrower figure is the safe ceiling, since a
#: ceiling set too high calls healthy copies slow
LAPTOP_LANES = 8

#: GPU name patterns (lower case) for exports without a compute capability, first match
#: wins (Ada before Blackwell: "RTX 5000 Ada" is no RTX 50 part): (pattern, generation, lanes)
NAME_PATTERNS: tuple[tuple[str, int, int], ...] = (
    (r"\bada\b|rtx [a-z]?\d000 ada|rtx 40\d0|\bl(4|20|40s?)\b", 4, 16),
    (r"\bh(100|200|800|20)\b|\bb(100|200|300)\b|rtx 50\d0\b|blackwell", 5, 16),
    (r"\ba2\b", 4, 8),
    (r"\ba(100|800|30|40|10g?|16)\b|rtx a\d{4}|rtx 30\d0", 4, 16),
    (r"\bv100|\bt4\b|\bp(100|40|4)\b|rtx 20\d0|titan|quadro|gtx", 3, 16),
)

#: names of integrated (Tegra/Jetson) GPUs, for exports without the isDiscrete flag
INTEGRATED_NAMES = r"\b(orin|xavier|tegra|jetson|thor|gb10)\b|\bgv11b\b|\bga10b\b"


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
    gbps : float or None
        Per-direction rate, GB/s; None where no link figure applies.
    source : str
        ``trace``, ``baseline``, ``default``, ``integrated``, ``not_cuda`` or ``unknown``.
    note : str
        Where the figure comes from, e.g. ``PCIe Gen5 x16 (theoretical)``.
    """

    device_id: int
    direction: str
    gbps: float | None
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


@dataclass(frozen=True)
class HostLink:
    """What connects one GPU to host memory, as far as the export tells.

    Attributes
    ----------
    kind : str
        ``pcie``; ``nvlink-c2c`` (Grace Hopper/Blackwell); ``integrated`` (CPU and GPU share
        one memory: copies move no bytes over a link); ``not_cuda`` (a display adapter the
        export lists beside the CUDA GPUs); ``unknown``.
    generation, lanes : int or None
        PCIe generation and lane count (``lanes`` None when not known).
    gbps : float or None
        Theoretical per-direction rate, GB/s; None when there is no link or it is unknown.
    note : str
        The figure and why it was chosen, for the report.
    """

    kind: str
    generation: int | None
    lanes: int | None
    gbps: float | None
    note: str


def _cc(value: Any) -> str | None:
    """Compute capability as ``major.minor`` text, None when absent or ``0.0``."""
    text = str(value or "").strip()
    return None if not text or text.startswith("0") or text == "None" else text


def host_link(device: dict[str, Any]) -> HostLink:
    """The host link of a GPU from the hardware facts in the export.

    Parameters
    ----------
    device : dict
        A ``devices`` row: ``name``, and when present ``chip_name``, ``compute_capability``
        (``"8.9"``), ``is_discrete``, ``bus_location``.

    Examples
    --------
    >>> host_link({"name": "NVIDIA RTX 5000 Ada Generation Laptop GPU", "chip_name": "AD103",
    ...            "compute_capability": "8.9", "is_discrete": True}).lanes
    8
    >>> host_link({"name": "Orin", "compute_capability": "8.7", "is_discrete": False}).kind
    'integrated'
    """
    name = str(device.get("name") or "")
    low = name.lower()
    chip = str(device.get("chip_name") or "").upper()
    cc = _cc(device.get("compute_capability"))
    discrete = device.get("is_discrete")
    if cc is None and not chip and "nvidia" not in low and re.search(r"intel|amd|radeon|microsoft",
                                                                     low):
        return HostLink("not_cuda", None, None, None, f"{name}: not a CUDA device")
    if discrete is False or (cc in INTEGRATED_CC) or re.search(INTEGRATED_NAMES, low):
        return HostLink("integrated", None, None, None,
                        f"{name or 'GPU'} is integrated: CPU and GPU share one memory, "
                        "no PCIe link")
    if re.search(r"\bg[hb]\d{3}\b|grace", low):
        return HostLink("nvlink-c2c", None, None, NVLINK_C2C_GBPS,
                        f"NVLink-C2C for {name} ({NVLINK_C2C_GBPS:.0f} GB/s per direction, "
                        "theoretical)")
    generation, lanes, why = _pcie_by_model(low, chip, cc)
    if generation is None:
        return HostLink("unknown", None, None, None,
                        f"GPU '{name or '?'}' not in the platform table: link unknown")
    laptop = bool(re.search(r"laptop|max-q|mobile", low))
    if lanes is None:
        lanes = LAPTOP_LANES if laptop else 16
        if laptop:
            why += ", laptop: lanes not recorded, x8 assumed"
    gbps = pcie_gbps(generation, lanes)
    return HostLink("pcie", generation, lanes, gbps,
                    f"PCIe Gen{generation} x{lanes} for {name} ({why}; theoretical)")


_ARCH = {"12": "Blackwell", "10": "Blackwell", "9.0": "Hopper", "8.9": "Ada", "8.6": "Ampere",
         "8.0": "Ampere", "7.5": "Turing", "7.0": "Volta", "6": "Pascal", "5": "Maxwell",
         "3": "Kepler"}


def _pcie_by_model(low: str, chip: str, cc: str | None) -> tuple[int | None, int | None, str]:
    """(generation, lanes or None, reason) of a discrete GPU's PCIe link."""
    lanes = 8 if chip in X8_CHIPS else None
    if cc is not None:
        for key in (cc, cc.split(".")[0]):
            if key in PCIE_GENERATION_BY_CC:
                why = _ARCH[key] + (f", {chip} has 8 lanes" if lanes else "")
                return PCIE_GENERATION_BY_CC[key], lanes, why
    for pattern, generation, width in NAME_PATTERNS:
        if re.search(pattern, low):
            return generation, lanes or width, "by name"
    return None, None, ""


def default_link(name: str | None) -> tuple[float | None, str]:
    """The link rate (GB/s per direction, None when unknown) and note for a GPU name alone.

    Examples
    --------
    >>> default_link("NVIDIA H200")[1]
    'PCIe Gen5 x16 for NVIDIA H200 (by name; theoretical)'
    >>> default_link(None)[1]
    "GPU '?' not in the platform table: link unknown"
    """
    link = host_link({"name": name})
    return link.gbps, link.note


def resolve_links(devices: list[dict[str, Any]], baseline: Baseline | None = None) -> list[Link]:
    """One :class:`Link` per device and direction, by the order of preference above.

    Parameters
    ----------
    devices : list of dict
        ``devices`` rows: ``device_id``, ``name``, ``pcie_generation``, ``pcie_width`` and
        the hardware facts :func:`host_link` reads.
    baseline : Baseline, optional
        Parsed nvbandwidth output.

    Returns
    -------
    list of Link
        ``gbps`` None (source ``integrated``, ``not_cuda`` or ``unknown``) where no link
        figure applies: copies on such a device are not judged against a link.
    """
    links = []
    for dev in devices:
        gen, width = dev.get("pcie_generation"), dev.get("pcie_width")
        traced = pcie_gbps(gen, width) if gen and width else None
        model = host_link(dev)
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
            elif model.gbps is not None:
                link = Link(dev["device_id"], direction, model.gbps, "default", model.note)
            else:
                link = Link(dev["device_id"], direction, None, model.kind, model.note)
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
