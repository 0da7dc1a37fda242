"""Position-dependent (multivariate) beta calibration (docs/calibration.md#position-beta), numpy/scipy only.

Kueppers, Kronenberger, Shantia & Haselhoff 2020 ("Multivariate confidence
calibration for object detection", CVPR workshops), the model of netcal's
``BetaCalibrationDependent``: the calibrated precision is the posterior of a
match given ``s = (p, f_1..f_F)`` in [0, 1]^K (K = 1 + F), with the
class-conditional densities ``f(s | m)`` the multivariate generalised beta
distribution of Libby & Novick (1982). With ``s*_k = s_k / (1 - s_k)`` the
log-likelihood ratio is

    z(s) = c + sum_k (a+_k - a-_k) ln s*_k
             + A- ln(1 + sum_k l-_k s*_k) - A+ ln(1 + sum_k l+_k s*_k),
    A+- = a+-_0 + sum_k a+-_k,        p' = sigmoid(z(s)),

with shape parameters ``a+-_0..K > 0`` and ratios ``l+-_k > 0`` (netcal's
``lambda_k = beta_k / beta_0``; its terms ``a_k ln lambda_k`` are constants
and live in ``c`` here, so every parameter is identifiable up to the
model's own symmetries). For K = 1 the map is monotone in neither direction
by construction: it can fit non-monotone miscalibration, and its extra
``A ln(1 + l s*)`` terms let the slope depend on the box position.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.optimize import minimize

from detcal.calibration.base import P_CLIP, ConfidenceCalibrator, check_features, check_probabilities, sigmoid
from detcal.calibration.report import make_report
from detcal.core.errors import DetcalInputError

__all__ = ["PositionBetaCalibration"]

POS_EPS: float = 1e-12
"""Lower bound of the positive parameters (netcal: ``greater_than(eps)``): a model constraint."""

STALL_ITER: int = 100
STALL_TOL: float = 1e-5
"""The fit stops when ``STALL_ITER`` iterations lowered the mean NLL by less than ``STALL_TOL``."""

POS_MAX: float = 1e12
"""Upper bound of the positive parameters: a search box (a parameter there is reported in ``at_bound``)."""


class PositionBetaCalibration(ConfidenceCalibrator):
    """Multivariate beta calibration over (confidence, cx, cy, w, h) (module docstring).

    Fit: maximum likelihood (mean Bernoulli NLL) by L-BFGS-B with the exact
    gradient over ``c`` and the logarithms of the positive parameters
    (much better conditioned than the parameters themselves), each positive
    parameter kept in ``[1e-12, 1e12]``: a parameter at 1e-12 meets the
    model's constraint (``fit_report_["active_constraints"]``), one at 1e12
    the search box (``fit_report_["at_bound"]``, with a warning). The
    likelihood is not convex and has long flat valleys: ``n_init`` starts
    (the first deterministic: ``a+_1 = 2`` for the confidence, every other
    shape and ratio 1, ``c = 0``; the rest drawn as netcal draws its start,
    uniform in [1, 2], from ``seed``), the best kept; the optimiser stops
    when 100 iterations lowered the mean NLL by less than 1e-5 in all (or by
    L-BFGS-B's own tests). Inputs are clipped to
    ``[1e-12, 1 - 1e-12]`` before ``s/(1-s)``.

    Learned: ``intercept_`` (c), ``alpha_pos_ [K+1]``, ``alpha_neg_ [K+1]``
    (index 0 is a_0), ``lambda_pos_ [K]``, ``lambda_neg_ [K]``, ``nll_``
    and ``fit_report_``. Needs the box features (``requires_features``).
    """

    uses_features = True
    requires_features = True

    def __init__(self, n_init: int = 1, max_iter: int = 3000, seed: int = 0) -> None:
        self.n_init = n_init
        self.max_iter = max_iter
        self.seed = seed

    # ------------------------------------------------------------------ model

    @staticmethod
    def _inputs(p: np.ndarray, features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(x = ln s* [S,K], s* [S,K])`` of ``s = (p, features)`` clipped to (0, 1)."""
        s = np.clip(np.column_stack([p, features]), P_CLIP, 1.0 - P_CLIP)
        x = np.log(s) - np.log1p(-s)
        return x, np.exp(x)

    @staticmethod
    def _unpack(theta: np.ndarray, k: int) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        c = float(theta[0])
        ap, an = theta[1 : k + 2], theta[k + 2 : 2 * k + 3]
        lp, ln_ = theta[2 * k + 3 : 3 * k + 3], theta[3 * k + 3 : 4 * k + 3]
        return c, ap, an, lp, ln_

    @classmethod
    def _logit(cls, theta: np.ndarray, x: np.ndarray, sx: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        k = x.shape[1]
        c, ap, an, lp, ln_ = cls._unpack(theta, k)
        ep, en = sx @ lp, sx @ ln_
        lep, len_ = np.log1p(ep), np.log1p(en)
        z = c + x @ (ap[1:] - an[1:]) + an.sum() * len_ - ap.sum() * lep
        return z, {"ep": ep, "en": en, "lep": lep, "len": len_, "ap_sum": ap.sum(), "an_sum": an.sum()}

    @classmethod
    def _objective(cls, theta: np.ndarray, x: np.ndarray, sx: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        z, t = cls._logit(theta, x, sx)
        n = len(y)
        nll = float(np.mean(np.logaddexp(0.0, z) - y * z))
        r = (sigmoid(z) - y) / n  # dL/dz
        sr, rlep, rlen = float(r.sum()), float(r @ t["lep"]), float(r @ t["len"])
        rx = r @ x
        g_ap = np.concatenate(([-rlep], rx - rlep))
        g_an = np.concatenate(([rlen], -rx + rlen))
        g_lp = -t["ap_sum"] * ((r / (1.0 + t["ep"])) @ sx)
        g_ln = t["an_sum"] * ((r / (1.0 + t["en"])) @ sx)
        return nll, np.concatenate(([sr], g_ap, g_an, g_lp, g_ln))

    # ------------------------------------------------------------------ fit / transform

    def _starts(self, k: int) -> list[np.ndarray]:
        first = np.concatenate(([0.0], np.ones(k + 1), np.ones(k + 1), np.ones(k), np.ones(k)))
        first[2] = 2.0  # a+_1: the confidence raises the match odds
        rng = np.random.default_rng(self.seed)
        rest = [np.concatenate(([0.0], rng.uniform(1.0, 2.0, 4 * k + 2))) for _ in range(int(self.n_init) - 1)]
        return [first] + rest

    def _fit(self, p: np.ndarray, y: np.ndarray, features: np.ndarray | None) -> None:
        if isinstance(self.n_init, bool) or int(self.n_init) != self.n_init or int(self.n_init) < 1:
            raise DetcalInputError(f"n_init must be an integer >= 1, got {self.n_init!r}", field="n_init")
        if int(self.max_iter) < 1:
            raise DetcalInputError(f"max_iter must be >= 1, got {self.max_iter!r}", field="max_iter")
        assert features is not None
        x, sx = self._inputs(p, features)
        k = x.shape[1]

        def objective(phi: np.ndarray) -> tuple[float, np.ndarray]:  # over (c, ln of the positives)
            th = np.concatenate((phi[:1], np.exp(phi[1:])))
            f, g = self._objective(th, x, sx, y)
            return f, np.concatenate((g[:1], g[1:] * th[1:]))

        lo, hi = np.log(POS_EPS), np.log(POS_MAX)
        bounds = [(None, None)] + [(lo, hi)] * (4 * k + 2)
        best, stalled_best = None, False
        for th0 in self._starts(k):
            phi0 = np.concatenate((th0[:1], np.log(th0[1:])))
            history: list[float] = []

            def stop_when_stalled(intermediate_result: Any) -> None:
                # the NLL has long flat valleys (parameters drifting to 0 or infinity change it by
                # < 1e-12 per step): stop once STALL_ITER iterations gained less than STALL_TOL.
                history.append(float(intermediate_result.fun))
                if len(history) > STALL_ITER and history[-STALL_ITER - 1] - history[-1] < STALL_TOL:
                    raise StopIteration

            with np.errstate(over="ignore", invalid="ignore"):
                res = minimize(
                    objective,
                    phi0,
                    jac=True,
                    method="L-BFGS-B",
                    bounds=bounds,
                    callback=stop_when_stalled,
                    options={"maxiter": int(self.max_iter), "ftol": 1e-12, "gtol": 1e-8},
                )
            stalled = len(history) > STALL_ITER and history[-STALL_ITER - 1] - history[-1] < STALL_TOL
            if np.isfinite(res.fun) and (best is None or res.fun < best.fun):
                best, stalled_best = res, stalled
        if best is None:
            raise DetcalInputError(
                "the likelihood is not finite at any start: check the scores and features", field="p"
            )
        self._store(best, stalled_best, k, lo, hi)

    def _store(self, best: Any, stalled_best: bool, k: int, lo: float, hi: float) -> None:
        """The fitted parameters of the best start, and the fit report (parameters at a bound, stalls)."""
        phi = np.asarray(best.x, dtype=np.float64)
        theta = np.concatenate((phi[:1], np.exp(phi[1:])))
        c, ap, an, lp, ln_ = self._unpack(theta, k)
        self.intercept_ = c
        self.alpha_pos_, self.alpha_neg_ = ap.copy(), an.copy()
        self.lambda_pos_, self.lambda_neg_ = lp.copy(), ln_.copy()
        self.nll_ = float(best.fun)
        names = (
            [f"alpha_pos[{i}]" for i in range(k + 1)]
            + [f"alpha_neg[{i}]" for i in range(k + 1)]
            + [f"lambda_pos[{i}]" for i in range(k)]
            + [f"lambda_neg[{i}]" for i in range(k)]
        )
        active = [
            {"parameter": nm, "value": float(v), "bound": POS_EPS}
            for nm, v, ph in zip(names, theta[1:], phi[1:])
            if ph <= lo + 1e-9
        ]
        at_bound = [
            {"parameter": nm, "value": float(v), "bound": POS_MAX}
            for nm, v, ph in zip(names, theta[1:], phi[1:])
            if ph >= hi - 1e-9
        ]
        msg = (
            f"NLL gained < {STALL_TOL:g} over {STALL_ITER} iterations (flat valley)"
            if stalled_best
            else str(best.message)
        )
        self.fit_report_ = make_report(
            converged=(bool(best.success) or stalled_best) and bool(np.all(np.isfinite(theta))),
            method="L-BFGS-B over (c, ln params)",
            n_iter=int(best.nit),
            message=f"{msg}; best of {int(self.n_init)} start(s)",
            at_bound=at_bound,
            active_constraints=active,
        )

    def _transform(self, p: np.ndarray, features: np.ndarray | None) -> np.ndarray:
        assert features is not None
        x, sx = self._inputs(p, features)
        if x.shape[1] != len(self.lambda_pos_):
            raise DetcalInputError(
                f"{x.shape[1] - 1} features given, {len(self.lambda_pos_) - 1} at fit", field="features"
            )
        theta = np.concatenate(
            ([self.intercept_], self.alpha_pos_, self.alpha_neg_, self.lambda_pos_, self.lambda_neg_)
        )
        return sigmoid(self._logit(theta, x, sx)[0])

    def logit(self, p: Any, features: Any) -> np.ndarray:
        """The fitted log-likelihood ratio ``z(s)`` (module docstring) of ``(p, features)``."""
        self._check_fitted()
        p_a = check_probabilities(p)
        theta = np.concatenate(
            ([self.intercept_], self.alpha_pos_, self.alpha_neg_, self.lambda_pos_, self.lambda_neg_)
        )
        return self._logit(theta, *self._inputs(p_a, check_features(features, len(p_a))))[0]
