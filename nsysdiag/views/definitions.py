"""The normalized views: the contract every analysis reads (never raw nsys tables).

Each view is one SQL statement over *raw inputs* (projected reads of nsys tables, named
``raw_<alias>``), small helper tables (``_strings``, ``_api_names``,
``_enum_*``) and, for ``cuda_graphs``, other views. Columns an older export lacks arrive as
NULL, so one statement serves every nsys version. Timestamps are integer nanoseconds on the trace's
timeline, NULL when missing or invalid (see ``TS_LIMIT``), so durations are never
negative; ``pid``/``tid`` are decoded from nsys's packed ``globalPid``/``globalTid``
(``<hw:8><vm:8><pid:24><tid:24>``); ``global_pid`` keeps the packed process key (tid bits
zero) for exact joins, since correlation ids are unique only within a process.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RawInput:
    """A projected read of one raw table (the first of ``tables`` that exists)."""

    alias: str
    tables: tuple[str, ...]
    columns: dict[str, str]
    where: str | None = None


@dataclass(frozen=True)
class Strings:
    """Columns of a view's first raw input that hold the ids of strings.

    The build makes an ENUM of just the strings the columns use, which DuckDB writes to
    Parquet from its dictionary instead of hashing every row's string (an ENUM of every
    string of the export would put them all in each dictionary page of the file, and
    every GROUP BY on the column would hash them all). It hands the SQL each id as its
    place in the list of those strings, and the macro ``_view_string(column)`` gives the
    value (NULL when the export has no string with the id), ``_view_<c>(column)`` the
    value of any other column ``c`` of ``table``: list lookups, not joins, since a hash
    join would not keep the rows' order (``ViewSpec.in_export_order``) and costs more.
    """

    columns: tuple[str, ...]
    #: helper table of the strings: ``id``, ``value`` (the ENUM) and any other columns
    table: str = "_strings"
    #: SQL condition on ``table``'s columns naming the strings the columns most likely
    #: use: those are listed without reading the ids first; an id outside them starts the
    #: build over, with the ids read from the columns. Without it the ids are read first.
    likely: str | None = None
    #: a value the ENUM holds besides the strings, for the SQL to coalesce to (cast to
    #: ``_view_string``: a plain literal would make the column a VARCHAR)
    fallback: str | None = None


@dataclass(frozen=True)
class ViewSpec:
    """One normalized view."""

    name: str
    description: str
    inputs: tuple[RawInput, ...]
    sql: str
    #: column -> one-line description with unit
    columns: dict[str, str]
    #: raw tables whose rows make this view (for the probe)
    source_tables: tuple[str, ...]
    #: what to capture with when the view is empty
    capture_hint: str
    depends: tuple[str, ...] = field(default=())
    #: columns of the first raw input that hold ids of strings, looked up as ENUM values
    #: (``Strings``)
    strings: Strings | None = None
    #: the rows are written in the order the first raw input gives them (the export's, by
    #: rowid): no hash join in the SQL. Every export in the corpus stores its kernels sorted
    #: by start, and passes that read them in that order skip a sort (``intervals.segments``
    #: with ``in_order``; they check the order as they go)
    in_export_order: bool = False
    #: columns computed when the view is read (name -> SQL over its stored columns), not
    #: written: integer arithmetic costs less than writing and reading the column
    derived: dict[str, str] = field(default_factory=dict)
    #: the first raw input gains the columns launch_start_ns, launch_end_ns and
    #: launch_global_tid: each row's launch call, looked up in the api_calls view by its
    #: globalPid and correlationId (``views/launch.py``)
    launch_calls: bool = False
    #: columns written to the view's file but left out of the view (name -> description):
    #: the analyses that need them read ``_<name>_stored``, the view's columns and these
    hidden: dict[str, str] = field(default_factory=dict)


_PID = "({g} >> 24) & 16777215"
_TID = "{g} & 16777215"
_GPID = "({g} & -16777216)"  # tid bits cleared; a shift left would fail on negative keys

#: Timestamps are valid within +-(2**62 - 1) ns (+-146 years) of the trace's origin; any
#: other value (a corrupt or hand-edited export) reads as NULL, so that every difference of
#: two timestamps fits in 64 bits. An end before its start reads as NULL too: durations
#: are never negative. The checks are the SQL macros ``_ts(t)`` and ``_end_ts(start, end)``
#: (``CHECK_MACROS``, created with the helper tables). Likewise a byte count outside
#: [0, 2**48] (256 TiB) reads as NULL (``_size(b)``).
TS_LIMIT = (1 << 62) - 1
SIZE_LIMIT = 1 << 48

CHECK_MACROS = (
    f"CREATE OR REPLACE TEMP MACRO _ts(t) AS "
    f"CASE WHEN t BETWEEN {-TS_LIMIT} AND {TS_LIMIT} THEN t END",
    "CREATE OR REPLACE TEMP MACRO _end_ts(s, e) AS "
    "CASE WHEN _ts(e) >= coalesce(_ts(s), e) THEN e END",
    f"CREATE OR REPLACE TEMP MACRO _size(b) AS CASE WHEN b BETWEEN 0 AND {SIZE_LIMIT} THEN b END",
)


def _timed(raw: str, start: str = "start", end: str | None = "end") -> str:
    """``raw`` (a raw input) with its timestamp columns validated, as a subquery."""
    s, e = f'"{start}"', f'"{end}"'
    repl = f"_ts({s}) AS {s}" + (f", _end_ts({s}, {e}) AS {e}" if end else "")
    return f"(SELECT * REPLACE ({repl}) FROM {raw})"


def _scaled(col: str, factor: int) -> str:
    """``col * factor``, NULL where the product would not fit in 64 bits."""
    bound = (2**63 - 1) // factor
    return f"CASE WHEN {col} BETWEEN {-bound} AND {bound} THEN {col} * {factor} END"


_GPU_OP_COLUMNS = {
    "start": "int", "end": "int", "deviceId": "int", "contextId": "int", "streamId": "int",
    "correlationId": "int", "globalPid": "int", "graphNodeId": "int", "greenContextId": "int",
}


def _gpu_common(a: str) -> str:
    """The stored columns common to the GPU operation views (``_GPU_DERIVED`` the others)."""
    return f"""{a}.start AS start_ns, {a}."end" AS end_ns,
       {a}.deviceId AS device_id, {a}.contextId AS context_id, {a}.streamId AS stream_id,
       {a}.globalPid AS global_pid,
       {a}.correlationId AS correlation_id, nullif({a}.graphNodeId, 0) AS graph_node_id,
       nullif({a}.greenContextId, 0) AS green_context_id"""


#: computed when a GPU operation view is read (ViewSpec.derived) instead of stored: they
#: follow from stored columns, and writing them costs more than computing them on read
_GPU_DERIVED = {"duration_ns": "end_ns - start_ns", "pid": _PID.format(g="global_pid")}


_GPU_COMMON_DOC = {
    "start_ns": "GPU start time, ns on the trace timeline (NULL if missing or invalid)",
    "end_ns": "GPU end time, ns (NULL if missing, invalid or before start_ns)",
    "duration_ns": "end_ns - start_ns, ns",
    "device_id": "GPU id (joins devices.device_id)",
    "context_id": "CUDA context id (per process)",
    "stream_id": "CUDA stream id (per context)",
    "pid": "process id",
    "global_pid": "nsys packed process key (hw, vm, pid); use for joins",
    "correlation_id": "id of the launching API call (unique within a process)",
    "graph_node_id":
        "CUDA graph node id when launched inside a graph (node-level tracing), else NULL",
    "green_context_id": "green context id, NULL when none",
}

#: The largest grid sizes (x; y and z) a launch shape packs (``_shape``): CUDA's limits
SHAPE_X_MAX, SHAPE_YZ_MAX = 2**31 - 1, 65535


def _shape(x: str, y: str, z: str, complete: str) -> str:
    """Three sizes (a grid or a block) as one integer, ``x << 32 | y << 16 | z``: NULL
    where ``complete`` (every size of the launch set) fails, -1 where a size lies outside
    [0, SHAPE_X_MAX] (x) or [0, SHAPE_YZ_MAX] (y, z) and so does not pack."""
    return (f"CASE WHEN NOT ({complete}) THEN NULL "
            f"WHEN {x} BETWEEN 0 AND {SHAPE_X_MAX} AND {y} BETWEEN 0 AND {SHAPE_YZ_MAX} "
            f"AND {z} BETWEEN 0 AND {SHAPE_YZ_MAX} THEN ({x} << 32) | ({y} << 16) | {z} "
            "ELSE -1 END")


_SIZES = ("k.gridX", "k.gridY", "k.gridZ", "k.blockX", "k.blockY", "k.blockZ")
_COMPLETE = " AND ".join(f"{c} IS NOT NULL" for c in _SIZES)

KERNELS = ViewSpec(
    name="kernels",
    description="One row per CUDA kernel execution.",
    inputs=(
        RawInput(
            "kernel",
            ("CUPTI_ACTIVITY_KIND_KERNEL",),
            {**_GPU_OP_COLUMNS, "graphId": "int", "demangledName": "int", "shortName": "int",
             "gridX": "int", "gridY": "int", "gridZ": "int", "blockX": "int", "blockY": "int",
             "blockZ": "int"},
        ),
    ),
    depends=("api_calls",),
    # The launch call is looked up here, once, for every analysis that needs it (launch
    # gaps, launch latency, ranges), instead of each joining the kernels to their calls.
    launch_calls=True,
    sql=f"""
