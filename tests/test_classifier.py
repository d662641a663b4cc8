"""Tests of the tail-shape classifier (nsysdiag.stats.classifier)."""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsysdiag.stats.classifier import (
    SHAPES,
    CandidateFit,
    TailShapeResult,
    TailStatistics,
    classify_tail,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
CORPUS = SHARED / "corpus" / "h200"

MEDIAN_NS = 2.0e6  # a 2 ms request, in ns like nsys


# ----------------------------------------------------------------------- generators


def body(rng, n, sigma=0.05):
    """Realistic service times: two close sub-modes (1.2x apart), mild right skew."""
    sub = rng.random(n) < 0.4
    x = np.exp(sigma * rng.standard_normal(n)) * np.where(sub, 1.2, 1.0)
    return MEDIAN_NS * (x + rng.exponential(0.02, n))


def tight(rng, n):
    return body(rng, n)


def right_skewed(rng, n):
    """Queueing: 80 % of requests wait an exponential time (mean 1.5 service times)."""
    wait = (rng.random(n) < 0.8) * rng.exponential(1.5, n)
    return body(rng, n) + MEDIAN_NS * wait


def multimodal(rng, n):
    """GPU jitter: 25 % of requests take 2.5x longer."""
    x = body(rng, n)
    slow = rng.random(n) < 0.25
    x[slow] *= 2.5
    return x


def flat_tail(rng, n):
    """PCIe contention: 20 % of requests delayed by a uniform amount up to 8x."""
    x = body(rng, n)
    hit = rng.random(n) < 0.2
    x[hit] += MEDIAN_NS * 8.0 * rng.random(int(hit.sum()))
    return x


GENERATORS = {
    "tight": tight,
    "right_skewed": right_skewed,
    "multimodal": multimodal,
    "flat_tail": flat_tail,
}


def sample(shape, n=3000, seed=0):
    return GENERATORS[shape](np.random.default_rng(seed), n)


# ------------------------------------------------------------------- shapes and API


@pytest.mark.parametrize("shape", list(GENERATORS))
@pytest.mark.parametrize("seed", [1, 2])
def test_each_shape_is_recognised(shape, seed):
    res = classify_tail(sample(shape, 3000, seed))
    assert res.success
    assert res.shape == shape, str(res)
    assert res.confidence > 0.6


@pytest.mark.parametrize("shape", list(GENERATORS))
def test_each_shape_is_recognised_at_small_n(shape):
    res = classify_tail(sample(shape, 300, 3))
    assert res.shape == shape, str(res)


def test_result_object_fields_and_serialisation():
    res = classify_tail(sample("multimodal", 2000, 4))
    assert isinstance(res, TailShapeResult)
    assert res.shape in SHAPES
    assert 0.0 <= res.confidence <= 1.0
    assert res.n == 2000
    assert set(res.candidates) >= {"lognormal", "gmm2", "gmm3", "gmm4", "body_uniform"}
    for c in res.candidates.values():
        assert isinstance(c, CandidateFit)
        assert math.isfinite(c.bic) and c.n_params >= 2
    assert res.best_model == min(res.candidates, key=lambda k: res.candidates[k].bic)
    ev = res.statistics
    assert ev is not None and ev.fit is not None
    figures = (ev.p50, ev.p90, ev.p99, ev.p99_over_p50, ev.skewness, ev.skewness_log,
               ev.fit.dip_statistic, ev.fit.dip_pvalue, ev.fit.tail.flatness)
    assert all(math.isfinite(v) for v in figures)
    # the JSON statistics are flat, in the order they were always written: the fit's
    # figures in its place, each tail's flatness with its prefix, p_tight and reason last
    flat = ev.to_dict()
    keys = list(flat)
    assert keys[:3] == ["n_valid", "n_outliers_low", "n_outliers_high"]
    assert keys[11:15] == ["skewness", "skewness_log", "dip_statistic", "dip_pvalue"]
    assert keys[keys.index("tail_count") + 1:keys.index("tail_bump_z")] == [
        "tail_flatness", "tail_cv", "tail_upper_ratio", "tail_half_ratio",
        "upper_tail_flatness", "upper_tail_cv", "upper_tail_upper_ratio",
        "upper_tail_half_ratio"]
    assert keys[-2:] == ["p_tight", "reason"] and len(keys) == 41
    assert flat["tail_flatness"] == ev.fit.tail.flatness and flat["reason"] == ev.reason
    assert TailStatistics.from_dict(flat) == ev
    # percentiles are those of the data, in its unit
    x = sample("multimodal", 2000, 4)
    assert res.statistics.p50 == pytest.approx(np.quantile(x, 0.5))
    assert res.statistics.p99 == pytest.approx(np.quantile(x, 0.99))
    d = res.to_dict()
    text = json.dumps(d, allow_nan=False)  # plain floats only, no NaN/inf
    assert json.loads(text)["shape"] == "multimodal"
    assert "multimodal" in str(res)
    with pytest.raises(AttributeError):
        res.shape = "tight"  # frozen


def test_bic_prefers_one_lognormal_for_lognormal_data_and_mixtures_for_two_modes():
    rng = np.random.default_rng(5)
    ln = classify_tail(np.exp(rng.normal(10.0, 0.6, 5000)))
    assert ln.best_model == "lognormal"
    assert ln.shape == "right_skewed"
    two = classify_tail(
        np.concatenate([rng.lognormal(10, 0.05, 4000), rng.lognormal(10 + math.log(3), 0.05, 1000)])
    )
    assert two.best_model.startswith("gmm")
    assert two.shape == "multimodal"
    locs = sorted(two.statistics.fit.mode_locations)
    assert locs[0] == pytest.approx(math.exp(10), rel=0.05)
    assert locs[-1] == pytest.approx(3 * math.exp(10), rel=0.05)


def test_pdf_is_a_density_on_the_original_scale():
    x = sample("flat_tail", 4000, 6)
    res = classify_tail(x)
    grid = np.linspace(0.0, 3 * x.max(), 400_001)
    f = res.pdf(grid)
    assert np.all(f >= 0)
    assert np.trapezoid(f, grid) == pytest.approx(1.0, abs=0.01)
    assert res.pdf(np.array([-1.0, 0.0])).tolist() == [0.0, 0.0]
    # and it follows the data: most mass of the histogram where the pdf is high
    inside = (x > res.statistics.p50 * 0.8) & (x < res.statistics.p50 * 1.5)
    assert np.trapezoid(
        f[(grid > res.statistics.p50 * 0.8) & (grid < res.statistics.p50 * 1.5)],
        grid[(grid > res.statistics.p50 * 0.8) & (grid < res.statistics.p50 * 1.5)],
    ) == pytest.approx(inside.mean(), abs=0.05)


# --------------------------------------------------------------- insufficient data


def test_insufficient_below_min_n():
    x = sample("tight", 49, 7)
    res = classify_tail(x)
    assert res.shape == "insufficient_data"
    assert not res.success
    assert res.confidence == 0.0
    assert "min_n=50" in res.message
    assert classify_tail(x, min_n=40).success


def test_insufficient_on_constant_data():
    res = classify_tail(np.full(500, 1234.0))
    assert res.shape == "insufficient_data"
    assert not res.success
    assert "equal" in res.message
    assert res.pdf([1234.0]).tolist() == [0.0]


def test_invalid_values_are_dropped_and_counted():
    x = sample("tight", 400, 8)
    dirty = np.concatenate([x, [0.0, -5.0, np.nan, np.inf]])
    res = classify_tail(dirty)
    assert res.success and res.shape == "tight"
    assert "dropped 4" in res.message
    assert res.statistics.n_valid == 400
    # dropping takes a sample below min_n
    res = classify_tail(np.concatenate([x[:45], [np.nan] * 10]))
    assert res.shape == "insufficient_data"
    assert "dropped 10" in res.message


@pytest.mark.parametrize("bad", [np.ones((10, 10)), 5.0, [[1.0, 2.0]]])
def test_non_1d_input_raises_naming_the_argument(bad):
    with pytest.raises(ValueError, match="durations"):
        classify_tail(bad)


@pytest.mark.parametrize(
    "kw", [dict(min_n=3), dict(tight_ratio=1.0), dict(max_samples=10), dict(rng="seed")]
)
def test_bad_arguments_raise(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        classify_tail(sample("tight", 100, 0), **kw)


# ------------------------------------------------------------------- invariances


@pytest.mark.parametrize("shape", list(GENERATORS))
def test_invariant_to_unit_ns_vs_us(shape):
    x = sample(shape, 2500, 9)
    a = classify_tail(x)
    b = classify_tail(x / 1000.0)
    assert a.shape == b.shape
    assert a.confidence == pytest.approx(b.confidence, abs=1e-6)
    assert a.statistics.p99_over_p50 == pytest.approx(b.statistics.p99_over_p50)
    assert b.statistics.p50 == pytest.approx(a.statistics.p50 / 1000.0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.floats(min_value=1e-6, max_value=1e6), seed=st.integers(0, 10_000))
def test_invariant_to_scale_and_order_property(scale, seed):
    x = sample("multimodal", 800, 10)
    a = classify_tail(x)
    y = np.random.default_rng(seed).permutation(x) * scale
    b = classify_tail(y)
    assert a.shape == b.shape
    assert a.confidence == pytest.approx(b.confidence, abs=1e-6)


def test_invariant_to_shuffling():
    x = sample("flat_tail", 3000, 11)
    a = classify_tail(x)
    b = classify_tail(np.random.default_rng(1).permutation(x))
    assert a.to_dict() == b.to_dict()


def test_deterministic_for_fixed_rng():
    x = sample("right_skewed", 3000, 12)
    assert classify_tail(x, rng=3).to_dict() == classify_tail(x, rng=3).to_dict()
    gen_a = classify_tail(x, rng=np.random.default_rng(5))
    gen_b = classify_tail(x, rng=np.random.default_rng(5))
    assert gen_a.to_dict() == gen_b.to_dict()


# ----------------------------------------------------------------------- robustness


@pytest.mark.parametrize("quantum", [32.0, 1000.0])
@pytest.mark.parametrize("shape", list(GENERATORS))
def test_discretised_timers(shape, quantum):
    # 60 us median rounded to 1 us: ~3 % steps, most values tied
    x = sample(shape, 3000, 13) * (60e3 / MEDIAN_NS)
    xq = np.maximum(np.round(x / quantum), 1) * quantum
    assert np.unique(xq).size < xq.size
    res = classify_tail(xq)
    assert res.shape == shape, str(res)
    if quantum == 1000.0:
        assert res.statistics.resolution == pytest.approx(1000.0)


def test_heavily_tied_tight_data():
    rng = np.random.default_rng(14)
    x = rng.choice([100.0, 101.0, 102.0, 103.0, 110.0], size=5000, p=[0.3, 0.4, 0.2, 0.09, 0.01])
    res = classify_tail(x)
    assert res.shape == "tight"


@pytest.mark.parametrize("n", [50, 120, 1000, 20000])
def test_few_huge_outliers_keep_tight_data_tight(n):
    rng = np.random.default_rng(15)
    x = tight(rng, n)
    k = 1 if n < 200 else 3
    x[:k] = MEDIAN_NS * np.array([40.0, 150.0, 12.0])[:k]  # slow warm-up requests
    res = classify_tail(x)
    assert res.shape == "tight", str(res)
    assert res.statistics.n_outliers_high >= 1


def test_outliers_do_not_make_a_skewed_tail_multimodal():
    rng = np.random.default_rng(16)
    x = right_skewed(rng, 3000)
    x[:3] = MEDIAN_NS * np.array([200.0, 300.0, 500.0])
    res = classify_tail(x)
    assert res.shape == "right_skewed", str(res)


def test_ten_million_samples_are_subsampled_and_fast():
    rng = np.random.default_rng(17)
    n = 10_000_000
    x = np.round(MEDIAN_NS * np.exp(0.05 * rng.standard_normal(n)) + rng.exponential(4e4, n))
    x[:5] = MEDIAN_NS * 100
    t0 = time.perf_counter()
    res = classify_tail(x)
    elapsed = time.perf_counter() - t0
    assert res.shape == "tight"
    assert res.n == n - res.statistics.n_outliers_high - res.statistics.n_outliers_low
    assert res.statistics.n_fit == 200_000
    assert elapsed < 30.0  # a few seconds on a laptop; generous for loaded CI


# --------------------------------------------------------------------- real traces


def _request_durations(path: Path, name: str = "request") -> np.ndarray:
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        rows = con.execute(
            'SELECT e."end" - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s '
            "ON s.id = e.textId WHERE e.eventType = 59 AND coalesce(s.value, e.text) = ? "
            'AND e."end" IS NOT NULL ORDER BY e.start',
            (name,),
        ).fetchall()
    finally:
        con.close()
    return np.array([r[0] for r in rows], dtype=float)


@pytest.mark.parametrize(
    "trace, expected", [("baseline.sqlite", "tight"), ("gpu.sqlite", "multimodal")]
)
def test_real_h200_traces(trace, expected):
    path = CORPUS / trace
    if not path.is_file():
        pytest.skip(f"real corpus not available at {path}")
    x = _request_durations(path)
    assert x.size > 1000
    res = classify_tail(x)
    assert res.shape == expected, str(res)
    assert res.confidence >= 0.8


@pytest.mark.parametrize(
    "trace, expected", [("baseline.sqlite", "tight"), ("gpu.sqlite", "multimodal")]
)
def test_real_h200_traces_in_300_request_windows(trace, expected):
    """Short windows of the same runs: the GPU jitter shows as a few sparse clusters."""
    path = CORPUS / trace
    if not path.is_file():
        pytest.skip(f"real corpus not available at {path}")
    x = _request_durations(path)
    shapes = [classify_tail(x[i : i + 300]).shape for i in range(0, x.size - 299, 300)]
    assert shapes == [expected] * len(shapes)


# ------------------------------------------------------------ mechanisms, not shapes
#
# Each mechanism is simulated directly (independently of bench/classifier.py), with
# seeds 500-519, used nowhere else: the decision rules were tuned on the bench's
# development seeds (1, 31-33, 101-104) and the confidence model fitted on seeds 1 and
# 101-104. The seeds are fixed, so these tests are deterministic; on 60 other seeds
# (700-759) each of the first three mechanisms was classified right 60 times, so nine
# of ten leaves room for numerical noise, not for a regression.

MECH_SEEDS = range(500, 510)


def mm1_sojourn(rng, n, load=0.85, burn=2000):
    """Sojourn times of an M/M/1 queue (Lindley's recursion), after a burn-in."""
    m = n + burn
    s = rng.exponential(1.0, m)
    a = rng.exponential(1.0 / load, m)
    u = np.concatenate(([0.0], np.cumsum(s[:-1] - a[1:])))
    w = u - np.minimum.accumulate(u)
    return MEDIAN_NS * (w + s)[burn:]


def onoff_contention(rng, n, slow=2.5, share=0.3, mean_on=8.0):
    """Another workload holds the GPU in on/off periods (a Markov chain per request)."""
    leave = 1.0 / mean_on
    enter = leave * share / (1.0 - share)
    on, state = False, np.empty(n, bool)
    for i, u in enumerate(rng.random(n)):
        on = (u >= leave) if on else (u < enter)
        state[i] = on
    return body(rng, n) * np.where(state, slow, 1.0)


def uniform_waits(rng, n, hit=0.2, length=6.0):
    """A copy waits for the rest of a competing transfer: a uniform extra delay."""
    x = body(rng, n)
    h = rng.random(n) < hit
    x[h] += MEDIAN_NS * length * rng.random(int(h.sum()))
    return x


def test_mm1_queue_at_85_percent_load_is_right_skewed():
    """The issue's case: M/M/1 sojourn times at 85 % load, n = 500.

    The sojourn time of M/M/1 is exponential (p99/p50 = ln 100 / ln 2 = 6.6), but a
    500-request window of a queue this loaded sees only a few busy periods. Nine of
    ten seeds must be right (see the section comment).
    """
    shapes = [classify_tail(mm1_sojourn(np.random.default_rng(s), 500)).shape for s in MECH_SEEDS]
    assert shapes.count("right_skewed") >= 9, shapes


def test_onoff_gpu_contention_is_multimodal():
    shapes = [
        classify_tail(onoff_contention(np.random.default_rng(s), 500)).shape for s in MECH_SEEDS
    ]
    assert shapes.count("multimodal") >= 9, shapes


def test_uniform_contention_waits_are_flat_tail():
    shapes = [
        classify_tail(uniform_waits(np.random.default_rng(s), 500)).shape for s in MECH_SEEDS
    ]
    assert shapes.count("flat_tail") >= 9, shapes


def bursty_queue(rng, n, load=0.7, burst=6.0, share=0.25, stay=0.97, burn=2000):
    """Sojourn times of one server with a tight service time and bursty arrivals.

    Arrivals come from a two-state Markov-modulated Poisson process: bursts at
    ``burst`` times the base rate hold ``share`` of the arrivals' states and last
    ``1 / (1 - stay)`` arrivals on average (about 33); inter-arrival times are scaled to
    the offered ``load``.
    """
    m = n + burn
    s = body(rng, m) / MEDIAN_NS
    p = share * burst / (share * burst + 1.0 - share)
    flips, draws = rng.random(m) > stay, rng.random(m) < p
    state, cur = np.empty(m, bool), bool(rng.random() < p)
    for i in range(m):
        if flips[i]:
            cur = bool(draws[i])
        state[i] = cur
    a = rng.exponential(1.0, m) / np.where(state, burst, 1.0)
    a *= s.mean() / (load * a.mean())
    u = np.concatenate(([0.0], np.cumsum(s[:-1] - a[1:])))
    w = u - np.minimum.accumulate(u)
    return MEDIAN_NS * (w + s)[burn:]


def waits_behind_light_queue(rng, n, hit=0.1, length=6.0, load=0.15, burn=2000):
    """Uniform transfer-contention waits on ``hit`` of the copies, behind a light queue."""
    m = n + burn
    s = body(rng, m) / MEDIAN_NS
    h = rng.random(m) < hit
    s[h] += length * rng.random(int(h.sum()))
    a = rng.exponential(s.mean() / load, m)
    u = np.concatenate(([0.0], np.cumsum(s[:-1] - a[1:])))
    w = u - np.minimum.accumulate(u)
    return MEDIAN_NS * (w + s)[burn:]


def test_bursty_queue_windows_are_right_skewed_not_multimodal():
    """A busy queue's windows: most requests wait, busy periods make broad lumps.

    Before the busy-queue rule the lumps read as modes (GPU jitter): on seeds 720-759,
    9 of the 32 abnormal 800-request windows were `multimodal`, none after it (32 of
    32 `right_skewed`). Windows whose own p99/p50 is under the gate are `tight` by
    step A whatever the mechanism, so they are left out; at least 85 % of the rest must
    be `right_skewed`.
    """
    res = [classify_tail(bursty_queue(np.random.default_rng(s), 800)) for s in range(500, 520)]
    abnormal = [r for r in res if r.shape != "tight"]
    assert all(r.statistics.p99_over_p50_robust <= 2.0 for r in res if r.shape == "tight")
    assert len(abnormal) >= 12, [r.shape for r in res]
    right = sum(r.shape == "right_skewed" for r in abnormal)
    assert right >= 0.85 * len(abnormal), [r.shape for r in abnormal]


def test_uniform_waits_behind_a_light_queue_are_flat_tail():
    """The light queue's waits make a decaying lump next to the body; the plateau of the
    contention waits lies further out and decides (before the upper-tail rule: 1 of 20
    `flat_tail` on seeds 700-719, 19 `right_skewed`; after it 20 of 20)."""
    shapes = [
        classify_tail(waits_behind_light_queue(np.random.default_rng(s), 2000)).shape
        for s in MECH_SEEDS
    ]
    assert shapes.count("flat_tail") >= 9, shapes


def test_typed_statistics_read_the_evidence():
    """The renderers read the dip test, the modes and the tail's flatness as attributes,
    the same values the statistics hold."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(1e6, 3e4, 300), rng.normal(3e6, 9e4, 100)])
    res = classify_tail(x)
    assert res.dip_pvalue == res.statistics.fit.dip_pvalue
    assert res.n_modes == res.statistics.fit.n_modes == 2
    assert res.tail_flatness == res.statistics.fit.tail.flatness
    failed = classify_tail([1.0, 2.0])
    assert (failed.dip_pvalue, failed.n_modes, failed.tail_flatness) == (None, None, None)
