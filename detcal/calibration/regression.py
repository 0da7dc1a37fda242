"""Regression-uncertainty recalibration (docs/calibration.md), numpy/scipy only.

Inputs per coordinate k (tx, ty, tw, th, or pixels): predicted mean ``mu``,
predicted standard deviation ``sigma > 0``, target ``y``; arrays ``[S,K]`` or
``[S]``. Residual ``e = y - mu``, standardised residual ``r = e / sigma``.
Every calibrator returns ``(mu', sigma')`` of the input shape; one model per
coordinate is learned.

Methods
-------
StdScaling            sigma' = s_k sigma, s_k = sqrt(mean r^2) (closed form)   Levi et al. 2019
StdScalingSGD         the same s_k by momentum SGD on the Gaussian NLL        Levi et al. 2019
KuleshovIsotonic      recalibrated CDF R(Phi(r)), R isotonic                  Kuleshov et al. 2018
SigmaHistogramBinning sigma' = sigma * RMSE_b / RMV_b in sigma's bin b         (histogram binning of sigma)
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtr, ndtri

from detcal.binning.edges import equal_count_bins
from detcal.calibration.base import P_CLIP, RegressionCalibrator
from detcal.calibration.isotonic import interp_thresholds, isotonic_thresholds
from detcal.calibration.report import make_report
from detcal.core.errors import DetcalInputError

_SQRT_2PI = float(np.sqrt(2.0 * np.pi))


def _phi(z: np.ndarray) -> np.ndarray:
    """Standard normal density, 0 at +-inf."""
    z = np.asarray(z, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.exp(-0.5 * z * z) / _SQRT_2PI
    return np.where(np.isfinite(z), out, 0.0)


def std_scaling_factor(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Closed-form std-scaling factor ``s [K] = sqrt(mean_t (y_t - mu_t)^2 / sigma_t^2)`` over axis 0.

    The Gaussian NLL of ``N(mu, (s sigma)^2)`` is, up to constants,
    ``L(s) = T log s + sum_t r_t^2 / (2 s^2)``; ``dL/ds = T/s - sum r^2 / s^3 = 0``
    gives the unique minimiser above. Levi et al. 2019, Eq. 12 writes the
    objective as ``T/2 log s - sum r^2/(2 s^2)``: the minus sign is a slip (that
    expression has no minimum), and ``T/2 log s`` would be ``T log s`` (or
    ``T/2 log s^2``). netcal's ``VarianceScaling`` uses this closed form.
    """
    r2 = ((y - mu) / sigma) ** 2
    scale = np.sqrt(np.mean(r2, axis=0))
    if np.any(scale == 0):
        k = int(np.flatnonzero(scale == 0)[0])
        raise DetcalInputError(f"every residual of coordinate {k} is 0: no scale > 0 minimises the NLL", field="y")
    return scale


class StdScaling(RegressionCalibrator):
    """STD scaling (Levi et al. 2019, "Evaluating and calibrating uncertainty
    prediction in regression tasks", section 4), closed form.

    ``mu' = mu``, ``sigma'_k = s_k sigma_k`` with ``s_k = sqrt(mean_t r_tk^2)``,
    the exact minimiser of the Gaussian NLL (see :func:`std_scaling_factor`).
    ``s > 1`` widens over-confident predictions. Learned: ``scale_ [K]``.
    """

    def __init__(self) -> None:
        pass

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:
        self.scale_ = std_scaling_factor(mu, sigma, y)

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mu.copy(), sigma * self.scale_


