"""Covered time of a union of intervals, per class, summed over instants: one sorted sweep.

``ranges`` asks, for every instance, how much of its thread's time went into CUDA calls of
each kind (nested or overlapping calls counted once), and how long its GPU was busy in its
window and while its work was pending. In SQL that is a running maximum, a running sum and
an ASOF join: three sorts of what can be 20 million calls or 10 million kernels, windows
over one huge partition that DuckDB runs on one core and spills to disk. Here DuckDB sorts
the intervals and the instants once each and streams both; numpy carries the running
maximum and the running sums from batch to batch, answers each instant as the sweep passes
it and adds the answer, signed, to its group. Memory stays at a batch of each.

Definitions (the same as the SQL they replace): intervals of one key are taken by start
(ties: longer first, then lower class); each keeps the part beyond the furthest end seen so
far, a *piece* ``[s, e)`` credited to the interval's class. ``covered(key, t)[c]`` is the
total length of class-``c`` pieces of ``key`` before instant ``t`` (a piece containing
``t`` counts up to ``t``). The time of class ``c`` inside ``[a, b]`` is
``covered(key, b)[c] - covered(key, a)[c]``: instants at ``b`` with sign +1 and at ``a``
with sign -1, summed into one group.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow.parquet as pq

from ..views.build import sql_string
from . import intervals

if TYPE_CHECKING:
    from ..report import Report

BATCH_ROWS = 1 << 20


def covered_sums(
    report: Report, intervals_sql: str, probes_sql: str, n_classes: int, n_groups: int,
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

    Returns
    -------
    numpy.ndarray
        int64 of shape (n_groups, n_classes).
    """
    out = np.zeros((n_groups, n_classes), dtype=np.int64)
    # one connection streams one result at a time: the probes go through a sorted file
    target = report.scratch_dir() / f"probes-{uuid.uuid4().hex}.parquet"
    report.con.execute("SET preserve_insertion_order = true")  # keep ORDER BY in the file
    try:
        report.sql(
            f"COPY (SELECT key, ts, grp, sign FROM ({probes_sql}) "
            "WHERE key IS NOT NULL AND ts IS NOT NULL ORDER BY key, ts) "
            f"TO {sql_string(str(target))} (FORMAT parquet, COMPRESSION lz4_raw)"
        ).fetchall()
    finally:
        report.con.execute("SET preserve_insertion_order = false")
    try:
        probes = _Probes(_arrays(pq.ParquetFile(target).iter_batches(BATCH_ROWS)), out)
        sweep = _Sweep(probes, n_classes)
        sorted_intervals = report.sql(
            f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
            "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL "
            "ORDER BY key, start_ns, end_ns DESC, cls"
        ).to_arrow_reader(BATCH_ROWS)
        for key, start, end, cls in _arrays(sorted_intervals):
            sweep.feed(key, start, end, cls)
        sweep.finish()
    finally:
        target.unlink(missing_ok=True)
    return out


def _arrays(batches) -> Iterator[tuple[np.ndarray, ...]]:
    for batch in batches:
        if batch.num_rows:
            yield tuple(col.to_numpy(zero_copy_only=False).astype(np.int64)
                        for col in batch.columns)


