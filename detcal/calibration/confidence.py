"""Confidence (precision) recalibration (docs/calibration.md), numpy/scipy only.

Every calibrator maps detection scores ``p [S]`` in [0, 1] to calibrated
precision estimates ``p' [S]``; the target is ``y [S]`` = 1 for a matched
(true-positive) detection at the chosen IoU threshold, 0 otherwise.
Position-aware methods also take ``features [S,F]``: relative box features in
[0, 1], by default F = 4 (cx/W, cy/H, w/W, h/H).

``p`` is clipped to ``[1e-12, 1 - 1e-12]`` before ``logit`` and ``log``.

Methods
-------
TemperatureScaling   p' = sigmoid(logit(p) / T)                        Guo et al. 2017
PlattScaling         p' = sigmoid(a logit(p) + b)                      Platt 1999
PositionLogistic     p' = sigmoid(w . phi(logit p, cx, cy, w, h))      Kueppers et al. 2020
HistogramBinning     p' = frequency of y in the sample's bin/cell      Zadrozny & Elkan 2001
IsotonicCalibration  p' = R(p), R non-decreasing (PAV)                 Zadrozny & Elkan 2002
BBQ                  Bayesian average of equal-frequency binnings      Naeini et al. 2015
BetaCalibration      p' = sigmoid(a ln p - b ln(1 - p) + c), a,b >= 0  Kull et al. 2017

All fit by maximum likelihood (mean Bernoulli NLL) unless stated; the
logistic models use exact gradients and Hessians vectorised over samples:
damped Newton without constraints, scipy's L-BFGS-B with bounds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import gammaln

from detcal.calibration.base import ConfidenceCalibrator, clip_p, logit, sigmoid
from detcal.calibration.histogram import HistogramBinning
from detcal.calibration.isotonic import interp_thresholds, isotonic_thresholds, pav
from detcal.calibration.logistic import fit_logistic, fit_logistic_info
from detcal.calibration.report import make_report
from detcal.core.errors import DetcalInputError

# --------------------------------------------------------------------------- calibrators


def _logistic_report(info: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Fit report of a logistic fit (:func:`detcal.calibration.logistic.fit_logistic_info`)."""
    return make_report(
        converged=info["converged"], method=info["method"], n_iter=info["n_iter"], message=info["message"], **kw
    )


def _newton_polish(theta: float, z: np.ndarray, y: np.ndarray, bound: float, max_iter: int = 50) -> float:
    """The exact optimum near L-BFGS-B's answer ``theta = log T``: Newton's method on the inverse
    temperature ``a = 1/T``, where the NLL ``mean(softplus(a z) - y a z)`` is convex
    (``g = mean((sigmoid(a z) - y) z)``, ``h = mean(sigmoid(1 - sigmoid) z^2)``), until the step no
    longer moves ``a``. L-BFGS-B stops wherever its tolerances let it (the stopping point differs
    between scipy releases by about 1e-8 relative); the polished optimum is the same to a few units
    in the last place. Answers at the search bound are left as they are."""
    if not np.isfinite(theta) or abs(theta) >= bound * (1 - 1e-9):
        return theta
    a = float(np.exp(-theta))
    for _ in range(max_iter):
        s = sigmoid(a * z)
        g = float(np.mean((s - y) * z))
        h = float(np.mean(s * (1.0 - s) * z * z))
        if not (h > 0 and np.isfinite(g)):
            break
        nxt = a - g / h
        if not (nxt > 0) or abs(np.log(nxt)) >= bound:
            break
        if nxt == a or abs(nxt - a) <= 2 * np.finfo(float).eps * a:
            a = nxt
            break
        a = nxt
    return float(-np.log(a))


