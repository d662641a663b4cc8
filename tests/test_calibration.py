"""The tail classifier's probabilities and the calibration measures of its benchmark.

The probability model (``nsysdiag/stats/calibration.json``) is fitted by
``bench/fit_calibration.py``; the classwise ECE and the other figures the benchmark
prints come from ``bench/classifier.py``. Measures are checked on hand-built inputs
whose answers are worked out in the comments, the fit against the model that drew its
data.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from nsysdiag.stats import classifier as clf
from nsysdiag.stats.classifier import ShapeProbabilities, classify_tail

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench():
    return _load("classifier")


@pytest.fixture(scope="module")
def fitter():
    return _load("fit_calibration")


def _two_modes(seed: int, n: int, share: float = 0.25, factor: float = 2.5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.exp(0.05 * rng.standard_normal(n))
    x[rng.random(n) < share] *= factor
    return 2e6 * x


# -------------------------------------------------------------------- probabilities


@pytest.mark.parametrize(
    "x",
    [
        2e6 * np.exp(0.05 * np.random.default_rng(1).standard_normal(3000)),  # tight
        _two_modes(2, 3000),  # multimodal
        2e6 * (1 + np.random.default_rng(3).exponential(2.0, 3000)),  # a skewed tail
    ],
)
def test_probabilities_are_a_distribution_and_hold_the_confidence(x):
    res = classify_tail(x)
    p = res.probabilities
    assert isinstance(p, ShapeProbabilities)
    arr = p.as_array()
    assert arr.shape == (4,) and np.all(arr >= 0) and arr.sum() == pytest.approx(1.0)
    assert res.confidence == p[res.shape]
    d = res.to_dict()
    assert d["probabilities"] == p.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False))["probabilities"][res.shape] == pytest.approx(
        res.confidence
    )
    assert "probabilities:" in str(res)
    with pytest.raises(KeyError, match="insufficient_data"):
        p["insufficient_data"]


def test_clear_cases_are_confident_and_name_the_verdict_most_likely():
    tight = classify_tail(2e6 * np.exp(0.03 * np.random.default_rng(4).standard_normal(5000)))
    assert tight.shape == "tight"
    # p99/p50 = exp(2.33 * 0.03) = 1.07, far below the gate at 2 with 5000 values
    assert tight.confidence > 0.95
    assert tight.probabilities.most_likely == "tight"
    multi = classify_tail(_two_modes(5, 5000))
    assert multi.shape == "multimodal" and multi.probabilities.most_likely == "multimodal"
    assert multi.confidence > 0.8


def test_no_probabilities_without_a_classification():
    res = classify_tail(np.full(500, 7.0))
    assert not res.success
    assert res.probabilities is None and res.confidence == 0.0
    assert res.to_dict()["probabilities"] is None


def test_all_equal_but_isolated_extremes_is_certainly_tight():
    x = np.full(400, 1000.0)
    x[:2] = [90_000.0, 150_000.0]  # warm-up requests
    res = classify_tail(x)
    assert res.shape == "tight" and res.confidence == 1.0
    assert res.probabilities.to_dict() == {
        "tight": 1.0,
        "right_skewed": 0.0,
        "multimodal": 0.0,
        "flat_tail": 0.0,
    }


def test_probabilities_follow_the_stored_model():
    """The vector is softmax(W[verdict] @ features clipped to the verdict's fitted range),
    W and the range from the package data."""
    res = classify_tail(_two_modes(6, 2000))
    data = json.loads((ROOT / "nsysdiag" / "stats" / "calibration.json").read_text())
    assert tuple(data["classes"]) == clf.CLASSES
    assert tuple(data["features"]) == clf.CALIBRATION_FEATURES
    W = np.array(data["coefficients"][res.shape])
    assert W.shape == (4, len(clf.CALIBRATION_FEATURES))
    phi = clf._calibration_features(res.statistics, 2.0)
    assert phi[0] == 1.0 and np.all(np.isfinite(phi))
    low, high = (np.array(data[k][res.shape]) for k in ("low", "high"))
    assert np.all(low <= high) and low[0] == high[0] == 1.0
    expected = special.softmax(W @ np.clip(phi, low, high))
    assert res.probabilities.as_array() == pytest.approx(expected, abs=1e-12)


def test_features_beyond_the_fitted_range_are_clipped():
    """Sizes far beyond the simulations' (at most 100 000) get no extrapolation."""
    res = classify_tail(_two_modes(7, 3000))
    w, low, high = clf._calibration()[res.shape]
    k = clf.CALIBRATION_FEATURES.index("log10_n_minus_3")
    assert high[k] < 3.0  # log10(1e6) - 3: a million is beyond what was fitted
    big = [dataclasses.replace(res.statistics, n_fit=n) for n in (10**6, 10**9)]
    a, b = (clf._probabilities(st, res.shape, 2.0).as_array() for st in big)
    assert a == pytest.approx(b, abs=1e-15)
    phi = clf._calibration_features(big[1], 2.0)
    assert phi[k] == pytest.approx(6.0)
    assert a == pytest.approx(special.softmax(w @ np.clip(phi, low, high)), abs=1e-12)


def test_calibration_was_fitted_on_development_seeds_only():
    data = json.loads((ROOT / "nsysdiag" / "stats" / "calibration.json").read_text())
    seeds = {int(s) for s in data["fitted_on"]["seeds"]}
    assert seeds and seeds <= {1} | set(range(101, 111))
    assert 4099 not in seeds and 2027 not in seeds  # the reported, held-out seeds


# -------------------------------------------------------------------- the measures


def test_ece_by_hand(bench):
    # bin [0.9, 1.0): confidences 0.9 and 0.95 (mean 0.925), one right -> |0.5 - 0.925|;
    # bin [0.6, 0.7): 0.6 and 0.6, both right -> 0.4; each bin holds half the samples
    conf = [0.9, 0.95, 0.6, 0.6]
    correct = [True, False, True, True]
    assert bench.ece(conf, correct) == pytest.approx(0.5 * 0.425 + 0.5 * 0.4)
    assert bench.ece([], []) == 0.0
    assert bench.ece([1.0, 0.0], [True, False]) == 0.0  # 1.0 falls in the top bin


def test_classwise_ece_by_hand(bench):
    # three samples, true classes tight, tight, flat_tail
    probs = np.array(
        [
            [0.95, 0.05, 0.0, 0.0],
            [0.75, 0.05, 0.1, 0.1],
            [0.15, 0.05, 0.0, 0.8],
        ]
    )
    labels = ["tight", "tight", "flat_tail"]
    got = bench.classwise_ece(probs, labels)
    # tight: bins [0.9,1) {0.95: is tight}, [0.7,0.8) {0.75: is tight}, [0.1,0.2) {0.15:
    # not}: (0.05 + 0.25 + 0.15) / 3
    assert got["tight"] == pytest.approx(0.45 / 3)
    # right_skewed: all three at 0.05, none right_skewed: 0.05
    assert got["right_skewed"] == pytest.approx(0.05)
    # multimodal: {0, 0} in bin 0 (none) and {0.1} in bin 1 (none): 0.1 / 3
    assert got["multimodal"] == pytest.approx(0.1 / 3)
    # flat_tail: bin 0 {0.0: not}, bin 1 {0.1: not}, bin 8 {0.8: is}: (0 + 0.1 + 0.2) / 3
    assert got["flat_tail"] == pytest.approx(0.3 / 3)


def test_classwise_ece_is_zero_for_perfect_and_catches_under_confidence(bench):
    labels = np.array(["tight"] * 50 + ["multimodal"] * 50)
    perfect = np.zeros((100, 4))
    perfect[:50, 0] = 1.0
    perfect[50:, 2] = 1.0
    assert max(bench.classwise_ece(perfect, labels).values()) == 0.0
    # right on every sample but 0.8 sure: every class that occurs is 0.2 off
    unsure = np.full((100, 4), 0.2 / 3)
    unsure[:50, 0] = 0.8
    unsure[50:, 2] = 0.8
    got = bench.classwise_ece(unsure, labels)
    assert got["tight"] == pytest.approx(0.5 * 0.2 + 0.5 * 0.2 / 3)
    assert got["right_skewed"] == pytest.approx(0.2 / 3)


def test_calibration_report_three_ways(bench):
    labels = ["tight", "tight", "multimodal", "multimodal"]
    shapes = ["tight", "multimodal", "multimodal", "multimodal"]
    probs = np.array(
        [
            [0.9, 0.0, 0.1, 0.0],
            [0.3, 0.0, 0.7, 0.0],
            [0.0, 0.0, 1.0, 0.0],
            [0.1, 0.0, 0.9, 0.0],
        ]
    )
    conf = probs[np.arange(4), [0, 2, 2, 2]]
    rep = bench.calibration_report(labels, shapes, probs, conf)
    assert set(rep) == {"classwise", "verdict", "true_class"}
    # verdict tight: one sample, 0.9 sure, right -> 0.1
    assert rep["verdict"]["tight"] == pytest.approx(0.1)
    # verdict multimodal: 0.7 (wrong) alone in its bin; 1.0 and 0.9 in the top bin, both
    # right -> (0.7 + 0.05 * 2) / 3
    assert rep["verdict"]["multimodal"] == pytest.approx((0.7 + 0.1) / 3)
    # true class tight: confidences 0.9 (right) and 0.7 (wrong) -> (0.1 + 0.7) / 2
    assert rep["true_class"]["tight"] == pytest.approx(0.4)
    assert rep["verdict"]["flat_tail"] == 0.0  # no such verdict


# ----------------------------------------------------------------------- the fit


def test_multinomial_fit_recovers_the_generating_model(fitter):
    rng = np.random.default_rng(11)
    m = 20_000
    X = np.column_stack([np.ones(m), rng.normal(size=m), rng.uniform(-1, 1, m)])
    W_true = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5], [-0.5, 1.0, 2.0], [0.3, 0.0, -1.5]])
    p = special.softmax(X @ W_true.T, axis=1)
    y = (rng.random(m)[:, None] > np.cumsum(p, axis=1)).sum(axis=1)
    W = fitter.fit_multinomial(X, y, 4, l2=1e-6)
    # the softmax is unchanged by adding a row to every row: compare differences
    got, want = W - W[0], W_true - W_true[0]
    assert got == pytest.approx(want, abs=0.15)  # ~4 standard errors at m = 20 000
    # at the optimum the predicted class counts equal the observed ones (score = 0)
    q = special.softmax(X @ W.T, axis=1)
    assert q.sum(axis=0) == pytest.approx(np.bincount(y, minlength=4), abs=0.5)


