"""Sorted passes in numpy: interval unions, multiply covered time, peak concurrency, and a
count that events raise and lower (a queue's depth over time).

The analyses measure unions of intervals (a GPU's busy time), the time two or more ran at
once and the peak number in flight. In SQL these are window functions over one partition
per GPU, which DuckDB runs on one core, so a big trace spends most of its time there.
Here DuckDB sorts the intervals once and streams them in batches; numpy carries a
few numbers from batch to batch, so memory holds one batch at a time.

Definitions (intervals are half-open, ``[start, end)``, taken in start order):

* ``before[i]``: the furthest end among the intervals before ``i``; interval ``i`` adds
  ``max(0, end - max(start, before))`` to the union (gaps-and-islands).
* The time covered at least twice is the union of the pieces ``[start[i], min(end[i],
  before[i]))``: a point inside two intervals lies in this piece of the later-starting one,
  and every point of such a piece is inside interval ``i`` and an earlier one that reaches
  past it. The pieces come in the order of their starts, so a second union pass measures
  them.
* The peak number in flight is reached at a start ``t``: the intervals started at or
  before ``t`` that end after it.

Ties in start may come in any order: none of the three depends on it.

A count changed by events (+1, -1 or 0 at an instant; ``queue_depth``): the events of one
instant are netted, so the count after an instant holds until the next instant.

A union kept for lookups (``Coverage``): its length before any instant, for instants in any
order, by a compiled search among its pieces instead of a sort of the instants.

"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

from ..engine.database import BATCH_ROWS, stored_order
from . import compiled

#: the intermediate each device's busy union (:class:`Coverage`) is kept as between
#: analyses (``engine.runner.Runs``): overlap's pass makes it, ranges reads GPU busy time
#: from it
GPU_BUSY = "gpu_busy"

__all__ = ["BATCH_ROWS", "GPU_BUSY", "Busy", "Coverage", "OutOfOrder", "Union", "segments",
           "stored_order"]

if TYPE_CHECKING:
    import pyarrow as pa

    from ..engine.protocols import ReportLike as Report



class Union:
    """Length of the union of intervals fed in start order."""

    def __init__(self) -> None:
        self.ns = 0
        self.furthest: int | None = None  # furthest end so far

    def feed(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Add intervals (sorted by start, after all earlier ones); return ``before``."""
        before, self.furthest = ends_before(start, end, self.furthest)
        if len(end):
            self.ns += int(np.maximum(end - np.maximum(start, before), 0).sum())
        return before


def ends_before(
    start: np.ndarray, end: np.ndarray, furthest: int | None
) -> tuple[np.ndarray, int | None]:
    """``before`` of intervals sorted by start that follow earlier ones reaching ``furthest``
    (None: there were none), and the furthest end after them.

    ``before[i]`` is the furthest end among all intervals before ``i``; for the very first
    interval, which has none, it is its own start.
    """
    before = np.empty_like(end)
    if not len(end):
        return before, furthest
    before[0] = start[0] if furthest is None else furthest
    if len(end) > 1:
        np.maximum.accumulate(end[:-1], out=before[1:])
        if furthest is not None:
            np.maximum(before[1:], furthest, out=before[1:])
    return before, max(int(before[-1]), int(end[-1]))


