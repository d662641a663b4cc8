"""Figures of integer distributions held in numpy arrays, equal to DuckDB's aggregates.

Where an analysis' sorted pass leaves a distribution in memory (launch gaps: about one
gap per kernel), its figures are taken here instead of writing the values out for SQL to
read back (a step's write and a query per figure). Each function gives what the DuckDB
aggregate named in its docstring gives, value for value (``tests/test_figures.py`` compares
them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from ..errors import InputError

_INT64_MAX = np.iinfo(np.int64).max


def quantiles(values: np.ndarray, ps: Sequence[float], scratch: bool = False
              ) -> list[float] | None:
    """DuckDB's ``quantile_cont(values, ps)``: None without values; else, per ``p``, the
    values at ranks ``floor(x)`` and ``ceil(x)``, ``x = (n - 1) * p``, of the sorted values,
    interpolated (:func:`_between`). One partial sort (``np.partition``) for all the
    ranks, of a copy, or in place where ``values`` are ``scratch`` (a copy already)."""
    n = len(values)
    if not n:
        return None
    ranks = [(n - 1) * p for p in ps]
    kth = sorted({int(math.floor(x)) for x in ranks} | {int(math.ceil(x)) for x in ranks})
    if scratch:
        values.partition(kth)
        part = values
    else:
        part = np.partition(values, kth)
    out = []
    for x in ranks:
        lo, hi = math.floor(x), math.ceil(x)
        out.append(float(part[lo]) if lo == hi else
                   _between(float(part[lo]), float(part[hi]), x - lo))
    return out


def _between(lo: float, hi: float, d: float) -> float:
    """DuckDB's interpolation of doubles, ``lo * (1 - d) + hi * d``, as its x86-64 build
    computes it: one fused multiply-add, ``fma(lo, 1 - d, hi * d)``, rounded once (the exact
    sum of fractions, since Python 3.11 has no ``math.fma``)."""
    return float(Fraction(lo) * Fraction(1.0 - d) + Fraction(hi * d))


def exact_sum(values: np.ndarray, where: np.ndarray | None = None) -> int:
    """The exact sum of int64 values (of those ``where`` is true), as DuckDB's 128-bit
    sums."""
    if not len(values) or where is not None and not where.any():
        return 0
    largest = max(abs(int(values.min())), abs(int(values.max())))
    if largest * len(values) <= _INT64_MAX:  # numpy's int64 sum cannot wrap around
        return int(values.sum(where=True if where is None else where))
    # it might: exact in Python integers
    return sum((values if where is None else values[where]).tolist())


def total(values: np.ndarray, where: np.ndarray | None = None) -> int:
    """``sum(values)::BIGINT`` (of those ``where`` is true): an InputError where it leaves
    64 bits (corrupt timestamps), as DuckDB's cast does."""
    s = exact_sum(values, where)
    if not -_INT64_MAX - 1 <= s <= _INT64_MAX:
        raise InputError("values out of range (a sum of durations leaves 64 bits)",
                         hint="the export holds corrupt timestamps, durations or sizes")
    return s


def mean(sum_: int, n: int) -> float | None:
    """DuckDB's ``avg`` of integers from their sum and count: the sum as a double divided by
    the count."""
    return float(sum_) / n if n else None


def share_pct(part: int, whole: int) -> float | None:
    """``100.0 * part / nullif(whole, 0)``."""
    return 100.0 * part / whole if whole else None


def describe(values: np.ndarray, ps: Sequence[float], above_ns: int, scratch: bool = False
             ) -> dict[str, Any]:
    """``count``, ``q`` (:func:`quantiles`), ``max_ns``, ``mean_ns``, ``total_ns`` and
    ``share_above_pct`` (share of values above ``above_ns``) of one distribution; NULLs
    (None) where SQL gives them for no values, ``total_ns`` 0. ``scratch``: as for
    :func:`quantiles`."""
    n = len(values)
    s = total(values)
    return {
        "count": n,
        "q": quantiles(values, ps, scratch),  # in place: the order of values is not used
        "max_ns": int(values.max()) if n else None,
        "mean_ns": mean(s, n),
        "total_ns": s,
        "share_above_pct": share_pct(int(np.count_nonzero(values > above_ns)), n),
    }


def q_columns(q: list[float] | None, names: Sequence[str]) -> dict[str, float | None]:
    """``{name: quantile}`` for a :func:`quantiles` result, None for each without values."""
    return dict(zip(names, q if q is not None else [None] * len(names)))
