"""Recalibration methods (docs/calibration.md), numpy/scipy only.

Confidence calibrators map scores ``p [S]`` (optionally with relative box
features ``[S,F]``) to calibrated precision; regression calibrators map
``(mu, sigma)`` per coordinate to ``(mu', sigma')``. All follow the
scikit-learn contract of :mod:`detcal.calibration.base`.

Registries (used by the Hydra layer through :func:`make_calibrator`):

* ``CONFIDENCE_CALIBRATORS``: ``temperature``, ``platt``, ``position_logistic``,
  ``histogram``, ``isotonic``, ``bbq``, ``beta``, ``position_beta``;
* ``REGRESSION_CALIBRATORS``: ``std_scaling``, ``std_scaling_sgd``,
  ``kuleshov_isotonic``, ``sigma_histogram``, ``conformal``.
"""

from __future__ import annotations

from typing import Any

from detcal.calibration.base import Calibrator, ConfidenceCalibrator, RegressionCalibrator
from detcal.calibration.confidence import (
    BBQ,
    BetaCalibration,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    PositionLogistic,
    TemperatureScaling,
)
from detcal.calibration.conformal import ConformalBoxIntervals
from detcal.calibration.position_beta import PositionBetaCalibration
from detcal.calibration.regression import KuleshovIsotonic, SigmaHistogramBinning, StdScaling, StdScalingSGD
from detcal.core.errors import DetcalInputError

CONFIDENCE_CALIBRATORS: dict[str, type[ConfidenceCalibrator]] = {
    "temperature": TemperatureScaling,
    "platt": PlattScaling,
    "position_logistic": PositionLogistic,
    "histogram": HistogramBinning,
    "isotonic": IsotonicCalibration,
    "bbq": BBQ,
    "beta": BetaCalibration,
    "position_beta": PositionBetaCalibration,
}

REGRESSION_CALIBRATORS: dict[str, type[RegressionCalibrator]] = {
    "std_scaling": StdScaling,
    "std_scaling_sgd": StdScalingSGD,
    "kuleshov_isotonic": KuleshovIsotonic,
    "sigma_histogram": SigmaHistogramBinning,
    "conformal": ConformalBoxIntervals,
}


def make_calibrator(name: str, **kwargs: Any) -> Calibrator:
    """Build the calibrator registered under ``name`` with hyper-parameters ``kwargs``.

    Looks ``name`` up in ``CONFIDENCE_CALIBRATORS`` then ``REGRESSION_CALIBRATORS``;
    an unknown name or hyper-parameter raises ``DetcalInputError``.
    """
    cls = CONFIDENCE_CALIBRATORS.get(name) or REGRESSION_CALIBRATORS.get(name)
    if cls is None:
        known = sorted(CONFIDENCE_CALIBRATORS) + sorted(REGRESSION_CALIBRATORS)
        raise DetcalInputError(f"unknown calibrator {name!r}; known: {known}", field="name")
    valid = set(cls._param_names())
    unknown = sorted(set(kwargs) - valid)
    if unknown:
        raise DetcalInputError(
            f"{cls.__name__} has no hyper-parameter(s) {unknown}; valid: {sorted(valid)}", field=unknown[0]
        )
    return cls(**kwargs)


__all__ = [
    "BBQ",
    "CONFIDENCE_CALIBRATORS",
    "REGRESSION_CALIBRATORS",
    "BetaCalibration",
    "Calibrator",
    "ConformalBoxIntervals",
    "ConfidenceCalibrator",
    "HistogramBinning",
    "IsotonicCalibration",
    "KuleshovIsotonic",
    "PlattScaling",
    "PositionBetaCalibration",
    "PositionLogistic",
    "RegressionCalibrator",
    "SigmaHistogramBinning",
    "StdScaling",
    "StdScalingSGD",
    "TemperatureScaling",
    "make_calibrator",
]
