"""Covered time of a union of intervals, per class, at given instants: one sorted sweep.

The CPU decomposition of ``ranges`` asks, for every instance boundary, how much of a
thread's time until then was spent inside CUDA calls of each kind, counting nested or
overlapping calls once. In SQL that is a running maximum, a running sum per kind and an
ASOF join: three sorts of what can be 20 million calls, each a window over one huge
partition that DuckDB runs on one core and spills to disk. Here DuckDB sorts the intervals
once and streams them; numpy carries the running maximum and the running sums from batch
to batch, and answers the instants as it passes them. Memory stays at one batch plus the
instants.

Definitions (the same as ``sql/ranges.sql``): intervals of one key are taken by start
(ties: longer first, then lower class); each keeps the part beyond the furthest end seen so
far, a *piece* ``[s, e)`` credited to the interval's class. ``covered(key, t)[c]`` is the
total length of class-``c`` pieces of ``key`` before instant ``t`` (a piece containing
``t`` counts up to ``t``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:
    from ..report import Report

BATCH_ROWS = 1 << 20


def covered(
    report: Report, intervals_sql: str, probes: pa.Table, n_classes: int,
    params: dict | None = None,
) -> np.ndarray:
    """Covered time per class at each probe.

    Parameters
    ----------
    intervals_sql
        A query with integer columns ``key``, ``start_ns``, ``end_ns`` and ``cls`` (0 to
        ``n_classes - 1``); rows with a NULL or an end before the start are ignored.
    probes
        Columns ``key`` and ``ts`` (int64, no NULLs), in any order.

    Returns
    -------
    numpy.ndarray
        int64 of shape (len(probes), n_classes), row i answering probe i.
    """
    keys = probes.column("key").to_numpy(zero_copy_only=False).astype(np.int64)
    ts = probes.column("ts").to_numpy(zero_copy_only=False).astype(np.int64)
    out = np.zeros((len(ts), n_classes), dtype=np.int64)
    order = np.lexsort((ts, keys))
    sweep = _Sweep(keys[order], ts[order], n_classes)
    stream = report.sql(
        f"SELECT key, start_ns, end_ns, cls FROM ({intervals_sql}) "
        "WHERE start_ns IS NOT NULL AND end_ns >= start_ns AND key IS NOT NULL "
        "ORDER BY key, start_ns, end_ns DESC, cls",
        params,
    ).to_arrow_reader(BATCH_ROWS)
    for batch in stream:
        cols = [batch.column(i).to_numpy(zero_copy_only=False).astype(np.int64)
                for i in range(4)]
        sweep.feed(*cols)
    sweep.finish()
    out[order] = sweep.values
    return out


class _Sweep:
    """The running state of :func:`covered` over intervals sorted by key, start."""

    def __init__(self, keys: np.ndarray, ts: np.ndarray, n_classes: int):
        self.keys, self.ts, self.n = keys, ts, n_classes
        self.values = np.zeros((len(ts), n_classes), dtype=np.int64)
        self.next = 0  # first probe not yet answered
        self.key: int | None = None
        self._reset()

    def _reset(self) -> None:
        self.max_end: int | None = None  # furthest end of this key so far
        self.cum = np.zeros(self.n, dtype=np.int64)  # covered time per class, all pieces
        self.last: tuple[int, int, int] | None = None  # (s, e, cls) of the last piece

    def feed(self, key: np.ndarray, start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> None:
        bounds = np.flatnonzero(np.diff(key)) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(key)]):
            if lo < hi:
                self._segment(int(key[lo]), start[lo:hi], end[lo:hi], cls[lo:hi])

    def finish(self) -> None:
        self._close_key(None)

    def _close_key(self, new_key: int | None) -> None:
        """Answer the rest of the current key's probes (and any before ``new_key``)."""
        if self.key is not None:
            self._answer_until(self.key, None)
        # probes of keys that have no intervals at all stay 0
        while self.next < len(self.ts) and (new_key is None or self.keys[self.next] < new_key):
            self.next += 1
        self.key = new_key
        self._reset()

    def _segment(self, key: int, start: np.ndarray, end: np.ndarray, cls: np.ndarray) -> None:
        if key != self.key:
            self._close_key(key)
        # furthest end before each interval: the carried one, then the running maximum
        before = np.empty_like(end)
        before[0] = start[0] if self.max_end is None else self.max_end
        if len(end) > 1:
            np.maximum.accumulate(end[:-1], out=before[1:])
            if self.max_end is not None:
                np.maximum(before[1:], self.max_end, out=before[1:])
        s = np.maximum(start, before)
        keep = end > s
        self.max_end = int(end.max()) if self.max_end is None else max(self.max_end, int(end.max()))
        if not keep.any():
            return
        s, e, c = s[keep], end[keep], cls[keep]
        length = e - s
        cums = np.empty((len(s), self.n), dtype=np.int64)
        for k in range(self.n):
            np.cumsum(np.where(c == k, length, 0), out=cums[:, k])
        cums += self.cum
        # probes of this key before the last piece's start are answered by this batch
        self._answer_until(key, int(s[-1]), s, e, c, cums)
        self.cum = cums[-1].copy()
        self.last = (int(s[-1]), int(e[-1]), int(c[-1]))

    def _answer_until(self, key: int, limit: int | None, s=None, e=None, c=None,
                      cums=None) -> None:
        """Answer the probes of ``key`` with ts < ``limit`` (all of them when None)."""
        lo = self.next
        hi = lo
        while hi < len(self.ts) and self.keys[hi] == key and (limit is None or self.ts[hi] < limit):
            hi += 1
        if hi == lo:
            return
        t = self.ts[lo:hi]
        vals = self.values[lo:hi]
        if s is None:
            # after every piece of the key: the totals, less what the last piece holds past t
            vals[:] = self.cum
            if self.last is not None:
                ls, le, lc = self.last
                vals[:, lc] -= le - np.minimum(np.maximum(t, ls), le)
        else:
            j = np.searchsorted(s, t, side="right") - 1
            inside = j >= 0
            # before this batch's first piece: the carried totals and last piece
            if (~inside).any():
                vals[~inside] = self.cum
                if self.last is not None:
                    ls, le, lc = self.last
                    tt = t[~inside]
                    vals[~inside, lc] -= le - np.minimum(np.maximum(tt, ls), le)
            ji = j[inside]
            vals[inside] = cums[ji]
            past = e[ji] - np.minimum(np.maximum(t[inside], s[ji]), e[ji])
            vals[inside, c[ji]] -= past
        self.next = hi