SELECT {_gpu_common('k')}, k.graphId AS graph_id,
       coalesce(_view_string(k.demangledName), _view_string(k.shortName)) AS name,
       coalesce(_view_string(k.shortName), _view_string(k.demangledName)) AS short_name,
       k.launch_start_ns, k.launch_end_ns, k.launch_global_tid,
       {_shape(*_SIZES[:3], _COMPLETE)} AS grid, {_shape(*_SIZES[3:], _COMPLETE)} AS block
FROM {_timed('raw_kernel')} k""",
    strings=Strings(("demangledName", "shortName")),
    in_export_order=True,
    derived=_GPU_DERIVED,
    columns={
        **_GPU_COMMON_DOC,
        "graph_id": "CUDA graph id (newer exports), else NULL",
        "name": "demangled kernel name",
        "short_name": "base kernel name",
        "launch_start_ns": "entry of the launch call (api_calls category launch or "
                           "graph_launch, same global_pid and correlation_id), ns; several "
                           "calls with the id (runtime and driver) count as one, from the "
                           "first entry to the last return; NULL when none was traced",
        "launch_end_ns": "return of the launch call, ns (NULL when none was traced)",
        "launch_global_tid": "nsys packed key of the thread that made the launch call",
    },
    # jitter's "same kernel" is a name and a grid and block: the two shapes, read in this
    # pass, cost less than the kernel_configs view beside it (docs/performance.md)
    hidden={
        "grid": "the grid, x << 32 | y << 16 | z (kernel_configs' grid_x, grid_y, grid_z); "
                "NULL where one of the six sizes is missing, -1 where it does not pack",
        "block": "the block, packed as the grid",
    },
    source_tables=("CUPTI_ACTIVITY_KIND_KERNEL",),
    capture_hint="nsys profile --trace=cuda",
)

# Launch configurations live apart from ``kernels``: every reader of ``kernels`` would pay
# for nine more columns of the biggest table (docs/performance.md). jitter reads the grid
# and block packed in the kernels' file (``KERNELS.hidden``) where they pack.
KERNEL_CONFIGS = ViewSpec(
    name="kernel_configs",
    description="Launch configuration of each kernel execution (join kernels on "
                "global_pid, correlation_id, start_ns).",
    inputs=(
        RawInput(
            "kernel_config",
            ("CUPTI_ACTIVITY_KIND_KERNEL",),
            {"start": "int", "globalPid": "int", "correlationId": "int",
             "gridX": "int", "gridY": "int", "gridZ": "int", "blockX": "int", "blockY": "int",
             "blockZ": "int", "registersPerThread": "int", "staticSharedMemory": "int",
             "dynamicSharedMemory": "int"},
        ),
    ),
    sql="""
