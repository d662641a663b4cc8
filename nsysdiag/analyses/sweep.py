"""Covered time of a union of intervals, per class, summed over instants: one sorted sweep.

``ranges`` asks, for every instance, how much of its thread's time went into CUDA calls of
each kind (nested or overlapping calls counted once). (Its GPU's busy time, one class read
at millions of instants, comes from ``intervals.Coverage`` instead.) In SQL that is a
running maximum, a running sum and an ASOF join: sorts of what can be 20 million calls,
windows over one huge partition that DuckDB runs on one core and spills to disk. Here
DuckDB sorts the intervals and the instants once each and streams both; a compiled loop
(``_compiled.sweep``) carries the running maximum and the running sums from batch to
batch, answers each instant as the sweep passes it and adds the answer, signed, to its
group. Memory stays at a batch of each. (The loop replaced per-batch numpy expressions:
at 10M kernels and 22M calls the two sweeps ``ranges`` then ran took 5.6 s, 2.3 s with
the loop.)

Definitions (the same as the SQL they replace): intervals of one key are taken by start
(ties: longer first, then lower class); each keeps the part beyond the furthest end seen so
far, a *piece* ``[s, e)`` credited to the interval's class. ``covered(key, t)[c]`` is the
total length of class-``c`` pieces of ``key`` before instant ``t`` (a piece containing
``t`` counts up to ``t``). The time of class ``c`` inside ``[a, b]`` is
``covered(key, b)[c] - covered(key, a)[c]``: instants at ``b`` with sign +1 and at ``a``
with sign -1, summed into one group.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from ..views._compiled import find_values
from ..views.build import STEP_OPTIONS, sql_string
from . import _compiled, intervals

if TYPE_CHECKING:
    from ..report import Report

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
        descending and class: the probes are then held in memory and every key is swept
        at once (``_compiled.sweep_keys``). At the first interval out of order the sums
        start over on the sorted read.

    Returns
    -------
    numpy.ndarray
        int64 of shape (n_groups, n_classes).
    """
    if in_order:
        out = _in_order_sums(report, intervals_sql, probes_sql, n_classes, n_groups)
        if out is not None:
            return out
    out = np.zeros((n_groups, n_classes), dtype=np.int64)
    # one connection streams one result at a time: the probes go through a sorted file
    target = report.scratch_dir() / f"probes-{uuid.uuid4().hex}.parquet"
    report.con.execute("SET preserve_insertion_order = true")  # keep ORDER BY in the file
    try:
        report.sql(
            f"COPY (SELECT key, ts, grp, sign FROM ({probes_sql}) "
            "WHERE key IS NOT NULL AND ts IS NOT NULL ORDER BY key, ts) "
            f"TO {sql_string(str(target))} ({STEP_OPTIONS})"
        ).fetchall()
    finally:
        report.con.execute("SET preserve_insertion_order = false")
    try:
        _run_sweep(
            _arrays(report.sql(
                f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
                "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL "
                "ORDER BY key, start_ns, end_ns DESC, cls"
            ).to_arrow_reader(BATCH_ROWS)),
            _arrays(pq.ParquetFile(target).iter_batches(BATCH_ROWS)),
            out,
        )
    finally:
        target.unlink(missing_ok=True)
    return out


def _in_order_sums(
    report: Report, intervals_sql: str, probes_sql: str, n_classes: int, n_groups: int,
) -> np.ndarray | None:
    """``covered_sums`` with the intervals read as stored; None at an interval out of
    order for its key."""
    probes = report.sql(
        f"SELECT key, ts, grp, sign FROM ({probes_sql}) "
        "WHERE key IS NOT NULL AND ts IS NOT NULL ORDER BY key, ts").fetchnumpy()
    pkey, pts, pgrp, psign = (np.asarray(probes[c], dtype=np.int64)
                              for c in ("key", "ts", "grp", "sign"))
    distinct, heads, pend = intervals.runs(pkey)
    keys = np.zeros((len(distinct), _compiled.KEY_STATE), dtype=np.int64)
    keys[:, _compiled.K_PROBE] = heads
    keys[:, _compiled.K_LAST_E] = -1  # no piece yet
    cum = np.zeros((len(distinct), n_classes), dtype=np.int64)
    out = np.zeros((n_groups, n_classes), dtype=np.int64)
    with intervals.stored_order(
        report, f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
        "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL",
        batch_rows=BATCH_ROWS,
    ) as reader:
        for key, start, end, cls in _arrays(reader):
            code = np.empty(len(key), dtype=np.int64)
            find_values(key, distinct, code)
            if _compiled.sweep_keys(code, start, end, cls, pts, pgrp, psign, pend, keys,
                                    cum, out) >= 0:
                return None
    _compiled.finish_keys(pts, pgrp, psign, pend, keys, cum, out)
    return out


def _arrays(batches) -> Iterator[tuple[np.ndarray, ...]]:
    for batch in batches:
        if batch.num_rows:
            yield tuple(col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                        for col in batch.columns)


def _run_sweep(
    intervals: Iterator[tuple[np.ndarray, ...]], probes: Iterator[tuple[np.ndarray, ...]],
    out: np.ndarray,
) -> None:
    """Feed the compiled sweep (``_compiled.sweep``) the interval batches, handing it the
    probes batch by batch as it asks for them."""
    state = np.zeros(_compiled.SWEEP_STATE, dtype=np.int64)
    cum = np.zeros(out.shape[1], dtype=np.int64)
    pending = [np.empty(0, dtype=np.int64)] * 4  # key, ts, grp, sign not yet answered
    more, p = True, 0
    empty = (np.empty(0, dtype=np.int64),) * 4
    for batch, final in itertools.chain(((b, False) for b in intervals), [(empty, True)]):
        while True:
            status, p = _compiled.sweep(*batch, *pending, p, more, final, state, cum, out)
            if status == 0:
                break
            nxt = next(probes, None)
            if nxt is None:
                more = False
            else:
                pending = [np.concatenate([a[p:], b]) for a, b in zip(pending, nxt)]
                p = 0
