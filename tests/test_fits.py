"""The numpy fits of workload's size relation give scipy's figures value for value."""

import numpy as np
import pytest

from nsysdiag.compute import fits

stats = pytest.importorskip("scipy.stats")
optimize = pytest.importorskip("scipy.optimize")


def samples(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 400))
    # few distinct values (many ties), integers, and continuous values
    for x in (rng.integers(0, 4, n).astype(float), rng.integers(0, 10**9, n).astype(float),
              rng.lognormal(10, 2, n)):
        yield x, rng.lognormal(12, 1, n) + 50_000 * x * rng.random()


@pytest.mark.parametrize("seed", range(40))
def test_spearman_rho_equals_scipy(seed):
    for x, y in samples(seed):
        assert np.array_equal(fits.average_ranks(x), stats.rankdata(x))
        expected = stats.spearmanr(x, y).statistic
        got = fits.spearman_rho(x, y)
        assert got == expected or (np.isnan(got) and np.isnan(expected))


def test_spearman_rho_of_a_constant_is_nan_as_scipy_says():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([5.0, 5.0, 5.0])
    with pytest.warns(stats.ConstantInputWarning):
        assert np.isnan(stats.spearmanr(x, y).statistic)
    assert np.isnan(fits.spearman_rho(x, y)) and np.isnan(fits.spearman_rho(y, x))


def test_spearman_rho_by_hand():
    # ranks (1, 2, 3, 4) against (1, 3, 2, 4): d^2 sums to 2, rho = 1 - 6 * 2 / (4 * 15)
    assert fits.spearman_rho(np.array([1.0, 2, 3, 4]), np.array([10.0, 30, 20, 40])) == \
        pytest.approx(0.8)
    # ties take the mean of their ranks: (1.5, 1.5, 3)
    assert fits.average_ranks(np.array([7.0, 7.0, 9.0])).tolist() == [1.5, 1.5, 3.0]


@pytest.mark.parametrize("seed", range(60))
def test_isotonic_equals_scipy(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    # noisy rising medians with plateaus and drops, and repeated values
    y = np.round(np.cumsum(rng.normal(0, 1, n)) * 10) * rng.choice([1.0, 1e5])
    w = rng.integers(1, 50, n).astype(float)
    expected = optimize.isotonic_regression(y, weights=w).x
    assert np.array_equal(fits.isotonic(y, w), expected)


def test_isotonic_by_hand():
    # (3, 1) with weights (1, 3) pool to (3 + 3) / 4 = 1.5; 2 and 2 are pooled (equal), then 4
    assert fits.isotonic([3.0, 1.0, 2.0, 2.0, 4.0], [1.0, 3.0, 1.0, 1.0, 1.0]).tolist() == \
        [1.5, 1.5, 2.0, 2.0, 4.0]
    assert fits.isotonic([5.0, 4.0, 3.0], [1.0, 1.0, 1.0]).tolist() == [4.0, 4.0, 4.0]