SELECT _ts(k.start) AS start_ns, k.globalPid AS global_pid, k.correlationId AS correlation_id,
       k.gridX AS grid_x, k.gridY AS grid_y, k.gridZ AS grid_z,
       k.blockX AS block_x, k.blockY AS block_y, k.blockZ AS block_z,
       k.registersPerThread AS registers_per_thread,
       k.staticSharedMemory AS static_shared_bytes, k.dynamicSharedMemory AS dynamic_shared_bytes
FROM raw_kernel_config k""",
    columns={
        "start_ns": "GPU start time, ns (as in kernels)",
        "global_pid": "nsys packed process key (as in kernels)",
        "correlation_id": "id of the launching API call (as in kernels)",
        "grid_x": "grid size x (blocks)", "grid_y": "grid size y", "grid_z": "grid size z",
        "block_x": "block size x (threads)", "block_y": "block size y", "block_z": "block size z",
        "registers_per_thread": "registers per thread",
        "static_shared_bytes": "static shared memory per block, bytes",
        "dynamic_shared_bytes": "dynamic shared memory per block, bytes",
    },
    # jitter reads it beside kernels row for row (a positional join)
    in_export_order=True,
    source_tables=("CUPTI_ACTIVITY_KIND_KERNEL",),
    capture_hint="nsys profile --trace=cuda",
)

MEMCPYS = ViewSpec(
    name="memcpys",
    description="One row per CUDA memory copy executed on a GPU copy engine.",
    inputs=(
        RawInput(
            "memcpy",
            ("CUPTI_ACTIVITY_KIND_MEMCPY",),
            {**_GPU_OP_COLUMNS, "bytes": "int", "copyKind": "int", "srcKind": "int",
             "dstKind": "int", "srcDeviceId": "int", "dstDeviceId": "int", "copyCount": "int"},
        ),
    ),
    sql=f"""
SELECT {_gpu_common('m')}, _size(m.bytes) AS bytes,
       coalesce(ck.name, 'kind_' || m.copyKind) AS copy_kind, m.copyKind AS copy_kind_id,
       coalesce(ck.label, 'kind ' || m.copyKind) AS copy_kind_label,
       coalesce(sk.name, 'kind_' || m.srcKind) AS src_kind,
       coalesce(dk.name, 'kind_' || m.dstKind) AS dst_kind,
       coalesce(m.srcKind = 0 OR m.dstKind = 0, false) AS is_pageable,
       m.srcDeviceId AS src_device_id, m.dstDeviceId AS dst_device_id,
       coalesce(m.copyCount, 1) AS copy_count
FROM {_timed('raw_memcpy')} m
LEFT JOIN _enum_copy_kind ck ON ck.id = m.copyKind
LEFT JOIN _enum_mem_kind sk ON sk.id = m.srcKind
LEFT JOIN _enum_mem_kind dk ON dk.id = m.dstKind""",
    derived=_GPU_DERIVED,
    columns={
        **_GPU_COMMON_DOC,
        "bytes": "bytes copied (NULL if missing or invalid)",
        "copy_kind": "direction: HtoD, DtoH, DtoD, HtoH, PtoP, UVM_HtoD, ...",
        "copy_kind_id": "CUPTI copy kind id",
        "copy_kind_label": "nsys display label, e.g. Host-to-Device",
        "src_kind": "source memory: pageable, pinned, device, array, managed, ...",
        "dst_kind": "destination memory kind",
        "is_pageable": "true when either side is pageable host memory",
        "src_device_id": "source GPU of a peer copy",
        "dst_device_id": "destination GPU of a peer copy",
        "copy_count": "copies folded into this record (cudaMemcpyBatchAsync), 1 otherwise",
    },
    source_tables=("CUPTI_ACTIVITY_KIND_MEMCPY",),
    capture_hint="nsys profile --trace=cuda",
)

MEMSETS = ViewSpec(
    name="memsets",
    description="One row per CUDA memset executed on a GPU.",
    inputs=(
        RawInput(
            "memset",
            ("CUPTI_ACTIVITY_KIND_MEMSET",),
            {**_GPU_OP_COLUMNS, "bytes": "int", "memKind": "int", "value": "int"},
        ),
    ),
    sql=f"""
