"""How many of the slow units carry a named cause: the verdict's support.

The tail attribution compares the *mean* of the slowest units with the median band. A
mean of two units is no population: one unit with a huge stall can carry it. So each of
the slowest units is judged on its own: its components' growth over the median band's
means. A unit *carries* the verdict's layer when the component that grew most on its CPU
side or on its GPU side points at that layer (a host stall grows the thread's time
outside CUDA; other work or slower kernels the device's; slower copies either), and a
workload verdict when it holds more operations than the median band, or
``workload_ratio`` times its own kernel or copy time in all (a bigger input); a unit that
runs other work than the median band (``workload_ratio`` times its kernels or more, or as
many times fewer) is no comparison for any other cause, so it carries none, unless its
range overlaps another one of its thread (it queued, and its window holds that unit's
kernels too).

The units judged are the slowest ones: the tail set, widened to ``support_units`` (20)
when the slowest tenth holds as many, and of them those in the tail's range: standing out
of the body (``elevated_ratio`` x P50) and at least halfway from the median to the median
of the tail set (natural jitter just above the body is not the tail the verdict
explains). The verdict is right when the cause is the tail's, that is when most such
units carry it. With ``s`` of ``m`` carrying the cause, its confidence is at most
(:func:`bound`) the chance that at least half of such units carry it, given ``s`` of
``m`` (the posterior of the share under Jeffreys' prior, Beta(s + 1/2, m - s + 1/2)):
7 of 11 (the four others natural hiccups of the run) make it 0.82 sure, 5 of 10 no surer
than a toss, 9 of 9 0.999. A cause resting on fewer than ``support_min_units`` (5) units
is a few units' cause, whatever their growth: at most ``unsettled_confidence`` (0.55, not
confident). The count sets no other bound: how sure a cause the slow units carry is
depends on its evidence, the checks' scores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..analyses.ranges import Component, RangesResult
from ..layers import Layer
from ..settings import Settings


def majority(s: int, m: int) -> float:
    """The chance that at least half of such units carry the cause when ``s`` of ``m``
    do: P(share >= 1/2) under the posterior Beta(s + 1/2, m - s + 1/2) (0 when ``m`` is
    0)."""
    if m <= 0:
        return 0.0
    from scipy.special import betainc  # scipy is loaded where a cause is named, not before

    return float(1.0 - betainc(s + 0.5, m - s + 0.5, 0.5))


def bound(s: int, m: int, min_units: int, unsettled: float) -> float:
    """The most confidence ``s`` carrying units of ``m`` judged support: that most such
    units carry the cause (:func:`majority`), and no more than ``unsettled`` (not
    confident) when fewer than ``min_units`` units are judged."""
    return min(majority(s, m), unsettled) if m < min_units else majority(s, m)


@dataclass(frozen=True)
class Support:
    """How many of the slow units judged on their own carry the verdict's cause."""

    carried: int  #: units whose own growth points at the verdict's layer
    judged: int  #: slow units standing out of the body, judged one by one
    other_work: int  #: of them, units running other work than the median band (carry none)
    min_units: int  #: units a confident cause rests on (``support_min_units``)
    unsettled: float  #: the bound below them (``unsettled_confidence``)

    @property
    def bound(self) -> float:
        """The most confidence the units support (0..1; :func:`bound`)."""
        return bound(self.carried, self.judged, self.min_units, self.unsettled)

    def text(self) -> str:
        base = f"{self.carried} of the {self.judged} slowest units standing out carry it"
        if self.other_work:
            base += (f" ({self.other_work} run other work than the median band: "
                     f"{'it is' if self.other_work == 1 else 'they are'} no comparison)")
        return base


def _carries(delta: dict[Component, float], layer: Layer, pageable: bool) -> bool:
    """One unit carries ``layer`` when the component that grew most on one of its sides
    (CPU: the thread's time; GPU: the device's) points at it. Waiting (host syncs, GPU
    idle) points at no layer; with pageable copies dominant, CUDA calls' growth on the host
    is transfer time (as in ``Evidence.attribution_shares``)."""
    for side in ("cpu", "gpu"):
        grown = {c: v for c, v in delta.items() if c.side == side and v > 0}
        if not grown:
            continue
        top = max(grown, key=lambda c: grown[c])
        at = Layer.PCIE if pageable and top.layer == Layer.CPU and top.cuda_call else top.layer
        if at == layer:
            return True
    return False


