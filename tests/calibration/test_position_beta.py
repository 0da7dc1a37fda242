"""Position-dependent (multivariate) beta calibration against its definition and netcal 1.4.0."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy.optimize import check_grad

from detcal.calibration import CONFIDENCE_CALIBRATORS, PositionBetaCalibration, TemperatureScaling
from detcal.core.errors import DetcalInputError


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _nll(q: np.ndarray, y: np.ndarray) -> float:
    q = np.clip(q, 1e-12, 1 - 1e-12)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log1p(-q)))


def _border_data(n: int, seed: int, n_feat: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over-confident scores (temperature 2) whose precision also drops towards the left/right border."""
    rng = np.random.default_rng(seed)
    f = rng.uniform(0.05, 0.95, (n, n_feat))
    z = rng.normal(0.3, 1.2, n)
    y = (rng.uniform(size=n) < _sig(z - 2.0 * np.abs(f[:, 0] - 0.5))).astype(float)
    return _sig(2.0 * z), y, f


def test_logit_is_the_written_out_likelihood_ratio() -> None:
    # z = c + sum_k (a+_k - a-_k) ln s*_k + A- ln(1 + sum l-_k s*_k) - A+ ln(1 + sum l+_k s*_k)
    cal = PositionBetaCalibration()
    cal.intercept_ = 0.3
    cal.alpha_pos_, cal.alpha_neg_ = np.array([0.5, 2.0, 1.0]), np.array([1.5, 1.0, 0.7])
    cal.lambda_pos_, cal.lambda_neg_ = np.array([0.8, 2.0]), np.array([1.2, 0.4])
    cal.n_features_, cal.n_samples_fit_ = 1, 1
    p, f = 0.7, 0.2
    sp, sf = p / (1 - p), f / (1 - f)
    z = (
        0.3
        + (2.0 - 1.0) * np.log(sp)
        + (1.0 - 0.7) * np.log(sf)
        + 3.2 * np.log(1 + 1.2 * sp + 0.4 * sf)
        - 3.5 * np.log(1 + 0.8 * sp + 2.0 * sf)
    )
    assert cal.logit([p], [[f]])[0] == pytest.approx(z, rel=1e-13)
    assert cal.transform([p], [[f]])[0] == pytest.approx(_sig(z), rel=1e-13)


def test_gradient_is_exact() -> None:
    p, y, f = _border_data(500, 1)
    x, sx = PositionBetaCalibration._inputs(p, f)
    rng = np.random.default_rng(2)
    for _ in range(3):
        th = np.concatenate(([rng.normal()], rng.uniform(0.3, 3.0, 4 * 5 + 2)))
        err = check_grad(
            lambda t: PositionBetaCalibration._objective(t, x, sx, y)[0],
            lambda t: PositionBetaCalibration._objective(t, x, sx, y)[1],
            th,
        )
        assert err < 1e-6


def test_fixes_position_dependent_miscalibration_better_than_temperature() -> None:
    p_c, y_c, f_c = _border_data(3000, 3)
    p_e, y_e, f_e = _border_data(3000, 4)
    cal = PositionBetaCalibration().fit(p_c, y_c, f_c)
    assert cal.fit_report_["converged"]
    temp = TemperatureScaling().fit(p_c, y_c)
    before, t_nll, b_nll = _nll(p_e, y_e), _nll(temp.transform(p_e), y_e), _nll(cal.transform(p_e, f_e), y_e)
    assert b_nll < t_nll - 0.003 and t_nll < before
    # the learned map lowers the precision at the border for the same score
    mid = cal.transform([0.8], [[0.5, 0.5, 0.5, 0.5]])[0]
    edge = cal.transform([0.8], [[0.05, 0.5, 0.5, 0.5]])[0]
    assert edge < mid - 0.1


def test_requires_features_and_their_count() -> None:
    p, y, f = _border_data(200, 5, n_feat=2)
    with pytest.raises(DetcalInputError, match="features"):
        PositionBetaCalibration().fit(p, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 50 iterations: not converged, and it says so
        cal = PositionBetaCalibration(max_iter=50).fit(p, y, f)
    assert not cal.fit_report_["converged"]
    with pytest.raises(DetcalInputError, match="features"):
        cal.transform(p, np.column_stack([f, f]))
    with pytest.raises(DetcalInputError, match="n_init"):
        PositionBetaCalibration(n_init=0).fit(p, y, f)
    assert "position_beta" in CONFIDENCE_CALIBRATORS


def _netcal():
    netcal = pytest.importorskip("netcal.scaling")
    return netcal.BetaCalibrationDependent


def test_same_model_as_netcal_beta_calibration_dependent() -> None:
    # netcal's map with its own fitted parameters, rewritten in ours: c = bias + sum_k (a+_k ln l+_k -
    # a-_k ln l-_k), l = beta_k / beta_0. Both must give the same calibrated precision.
    BCD = _netcal()
    p, y, f = _border_data(600, 7, n_feat=1)
    X = np.column_stack([p, f])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nc = BCD(method="mle", detection=True)
        nc.fit(X, y)
        q_nc = np.asarray(nc.transform(X), dtype=np.float64).reshape(-1)
    (ap, an), (bp, bn) = nc.alphas, nc.betas
    ap, an, bp, bn = (np.asarray(v, dtype=np.float64) for v in (ap, an, bp, bn))
    lp, ln_ = bp[1:] / bp[0], bn[1:] / bn[0]
    cal = PositionBetaCalibration()
    cal.intercept_ = float(np.asarray(nc.intercept).reshape(-1)[0]) + float(
        np.sum(ap[1:] * np.log(lp) - an[1:] * np.log(ln_))
    )
    cal.alpha_pos_, cal.alpha_neg_, cal.lambda_pos_, cal.lambda_neg_ = ap, an, lp, ln_
    cal.n_features_, cal.n_samples_fit_ = 1, len(p)
    np.testing.assert_allclose(cal.transform(p, f), q_nc, rtol=1e-9, atol=1e-12)
    # and our maximum-likelihood fit reaches netcal's ("mle": scipy on its torch loss) or better
    ours = PositionBetaCalibration().fit(p, y, f)
    assert _nll(ours.transform(p, f), y) <= _nll(q_nc, y) + 1e-4