class TemperatureScaling(ConfidenceCalibrator):
    """Temperature scaling (Guo et al. 2017, "On calibration of modern neural networks").

    ``p' = sigmoid(logit(p) / T)``; ``T > 0`` minimises the mean Bernoulli NLL
    ``mean_i [softplus(u_i) - y_i u_i]``, ``u_i = logit(p_i) / T``, optimised
    over ``log T`` by L-BFGS-B (bounds ``T in [1e-4, 1e4]``) with the exact
    gradient ``d NLL / d log T = -mean_i (sigmoid(u_i) - y_i) u_i``.
    ``T > 1`` softens over-confident scores. Learned: ``temperature_``,
    ``nll_`` and ``fit_report_``. (netcal's ``TemperatureScaling.temperature``
    is the multiplier ``1/T``.)

    The search box ``|log T| <= max_log_temperature`` is artificial: when the
    likelihood keeps falling beyond it (scores that carry no or inverted
    ranking information, where the optimum is ``T -> inf``: every score
    squeezed towards 0.5), ``fit_report_["at_bound"]`` names ``temperature``
    and ``fit`` warns (:class:`~detcal.calibration.report.CalibrationFitWarning`):
    the learned map is a truncation, not a fit, and should not be used as one.
    """

    def __init__(self, max_log_temperature: float = float(np.log(1e4))) -> None:
        self.max_log_temperature = max_log_temperature

    @staticmethod
    def _objective(theta: np.ndarray, z: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        u = z * np.exp(-theta[0])
        nll = float(np.mean(np.logaddexp(0.0, u) - y * u))
        grad = -float(np.mean((sigmoid(u) - y) * u))
        return nll, np.array([grad])

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        z = logit(p)
        b = float(self.max_log_temperature)
        res = minimize(
            self._objective,
            np.zeros(1),
            args=(z, y),
            jac=True,
            method="L-BFGS-B",
            bounds=[(-b, b)],
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 1000},
        )
        theta = _newton_polish(float(res.x[0]), z, y, b)
        self.temperature_ = float(np.exp(theta))
        self.nll_ = float(self._objective(np.array([theta]), z, y)[0])
        grad = float(self._objective(np.array([theta]), z, y)[1][0])
        at_bound = []
        # at the box and the NLL still decreasing outwards: the optimum lies beyond the bound
        if abs(abs(theta) - b) <= 1e-9 * max(b, 1.0) and grad * np.sign(theta) < 0:
            at_bound.append(
                {"parameter": "temperature", "value": self.temperature_, "bound": float(np.exp(np.sign(theta) * b))}
            )
        lo, hi = sigmoid(np.array([z.min(), z.max()]) / self.temperature_)
        notes = []
        if hi - lo < 0.1:
            notes.append(
                f"T = {self.temperature_:.4g} squeezes the calibration scores into [{lo:.4f}, {hi:.4f}]: "
                "they carry almost no information about y at this IoU"
            )
        self.fit_report_ = make_report(
            converged=bool(res.success),
            method="L-BFGS-B over log T",
            n_iter=int(res.nit),
            message=str(res.message),
            at_bound=at_bound,
            notes=notes,
        )

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return sigmoid(logit(p) / self.temperature_)


class PlattScaling(ConfidenceCalibrator):
    """Platt / logistic scaling on the logit (Platt 1999).

    ``p' = sigmoid(a logit(p) + b)``, ``(a, b)`` maximum likelihood
    (unregularised logistic regression of ``y`` on ``logit p``, damped
    Newton). Learned: ``a_``, ``b_``.
    """

    def __init__(self) -> None:
        pass

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        z = logit(p)
        X = np.column_stack([z, np.ones_like(z)])
        w, info = fit_logistic_info(X, y, 0.0, w0=np.array([1.0, 0.0]))
        self.a_ = float(w[0])
        self.b_ = float(w[1])
        self.fit_report_ = _logistic_report(info)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return sigmoid(self.a_ * logit(p) + self.b_)