SELECT {_gpu_common('m')}, _size(m.bytes) AS bytes,
       coalesce(mk.name, 'kind_' || m.memKind) AS mem_kind, m.value AS value
FROM {_timed('raw_memset')} m
LEFT JOIN _enum_mem_kind mk ON mk.id = m.memKind""",
    derived=_GPU_DERIVED,
    columns={**_GPU_COMMON_DOC, "bytes": "bytes set (NULL if missing or invalid)",
             "mem_kind": "memory kind", "value": "byte value written"},
    source_tables=("CUPTI_ACTIVITY_KIND_MEMSET",),
    capture_hint="nsys profile --trace=cuda",
)

_THREAD_DOC = {
    "pid": "process id",
    "tid": "thread id",
    "global_pid": "nsys packed process key; use for joins",
    "global_tid": "nsys packed thread key",
}

API_CALLS = ViewSpec(
    name="api_calls",
    description="One row per traced CUDA runtime or driver API call (CPU side).",
    inputs=(
        RawInput(
            "runtime",
            ("CUPTI_ACTIVITY_KIND_RUNTIME",),
            {"start": "int", "end": "int", "eventClass": "int", "globalTid": "int",
             "correlationId": "int", "nameId": "int", "returnValue": "int"},
        ),
    ),
    sql=f"""
SELECT r.start AS start_ns, r."end" AS end_ns, r.globalTid AS global_tid,
       coalesce(_view_string(r.nameId), 'unknown'::_view_string) AS name,
       coalesce(_view_category(r.nameId), 'other'::_api_category) AS category,
       CASE r.eventClass WHEN 0 THEN 'runtime' WHEN 1 THEN 'driver' ELSE 'other'
       END::ENUM('runtime', 'driver', 'other') AS api,
       r.correlationId AS correlation_id, r.returnValue AS return_value
FROM {_timed('raw_runtime')} r""",
    # in start order, as exported: the kernels' launch calls (views/launch.py) and ranges'
    # CPU sweep (compute/sweep.py) read the calls in that order instead of sorting them
    in_export_order=True,
    # every API name of every corpus export is a CUDA API identifier
    strings=Strings(("nameId",), table="_api_names",
                    likely="regexp_matches(value, '^cu[A-Za-z0-9_]*$')", fallback="unknown"),
    # computed on read, not stored: writing them costs more than computing them
    derived={
        "duration_ns": "end_ns - start_ns",
        "pid": _PID.format(g="global_tid"),
        "tid": _TID.format(g="global_tid"),
        "global_pid": _GPID.format(g="global_tid"),
    },
    columns={
        "start_ns": "call entry, ns", "end_ns": "call return, ns", "duration_ns": "ns",
        **_THREAD_DOC,
        "name": "API name without its CUDA version stamp (cudaLaunchKernel, not "
                "cudaLaunchKernel_v7000; cuGetProcAddress_v2 stays)",
        "category": "launch, graph_launch, memcpy, memset, sync, memory, other",
        "api": "runtime or driver",
        "correlation_id": "joins the GPU work it launched (same global_pid)",
        "return_value": "CUDA return code",
    },
    source_tables=("CUPTI_ACTIVITY_KIND_RUNTIME",),
    capture_hint="nsys profile --trace=cuda",
)

_NVTX_COLUMNS = {"start": "int", "end": "int", "eventType": "int", "rangeId": "int",
                 "category": "int", "text": "text", "globalTid": "int", "endGlobalTid": "int",
                 "textId": "int", "domainId": "int"}

NVTX_RANGES = ViewSpec(
    name="nvtx_ranges",
    description="One row per NVTX range (push/pop and start/end); marks are left out.",
    inputs=(
        RawInput("nvtx", ("NVTX_EVENTS",), _NVTX_COLUMNS, where="eventType IN (59, 60, 70, 71)"),
        RawInput("nvtx_domain", ("NVTX_EVENTS",),
                 {"start": "int", "text": "text", "textId": "int", "globalTid": "int",
                  "domainId": "int"}, where="eventType = 75"),
    ),
    sql=f"""
WITH dom AS (
    SELECT d.domainId, d.globalTid >> 24 AS proc,
           arg_min(coalesce(s.value, d.text), d.start) AS domain
    FROM raw_nvtx_domain d LEFT JOIN _strings s ON s.id = d.textId
    GROUP BY 1, 2)
SELECT e.start AS start_ns, e."end" AS end_ns, e."end" - e.start AS duration_ns,
       {_PID.format(g='e.globalTid')} AS pid, {_TID.format(g='e.globalTid')} AS tid,
       {_GPID.format(g='e.globalTid')} AS global_pid, e.globalTid AS global_tid,
       {_TID.format(g='e.endGlobalTid')} AS end_tid,
       coalesce(s.value, e.text, '') AS name, coalesce(dom.domain, '') AS domain,
       CASE WHEN e.eventType IN (59, 70) THEN 'push_pop' ELSE 'start_end' END AS style,
       e.rangeId AS range_id, e.category AS category
