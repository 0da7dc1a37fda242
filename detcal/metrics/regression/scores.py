"""Proper scores and interval metrics: Gaussian NLL, PICP, MPIW, pinball loss, CRPS, Kuleshov's calibration error."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.kernels import Workspace
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics._special import ndtr, ndtri
from detcal.metrics.regression._chunked import LEAF, contiguous, float_columns, pairwise_sum
from detcal.metrics.regression._common import (
    LOG_2PI,
    QUANTILE_LEVELS,
    check_choice,
    nan_result,
    validate,
    validate_levels,
)
from detcal.metrics.regression.qce import joint_nees, level_index


def gaussian_nll(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike) -> MetricResult:
    """Gaussian NLL = mean_t [0.5 log(2 pi sigma_t^2) + e_t^2 / (2 sigma_t^2)] (Levi et al. 2019, Eq. 10).

    One chunked pass (:mod:`._chunked`): no copy of strided column slices, the two means in
    numpy's pairwise order (the values of ``np.mean`` over the whole arrays, bit for bit).
    """
    m, s, t = float_columns(mu, sigma, y)
    n = len(s)
    params = {"n": int(n)}
    if n == 0:
        return nan_result("nll", "gaussian", params)
    ws = Workspace(min(n, LEAF))

    def leaf(lo: int, hi: int) -> np.ndarray:
        k = hi - lo
        sc = contiguous(ws, "s", s, lo, hi)  # log runs on a contiguous buffer, as in np.log(s)
        z = np.subtract(t[lo:hi], m[lo:hi], out=ws.get("z", np.float64, k))
        np.divide(z, sc, out=z)
        np.multiply(z, z, out=z)
        ls = np.log(sc, out=ws.get("log_s", np.float64, k))
        return np.array([np.add.reduce(ls), np.add.reduce(z)])

    with np.errstate(divide="ignore", invalid="ignore"):  # only a bad sigma can raise these; checked below
        sum_log_s, sum_z2 = pairwise_sum(n, leaf, LEAF)
    if not (np.isfinite(sum_log_s) and np.isfinite(sum_z2)):
        validate(mu, sigma, y)  # names the first bad sample (a finite overflow passes)
    value = 0.5 * LOG_2PI + float(sum_log_s / n) + 0.5 * float(sum_z2 / n)
    return MetricResult(name="nll", value=value, variant="gaussian", params=params)


def gaussian_nll_joint(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, cov: ArrayLike | None = None) -> MetricResult:
    """Joint Gaussian NLL = mean_t 0.5 [d log 2 pi + log det Sigma_t + e_t^T Sigma_t^-1 e_t].

    Sigma = ``cov`` (full) or diag(sigma^2) (then the sum of per-coordinate NLLs).
    """
    eps, logdet, _, d = joint_nees(mu, sigma, y, cov)
    params = {"n": int(len(eps)), "d": d, "covariance": "diagonal" if cov is None else "full"}
    if len(eps) == 0:
        return nan_result("nll", "gaussian_joint", params)
    nll = 0.5 * (d * LOG_2PI + logdet + eps)
    return MetricResult(name="nll", value=float(nll.mean()), variant="gaussian_joint", params=params)


def _abs_z_counts(absz: np.ndarray, z_thr: np.ndarray) -> np.ndarray:
    """#{i : absz_i <= z_thr_l} [L] for increasing thresholds, O(S) memory."""
    lvl = level_index(absz, z_thr)
    return np.cumsum(np.bincount(lvl, minlength=len(z_thr) + 1))[: len(z_thr)]


def picp(
    mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, tau: float = 0.95, levels: ArrayLike = QUANTILE_LEVELS
) -> MetricResult:
    """Prediction Interval Coverage Probability of the central interval mu +- z sigma, z = Phi^-1(0.5 + tau/2).

    PICP(tau) = mean 1(|e| <= z_tau sigma); value at ``tau``, table over ``levels``
    (with MPIW(tau) = mean 2 z_tau sigma).
    """
    m, s, t = validate(mu, sigma, y)
    lv = validate_levels(np.union1d(validate_levels(levels), [tau]))
    params = {"tau": float(tau), "n": int(len(s))}
    if len(s) == 0:
        return nan_result("picp", "central", params)
    z = ndtri(0.5 + lv / 2.0)
    cov = _abs_z_counts(np.abs(t - m) / s, z) / len(s)
    mpiw = 2.0 * z * s.mean()
    i = int(np.flatnonzero(lv == tau)[0])
    return MetricResult(
        name="picp",
        value=float(cov[i]),
        variant="central",
        params=params,
        table={"tau": lv, "picp": cov, "mpiw": mpiw},
    )


