"""Fit the tail classifier's probability model (``nsysdiag/stats/calibration.json``).

Usage::

    # rows of the development seeds, saved by the benchmark (one file per seed)
    python bench/classifier.py --seed 101:200 --jobs 1 --save rows101.pkl
    ...
    python bench/fit_calibration.py --rows rows*.pkl --cv          # choose the penalty
    python bench/fit_calibration.py --rows rows*.pkl --write       # write the model
    python bench/fit_calibration.py --seed 1:800,101:200 --write   # or draw them here

The model: for each verdict ``v`` of the decision rules, a multinomial logistic
regression ``P(class | v, x) = softmax(W_v @ features(x))`` over the four classes
(:data:`nsysdiag.stats.classifier.CALIBRATION_FEATURES`), fitted by maximum likelihood
with an L2 penalty ``l2 / 2 * |W_v|^2`` on every coefficient but the intercepts
(L-BFGS, scipy). The JSON also keeps each verdict's range of every feature: the
classifier clips features to it, so it never extrapolates the linear model.
It is the multinomial ("matrix") calibration of Kull et al. (2019,
"Beyond temperature scaling") on the classifier's evidence instead of on logits, one
matrix per verdict, so the verdict's own probability is fitted as before and the
others get probabilities of their own: the classwise calibration needs every class's
probability on every sample.

``--cv`` leaves one seed out at a time (fit on the others, predict it) and prints the
benchmark's figures for the pooled out-of-seed predictions, for each ``--l2`` given:
pick the penalty there, never on the held-out seed. ``--write`` fits on all the rows
and writes the JSON (coefficients per verdict: classes x features).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy import optimize, special

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from classifier import CLASSES as BENCH_CLASSES  # noqa: E402
from classifier import _one, calibration_report, ece, print_ece_table  # noqa: E402

from nsysdiag.stats.classifier import (  # noqa: E402
    CALIBRATION_FEATURES,
    CLASSES,
    TailStatistics,
    _calibration_features,
)

OUT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "nsysdiag", "stats", "calibration.json"
)
TIGHT_RATIO = 2.0
#: Penalty of the intercepts: tiny, so that a class never seen under a verdict gets a
#: small finite probability rather than an unbounded coefficient.
INTERCEPT_L2 = 1e-3


def fit_multinomial(X: np.ndarray, y: np.ndarray, k: int, l2: float) -> np.ndarray:
    """Penalised multinomial logistic regression; returns W (k x features).

    Minimises ``-sum log softmax(W x_i)[y_i] + l2/2 |W[:, 1:]|^2 + INTERCEPT_L2/2
    |W[:, 0]|^2`` (column 0 of ``X`` is the intercept's 1).
    """
    m, f = X.shape
    pen = np.full(f, l2)
    pen[0] = INTERCEPT_L2
    onehot = np.zeros((m, k))
    onehot[np.arange(m), y] = 1.0

    def loss(w):
        W = w.reshape(k, f)
        z = X @ W.T
        lse = special.logsumexp(z, axis=1)
        nll = float(np.sum(lse - z[np.arange(m), y]))
        p = np.exp(z - lse[:, None])
        grad = (p - onehot).T @ X + pen * W
        return nll + 0.5 * float(np.sum(pen * W * W)), grad.ravel()

    res = optimize.minimize(
        loss, np.zeros(k * f), jac=True, method="L-BFGS-B", options={"maxiter": 5000}
    )
    if not res.success:
        raise RuntimeError(f"the fit did not converge: {res.message}")
    return res.x.reshape(k, f)


def design(rows):
    """(features, verdict index, true class index, n, seed) of the classified rows."""
    rows = [r for r in rows if r.get("stats") is not None and r["shape"] in CLASSES]
    # rows pickled before the statistics were typed hold their flat dict
    X = np.array([_calibration_features(
        TailStatistics.from_dict(r["stats"]) if isinstance(r["stats"], dict) else r["stats"],
        TIGHT_RATIO) for r in rows])
    v = np.array([CLASSES.index(r["shape"]) for r in rows])
    y = np.array([CLASSES.index(r["label"]) for r in rows])
    n = np.array([r["n"] for r in rows])
    seed = np.array([r["seed"] for r in rows])
    return X, v, y, n, seed


def fit(X, v, y, l2):
    """One coefficient matrix per verdict."""
    return {
        c: fit_multinomial(X[v == j], y[v == j], len(CLASSES), l2) for j, c in enumerate(CLASSES)
    }


def predict(W, X, v, ranges=None):
    """Probabilities (samples x classes) under the model ``W``.

    ``ranges`` (verdict -> (low, high) per feature) clips the features first, as the
    classifier does.
    """
    P = np.empty((X.shape[0], len(CLASSES)))
    for j, c in enumerate(CLASSES):
        m = v == j
        if m.any():
            Xm = X[m] if ranges is None else np.clip(X[m], *ranges[c])
            P[m] = special.softmax(Xm @ W[c].T, axis=1)
    return P


def feature_ranges(X, v):
    """Each verdict's lowest and highest value of every feature."""
    return {
        c: (X[v == j].min(axis=0), X[v == j].max(axis=0))
        for j, c in enumerate(CLASSES)
        if np.any(v == j)
    }


def figures(P, v, y, n):
    """Print the benchmark's calibration figures for probabilities ``P``."""
    labels = np.array(CLASSES)[y]
    shapes = np.array(CLASSES)[v]
    conf = P[np.arange(len(v)), v]
    correct = y == v
    big = n >= 200
    rep_all = calibration_report(labels, shapes, P, conf)
    rep_big = calibration_report(labels[big], shapes[big], P[big], conf[big])
    print(
        f"    ECE {ece(conf, correct):.4f} all sizes, {ece(conf[big], correct[big]):.4f} "
        f"n >= 200; log-loss {-np.mean(np.log(np.maximum(P[np.arange(len(y)), y], 1e-300))):.4f}"
    )
    print_ece_table(rep_all, rep_big, "    ")
    return rep_all


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="*", default=[], help="rows pickled by classifier.py --save")
    ap.add_argument(
        "--seed", default="", help="draw and classify these samples instead: SEED[:COUNT],..."
    )
    ap.add_argument("--count", type=int, default=200, help="samples per seed without :COUNT")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument(
        "--l2",
        type=float,
        nargs="+",
        default=[1.0],
        help="penalty (several with --cv); default 1 (see docs/classifier.md)",
    )
    ap.add_argument("--cv", action="store_true", help="leave-one-seed-out figures per --l2")
    ap.add_argument("--write", action="store_true", help=f"fit on all rows and write {OUT}")
    args = ap.parse_args(argv)

    rows = []
    for i, path in enumerate(args.rows):
        with open(path, "rb") as fh:
            part = pickle.load(fh)
        for r in part:
            r.setdefault("seed", f"file{i}")
        rows += part
    if args.seed:
        seeds = [
            (int(a), int(b or args.count))
            for a, _, b in (item.partition(":") for item in args.seed.split(","))
        ]
        tasks = [
            (s, i, BENCH_CLASSES[i % len(BENCH_CLASSES)], True) for s, c in seeds for i in range(c)
        ]
        if args.jobs > 1:
            with ProcessPoolExecutor(args.jobs) as ex:
                rows += list(ex.map(_one, tasks, chunksize=8))
        else:
            rows += [_one(t) for t in tasks]
    if not rows:
        ap.error("give --rows or --seed")
    X, v, y, n, seed = design(rows)
    groups = sorted(set(seed.tolist()), key=str)
    print(
        f"{len(y)} classified samples from {len(groups)} seed(s) ({', '.join(map(str, groups))}); "
        f"{np.sum(n >= 200)} with n >= 200"
    )
    if args.cv:
        for l2 in args.l2:
            P = np.empty((len(y), len(CLASSES)))
            for g in groups:
                test = seed == g
                W = fit(X[~test], v[~test], y[~test], l2)
                rng = feature_ranges(X[~test], v[~test])
                P[test] = predict(W, X[test], v[test], rng)
            print(f"  l2 = {l2:g}, leave one seed out:")
            figures(P, v, y, n)
    if args.write:
        l2 = args.l2[0]
        W = fit(X, v, y, l2)
        print(f"  l2 = {l2:g}, fitted on all (in-sample):")
        figures(predict(W, X, v, feature_ranges(X, v)), v, y, n)
        data = {
            "description": (
                "Probability model of nsysdiag.stats.classifier.classify_tail: for each "
                "verdict, P(class) = softmax(coefficients[verdict] @ features), "
                "coefficients as classes x features. Written by bench/fit_calibration.py; "
                "see docs/classifier.md."
            ),
            "classes": list(CLASSES),
            "features": list(CALIBRATION_FEATURES),
            "tight_ratio": TIGHT_RATIO,
            "l2": l2,
            "fitted_on": {
                "seeds": [str(g) for g in groups],
                "samples": int(len(y)),
            },
            "coefficients": {
                c: [[round(float(w), 6) for w in row] for row in W[c]] for c in CLASSES
            },
            # each verdict's feature range, to which the classifier clips its features
            "low": {
                c: [float(x) for x in X[v == j].min(axis=0)] for j, c in enumerate(CLASSES)
            },
            "high": {
                c: [float(x) for x in X[v == j].max(axis=0)] for j, c in enumerate(CLASSES)
            },
        }
        with open(OUT, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
        print(f"wrote {os.path.normpath(OUT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
