"""Tests of detcal.calibration.regression (docs/calibration.md, regression).

References: the NLL minimiser found by scipy.optimize, netcal 1.4.0's
VarianceScaling, scipy.integrate (Romberg and quad) for the moments of the
recalibrated CDF, and hand arithmetic written out in comments.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

from detcal.calibration import (
    REGRESSION_CALIBRATORS,
    KuleshovIsotonic,
    SigmaHistogramBinning,
    StdScaling,
    StdScalingSGD,
    make_calibrator,
)
from detcal.core.errors import DetcalInputError, NotFittedError


def _data(n: int, seed: int, scale: tuple[float, ...] = (1.15, 1.1, 1.2, 0.8), shift: float = 0.0):
    """mu, sigma [n,4]; y = mu + scale_k sigma (N(0,1) + shift)."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(0, 0.3, size=(n, 4))
    sigma = rng.uniform(0.05, 0.5, size=(n, 4))
    y = mu + np.asarray(scale) * sigma * (rng.normal(size=(n, 4)) + shift)
    return mu, sigma, y


# --------------------------------------------------------------------------- std scaling


def test_std_scaling_is_the_nll_minimiser_and_equals_netcal() -> None:
    mu, sigma, y = _data(20_000, seed=1)
    cal = StdScaling().fit(mu, sigma, y)
    for k in range(4):
        r2 = ((y[:, k] - mu[:, k]) / sigma[:, k]) ** 2

        def nll(s: float) -> float:
            return float(np.mean(np.log(s * sigma[:, k]) + r2 / (2 * s * s)))

        # Brent search on the NLL itself (x-accuracy ~ sqrt(eps)) ...
        s_min = optimize.minimize_scalar(nll, bounds=(0.01, 10), method="bounded", options={"xatol": 1e-10}).x
        assert cal.scale_[k] == pytest.approx(s_min, rel=1e-6)
        # ... and the root of dNLL/ds = 1/s - mean(r^2)/s^3 to full precision
        s_root = optimize.brentq(lambda s: 1 / s - r2.mean() / s**3, 0.01, 10, xtol=1e-15, rtol=1e-15)
        assert cal.scale_[k] == pytest.approx(s_root, rel=1e-12)
    np.testing.assert_allclose(cal.scale_, [1.15, 1.1, 1.2, 0.8], rtol=0.02)  # planted
    netcal_reg = pytest.importorskip("netcal.regression")
    ref = netcal_reg.VarianceScaling().fit((mu, sigma), y)
    np.testing.assert_allclose(cal.scale_, ref._weight[0], rtol=1e-9, atol=0)
    np.testing.assert_allclose(cal.transform(mu, sigma)[1], ref.transform((mu, sigma)), rtol=1e-9, atol=0)
    np.testing.assert_array_equal(cal.transform(mu, sigma)[0], mu)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"batch_size": None}, {"batch_size": 64, "seed": 3}, {"parametrisation": "scale"}],
    ids=["minibatch-log", "fullbatch-log", "small-batch", "minibatch-scale"],
)
def test_std_scaling_sgd_reaches_closed_form(kwargs: dict) -> None:
    mu, sigma, y = _data(20_000, seed=2)
    ref = StdScaling().fit(mu, sigma, y).scale_
    cal = StdScalingSGD(**kwargs).fit(mu, sigma, y)
    assert cal.converged_
    np.testing.assert_allclose(cal.scale_, ref, rtol=1e-4, atol=0)


def test_std_scaling_sgd_far_from_one() -> None:
    # optimum s ~ 0.2 (over-estimated sigma) and ~ 6 (under-estimated), log parametrisation
    mu, sigma, y = _data(5_000, seed=4, scale=(0.2, 6.0, 1.0, 0.5))
    ref = StdScaling().fit(mu, sigma, y).scale_
    cal = StdScalingSGD().fit(mu, sigma, y)
    assert cal.converged_
    np.testing.assert_allclose(cal.scale_, ref, rtol=1e-4, atol=0)


# --------------------------------------------------------------------------- Kuleshov isotonic


def _kuleshov_ce(p: np.ndarray, m: int = 20) -> float:
    """CE = sum_j (p_j - P_hat(p_j))^2, p_j = j/m, P_hat(q) = share of p_t <= q (Kuleshov 2018)."""
    levels = np.arange(1, m) / m
    p_hat = (p[:, None] <= levels[None, :]).mean(axis=0)
    return float(np.sum((levels - p_hat) ** 2))


