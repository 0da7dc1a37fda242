"""Tests of detcal.calibration.confidence (docs/calibration.md, confidence).

Golden values come from closed forms written out in comments, from
scikit-learn (LogisticRegression, IsotonicRegression), from scipy
(optimize.isotonic_regression, integrate.quad) or from planted parameters of
seeded synthetic data; none is copied from the code under test.
"""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from detcal.calibration import (
    BBQ,
    CONFIDENCE_CALIBRATORS,
    BetaCalibration,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    PositionLogistic,
    TemperatureScaling,
    make_calibrator,
)
from detcal.calibration.confidence import pav
from detcal.core.errors import DetcalInputError, NotFittedError


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    """Equal-width ECE (Guo 2017): sum_b N_b/N |mean y - mean p|, last bin closed."""
    b = np.minimum((p * bins).astype(int), bins - 1)
    n = np.bincount(b, minlength=bins)
    gap = np.abs(np.bincount(b, y, bins) - np.bincount(b, p, bins))
    return float(gap.sum() / len(p)) if n.sum() else 0.0


def _dece(p: np.ndarray, y: np.ndarray, feats: np.ndarray, bins: int = 5, thr: int = 8) -> float:
    """D-ECE over (p, features) cells, equal width, cells with < thr samples dropped."""
    x = np.column_stack([p, feats])
    idx = np.minimum((x * bins).astype(int), bins - 1)
    cell = np.ravel_multi_index(tuple(idx.T), (bins,) * x.shape[1])
    n = np.bincount(cell)
    sy = np.bincount(cell, y)
    sp = np.bincount(cell, p)
    keep = n >= thr
    return float(np.abs(sy[keep] - sp[keep]).sum() / n[keep].sum())


