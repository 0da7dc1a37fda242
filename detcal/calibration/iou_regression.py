"""Calibrators fitted to IoU targets, per class (Kuzucu et al., ECCV 2024).

The localisation-aware calibration of the 2024 benchmark asks a score to
predict the IoU of the detection with its ground truth (0 for a false
positive) rather than the 0/1 TP label. Its four post-hoc calibrators are
fitted per class on such soft targets ``t [S]`` in [0, 1]:

* ``linear_regression`` -- :class:`IoULinearRegression`, ``p' = a p + b``
  by least squares with ``a >= 0`` (scikit-learn ``LinearRegression(positive=
  True)``: the intercept is free), output clipped to [0, 1];
* ``temperature`` / ``platt`` -- :class:`~detcal.calibration.TemperatureScaling`
  and :class:`~detcal.calibration.PlattScaling` minimising the Bernoulli
  cross-entropy with the soft target, ``mean softplus(u) - t u`` (the same
  objectives as for 0/1 labels, which they generalise);
* ``isotonic`` -- :class:`~detcal.calibration.IsotonicCalibration`, the
  non-decreasing least-squares fit of the targets, clipped outside the range.

:func:`fit_soft` fits any of these on soft targets; :class:`PerClassCalibrator`
keeps one per class (a class without samples stays the identity).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detcal.calibration.base import ConfidenceCalibrator, check_probabilities
from detcal.calibration.confidence import IsotonicCalibration, PlattScaling, TemperatureScaling
from detcal.core.errors import DetcalInputError


def check_targets(t: Any, n: int, field: str = "target") -> np.ndarray:
    """Soft targets ``t [S]`` in [0, 1] of length ``n``."""
    arr = np.asarray(t, dtype=np.float64).reshape(-1)
    if len(arr) != n:
        raise DetcalInputError(f"length {len(arr)} does not match the {n} samples of p", field=field)
    bad = ~np.isfinite(arr) | (arr < 0) | (arr > 1)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DetcalInputError(f"target {arr[i]} is outside [0, 1]", record=i, field=field)
    return arr


class IoULinearRegression(ConfidenceCalibrator):
    """``p' = clip(a p + b, 0, 1)`` with ``(a, b)`` the least-squares fit of IoU targets under ``a >= 0``.

    One feature and a free intercept: the constrained optimum is the ordinary
    least-squares line when its slope is non-negative, else ``a = 0, b =
    mean(t)``. A constant ``p`` gives ``a = 0``. Learned: ``a_``, ``b_``.
    """

    def __init__(self) -> None:
        pass

    def fit(self, p: Any, y: Any, features: Any = None) -> IoULinearRegression:
        """Fit on scores ``p [S]`` and targets ``y [S]`` in [0, 1] (IoU or 0/1)."""
        p_arr = check_probabilities(p)
        t = check_targets(y, len(p_arr), "y")
        if len(p_arr) == 0:
            raise DetcalInputError("cannot fit on an empty calibration sample", field="p")
        self._fit(p_arr, t, None)
        return self

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        pm, ym = float(p.mean()), float(y.mean())
        var = float(np.sum((p - pm) ** 2))
        a = float(np.sum((p - pm) * (y - ym)) / var) if var > 0 else 0.0
        a = max(a, 0.0)
        self.a_ = a
        self.b_ = ym - a * pm

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return self.a_ * p + self.b_


IOU_CALIBRATORS: dict[str, type[ConfidenceCalibrator]] = {
    "temperature": TemperatureScaling,
    "platt": PlattScaling,
    "linear_regression": IoULinearRegression,
    "isotonic": IsotonicCalibration,
}
"""The benchmark's four calibrators, by name."""


def fit_soft(cal: ConfidenceCalibrator, p: Any, target: Any) -> ConfidenceCalibrator:
    """Fit a score-only confidence calibrator on soft targets in [0, 1]; returns ``cal``.

    The objectives of temperature, Platt (Bernoulli cross-entropy) and
    isotonic (least squares) are defined for any target in [0, 1]; their
    ``fit`` only checks 0/1 labels, so this validates and fits directly.
    """
    if cal.uses_features:
        raise DetcalInputError(
            f"{type(cal).__name__} needs box features; use a score-only calibrator", field="calibrator"
        )
    p_arr = check_probabilities(p)
    t = check_targets(target, len(p_arr))
    if len(p_arr) == 0:
        raise DetcalInputError("cannot fit on an empty calibration sample", field="p")
    cal._fit(p_arr, t, None)
    return cal


class PerClassCalibrator:
    """One calibrator per class, fitted on soft (IoU) or 0/1 targets.

    ``method`` names one of :data:`IOU_CALIBRATORS` (or ``"identity"``);
    ``kwargs`` go to its constructor. Classes seen with fewer than
    ``min_samples`` samples at fit, and classes never seen, are left
    unchanged (the reference keeps such classes uncalibrated).
    """

    def __init__(self, method: str, min_samples: int = 1, **kwargs: Any) -> None:
        if method != "identity" and method not in IOU_CALIBRATORS:
            raise DetcalInputError(
                f"unknown calibrator {method!r}; known: {['identity', *IOU_CALIBRATORS]}", field="method"
            )
        self.method = method
        self.min_samples = int(min_samples)
        self.kwargs = kwargs
        self.calibrators_: dict[int, ConfidenceCalibrator] = {}

    def fit(self, p: Any, target: Any, category: Any) -> PerClassCalibrator:
        p_arr = check_probabilities(p)
        t = check_targets(target, len(p_arr))
        cat = np.asarray(category, dtype=np.int64).reshape(-1)
        if len(cat) != len(p_arr):
            raise DetcalInputError(f"category has {len(cat)} rows, p {len(p_arr)}", field="category")
        self.calibrators_ = {}
        if self.method == "identity":
            return self
        order = np.argsort(cat, kind="stable")
        uniq, start, count = np.unique(cat[order], return_index=True, return_counts=True)
        for c, s0, n in zip(uniq, start, count):  # loop over classes
            if n < self.min_samples:
                continue
            rows = order[s0 : s0 + n]
            self.calibrators_[int(c)] = fit_soft(IOU_CALIBRATORS[self.method](**self.kwargs), p_arr[rows], t[rows])
        return self

    def transform(self, p: Any, category: Any) -> np.ndarray:
        p_arr = check_probabilities(p)
        cat = np.asarray(category, dtype=np.int64).reshape(-1)
        out = p_arr.copy()
        for c, cal in self.calibrators_.items():  # loop over classes
            rows = np.flatnonzero(cat == c)
            if len(rows):
                out[rows] = cal.transform(p_arr[rows])
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "per_class": True,
            "min_samples": self.min_samples,
            "params": dict(self.kwargs),
            "n_classes_fitted": len(self.calibrators_),
        }