def test_kuleshov_heldout_ce_near_zero() -> None:
    # residuals: Student-t(4) scaled by 1.6 sigma, shifted 0.3 sigma: not Gaussian, not centred
    rng = np.random.default_rng(5)

    def draw(n: int):
        mu = rng.normal(size=(n, 2))
        sigma = rng.uniform(0.2, 2.0, size=(n, 2))
        return mu, sigma, mu + sigma * (1.6 * rng.standard_t(4, size=(n, 2)) + 0.3)

    cal_set, test_set = draw(20_000), draw(20_000)
    cal = KuleshovIsotonic().fit(*cal_set)
    mu, sigma, y = test_set
    for k in range(2):
        before = _kuleshov_ce(stats.norm.cdf((y[:, k] - mu[:, k]) / sigma[:, k]))
        after = _kuleshov_ce(cal.cdf(y, mu, sigma)[:, k])
        assert before > 0.05
        assert after < 2e-3


def test_kuleshov_moments_equal_numerical_integration() -> None:
    mu, sigma, y = _data(400, seed=6, scale=(1.5, 0.7, 1.0, 2.0), shift=0.4)
    cal = KuleshovIsotonic().fit(mu, sigma, y)
    samples = [(0.0, 1.0), (5.0, 0.5), (-3.0, 2.0), (0.3, 0.05)]
    for k in range(4):
        xk, yk = cal.x_thresholds_[k], cal.y_thresholds_[k]
        for m0, s0 in samples:
            mu_t = np.full((1, 4), m0)
            sg_t = np.full((1, 4), s0)
            mean, std = (a[0, k] for a in cal.transform(mu_t, sg_t))
            # Romberg on [m0 - 40 s0, m0 + 40 s0] (the tails beyond carry < 1e-300 mass), with
            # the public recalibrated CDF: E[Y] = lo + int_lo^hi (1 - G),
            # E[Y^2] = lo^2 + int_lo^hi 2u (1 - G(u)) du  (integration by parts)
            lo, hi = m0 - 40 * s0, m0 + 40 * s0
            u = np.linspace(lo, hi, 2**16 + 1)
            yy = np.zeros((u.size, 4))
            yy[:, k] = u
            sf = 1.0 - cal.cdf(yy, np.repeat(mu_t, u.size, 0), np.repeat(sg_t, u.size, 0))[:, k]
            e1 = lo + integrate.romb(sf, dx=u[1] - u[0])
            e2 = lo**2 + integrate.romb(2 * u * sf, dx=u[1] - u[0])
            # G has a kink at every knot, which caps Romberg's order: agreement ~1e-5 at 2^16 + 1 points
            assert mean == pytest.approx(e1, abs=5e-5 * s0)
            assert std == pytest.approx(np.sqrt(e2 - e1**2), rel=5e-5)
            if k > 0:
                continue
            # adaptive quad over both half-lines (Levi Eq. 13 done right), breakpoints at the knots:
            # E[Y] = int_0^inf (1 - G) - int_-inf^0 G,  E[Y^2] = 2 int_0^inf u (1 - G) + 2 int_-inf^0 |u| G

            def G(t: float) -> float:
                return float(np.interp(special.ndtr((t - m0) / s0), xk, yk))

            a, b = min(lo, 0.0), max(hi, 0.0)
            knots = m0 + s0 * stats.norm.ppf(xk[1:-1])

            def quad(fun, x0: float, x1: float) -> float:
                pts = knots[(knots > x0) & (knots < x1)]
                return integrate.quad(fun, x0, x1, points=pts, limit=4 * len(pts) + 100, epsabs=1e-12)[0]

            pos1 = quad(lambda t: 1 - G(t), 0.0, b)
            neg1 = quad(G, a, 0.0)
            pos2 = quad(lambda t: 2 * t * (1 - G(t)), 0.0, b)
            neg2 = quad(lambda t: -2 * t * G(t), a, 0.0)
            assert mean == pytest.approx(pos1 - neg1, abs=1e-7 * max(1.0, abs(m0)))
            assert std == pytest.approx(np.sqrt(pos2 + neg2 - (pos1 - neg1) ** 2), rel=1e-6)
    # Eq. 13 as printed (u >= 0 only) cannot hold for a negative-valued variable:
    mean_neg = cal.transform(np.full((1, 4), -3.0), np.full((1, 4), 0.5))[0][0, 0]
    assert mean_neg < -2.0  # while int_0^inf (1 - G) >= 0 can never be negative


def test_kuleshov_quantile_inverts_cdf_and_identity_on_calibrated_data() -> None:
    mu, sigma, y = _data(20_000, seed=7, scale=(1.0, 1.0, 1.0, 1.0))
    cal = KuleshovIsotonic().fit(mu, sigma, y)
    # calibrated Gaussian input: the recalibration is close to the identity
    np.testing.assert_allclose(cal.mean_z_, 0.0, atol=0.03)
    np.testing.assert_allclose(cal.std_z_, 1.0, atol=0.03)
    q = np.array([[0.05], [0.3], [0.5], [0.9], [0.99]])
    m5, s5 = mu[:5], sigma[:5]
    yq = cal.quantile(q, m5, s5)
    np.testing.assert_allclose(cal.cdf(yq, m5, s5), np.broadcast_to(q, yq.shape), atol=1e-9)
    with pytest.raises(DetcalInputError):
        cal.quantile(1.0, m5, s5)