FROM {_timed('raw_nvtx')} e
LEFT JOIN _strings s ON s.id = e.textId
LEFT JOIN dom ON dom.domainId = e.domainId AND dom.proc = e.globalTid >> 24""",
    columns={
        "start_ns": "range start, ns", "end_ns": "range end, ns (NULL if never closed)",
        "duration_ns": "ns (NULL if never closed)", **_THREAD_DOC,
        "end_tid": "thread that ended a start/end range on another thread, else NULL",
        "name": "range text (registered or inline)",
        "domain": "NVTX domain name, '' for the default",
        "style": "push_pop or start_end", "range_id": "nvtxRangeStart id (start/end ranges)",
        "category": "NVTX category id",
    },
    source_tables=("NVTX_EVENTS",),
    capture_hint="annotate the code with NVTX and run nsys profile --trace=cuda,nvtx",
)

SYNCS = ViewSpec(
    name="syncs",
    description="One row per CUDA synchronization observed by CUPTI (event, stream, context).",
    inputs=(
        RawInput(
            "sync",
            ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",),
            {"start": "int", "end": "int", "deviceId": "int", "contextId": "int",
             "streamId": "int", "correlationId": "int", "globalPid": "int", "syncType": "int",
             "eventId": "int"},
        ),
    ),
    sql=f"""
SELECT s.start AS start_ns, s."end" AS end_ns, s."end" - s.start AS duration_ns,
       coalesce(st.name, 'unknown') AS sync_type, s.deviceId AS device_id,
       s.contextId AS context_id, s.streamId AS stream_id,
       {_PID.format(g='s.globalPid')} AS pid, s.globalPid AS global_pid,
       s.correlationId AS correlation_id, s.eventId AS event_id
FROM {_timed('raw_sync')} s
LEFT JOIN _enum_sync_type st ON st.id = s.syncType""",
    columns={
        "start_ns": "ns", "end_ns": "ns", "duration_ns": "ns",
        "sync_type":
            "event_synchronize, stream_wait_event, stream_synchronize, context_synchronize",
        "device_id": "GPU id", "context_id": "context", "stream_id": "stream",
        "pid": "process id", "global_pid": "packed process key",
        "correlation_id": "the API call that synchronized", "event_id": "CUDA event id",
    },
    source_tables=("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",),
    capture_hint="nsys profile --trace=cuda",
)

THREADS = ViewSpec(
    name="threads",
    description="Named threads and their process names.",
    inputs=(
        RawInput("thread", ("ThreadNames",),
                 {"nameId": "int", "priority": "int", "globalTid": "int"}),
        RawInput("process", ("PROCESSES",), {"globalPid": "int", "pid": "int", "name": "text"}),
    ),
    sql=f"""
WITH p AS (SELECT globalPid >> 24 AS proc, arg_max(name, name) AS name FROM raw_process GROUP BY 1)
SELECT t.globalTid AS global_tid, {_PID.format(g='t.globalTid')} AS pid,
       {_TID.format(g='t.globalTid')} AS tid, {_GPID.format(g='t.globalTid')} AS global_pid,
       arg_max(s.value, t.priority) AS thread_name, max(t.priority) AS priority,
       any_value(p.name) AS process_name
FROM raw_thread t
LEFT JOIN _strings s ON s.id = t.nameId
LEFT JOIN p ON p.proc = t.globalTid >> 24
GROUP BY t.globalTid""",
    columns={"global_tid": "packed thread key", "pid": "process id", "tid": "thread id",
             "global_pid": "packed process key", "thread_name": "thread name",
             "priority": "thread priority", "process_name": "process name, NULL if unknown"},
    source_tables=("ThreadNames",),
    capture_hint="nsys profile (thread names are recorded by default)",
)

PROCESSES = ViewSpec(
    name="processes",
    description="Processes recorded in the capture.",
    inputs=(RawInput("process", ("PROCESSES",),
                     {"globalPid": "int", "pid": "int", "name": "text"}),),
    sql="""
SELECT (globalPid & -16777216) AS global_pid, (globalPid >> 24) & 16777215 AS pid,
       arg_max(name, name) AS name
FROM raw_process GROUP BY 1, 2""",
    columns={"global_pid": "packed process key", "pid": "process id", "name": "process name"},
    source_tables=("PROCESSES",),
    capture_hint="nsys profile (processes are recorded by default)",
)

DEVICES = ViewSpec(
    name="devices",
    description="GPUs in the capture with the hardware facts the export records.",
    inputs=(
        RawInput("gpu", ("TARGET_INFO_GPU",),
                 {"id": "int", "deviceId": "int", "name": "text", "busLocation": "text",
                  "uuid": "text", "chipName": "text", "totalMemory": "int",
                  "memoryBandwidth": "int", "clockRate": "int", "smCount": "int",
                  "computeMajor": "int", "computeMinor": "int", "l2CacheSize": "int",
                  "asyncEngines": "int", "isDiscrete": "int"}),
        RawInput("cuda_gpu", ("TARGET_INFO_CUDA_GPU",),
                 {"deviceId": "int", "name": "text", "pciBusId": "text",
                  "globalMemorySize": "int", "globalMemoryBandwidth": "int",
                  "coreClockRate": "int", "numMultiprocessors": "int",
                  "computeCapabilityMajor": "int", "computeCapabilityMinor": "int",
                  "l2CacheSize": "int", "numMemcpyEngines": "int"}),
    ),
    sql=f"""
