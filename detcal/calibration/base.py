"""Base classes of the recalibration methods (docs/calibration.md), numpy only.

The contract is scikit-learn's (``sklearn/base.py``, ``calibration.py``):

* ``__init__`` only stores hyper-parameters, under their own names, and does
  no validation or computation;
* ``fit(...)`` validates its inputs, learns attributes whose names end in
  ``_`` and returns ``self``;
* ``transform(...)`` before ``fit`` raises :class:`detcal.core.errors.NotFittedError`
  naming the class;
* :meth:`Calibrator.get_params` returns the hyper-parameters, and
  :meth:`Calibrator.describe` the hyper-parameters and the learned values, as
  plain JSON-ready Python objects for result provenance;
* instances hold only numpy arrays and Python scalars (no lambdas, closures or
  open handles), so they pickle.

Two families share the validation helpers defined here:

* :class:`ConfidenceCalibrator`: ``fit(p, y, features=None)`` and
  ``transform(p, features=None) -> p'`` with ``p [S]`` in [0, 1], ``y [S]``
  in {0, 1} and ``features [S,F]`` in [0, 1] (F = 4: relative cx, cy, w, h).
* :class:`RegressionCalibrator`: ``fit(mu, sigma, y)`` and
  ``transform(mu, sigma) -> (mu', sigma')`` per coordinate, inputs ``[S,K]``
  or ``[S]`` (one coordinate); outputs have the shape of the inputs.

The evaluation core must not import torch or hydra: this module does not.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from detcal.calibration.report import make_report, warn_report
from detcal.core.errors import DetcalInputError, NotFittedError

P_CLIP: float = 1e-12
"""Probabilities are clipped to ``[P_CLIP, 1 - P_CLIP]`` before ``logit``/``log``."""

_DESCRIBE_MAX_VALUES = 10_000
"""Arrays larger than this are summarised (shape, min, max) in :meth:`Calibrator.describe`."""


def clip_p(p: np.ndarray) -> np.ndarray:
    """``clip(p, 1e-12, 1 - 1e-12)`` (float64)."""
    return np.clip(np.asarray(p, dtype=np.float64), P_CLIP, 1.0 - P_CLIP)


def logit(p: np.ndarray) -> np.ndarray:
    """``logit(p) = ln(p / (1 - p))`` on clipped p."""
    q = clip_p(p)
    return np.log(q) - np.log1p(-q)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Numerically stable logistic function ``1 / (1 + exp(-z))``."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty_like(z)
    pos = z >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
    ez = np.exp(z[~pos])
    out[~pos] = ez / (1.0 + ez)
    return out


def _jsonable(value: Any) -> Any:
    """Plain Python version of a learned value for :meth:`Calibrator.describe`."""
    if isinstance(value, np.ndarray):
        if value.size > _DESCRIBE_MAX_VALUES:
            finite = value[np.isfinite(value)] if value.dtype.kind == "f" else value
            return {
                "shape": list(value.shape),
                "min": float(finite.min()) if finite.size else None,
                "max": float(finite.max()) if finite.size else None,
                "summarised": True,
            }
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


class Calibrator:
    """Common base: hyper-parameters, fitted state, provenance.

    Subclasses list their hyper-parameters as keyword arguments of
    ``__init__`` and store each under the same attribute name; learned values
    are attributes ending in ``_`` set by ``fit``.
    """

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            name
            for name, prm in sig.parameters.items()
            if name != "self" and prm.kind not in (prm.VAR_POSITIONAL, prm.VAR_KEYWORD)
        ]

    def get_params(self) -> dict[str, Any]:
        """Hyper-parameters given to ``__init__``, by name."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Calibrator:
        """Set hyper-parameters (unknown names raise ``DetcalInputError``); returns self."""
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise DetcalInputError(
                    f"{type(self).__name__} has no hyper-parameter {name!r}; valid: {sorted(valid)}", field=name
                )
            setattr(self, name, value)
        return self

    def fitted_attributes(self) -> dict[str, Any]:
        """Learned attributes (names ending in ``_``, not starting with ``_``), by name."""
        return {k: v for k, v in vars(self).items() if k.endswith("_") and not k.startswith("_")}

    def is_fitted(self) -> bool:
        """Whether ``fit`` has run."""
        return bool(self.fitted_attributes())

    def _check_fitted(self) -> None:
        if not self.is_fitted():
            raise NotFittedError(
                f"This {type(self).__name__} instance is not fitted yet: call fit(...) on a calibration "
                f"split before transform(...)."
            )

    def _start_fit(self) -> None:
        """Forget the learned state of a previous fit (``fit`` may be called again)."""
        for name in list(self.fitted_attributes()):
            delattr(self, name)

    def _finish_fit(self) -> None:
        """Set ``fit_report_`` (closed form by default) and warn when it is not ``ok``.

        ``_fit`` sets ``fit_report_`` (:func:`detcal.calibration.report.make_report`)
        where an optimiser ran or a parameter can stop at a bound; a
        :class:`~detcal.calibration.report.CalibrationFitWarning` names what went wrong.
        """
        if not isinstance(getattr(self, "fit_report_", None), dict):
            self.fit_report_ = make_report()
        warn_report(type(self).__name__, self.fit_report_, stacklevel=4)

    def describe(self) -> dict[str, Any]:
        """Provenance: ``{"method": class name, "params": {...}, "fitted": {...} or None}``.

        Learned arrays are converted to lists (arrays of more than 10,000
        values are summarised by shape, min and max).
        """
        return {
            "method": type(self).__name__,
            "params": _jsonable(self.get_params()),
            "fitted": _jsonable(self.fitted_attributes()) if self.is_fitted() else None,
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


# --------------------------------------------------------------------------- validation


def _first_bad(mask: np.ndarray) -> int:
    """Index of the first sample (row) where ``mask`` is true."""
    flat = mask.reshape(mask.shape[0], -1).any(axis=1) if mask.ndim > 1 else mask
    return int(np.flatnonzero(flat)[0])


def check_probabilities(p: Any, field: str = "p") -> np.ndarray:
    """``p [S]`` as float64; NaN/inf or values outside [0, 1] raise ``DetcalInputError``."""
    arr = np.asarray(p, dtype=np.float64)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise DetcalInputError(f"expected a 1-D array [S], got shape {arr.shape}", field=field)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(f"value {arr[i]} is not finite", record=i, field=field)
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(f"probability {arr[i]} is outside [0, 1]", record=i, field=field)
    return arr


def check_labels(y: Any, n: int, field: str = "y") -> np.ndarray:
    """``y [S]`` in {0, 1} as float64, of length ``n``."""
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise DetcalInputError(f"expected a 1-D array [S], got shape {arr.shape}", field=field)
    if len(arr) != n:
        raise DetcalInputError(f"length {len(arr)} does not match the {n} samples of p", field=field)
    arr = arr.astype(np.float64)
    bad = ~((arr == 0.0) | (arr == 1.0))
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(f"label {arr[i]} is not 0 or 1", record=i, field=field)
    return arr


def check_features(features: Any, n: int, field: str = "features") -> np.ndarray:
    """``features [S,F]`` (F >= 1) finite and in [0, 1], of length ``n``; a 1-D array is one feature."""
    arr = np.asarray(features, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise DetcalInputError(f"expected a 2-D array [S,F], got shape {arr.shape}", field=field)
    if arr.shape[0] != n:
        raise DetcalInputError(f"{arr.shape[0]} rows do not match the {n} samples of p", field=field)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError("value is not finite", record=i, field=field)
    bad = (arr < 0.0) | (arr > 1.0)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError(
            "relative box feature outside [0, 1] (clip in the data stage and report the count)", record=i, field=field
        )
    return arr


def check_regression_array(
    a: Any, field: str, shape: tuple[int, ...] | None = None, positive: bool = False
) -> np.ndarray:
    """A finite ``[S]`` or ``[S,K]`` float64 array; ``positive`` demands ``> 0``; ``shape`` must match."""
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim not in (1, 2):
        raise DetcalInputError(f"expected [S] or [S,K], got shape {arr.shape}", field=field)
    if shape is not None and arr.shape != shape:
        raise DetcalInputError(f"shape {arr.shape} does not match the shape {shape} of mu", field=field)
    bad = ~np.isfinite(arr)
    if bad.any():
        i = _first_bad(bad)
        raise DetcalInputError("value is not finite", record=i, field=field)
    if positive:
        bad = arr <= 0.0
        if bad.any():
            i = _first_bad(bad)
            raise DetcalInputError("standard deviation must be > 0", record=i, field=field)
    return arr


class ConfidenceCalibrator(Calibrator):
    """Base of confidence (precision) calibrators: ``p [S] -> p' [S]``.

    Subclasses implement ``_fit(p, y, features)`` and ``_transform(p,
    features)`` on validated float64 arrays (``features`` is ``None`` or
    ``[S,F]``). Set ``uses_features = True`` where the features are used.
    """

    uses_features: bool = False
    requires_features: bool = False

    def fit(self, p: Any, y: Any, features: Any = None) -> ConfidenceCalibrator:
        """Validate, learn the map on a calibration split, return ``self``.

        ``p [S]`` scores in [0, 1], ``y [S]`` 1 = true positive (matched), 0 =
        false positive, ``features [S,F]`` optional relative box features.
        """
        p_arr = check_probabilities(p)
        y_arr = check_labels(y, len(p_arr))
        f_arr = None if features is None else check_features(features, len(p_arr))
        if self.requires_features and f_arr is None:
            raise DetcalInputError(f"{type(self).__name__} needs the box features [S,F]", field="features")
        if len(p_arr) == 0:
            raise DetcalInputError("cannot fit on an empty calibration sample", field="p")
        self._start_fit()
        self._fit(p_arr, y_arr, f_arr if self.uses_features else None)
        self.n_features_ = 0 if (f_arr is None or not self.uses_features) else int(f_arr.shape[1])
        self.n_samples_fit_ = int(len(p_arr))
        self._finish_fit()
        return self

    def transform(self, p: Any, features: Any = None) -> np.ndarray:
        """Calibrated probabilities ``p' [S]`` (float64, in [0, 1])."""
        self._check_fitted()
        p_arr = check_probabilities(p)
        f_arr = None
        if self.uses_features and self.n_features_ > 0:
            if features is None:
                raise DetcalInputError(
                    f"{type(self).__name__} was fitted with {self.n_features_} box features; pass them to transform",
                    field="features",
                )
            f_arr = check_features(features, len(p_arr))
            if f_arr.shape[1] != self.n_features_:
                raise DetcalInputError(f"{f_arr.shape[1]} features given, {self.n_features_} at fit", field="features")
        elif features is not None:
            check_features(features, len(p_arr))
        if len(p_arr) == 0:
            return np.zeros(0, dtype=np.float64)
        return np.clip(self._transform(p_arr, f_arr), 0.0, 1.0)

    def predict(self, p: Any, features: Any = None) -> np.ndarray:
        """Alias of :meth:`transform` (scikit-learn naming)."""
        return self.transform(p, features)

    def fit_transform(self, p: Any, y: Any, features: Any = None) -> np.ndarray:
        """``fit(p, y, features).transform(p, features)`` (in-sample: label it so)."""
        return self.fit(p, y, features).transform(p, features)

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:  # pragma: no cover
        raise NotImplementedError

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError


class RegressionCalibrator(Calibrator):
    """Base of regression-uncertainty calibrators: ``(mu, sigma) -> (mu', sigma')`` per coordinate.

    Inputs ``mu, sigma, y`` are ``[S,K]`` (K coordinates, e.g. tx, ty, tw, th)
    or ``[S]`` (one coordinate); one model per coordinate is learned.
    Subclasses implement ``_fit(mu, sigma, y)`` and ``_transform(mu, sigma)``
    on validated ``[S,K]`` float64 arrays.
    """

    def _validate(self, mu: Any, sigma: Any, y: Any | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, bool]:
        mu_a = check_regression_array(mu, "mu")
        sg_a = check_regression_array(sigma, "sigma", shape=mu_a.shape, positive=True)
        y_a = None if y is None else check_regression_array(y, "y", shape=mu_a.shape)
        one_d = mu_a.ndim == 1
        if one_d:
            mu_a, sg_a = mu_a[:, None], sg_a[:, None]
            y_a = None if y_a is None else y_a[:, None]
        return mu_a, sg_a, y_a, one_d

    def fit(self, mu: Any, sigma: Any, y: Any) -> RegressionCalibrator:
        """Validate, learn one map per coordinate on a calibration split, return ``self``.

        ``mu [S,K]`` predicted means, ``sigma [S,K]`` predicted standard
        deviations (> 0), ``y [S,K]`` targets; ``[S]`` for one coordinate.
        """
        mu_a, sg_a, y_a, _ = self._validate(mu, sigma, y)
        if mu_a.shape[0] == 0:
            raise DetcalInputError("cannot fit on an empty calibration sample", field="mu")
        self._start_fit()
        assert y_a is not None
        self._fit(mu_a, sg_a, y_a)
        self.n_coords_ = int(mu_a.shape[1])
        self.n_samples_fit_ = int(mu_a.shape[0])
        self._finish_fit()
        return self

    def _prepare(self, mu: Any, sigma: Any) -> tuple[np.ndarray, np.ndarray, bool]:
        self._check_fitted()
        mu_a, sg_a, _, one_d = self._validate(mu, sigma, None)
        if mu_a.shape[1] != self.n_coords_:
            raise DetcalInputError(f"{mu_a.shape[1]} coordinates given, {self.n_coords_} at fit", field="mu")
        return mu_a, sg_a, one_d

    def transform(self, mu: Any, sigma: Any) -> tuple[np.ndarray, np.ndarray]:
        """Recalibrated ``(mu', sigma')``, each with the shape of ``mu``."""
        mu_a, sg_a, one_d = self._prepare(mu, sigma)
        mu_n, sg_n = self._transform(mu_a, sg_a)
        if one_d:
            return mu_n[:, 0], sg_n[:, 0]
        return mu_n, sg_n

    def predict(self, mu: Any, sigma: Any) -> tuple[np.ndarray, np.ndarray]:
        """Alias of :meth:`transform` (scikit-learn naming)."""
        return self.transform(mu, sigma)

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:  # pragma: no cover
        raise NotImplementedError

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # pragma: no cover
        raise NotImplementedError
