"""Repeating sequences: the iteration of a loop found from the order of its events.

A loop leaves the same sequence of events once per iteration: the same kernels launched in
the same order each training step or each forward pass, the same NVTX ranges one after
the other each frame. :func:`find` takes such a sequence (one label per event, in time
order) and finds its period without reading any durations, so that the iterations it cuts
keep whatever variation in time the tail analysis is after.

The method, in steps:

1. every label that occurs at least ``min_cycles`` times is a candidate boundary; between
   two of its occurrences lies one cycle;
2. a candidate whose occurrences are mostly (``min_agreement``) the same number of events
   apart, ``L``, occurs once per cycle of period ``L``; a label that occurs twice per
   iteration alternates between two distances and is left out;
3. the cycles of a candidate are compared as sequences (length, and an order-sensitive
   fingerprint of their labels): its ``agreement`` is the share of cycles equal to the most
   common one. A run that does not repeat has no candidate that passes;
4. a period is the whole iteration only when the cycles equal to the most common one hold
   at least ``min_held`` of the events between its first and last cycle (``held``): a
   pattern of four calls that repeats inside a loop whose every hundredth iteration
   launches 700 more is a sub-pattern of the loop, not its iteration. Among the whole
   ones (all, when none is), the finest period whose agreement reaches
   ``fine_agreement`` (several nested loops: the inner one, unless its cycles differ too
   often, as when every fourth micro-step holds the optimizer's kernels); else the best
   agreement;
5. the labels of that period are rotations of one loop; the one chosen to start each cycle
   is the one that follows a clearly longest typical pause (median over its occurrences of
   ``gaps``, ``pause_ratio`` times any other's): a loop's iteration begins where the host
   comes back from waiting or from its own work between iterations; without such a pause,
   the label that occurs first (the loop's first event, unless the capture began inside
   an iteration).

Pure numpy; :mod:`nsysdiag.analyses.ranges` gives it the launch sequence of a thread
(ranges.sql ``launch_sequence``) or the instances of sibling NVTX ranges.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: seed of the random weights of the cycles' fingerprints (any fixed value: the weights
#: only need to differ between labels)
_SEED = 0x5EED


@dataclass(frozen=True)
class Cycle:
    """The period found in a sequence of labelled events.

    Attributes
    ----------
    boundary : int
        Label that starts every cycle.
    last : int
        Label that ends the most common cycle.
    period : int
        Events per cycle (the most common cycle's length).
    starts : numpy.ndarray
        Position in the sequence of every cycle's first event (every occurrence of
        ``boundary``).
    ends : numpy.ndarray
        Position of every cycle's last event: the event before the next cycle, and for the
        last cycle the ``period``-th event from its start (or the sequence's end).
    agreement : float
        Share of cycles (between consecutive occurrences of ``boundary``) equal to the most
        common one (fraction).
    coverage : float
        Share of the sequence's events inside the cycles (fraction).
    held : float
        Share of the events between the first and the last cycle's start that lie in
        cycles equal to the most common one (fraction): near 1 when the cycle is the whole
        iteration, low when most of the work lies in the cycles that differ.
    """

    boundary: int
    last: int
    period: int
    starts: np.ndarray
    ends: np.ndarray
    agreement: float
    coverage: float
    held: float = 1.0

    @property
    def n(self) -> int:
        """Number of cycles."""
        return len(self.starts)


def find(labels: np.ndarray, gaps: np.ndarray | None = None, *, min_cycles: int = 20,
         min_period: int = 2, min_agreement: float = 0.6, fine_agreement: float = 0.8,
         min_coverage: float = 0.0, pause_ratio: float = 2.0) -> Cycle | None:
    """The period of a repeating sequence (module docstring: the method).

    Among the cycles of :func:`periods`, the finest whose agreement reaches
    ``fine_agreement``, else the one of the best agreement (step 4).

    Parameters
    ----------
    labels : numpy.ndarray
        One integer label per event, in time order (kernel names, range names).
    gaps : numpy.ndarray, optional
        Per event, the pause before it (ns): how long nothing of the sequence ran. Picks
        the label that starts each cycle among the rotations of the loop (step 5); without
        it, the one that occurs first.
    min_cycles : int
        Occurrences a boundary needs.
    min_period : int
        Fewest events per cycle (2: a single event repeated is not an iteration of work).
    min_agreement : float
        Share of a boundary's distances that must equal the period, and of its cycles
        that must equal the most common one (fraction).
    fine_agreement : float
        Agreement at which the finest period wins over coarser ones (fraction).
    min_coverage : float
        Share of the sequence the cycles must cover (fraction).
    pause_ratio : float
        How many times longer than every other rotation's the typical pause before a label
        must be for that label to start the cycles (ratio).

    Returns
    -------
    Cycle or None
        None when nothing repeats.

    Examples
    --------
    >>> c = find(np.array([9] + [1, 2, 3] * 20), min_cycles=20)
    >>> (c.boundary, c.period, c.n, c.agreement)
    (1, 3, 20, 1.0)
    """
    found = periods(labels, gaps, min_cycles=min_cycles, min_period=min_period,
                    min_agreement=min_agreement, min_coverage=min_coverage,
                    pause_ratio=pause_ratio)
    return pick(found, fine_agreement)


#: the share of events the most common cycles must hold for a period to be the whole
#: iteration (step 4)
MIN_HELD = 0.8


def pick(found: list[Cycle], fine_agreement: float = 0.8,
         min_held: float = MIN_HELD) -> Cycle | None:
    """Step 4 among cycles of several periods (finest first): of those whose most common
    cycles hold ``min_held`` of the events (all, when none does), the finest whose
    agreement reaches ``fine_agreement``, else the one of the best agreement; None of
    none."""
    if not found:
        return None
    pool = [c for c in found if c.held >= min_held] or found
    fine = [c for c in pool if c.agreement >= fine_agreement]
    return fine[0] if fine else max(pool, key=lambda c: (c.agreement, -c.period))


def periods(labels: np.ndarray, gaps: np.ndarray | None = None, *, min_cycles: int = 20,
            min_period: int = 2, min_agreement: float = 0.6, min_coverage: float = 0.0,
            pause_ratio: float = 2.0) -> list[Cycle]:
    """Every period the sequence repeats with (steps 1-3 and 5 of the method), finest
    first: one :class:`Cycle` per period, starting at the rotation step 5 picks. The
    parameters are :func:`find`'s."""
    labels = np.asarray(labels, dtype=np.int64)
    n = len(labels)
    if n < min_cycles * max(min_period, 1):
        return []
    if labels.min() < 0 or labels.max() >= n:  # dense codes for the counts below
        labels = np.unique(labels, return_inverse=True)[1].ravel()
    # positions grouped by label, ascending (a stable sort; of 16-bit codes, numpy's radix
    # sort)
    small = labels.max() < np.iinfo(np.int16).max
    order = np.argsort(labels.astype(np.int16) if small else labels, kind="stable")
    sorted_labels = labels[order]
    same = sorted_labels[1:] == sorted_labels[:-1]
    dist = np.diff(order)[same]
    dist_label = sorted_labels[1:][same]
    if not len(dist):
        return []
    # the most common distance of each label (its period) and how often it occurs: the
    # pairs (label, distance) counted as one integer key each
    keys, pair_n = np.unique(dist_label * (n + 1) + dist, return_counts=True)
    pair_label, pair_dist = np.divmod(keys, n + 1)
    best = np.lexsort((-pair_n, pair_label))
    pair_label, pair_dist, pair_n = pair_label[best], pair_dist[best], pair_n[best]
    first = np.r_[True, pair_label[1:] != pair_label[:-1]]
    mode_label, mode_dist, mode_n = pair_label[first], pair_dist[first], pair_n[first]
    occurrences = np.bincount(labels)
    regular = ((occurrences[mode_label] >= min_cycles) & (mode_dist >= min_period)
               & (mode_n >= min_agreement * (occurrences[mode_label] - 1)))
    if not regular.any():
        return []
    fingerprint = _Fingerprints(labels)
    found = []
    for label, period in zip(mode_label[regular].tolist(), mode_dist[regular].tolist()):
        count = int(occurrences[label])
        pos = order[np.searchsorted(sorted_labels, label):][:count]
        agreement = fingerprint.agreement(pos)
        covered = (min(int(pos[-1]) + period, n) - int(pos[0])) / n
        if agreement >= min_agreement and covered >= min_coverage:
            found.append((label, period, pos, agreement, covered))
    out = []
    for period in sorted({f[1] for f in found}):
        rotations = sorted((f for f in found if f[1] == period), key=lambda f: int(f[2][0]))
        # the loop's first event: the one after a clearly longest pause, else the one that
        # occurs first
        chosen = rotations[0]
        if gaps is not None and len(rotations) > 1:
            typical = np.array([float(np.median(gaps[f[2]])) for f in rotations])
            top, second = np.sort(typical)[::-1][:2]
            if top > pause_ratio * second:
                chosen = rotations[int(typical.argmax())]
        label, period, pos, agreement, covered = chosen
        ends = np.r_[pos[1:] - 1, min(int(pos[-1]) + period, n) - 1]
        common = fingerprint.most_common_start(pos)
        last = int(labels[min(common + period, n) - 1])
        out.append(Cycle(int(label), last, int(period), pos.astype(np.int64),
                         ends.astype(np.int64), float(agreement), float(covered),
                         fingerprint.held(pos)))
    return out


class _Fingerprints:
    """Order-sensitive fingerprints of stretches of a label sequence (dense codes), from
    prefix sums of random per-label weights (wrapping 64-bit arithmetic): a stretch [a, b)
    mixes ``b - a``, ``sum w1`` and ``sum w2 * (i - a)`` into one key; two equal stretches
    always agree, two different ones almost never."""

    def __init__(self, codes: np.ndarray) -> None:
        rng = np.random.default_rng(_SEED)
        w1, w2 = (rng.integers(1, 2**62, size=int(codes.max()) + 1, dtype=np.uint64)
                  for _ in range(2))
        idx = np.arange(len(codes), dtype=np.uint64)
        with np.errstate(over="ignore"):
            self.s1 = np.r_[np.uint64(0), np.cumsum(w1[codes], dtype=np.uint64)]
            self.s2 = np.r_[np.uint64(0), np.cumsum(w2[codes] * idx, dtype=np.uint64)]
            self.s3 = np.r_[np.uint64(0), np.cumsum(w2[codes], dtype=np.uint64)]

    def _keys(self, pos: np.ndarray) -> np.ndarray:
        """One 64-bit key per stretch between consecutive ``pos`` (its length and both
        sums mixed by odd multipliers)."""
        a, b = pos[:-1], pos[1:]
        with np.errstate(over="ignore"):
            f1 = self.s1[b] - self.s1[a]
            f2 = (self.s2[b] - self.s2[a]) - a.astype(np.uint64) * (self.s3[b] - self.s3[a])
            return (f1 * np.uint64(0x9E3779B97F4A7C15) + f2 * np.uint64(0xC2B2AE3D27D4EB4F)
                    + (b - a).astype(np.uint64))

    def agreement(self, pos: np.ndarray) -> float:
        """Share of the cycles between consecutive ``pos`` equal to the most common one."""
        if len(pos) < 2:
            return 0.0
        _, n = np.unique(self._keys(pos), return_counts=True)
        return float(n.max() / (len(pos) - 1))

    def held(self, pos: np.ndarray) -> float:
        """Share of the events between the first and last ``pos`` that lie in cycles equal
        to the most common one."""
        if len(pos) < 2:
            return 0.0
        keys = self._keys(pos)
        values, n = np.unique(keys, return_counts=True)
        length = np.diff(pos)
        return float(length[keys == values[n.argmax()]].sum() / length.sum())

    def most_common_start(self, pos: np.ndarray) -> int:
        """Position where a cycle equal to the most common one starts."""
        if len(pos) < 2:
            return int(pos[0])
        keys = self._keys(pos)
        values, n = np.unique(keys, return_counts=True)
        return int(pos[np.flatnonzero(keys == values[n.argmax()])[0]])