WITH g AS (SELECT coalesce(id, deviceId) AS device_id, * FROM raw_gpu),
c AS (SELECT * FROM raw_cuda_gpu),
j AS (
    SELECT coalesce(g.device_id, c.deviceId) AS device_id,
           coalesce(g.name, c.name) AS name,
           coalesce(g.busLocation, nullif(c.pciBusId, '<UNKNOWN_BUS_ID>')) AS bus_location,
           g.uuid AS uuid, g.chipName AS chip_name,
           coalesce(g.totalMemory,
                    CASE WHEN c.globalMemorySize BETWEEN 0 AND 1048575
                         THEN c.globalMemorySize * 1048576
                         ELSE c.globalMemorySize END) AS total_memory_bytes,
           coalesce(g.memoryBandwidth, {_scaled('c.globalMemoryBandwidth', 1000)})
               AS memory_bandwidth_bytes_per_s,
           coalesce(g.clockRate, {_scaled('c.coreClockRate', 1000)}) AS clock_rate_hz,
           coalesce(g.smCount, c.numMultiprocessors) AS sm_count,
           coalesce(g.computeMajor, c.computeCapabilityMajor) || '.' ||
               coalesce(g.computeMinor, c.computeCapabilityMinor) AS compute_capability,
           coalesce(g.l2CacheSize, c.l2CacheSize) AS l2_cache_bytes,
           coalesce(g.asyncEngines, c.numMemcpyEngines) AS copy_engines,
           g.isDiscrete <> 0 AS is_discrete
    FROM g FULL OUTER JOIN c ON c.deviceId = g.device_id)
SELECT device_id, arg_max(name, name) AS name, any_value(bus_location) AS bus_location,
       any_value(uuid) AS uuid, any_value(chip_name) AS chip_name,
       max(total_memory_bytes) AS total_memory_bytes,
       max(memory_bandwidth_bytes_per_s) AS memory_bandwidth_bytes_per_s,
       max(clock_rate_hz) AS clock_rate_hz, max(sm_count) AS sm_count,
       any_value(compute_capability) AS compute_capability, max(l2_cache_bytes) AS l2_cache_bytes,
       max(copy_engines) AS copy_engines, bool_or(is_discrete) AS is_discrete,
       NULL::BIGINT AS pcie_generation, NULL::BIGINT AS pcie_width
FROM j GROUP BY device_id""",
    columns={
        "device_id": "GPU id used by the GPU activity tables", "name": "GPU product name",
        "bus_location": "PCI bus location", "uuid": "GPU UUID", "chip_name": "chip, e.g. GH100",
        "total_memory_bytes": "device memory, bytes",
        "memory_bandwidth_bytes_per_s": "peak DRAM bandwidth as nsys records it, bytes/s",
        "clock_rate_hz": "SM clock, Hz", "sm_count": "streaming multiprocessors",
        "compute_capability": "e.g. 9.0", "l2_cache_bytes": "L2 size, bytes",
        "copy_engines": "asynchronous copy engines", "is_discrete": "discrete GPU",
        "pcie_generation": "PCIe generation when the export records it (no nsys version does yet)",
        "pcie_width": "PCIe lanes when recorded",
    },
    source_tables=("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"),
    capture_hint="nsys profile --trace=cuda",
)

OS_RUNTIME = ViewSpec(
    name="os_runtime",
    description="OS runtime calls (pthread, poll, read, ...) longer than nsys's threshold.",
    inputs=(RawInput("osrt", ("OSRT_API",),
                     {"start": "int", "end": "int", "globalTid": "int", "nameId": "int"}),),
    sql=f"""
SELECT o.start AS start_ns, o."end" AS end_ns, o."end" - o.start AS duration_ns,
       {_PID.format(g='o.globalTid')} AS pid, {_TID.format(g='o.globalTid')} AS tid,
       {_GPID.format(g='o.globalTid')} AS global_pid, o.globalTid AS global_tid,
       coalesce(s.value, 'unknown') AS name
FROM {_timed('raw_osrt')} o LEFT JOIN _strings s ON s.id = o.nameId""",
    columns={"start_ns": "ns", "end_ns": "ns", "duration_ns": "ns", **_THREAD_DOC,
             "name": "OS call name"},
    source_tables=("OSRT_API",),
    capture_hint="nsys profile --trace=cuda,nvtx,osrt",
)

GPU_METRICS = ViewSpec(
    name="gpu_metrics",
    description="GPU metrics samples (SM active, DRAM and PCIe throughput, ...).",
    inputs=(
        RawInput("metric", ("GPU_METRICS",),
                 {"timestamp": "int", "typeId": "int", "metricId": "int", "value": "int"}),
        RawInput("metric_info", ("TARGET_INFO_GPU_METRICS",),
                 {"typeId": "int", "metricId": "int", "metricName": "text", "typeName": "text"}),
    ),
    sql=f"""
WITH info AS (SELECT typeId, metricId, any_value(metricName) AS metric_name,
                     any_value(typeName) AS type_name
              FROM raw_metric_info GROUP BY 1, 2)