def _planted(n: int, seed: int, slope: float = 2.5, shift: float = -1.0) -> tuple[np.ndarray, np.ndarray]:
    """True precision sigmoid(z); reported score sigmoid(slope z + shift) (over-confident, biased)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(0.3, 1.5, n)
    y = (rng.uniform(size=n) < _sig(z)).astype(float)
    return _sig(slope * z + shift), y


# --------------------------------------------------------------------------- temperature / Platt


@pytest.mark.parametrize("t0", [2.0, 0.5])
def test_temperature_recovers_planted_temperature(t0: float) -> None:
    # Truth: P(y=1) = sigmoid(z). The model reports logit t0 * z, so
    # sigmoid(logit(p) / T) is calibrated exactly for T = t0.
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 2.0, 200_000)
    y = (rng.uniform(size=z.size) < _sig(z)).astype(float)
    p = _sig(t0 * z)
    cal = TemperatureScaling().fit(p, y)
    assert cal.temperature_ == pytest.approx(t0, rel=0.03)
    # and it is the NLL minimiser found independently by scipy's bounded Brent search
    lz = np.log(p) - np.log1p(-p)

    def nll(t: float) -> float:
        u = lz / t
        return float(np.mean(np.logaddexp(0, u) - y * u))

    ref = optimize.minimize_scalar(nll, bounds=(0.05, 20), method="bounded", options={"xatol": 1e-9}).x
    assert cal.temperature_ == pytest.approx(ref, rel=1e-6)


def test_platt_matches_sklearn_logistic_regression() -> None:
    sk = pytest.importorskip("sklearn.linear_model")
    p, y = _planted(20_000, seed=2)
    z = np.log(p) - np.log1p(-p)
    ref = sk.LogisticRegression(C=1e12, tol=1e-12, max_iter=10_000).fit(z[:, None], y)
    cal = PlattScaling().fit(p, y)
    assert cal.a_ == pytest.approx(ref.coef_[0, 0], abs=1e-4)
    assert cal.b_ == pytest.approx(ref.intercept_[0], abs=1e-4)
    p_new = np.linspace(0.001, 0.999, 101)
    z_new = np.log(p_new) - np.log1p(-p_new)
    np.testing.assert_allclose(cal.transform(p_new), ref.predict_proba(z_new[:, None])[:, 1], atol=1e-4)
    # the planted map: y ~ sigmoid(z), p = sigmoid(2.5 z - 1) -> a = 1/2.5, b = 1/2.5
    assert cal.a_ == pytest.approx(0.4, abs=0.03)
    assert cal.b_ == pytest.approx(0.4, abs=0.05)


# --------------------------------------------------------------------------- isotonic


def test_pav_matches_scipy_isotonic_regression_weighted() -> None:
    rng = np.random.default_rng(3)
    y = rng.normal(size=2000).cumsum() * 0.1 + rng.normal(size=2000)
    w = rng.uniform(0.1, 3.0, size=2000)
    ref = optimize.isotonic_regression(y, weights=w).x
    np.testing.assert_allclose(pav(y, w), ref, atol=1e-10, rtol=0)


def test_isotonic_matches_sklearn_and_scipy() -> None:
    iso = pytest.importorskip("sklearn.isotonic")
    rng = np.random.default_rng(4)
    p = np.round(rng.beta(2, 2, size=5000), 3)  # 3-decimal scores: many ties
    y = (rng.uniform(size=p.size) < p**1.7).astype(float)
    cal = IsotonicCalibration().fit(p, y)
    ref = iso.IsotonicRegression(out_of_bounds="clip").fit(p, y)
    grid = np.concatenate([np.linspace(0, 1, 2001), p[:500]])
    np.testing.assert_allclose(cal.transform(grid), ref.predict(grid), atol=1e-10, rtol=0)
    # scipy on the tie-merged problem gives the same fitted values at the data
    ux, inv = np.unique(p, return_inverse=True)
    w = np.bincount(inv).astype(float)
    sref = optimize.isotonic_regression(np.bincount(inv, y) / w, weights=w).x
    np.testing.assert_allclose(cal.transform(ux), sref, atol=1e-10, rtol=0)


def test_isotonic_hand_example() -> None:
    # p = .1 .2 .3 .4, y = 1 0 1 1: blocks {.1,.2} pooled to 0.5, then 1, 1.
    cal = IsotonicCalibration().fit([0.1, 0.2, 0.3, 0.4], [1, 0, 1, 1])
    # interp: 0.15 -> 0.5; 0.25 -> halfway between (0.2, 0.5) and (0.3, 1) = 0.75; outside clipped
    np.testing.assert_allclose(cal.transform([0.0, 0.15, 0.25, 0.9]), [0.5, 0.5, 0.75, 1.0], atol=1e-12)


# --------------------------------------------------------------------------- histogram binning


def test_histogram_binning_hand_example() -> None:
    # 10 bins. p=.05 (bin0, y0), .1 (bin1, y1), .5 and .55 (bin5, y1 y1), .95 (bin9, y0).
    # Global frequency 3/5 = 0.6 for empty bins.
    cal = HistogramBinning(bins=10).fit([0.05, 0.1, 0.5, 0.55, 0.95], [0, 1, 1, 1, 0])
    out = cal.transform([0.07, 0.15, 0.52, 0.3, 1.0])
    np.testing.assert_allclose(out, [0.0, 1.0, 1.0, 0.6, 0.0])


def test_histogram_binning_grid_with_fallback() -> None:
    # grid 2x2 over (p, f): cells (p<.5,f<.5)=0, (p<.5,f>=.5)=1, (p>=.5,f<.5)=2, (p>=.5,f>=.5)=3.
    p = [0.1, 0.2, 0.3, 0.6, 0.7, 0.8]
    f = [[0.1], [0.2], [0.9], [0.1], [0.2], [0.3]]
    y = [1, 1, 0, 0, 1, 1]
    # min_samples=2: cell0 {y 1,1} -> 1.0; cell1 has one sample -> sparse; cell2 {0,1,1} -> 2/3; cell3 empty.
    # 1-D bins (bins=2): bin0 {1,1,0} -> 2/3, bin1 {0,1,1} -> 2/3.
    cal = HistogramBinning(bins=2, grid_bins=2, min_samples=2).fit(p, y, f)
    out = cal.transform([0.15, 0.25, 0.65, 0.9], [[0.3], [0.8], [0.0], [0.7]])
    np.testing.assert_allclose(out, [1.0, 2 / 3, 2 / 3, 2 / 3])
    with pytest.raises(DetcalInputError):
        cal.transform([0.15])  # fitted with features: they are required


# --------------------------------------------------------------------------- BBQ and beta


def test_bbq_marginal_likelihood_by_hand_and_by_quadrature() -> None:
    rng = np.random.default_rng(5)
    p = np.sort(rng.uniform(size=12))
    y = np.array([0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 1, 1], dtype=float)  # m = 6? count: 6 ones
    cal = BBQ(prior_strength=2.0).fit(p, y)
    # S = 12: S^(1/3) = 2.289, B from max(1, floor(0.229)) = 1 to min(12, ceil(22.89)) = 12.
    np.testing.assert_array_equal(cal.n_bins_, np.arange(1, 13))
    # B = 1: one bin, midpoint 0.5, alpha = beta = 2/1 * 0.5 = 1 (uniform prior):
    # P(D) = int t^m (1-t)^n dt = m! n! / (N+1)! with m = 6, n = 6, N = 12.
    m = int(y.sum())
    expected_b1 = math.log(math.factorial(m) * math.factorial(12 - m) / math.factorial(13))
    assert cal.log_scores_[0] == pytest.approx(expected_b1, rel=1e-12)
    # B = 2: groups of 6, edge between p[5] and p[6]; each bin's evidence by quadrature of
    # t^m_b (1-t)^n_b Beta(t; N'/B * mid_b, N'/B * (1 - mid_b)).
    e = 0.5 * (p[5] + p[6])
    total = 0.0
    for lo, hi, yy in [(0.0, e, y[:6]), (e, 1.0, y[6:])]:
        mid = 0.5 * (lo + hi)
        a, b = 1.0 * mid, 1.0 * (1 - mid)
        mb, nb = yy.sum(), len(yy) - yy.sum()
        # substitute t = u^(1/a) near 0 is unnecessary: quad handles the integrable endpoint singularities
        val, _ = integrate.quad(lambda t: t**mb * (1 - t) ** nb * stats.beta.pdf(t, a, b), 0, 1, limit=200)
        total += math.log(val)
    assert cal.log_scores_[1] == pytest.approx(total, rel=1e-6)
    # weights are the normalised scores
    w = np.exp(cal.log_scores_ - cal.log_scores_.max())
    np.testing.assert_allclose(cal.weights_, w / w.sum(), atol=1e-12)


@pytest.mark.parametrize("name", ["bbq", "beta", "isotonic", "histogram", "platt"])
def test_calibrators_lower_heldout_ece_under_planted_miscalibration(name: str) -> None:
    p_cal, y_cal = _planted(30_000, seed=6)
    p_test, y_test = _planted(30_000, seed=7)
    before = _ece(p_test, y_test)
    after = _ece(make_calibrator(name).fit(p_cal, y_cal).transform(p_test), y_test)
    assert before > 0.08
    assert after < 0.02  # (temperature scaling has no bias term and cannot fix the planted shift)
    assert after < 0.5 * before


def test_beta_matches_sklearn_when_unconstrained_optimum_is_feasible() -> None:
    sk = pytest.importorskip("sklearn.linear_model")
    p, y = _planted(20_000, seed=8)
    x = np.column_stack([np.log(p), -np.log1p(-p)])
    ref = sk.LogisticRegression(C=1e12, tol=1e-12, max_iter=10_000).fit(x, y)
    a, b = ref.coef_[0]
    assert a > 0 and b > 0  # so the constraint a, b >= 0 is inactive
    cal = BetaCalibration().fit(p, y)
    assert cal.a_ == pytest.approx(a, abs=1e-4)
    assert cal.b_ == pytest.approx(b, abs=1e-4)
    assert cal.c_ == pytest.approx(ref.intercept_[0], abs=1e-4)


def test_beta_constraint_keeps_map_monotone() -> None:
    # Anti-calibrated scores: the unconstrained fit would want negative a and b.
    rng = np.random.default_rng(9)
    p = rng.uniform(0.01, 0.99, 5000)
    y = (rng.uniform(size=p.size) < 1 - p).astype(float)
    cal = BetaCalibration().fit(p, y)
    assert cal.a_ >= 0 and cal.b_ >= 0
    out = cal.transform(np.linspace(0.01, 0.99, 99))
    assert np.all(np.diff(out) >= -1e-15)


# --------------------------------------------------------------------------- position dependence


def _border_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Truth q = sigmoid(z); the detector reports logit z / c(pos), c = 1 - 0.35 (u^2 + v^2),
    u = 2 cx - 1, v = 2 cy - 1: calibrated at the centre, 3.3x over-confident logits at the corners."""
    rng = np.random.default_rng(seed)
    feats = rng.uniform(size=(n, 4))
    feats[:, 2:] = rng.uniform(0.05, 0.4, size=(n, 2))  # w, h
    z = rng.normal(0.5, 1.5, n)
    q = _sig(z)
    y = (rng.uniform(size=n) < q).astype(float)
    c = 1.0 - 0.35 * ((2 * feats[:, 0] - 1) ** 2 + (2 * feats[:, 1] - 1) ** 2)
    return _sig(z / c), y, feats, q


