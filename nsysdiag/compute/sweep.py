"""Covered time of a union of intervals, per class, summed over instants: one sweep.

``ranges`` asks, for every instance, how much of its thread's time went into CUDA calls of
each kind (nested or overlapping calls counted once). (Its GPU's busy time, one class read
at millions of instants, comes from ``intervals.Coverage`` instead.) In SQL that is a
running maximum, a running sum and an ASOF join: sorts of every call of the trace,
windows over one huge partition that DuckDB runs on one core and spills to disk. Here the
instants are held in memory, sorted, and the intervals stream past them, as stored where
each key's come in order (a view written in the export's order), else sorted by DuckDB; a
compiled loop (``compiled.sweep_keys``) carries each key's running maximum and running
sums from batch to batch, answers each instant as the sweep passes it and adds the answer,
signed, to its group. Memory: the instants and a batch of intervals. (A compiled loop,
not per-batch numpy expressions, and the calls read as stored, not sorted: see
docs/performance.md.)

Definitions (the same as the SQL they replace): intervals of one key are taken by start
(ties: longer first, then lower class); each keeps the part beyond the furthest end seen so
far, a *piece* ``[s, e)`` credited to the interval's class. ``covered(key, t)[c]`` is the
total length of class-``c`` pieces of ``key`` before instant ``t`` (a piece containing
``t`` counts up to ``t``). The time of class ``c`` inside ``[a, b]`` is
``covered(key, b)[c] - covered(key, a)[c]``: instants at ``b`` with sign +1 and at ``a``
with sign -1, summed into one group.

``covered_windows`` asks the same of many windows, one each (``gpu_idle``: the host window
of every gap before a kernel): its probes are the windows' bounds, sorted in numpy
(already in order when each key's windows follow one another), with no group and sign
columns, and each window gets its own row of sums and the class of the piece holding its
start.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..views._compiled import find_values
from . import compiled, intervals

if TYPE_CHECKING:
    import pyarrow as pa

    from ..engine.protocols import ReportLike as Report

BATCH_ROWS = 1 << 20


def covered_sums(
    report: Report, intervals_sql: str, probes_sql: str, n_classes: int, n_groups: int,
    in_order: bool = False,
) -> np.ndarray:
    """Sum over probes of ``sign * covered(key, ts)``, per group and class.

    Parameters
    ----------
    intervals_sql
        A query with integer columns ``key``, ``start_ns``, ``end_ns`` and ``cls`` (0 to
        ``n_classes - 1``); rows with a NULL or an end before the start are ignored.
    probes_sql
        A query with integer columns ``key``, ``ts``, ``grp`` (0 to ``n_groups - 1``) and
        ``sign``; rows with a NULL key or ts count as covering nothing.
    in_order
        Read the intervals in the order ``intervals_sql`` gives them (a view written in
        the export's order) instead of sorted, when each key's come sorted by start, end
        descending and class. At the first interval out of order the sweep starts over on
        the sorted read.

    Returns
    -------
    numpy.ndarray
        int64 of shape (n_groups, n_classes).
    """
    got = report.sql(
        f"SELECT key, ts, grp, sign FROM ({probes_sql}) "
        "WHERE key IS NOT NULL AND ts IS NOT NULL ORDER BY key, ts").fetchnumpy()
    probes = tuple(np.asarray(got[c], dtype=np.int64) for c in ("key", "ts", "grp", "sign"))
    read = (f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
            "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL")
    if in_order:
        with intervals.stored_order(report, read, batch_rows=BATCH_ROWS) as reader:
            out = _swept(reader, probes, n_classes, n_groups)
        if out is not None:
            return out
    out = _swept(_sorted_read(report, read), probes, n_classes, n_groups)
    assert out is not None, "sorted intervals are in the sweep's order"
    return out


def covered_windows(
    report: Report, intervals_sql: str, key: np.ndarray, start: np.ndarray, end: np.ndarray,
    n_classes: int, in_order: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Covered time per class inside each window ``[start, end]`` of its key, and the class
    covering its start instant.

    Parameters
    ----------
    intervals_sql, n_classes, in_order
        As :func:`covered_sums`.
    key, start, end : int64 arrays
        The windows (``start <= end``), in any order; they come cheapest in runs of one
        key, each run in time order, one window after another.

    Returns
    -------
    sums : numpy.ndarray
        int64 of shape (len(key), n_classes): ``covered(key, end) - covered(key, start)``.
    at : numpy.ndarray
        int8: the class of the piece holding ``[start, start + 1)``, -1 where none does.
    """
    n = len(key)
    code, distinct = intervals.run_codes((key,))
    distinct = distinct[:, 0]
    # the probes: each window's start (2j) and end (2j + 1), each key's together (key k's
    # from heads[k] to pend[k]) and in time order
    pts = np.empty(2 * n, dtype=np.int64)
    pts[0::2], pts[1::2] = start, end
    pcode = np.repeat(code, 2)
    del code
    runs, heads, pend = intervals.runs(pcode)
    if len(runs) == len(distinct) and (
            (pcode[1:] != pcode[:-1]) | (pts[1:] >= pts[:-1])).all():
        pref = np.empty(0, dtype=np.int64)  # in order already: probe p is pref p
        heads[runs], pend[runs] = heads.copy(), pend.copy()
    else:
        pref = np.lexsort((pts, pcode))
        pts = pts[pref]
        counts = np.bincount(pcode, minlength=len(distinct))
        pend = np.cumsum(counts)
        heads = pend - counts
    del pcode
    read = (f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
            "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL")
    if in_order:
        with intervals.stored_order(report, read, batch_rows=BATCH_ROWS) as reader:
            out = _swept_windows(reader, distinct, heads, pts, pref, pend, n_classes, n)
        if out is not None:
            return out
    out = _swept_windows(_sorted_read(report, read), distinct, heads, pts, pref, pend,
                         n_classes, n)
    assert out is not None, "sorted intervals are in the sweep's order"
    return out


def window_causes(
    report: Report, intervals_sql: str, cause: np.ndarray, key: np.ndarray,
    start: np.ndarray, end: np.ndarray, limit: np.ndarray, codes: np.ndarray, pct: float,
    in_order: bool = False, max_runs: int = 1 << 16,
) -> np.ndarray | None:
    """gpu_idle's host cause of each window, finished inside the sweep: what
    :func:`covered_windows` and ``gpu_idle.host_causes`` give, without a row of sums per
    window (``compiled.sweep_causes``).

    Parameters
    ----------
    intervals_sql, in_order
        As :func:`covered_sums` (``n_classes`` 4: ``codes`` says what each class is).
    cause : int8 array
        The rows with ``cause < 0`` are windows; the others are skipped.
    key, start, end, limit : int64 arrays
        Row i's window is ``[start[i], min(end[i], limit[i])]`` of key ``key[i]``.
    codes : int64 array
        The cause of a window dominated by each class (4), by time outside them, then the
        classes of a copy and a sync call, then the causes the call at a window's start
        gives (copy, sync) unless most of the window (``pct``) was outside the classes.

    Returns
    -------
    numpy.ndarray or None
        int8, one per row: the cause of each window (-1 elsewhere); None when each key's
        windows do not come as one run, one after another in time (``covered_windows``
        answers that case).
    """
    room = min(max_runs, len(cause))
    run_key, run_head, run_end = (np.empty(room, dtype=np.int64) for _ in range(3))
    n = compiled.window_runs(cause, key, start, end, limit, run_key, run_head, run_end)
    if n < 0:
        return None
    order = np.argsort(run_key[:n], kind="stable")
    distinct = run_key[:n][order]
    if n and (distinct[1:] == distinct[:-1]).any():
        return None  # a key in two runs
    heads, pend = 2 * run_head[:n][order], 2 * run_end[:n][order]
    read = (f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
            "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL")

    def swept(reader: Iterable[pa.RecordBatch]) -> np.ndarray | None:
        keys = _key_state(heads)
        cum = np.zeros((n, 4), dtype=np.int64)
        opened = np.zeros((n, 6), dtype=np.int64)
        out = np.full(len(cause), -1, dtype=np.int8)
        for batch in reader:
            if not batch.num_rows:
                continue
            code, istart, iend, icls = _coded(batch, distinct)
            if compiled.sweep_causes(code, istart, iend, icls, cause, start, end, limit,
                                      pend, keys, cum, opened, codes, pct, out) >= 0:
                return None
        compiled.finish_causes(cause, start, end, limit, pend, keys, cum, opened, codes,
                                pct, out)
        return out

    if in_order:
        with intervals.stored_order(report, read, batch_rows=BATCH_ROWS) as reader:
            out = swept(reader)
        if out is not None:
            return out
    out = swept(_sorted_read(report, read))
    assert out is not None, "sorted intervals are in the sweep's order"
    return out


def _swept_windows(reader: Iterable[pa.RecordBatch], distinct: np.ndarray, heads: np.ndarray,
                   pts: np.ndarray, pref: np.ndarray, pend: np.ndarray, n_classes: int,
                   n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The answer of :func:`covered_windows` from the interval batches of ``reader`` and
    the probes (sorted; key k's from ``heads[k]`` to ``pend[k]``); None at an interval out
    of order for its key."""
    keys = _key_state(heads)
    cum = np.zeros((len(distinct), n_classes), dtype=np.int64)
    window = np.zeros((n, n_classes), dtype=np.int64)
    at = np.full(n, -1, dtype=np.int8)
    for batch in reader:
        if not batch.num_rows:
            continue
        code, start, end, cls = _coded(batch, distinct)
        if compiled.sweep_windows(code, start, end, cls, pts, pref, pend, keys, cum, window,
                                   at) >= 0:
            return None
    compiled.finish_windows(pts, pref, pend, keys, cum, window, at)
    return window, at


def _key_state(heads: np.ndarray) -> np.ndarray:
    """The per-key state of a sweep before its first interval (``compiled.KEY_STATE``
    slots; the next probe of key k is ``heads[k]``)."""
    keys = np.zeros((len(heads), compiled.KEY_STATE), dtype=np.int64)
    keys[:, compiled.K_PROBE] = heads
    keys[:, compiled.K_LAST_E] = -1  # no piece yet
    return keys


def _coded(batch: pa.RecordBatch, distinct: np.ndarray) -> tuple[np.ndarray, ...]:
    """A batch of intervals (key, start, end, class) as int64 arrays, each key replaced by
    its index among the sorted ``distinct`` (-1: not among them)."""
    key, start, end, cls = (col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                            for col in batch.columns)
    code = np.empty(len(key), dtype=np.int64)
    find_values(key, distinct, code)
    return code, start, end, cls


def _sorted_read(report: Report, sql: str) -> pa.RecordBatchReader:
    """The intervals of ``sql`` in the order the sweep takes them."""
    return report.sql(f"{sql} ORDER BY key, start_ns, end_ns DESC, cls").to_arrow_reader(
        BATCH_ROWS)


def _swept(reader: Iterable[pa.RecordBatch], probes: tuple[np.ndarray, ...], n_classes: int,
           n_groups: int) -> np.ndarray | None:
    """The sums of ``covered_sums`` over the interval batches of ``reader`` and the probes
    (key, ts, grp, sign; sorted by key and ts); None at an interval out of order for its
    key."""
    pkey, pts, pgrp, psign = probes
    distinct, heads, pend = intervals.runs(pkey)
    keys = _key_state(heads)
    cum = np.zeros((len(distinct), n_classes), dtype=np.int64)
    out = np.zeros((n_groups, n_classes), dtype=np.int64)
    for batch in reader:
        if not batch.num_rows:
            continue
        code, start, end, cls = _coded(batch, distinct)
        if compiled.sweep_keys(code, start, end, cls, pts, pgrp, psign, pend, keys, cum,
                                out) >= 0:
            return None
    compiled.finish_keys(pts, pgrp, psign, pend, keys, cum, out)
    return out