def _overlapping(table) -> np.ndarray:
    """Per unit: its range overlaps another unit's of its thread (one queued behind the
    other, and its window holds that unit's work too)."""
    n = table.num_rows
    out = np.zeros(n, dtype=bool)
    if not {"start_ns", "end_ns", "pid", "tid"} <= set(table.column_names):
        return out
    start, end, pid, tid = (np.asarray(table.column(c).to_numpy(zero_copy_only=False),
                                       dtype=np.int64)
                            for c in ("start_ns", "end_ns", "pid", "tid"))
    order = np.lexsort((start, tid, pid))
    reach, reacher = 0, -1
    for k, i in enumerate(order):
        if k and (pid[i], tid[i]) == (pid[order[k - 1]], tid[order[k - 1]]) \
                and start[i] < reach:
            out[i] = out[reacher] = True  # both: one may hold the other whole
        if not k or (pid[i], tid[i]) != (pid[order[k - 1]], tid[order[k - 1]]) \
                or end[i] > reach:
            reach, reacher = end[i], i
    return out


def measure(ranges: RangesResult, layer: Layer, settings: Settings,
            pageable: bool = False, queueing: bool = False) -> Support | None:
    """The support of a verdict naming ``layer`` (cpu, gpu, pcie or workload) among the
    slowest units; None without per-unit figures. ``queueing``: the verdict names
    queueing, which a unit whose range overlaps another of its thread carries (its window
    holds the wait, and the work it waited for on either side)."""
    table = ranges.tables.get("instances")
    names = [c.value for c in Component]
    if table is None or not {f"{c}_ns" for c in names} | {"duration_ns"} \
            <= set(table.column_names):
        return None
    if "counted" in table.column_names:
        table = table.filter(table.column("counted"))
    n = table.num_rows
    if n < 10:
        return None
    cols = {c: np.nan_to_num(np.asarray(table.column(f"{c}_ns").to_numpy(
        zero_copy_only=False), dtype=float)) for c in names}
    d = np.asarray(table.column("duration_ns").to_numpy(zero_copy_only=False), dtype=float)
    kernels = (np.asarray(table.column("n_kernels").to_numpy(zero_copy_only=False),
                          dtype=float) if "n_kernels" in table.column_names else None)
    copies = (np.asarray(table.column("n_copies").to_numpy(zero_copy_only=False),
                         dtype=float) if "n_copies" in table.column_names else None)
    queued = _overlapping(table)
    order = np.argsort(d, kind="stable")
    band = order[int(np.floor(0.45 * n)):int(np.ceil(0.55 * n))]
    k = max(int(ranges.tail_n or 0), min(settings.support_units, math.ceil(n / 10)))
    slow = order[n - min(k, n):]
    # the units in the tail's range: standing out of the body, and at least halfway from
    # the median to the tail set's own median (the attribution's slow set; its median, as
    # one extreme unit carries its mean)
    p50 = float(np.median(d))
    tail_mid = float(np.median(d[order[n - max(1, int(ranges.tail_n or 0)):]]))
    slow = slow[d[slow] > max(settings.elevated_ratio * p50, (p50 + tail_mid) / 2)]
    if slow.size == 0 or band.size == 0:
        return Support(0, 0, 0, settings.support_min_units, settings.unsettled_confidence)
    base = {c: float(cols[c][band].mean()) for c in names}
    band_kernels = float(np.median(kernels[band])) if kernels is not None else 0.0
    band_ops = band_kernels + (float(np.median(copies[band])) if copies is not None else 0.0)
    # the units' own GPU work in all (also what ran outside their window): bigger inputs
    # take longer kernels and copies at the same count
    totals = {c: np.nan_to_num(np.asarray(table.column(c).to_numpy(zero_copy_only=False),
                                          dtype=float))
              for c in ("own_kernel_total_ns", "own_copy_total_ns") if c in table.column_names}
    band_totals = {c: float(v[band].mean()) for c, v in totals.items()}
    carried = other = 0
    for i in slow:
        if queueing and queued[i]:
            carried += 1
            continue
        if kernels is not None and band_kernels > 0 and layer != Layer.WORKLOAD \
                and not queued[i]:
            ratio = kernels[i] / band_kernels
            if ratio >= settings.workload_ratio or ratio <= 1 / settings.workload_ratio:
                other += 1
                continue
        if layer == Layer.WORKLOAD:
            ops = (kernels[i] if kernels is not None else 0.0) \
                + (copies[i] if copies is not None else 0.0)
            bigger = any(totals[c][i] >= settings.workload_ratio * band_totals[c] > 0
                         for c in totals)
            carried += bool(ops > band_ops or bigger)
            continue
        carried += _carries({Component(c): cols[c][i] - base[c] for c in names}, layer,
                            pageable)
    return Support(carried, int(slow.size), other, settings.support_min_units,
                   settings.unsettled_confidence)