def mpiw(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, tau: float = 0.95) -> MetricResult:
    """Mean Prediction Interval Width of the central tau interval: MPIW = mean 2 Phi^-1(0.5 + tau/2) sigma."""
    _, s, _ = validate(mu, sigma, y)
    validate_levels([tau], "tau")
    params = {"tau": float(tau), "n": int(len(s))}
    if len(s) == 0:
        return nan_result("mpiw", "central", params)
    return MetricResult(
        name="mpiw", value=float(2.0 * ndtri(0.5 + tau / 2.0) * s.mean()), variant="central", params=params
    )


def pinball_loss(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, levels: ArrayLike = QUANTILE_LEVELS) -> MetricResult:
    """Pinball (quantile) loss, textbook form, averaged over levels and samples.

    q_tau = mu + sigma Phi^-1(tau); rho_tau(y - q) = max(tau (y - q), (tau - 1)(y - q));
    value = (1/L) sum_tau mean_t rho_tau; per-level means in the table
    (Koenker & Bassett 1978; not netcal's ``QuantileLoss``).
    """
    m, s, t = validate(mu, sigma, y)
    lv = validate_levels(levels)
    params = {"levels": lv.tolist(), "n": int(len(s))}
    if len(s) == 0:
        return nan_result("pinball", "textbook", params)
    per = np.empty(len(lv))
    for j, tau in enumerate(lv):  # loop over L levels keeps memory O(S)
        u = t - (m + s * ndtri(tau))
        per[j] = np.mean(np.maximum(tau * u, (tau - 1.0) * u))
    return MetricResult(
        name="pinball", value=float(per.mean()), variant="textbook", params=params, table={"tau": lv, "loss": per}
    )


def crps_gaussian(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike) -> MetricResult:
    """CRPS of N(mu, sigma^2), closed form (Gneiting et al. 2005; properscoring ``crps_gaussian``).

    z = e / sigma; CRPS = sigma [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]; value = mean.
    """
    m, s, t = validate(mu, sigma, y)
    params = {"n": int(len(s))}
    if len(s) == 0:
        return nan_result("crps", "gaussian", params)
    z = (t - m) / s
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
    crps = s * (z * (2.0 * ndtr(z) - 1.0) + 2.0 * pdf - 1.0 / np.sqrt(np.pi))
    return MetricResult(name="crps", value=float(crps.mean()), variant="gaussian", params=params)


def interval_calibration_error(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    m: int = 100,
    levels: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    reduction: str = "sum",
    kind: str = "one_sided",
) -> MetricResult:
    """Calibration error of Kuleshov et al. 2018: CE = sum_j w_j (p_j - P_hat(p_j))^2.

    ``one_sided`` (Kuleshov): p_t = Phi(e_t / sigma_t), P_hat(p) = share of p_t <= p.
    ``interval`` (uncertainty-toolbox): share of samples inside the central p
    interval, |2 Phi(e/sigma) - 1| <= p. Default levels np.linspace(0, 1, m)
    (uncertainty-toolbox, m = 100), w_j = 1; ``reduction`` ``sum`` (Kuleshov)
    or ``mean`` (over the m levels). Note: uncertainty-toolbox normalises
    (mu - y)/sigma; the one-sided curve here uses e = y - mu (docs/metrics.md).

    Definition: :func:`detcal.metrics.reference.interval_calibration_error`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    mu_, s, t = validate(mu, sigma, y)
    check_choice(reduction, ("sum", "mean"), "reduction")
    check_choice(kind, ("one_sided", "interval"), "kind")
    lv = np.linspace(0.0, 1.0, int(m)) if levels is None else np.asarray(levels, dtype=np.float64).reshape(-1)
    if len(lv) == 0 or np.any(np.diff(lv) <= 0) or lv[0] < 0 or lv[-1] > 1:
        raise DetcalInputError(f"levels must be strictly increasing in [0, 1], got {lv.tolist()}", field="levels")
    w = np.ones(len(lv)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != lv.shape:
        raise DetcalInputError(f"weights must have {len(lv)} entries, got {w.shape}", field="weights")
    params = {
        "m": int(len(lv)),
        "reduction": reduction,
        "kind": kind,
        "n": int(len(s)),
        "weighted": weights is not None,
    }
    if len(s) == 0:
        return nan_result("interval_ce", kind, params)
    z = (t - mu_) / s
    p_t = ndtr(z) if kind == "one_sided" else np.abs(2.0 * ndtr(z) - 1.0)
    p_hat = _abs_z_counts(p_t, lv) / len(s)
    sq = w * np.square(lv - p_hat)
    value = float(sq.sum() if reduction == "sum" else sq.mean())
    return MetricResult(name="interval_ce", value=value, variant=kind, params=params, table={"p": lv, "p_hat": p_hat})