def _dece_true(p: np.ndarray, q: np.ndarray, feats: np.ndarray, bins: int = 5, thr: int = 8) -> float:
    """D-ECE-like gap over (p, cx, cy) cells, measured against the true precision q instead of
    the noisy labels (the label noise would otherwise dominate): sum_c N_c/N |mean q - mean p|."""
    return _dece(p, q, feats, bins, thr)


def test_position_logistic_fixes_border_overconfidence_better_than_temperature() -> None:
    p_cal, y_cal, f_cal, _ = _border_data(30_000, seed=10)
    p_te, _, f_te, q_te = _border_data(30_000, seed=11)
    pos = PositionLogistic().fit(p_cal, y_cal, f_cal)
    tmp = TemperatureScaling().fit(p_cal, y_cal)
    lin = PositionLogistic(degree="linear").fit(p_cal, y_cal, f_cal)
    d_before = _dece_true(p_te, q_te, f_te[:, :2])
    d_pos = _dece_true(pos.transform(p_te, f_te), q_te, f_te[:, :2])
    d_tmp = _dece_true(tmp.transform(p_te), q_te, f_te[:, :2])
    d_lin = _dece_true(lin.transform(p_te, f_te), q_te, f_te[:, :2])
    assert d_before > 0.03
    assert d_pos < 0.5 * d_tmp
    assert d_pos < 0.25 * d_before
    # the linear variant cannot express a slope that changes towards both borders
    assert d_pos < 0.5 * d_lin


