"""One process of an export: every table read as if the export held that process alone.

An export of ``nsys profile torchrun ...`` or ``mpirun nsys profile ...`` with one output
holds every rank's process. To diagnose one rank (the straggler of ``nsysdiag ranks``, or
a process the user names with ``--pid``), :class:`ProcessSource` wraps the export's
adapter and keeps, of each table that records a process, the rows of that process: by
``globalPid`` (kernels, copies, memsets, synchronizations, graphs, unified-memory events,
processes) or else ``globalTid`` (CUDA API calls, NVTX ranges and domains, OS runtime
calls, thread names), whose bits 24-47 are the process id. Tables that record no process
(strings, GPUs, the session start, GPU metrics sampled per device) are read whole.

Other processes' work on the GPUs the process used is left out with the rest, so the
diagnosis of one process cannot name it as other GPU work: for the ranks of a job, each on
a GPU of its own, nothing is lost; where processes share a GPU, :meth:`ProcessSource.sharing`
names them (``Report`` notes it on stderr) and the whole export is the one to diagnose for
interference. (Keeping the other processes' work on those GPUs without their API calls
does not work: their kernels then have no launch call, which the capture check rightly
takes for lost records.)

The filter runs on the Arrow batches the inner adapter streams, so every format and its
fast paths read the same way; the views built over it are cached under their own key
(``identity``).
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from .base import Source

#: the columns that name a row's process, the first present taken
PROCESS_COLUMNS = ("globalPid", "globalTid")
#: the tables of work on a GPU, by which processes share one
GPU_WORK = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET")


def process_of(key: pa.Array) -> pa.Array:
    """The process id in nsys's packed ``globalPid``/``globalTid``: bits 24-47."""
    return pc.bit_wise_and(pc.shift_right(key, 24), 0xFFFFFF)


class ProcessSource(Source):
    """The rows of process ``pid`` of ``inner``'s tables (see the module's docstring)."""

    def __init__(self, inner: Source, pid: int):
        super().__init__(inner.path)
        self.inner = inner
        self.pid = pid
        self.kind = inner.kind
        self._counts: dict[str, int] = {}

    def tables(self) -> dict[str, dict[str, str]]:
        return self.inner.tables()

    def key_column(self, table: str) -> str | None:
        """The column of ``table`` that names a row's process (None: it names none)."""
        have = self.tables().get(table, {})
        return next((c for c in PROCESS_COLUMNS if c in have), None)

    def row_count(self, table: str) -> int:
        key = self.key_column(table)
        if key is None:
            return self.inner.row_count(table)
        if table not in self._counts:
            self._counts[table] = sum(b.num_rows for b in self.read(table, {key: "int"}))
        return self._counts[table]

    def _read_present(self, table: str, columns: Mapping[str, str], where: str | None
                      ) -> pa.RecordBatchReader:
        key = self.key_column(table)
        if key is None:
            return self.inner.read(table, columns, where)
        inner = self.inner.read(table, {**columns, key: "int"}, where)
        schema = pa.schema([f for f in inner.schema if f.name in columns])

        def batches():
            for batch in inner:
                kept = batch.filter(pc.equal(process_of(batch.column(key)), self.pid))
                yield pa.record_batch([kept.column(f.name) for f in schema], schema=schema)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def identity(self) -> str:
        return f"{self.inner.identity()}|pid {self.pid}"

    def sharing(self) -> dict[int, list[int]]:
        """GPU -> the other processes that ran work on it, for each GPU this process ran
        work on (work that reading this process alone leaves out)."""
        on: dict[int, set[int]] = {}  # GPU -> the processes that ran work on it
        for table in GPU_WORK:
            if not {"deviceId", "globalPid"} <= self.tables().get(table, {}).keys():
                continue
            for batch in self.inner.read(table, {"deviceId": "int", "globalPid": "int"}):
                seen = pa.table({"device": batch.column("deviceId"),
                                 "pid": process_of(batch.column("globalPid"))})
                pairs = seen.group_by(["device", "pid"]).aggregate([]).drop_null()
                for device, pid in zip(pairs["device"].to_pylist(), pairs["pid"].to_pylist()):
                    on.setdefault(device, set()).add(pid)
        return {device: sorted(pids - {self.pid}) for device, pids in sorted(on.items())
                if self.pid in pids and len(pids) > 1}

    def close(self) -> None:
        self.inner.close()


def processes(source: Source) -> dict[int, str]:
    """Process id -> name of the processes ``source`` records (``PROCESSES``; empty where
    the export has no such table)."""
    if "PROCESSES" not in source.tables():
        return {}
    table = pa.Table.from_batches(list(source.read("PROCESSES", {"pid": "int", "name": "text"})))
    return {int(p): n or "" for p, n in zip(table["pid"].to_pylist(),
                                            table["name"].to_pylist()) if p is not None}


def only_process(source: Source, pid: int) -> ProcessSource:
    """``source`` restricted to process ``pid``; a :class:`UsageError` naming the export's
    processes when it records none of that id."""
    known = processes(source)
    if known and pid not in known:
        listed = ", ".join(f"{p} ({n})" if n else str(p) for p, n in sorted(known.items())[:8])
        more = f" and {len(known) - 8} more" if len(known) > 8 else ""
        raise UsageError(f"no process {pid} in {source.path}; its processes: {listed}{more}")
    return ProcessSource(source, pid)
