"""Spearman's rank correlation and the weighted isotonic fit, for workload's size relation.

Each gives what the scipy function named in its docstring gives, value for value
(``tests/test_fits.py`` compares them): the arithmetic is the same, in the same order.
They are here so that a diagnosis does not import ``scipy.stats`` and ``scipy.optimize``
for two small computations (their import cost: ``docs/performance.md``).
"""

from __future__ import annotations

import numpy as np


def average_ranks(a: np.ndarray) -> np.ndarray:
    """``scipy.stats.rankdata(a)``: ranks from 1, tied values given the mean of their
    ranks (exact: an integer or a half)."""
    a = np.asarray(a)
    order = np.argsort(a, kind="mergesort")
    inverse = np.empty(order.size, dtype=np.intp)
    inverse[order] = np.arange(order.size, dtype=np.intp)
    ordered = a[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = first.cumsum()[inverse]
    bounds = np.r_[np.nonzero(first)[0], len(first)]
    return 0.5 * (bounds[dense] + bounds[dense - 1] + 1)


def spearman_rho(x: np.ndarray, y: np.ndarray) -> float:
    """``scipy.stats.spearmanr(x, y).statistic`` for two 1-D arrays without NaN: the
    Pearson correlation (``np.corrcoef``) of their average ranks; NaN when either is
    constant or holds fewer than two values."""
    x, y = np.asarray(x), np.asarray(y)
    if x.size <= 1 or (x == x[0]).all() or (y == y[0]).all():
        return float("nan")
    ranked = np.column_stack((average_ranks(x), average_ranks(y)))
    return float(np.corrcoef(ranked, rowvar=False)[1, 0])


def isotonic(y: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``scipy.optimize.isotonic_regression(y, weights=weights).x``: the non-decreasing
    sequence nearest ``y`` in weighted least squares (weights > 0).

    Pool adjacent violators in one pass, as Busing's algorithm 1 (Monotone Regression: A
    Simple and Fast O(n) PAVA Implementation, J. Stat. Softw. 102, 2022) with scipy's two
    changes: equal neighbours are pooled too (``>=``), and the index error corrected. Each
    pooled block's value is its weighted sum over its weight, summed in the same order.
    """
    x = [float(v) for v in y]
    w = [float(v) for v in weights]
    n = len(x)
    if not n:
        return np.empty(0)
    ends = [0] * (n + 1)  # block k holds x[ends[k]:ends[k + 1]] of the input
    ends[1] = 1
    b = 0
    value, weight = x[0], w[0]
    i = 1
    while i < n:
        b += 1
        xb, wb = x[i], w[i]
        if value >= xb:  # the new value breaks the order: pool it with the block before
            b -= 1
            sb = weight * value + wb * xb
            wb += weight
            xb = sb / wb
            while i < n - 1 and xb >= x[i + 1]:  # the values after it that the pool breaks
                i += 1
                sb += w[i] * x[i]
                wb += w[i]
                xb = sb / wb
            while b > 0 and x[b - 1] >= xb:  # the blocks before it that now break it
                b -= 1
                sb += w[b] * x[b]
                wb += w[b]
                xb = sb / wb
        x[b] = value = xb
        w[b] = weight = wb
        ends[b + 1] = i + 1
        i += 1
    out = np.empty(n)
    for k in range(b + 1):
        out[ends[k]:ends[k + 1]] = x[k]
    return out