class PositionLogistic(ConfidenceCalibrator):
    """Position-dependent logistic calibration (Kueppers et al. 2020, "Multivariate
    confidence calibration for object detection", logistic variant).

    ``p' = sigmoid(w . phi)`` with ``z = logit p`` and centred features
    ``g = f - 0.5`` (f = cx, cy, w, h relative, in [0, 1]):

    * ``degree="linear"``:    ``phi = (1, z, g_1..g_F)``;
    * ``degree="quadratic"`` (default): ``phi = (1, z, g, g^2, g_i g_j (i<j),
      z g, z g^2)``. The ``z g^2`` terms let the logit *slope* grow towards
      both image borders (a temperature that depends on position), which a
      linear model cannot express; ``g^2`` and ``g_i g_j`` shift the bias.

    Fit: mean Bernoulli NLL ``+ 0.5 l2 ||w_pos||^2`` where ``w_pos`` are all
    weights except the intercept and the coefficient of ``z`` (unpenalised),
    by damped Newton. Learned: ``coef_ [P]`` and ``columns_`` (the
    names of the columns of phi).
    """

    uses_features = True
    requires_features = True

    def __init__(self, degree: str = "quadratic", l2: float = 1e-4) -> None:
        self.degree = degree
        self.l2 = l2

    def _design(self, p: np.ndarray, f: np.ndarray) -> tuple[np.ndarray, list[str]]:
        z = logit(p)
        g = f - 0.5
        n_f = g.shape[1]
        cols = [np.ones_like(z), z]
        names = ["1", "z"] + [f"g{i}" for i in range(n_f)]
        cols += [g[:, i] for i in range(n_f)]
        if self.degree == "quadratic":
            cols += [g[:, i] ** 2 for i in range(n_f)]
            names += [f"g{i}^2" for i in range(n_f)]
            for i in range(n_f):
                for j in range(i + 1, n_f):
                    cols.append(g[:, i] * g[:, j])
                    names.append(f"g{i}*g{j}")
            cols += [z * g[:, i] for i in range(n_f)]
            names += [f"z*g{i}" for i in range(n_f)]
            cols += [z * g[:, i] ** 2 for i in range(n_f)]
            names += [f"z*g{i}^2" for i in range(n_f)]
        return np.column_stack(cols), names

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if self.degree not in ("linear", "quadratic"):
            raise DetcalInputError(f"degree must be 'linear' or 'quadratic', got {self.degree!r}", field="degree")
        if not self.l2 >= 0:
            raise DetcalInputError(f"l2 must be >= 0, got {self.l2}", field="l2")
        assert features is not None
        X, names = self._design(p, features)
        pen = np.full(X.shape[1], float(self.l2))
        pen[:2] = 0.0
        w0 = np.zeros(X.shape[1])
        w0[1] = 1.0
        self.coef_, info = fit_logistic_info(X, y, pen, w0=w0)
        self.columns_ = names
        self.fit_report_ = _logistic_report(info)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        assert features is not None
        X, _ = self._design(p, features)
        return sigmoid(X @ self.coef_)


class IsotonicCalibration(ConfidenceCalibrator):
    """Isotonic regression calibration (Zadrozny & Elkan 2002).

    ``R = argmin_{R non-decreasing} sum_i (y_i - R(p_i))^2`` by pool adjacent
    violators (:func:`scipy.optimize.isotonic_regression`). Ties in p are
    merged first; the fit is stored as thresholds ``x_thresholds_ [M]``,
    ``y_thresholds_ [M]`` (first and last point of each constant block), and
    ``p' = np.interp(clip(p, x_0, x_M), x_thresholds_, y_thresholds_)``
    (linear between blocks, constant outside: scikit-learn's
    ``IsotonicRegression(out_of_bounds="clip")``). Between two thresholds a
    subnormal distance apart, where ``np.interp``'s slope overflows, the
    value is interpolated by position instead
    (:func:`detcal.calibration.isotonic.interp_thresholds`), so it stays
    between the two threshold values.
    """

    def __init__(self) -> None:
        pass

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        self.x_thresholds_, self.y_thresholds_ = isotonic_thresholds(p, y)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return interp_thresholds(p, self.x_thresholds_, self.y_thresholds_)