# --------------------------------------------------------------------------- sigma histogram binning


def test_sigma_histogram_binning_hand_example() -> None:
    # sigma 1,1,2,2 ; e = 2,0,1,1 ; 2 equal-count bins:
    # bin0: RMV = 1, RMSE = sqrt((4 + 0)/2) = sqrt(2) -> factor sqrt(2)
    # bin1: RMV = 2, RMSE = sqrt((1 + 1)/2) = 1      -> factor 1/2 ; edge = (1 + 2)/2 = 1.5
    sigma = np.array([1.0, 1.0, 2.0, 2.0])
    cal = SigmaHistogramBinning(bins=2).fit(np.zeros(4), sigma, np.array([2.0, 0.0, 1.0, -1.0]))
    mu_new, s_new = cal.transform(np.ones(5), np.array([0.5, 1.0, 1.4, 1.5, 3.0]))
    r2 = np.sqrt(2.0)
    np.testing.assert_allclose(s_new, [0.5 * r2, r2, 1.4 * r2, 0.75, 1.5])
    np.testing.assert_array_equal(mu_new, np.ones(5))


def test_sigma_histogram_binning_zeroes_in_sample_ence() -> None:
    mu, sigma, y = _data(10_000, seed=8)
    _, s_new = SigmaHistogramBinning(bins=10).fit(mu, sigma, y).transform(mu, sigma)
    for k in range(4):
        order = np.argsort(sigma[:, k], kind="stable")
        groups = np.array_split(order, 10)  # Levi et al. equal-count bins
        e = y[:, k] - mu[:, k]
        ence = np.mean(
            [
                abs(np.sqrt(np.mean(s_new[g, k] ** 2)) - np.sqrt(np.mean(e[g] ** 2)))
                / np.sqrt(np.mean(s_new[g, k] ** 2))
                for g in groups
            ]
        )
        assert ence < 1e-12


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize("name", sorted(REGRESSION_CALIBRATORS))
def test_contract_fit_returns_self_and_pickles(name: str) -> None:
    mu, sigma, y = _data(500, seed=9)
    cal = make_calibrator(name)
    assert cal.fit(mu, sigma, y) is cal
    m_new, s_new = cal.transform(mu, sigma)
    assert m_new.shape == mu.shape and s_new.shape == sigma.shape and np.all(s_new > 0)
    clone = pickle.loads(pickle.dumps(cal))
    m2, s2 = clone.transform(mu, sigma)
    np.testing.assert_array_equal(m2, m_new)
    np.testing.assert_array_equal(s2, s_new)
    json.dumps(cal.describe())
    # one coordinate as [S] in, [S] out
    one = make_calibrator(name).fit(mu[:, 0], sigma[:, 0], y[:, 0])
    m1, s1 = one.transform(mu[:, 0], sigma[:, 0])
    assert m1.shape == (500,) and s1.shape == (500,)
    np.testing.assert_allclose(s1, s_new[:, 0], rtol=1e-6)  # SGD stops at its own tolerance


@pytest.mark.parametrize("name", sorted(REGRESSION_CALIBRATORS))
def test_contract_not_fitted_and_bad_input(name: str) -> None:
    mu, sigma, y = _data(100, seed=10)
    cal = make_calibrator(name)
    with pytest.raises(NotFittedError, match=type(cal).__name__):
        cal.transform(mu, sigma)
    bad = sigma.copy()
    bad[5, 2] = 0.0
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(mu, bad, y)
    assert ei.value.field == "sigma" and ei.value.record == 5
    bad[5, 2] = -1.0
    with pytest.raises(DetcalInputError):
        cal.fit(mu, bad, y)
    bad_mu = mu.copy()
    bad_mu[9, 0] = np.nan
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(bad_mu, sigma, y)
    assert ei.value.field == "mu" and ei.value.record == 9
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(mu, sigma, y[:-1])
    assert ei.value.field == "y"
    with pytest.raises(DetcalInputError):
        cal.fit(mu, sigma[:, :3], y)
    cal.fit(mu, sigma, y)
    with pytest.raises(DetcalInputError):
        cal.transform(mu[:, :2], sigma[:, :2])  # 2 coordinates given, 4 at fit


@pytest.mark.parametrize("cls", [StdScaling, StdScalingSGD])
def test_std_scaling_rejects_all_zero_residuals(cls) -> None:
    mu = np.zeros((5, 2))
    y = np.zeros((5, 2))
    y[:, 0] = 1.0  # coordinate 1 has only zero residuals: s = 0 would give sigma' = 0
    with pytest.raises(DetcalInputError, match="coordinate 1"):
        cls().fit(mu, np.ones((5, 2)), y)