SELECT m.timestamp AS timestamp_ns, m.typeId & 255 AS device_id, m.typeId AS type_id,
       i.type_name, coalesce(i.metric_name, 'metric ' || m.metricId) AS metric_name,
       m.value AS value
FROM {_timed('raw_metric', 'timestamp', None)} m
LEFT JOIN info i ON i.typeId = m.typeId AND i.metricId = m.metricId""",
    columns={"timestamp_ns": "sample time, ns",
             "device_id": "GPU (typeId & 255, the convention NVIDIA's recipes use)",
             "type_id": "nsys metric type id", "type_name": "metric set name",
             "metric_name": "metric, e.g. 'DRAM Read Bandwidth [Throughput %]'",
             "value": "sample value (percent for throughput metrics)"},
    source_tables=("GPU_METRICS",),
    capture_hint="nsys profile --gpu-metrics-devices=all",
)

UM_PAGE_FAULTS = ViewSpec(
    name="um_page_faults",
    description=("Unified-memory page faults: one row per CPU fault, and per GPU fault group "
                 "(the faults of one page handled together)."),
    inputs=(
        RawInput("gpu_fault", ("CUDA_UM_GPU_PAGE_FAULT_EVENTS",),
                 {"start": "int", "end": "int", "globalPid": "int", "deviceId": "int",
                  "address": "int", "numberOfPageFaults": "int", "faultAccessType": "int"}),
        RawInput("cpu_fault", ("CUDA_UM_CPU_PAGE_FAULT_EVENTS",),
                 {"start": "int", "globalPid": "int", "address": "int"}),
    ),
    sql=f"""
SELECT 'gpu' AS side, g.start AS start_ns, g."end" AS end_ns,
       {_PID.format(g='g.globalPid')} AS pid, {_GPID.format(g='g.globalPid')} AS global_pid,
       g.deviceId AS device_id, g.address AS address,
       greatest(coalesce(g.numberOfPageFaults, 1), 1) AS faults,
       coalesce(a.name, 'kind_' || g.faultAccessType) AS access_type
FROM {_timed('raw_gpu_fault')} g
LEFT JOIN _enum_um_access a ON a.id = g.faultAccessType
UNION ALL
SELECT 'cpu', c.start, NULL, {_PID.format(g='c.globalPid')}, {_GPID.format(g='c.globalPid')},
       NULL, c.address, 1, NULL
FROM {_timed('raw_cpu_fault', 'start', None)} c""",
    derived={"duration_ns": "end_ns - start_ns"},
    columns={
        "side": "gpu (a fault group raised by a kernel) or cpu (a host access)",
        "start_ns": "fault time, ns on the trace timeline (NULL if missing or invalid)",
        "end_ns": "GPU fault group: when the driver finished handling it, ns; NULL for CPU "
                  "faults, which nsys records as instants",
        "duration_ns": "end_ns - start_ns: the GPU's time handling the group, ns (NULL for "
                       "CPU faults)",
        "pid": "process id",
        "global_pid": "nsys packed process key; use for joins",
        "device_id": "GPU that faulted (NULL for CPU faults)",
        "address": "virtual address of the page",
        "faults": "page faults: numberOfPageFaults of a GPU group, 1 for a CPU fault",
        "access_type": "GPU faults: read, write, atomic, prefetch or unknown (NULL for CPU)",
    },
    source_tables=("CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS"),
    capture_hint=("nsys profile --trace=cuda --cuda-um-cpu-page-faults=true "
                  "--cuda-um-gpu-page-faults=true"),
)

GRAPH_TRACE_INPUT = RawInput(
    "graph_trace", ("CUPTI_ACTIVITY_KIND_GRAPH_TRACE",),
    {"start": "int", "end": "int", "deviceId": "int", "streamId": "int", "correlationId": "int",
     "globalPid": "int", "graphId": "int", "graphExecId": "int"},
)

CUDA_GRAPHS = ViewSpec(
    name="cuda_graphs",
    description=(
        "One row per CUDA graph launch: the host launch call joined to its GPU execution, "
        "from graph-level trace rows or from node-level kernels/copies."
    ),
    inputs=(GRAPH_TRACE_INPUT,),
    depends=("api_calls", "kernels", "memcpys", "memsets"),
    sql=f"""
WITH launches AS (
    SELECT global_pid, correlation_id, any_value(pid) AS pid, any_value(tid) AS tid,
           min(start_ns) AS api_start_ns, max(end_ns) AS api_end_ns, any_value(name) AS api_name
    FROM api_calls WHERE category = 'graph_launch' GROUP BY 1, 2),
graph_level AS (
    SELECT globalPid AS global_pid, correlationId AS correlation_id,
           min(start) AS gpu_start_ns, max("end") AS gpu_end_ns, any_value(deviceId) AS device_id,
           any_value(streamId) AS stream_id, any_value(graphId) AS graph_id,
           any_value(graphExecId) AS graph_exec_id, 0 AS n_kernels, 0 AS n_copies,
           'graph' AS trace_level
    FROM {_timed('raw_graph_trace')} GROUP BY 1, 2),
