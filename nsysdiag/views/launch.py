"""The launch call of each kernel: the ``launch_*`` columns of the ``kernels`` view.

A kernel's launch call is the API call of category ``launch`` or ``graph_launch`` with the
kernel's (global_pid, correlation_id); several such calls (a runtime call and the driver
call inside it) count as one, from the first entry to the last return, made by the thread
that entered first. The calls are merged per key once, sorted, and each batch of kernels,
as it is read, finds its keys by a galloping search (``_compiled``): calls and kernels both
come almost in correlation order, so the sort and the searches cost little more than a
pass, where DuckDB's aggregate and hash join took half the view's build time
(docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa

from . import _compiled

#: the launch calls with a process and a correlation id (the api_calls view)
_CALLS = ("SELECT global_pid, correlation_id, start_ns, end_ns, global_tid FROM api_calls "
          "WHERE category IN ('launch', 'graph_launch') "
          "AND global_pid IS NOT NULL AND correlation_id IS NOT NULL")

#: the columns added to each batch of kernels
LAUNCH_FIELDS = (pa.field("launch_start_ns", pa.int64()), pa.field("launch_end_ns", pa.int64()),
                 pa.field("launch_global_tid", pa.int64()))


class LaunchCalls:
    """The launch calls merged per key (process code, correlation id), sorted by key."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        # api_calls keeps the export's order (start order, so correlation order in each
        # process): read in that order, one process' calls need no sort at all
        con.execute("SET preserve_insertion_order = true")
        try:
            calls = con.sql(_CALLS).fetchnumpy()
        finally:
            con.execute("SET preserve_insertion_order = false")
        pid = _values(calls.pop("global_pid"))[0]
        #: the distinct global_pids, sorted: a process' code is its index
        self.pids = _distinct(pid)
        code = np.empty(len(pid), dtype=np.int64)
        _compiled.find_values(pid, self.pids, code)
        del pid
        correlation = _values(calls.pop("correlation_id"))[0]
        order = None if _compiled.ascending(code, correlation) else _key_order(code, correlation)
        if order is not None:
            code, correlation = code[order], correlation[order]
        # each column is put in key order, one at a time, so that one column's copy is alive
        # at once
        (start, start_ok), (end, end_ok), (tid, _) = (
            _in_order(*_values(calls.pop(c)), order) for c in ("start_ns", "end_ns", "global_tid"))
        del order
        n = _compiled.merge_calls(code, correlation, start, start_ok, end, end_ok, tid,
                                  code, correlation, start, start_ok, end, end_ok, tid)
        self.code, self.correlation = code[:n], correlation[:n]
        self.start, self.start_ok = start[:n], start_ok[:n]
        self.end, self.end_ok, self.tid = end[:n], end_ok[:n], tid[:n]

    def added_to(self, kernels: pa.RecordBatchReader, pid: str = "globalPid",
                 correlation: str = "correlationId") -> pa.RecordBatchReader:
        """``kernels`` (a raw stream with the columns ``pid`` and ``correlation``) with the
        ``LAUNCH_FIELDS`` of each row added; NULL where no launch call has its key."""
        schema = kernels.schema
        for f in LAUNCH_FIELDS:
            schema = schema.append(f)

        def batches() -> Iterator[pa.RecordBatch]:
            for batch in kernels:
                added = self.lookup(batch.column(pid), batch.column(correlation))
                yield pa.RecordBatch.from_arrays([*batch.columns, *added], schema=schema)

        return pa.RecordBatchReader.from_batches(schema, batches())

    def lookup(self, pid: pa.Array, correlation: pa.Array) -> list[pa.Array]:
        """The launch columns (``LAUNCH_FIELDS``) of kernels with these keys."""
        if not len(self.code):
            return [pa.nulls(len(pid), f.type) for f in LAUNCH_FIELDS]
        (pid, pid_ok), (correlation, ok) = arrow_values(pid), arrow_values(correlation)
        code = np.empty(len(pid), dtype=np.int64)
        _compiled.find_values(pid, self.pids, code)
        ok &= pid_ok & (code >= 0)
        code[code < 0] = 0
        at = np.empty(len(pid), dtype=np.int64)
        _compiled.find_keys(self.code, self.correlation, code, correlation, ok, at)
        found = at >= 0
        at[~found] = 0
        started = found & self.start_ok[at]
        return [pa.array(self.start[at], mask=~started),
                pa.array(self.end[at], mask=~(found & self.end_ok[at])),
                pa.array(self.tid[at], mask=~started)]


def _key_order(code: np.ndarray, correlation: np.ndarray) -> np.ndarray:
    """The order of the keys (code, correlation), which come almost in correlation order
    (processes interleaved): a stable sort of nearly sorted keys is cheap, and of codes
    that fit 16 bits a radix sort."""
    order = np.argsort(correlation, kind="stable")
    if code.any():
        small = code.astype(np.int16) if code.max() <= np.iinfo(np.int16).max else code
        order = order[np.argsort(small[order], kind="stable")]
    return order


def _in_order(values: np.ndarray, ok: np.ndarray | None,
              order: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(values, validity) put in ``order`` (None: as they are)."""
    if ok is None:
        ok = np.ones(len(values), dtype=bool)
    return (values, ok) if order is None else (values[order], ok[order])


def _values(column: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(int64 values, validity or None when all are valid) of a column of ``fetchnumpy``
    (a masked array where there are NULLs). Not Arrow: read as Arrow the calls came
    faster but the view was slower to build (docs/performance.md)."""
    if isinstance(column, np.ma.MaskedArray) and np.ma.is_masked(column):
        ok = ~np.ma.getmaskarray(column)
        return np.ma.getdata(column).astype(np.int64, copy=False), ok
    return np.asarray(np.ma.getdata(column), dtype=np.int64), None


def arrow_values(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, validity) of an Arrow integer column (NULL read as 0)."""
    if column.null_count:
        return (column.fill_null(0).to_numpy().astype(np.int64, copy=False),
                column.is_valid().to_numpy(zero_copy_only=False))
    return column.to_numpy().astype(np.int64, copy=False), np.ones(len(column), dtype=bool)


def _distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of an array made of long runs (one process' calls come
    together), without sorting all of it."""
    if not len(values):
        return values[:0]
    heads = np.r_[0, np.flatnonzero(values[1:] != values[:-1]) + 1]
    return np.unique(values[heads])
