"""Deterministic EM fits of the one-dimensional mixtures the tail classifier compares.

All fits work on *weighted* points ``(y, w)``: either the raw log-durations with unit
weights, or the centres and counts of fine bins when the sample is large (see
:func:`bin_points`). The log-likelihoods returned are ``sum(w * log f(y))``, so fits on
the same points are directly comparable by BIC.

Models
------
- :func:`fit_normal` -- one normal component (a log-normal on the original scale).
- :func:`fit_gmm` -- a ``k``-component Gaussian mixture, best of several EM restarts
  (one quantile initialisation plus weighted k-means++ initialisations drawn from
  ``rng``).
- :func:`fit_body_uniform` -- a normal "body" plus a component that is uniform *on the
  original (linear) scale* over ``[exp(mu + z * sigma), x_max]``; its density on the
  log scale is ``exp(y) / (b - a)``.

Internal module: the public entry point is :func:`nsysdiag.stats.classifier.classify_tail`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)

#: Number of points above which :func:`bin_points` bins the sample.
BIN_ABOVE = 1500
#: Number of equal-width bins used for large samples.
N_BINS = 1024
#: EM iterations of each restart before the best restart is run to convergence.
_SHORT_RUN = 25


@dataclass(frozen=True)
class MixtureFit:
    """One fitted mixture on the log scale.

    Attributes
    ----------
    weights, means, sigmas : numpy.ndarray
        Normal components (log scale), sorted by mean.
    log_likelihood : float
        ``sum(w * log f(y))`` over the fitted points.
    n_iter : int
        EM iterations of the retained restart.
    converged : bool
        Whether the retained restart met the tolerance.
    uniform : tuple of (weight, a, b) or None
        For the body-plus-uniform model: weight of the uniform component and its bounds
        ``[a, b]`` on the *linear* (exp) scale of ``y``.
    """

    weights: np.ndarray
    means: np.ndarray
    sigmas: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool
    uniform: tuple[float, float, float] | None = None

    def logpdf(self, y: np.ndarray) -> np.ndarray:
        """Log density of the mixture at ``y`` (log scale)."""
        y = np.asarray(y, dtype=float)
        comps = _component_logpdf(y, self.weights, self.means, self.sigmas)
        if self.uniform is not None:
            wu, a, b = self.uniform
            lu = _uniform_logpdf(y, wu, a, b)
            comps = np.concatenate([comps, lu[None, :]], axis=0)
        return _logsumexp(comps)


def bin_points(y: np.ndarray, n_bins: int = N_BINS) -> tuple[np.ndarray, np.ndarray, float]:
    """Return ``(points, weights, bin_width)`` for EM: raw points, or fine bins.

    Samples of at most :data:`BIN_ABOVE` points are returned as they are. Larger samples
    are binned into ``n_bins`` equal-width bins over their range; empty bins are dropped.
    With the range of a trimmed latency sample (a few units of log-time) the bin width is
    about 1e-3, far below the narrowest component the fits allow.
    """
    y = np.asarray(y, dtype=float)
    if y.size <= BIN_ABOVE:
        return y, np.ones_like(y), 0.0
    lo, hi = float(y.min()), float(y.max())
    if hi <= lo:
        return np.array([lo]), np.array([float(y.size)]), 0.0
    counts, edges = np.histogram(y, bins=n_bins, range=(lo, hi))
    centres = 0.5 * (edges[:-1] + edges[1:])
    keep = counts > 0
    return centres[keep], counts[keep].astype(float), (hi - lo) / n_bins


def _logsumexp(a: np.ndarray) -> np.ndarray:
    """log(sum(exp(a), axis=0)) for an array of shape (k, n)."""
    m = np.max(a, axis=0)
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore"):
        return m + np.log(np.sum(np.exp(a - m), axis=0))


def _component_logpdf(y, weights, means, sigmas) -> np.ndarray:
    """Per-component weighted log densities, shape (k, n)."""
    z = (y[None, :] - means[:, None]) / sigmas[:, None]
    with np.errstate(divide="ignore"):
        c = np.log(weights) - np.log(sigmas) - _LOG_SQRT_2PI
    return c[:, None] - 0.5 * z * z


def _uniform_logpdf(y, wu, a, b) -> np.ndarray:
    """Log density on the log scale of a component uniform on [a, b] in exp(y)."""
    inside = (y >= np.log(a)) & (y <= np.log(b))
    out = np.full(y.shape, -np.inf)
    if wu > 0 and b > a:
        out[inside] = np.log(wu) + y[inside] - np.log(b - a)
    return out


def _weighted_quantile(y, w, q):
    order = np.argsort(y, kind="stable")
    cw = np.cumsum(w[order])
    return np.interp(np.asarray(q) * cw[-1], cw, y[order])


def _em(y, w, weights, means, sigmas, sigma_floor, max_iter, tol):
    """Plain EM for a normal mixture on weighted points; returns the fitted state.

    Stops when the log-likelihood gains less than ``tol`` per unit weight.
    """
    total = float(w.sum())
    prev = -np.inf
    converged = False
    it = 0
    for step in range(1, max_iter + 1):
        it = step
        lp = _component_logpdf(y, weights, means, sigmas)
        m = lp.max(axis=0)
        # float32 exp: several times faster than float64 on CPUs without AVX-512,
        # and ample for responsibilities (relative error ~1e-7).
        e = np.exp((lp - m).astype(np.float32)).astype(np.float64)
        tot = e.sum(axis=0)
        ll = float(np.dot(w, m + np.log(tot)))
        resp = e * (w / tot)
        nk = np.maximum(resp.sum(axis=1), 1e-12 * total)
        weights = nk / nk.sum()
        means = (resp @ y) / nk
        d = y[None, :] - means[:, None]
        var = np.einsum("kn,kn->k", resp, d * d) / nk
        sigmas = np.sqrt(np.maximum(var, sigma_floor**2))
        if ll - prev <= tol * total:
            converged = True
            break
        prev = ll
    ll = float(np.dot(w, _logsumexp(_component_logpdf(y, weights, means, sigmas))))
    return weights, means, sigmas, ll, it, converged


def _kmeanspp(y, w, k, rng, sigma_floor):
    """Weighted k-means++ seeding followed by a few Lloyd steps."""
    p = w / w.sum()
    centres = [y[rng.choice(y.size, p=p)]]
    for _ in range(1, k):
        d2 = np.min((y[:, None] - np.asarray(centres)[None, :]) ** 2, axis=1) * w
        if d2.sum() <= 0:
            centres.append(y[rng.choice(y.size, p=p)])
        else:
            centres.append(y[rng.choice(y.size, p=d2 / d2.sum())])
    c = np.sort(np.asarray(centres, dtype=float))
    for _ in range(6):
        lab = np.searchsorted(0.5 * (c[1:] + c[:-1]), y)
        sw = np.bincount(lab, weights=w, minlength=k)
        sy = np.bincount(lab, weights=w * y, minlength=k)
        c = np.where(sw > 0, sy / np.maximum(sw, 1e-300), c)
        c = np.sort(c)
    lab = np.searchsorted(0.5 * (c[1:] + c[:-1]), y)
    sw = np.bincount(lab, weights=w, minlength=k)
    ss = np.bincount(lab, weights=w * (y - c[lab]) ** 2, minlength=k)
    spread = float(np.sqrt(np.average((y - np.average(y, weights=w)) ** 2, weights=w)))
    sig = np.where(sw > 0, np.sqrt(ss / np.maximum(sw, 1e-300)), spread / k)
    weights = np.maximum(sw, 1e-3 * w.sum())
    return weights / weights.sum(), c, np.maximum(sig, sigma_floor)


def fit_normal(y: np.ndarray, w: np.ndarray, sigma_floor: float) -> MixtureFit:
    """Maximum-likelihood single normal on weighted points."""
    mu = float(np.average(y, weights=w))
    sd = float(np.sqrt(np.average((y - mu) ** 2, weights=w)))
    sd = max(sd, sigma_floor)
    weights, means, sigmas = np.array([1.0]), np.array([mu]), np.array([sd])
    ll = float(np.dot(w, _component_logpdf(y, weights, means, sigmas)[0]))
    return MixtureFit(weights, means, sigmas, ll, 0, True)


def fit_gmm(
    y: np.ndarray,
    w: np.ndarray,
    k: int,
    rng: np.random.Generator,
    *,
    sigma_floor: float,
    n_init: int = 3,
    max_iter: int = 300,
    tol: float = 1e-6,
) -> MixtureFit:
    """Best of ``n_init`` EM runs of a ``k``-component normal mixture.

    The first run starts from quantiles (component ``j`` at the ``(j + 0.5) / k``
    weighted quantile); the others from weighted k-means++ seeds drawn from ``rng``.
    The run with the highest log-likelihood is returned, components sorted by mean.
    """
    if k == 1:
        return fit_normal(y, w, sigma_floor)
    spread = float(np.sqrt(np.average((y - np.average(y, weights=w)) ** 2, weights=w)))
    starts = []
    q = (np.arange(k) + 0.5) / k
    starts.append(
        (np.full(k, 1.0 / k), _weighted_quantile(y, w, q), np.full(k, max(spread / k, sigma_floor)))
    )
    for _ in range(n_init - 1):
        starts.append(_kmeanspp(y, w, k, rng, sigma_floor))
    # Short runs from every start, then the best one run to convergence.
    best = None
    for weights, means, sigmas in starts:
        res = _em(y, w, weights, means, sigmas, sigma_floor, _SHORT_RUN, tol)
        if best is None or res[3] > best[3]:
            best = res
    if not best[5]:
        res = _em(y, w, best[0], best[1], best[2], sigma_floor, max_iter, tol)
        best = (*res[:4], res[4] + _SHORT_RUN, res[5])
    weights, means, sigmas, ll, it, conv = best
    order = np.argsort(means)
    return MixtureFit(weights[order], means[order], sigmas[order], ll, it, conv)


def mixture_quantile(weights, means, sigmas, q: float) -> float:
    """Quantile ``q`` of a normal mixture (grid search, then linear interpolation)."""
    lo = float(np.min(means - 8 * sigmas))
    hi = float(np.max(means + 8 * sigmas))
    t = np.linspace(lo, hi, 513)
    cdf = ndtr((t[:, None] - means[None, :]) / sigmas[None, :]) @ weights
    return float(np.interp(q, cdf, t))


def fit_body_uniform(
    y: np.ndarray,
    w: np.ndarray,
    k_body: int,
    rng: np.random.Generator,
    *,
    sigma_floor: float,
    z: float = 2.0,
    max_iter: int = 80,
    tol: float = 1e-5,
) -> MixtureFit:
    """A ``k_body``-component normal body (log scale) plus a flat (uniform) tail.

    The tail component is uniform on the *linear* scale over ``[a, b]``: ``b`` is the
    sample maximum and ``a`` the body's upper ``Phi(z)`` quantile (97.7 % for z = 2),
    re-derived after every M-step. The body starts from a ``k_body`` mixture fitted
    to the lower 85 % of the sample, the tail from the rest.
    """
    b = float(np.exp(np.max(y)))
    total = float(w.sum())
    cut = float(_weighted_quantile(y, w, 0.85))
    low = y <= cut
    init = fit_gmm(y[low], w[low], k_body, rng, sigma_floor=sigma_floor, n_init=1, max_iter=40)
    pis, means, sigmas = init.weights.copy(), init.means.copy(), init.sigmas.copy()
    wu = 0.15
    prev = -np.inf
    it = 0
    converged = False
    for step in range(1, max_iter + 1):
        it = step
        a = float(np.exp(mixture_quantile(pis, means, sigmas, ndtr(z))))
        if a >= b:
            wu = 0.0
        lb = _component_logpdf(y, pis * (1.0 - wu), means, sigmas)
        lu = _uniform_logpdf(y, wu, a, b)
        lp = np.concatenate([lb, lu[None, :]], axis=0)
        m = lp.max(axis=0)
        e = np.exp((lp - m).astype(np.float32)).astype(np.float64)
        tot = e.sum(axis=0)
        ll = float(np.dot(w, m + np.log(tot)))
        resp = e[:-1] * (w / tot)
        nk = np.maximum(resp.sum(axis=1), 1e-12 * total)
        nb = float(nk.sum())
        pis = nk / nb
        means = (resp @ y) / nk
        var = np.einsum("kn,kn->k", resp, (y[None, :] - means[:, None]) ** 2) / nk
        sigmas = np.sqrt(np.maximum(var, sigma_floor**2))
        wu = float(min(max(1.0 - nb / total, 0.0), 1.0 - 1e-9))
        if abs(ll - prev) <= tol * total:
            converged = True
            break
        prev = ll
    a = float(np.exp(mixture_quantile(pis, means, sigmas, ndtr(z))))
    if a >= b:
        wu = 0.0
    order = np.argsort(means)
    fit = MixtureFit(
        pis[order] * (1.0 - wu), means[order], sigmas[order], 0.0, it, converged, (wu, a, b)
    )
    ll = float(np.dot(w, fit.logpdf(y)))
    return MixtureFit(fit.weights, fit.means, fit.sigmas, ll, it, converged, fit.uniform)
