"""Readable names for nsys enum ids: from the export's ENUM_* tables, else fallback constants.

Exports before about 2022.4 carry no ENUM_* tables; their ids follow CUPTI's enums, which
have been stable, so the constants below (from NVIDIA's schema documentation and its 2022.4
stats scripts) name them. When an export has the table, its rows win.
"""

from __future__ import annotations

import pyarrow as pa

#: CUDA memcpy kind (``copyKind``): id -> (symbol, short name, nsys label)
COPY_KINDS: dict[int, tuple[str, str, str]] = {
    0: ("CUDA_MEMCPY_KIND_UNKNOWN", "Unknown", "Unknown"),
    1: ("CUDA_MEMCPY_KIND_HTOD", "HtoD", "Host-to-Device"),
    2: ("CUDA_MEMCPY_KIND_DTOH", "DtoH", "Device-to-Host"),
    3: ("CUDA_MEMCPY_KIND_HTOA", "HtoA", "Host-to-Array"),
    4: ("CUDA_MEMCPY_KIND_ATOH", "AtoH", "Array-to-Host"),
    5: ("CUDA_MEMCPY_KIND_ATOA", "AtoA", "Array-to-Array"),
    6: ("CUDA_MEMCPY_KIND_ATOD", "AtoD", "Array-to-Device"),
    7: ("CUDA_MEMCPY_KIND_DTOA", "DtoA", "Device-to-Array"),
    8: ("CUDA_MEMCPY_KIND_DTOD", "DtoD", "Device-to-Device"),
    9: ("CUDA_MEMCPY_KIND_HTOH", "HtoH", "Host-to-Host"),
    10: ("CUDA_MEMCPY_KIND_PTOP", "PtoP", "Peer-to-Peer"),
    11: ("CUDA_MEMCPY_KIND_UVM_HTOD", "UVM_HtoD", "Unified Host-to-Device"),
    12: ("CUDA_MEMCPY_KIND_UVM_DTOH", "UVM_DtoH", "Unified Device-to-Host"),
    13: ("CUDA_MEMCPY_KIND_UVM_DTOD", "UVM_DtoD", "Unified Device-to-Device"),
}

#: CUDA memory kind (``srcKind``/``dstKind``/``memKind``): id -> (symbol, short name, label)
MEM_KINDS: dict[int, tuple[str, str, str]] = {
    0: ("CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "pageable", "Pageable"),
    1: ("CUDA_MEMOPR_MEMORY_KIND_PINNED", "pinned", "Pinned"),
    2: ("CUDA_MEMOPR_MEMORY_KIND_DEVICE", "device", "Device"),
    3: ("CUDA_MEMOPR_MEMORY_KIND_ARRAY", "array", "Array"),
    4: ("CUDA_MEMOPR_MEMORY_KIND_MANAGED", "managed", "Managed"),
    5: ("CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "device_static", "Device Static"),
    6: ("CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "managed_static", "Managed Static"),
    7: ("CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "unknown", "Unknown"),
}

#: CUPTI synchronization type (``syncType``): id -> (symbol, short name, label)
SYNC_TYPES: dict[int, tuple[str, str, str]] = {
    0: ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "unknown", "Unknown"),
    1: ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "event_synchronize", "Event sync"),
    2: ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "stream_wait_event",
        "Stream wait sync"),
    3: ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "stream_synchronize",
        "Stream sync"),
    4: ("CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "context_synchronize",
        "Context sync"),
}

#: CUPTI unified-memory access type of a GPU page fault (``faultAccessType``): id ->
#: (symbol, short name, label)
UM_ACCESS_TYPES: dict[int, tuple[str, str, str]] = {
    0: ("CUDA_UNIFIED_MEMORY_ACCESS_TYPE_UNKNOWN", "unknown", "Unknown"),
    1: ("CUDA_UNIFIED_MEMORY_ACCESS_TYPE_READ", "read", "Read"),
    2: ("CUDA_UNIFIED_MEMORY_ACCESS_TYPE_WRITE", "write", "Write"),
    3: ("CUDA_UNIFIED_MEMORY_ACCESS_TYPE_ATOMIC", "atomic", "Atomic"),
    4: ("CUDA_UNIFIED_MEMORY_ACCESS_TYPE_PREFETCH", "prefetch", "Prefetch"),
}

#: ENUM table name and symbol prefix for each enum above
ENUM_TABLES = {
    "copy_kind": ("ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_", COPY_KINDS),
    "mem_kind": ("ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_", MEM_KINDS),
    "sync_type": ("ENUM_CUPTI_SYNC_TYPE", "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_", SYNC_TYPES),
    "um_access": ("ENUM_CUDA_UNIF_MEM_ACCESS_TYPE", "CUDA_UNIFIED_MEMORY_ACCESS_TYPE_",
                  UM_ACCESS_TYPES),
}

_SHORT_COPY = {v[0]: v[1] for v in COPY_KINDS.values()}


def _short_name(kind: str, symbol: str, prefix: str) -> str:
    if kind == "copy_kind" and symbol in _SHORT_COPY:
        return _SHORT_COPY[symbol]
    rest = symbol[len(prefix):] if symbol.startswith(prefix) else symbol
    return rest if kind == "copy_kind" else rest.lower()


def enum_table(kind: str, rows: list[tuple] | None) -> pa.Table:
    """Arrow table (id, name, label) for one enum, export rows overriding the constants."""
    _, prefix, constants = ENUM_TABLES[kind]
    merged = {i: (short, label) for i, (_, short, label) in constants.items()}
    for row in rows or ():
        try:
            i, symbol, label = int(row[0]), str(row[1]), row[2]
        except (TypeError, ValueError, IndexError):
            continue
        merged[i] = (_short_name(kind, symbol, prefix), str(label) if label else symbol)
    ids = sorted(merged)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([merged[i][0] for i in ids], pa.string()),
            "label": pa.array([merged[i][1] for i in ids], pa.string()),
        }
    )