class Coverage:
    """Covered time of a union of intervals before any instant, per key, for instants in
    any order.

    ``covered(key, t)`` is the length of the union of the key's intervals that lies before
    ``t``. The union is kept as its pieces (each interval beyond the furthest end before it)
    with running totals, so an instant is answered by one search among the pieces
    (``compiled.covered``): no sort of the instants, which in ``ranges`` number twice the
    pending stretches, more than there are intervals.

    Built from a query (:meth:`of_query`) or fed by a sorted pass that reads the intervals
    anyway (:meth:`feed`, then :meth:`done`): the union does not depend on the order of
    intervals with equal starts, so any pass in start order per key will do.
    """

    def __init__(self) -> None:
        #: key -> (piece starts, piece ends, union before each piece), all sorted
        self.pieces: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # key -> the pieces so far (arrays with room to grow) and the union's state
        # (compiled.union_pieces; its last slot: how many pieces)
        self._fed: dict[int, tuple[list[np.ndarray], np.ndarray]] = {}

    @classmethod
    def of_query(cls, report: Report, sql: str) -> Coverage:
        """The union per ``key`` of the rows of ``sql`` (columns key, start_ns, end_ns;
        rows with a NULL, or ending before they start, are left out)."""
        coverage = cls()
        for (key,), rows in segments(
            report, f"SELECT * FROM ({sql}) WHERE end_ns >= start_ns", ("key",),
            ("start_ns", "end_ns"), order="start_ns, end_ns DESC",
        ):
            coverage.feed(key, *(rows[c].astype(np.int64, copy=False)
                                 for c in ("start_ns", "end_ns")))
        return coverage.done()

    def feed(self, key: int, start: np.ndarray, end: np.ndarray) -> None:
        """Add intervals of ``key`` (``end >= start``, sorted by start, after the key's
        earlier ones)."""
        if key not in self._fed:
            self._fed[key] = ([np.empty(len(start), dtype=np.int64) for _ in range(3)],
                              np.zeros(4, dtype=np.int64))
        arrays, state = self._fed[key]
        need = int(state[3]) + len(start)
        if need > len(arrays[0]):
            for a in arrays:  # in place (realloc): no copy of what is there
                a.resize(max(need, 2 * len(a)), refcheck=False)
        compiled.union_pieces(start, end, state, *arrays)

    def done(self) -> Coverage:
        """Make the fed pieces ready for lookups."""
        for key, (arrays, state) in self._fed.items():
            for a in arrays:
                a.resize(int(state[3]), refcheck=False)
            self.pieces[key] = tuple(arrays)  # type: ignore[assignment]
        self._fed.clear()
        return self

    def covered(self, keys: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """``covered(key, t)`` for each pair (int64; 0 for a key without intervals)."""
        out = np.zeros(len(ts), dtype=np.int64)
        if not len(ts):
            return out
        single = bool((keys == keys[0]).all())  # one GPU: no per-key selection
        for key in [int(keys[0])] if single else np.unique(keys).tolist():
            if key not in self.pieces:
                continue
            rows = slice(None) if single else np.flatnonzero(keys == key)
            at = np.empty(len(out[rows]), dtype=np.int64)
            compiled.covered(*self.pieces[key], np.ascontiguousarray(ts[rows], np.int64), at)
            out[rows] = at
        return out

    def between(self, keys: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Covered time of each key inside ``[start, end]``."""
        return self.covered(keys, end) - self.covered(keys, start)

    def between_key(self, key: int, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Covered time of one key inside each ``[start, end]`` (int64; 0 for a key
        without intervals)."""
        out = np.zeros(len(start), dtype=np.int64)
        if key in self.pieces and len(start):
            at = np.empty(len(start), dtype=np.int64)
            compiled.covered(*self.pieces[key], np.ascontiguousarray(end, np.int64), out)
            compiled.covered(*self.pieces[key], np.ascontiguousarray(start, np.int64), at)
            out -= at
        return out


class Busy:
    """Union, time covered at least twice and peak concurrency of intervals fed in start
    order."""

    def __init__(self) -> None:
        self.union, self._twice = Union(), Union()
        self.peak = 0
        self._open = np.empty(0, dtype=np.int64)  # ends of intervals still in flight

    @property
    def ns(self) -> int:
        return self.union.ns

    @property
    def twice_ns(self) -> int:
        return self._twice.ns

    def feed(self, start: np.ndarray, end: np.ndarray) -> None:
        if not len(start):
            return
        before = self.union.feed(start, end)
        self._twice.feed(start, np.minimum(end, before))
        # in flight at start t: the open ends and this batch's ends after t, less the
        # intervals of this batch that start after t
        # stable: timsort, near linear on ends that come almost in order (they mostly do)
        ends = np.sort(np.concatenate([self._open, end]), kind="stable")
        after, later = np.empty(len(start), dtype=np.int64), np.empty(len(start), dtype=np.int64)
        compiled.search_right(ends, start, after)
        compiled.search_right(start, start, later)
        self.peak = max(self.peak, int(((len(ends) - after) - (len(start) - later)).max()))
        self._open = ends[after[-1]:]


def queue_depth(
    up_t: np.ndarray, same_t: np.ndarray, down_t: np.ndarray, lo: int | None, hi: int | None,
    keep_changes: bool = False,
) -> tuple[dict[int, int], dict[int, int], tuple[np.ndarray, np.ndarray]]:
    """A count raised by one at the instants ``up_t``, lowered by one at ``down_t`` (each
    after a raise) and left as it is at ``same_t``, its events netted per instant. The
    arrays come in any order and are sorted in place (they come almost in order, which a
    stable sort merges in near linear time); a compiled loop walks them
    (``compiled.queue_depth``).

    Returns ``time_at`` (depth -> ns: the span from an instant ``t`` to the next counts at
    the depth after ``t`` when ``lo <= t < hi``; nothing counts when either is None),
    ``marked_at`` (depth -> number of ``up`` and ``same`` events, read right after their
    instant) and, with ``keep_changes``, the instants whose events do not net to zero with
    the depth after them (else empty arrays).
    """
    for a in (up_t, same_t, down_t):
        a.sort(kind="stable")
    # zeros from calloc: only the pages of depths reached are touched
    time_at, marked_at = (np.zeros(len(up_t) + 1, dtype=np.int64) for _ in range(2))
    room = len(up_t) + len(down_t) if keep_changes else 0
    change_t, change_depth = (np.empty(room, dtype=np.int64) for _ in range(2))
    counted = lo is not None and hi is not None
    n = compiled.queue_depth(up_t, same_t, down_t, lo if counted else 0, hi if counted else 0,
                              counted, time_at, marked_at, change_t, change_depth)
    return ({int(d): int(time_at[d]) for d in np.flatnonzero(time_at)},
            {int(d): int(marked_at[d]) for d in np.flatnonzero(marked_at)},
            (change_t[:n], change_depth[:n]))


def runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value, first index, end index) of each run of equal values in a sorted array."""
    first = np.r_[0, np.flatnonzero(keys[1:] != keys[:-1]) + 1] if len(keys) else np.r_[:0]
    return keys[first], first, np.r_[first[1:], len(keys)]


def run_codes(columns: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's index among the distinct rows of ``columns``, and those rows (sorted, one
    per line of a 2-D array). Rows come in runs of equal values (one GPU's or stream's work
    together), so only the first row of each run is compared with the others: no sort of
    every row."""
    n = len(columns[0])
    if not n:
        return np.empty(0, dtype=np.int64), np.empty((0, len(columns)), dtype=np.int64)
    change = np.zeros(n - 1, dtype=bool)
    for c in columns:
        change |= c[1:] != c[:-1]
    head = np.r_[0, np.flatnonzero(change) + 1]
    distinct, inverse = np.unique(np.stack([c[head] for c in columns], axis=1).astype(np.int64),
                                  axis=0, return_inverse=True)
    return np.repeat(inverse.ravel(), np.diff(np.r_[head, n])), distinct


def by_code(codes: np.ndarray, n_codes: int) -> Iterator[tuple[int, np.ndarray]]:
    """(code, the indices of its rows in their order) for each code in ``range(n_codes)``
    that has rows."""
    if n_codes == 1:
        yield 0, np.arange(len(codes))
        return
    # a stable sort of codes that fit 16 bits is a radix sort
    order = np.argsort(codes.astype(np.int16) if n_codes <= np.iinfo(np.int16).max else codes,
                       kind="stable")
    bounds = np.r_[0, np.cumsum(np.bincount(codes, minlength=n_codes))]
    for code in range(n_codes):
        if bounds[code + 1] > bounds[code]:
            yield code, order[bounds[code]:bounds[code + 1]]


class OutOfOrder(Exception):
    """Rows read in the order they are stored (``segments`` with ``in_order``) were not
    sorted: the caller reads them again, sorted."""


def segments(
    report: Report, sql: str, keys: tuple[str, ...], columns: tuple[str, ...],
    order: str = "start_ns", params: dict | None = None, in_order: bool = False,
) -> Iterator[tuple[tuple[int, ...], dict[str, np.ndarray]]]:
    """Stream ``sql`` (with ``params`` bound) sorted by ``keys`` then ``order``, in runs of
    one key.

    Yields ``(key values, {column: array})`` for each run of rows with the same key within
    a batch (a key's rows may come in several runs, in order). Rows with a NULL in a key
    or a column are left out.

    With ``in_order``, the rows are read in the order ``sql`` gives them (the stored order
    of a view written in the export's order, ``ViewSpec.in_export_order``), without a sort:
    each key's rows must already come sorted by ``order`` (plain column names; NULLs last),
    the keys interleaved in any way. Each batch yields one run per key, and
    :class:`OutOfOrder` is raised at the first row of a key that sorts before the row of
    that key before it (ties in ``order`` may come in any order, as in a sort).
    """
    names = (*keys, *columns)
    nonnull = " AND ".join(f"{c} IS NOT NULL" for c in names)
    by = [c.strip() for c in order.split(",")]
    if not in_order:
        yield from _runs(report.sql(
            f"SELECT {', '.join(names)} FROM ({sql}) WHERE {nonnull} "
            f"ORDER BY {', '.join(keys)}, {order}", params
        ).to_arrow_reader(BATCH_ROWS), keys, columns)
        return
    extra = [c for c in by if c not in names]  # NULLs last
    read = ", ".join([*names, *(f"coalesce({c}, {np.iinfo(np.int64).max}) AS {c}" for c in extra)])
    with stored_order(report, f"SELECT {read} FROM ({sql}) WHERE {nonnull}", params) as reader:
        last: dict[tuple[int, ...], list[np.ndarray]] = {}  # the last row of each key so far
        for key, cols in _runs(reader, keys, (*columns, *extra), whole=False):
            sort = [cols[c].astype(np.int64, copy=False) for c in by]
            if key in last:
                sort = [np.r_[v, s] for v, s in zip(last[key], sort)]
            if not _sorted(sort):
                raise OutOfOrder(f"rows of {dict(zip(keys, key))} out of order")
            last[key] = [s[-1:] for s in sort]
            yield key, {c: cols[c] for c in columns}


def _runs(
    reader: Iterable[pa.RecordBatch], keys: tuple[str, ...], columns: tuple[str, ...],
    whole: bool = True,
) -> Iterator[tuple[tuple[int, ...], dict[str, np.ndarray]]]:
    """The rows of each batch by key: in runs of consecutive rows (``whole``: the rows
    come sorted by key), else all the rows of each key in the batch, in their order."""
    for batch in reader:
        if not batch.num_rows:
            continue
        cols = {n: batch.column(n).to_numpy(zero_copy_only=False)
                for n in dict.fromkeys((*keys, *columns))}
        if whole:
            change = np.zeros(batch.num_rows - 1, dtype=bool)
            for k in keys:
                change |= cols[k][1:] != cols[k][:-1]
            bounds = np.r_[0, np.flatnonzero(change) + 1, batch.num_rows]
            for lo, hi in zip(bounds[:-1], bounds[1:]):
                yield (tuple(int(cols[k][lo]) for k in keys),
                       {c: cols[c][lo:hi] for c in columns})
            continue
        codes, distinct = run_codes(tuple(cols[k] for k in keys))
        if len(distinct) == 1:
            yield tuple(int(v) for v in distinct[0]), {c: cols[c] for c in columns}
            continue
        for code, rows in by_code(codes, len(distinct)):
            yield tuple(int(v) for v in distinct[code]), {c: cols[c][rows] for c in columns}


def _sorted(columns: list[np.ndarray]) -> bool:
    """Whether the rows of these integer columns are in lexicographic order."""
    undecided = None  # the steps between rows tied on every column so far
    for c in columns:
        up, down = c[1:] > c[:-1], c[1:] < c[:-1]
        if undecided is not None:
            up, down = up[undecided], down[undecided]
        if down.any():
            return False
        tied = ~up
        if not tied.any():
            return True
        undecided = np.flatnonzero(tied) if undecided is None else undecided[tied]
    return True
