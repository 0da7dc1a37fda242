"""Calibrators on IoU targets: scikit-learn references and first-order conditions."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LinearRegression

from detcal.calibration import IsotonicCalibration, PlattScaling, TemperatureScaling
from detcal.calibration.base import logit, sigmoid
from detcal.calibration.iou_regression import IoULinearRegression, PerClassCalibrator, fit_soft
from detcal.core.errors import DetcalInputError


def _sample(seed, n=400, slope=0.6):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    t = np.clip(slope * p + 0.1 + rng.normal(0, 0.1, n), 0, 1)
    t[rng.uniform(size=n) < 0.2] = 0.0  # false positives
    return p, t


def test_linear_regression_matches_sklearn_positive():
    p, t = _sample(0)
    cal = IoULinearRegression().fit(p, t)
    ref = LinearRegression(positive=True).fit(p[:, None], t)
    assert cal.a_ == pytest.approx(ref.coef_[0], abs=1e-10)
    assert cal.b_ == pytest.approx(ref.intercept_, abs=1e-10)
    # negative trend: slope clamped to 0, intercept the mean
    cal2 = IoULinearRegression().fit(p, 1 - t)
    ref2 = LinearRegression(positive=True).fit(p[:, None], 1 - t)
    assert cal2.a_ == 0.0 and ref2.coef_[0] == pytest.approx(0.0, abs=1e-12)
    assert cal2.b_ == pytest.approx(ref2.intercept_)
    assert np.all(cal.transform(np.array([0.0, 1.0])) <= 1.0)


def test_soft_temperature_and_platt_first_order_conditions():
    p, t = _sample(1)
    z = logit(p)
    T = fit_soft(TemperatureScaling(), p, t).temperature_
    u = z / T
    assert abs(np.mean((sigmoid(u) - t) * u)) < 1e-7
    pl = fit_soft(PlattScaling(), p, t)
    r = sigmoid(pl.a_ * z + pl.b_) - t
    assert abs(r.mean()) < 1e-8 and abs((r * z).mean()) < 1e-8


def test_soft_isotonic_matches_sklearn():
    p, t = _sample(2)
    cal = fit_soft(IsotonicCalibration(), p, t)
    ref = IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(p, t)
    q = np.linspace(0, 1, 57)
    np.testing.assert_allclose(cal.transform(q), ref.predict(q), atol=1e-12)


def test_per_class():
    p1, t1 = _sample(3, slope=0.9)
    p2, t2 = _sample(4, slope=0.2)
    p = np.concatenate([p1, p2])
    t = np.concatenate([t1, t2])
    cat = np.r_[np.full(len(p1), 5), np.full(len(p2), 9)]
    pc = PerClassCalibrator("linear_regression").fit(p, t, cat)
    a5 = IoULinearRegression().fit(p1, t1)
    q = np.array([0.2, 0.5, 0.2, 0.7])
    out = pc.transform(q, [5, 5, 9, 7])
    assert out[0] == pytest.approx(a5.a_ * 0.2 + a5.b_)
    assert out[3] == 0.7  # unseen class: unchanged
    assert PerClassCalibrator("identity").fit(p, t, cat).transform(q, [5, 5, 9, 7]).tolist() == q.tolist()


def test_bad_targets():
    with pytest.raises(DetcalInputError, match="target"):
        fit_soft(PlattScaling(), [0.5, 0.6], [0.2, 1.2])
    with pytest.raises(DetcalInputError, match="unknown calibrator"):
        PerClassCalibrator("nope")