def test_penalty_shrinks_towards_the_class_frequencies(fitter):
    rng = np.random.default_rng(12)
    X = np.column_stack([np.ones(400), rng.normal(size=400)])
    y = (X[:, 1] > 0).astype(int)  # separable: without a penalty the slope would diverge
    W = fitter.fit_multinomial(X, y, 2, l2=1e6)
    assert abs(W[1, 1] - W[0, 1]) < 1e-3
    prob = special.softmax(X @ W.T, axis=1)[:, 1]
    assert prob == pytest.approx(np.full(400, y.mean()), abs=1e-3)
    assert math.isfinite(fitter.fit_multinomial(X, y, 2, l2=1.0)[1, 1])


def test_tail_summary_says_when_the_probabilities_favour_another_shape():
    """The rules' shape stands, but the text names the likelier shape and its probability."""
    from nsysdiag.diagnosis.model import TailSummary

    def tail(shape, conf, probs):
        return TailSummary("request", "nvtx_auto", 300, 1e6, 1.2e6, 1.6e6, 1.6, shape, conf,
                           shape_probabilities=probs)

    disagree = tail("tight", 0.33, {"tight": 0.33, "right_skewed": 0.63,
                                    "multimodal": 0.03, "flat_tail": 0.01})
    assert disagree.likelier_shape == ("right_skewed", 0.63)
    assert disagree.shape_text == (
        "tight (confidence 0.33; the probabilities favour right_skewed, 0.63)")
    agree = tail("tight", 0.9, {"tight": 0.9, "right_skewed": 0.05,
                                "multimodal": 0.03, "flat_tail": 0.02})
    assert agree.likelier_shape is None
    assert agree.shape_text == "tight (confidence 0.90)"
    assert tail("insufficient_data", 0.0, None).likelier_shape is None