nodes AS (
    SELECT global_pid, correlation_id, start_ns, end_ns, device_id, stream_id, graph_id,
           1 AS k, 0 AS c
    FROM kernels WHERE graph_node_id IS NOT NULL
    UNION ALL
    SELECT global_pid, correlation_id, start_ns, end_ns, device_id, stream_id, NULL, 0, 1
    FROM memcpys WHERE graph_node_id IS NOT NULL
    UNION ALL
    SELECT global_pid, correlation_id, start_ns, end_ns, device_id, stream_id, NULL, 0, 1
    FROM memsets WHERE graph_node_id IS NOT NULL),
node_level AS (
    SELECT global_pid, correlation_id, min(start_ns), max(end_ns), any_value(device_id),
           any_value(stream_id), any_value(graph_id), NULL::BIGINT, sum(k)::BIGINT,
           sum(c)::BIGINT, 'node'
    FROM nodes GROUP BY 1, 2),
gpu AS (SELECT * FROM graph_level UNION ALL SELECT * FROM node_level)
SELECT coalesce(l.global_pid, g.global_pid) AS global_pid,
       coalesce(l.pid, (g.global_pid >> 24) & 16777215) AS pid, l.tid AS tid,
       coalesce(l.correlation_id, g.correlation_id) AS correlation_id,
       l.api_name, l.api_start_ns, l.api_end_ns, g.gpu_start_ns, g.gpu_end_ns,
       g.gpu_end_ns - g.gpu_start_ns AS gpu_duration_ns,
       g.gpu_start_ns - l.api_start_ns AS launch_to_start_ns,
       g.device_id, g.stream_id, g.graph_id, g.graph_exec_id,
       coalesce(g.n_kernels, 0) AS n_kernels, coalesce(g.n_copies, 0) AS n_copies,
       coalesce(g.trace_level, 'api_only') AS trace_level
FROM launches l FULL OUTER JOIN gpu g
  ON g.global_pid = l.global_pid AND g.correlation_id = l.correlation_id""",
    columns={
        "global_pid": "packed process key", "pid": "process id", "tid": "launching thread id",
        "correlation_id": "correlation id of the launch",
        "api_name": "cudaGraphLaunch / cuGraphLaunch (NULL for device-side launches)",
        "api_start_ns": "launch call entry, ns", "api_end_ns": "launch call return, ns",
        "gpu_start_ns": "first GPU work of the launch, ns", "gpu_end_ns": "last GPU work end, ns",
        "gpu_duration_ns": "ns", "launch_to_start_ns": "api start -> GPU start, ns",
        "device_id": "GPU", "stream_id": "stream", "graph_id": "graph id when recorded",
        "graph_exec_id": "executable graph id when recorded",
        "n_kernels": "kernels traced inside the launch (node-level tracing only)",
        "n_copies": "copies/memsets traced inside the launch (node-level tracing only)",
        "trace_level": "graph (one record per launch), node (per-node records) or api_only",
    },
    source_tables=("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", "CUPTI_ACTIVITY_KIND_RUNTIME"),
    capture_hint="nsys profile --trace=cuda --cuda-graph-trace=node",
)

VIEWS: dict[str, ViewSpec] = {
    v.name: v
    for v in (KERNELS, KERNEL_CONFIGS, MEMCPYS, MEMSETS, API_CALLS, NVTX_RANGES, SYNCS, THREADS,
              PROCESSES, DEVICES, OS_RUNTIME, GPU_METRICS, CUDA_GRAPHS, UM_PAGE_FAULTS)
}

#: ``_<view>_stored`` (a view's columns and its hidden ones, ``ViewSpec.hidden``) -> the view
STORED: dict[str, str] = {f"_{v.name}_stored": v.name for v in VIEWS.values() if v.hidden}

#: the values of ``api_calls.category``
#: The CUDA version stamp nsys appends to API names (``cudaLaunchKernel_v7000``,
#: ``cudaStreamIsCapturing_v10000``): ``_v`` and the four- or five-digit CUDA version that
#: introduced the entry point. It names no other function, so it is removed. A one- to
#: three-digit ``_v2`` is part of a driver function's name (``cuGetProcAddress`` and
#: ``cuGetProcAddress_v2``, ``cuMemAlloc_v2`` are distinct entry points) and stays. nsys
#: stats removes only four-digit stamps; five-digit ones are removed here too, since
#: ``cudaLaunchKernelExC_v11060`` and ``cudaLaunchKernelExC`` are one function.
API_VERSION_STAMP = r"_v[0-9]{4,5}$"

API_CATEGORIES = ("launch", "graph_launch", "memcpy", "memset", "sync", "memory", "other")

#: the API-name classification behind ``api_calls.category``
API_CATEGORY_SQL = r"""
CASE
  WHEN regexp_matches(n, '^cu(da)?GraphLaunch') THEN 'graph_launch'
  WHEN regexp_matches(n, '^cu(da)?Launch') AND NOT regexp_matches(n, 'HostFunc') THEN 'launch'
  WHEN regexp_matches(n, '^cu(da)?Memcpy') THEN 'memcpy'
  WHEN regexp_matches(n, '^cu(da)?Memset') THEN 'memset'
  WHEN regexp_matches(n, 'Synchronize|^cu(da)?StreamWaitEvent|^cu(da)?StreamQuery'
                         || '|^cu(da)?EventQuery')
       THEN 'sync'
  WHEN regexp_matches(n, 'Malloc|Free|MemAlloc|MemFree|HostAlloc|HostRegister|MemPool')
       THEN 'memory'
  ELSE 'other'
END"""