class _Probes:
    """The sorted probe stream: hands out the probes of one key below a time limit, and
    adds their answers into ``out``."""

    def __init__(self, batches: Iterator[tuple[np.ndarray, ...]], out: np.ndarray):
        self.batches, self.out = batches, out
        self.key = self.ts = self.grp = self.sign = np.empty(0, dtype=np.int64)
        self._more = True

    def _fill(self) -> bool:
        """Append the next batch; False at the end of the stream."""
        if self._more:
            nxt = next(self.batches, None)
            if nxt is None:
                self._more = False
            else:
                self.key, self.ts, self.grp, self.sign = (
                    np.concatenate([a, b]) for a, b in
                    zip((self.key, self.ts, self.grp, self.sign), nxt))
                return True
        return False

    def take(self, key: int, limit: int | None) -> Iterator[tuple[np.ndarray, ...]]:
        """Remove and yield, in chunks, (ts, grp, sign) of the probes of ``key`` with
        ts < ``limit`` (all of them when None); probes of smaller keys are dropped (they
        cover nothing)."""
        while True:
            lo = np.searchsorted(self.key, key, side="left")
            hi = np.searchsorted(self.key, key, side="right")
            if limit is not None:
                hi = lo + np.searchsorted(self.ts[lo:hi], limit, side="left")
            if hi > lo:
                yield self.ts[lo:hi], self.grp[lo:hi], self.sign[lo:hi]
            exhausted = hi == len(self.key)  # the wanted run may go on in the next batch
            self.key, self.ts, self.grp, self.sign = (
                a[hi:] for a in (self.key, self.ts, self.grp, self.sign))
            if not exhausted or not self._fill():
                return

    def add(self, grp: np.ndarray, sign: np.ndarray, values: np.ndarray) -> None:
        np.add.at(self.out, grp, values * sign[:, None])


class _Sweep:
    """The running state over intervals sorted by key, start."""

    def __init__(self, probes: _Probes, n_classes: int):
        self.probes, self.n = probes, n_classes
        self.key: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.max_end: int | None = None  # furthest end of this key so far
        self.cum = np.zeros(self.n, dtype=np.int64)  # covered time per class, all pieces
        self.last: tuple[int, int, int] | None = None  # (s, e, cls) of the last piece

    def feed(self, key: np.ndarray, start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> None:
        bounds = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(key)]):
            self._segment(int(key[lo]), start[lo:hi], end[lo:hi], cls[lo:hi])

    def finish(self) -> None:
        if self.key is not None:
            self._answer(self.key, None)

    def _segment(self, key: int, start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> None:
        if key != self.key:
            if self.key is not None:
                self._answer(self.key, None)  # the rest of the previous key's probes
            self.key = key
            self._reset()
        # furthest end before each interval: the carried one, then the running maximum
        before, self.max_end = intervals.ends_before(start, end, self.max_end)
        s = np.maximum(start, before)
        keep = end > s
        if not keep.any():
            return
        s, e, c = s[keep], end[keep], cls[keep]
        cums = np.empty((len(s), self.n), dtype=np.int64)
        for k in range(self.n):
            np.cumsum(np.where(c == k, e - s, 0), out=cums[:, k])
        cums += self.cum
        # the probes before the last piece's start are answered within this batch
        self._answer(key, int(s[-1]), (s, e, c, cums))
        self.cum = cums[-1].copy()
        self.last = (int(s[-1]), int(e[-1]), int(c[-1]))

    def _answer(self, key: int, limit: int | None, pieces: tuple | None = None) -> None:
        for t, grp, sign in self.probes.take(key, limit):
            self.probes.add(grp, sign, self._covered(t, pieces))

    def _covered(self, t: np.ndarray, pieces: tuple | None) -> np.ndarray:
        """covered(key, t) per class for instants t of the current key, given this batch's
        pieces (None: after all of them)."""
        values = np.empty((len(t), self.n), dtype=np.int64)
        # j: the last piece of this batch starting at or before t (-1: none, use the state
        # carried from earlier batches)
        j = (np.searchsorted(pieces[0], t, side="right") - 1 if pieces is not None
             else np.full(len(t), -1))
        carried = j < 0
        if carried.any():
            values[carried] = self.cum
            if self.last is not None:
                ls, le, lc = self.last
                values[carried, lc] -= le - np.clip(t[carried], ls, le)
        if pieces is not None and not carried.all():
            s, e, c, cums = pieces
            ji = j[~carried]
            values[~carried] = cums[ji]
            rows = np.flatnonzero(~carried)
            values[rows, c[ji]] -= e[ji] - np.clip(t[~carried], s[ji], e[ji])
        return values
