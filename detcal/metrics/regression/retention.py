"""Uncertainty-ranking metrics: retention curves and R-AUC, RMSE/RMV, LL-FU, MWSE, F1-retention
(Malinin et al. 2021; Lakara et al. 2022).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.edges import rank_segments
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.regression._common import LOG_2PI, RETENTION_REJECT, check_choice, nan_result, validate


def _sorted_by_uncertainty(u: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
    """Values sorted by ascending uncertainty; within ties of u each value is its tie-group mean.

    Tie averaging makes every curve independent of the input order (Malinin
    et al. 2021 ``group_by_uncertainty``).
    """
    order = np.argsort(u, kind="stable")
    us = u[order]
    out = [v[order] for v in values]
    if len(us) > 1:
        new = np.empty(len(us), bool)
        new[0] = True
        np.not_equal(us[1:], us[:-1], out=new[1:])
        if not new.all():
            starts = np.flatnonzero(new)
            sizes = np.diff(np.append(starts, len(us)))
            out = [np.repeat(np.add.reduceat(v, starts) / sizes, sizes) for v in out]
    return out


def _prefix_sums(u: np.ndarray, k: np.ndarray, *values: np.ndarray) -> list[np.ndarray]:
    """Sums [len(k)] of each value over the k least uncertain samples, ties shared (no sort of the samples).

    The same tie rule as :func:`_sorted_by_uncertainty` (a tie group cut by k
    contributes its mean per member), computed from one selection at the
    distinct k (:func:`detcal.binning.rank_segments`): O(S log |k|).
    """
    n = len(u)
    ks = np.unique(k)
    seg = rank_segments(u, ks[ks < n])
    at = np.searchsorted(seg.cuts, k) - 1  # segment whose end is k
    return [np.cumsum(seg.sums(v))[at] for v in values]


def _n_keep(n: int, rejected: np.ndarray) -> np.ndarray:
    """Retained counts N - floor(f N) (>= 1 for f < 1), robust to float representation of f."""
    return n - np.floor(np.round(rejected * n, 9)).astype(np.int64)


def _uncertainty(s: np.ndarray, uncertainty: ArrayLike | None) -> np.ndarray:
    if uncertainty is None:
        return s
    u = np.asarray(uncertainty, dtype=np.float64).reshape(-1)
    if u.shape != s.shape:
        raise DetcalInputError(f"uncertainty must have {len(s)} entries, got {u.shape}", field="uncertainty")
    if not np.isfinite(u).all():
        i = int(np.flatnonzero(~np.isfinite(u))[0])
        raise DetcalInputError("uncertainty must be finite", record=f"sample {i}", field="uncertainty")
    return u


def _validate_rejected(rejected: ArrayLike) -> np.ndarray:
    f = np.asarray(rejected, dtype=np.float64).reshape(-1)
    if len(f) == 0 or f[0] != 0 or np.any(np.diff(f) <= 0) or f[-1] >= 1:
        raise DetcalInputError("rejected fractions must start at 0, increase strictly and stay < 1", field="rejected")
    return f


def retention_curve(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    error: str = "rmse",
    uncertainty: ArrayLike | None = None,
    rejected: ArrayLike = RETENTION_REJECT,
    variant: str = "retained",
) -> MetricResult:
    """Error-retention curve and its area R-AUC (Malinin 2019; Malinin et al. 2021; Lakara et al. 2022).

    Samples are sorted by uncertainty u (default sigma) and the most uncertain
    are rejected first. ``retained`` (default): at each rejected fraction f
    (0, 0.01, ..., 0.99) the error (``rmse``, ``mae`` or ``mse``) of the
    N - floor(f N) least uncertain samples; R-AUC = trapezoid area over the
    retained fraction 1 - f. ``shifts`` (Shifts benchmark, used by Lakara et
    al.): rejected samples count as error 0 and the sum is divided by N,
    C(j) = sum_{i <= N - j} err_(i) / N for j = 0..N (per-sample err = e^2 for
    ``mse``, |e| for ``mae``); R-AUC = mean_j C(j). Ties in u share their mean error.
    """
    m, s, t = validate(mu, sigma, y)
    check_choice(variant, ("retained", "shifts"), "variant")
    check_choice(error, ("rmse", "mae", "mse") if variant == "retained" else ("mse", "mae"), "error")
    u = _uncertainty(s, uncertainty)
    params: dict[str, Any] = {
        "error": error,
        "variant": variant,
        "n": int(len(s)),
        "uncertainty": "sigma" if uncertainty is None else "given",
    }
    if len(s) == 0:
        return nan_result("r_auc", variant, params)
    e = t - m
    err = np.abs(e) if error == "mae" else e * e
    n = len(s)
    if variant == "shifts":
        (es,) = _sorted_by_uncertainty(u, err)
        cs = np.cumsum(es)
        curve = np.zeros(n + 1)
        curve[:n] = cs[::-1] / n
        ret = 1.0 - np.arange(n + 1) / n
        return MetricResult(
            name="r_auc",
            value=float(curve.mean()),
            variant=variant,
            params=params,
            table={"retained_fraction": ret, "error": curve},
        )
    f = _validate_rejected(rejected)
    params["rejected"] = f.tolist()
    k = _n_keep(n, f)
    (prefix,) = _prefix_sums(u, k, err)
    curve = prefix / k
    if error == "rmse":
        curve = np.sqrt(curve)
    ret = 1.0 - f
    auc = float(np.trapezoid(curve[::-1], ret[::-1])) if len(f) > 1 else float("nan")
    return MetricResult(
        name="r_auc",
        value=auc,
        variant=variant,
        params=params,
        table={"rejected_fraction": f, "retained_fraction": ret, "n_retained": k, "error": curve},
    )


def rmse_rmv_ratio(
    mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, rejected: ArrayLike = RETENTION_REJECT
) -> MetricResult:
    """RMSE / RMV over the sample (Lakara et al. 2022, Eqs. 1-2); ideal 1.

    RMSE = sqrt(mean e^2), RMV = sqrt(mean sigma^2). The table holds the
    RMSE/RMV retention curve (R3 curve): the ratio on the least uncertain
    N - floor(f N) samples at each rejected fraction f (sorted by sigma).
    """
    m, s, t = validate(mu, sigma, y)
    f = _validate_rejected(rejected)
    params = {"n": int(len(s)), "rejected": f.tolist()}
    if len(s) == 0:
        return nan_result("rmse_rmv", "", params)
    e = t - m
    k = _n_keep(len(s), f)
    se, sv = _prefix_sums(s, k, e * e, s * s)
    ratio = np.sqrt(se / sv)
    return MetricResult(
        name="rmse_rmv",
        value=float(ratio[0]),
        params=params,
        table={"rejected_fraction": f, "retained_fraction": 1.0 - f, "ratio": ratio},
        extra={"rmse": float(np.sqrt(np.mean(e * e))), "rmv": float(np.sqrt(np.mean(s * s)))},
    )


LOG_BASES: tuple[str, ...] = ("e", "10")
"""Log bases of LL-FU: ``"e"`` (the paper's text, Eq. 6) and ``"10"`` (the authors' published evaluation code)."""


def ll_fu_scores(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, log_base: str = "e") -> np.ndarray:
    """Per-sample LL-Fisher uncertainty [S] (Lakara et al. 2022, Eq. 6).

    LL-FU = max(0, 0.5 log(2 pi sigma^2)) + e^2 / (2 sigma^2), with the natural
    log (``log_base="e"``, the paper's text) or log10 (``"10"``, as the
    authors' evaluation code computes it); only the first term changes.
    """
    check_choice(str(log_base), LOG_BASES, "log_base")
    m, s, t = validate(mu, sigma, y)
    first = 0.5 * (LOG_2PI + 2.0 * np.log(s))
    if str(log_base) == "10":
        first = first / np.log(10.0)
    return np.maximum(0.0, first) + 0.5 * np.square((t - m) / s)


def ll_fu(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, log_base: str = "e") -> MetricResult:
    """Mean LL-Fisher uncertainty (Lakara et al. 2022, Eq. 6); use :func:`ll_fu_scores` as ``uncertainty``
    in :func:`retention_curve` / :func:`f1_retention` for their R-AUC and F1 tables.

    ``log_base``: ``"e"`` (variant ``ln``, default) or ``"10"`` (variant ``log10``, the authors' code).
    """
    sc = ll_fu_scores(mu, sigma, y, log_base=log_base)
    variant = "ln" if str(log_base) == "e" else "log10"
    params = {"n": int(len(sc)), "log_base": str(log_base)}
    if len(sc) == 0:
        return nan_result("ll_fu", variant, params)
    return MetricResult(name="ll_fu", value=float(sc.mean()), variant=variant, params=params)


MWSE_NORMALISATIONS: tuple[str, ...] = ("retained", "total")
"""Normalisation of the MWSE retention curve: by the retained count, or by the total N (the authors' code)."""


def mwse(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    weight: str = "variance",
    rejected: ArrayLike = RETENTION_REJECT,
    normalise: str = "retained",
) -> MetricResult:
    """Mean Weighted Squared Error (Lakara et al. 2022, Eq. 7): MWSE = (1/N) sum e_i^2 u_i.

    u = sigma^2 (``variance``, default) or sigma (``std``). The table holds the
    MWSE retention curve over the least uncertain k = N - floor(f N) samples:
    divided by k (``normalise="retained"``, default: the mean over the
    retained samples) or by the total N (``"total"``, as the authors'
    evaluation code and the Shifts retention curves do: rejected samples count
    0). The value (f = 0) is the same under both. Ties of sigma share their
    mean (:class:`detcal.binning.RankSegments`).
    """
    m, s, t = validate(mu, sigma, y)
    check_choice(weight, ("variance", "std"), "weight")
    check_choice(normalise, MWSE_NORMALISATIONS, "normalise")
    f = _validate_rejected(rejected)
    params = {"weight": weight, "n": int(len(s)), "rejected": f.tolist(), "normalise": normalise}
    variant = weight if normalise == "retained" else f"{weight}+total"
    if len(s) == 0:
        return nan_result("mwse", variant, params)
    e = t - m
    w = e * e * (s * s if weight == "variance" else s)
    k = _n_keep(len(s), f)
    (prefix,) = _prefix_sums(s, k, w)
    curve = prefix / (k if normalise == "retained" else len(s))
    return MetricResult(
        name="mwse",
        value=float(w.mean()),
        variant=variant,
        params=params,
        table={"rejected_fraction": f, "retained_fraction": 1.0 - f, "mwse": curve},
    )


def f1_retention(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    threshold: float,
    error: str = "mse",
    uncertainty: ArrayLike | None = None,
    beta: float = 1.0,
) -> MetricResult:
    """F1-retention curve, F1-AUC and F1@95 (Malinin et al. 2021, Shifts; Lakara et al. 2022).

    A prediction is acceptable when its error (e^2 for ``mse``, |e| for
    ``mae``) is <= ``threshold``. Retaining the k least uncertain samples:
    precision = TP_k / k, recall = TP_k / TP_N, F_beta = (1 + beta^2) P R /
    (beta^2 P + R + 1e-10), and (P, R) = (1, 0) at k = 0. The curve lies at
    retention x_k = k / (N + 1), k = 0..N (Shifts' grid); F1-AUC = trapezoid
    area; F1@95 = F at k = floor(0.95 (N + 1)). Ties in u share their mean
    acceptability (Shifts breaks ties by reversed input order instead).
    """
    m, s, t = validate(mu, sigma, y)
    check_choice(error, ("mse", "mae"), "error")
    if not np.isfinite(threshold):
        raise DetcalInputError(f"threshold must be finite, got {threshold}", field="threshold")
    u = _uncertainty(s, uncertainty)
    params = {
        "threshold": float(threshold),
        "error": error,
        "beta": float(beta),
        "n": int(len(s)),
        "uncertainty": "sigma" if uncertainty is None else "given",
    }
    if len(s) == 0:
        return nan_result("f1_auc", "shifts", params)
    e = t - m
    err = np.abs(e) if error == "mae" else e * e
    (acc,) = _sorted_by_uncertainty(u, (err <= threshold).astype(np.float64))
    n = len(s)
    tp = np.concatenate([[0.0], np.cumsum(acc)])  # k = 0..N
    k = np.arange(n + 1, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        prec = np.where(k > 0, tp / np.maximum(k, 1), 1.0)
        rec = tp / tp[-1] if tp[-1] > 0 else np.zeros(n + 1)
    b2 = beta * beta
    f = (1.0 + b2) * prec * rec / (prec * b2 + rec + 1e-10)
    x = k / (n + 1)
    auc = float(np.trapezoid(f, x))
    f95 = float(f[int(0.95 * (n + 1))])
    return MetricResult(
        name="f1_auc",
        value=auc,
        variant="shifts",
        params=params,
        table={"retained_fraction": x, "f1": f, "precision": prec, "recall": rec},
        extra={"f1_at_95": f95, "acceptable_fraction": float(tp[-1] / n)},
    )