class StdScalingSGD(RegressionCalibrator):
    """STD scaling learned by momentum SGD on the Gaussian NLL, as Levi et al. 2019 trained it.

    Per coordinate, minimise ``L(s) = log s + mean_t r_t^2 / (2 s^2)`` (the
    mean Gaussian NLL up to constants) over ``theta = log s``
    (``parametrisation="log"``, default) or ``theta = s`` (``"scale"``; the
    iterate is projected to ``s >= 1e-12``; unstable when the optimum is
    far below ``sqrt(lr)``), from ``s = 1``, with heavy-ball momentum
    ``v <- momentum v - lr g``, ``theta <- theta + v`` (``lr = 1e-3``,
    ``momentum = 0.9``, the paper's values) and the minibatch gradient
    ``g`` clipped to ``[-grad_clip, grad_clip]`` (0 disables clipping).

    Minibatches of ``batch_size`` samples (seeded shuffle each epoch;
    ``None`` = full batch). The minibatch NLL depends on the data only
    through the batch mean of ``r^2``, which is precomputed with
    ``np.add.reduceat``, so a step costs O(K). Convergence: after each epoch
    the full-data stationarity ``|1 - mean r^2 / s^2|`` (= |dL/d log s|) is
    checked against ``tol``; when an epoch does not lower the full-data NLL
    (the SGD noise floor), the batch size doubles (up to the full batch,
    where the iteration is deterministic and converges to the closed form
    of :class:`StdScaling`); ``max_steps`` caps the number of steps.
    Learned: ``scale_ [K]``, ``n_steps_``, ``converged_``, ``stationarity_ [K]``,
    ``fit_report_`` (not converged: a warning).
    """

    def __init__(
        self,
        lr: float = 1e-3,
        momentum: float = 0.9,
        batch_size: int | None = 256,
        parametrisation: str = "log",
        grad_clip: float = 1.0,
        tol: float = 1e-9,
        max_steps: int = 200_000,
        seed: int = 0,
    ) -> None:
        self.lr = lr
        self.momentum = momentum
        self.batch_size = batch_size
        self.parametrisation = parametrisation
        self.grad_clip = grad_clip
        self.tol = tol
        self.max_steps = max_steps
        self.seed = seed

    def _check_params(self) -> None:
        if self.parametrisation not in ("log", "scale"):
            raise DetcalInputError(
                f"parametrisation must be 'log' or 'scale', got {self.parametrisation!r}", field="parametrisation"
            )
        if not self.lr > 0 or not 0 <= self.momentum < 1:
            raise DetcalInputError("need lr > 0 and 0 <= momentum < 1", field="lr")
        if self.batch_size is not None and int(self.batch_size) < 1:
            raise DetcalInputError(f"batch_size must be >= 1 or None, got {self.batch_size}", field="batch_size")

    def _grad(self, theta: np.ndarray, m: np.ndarray) -> np.ndarray:
        if self.parametrisation == "log":
            return 1.0 - m * np.exp(-2.0 * theta)
        return 1.0 / theta - m / theta**3

    def _scale(self, theta: np.ndarray) -> np.ndarray:
        return np.exp(theta) if self.parametrisation == "log" else theta.copy()

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:
        self._check_params()
        std_scaling_factor(mu, sigma, y)  # rejects coordinates whose residuals are all 0
        r2 = ((y - mu) / sigma) ** 2
        n, k = r2.shape
        m_full = r2.mean(axis=0)
        theta = np.zeros(k) if self.parametrisation == "log" else np.ones(k)
        v = np.zeros(k)
        lr, mom, clip = float(self.lr), float(self.momentum), float(self.grad_clip)
        batch = n if self.batch_size is None else min(int(self.batch_size), n)
        rng = np.random.default_rng(self.seed)

        def full_loss(th: np.ndarray) -> np.ndarray:
            s = self._scale(th)
            return np.log(s) + m_full / (2.0 * s * s)

        best = full_loss(theta)
        steps = 0
        converged = False
        while steps < self.max_steps:
            if batch >= n:
                means = m_full[None, :]
            else:
                perm = rng.permutation(n)
                starts = np.arange(0, n, batch)
                sums = np.add.reduceat(r2[perm], starts, axis=0)
                means = sums / np.diff(np.append(starts, n))[:, None]
            for m_b in means[: self.max_steps - steps]:
                g = self._grad(theta, m_b)
                if clip > 0:
                    g = np.clip(g, -clip, clip)
                v = mom * v - lr * g
                theta = theta + v
                if self.parametrisation == "scale":
                    theta = np.maximum(theta, 1e-12)
                steps += 1
            stationarity = np.abs(1.0 - m_full / self._scale(theta) ** 2)
            if np.all(stationarity < self.tol):
                converged = True
                break
            cur = full_loss(theta)
            if batch < n and not np.all(cur < best):
                batch = min(2 * batch, n)
            best = np.minimum(best, cur)
        self.scale_ = self._scale(theta)
        self.n_steps_ = int(steps)
        self.converged_ = bool(converged)
        self.stationarity_ = np.abs(1.0 - m_full / self.scale_**2)
        msg = (
            f"full-data stationarity |1 - mean r^2 / s^2| below tol={self.tol} after {steps} steps"
            if converged
            else f"max_steps={self.max_steps} reached with stationarity {float(self.stationarity_.max()):.3g} "
            f"> tol={self.tol}; the closed form StdScaling gives the exact minimiser"
        )
        self.fit_report_ = make_report(converged=converged, method="momentum SGD", n_iter=steps, message=msg)

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mu.copy(), sigma * self.scale_