def test_position_logistic_requires_features() -> None:
    with pytest.raises(DetcalInputError, match="features"):
        PositionLogistic().fit([0.2, 0.8], [0, 1])


# --------------------------------------------------------------------------- contract, every calibrator


def _data(n: int = 600, seed: int = 12) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p**1.5).astype(float)
    return p, y, rng.uniform(size=(n, 4))


@pytest.mark.parametrize("name", sorted(CONFIDENCE_CALIBRATORS))
def test_contract_fit_returns_self_and_pickles(name: str) -> None:
    p, y, f = _data()
    cal = make_calibrator(name)
    assert cal.fit(p, y, f) is cal
    assert all(k.endswith("_") for k in cal.fitted_attributes())
    out = cal.transform(p, f)
    assert out.shape == p.shape and np.all((out >= 0) & (out <= 1))
    clone = pickle.loads(pickle.dumps(cal))
    np.testing.assert_array_equal(clone.transform(p, f), out)
    desc = cal.describe()
    assert desc["method"] == type(cal).__name__ and desc["fitted"]
    json.dumps(desc)
    assert set(cal.get_params()) == set(type(cal)().get_params())


@pytest.mark.parametrize("name", sorted(CONFIDENCE_CALIBRATORS))
def test_contract_not_fitted(name: str) -> None:
    cal = make_calibrator(name)
    assert cal.describe()["fitted"] is None
    with pytest.raises(NotFittedError, match=type(cal).__name__):
        cal.transform([0.5], [[0.5] * 4])


@pytest.mark.parametrize("name", sorted(CONFIDENCE_CALIBRATORS))
def test_contract_bad_input(name: str) -> None:
    p, y, f = _data(50)
    cal = make_calibrator(name)
    bad_p = p.copy()
    bad_p[3] = np.nan
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(bad_p, y, f)
    assert ei.value.record == 3 and ei.value.field == "p"
    bad_p[3] = 1.5
    with pytest.raises(DetcalInputError, match="outside"):
        cal.fit(bad_p, y, f)
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(p, y[:-1], f)
    assert ei.value.field == "y"
    bad_y = y.copy()
    bad_y[7] = 2
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(p, bad_y, f)
    assert ei.value.record == 7
    bad_f = f.copy()
    bad_f[4, 1] = -0.2
    with pytest.raises(DetcalInputError) as ei:
        cal.fit(p, y, bad_f)
    assert ei.value.field == "features" and ei.value.record == 4
    cal.fit(p, y, f)
    with pytest.raises(DetcalInputError):
        cal.transform(np.array([0.2, np.nan]), f[:2])


def test_make_calibrator_rejects_unknown_names() -> None:
    with pytest.raises(DetcalInputError, match="unknown calibrator"):
        make_calibrator("nope")
    with pytest.raises(DetcalInputError, match="no hyper-parameter"):
        make_calibrator("bbq", bins=3)
    assert make_calibrator("histogram", bins=7).get_params()["bins"] == 7


def test_calibration_does_not_import_torch_or_hydra() -> None:
    code = (
        "import sys, detcal.calibration; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'hydra', 'netcal')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