class BBQ(ConfidenceCalibrator):
    """Bayesian Binning into Quantiles (Naeini, Cooper & Hauskrecht, AAAI 2015).

    Models: equal-frequency binnings M_B of the calibration scores (sort p,
    split into B consecutive groups, first ``S mod B`` one larger; the edge
    between two groups is the midpoint of the adjacent scores; outer edges 0
    and 1; bins half-open ``[a, b)``), for every
    ``B in [max(1, floor(S^(1/3) / C)), min(S, ceil(C S^(1/3)))]`` (paper:
    C = 10).

    Score (BDeu-style marginal likelihood, uniform prior P(M)):

        P(D | M) = prod_b  Gamma(N'/B) / Gamma(N_b + N'/B)
                           * Gamma(m_b + alpha_b) / Gamma(alpha_b)
                           * Gamma(n_b + beta_b)  / Gamma(beta_b),

    ``N_b`` samples in bin b, ``m_b`` positives, ``n_b`` negatives, prior
    ``Beta(alpha_b, beta_b)`` with ``alpha_b = N'/B * p_b``,
    ``beta_b = N'/B * (1 - p_b)``, ``p_b`` the midpoint of bin b's interval,
    and equivalent sample size ``N' = prior_strength`` (paper: 2).

    Prediction: ``p' = sum_M w_M P(y=1 | p, M)`` with ``w_M = P(D|M) /
    sum P(D|M')`` (softmax of the log scores) and, within a bin, the
    posterior mean ``(m_b + alpha_b) / (N_b + N'/B)``. Models whose weight
    is below ``weight_floor`` times the largest are dropped (weights
    renormalised; changes p' by less than ``n_models * weight_floor``). The
    averaged map is piecewise constant on the union of the kept models'
    edges and is stored as ``edges_ [U]`` and ``values_ [U+1]``.
    Learned also: ``n_bins_ [M]``, ``log_scores_ [M]``, ``weights_ [M]``.
    """

    def __init__(self, prior_strength: float = 2.0, c: float = 10.0, weight_floor: float = 1e-12) -> None:
        self.prior_strength = prior_strength
        self.c = c
        self.weight_floor = weight_floor

    def bin_range(self, n_samples: int) -> tuple[int, int]:
        """``(B_min, B_max)`` for ``n_samples`` calibration samples."""
        root = n_samples ** (1.0 / 3.0)
        lo = max(1, int(np.floor(root / self.c)))
        hi = max(lo, min(n_samples, int(np.ceil(root * self.c))))
        return lo, hi

    @staticmethod
    def _edges(sp: np.ndarray, n_bins: int) -> np.ndarray:
        """Inner edges [B-1] of the equal-frequency binning of sorted scores ``sp``."""
        q, r = divmod(len(sp), n_bins)
        sizes = np.full(n_bins, q, dtype=np.int64)
        sizes[:r] += 1
        ends = np.cumsum(sizes)[:-1]
        return 0.5 * (sp[ends - 1] + sp[ends])

    def _model(self, sp: np.ndarray, cum_y: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, float]:
        """Inner edges, per-bin posterior means and the log marginal likelihood of one binning."""
        inner = self._edges(sp, n_bins)
        idx = np.concatenate(([0], np.searchsorted(sp, inner, side="left"), [len(sp)]))
        n_b = np.diff(idx).astype(np.float64)
        m_b = np.diff(cum_y[idx])
        full = np.concatenate(([0.0], inner, [1.0]))
        mid = 0.5 * (full[:-1] + full[1:])
        a0 = self.prior_strength / n_bins
        alpha = a0 * mid
        beta = a0 * (1.0 - mid)
        log_ml = float(
            np.sum(
                gammaln(a0)
                - gammaln(n_b + a0)
                + gammaln(m_b + alpha)
                - gammaln(alpha)
                + gammaln(n_b - m_b + beta)
                - gammaln(beta)
            )
        )
        return inner, (m_b + alpha) / (n_b + a0), log_ml

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if not self.prior_strength > 0 or not self.c > 0:
            raise DetcalInputError("prior_strength and c must be > 0", field="prior_strength")
        order = np.argsort(p, kind="stable")
        sp = p[order]
        cum_y = np.concatenate(([0.0], np.cumsum(y[order])))
        lo, hi = self.bin_range(len(p))
        n_bins = np.arange(lo, hi + 1)
        models = [self._model(sp, cum_y, int(b)) for b in n_bins]
        log_scores = np.array([m[2] for m in models])
        w = np.exp(log_scores - log_scores.max())
        keep = w >= self.weight_floor
        w = np.where(keep, w, 0.0)
        w /= w.sum()
        # Union of the kept models' edges; the average map is constant between them.
        edges = np.unique(np.concatenate([models[i][0] for i in np.flatnonzero(keep)] + [np.zeros(0)]))
        reps = np.concatenate(([0.0], edges))  # left end of each union interval: a point inside it
        values = np.zeros(len(reps))
        for i in np.flatnonzero(keep):
            inner, vals, _ = models[i]
            values += w[i] * vals[np.searchsorted(inner, reps, side="right")]
        self.n_bins_ = n_bins
        self.log_scores_ = log_scores
        self.weights_ = w
        self.edges_ = edges
        self.values_ = values

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        return self.values_[np.searchsorted(self.edges_, p, side="right")]


