"""Classify the shape of a latency distribution's tail (step B of the diagnosis chain).

See :func:`classify_tail` and ``docs/classifier.md``.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from typing import Any

import diptest
import numpy as np
from scipy import special

from nsysdiag.stats import mixture

__all__ = ["SHAPES", "CandidateFit", "ShapeProbabilities", "TailShapeResult", "classify_tail"]

#: The shapes :func:`classify_tail` can return.
SHAPES = ("tight", "right_skewed", "multimodal", "flat_tail", "insufficient_data")

#: Default p99/p50 at or below which a tail is not abnormal.
DEFAULT_TIGHT_RATIO = 2.0
#: Two modes closer than this ratio of their locations count as one body.
MIN_MODE_SEPARATION = 1.4
#: A valley between two modes must fall to this fraction of the lower peak.
MAX_VALLEY_DEPTH = 0.35
#: Fewest tail values for a flat_tail verdict.
MIN_TAIL_COUNT = 10
#: A flat tail must start within this factor of the body's peak (a narrow body).
MAX_TAIL_START = 1.75
#: No body, a density falling from the shortest values: its highest peak has less
#: than this share of the values below it, or (one mode) lies below this fraction of
#: the median.
NO_BODY_QUANTILE, NO_BODY_PEAK = 0.05, 0.3
#: A flat tail whose top fifth holds this many times a uniform tail's share ends in a
#: cluster (see :func:`_tail_top_share`).
TAIL_TOP_CLUSTER = 2.0
#: A flat tail holds at most this share of the values (contention hits some copies).
MAX_FLAT_FRACTION = 0.55
#: A cluster in the tail: density rising this much after a dip, with this z-score.
_BUMP_RISE, _BUMP_Z = 2.5, 3.5
#: A plateau ending in a cluster: density rising by half after a dip, with this
#: z-score (a milder rise than ``_BUMP_RISE``, so it needs more evidence).
_PLATEAU_RISE, _PLATEAU_Z = 1.5, 5.0
#: A busy queue: most values past the body and no tail cluster sharper than this z.
_BUSY_Z = 6.0
#: Fewest tail values for reading the flatness of the tail's upper three quarters.
MIN_UPPER_TAIL_COUNT = 40
#: flat_tail thresholds on the tail statistics (see :func:`_tail_shape`).
_FLAT_CV, _FLAT_UR, _FLAT_HR = 0.45, 0.8, 0.3
#: The shapes an abnormal or normal tail can take: the classes of the probability vector
#: (:class:`ShapeProbabilities`), in its order.
CLASSES = SHAPES[:-1]
#: Inputs of the probability model, in the order of :func:`_calibration_features`.
CALIBRATION_FEATURES = (
    "intercept",
    "log_p_gate_tight",
    "log_p_gate_abnormal",
    "log10_n_minus_3",
    "flat_margin",
    "upper_flat_margin",
    "second_mode_mass",
    "log10_tail_count",
    "tail_bump",
    "plateau_bump",
    "peak_quantile",
    "tail_fraction",
    "log_tail_top_share",
    "several_modes",
)
#: The probability model's coefficients (package data), fitted by
#: ``python bench/fit_calibration.py`` on development seeds only.
_CALIBRATION_FILE = "calibration.json"
#: Candidate model names, in the order they are fitted.
CANDIDATES = ("lognormal", "gmm2", "gmm3", "gmm4", "body_uniform")

_N_GRID = 2048
#: Largest sample given to the dip test (its p-value table stops at 72 000).
_DIP_MAX = 50_000


@dataclass(frozen=True)
class CandidateFit:
    """One candidate model fitted to the log-durations.

    Attributes
    ----------
    name : str
        ``"lognormal"``, ``"gmm2"``, ``"gmm3"``, ``"gmm4"`` or ``"body_uniform"``.
    params : dict
        Fitted parameters. Normal components are on the natural log of the durations in
        the caller's unit: ``weights``, ``mu`` and ``sigma`` lists. ``body_uniform`` adds
        ``uniform_weight``, ``uniform_low`` and ``uniform_high`` in the caller's unit.
    log_likelihood : float
        Log-likelihood of the log-durations used for the fit.
    n_params : int
        Free parameters counted by the BIC.
    bic : float
        ``n_params * ln(n) - 2 * log_likelihood``; lower is better.
    """

    name: str
    params: dict
    log_likelihood: float
    n_params: int
    bic: float

    def to_dict(self) -> dict:
        """Plain-Python (JSON-serialisable) form."""
        return {
            "name": self.name,
            "params": _plain(self.params),
            "log_likelihood": float(self.log_likelihood),
            "n_params": int(self.n_params),
            "bic": float(self.bic),
        }


@dataclass(frozen=True)
class ShapeProbabilities:
    """Calibrated probability of each shape (one per class of :data:`CLASSES`).

    The four sum to 1. ``TailShapeResult.confidence`` is the probability of the shape
    the decision rules chose; the others say which shape is the likelier alternative.

    Attributes
    ----------
    tight, right_skewed, multimodal, flat_tail : float
        Estimated probability, in [0, 1], that the sample's mechanism is of that class
        (on data like the benchmark's mechanism simulations; ``docs/classifier.md``).
    """

    tight: float
    right_skewed: float
    multimodal: float
    flat_tail: float

    def __getitem__(self, shape: str) -> float:
        if shape not in CLASSES:
            raise KeyError(f"no probability for shape {shape!r}; the shapes are {CLASSES}")
        return float(getattr(self, shape))

    def as_array(self) -> np.ndarray:
        """The four probabilities in the order of :data:`CLASSES`."""
        return np.array([getattr(self, c) for c in CLASSES], dtype=float)

    @property
    def most_likely(self) -> str:
        """The shape with the highest probability."""
        return CLASSES[int(np.argmax(self.as_array()))]

    def to_dict(self) -> dict:
        """Plain-Python (JSON-serialisable) form, shape -> probability."""
        return {c: float(getattr(self, c)) for c in CLASSES}


@dataclass(frozen=True)
class TailFlatness:
    """How flat a tail is (:func:`_tail_shape`): NaN figures and flatness 0 with fewer than
    8 values. In the JSON statistics its figures are flat keys with the tail's prefix
    (``tail_cv``, ``upper_tail_cv``)."""

    flatness: float  #: 1 - Kolmogorov distance to a uniform tail over its range (1: flat)
    cv: float  #: excess coefficient of variation of the counts in equal-width bins (~0: flat)
    upper_ratio: float  #: (q95 - q75) / (q75 - q25) of the tail: 0.4 uniform, 1.5 exponential
    half_ratio: float  #: values in the upper half of the range over the lower half (1: flat)

    def to_dict(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}{f.name}": getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class FitStatistics:
    """The evidence of the fits (absent when the kept values are all equal): the dip test,
    the best mixture's modes, the tail past the body and its flatness."""

    dip_statistic: float  #: Hartigan's dip statistic
    dip_pvalue: float  #: its p-value (small: not unimodal)
    sigma_floor: float  #: the narrowest component width allowed, log scale
    best_gmm: str  #: the Gaussian mixture (lognormal, gmm2..4) of the lowest BIC
    n_modes: int  #: separated modes of that mixture
    mode_locations: tuple[float, ...]  #: where they are, in the data's unit
    mode_masses: tuple[float, ...]  #: the share of the values around each
    valley_depth: float  #: the shallowest valley between two modes (density ratio)
    uniform_weight: float  #: weight of the uniform component of body_uniform
    dbic_body_uniform: float  #: BIC of body_uniform minus the best mixture's
    body_peak: float  #: the density's highest point, in the data's unit
    tail_start: float  #: where the tail starts past the body, in the data's unit
    tail_fraction: float  #: share of the values in the tail
    tail_count: int  #: values in the tail
    tail: TailFlatness  #: the whole tail's flatness (keys ``tail_*``)
    upper_tail: TailFlatness  #: the same past its lower quarter (keys ``upper_tail_*``)
    tail_bump_z: float  #: strongest rise of the tail's density after a dip, z-score
    plateau_bump_z: float  #: the same with a milder rise, the tail's top 1 % left out
    peak_quantile: float  #: share of the values below the density's peak
    tail_top_share: float  #: the tail's share in the top fifth of its range over a uniform's

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, TailFlatness):
                out.update(value.to_dict(f"{f.name}_"))
            else:
                out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class TailStatistics:
    """The evidence :func:`classify_tail` decides with (``TailShapeResult.statistics``).

    Its JSON form (:meth:`to_dict`, the ``statistics`` of the classifier's result) is flat:
    the figures below, those of :attr:`fit` in its place (``dip_pvalue``, ``tail_cv``,
    ...), then ``p_tight`` and ``reason``."""

    n_valid: int  #: valid values (finite, positive)
    n_outliers_low: int  #: isolated extremes set aside, low
    n_outliers_high: int  #: isolated extremes set aside, high
    p50: float  #: P50 of the valid values, in their unit
    p90: float  #: P90
    p99: float  #: P99
    p99_over_p50: float  #: P99 / P50
    p99_over_p50_robust: float  #: the same without the isolated extremes (the gate's ratio)
    se_log_ratio: float  #: standard error of ln(p99/p50) from the order statistics
    resolution: float  #: the timer's step found in the values (0: none)
    n_fit: int  #: values fitted (evenly spaced order statistics of larger samples)
    skewness: float  #: sample skewness of the fitted values
    skewness_log: float  #: the same of their logarithms
    fit: FitStatistics | None = None  #: the fits' evidence (None: the kept values are equal)
    p_tight: float | None = None  #: probability that p99/p50 is within the tight ratio
    reason: str = ""  #: why the shape was chosen, in words

    def to_dict(self) -> dict[str, Any]:
        """The flat JSON form (:attr:`fit`'s figures in its place)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "fit":
                out.update(value.to_dict() if value is not None else {})
            else:
                out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, flat: dict[str, Any]) -> TailStatistics:
        """The statistics whose :meth:`to_dict` gave ``flat`` (rows stored before the
        statistics were typed read back this way too)."""
        own = {f.name: flat[f.name] for f in fields(cls) if f.name != "fit" and f.name in flat}
        fit = None
        if "dip_pvalue" in flat:
            shapes = {p: TailFlatness(*(flat[f"{p}_{f.name}"] for f in fields(TailFlatness)))
                      for p in ("tail", "upper_tail")}
            fit = FitStatistics(**{
                f.name: shapes[f.name] if f.name in shapes
                else tuple(flat[f.name]) if f.name.startswith("mode_") else flat[f.name]
                for f in fields(FitStatistics)})
        return cls(**own, fit=fit)


@dataclass(frozen=True)
class TailShapeResult:
    """Result of :func:`classify_tail`.

    Attributes
    ----------
    shape : str
        One of :data:`SHAPES`.
    confidence : float
        Estimated probability, in [0, 1], that ``shape`` is right: ``probabilities``
        of ``shape`` (0 when ``success`` is False).
    n : int
        Number of durations the classification used (valid values, after isolated
        extreme values were set aside; before subsampling).
    candidates : dict of str to CandidateFit
        Every fitted candidate model, by name.
    best_model : str
        Name of the candidate with the lowest BIC ("" when nothing was fitted).
    statistics : TailStatistics or None
        The evidence: percentiles, ratios, skewness, Hartigan's dip test, the tail's
        flatness, the modes found (:class:`TailStatistics`; None when too few or
        constant values left nothing to measure). See Notes of :func:`classify_tail`.
    success : bool
        False when the data could not be classified (too few or constant values).
    message : str
        What happened, including how many values were dropped or set aside.
    probabilities : ShapeProbabilities or None
        Calibrated probability of every shape (None when ``success`` is False).
    """

    shape: str
    confidence: float
    n: int
    candidates: dict = field(default_factory=dict)
    best_model: str = ""
    statistics: TailStatistics | None = None
    success: bool = True
    message: str = ""
    probabilities: ShapeProbabilities | None = None

    def pdf(self, x: Any) -> np.ndarray:
        """Density of the best model at ``x`` on the original (not log) scale.

        Parameters
        ----------
        x : array_like
            Durations in the unit of the classified data.

        Returns
        -------
        numpy.ndarray
            ``f(x)`` in 1/unit, so that it integrates to 1 over ``x``; 0 for ``x <= 0``
            and everywhere when no model was fitted.
        """
        x = np.asarray(x, dtype=float)
        out = np.zeros(x.shape)
        if not self.best_model:
            return out
        fit = self.candidates[self.best_model]
        pos = np.isfinite(x) & (x > 0)
        if not np.any(pos):
            return out
        y = np.log(x[pos])
        out[pos] = np.exp(_logpdf_from_params(fit.params, y) - y)
        return out

    @property
    def _fit(self) -> FitStatistics | None:
        return self.statistics.fit if self.statistics is not None else None

    @property
    def dip_pvalue(self) -> float | None:
        """p-value of Hartigan's dip test of unimodality (None when not computed)."""
        return self._fit.dip_pvalue if self._fit is not None else None

    @property
    def n_modes(self) -> int | None:
        """Modes found in the fitted mixture (None when not computed)."""
        return self._fit.n_modes if self._fit is not None else None

    @property
    def tail_flatness(self) -> float | None:
        """Flatness of the tail, 0 (decaying) to 1 (flat) (None when not computed)."""
        return self._fit.tail.flatness if self._fit is not None else None

    def to_dict(self) -> dict:
        """Plain-Python (JSON-serialisable) form of the result."""
        return {
            "shape": self.shape,
            "confidence": float(self.confidence),
            "probabilities": (
                self.probabilities.to_dict() if self.probabilities is not None else None
            ),
            "n": int(self.n),
            "best_model": self.best_model,
            "candidates": {k: v.to_dict() for k, v in self.candidates.items()},
            "statistics": _plain(self.statistics.to_dict() if self.statistics else {}),
            "success": bool(self.success),
            "message": self.message,
        }

    def __str__(self) -> str:
        st = self.statistics
        lines = [f"TailShapeResult: {self.shape} (confidence {self.confidence:.3f}, n={self.n})"]
        if self.probabilities is not None:
            lines.append(
                "  probabilities: "
                + ", ".join(f"{k} {v:.3f}" for k, v in self.probabilities.to_dict().items())
            )
        if st is not None:
            lines.append(
                f"  p50={_fmt(st.p50)} p90={_fmt(st.p90)} p99={_fmt(st.p99)}"
                f"  p99/p50={st.p99_over_p50:.3g} (robust {st.p99_over_p50_robust:.3g})"
            )
        if st is not None and st.fit is not None:
            lines.append(
                f"  dip={st.fit.dip_statistic:.4f} (p={st.fit.dip_pvalue:.3g})"
                f"  modes={st.fit.n_modes}  tail_flatness={st.fit.tail.flatness:.2f}"
                f"  skewness(log)={st.skewness_log:.2f}"
            )
        if self.candidates:
            best = min(c.bic for c in self.candidates.values())
            parts = [
                f"{c.name} {c.bic - best:+.1f}"
                for c in sorted(self.candidates.values(), key=lambda c: c.bic)
            ]
            lines.append("  dBIC: " + ", ".join(parts))
        if self.message:
            lines.append(f"  {self.message}")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- helpers


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _plain(obj: Any) -> Any:
    """Convert numpy scalars/arrays inside dicts and lists to plain Python."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [_plain(v) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    return obj


def _logpdf_from_params(params: dict, y: np.ndarray) -> np.ndarray:
    """Log density on the log scale of a candidate described by its params dict."""
    weights = np.asarray(params["weights"], dtype=float)
    means = np.asarray(params["mu"], dtype=float)
    sigmas = np.asarray(params["sigma"], dtype=float)
    uni = None
    if "uniform_weight" in params:
        uni = (params["uniform_weight"], params["uniform_low"], params["uniform_high"])
    fit = mixture.MixtureFit(weights, means, sigmas, 0.0, 0, True, uni)
    return fit.logpdf(y)


def _validate(durations, min_n, tight_ratio, max_samples, rng):
    """Check arguments; return (finite positive float values, n dropped, rng Generator)."""
    try:
        x = np.asarray(durations, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"`durations` must be a 1-D array of numbers; could not convert it ({exc})"
        ) from None
    if x.ndim != 1:
        raise ValueError(
            f"`durations` must be 1-D; got an array of shape {x.shape} "
            f"(flatten it or pass one series at a time)"
        )
    if isinstance(min_n, bool) or not isinstance(min_n, (int, np.integer)) or min_n < 10:
        raise ValueError(f"`min_n` must be an integer >= 10; got {min_n!r}")
    if not (
        isinstance(tight_ratio, (int, float, np.floating))
        and tight_ratio > 1.0
        and math.isfinite(tight_ratio)
    ):
        raise ValueError(f"`tight_ratio` must be a finite number > 1; got {tight_ratio!r}")
    if (
        isinstance(max_samples, bool)
        or not isinstance(max_samples, (int, np.integer))
        or max_samples < 1000
    ):
        raise ValueError(f"`max_samples` must be an integer >= 1000; got {max_samples!r}")
    try:
        gen = np.random.default_rng(rng)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"`rng` must be None, an int seed or a numpy Generator; got {rng!r} ({exc})"
        ) from None
    keep = np.isfinite(x) & (x > 0)
    n_drop = int(x.size - np.count_nonzero(keep))
    return x[keep], n_drop, gen


def _isolated_extremes(
    v: np.ndarray, n: int, *, c: float = 8.0, min_gap: float = math.log(1.3)
) -> int:
    """Count isolated extreme values at one end of a sample.

    ``v`` holds the log-durations nearest that end, ordered from the extreme inwards
    and oriented so that they increase (negate the top end). Rényi's representation:
    near the end of a sample whose tail is exponential in log time with scale ``beta``,
    ``j * D_j`` (``D_j`` = j-th spacing from the end) are i.i.d. exponential(``beta``).
    The ``j`` most extreme points are set aside when ``j * D_j`` exceeds ``c * beta``
    (probability ``exp(-c)`` per spacing, 3e-4 for c = 8) and the gap is also a factor
    of at least 1.3; ``beta`` is estimated from the next spacings inwards. At most
    ``max(5, 0.2 % of n)`` points go at each end.
    """
    k_max = max(5, int(0.002 * n))
    m = max(10, k_max)
    if n < 4 * (k_max + m):
        k_max = max(1, min(k_max, n // 20))
        m = max(5, min(m, n // 5))
    d = np.diff(v[: k_max + m + 1])
    if d.size < k_max + 3:
        return 0
    j = np.arange(1, d.size + 1, dtype=float)
    jd = j * d
    beta = max(float(np.mean(jd[k_max:])), 1e-12)
    flag = (jd[:k_max] > c * beta) & (d[:k_max] > min_gap)
    idx = np.flatnonzero(flag)
    return int(idx[-1] + 1) if idx.size else 0


def _dequantize(x: np.ndarray):
    """Spread tied values (sorted ``x``) evenly over their rounding interval.

    The interval width is the smallest positive difference between distinct values (the
    timer resolution for discretised data). A run of ``c`` copies of ``v`` becomes
    ``v + delta * ((i + 0.5) / c - 0.5)``, i = 0..c-1: deterministic, order-free and
    quantile-preserving. Returns (values, resolution or 0 when there were no ties).
    """
    d = np.diff(x)
    if x.size < 2 or np.all(d > 0):
        return x, 0.0
    pos = d[d > 0]
    if pos.size == 0:
        return x, 0.0
    delta = float(pos.min())
    starts = np.concatenate(([True], d > 0))
    grp = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    counts = np.diff(np.append(first, x.size))
    rank = np.arange(x.size) - first[grp]
    out = x + delta * ((rank + 0.5) / counts[grp] - 0.5)
    out = np.maximum(out, 0.5 * x)
    return out, delta


def _quantile_se(x: np.ndarray, p: float) -> float:
    """Distribution-free standard error of the log of quantile ``p`` of sorted ``x``.

    Half the log-distance between the order statistics at ranks
    ``p (n - 1) -/+ sqrt(n p (1 - p))`` (a one-sigma binomial interval of the rank).
    """
    n = x.size
    k = p * (n - 1)
    h = math.sqrt(n * p * (1 - p))
    lo = x[int(max(0, math.floor(k - h)))]
    hi = x[int(min(n - 1, math.ceil(k + h)))]
    return 0.5 * math.log(hi / lo)


def _modes(
    fit: mixture.MixtureFit, grid: np.ndarray, *, min_sep: float, max_depth: float, min_mass: float
):
    """Modes of a fitted density on the linear scale, merging insignificant ones.

    The fitted log-scale density f(y) is turned into the linear-scale density
    g = f(y) exp(-y) on ``grid``. Adjacent modes are merged unless they are at least
    ``min_sep`` apart in log time, the density between them drops to at most
    ``max_depth`` of the lower peak, and each side holds ``min_mass`` of the mass.
    Returns a list of (location y, mass, height) and the deepest valley kept (its
    density over the lower neighbouring peak's; 1.0 with a single mode).
    """
    f = np.exp(fit.logpdf(grid))
    g = f * np.exp(-grid)
    dy = grid[1] - grid[0]
    cum = np.concatenate(([0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * dy)))
    cum /= cum[-1] if cum[-1] > 0 else 1.0
    inner = np.flatnonzero((g[1:-1] > g[:-2]) & (g[1:-1] >= g[2:])) + 1
    peaks = list(inner)
    if g[0] > g[1]:
        peaks.insert(0, 0)
    if g[-1] > g[-2]:
        peaks.append(len(g) - 1)
    if not peaks:
        peaks = [int(np.argmax(g))]
    while True:
        valleys = [
            p1 + int(np.argmin(g[p1 : p2 + 1]))
            for p1, p2 in zip(peaks[:-1], peaks[1:], strict=True)
        ]
        bounds = [0] + valleys + [len(g) - 1]
        masses = [cum[bounds[i + 1]] - cum[bounds[i]] for i in range(len(peaks))]
        worst = None
        worst_key = None
        for i in range(len(peaks) - 1):
            p1, p2, v = peaks[i], peaks[i + 1], valleys[i]
            depth = g[v] / min(g[p1], g[p2])
            sep = grid[p2] - grid[p1]
            mass = min(masses[i], masses[i + 1])
            ok = depth <= max_depth and sep >= min_sep and mass >= min_mass
            key = (ok, -depth)
            if not ok and (worst_key is None or key < worst_key):
                worst, worst_key = i, key
        if worst is None:
            break
        i = worst
        drop = i if g[peaks[i]] < g[peaks[i + 1]] else i + 1
        del peaks[drop]
    valleys = [
        p1 + int(np.argmin(g[p1 : p2 + 1])) for p1, p2 in zip(peaks[:-1], peaks[1:], strict=True)
    ]
    bounds = [0] + valleys + [len(g) - 1]
    modes = []
    for i, p in enumerate(peaks):
        modes.append((float(grid[p]), float(cum[bounds[i + 1]] - cum[bounds[i]]), float(g[p])))
    depths = [float(g[v] / min(g[peaks[i]], g[peaks[i + 1]])) for i, v in enumerate(valleys)]
    return modes, min(depths, default=1.0)


def _tail_start(fit: mixture.MixtureFit, grid: np.ndarray) -> tuple[float, float]:
    """Where the body ends and the tail begins, in log time; and the body's top peak.

    On the linear-scale density ``g`` of ``fit``: the body is the highest peak plus
    every peak (at least 5 % as high) within a factor :data:`MIN_MODE_SEPARATION`
    above it -- close sub-modes of the service time, such as two request sizes. Past
    the body's last peak, the tail starts at the first point where ``g`` is below 5 %
    of the top, or below half of the last peak while falling more slowly than 1/x
    (``d ln g / d ln x > -1``: the steep edge of the body is over, as where a flat
    plateau or a slow exponential decay takes over).
    """
    g = np.exp(fit.logpdf(grid) - grid)
    slope = np.gradient(np.log(np.maximum(g, 1e-300)), grid)
    inner = np.flatnonzero((g[1:-1] > g[:-2]) & (g[1:-1] >= g[2:])) + 1
    top = int(np.argmax(g))
    hi = top
    step = math.log(MIN_MODE_SEPARATION)
    for p in inner:
        if p > hi and grid[p] - grid[top] < step and g[p] >= 0.05 * g[top]:
            hi = p
    seg = slice(hi, None)
    cond = (g[seg] < 0.05 * g[top]) | ((g[seg] < 0.5 * g[hi]) & (slope[seg] > -1.0))
    below = np.flatnonzero(cond)
    t0 = float(grid[hi + below[0]]) if below.size else float(grid[-1])
    return t0, float(grid[top])


def _tail_shape(tail: np.ndarray, a: float) -> TailFlatness:
    """Shape statistics of the tail values ``tail`` (sorted, linear scale) above ``a``.

    Only the tail up to its 95th percentile is used, so that a few stray extreme values
    do not stretch the range (a uniform tail cut at a quantile is still uniform).
    Returned (NaN, and flatness 0, when there are fewer than 8 values):

    - ``flatness``: 1 - Kolmogorov distance between the tail and a uniform
      distribution over its range (1 = perfectly flat).
    - ``cv``: excess coefficient of variation of the counts in equal-width bins
      over the inner 80 % of the range (Poisson noise removed); ~0 when flat.
    - ``upper_ratio``: (q95 - q75) / (q75 - q25) of the tail; 0.4 for a uniform
      tail, 1.5 for an exponential one.
    - ``half_ratio``: values in the upper half of the range over the lower half;
      1 when flat, near 0 when the density decays.
    """
    nan = float("nan")
    none = TailFlatness(flatness=0.0, cv=nan, upper_ratio=nan, half_ratio=nan)
    if tail.size < 8:
        return none
    tail = tail[: tail.size - max(1, int(0.05 * tail.size))]
    b = float(tail[-1])
    if b <= a:
        return none
    u = (tail - a) / (b - a)
    ks = max(
        float(np.max(np.arange(1, u.size + 1) / u.size - u)),
        float(np.max(u - np.arange(u.size) / u.size)),
    )
    q25, q75, q95 = np.quantile(tail, [0.25, 0.75, 0.95])
    nb = int(min(20, max(5, round(math.sqrt(tail.size)))))
    c, _ = np.histogram(u, bins=nb, range=(0.1, 0.9))
    mc = float(c.mean())
    h2 = int(np.count_nonzero(u > 0.5))
    return TailFlatness(
        flatness=1.0 - ks,
        cv=math.sqrt(max(float(c.var()) - mc, 0.0)) / mc if mc > 0 else 10.0,
        upper_ratio=float((q95 - q75) / max(q75 - q25, 1e-300 * b)),
        half_ratio=h2 / max(u.size - h2, 1),
    )


def _tail_top_share(tail: np.ndarray, a: float) -> float:
    """Share of the tail values in the top fifth of its range, over a uniform tail's.

    The range is ``[a, b]`` with ``b`` the tail's 99th percentile (strays left out);
    1 for a uniform tail, below 1 for a decaying one, above 1 when the tail ends in a
    cluster (requests wholly slowed by on/off contention after a plateau of partly
    slowed ones). NaN with fewer than 10 values.
    """
    if tail.size < 10:
        return float("nan")
    b = float(np.quantile(tail, 0.99))
    if b <= a:
        return float("nan")
    share = np.count_nonzero((tail >= a + 0.8 * (b - a)) & (tail <= b)) / tail.size
    return float(share / (0.2 * 0.99))


def _tail_bump(tail: np.ndarray, a: float, body_peak: float, rise: float = _BUMP_RISE) -> float:
    """Strongest rise of the tail's density after a dip, as a z-score (0 if none).

    The tail (linear scale, all the values given) is cut into ``clip(sqrt(n), 5, 25)``
    bins of equal width over ``[a, max]``. For bins ``i < j`` with
    ``c_j >= rise (c_i + 1)`` (by default 2.5: the density more than doubles after a
    dip) and bin ``j`` at least
    :data:`MIN_MODE_SEPARATION` times ``body_peak``, the z-score is
    ``(c_j - c_i) / sqrt(c_i + c_j)``. A mixture with a BIC penalty cannot afford a
    component for a small, sparse cluster in a short sample; this catches it.
    """
    if tail.size < 10 or tail[-1] <= a:
        return 0.0
    nb = int(min(25, max(5, round(math.sqrt(tail.size)))))
    c, edges = np.histogram(tail, bins=nb, range=(a, float(tail[-1])))
    c = c.astype(float)
    centres = 0.5 * (edges[1:] + edges[:-1])
    ci, cj = c[:, None], c[None, :]
    z = (cj - ci) / np.sqrt(np.maximum(ci + cj, 1.0))
    ok = (
        np.triu(np.ones((nb, nb), bool), 1)
        & (cj >= rise * (ci + 1.0))
        & (centres[None, :] >= MIN_MODE_SEPARATION * body_peak)
    )
    return float(z[ok].max()) if np.any(ok) else 0.0


def _insufficient(n, message) -> TailShapeResult:
    return TailShapeResult(
        shape="insufficient_data",
        confidence=0.0,
        n=int(n),
        candidates={},
        best_model="",
        statistics=None,
        success=False,
        message=message,
    )


# ------------------------------------------------------------------------------ main


def classify_tail(
    durations,
    *,
    rng=0,
    min_n: int = 50,
    tight_ratio: float = DEFAULT_TIGHT_RATIO,
    max_samples: int = 200_000,
    elevated_ratio: float | None = None,
) -> TailShapeResult:
    """Classify the shape of a latency distribution's tail.

    Says whether the tail is abnormal (p99/p50 above ``tight_ratio``) and, if so,
    whether it is ``right_skewed`` (one mode, decaying tail: CPU-side queueing),
    ``multimodal`` (separated modes: GPU execution jitter) or ``flat_tail`` (a narrow
    body and a long roughly uniform tail: PCIe contention).

    Parameters
    ----------
    durations : array_like, 1-D
        Positive durations in any unit (nsys gives nanoseconds). Non-finite values and
        values <= 0 are dropped; ``message`` says how many.
    rng : None, int or numpy.random.Generator, default 0
        Seeds the k-means++ restarts of the mixture fits. The result is deterministic
        for a fixed seed.
    min_n : int, default 50
        Fewer valid values than this give ``insufficient_data``. Must be >= 10.
    tight_ratio : float, default 2.0
        p99/p50 at or below which the tail is ``tight`` (not abnormal). The healthy H200
        serving trace has 1.57, the one with planted GPU jitter 3.72.
    max_samples : int, default 200000
        Larger samples are fitted on this many evenly spaced order statistics
        (deterministic); percentiles always use every value. Must be >= 1000.

    elevated_ratio : float, optional
        p99/p50 above which a tail is elevated (the diagnosis' ``elevated_ratio``). Given,
        ``tight`` means tight: a sample the gate calls tight keeps its tight probability
        only as far as its robust p99/p50 is at or below ``elevated_ratio`` (times the
        probability of that, with the gate's order-statistic error); the rest goes to the
        other shapes in proportion. A broad right tail of p99/p50 1.7 is then not tight at
        0.99, while the simulations the probabilities were fitted on (tight up to 1.8) and
        the benchmark are unchanged without it.

    Returns
    -------
    TailShapeResult
        ``shape``, ``confidence``, ``probabilities`` (every shape's), ``n``,
        ``candidates`` (every model with its BIC), ``best_model``, ``statistics``,
        ``success``, ``message``; ``pdf(x)`` and ``to_dict()``.

    Raises
    ------
    ValueError
        If ``durations`` is not 1-D or not numeric, or another argument is out of range.

    Notes
    -----
    The steps (details in ``docs/classifier.md``):

    1. Drop invalid values; fewer than ``min_n`` left, or all equal, give
       ``insufficient_data`` with ``success=False``.
    2. Set aside isolated extreme values at either end (at most ``max(5, 0.2 % n)``),
       found with Rényi's spacing representation: warm-up requests must not decide.
    3. Gate: robust p99/p50 <= ``tight_ratio`` gives ``tight``.
    4. Spread tied values (discretised timers) over their rounding interval; fit on
       log-time a log-normal, Gaussian mixtures of 2-4 components (EM, best of three
       starts) and a normal body plus a uniform tail; compare by BIC.
    5. Count separated modes of the best mixture on the linear scale (at least 1.4x
       apart, valley <= 0.35 of the lower peak, each >= 1.5 % of the mass), and
       measure the flatness of the tail past the body.
    6. Decide: right-skewed if the density has no body (it falls from the shortest
       values, as a busy queue's does); flat tail if the tail past a narrow body is
       flat (all of it, or past its lower quarter) and holds at most 55 % of the
       values, unless it ends in a cluster; right-skewed if most values lie past the
       body with at most two modes and no sharp cluster (a busy queue); else
       multimodal with two or more separated modes, or a significant cluster in the
       tail (density more than doubling after a dip); else right-skewed.
    7. ``probabilities``: for the verdict, a multinomial logistic model over the four
       shapes on the gate's z-score, sample size, tail statistics and mode masses
       (package data ``calibration.json``, fitted on synthetic mechanism samples by
       ``bench/fit_calibration.py``); ``confidence`` is the verdict's probability.

    The verdict depends only on the sorted values and on ratios: it is invariant to
    the order of the values and to the unit.

    References
    ----------
    .. [1] J. A. Hartigan and P. M. Hartigan, "The Dip Test of Unimodality",
       Annals of Statistics 13(1), 1985.
    .. [2] A. Rényi, "On the theory of order statistics", Acta Math. Acad. Sci. Hung.
       4, 1953 (spacings of exponential order statistics).
    .. [3] G. Schwarz, "Estimating the dimension of a model", Annals of Statistics
       6(2), 1978 (BIC).

    Examples
    --------
    A quarter of the requests take 2.5x longer (GPU jitter):

    >>> import numpy as np
    >>> from nsysdiag.stats.classifier import classify_tail
    >>> rng = np.random.default_rng(0)
    >>> x = np.concatenate([rng.lognormal(np.log(2e6), 0.05, 3000),
    ...                     rng.lognormal(np.log(5e6), 0.05, 1000)])
    >>> res = classify_tail(x)
    >>> res.shape, res.best_model
    ('multimodal', 'gmm2')
    >>> [round(m / 1e6, 1) for m in res.statistics.fit.mode_locations]
    [2.0, 5.0]
    >>> round(res.statistics.p99_over_p50, 2)
    2.69

    The same body alone is tight:

    >>> classify_tail(x[:3000]).shape
    'tight'
    """
    x, n_drop, gen = _validate(durations, min_n, tight_ratio, max_samples, rng)
    notes = []
    if n_drop:
        notes.append(f"dropped {n_drop} non-finite or non-positive value(s)")
    n_valid = x.size
    if n_valid < min_n:
        notes.append(f"{n_valid} valid value(s), fewer than min_n={min_n}")
        return _insufficient(n_valid, "; ".join(notes))
    x = np.sort(x)
    if x[0] == x[-1]:
        notes.append(f"all {n_valid} values are equal ({x[0]:g}): no distribution to classify")
        return _insufficient(n_valid, "; ".join(notes))
    xt, y, st, fits, cands = _features(x, gen, max_samples=max_samples)
    st = replace(st, p_tight=float(special.ndtr(_gate_z(st, tight_ratio))))
    if not cands:
        # all kept values equal once the isolated extremes are set aside
        shape, reason = "tight", "all values equal apart from isolated extremes"
        probs = ShapeProbabilities(1.0, 0.0, 0.0, 0.0)
    else:
        shape, reason = _decide(st, tight_ratio)
        probs = _probabilities(st, shape, tight_ratio)
        if shape == "tight" and elevated_ratio is not None:
            probs = _strictly_tight(probs, float(special.ndtr(_gate_z(st, elevated_ratio))))
    conf = probs[shape]
    st = replace(st, reason=reason)
    n_out = st.n_outliers_low + st.n_outliers_high
    if n_out:
        notes.append(
            f"set aside {n_out} isolated extreme value(s) ({st.n_outliers_low} low, "
            f"{st.n_outliers_high} high) before the fits"
        )
    if xt.size > max_samples:
        notes.append(f"fitted {max_samples} evenly spaced order statistics of {xt.size} values")
    notes.insert(0, reason)
    best = min(cands, key=lambda k: cands[k].bic) if cands else ""
    return TailShapeResult(
        shape=shape,
        confidence=conf,
        n=int(xt.size),
        candidates=cands,
        best_model=best,
        statistics=st,
        success=True,
        message="; ".join(notes),
        probabilities=probs,
    )


def _decide(st: TailStatistics, tight_ratio: float) -> tuple[str, str]:
    """The shape, from the evidence in ``st`` (with its fits), and a one-line reason."""
    r = st.p99_over_p50_robust
    if r <= tight_ratio:
        return "tight", f"p99/p50 = {r:.3g} <= tight_ratio {tight_ratio:g}"
    head = f"p99/p50 = {r:.3g} > {tight_ratio:g}"
    fit = _fitted(st)
    body_modes = [m for m in fit.mode_locations if m < fit.tail_start]
    if fit.peak_quantile < NO_BODY_QUANTILE or (
        fit.n_modes <= 1 and fit.body_peak < NO_BODY_PEAK * st.p50
    ):
        # the density is highest among the shortest values and falls from there (an
        # M/M/1 sojourn time is exponential): the clusters or plateaus a short window
        # of a busy queue shows in its tail are busy periods, not modes or contention
        return "right_skewed", f"{head}; density falls from the shortest values (no body)"
    if _is_flat(fit):
        if len(body_modes) >= 2:
            return "multimodal", f"{head}; separated modes below a flat tail"
        if fit.tail_bump_z >= _BUMP_Z:
            # a plateau ending in a cluster: requests partly and wholly overlapped by
            # on/off GPU contention, not a uniform wait
            z = fit.tail_bump_z
            return "multimodal", f"{head}; a flat tail ending in a cluster (z={z:.1f})"
        if fit.plateau_bump_z >= _PLATEAU_Z:
            # the same with a milder rise, on the tail without its top 1 % (stray
            # values would stretch the bins): the slow copy of the body where the
            # wholly slowed requests gather
            z = fit.plateau_bump_z
            return "multimodal", f"{head}; a flat tail ending in a cluster (z={z:.1f})"
        top = fit.tail_top_share
        if math.isfinite(top) and top >= TAIL_TOP_CLUSTER:
            return "multimodal", f"{head}; a flat tail ending in a cluster ({top:.1f}x)"
        return "flat_tail", f"{head}; flat tail (flatness {fit.tail.flatness:.2f})"
    if (
        fit.tail_fraction > MAX_FLAT_FRACTION
        and fit.n_modes <= 2
        and fit.tail_bump_z < _BUSY_Z
    ):
        # most requests past a minority body (those that found the server free) and
        # no sharp cluster: a busy queue, whose busy periods make broad lumps, not the
        # sharp slow modes of discrete code paths
        return "right_skewed", f"{head}; most values past the body, no sharp cluster (busy queue)"
    if fit.n_modes >= 2:
        return "multimodal", f"{head}; {fit.n_modes} separated modes"
    if fit.tail_bump_z >= _BUMP_Z:
        z = fit.tail_bump_z
        return "multimodal", f"{head}; a separated cluster in the tail (z={z:.1f})"
    return "right_skewed", f"{head}; one mode, decaying tail"


def _is_flat(fit: FitStatistics) -> bool:
    """A flat tail past a narrow body: the whole tail, or its upper three quarters."""
    if fit.tail_count < MIN_TAIL_COUNT or fit.tail_start > MAX_TAIL_START * fit.body_peak:
        return False
    if fit.tail_fraction > MAX_FLAT_FRACTION:
        # most requests delayed: a busy queue (M/D/1 at high load), not a body with
        # occasional contention waits
        return False
    if _flat_stats(fit.tail):
        return True
    # a light queue in front adds a decaying lump of waits next to the body, which
    # hides a plateau further out from the statistics of the whole tail; an
    # exponential (queueing) tail is memoryless, so its upper part decays just the same
    return fit.tail_count >= MIN_UPPER_TAIL_COUNT and _flat_stats(fit.upper_tail)


def _flat_stats(tail: TailFlatness) -> bool:
    cv, ur, hr = tail.cv, tail.upper_ratio, tail.half_ratio
    if not (math.isfinite(cv) and math.isfinite(ur) and math.isfinite(hr)):
        return False
    return cv <= _FLAT_CV and ur <= _FLAT_UR and hr >= _FLAT_HR


def _gate_z(st: TailStatistics, tight_ratio: float) -> float:
    """z-score of ln(tight_ratio) - ln(p99/p50) with the order-statistic standard error."""
    se = max(st.se_log_ratio, 1e-9)
    z = (math.log(tight_ratio) - math.log(st.p99_over_p50_robust)) / se
    return float(min(max(z, -30.0), 30.0))


def _calibration_features(st: TailStatistics, tight_ratio: float) -> np.ndarray:
    """Inputs of the probability model (:data:`CALIBRATION_FEATURES`, in that order).

    All read the evidence in ``st``, whatever the verdict: 1; log Phi(z) and
    log Phi(-z), z the gate's z-score (:func:`_gate_z`), each at least -10; log10 n - 3;
    the flat margins of the whole tail and of its upper three quarters (the smallest
    relative distance of the tail statistics from the flat_tail thresholds, positive
    inside, clipped to [-2, 1]); the second mode's mass; log10 of the tail count + 1;
    ``tail_bump_z`` and ``plateau_bump_z`` over 10 (at most 1); ``peak_quantile``;
    ``tail_fraction``; ln ``tail_top_share`` (clipped to [-3, 2], 0 when undefined);
    1 with two or more separated modes.
    """
    fit = _fitted(st)
    z = _gate_z(st, tight_ratio)
    lp_tight = max(float(special.log_ndtr(z)), -10.0)
    lp_abn = max(float(special.log_ndtr(-z)), -10.0)
    ln = math.log10(max(st.n_fit, 1)) - 3.0
    masses = sorted(fit.mode_masses, reverse=True)
    second = masses[1] if len(masses) > 1 else 0.0
    nt = math.log10(fit.tail_count + 1.0)
    top = fit.tail_top_share
    ltop = min(max(math.log(top), -3.0), 2.0) if math.isfinite(top) and top > 0 else 0.0
    return np.array(
        [
            1.0,
            lp_tight,
            lp_abn,
            ln,
            _flat_margin(fit.tail),
            _flat_margin(fit.upper_tail),
            second,
            nt,
            min(fit.tail_bump_z, 10.0) / 10.0,
            min(fit.plateau_bump_z, 10.0) / 10.0,
            fit.peak_quantile,
            fit.tail_fraction,
            ltop,
            1.0 if fit.n_modes >= 2 else 0.0,
        ]
    )


def _flat_margin(tail: TailFlatness) -> float:
    """Smallest relative distance of the tail statistics from the flat_tail thresholds.

    Positive when all three are inside (flat), clipped to [-2, 1]; -2 when undefined.
    """
    cv, ur, hr = tail.cv, tail.upper_ratio, tail.half_ratio
    if not all(math.isfinite(v) for v in (cv, ur, hr)):
        return -2.0
    m = min((_FLAT_CV - cv) / _FLAT_CV, (_FLAT_UR - ur) / _FLAT_UR, (hr - _FLAT_HR) / _FLAT_HR)
    return min(max(m, -2.0), 1.0)


def _fitted(st: TailStatistics) -> FitStatistics:
    """The fits' evidence of ``st`` (the decision and the probabilities need it)."""
    if st.fit is None:
        raise ValueError("the statistics hold no fit (all kept values equal)")
    return st.fit


@functools.lru_cache(maxsize=1)
def _calibration() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The probability model by verdict: (coefficients (classes x features), lowest and
    highest value of each feature among the verdict's fitted samples)."""
    text = resources.files("nsysdiag.stats").joinpath(_CALIBRATION_FILE).read_text("utf-8")
    data = json.loads(text)
    if tuple(data["classes"]) != CLASSES or tuple(data["features"]) != CALIBRATION_FEATURES:
        raise RuntimeError(
            f"nsysdiag/stats/{_CALIBRATION_FILE} was fitted for other classes or features; "
            "refit it with `python bench/fit_calibration.py`"
        )
    return {
        v: tuple(np.asarray(data[k][v], dtype=float) for k in ("coefficients", "low", "high"))
        for v in CLASSES
    }


def _strictly_tight(probs: ShapeProbabilities, within: float) -> ShapeProbabilities:
    """``probs`` with tight's probability scaled by ``within`` (the probability that the
    tail is within the elevated ratio) and the rest shared by the other shapes in
    proportion (all to right_skewed when they had none)."""
    p = probs.as_array()
    tight = p[0] * within
    others = p[1:]
    rest = others / others.sum() if others.sum() > 0 else np.array([1.0, 0.0, 0.0])
    return ShapeProbabilities(float(tight), *(float(v) for v in rest * (1.0 - tight)))


def _probabilities(st: dict, shape: str, tight_ratio: float) -> ShapeProbabilities:
    """Calibrated probability of each class, given the verdict ``shape`` and the evidence.

    A multinomial logistic model per verdict (softmax of ``W[shape] @ features``). Each
    feature is first clipped to the range it had among the samples the verdict's model
    was fitted on: real traces reach values the simulations never do (p99/p50 in the
    hundreds), and a linear model extrapolated there says anything.
    """
    w, low, high = _calibration()[shape]
    logits = w @ np.clip(_calibration_features(st, tight_ratio), low, high)
    p = special.softmax(logits)
    return ShapeProbabilities(*(float(v) for v in p))


def _n_params(f: mixture.MixtureFit) -> int:
    """Free parameters: 3 per normal component less 1, plus weight and end of a uniform."""
    return 3 * f.means.size - 1 + (2 if f.uniform is not None else 0)


def _skewness(v: np.ndarray) -> float:
    """Sample skewness (biased, like scipy.stats.skew); 0 for constant data."""
    d = v - v.mean()
    m2 = float(np.mean(d * d))
    if m2 <= 0.0:
        return 0.0
    return float(np.mean(d * d * d)) / m2**1.5


def _robust_sample(x: np.ndarray, max_samples: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Percentiles, isolated extremes, the gate's ratio and the sample to fit.

    Returns (values kept, de-tied fit sample in the caller's unit, the first figures of
    :class:`TailStatistics` by name).
    """
    n_valid = x.size
    p50, p90, p99 = (float(v) for v in np.quantile(x, [0.5, 0.9, 0.99]))
    k_end = min(n_valid, 2 * max(5, int(0.002 * n_valid)) + 12)
    n_lo = _isolated_extremes(np.log(x[:k_end]), n_valid)
    n_hi = _isolated_extremes(-np.log(x[::-1][:k_end]), n_valid)
    xt = x[n_lo : n_valid - n_hi]
    q50, q99 = (float(v) for v in np.quantile(xt, [0.5, 0.99]))
    st = {
        "n_valid": n_valid,
        "n_outliers_low": n_lo,
        "n_outliers_high": n_hi,
        "p50": p50,
        "p90": p90,
        "p99": p99,
        "p99_over_p50": p99 / p50,
        "p99_over_p50_robust": q99 / q50,
        "se_log_ratio": math.hypot(_quantile_se(xt, 0.5), _quantile_se(xt, 0.99)),
    }
    xs = xt
    if xt.size > max_samples:
        xs = xt[np.round(np.linspace(0, xt.size - 1, max_samples)).astype(np.int64)]
    xd, delta = _dequantize(xs)
    st["resolution"] = delta
    st["n_fit"] = int(xd.size)
    return xt, xd, st


def _fit_candidates(
    y: np.ndarray, q50: float, resolution: float, gen: np.random.Generator
) -> tuple[dict, dict, float]:
    """Fit every candidate to log-durations ``y`` (= ln(x / q50)).

    Returns (MixtureFit by name, CandidateFit by name, component width floor).
    """
    pts, wts, bin_w = mixture.bin_points(y)
    n_fit = float(wts.sum())
    sigma_floor = max(0.003, bin_w, (resolution / q50) / math.sqrt(12.0))
    fits = {"lognormal": mixture.fit_normal(pts, wts, sigma_floor)}
    for k in (2, 3, 4):
        fits[f"gmm{k}"] = mixture.fit_gmm(pts, wts, k, gen, sigma_floor=sigma_floor)
    best = None
    for kb in (1, 2, 3):
        f = mixture.fit_body_uniform(pts, wts, kb, gen, sigma_floor=sigma_floor)
        bic = _n_params(f) * math.log(n_fit) - 2.0 * f.log_likelihood
        if best is None or bic < best[0]:
            best = (bic, f)
    fits["body_uniform"] = best[1]
    shift = math.log(q50)
    cands = {}
    for name, f in fits.items():
        params = {
            "weights": f.weights.tolist(),
            "mu": (f.means + shift).tolist(),
            "sigma": f.sigmas.tolist(),
        }
        if f.uniform is not None:
            wu, a, b = f.uniform
            params.update(uniform_weight=wu, uniform_low=a * q50, uniform_high=b * q50)
        k_par = _n_params(f)
        bic = k_par * math.log(n_fit) - 2.0 * f.log_likelihood
        cands[name] = CandidateFit(name, params, f.log_likelihood, k_par, bic)
    return fits, cands, sigma_floor


def _features(x: np.ndarray, gen: np.random.Generator, *, max_samples: int):
    """All the evidence the decision uses, from sorted valid durations ``x``.

    Returns (values kept, log-durations fitted, :class:`TailStatistics`, fits,
    candidates); fits and candidates are empty, and the statistics hold no fit, when the
    kept values are all equal.
    """
    xt, xd, robust = _robust_sample(x, max_samples)
    q50 = float(np.quantile(xt, 0.5))
    y = np.log(xd) - math.log(q50)
    st = TailStatistics(**robust, skewness=_skewness(xd), skewness_log=_skewness(y))
    if xd[-1] <= xd[0]:
        return xt, y, st, {}, {}
    xdip = xd
    if xd.size > _DIP_MAX:
        xdip = xd[np.round(np.linspace(0, xd.size - 1, _DIP_MAX)).astype(np.int64)]
    dip, pval = diptest.diptest(xdip, sort_x=True)

    fits, cands, sigma_floor = _fit_candidates(y, q50, st.resolution, gen)

    # modes of the best Gaussian mixture, on the linear scale
    best_gmm = min(("lognormal", "gmm2", "gmm3", "gmm4"), key=lambda k: cands[k].bic)
    grid = np.linspace(y[0], y[-1], _N_GRID)
    modes, depth = _modes(
        fits[best_gmm],
        grid,
        min_sep=math.log(MIN_MODE_SEPARATION),
        max_depth=MAX_VALLEY_DEPTH,
        min_mass=max(0.015, 4.0 / y.size),
    )

    # the tail: values past the body, on the linear scale
    t0, top = _tail_start(fits[best_gmm], grid)
    tail = np.exp(y[y > t0])
    # the same past the tail's lower quarter (see _is_flat)
    upper = tail[int(0.25 * tail.size) :]
    a_up = float(upper[0]) if upper.size else math.exp(t0)
    kept = tail[tail <= np.quantile(tail, 0.99)] if tail.size >= 10 else tail
    fit = FitStatistics(
        dip_statistic=float(dip),
        dip_pvalue=float(pval),
        sigma_floor=sigma_floor,
        best_gmm=best_gmm,
        n_modes=len(modes),
        mode_locations=tuple(math.exp(m[0]) * q50 for m in modes),
        mode_masses=tuple(m[1] for m in modes),
        valley_depth=depth,
        uniform_weight=fits["body_uniform"].uniform[0],
        dbic_body_uniform=cands["body_uniform"].bic - cands[best_gmm].bic,
        body_peak=math.exp(top) * q50,
        tail_start=math.exp(t0) * q50,
        tail_fraction=tail.size / y.size,
        tail_count=int(tail.size),
        tail=_tail_shape(tail, math.exp(t0)),
        upper_tail=_tail_shape(upper, a_up),
        tail_bump_z=_tail_bump(tail, math.exp(t0), math.exp(top)),
        plateau_bump_z=_tail_bump(kept, math.exp(t0), math.exp(top), _PLATEAU_RISE),
        # where the highest peak sits in the sample: near 0 when the density falls from
        # the shortest values (no body)
        peak_quantile=float(np.count_nonzero(y < top)) / y.size,
        tail_top_share=_tail_top_share(tail, math.exp(t0)),
    )
    return xt, y, replace(st, fit=fit), fits, cands