class KuleshovIsotonic(RegressionCalibrator):
    """Isotonic recalibration of Kuleshov, Fenner & Ermon 2018 ("Accurate
    uncertainties for deep learning using calibrated regression"), for Gaussian
    forecasts ``F_t = N(mu_t, sigma_t^2)``.

    Fit, per coordinate: ``p_t = Phi(r_t)`` (clipped to ``[1e-12, 1 - 1e-12]``),
    ``P_hat(p) = share of p_t <= p``, and the isotonic regression ``R`` of
    ``P_hat(p_t)`` on ``p_t`` (:func:`isotonic_thresholds`, linear between
    thresholds), extended with ``R(0) = 0`` and ``R(1) = 1`` so that the
    recalibrated CDF ``G_t(y) = R(F_t(y)) = R(Phi((y - mu_t) / sigma_t))`` is a
    proper distribution (no atom at +-inf). Learned per coordinate:
    ``x_thresholds_ [K]`` and ``y_thresholds_ [K]`` (lists of arrays, with the
    anchors), ``mean_z_ [K]``, ``std_z_ [K]``.

    Mean and standard deviation of the new distribution: in standardised
    units ``z = (y - mu) / sigma`` the CDF ``R(Phi(z))`` is the same function
    for every sample, so ``mu' = mu + sigma m_z`` and ``sigma' = sigma s_z``
    with ``m_z = E[Z]``, ``s_z^2 = E[Z^2] - m_z^2`` under that CDF. Levi et al.
    2019 (Eq. 13) integrate ``sigma^2 = 2 int_0^inf u (1 - F(u)) du - (int_0^inf
    (1 - F(u)) du)^2`` by Romberg, which holds only for non-negative
    variables; over the whole line ``E[Z] = int_0^inf (1 - G) - int_-inf^0 G``
    and ``E[Z^2] = 2 int_0^inf u (1 - G) du + 2 int_-inf^0 |u| G du``. Here the
    integrals are exact: ``R`` is linear in ``p`` on each segment
    ``[p_j, p_j+1]`` with slope ``c_j``, so the density is ``c_j phi(z)`` on
    ``[z_j, z_j+1]``, ``z_j = Phi^-1(p_j)``, and
    ``E[Z] = sum_j c_j (phi(z_j) - phi(z_j+1))``,
    ``E[Z^2] = sum_j c_j [(p_j+1 - p_j) - (z_j+1 phi(z_j+1) - z_j phi(z_j))]``.
    (The test checks them against ``scipy.integrate`` quadrature.)
    """

    def __init__(self) -> None:
        pass

    @staticmethod
    def _moments(xp: np.ndarray, yp: np.ndarray) -> tuple[float, float]:
        c = np.diff(yp) / np.diff(xp)
        z = ndtri(xp)
        phi = _phi(z)
        finite = np.isfinite(z)
        zphi = np.zeros_like(z)
        zphi[finite] = z[finite] * phi[finite]
        m1 = float(np.sum(c * (phi[:-1] - phi[1:])))
        m2 = float(np.sum(c * (np.diff(xp) - np.diff(zphi))))
        return m1, float(np.sqrt(max(m2 - m1 * m1, 0.0)))

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:
        n, k = mu.shape
        p_all = np.clip(ndtr((y - mu) / sigma), P_CLIP, 1.0 - P_CLIP)
        xs, ys, means, stds = [], [], [], []
        for j in range(k):
            p = p_all[:, j]
            p_hat = np.searchsorted(np.sort(p), p, side="right") / n
            xt, yt = isotonic_thresholds(p, p_hat)
            xp = np.concatenate(([0.0], xt, [1.0]))
            yp = np.concatenate(([0.0], yt, [1.0]))
            m, s = self._moments(xp, yp)
            xs.append(xp)
            ys.append(yp)
            means.append(m)
            stds.append(s)
        self.x_thresholds_ = xs
        self.y_thresholds_ = ys
        self.mean_z_ = np.array(means)
        self.std_z_ = np.array(stds)

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return mu + sigma * self.mean_z_, sigma * self.std_z_

    def cdf(self, y: Any, mu: Any, sigma: Any) -> np.ndarray:
        """Recalibrated CDF ``G_t(y) = R(Phi((y - mu) / sigma))``, shape of ``mu``."""
        mu_a, sg_a, one_d = self._prepare(mu, sigma)
        y_a = np.asarray(y, dtype=np.float64)
        y_a = y_a[:, None] if (one_d and y_a.ndim == 1) else y_a
        if y_a.shape != mu_a.shape:
            raise DetcalInputError(f"shape {y_a.shape} does not match mu {mu_a.shape}", field="y")
        p = ndtr((y_a - mu_a) / sg_a)
        out = np.column_stack(
            [interp_thresholds(p[:, j], self.x_thresholds_[j], self.y_thresholds_[j]) for j in range(self.n_coords_)]
        )
        return out[:, 0] if one_d else out

    def quantile(self, q: Any, mu: Any, sigma: Any) -> np.ndarray:
        """Quantile ``G_t^-1(q) = mu + sigma Phi^-1(R^-1(q))`` of the recalibrated distribution.

        ``R^-1`` is the generalised inverse ``inf {p : R(p) >= q}``. ``q`` is a
        level in (0, 1), or an array broadcastable to the shape of ``mu``
        (``[S]``, ``[S,K]`` or ``[S,1]``); the result has the broadcast shape.
        """
        mu_a, sg_a, one_d = self._prepare(mu, sigma)
        q_a = np.asarray(q, dtype=np.float64)
        if np.any(~np.isfinite(q_a)) or np.any((q_a <= 0) | (q_a >= 1)):
            raise DetcalInputError("quantile levels must lie in (0, 1)", field="q")
        if one_d and q_a.ndim == 1:
            q_a = q_a[:, None]
        q_b = np.broadcast_to(q_a, mu_a.shape)
        u = np.empty(mu_a.shape)
        for j in range(self.n_coords_):
            r_u, first = np.unique(self.y_thresholds_[j], return_index=True)
            u[:, j] = np.interp(q_b[:, j], r_u, self.x_thresholds_[j][first])
        out = mu_a + sg_a * ndtri(u)
        return out[:, 0] if one_d else out