class BetaCalibration(ConfidenceCalibrator):
    """Beta calibration (Kull, Silva Filho & Flach, AISTATS 2017).

    ``p' = sigmoid(a ln p - b ln(1 - p) + c)``, the logistic regression of y
    on ``(ln p, -ln(1 - p))`` with the constraint ``a, b >= 0`` (which keeps
    the map monotone), fitted by bound-constrained L-BFGS-B on the mean NLL
    (the paper refits without a negative coefficient; the constrained
    optimum is the same). ``parameters``:

    * ``"abm"`` (default): the full three-parameter family (the paper's
      ``a, b, m`` with ``c = b ln(1 - m) - a ln m``; we store ``c``);
    * ``"am"``: ``a = b``, i.e. ``sigmoid(a logit p + c)`` with ``a >= 0``.

    Learned: ``a_``, ``b_``, ``c_``.
    """

    def __init__(self, parameters: str = "abm") -> None:
        self.parameters = parameters

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        q = clip_p(p)
        if self.parameters == "abm":
            X = np.column_stack([np.log(q), -np.log1p(-q), np.ones_like(q)])
            w, info = fit_logistic_info(
                X, y, 0.0, bounds=[(0.0, None), (0.0, None), (None, None)], w0=np.array([1.0, 1.0, 0.0])
            )
            a, b, c = w
        elif self.parameters == "am":
            X = np.column_stack([logit(q), np.ones_like(q)])
            w, info = fit_logistic_info(X, y, 0.0, bounds=[(0.0, None), (None, None)], w0=np.array([1.0, 0.0]))
            a, b, c = w[0], w[0], w[1]
        else:
            raise DetcalInputError(f"parameters must be 'abm' or 'am', got {self.parameters!r}", field="parameters")
        self.a_, self.b_, self.c_ = float(a), float(b), float(c)
        names = ("a", "b") if self.parameters == "abm" else ("a",)
        active = [{"parameter": n, "value": v, "bound": 0.0} for n, v in zip(names, (self.a_, self.b_)) if v <= 0.0]
        self.fit_report_ = _logistic_report(info, active_constraints=active)

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        q = clip_p(p)
        return sigmoid(self.a_ * np.log(q) - self.b_ * np.log1p(-q) + self.c_)


__all__ = [
    "BBQ",
    "BetaCalibration",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "PositionLogistic",
    "TemperatureScaling",
    "fit_logistic",
    "isotonic_thresholds",
    "pav",
]