class SigmaHistogramBinning(RegressionCalibrator):
    """Histogram binning of sigma (Levi et al. 2019, section 4, "more complex
    calibration methods"; the regression analogue of Zadrozny & Elkan 2001).

    Per coordinate, the calibration samples are split into ``bins``
    equal-count bins over sigma (:func:`detcal.binning.equal_count_bins`,
    the binning of ENCE); in bin b, ``RMV_b = sqrt(mean sigma^2)`` and
    ``RMSE_b = sqrt(mean e^2)``. Transform: ``mu' = mu``,
    ``sigma' = sigma * RMSE_b / RMV_b`` (so each calibration bin's RMV equals
    its RMSE after recalibration, ENCE = 0 in-sample, while sigma keeps its
    order inside a bin). New samples are assigned to a bin by the edges
    ``edges_`` = midpoints between the largest sigma of a bin and the
    smallest of the next (a sigma equal to an edge goes to the upper bin;
    values beyond the extremes go to the first/last bin). A bin whose RMSE is 0
    gets the factor 1e-12 (sigma' must stay > 0; reported in
    ``fit_report_["at_bound"]`` with a warning). Empty bins (fewer samples
    than bins) are dropped. Learned per coordinate (lists): ``edges_``,
    ``factor_``, ``rmv_``, ``rmse_``, ``count_``.
    """

    def __init__(self, bins: int = 10) -> None:
        self.bins = bins

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:
        if int(self.bins) < 1:
            raise DetcalInputError(f"bins must be >= 1, got {self.bins}", field="bins")
        nb = int(self.bins)
        e2 = (y - mu) ** 2
        edges, factors, rmvs, rmses, counts = [], [], [], [], []
        for j in range(mu.shape[1]):
            s = sigma[:, j]
            b = equal_count_bins(s, nb)
            cnt = np.bincount(b, minlength=nb)
            nonempty = cnt > 0
            cnt_f = np.maximum(cnt, 1).astype(np.float64)
            rmv = np.sqrt(np.bincount(b, weights=s * s, minlength=nb) / cnt_f)[nonempty]
            rmse = np.sqrt(np.bincount(b, weights=e2[:, j], minlength=nb) / cnt_f)[nonempty]
            smax = np.full(nb, -np.inf)
            smin = np.full(nb, np.inf)
            np.maximum.at(smax, b, s)
            np.minimum.at(smin, b, s)
            smax, smin = smax[nonempty], smin[nonempty]
            edges.append(0.5 * (smax[:-1] + smin[1:]))
            factors.append(np.maximum(rmse / rmv, 1e-12))
            rmvs.append(rmv)
            rmses.append(rmse)
            counts.append(cnt[nonempty].astype(np.int64))
        self.edges_ = edges
        self.factor_ = factors
        self.rmv_ = rmvs
        self.rmse_ = rmses
        self.count_ = counts
        floor = [
            {"parameter": f"factor[coord {j}][bin {b}]", "value": float(f[b]), "bound": 1e-12}
            for j, f in enumerate(factors)
            for b in np.flatnonzero(f <= 1e-12)
        ]
        self.fit_report_ = make_report(at_bound=floor, message="closed form (per-bin RMSE / RMV)")

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = np.empty_like(sigma)
        for j in range(sigma.shape[1]):
            idx = np.searchsorted(self.edges_[j], sigma[:, j], side="right")
            out[:, j] = sigma[:, j] * self.factor_[j][idx]
        return mu.copy(), out


__all__ = [
    "KuleshovIsotonic",
    "SigmaHistogramBinning",
    "StdScaling",
    "StdScalingSGD",
    "std_scaling_factor",
]
