"""Box-uncertainty (regression) calibration metrics, numpy/scipy only.

Definitions: ../shared/METRICS.md section 4. Every metric takes 1-D arrays
for ONE coordinate, ``mu [S]``, ``sigma [S]`` (> 0) and ``y [S]`` (residual
``e = y - mu``), and returns one :class:`detcal.types.MetricResult`. The joint
(d = K) variants take ``mu [S,K]``, ``sigma [S,K]``, ``y [S,K]`` and an
optional full covariance ``cov [S,K,K]``. :func:`per_coordinate` and
:func:`joint` apply them to a :class:`detcal.metrics.spaces.RegressionSample`;
:func:`regression_metrics` runs the default suite.

Axis letters: S samples, K coordinates, B bins, L quantile levels.

Mergeable statistics (torchmetrics style): binned metrics over *fixed*
equal-width edges are computed from per-bin sums (:class:`SigmaBinStats`,
:class:`CoverageStats`) that merge across chunks by addition; pass the same
``range_`` to every chunk. ``equal_count`` binning needs global ranks and is
computed one-shot only.

Memory: QCE never builds an [S, L] matrix; each sample's NEES is located
among the L sorted chi^2 thresholds once (a small-integer level index) and
per-bin coverage counts follow from a ``bincount`` + ``cumsum`` (O(S + B L)).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import chi2

from detcal.binning import equal_count_bins, equal_width_bins
from detcal.errors import DetcalInputError
from detcal.metrics.spaces import RegressionSample
from detcal.types import MetricResult

QUANTILE_LEVELS: np.ndarray = np.linspace(0.05, 0.95, 19)
"""Default quantile levels tau = 0.05, 0.10, ..., 0.95 (L = 19), as netcal's examples."""

RETENTION_REJECT: np.ndarray = np.arange(100) / 100.0
"""Default rejected fractions 0, 0.01, ..., 0.99 for retention curves."""

BINNINGS: tuple[str, ...] = ("equal_count", "equal_width")
POLICIES: tuple[str, ...] = ("drop", "netcal")
_LOG_2PI = float(np.log(2.0 * np.pi))


# --------------------------------------------------------------------------- validation


def _validate(mu: Any, sigma: Any, y: Any, *, ndim: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 arrays of equal shape; mu, y finite; sigma finite and > 0. Errors name sample and field."""
    out = []
    for name, a in (("mu", mu), ("sigma", sigma), ("y", y)):
        arr = np.asarray(a, dtype=np.float64)
        if arr.ndim != ndim:
            raise DetcalInputError(f"expected a {ndim}-D array, got shape {arr.shape}", field=name)
        out.append(arr)
    m, s, t = out
    if not (m.shape == s.shape == t.shape):
        raise DetcalInputError(f"shapes differ: mu {m.shape}, sigma {s.shape}, y {t.shape}", field="sigma")
    for name, arr, positive in (("mu", m, False), ("y", t, False), ("sigma", s, True)):
        if arr.size == 0:
            continue
        # fast path (two reductions, no temporaries): a NaN/inf makes the sum non-finite;
        # a finite overflow only sends us to the exact element-wise check below
        if positive:
            if arr.min() > 0 and np.isfinite(arr.max()):
                continue
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                if np.isfinite(arr.sum()):
                    continue
        ok = np.isfinite(arr)
        if positive:
            ok &= arr > 0
        if not ok.all():
            bad = ~ok if ndim == 1 else ~ok.all(axis=1)
            i = int(np.flatnonzero(bad)[0])
            need = "finite and > 0" if positive else "finite"
            raise DetcalInputError(f"{name} must be {need}, got {arr[i].tolist()}", record=f"sample {i}", field=name)
    return m, s, t


def _validate_levels(levels: Any, name: str = "levels") -> np.ndarray:
    lv = np.asarray(levels, dtype=np.float64).reshape(-1)
    if len(lv) == 0 or not np.all((lv > 0) & (lv < 1)) or np.any(np.diff(lv) <= 0):
        raise DetcalInputError(f"{name} must be strictly increasing values in (0, 1), got {lv.tolist()}", field=name)
    return lv


def _check_choice(value: str, choices: Sequence[str], name: str) -> None:
    if value not in choices:
        raise DetcalInputError(f"unknown {name} {value!r}; expected one of {tuple(choices)}", field=name)


def _check_bins(bins: int) -> int:
    if int(bins) != bins or bins < 1:
        raise DetcalInputError(f"bins must be a positive integer, got {bins!r}", field="bins")
    return int(bins)


def _nan_result(name: str, variant: str, params: dict[str, Any]) -> MetricResult:
    return MetricResult(name=name, value=float("nan"), variant=variant, params=params, extra={"note": "empty sample"})


# --------------------------------------------------------------------------- sigma bins


def _sigma_bins(values: np.ndarray, bins: int, binning: str, range_: tuple[float, float] | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Bin index [S] over ``values`` and the edges [B+1] (equal_width) or None (equal_count)."""
    if binning == "equal_count":
        if range_ is not None:
            raise DetcalInputError("range_ only applies to equal_width binning", field="range_")
        return equal_count_bins(values, bins), None
    lo, hi = (float(values.min()), float(values.max())) if range_ is None else (float(range_[0]), float(range_[1]))
    return equal_width_bins(values, bins, lo, hi), np.linspace(lo, hi, bins + 1)


@dataclass
class SigmaBinStats:
    """Per-bin sufficient statistics of ENCE/UCE; merge by addition.

    ``count [B]`` int64, ``sum_var [B]`` (sum sigma^2), ``sum_sq_err [B]``
    (sum e^2), ``edges [B+1]`` (equal_width) or ``None``
    (equal_count, not mergeable), ``over``: ``"sigma"`` (ENCE) or ``"variance"`` (UCE).
    """

    count: np.ndarray
    sum_var: np.ndarray
    sum_sq_err: np.ndarray
    edges: np.ndarray | None
    over: str
    binning: str

    def merge(self, other: "SigmaBinStats") -> "SigmaBinStats":
        """Sum of two chunks' statistics; both must share the same fixed edges."""
        if self.edges is None or other.edges is None:
            raise DetcalInputError("equal_count statistics need global ranks and cannot be merged", field="binning")
        if self.over != other.over or self.edges.shape != other.edges.shape or not np.array_equal(self.edges, other.edges):
            raise DetcalInputError("cannot merge statistics with different bin edges; pass the same range_", field="range_")
        return SigmaBinStats(
            self.count + other.count, self.sum_var + other.sum_var, self.sum_sq_err + other.sum_sq_err,
            self.edges, self.over, self.binning,
        )


def _bin_stats(
    var: np.ndarray, e2: np.ndarray, idx: np.ndarray, edges: np.ndarray | None, b: int, over: str,
    binning: str,
) -> SigmaBinStats:
    return SigmaBinStats(
        count=np.bincount(idx, minlength=b).astype(np.int64),
        sum_var=np.bincount(idx, weights=var, minlength=b),
        sum_sq_err=np.bincount(idx, weights=e2, minlength=b),
        edges=edges, over=over, binning=binning,
    )


def _sigma_bin_stats(
    m: np.ndarray, s: np.ndarray, t: np.ndarray, bins: int, binning: str, over: str, range_: tuple[float, float] | None,
) -> tuple[SigmaBinStats, np.ndarray]:
    """Validated-input core of :func:`sigma_bin_stats`; also returns the bin index [S]."""
    b = _check_bins(bins)
    _check_choice(binning, BINNINGS, "binning")
    _check_choice(over, ("sigma", "variance"), "over")
    var = s * s
    e2 = np.subtract(t, m)
    np.multiply(e2, e2, out=e2)
    if len(s) == 0:
        idx = np.zeros(0, np.int64)
        edges = None if binning == "equal_count" else np.full(b + 1, np.nan)
    else:
        idx, edges = _sigma_bins(s if over == "sigma" else var, b, binning, range_)
    return _bin_stats(var, e2, idx, edges, b, over, binning), idx


def sigma_bin_stats(
    mu: Any, sigma: Any, y: Any, *, bins: int = 10, binning: str = "equal_count", over: str = "sigma",
    range_: tuple[float, float] | None = None,
) -> SigmaBinStats:
    """Per-bin counts and sums of sigma^2 and e^2 over bins of ``sigma`` (or sigma^2 when ``over="variance"``).

    ``equal_width`` bins span ``range_`` (default [min, max] of the binned
    quantity, as netcal); values outside a given range are clipped into the
    end bins (netcal drops them). Merge chunks with
    :meth:`SigmaBinStats.merge` (same ``range_``).
    """
    m, s, t = _validate(mu, sigma, y)
    return _sigma_bin_stats(m, s, t, bins, binning, over, range_)[0]


def ence_from_stats(stats: SigmaBinStats) -> MetricResult:
    """ENCE = (1/B') sum_b |RMV(b) - RMSE(b)| / RMV(b) over the B' non-empty bins (Levi et al. 2019, Eq. 8).

    RMV(b) = sqrt(mean sigma^2), RMSE(b) = sqrt(mean e^2); table = reliability diagram.
    """
    n = stats.count
    with np.errstate(invalid="ignore", divide="ignore"):
        rmv = np.sqrt(stats.sum_var / n)
        rmse = np.sqrt(stats.sum_sq_err / n)
        nce = np.abs(rmv - rmse) / rmv
    occupied = n > 0
    value = float(nce[occupied].mean()) if occupied.any() else float("nan")
    table = {"rmv": rmv, "rmse": rmse, "count": n.copy()}
    if stats.edges is not None:
        table["edges"] = stats.edges.copy()
    return MetricResult(
        name="ence", value=value, variant=stats.binning,
        params={"bins": int(len(n)), "binning": stats.binning, "over": stats.over, "n": int(n.sum())},
        table=table, extra={"occupied_bins": int(occupied.sum())},
    )


def ence(
    mu: Any, sigma: Any, y: Any, *, bins: int = 10, binning: str = "equal_count",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Expected Normalized Calibration Error (Levi et al. 2019, Eq. 8).

    ENCE = (1/B') sum_{b non-empty} |RMV(b) - RMSE(b)| / RMV(b), bins over sigma:
    ``equal_count`` (default; sort by sigma, B consecutive groups, the first
    S mod B one larger) or ``equal_width`` over [min sigma, max sigma] (netcal
    1.4.0 ``ENCE``). The per-bin table (rmv, rmse, count) is the reliability
    diagram; ``sigma_lo``/``sigma_hi`` give each bin's sigma range. ENCE grows
    with B even for calibrated data: always report B.
    """
    m, s, t = _validate(mu, sigma, y)
    stats, idx = _sigma_bin_stats(m, s, t, bins, binning, "sigma", range_)
    res = ence_from_stats(stats)
    if len(s) and binning == "equal_count":
        lo = np.full(int(bins), np.nan)
        hi = np.full(int(bins), np.nan)
        np.fmin.at(lo, idx, s)
        np.fmax.at(hi, idx, s)
        res.table.update(sigma_lo=lo, sigma_hi=hi)
    return res


def coefficient_of_variation(mu: Any, sigma: Any, y: Any) -> MetricResult:
    """C_v = sqrt(sum_t (sigma_t - mean sigma)^2 / (T - 1)) / mean sigma (Levi et al. 2019, Eq. 9).

    Dispersion of the predicted uncertainties; NaN for T < 2.
    """
    _, s, _ = _validate(mu, sigma, y)
    params = {"n": int(len(s)), "ddof": 1}
    if len(s) < 2:
        return _nan_result("cv", "", params)
    return MetricResult(name="cv", value=float(np.std(s, ddof=1) / s.mean()), params=params)


def lence(
    mu: Any, sigma: Any, y: Any, *, bins: int = 10, binning: str = "equal_count",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Logarithmic ENCE (Lakara et al. 2022, Eq. 5): LENCE = ln|ENCE + 1/C_v|.

    ENCE with the given binning and C_v with T - 1 (see :func:`ence`,
    :func:`coefficient_of_variation`); both are recorded in ``extra``.
    """
    e = ence(mu, sigma, y, bins=bins, binning=binning, range_=range_)
    cv = coefficient_of_variation(mu, sigma, y)
    with np.errstate(divide="ignore"):
        value = float(np.log(np.abs(e.value + 1.0 / cv.value))) if cv.value != 0 else float("inf")
    return MetricResult(
        name="lence", value=value, variant=e.variant, params=dict(e.params),
        extra={"ence": e.value, "cv": cv.value},
    )


def uce_from_stats(stats: SigmaBinStats) -> MetricResult:
    """UCE = sum_b N_b/N |MSE(b) - MV(b)| from per-bin sums over variance bins."""
    n = stats.count
    total = int(n.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        mse = stats.sum_sq_err / n
        mv = stats.sum_var / n
    occupied = n > 0
    value = float(np.sum(np.abs(mse[occupied] - mv[occupied]) * n[occupied]) / total) if total else float("nan")
    table = {"mse": mse, "mv": mv, "count": n.copy()}
    if stats.edges is not None:
        table["edges"] = stats.edges.copy()
    return MetricResult(
        name="uce", value=value, variant=stats.binning,
        params={"bins": int(len(n)), "binning": stats.binning, "over": stats.over, "n": total}, table=table,
    )


def uce(
    mu: Any, sigma: Any, y: Any, *, bins: int = 10, binning: str = "equal_width",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Uncertainty Calibration Error (Laves et al. 2020; netcal 1.4.0 ``UCE``).

    UCE = sum_b N_b/N |MSE(b) - MV(b)| with B bins over the variance sigma^2,
    equal-width over [min sigma^2, max sigma^2] by default (netcal).
    """
    return uce_from_stats(sigma_bin_stats(mu, sigma, y, bins=bins, binning=binning, over="variance", range_=range_))


# --------------------------------------------------------------------------- QCE


@dataclass
class CoverageStats:
    """Per-bin quantile-coverage counts of QCE; merge by addition.

    ``count [B]`` int64, ``covered [B,L]`` int64 (samples with NEES <=
    chi2_d.ppf(tau_l)), ``levels [L]``, ``d`` degrees of freedom, ``edges``
    [B+1] of the sigma bins (None for equal_count or the marginal B = 1 case).
    """

    count: np.ndarray
    covered: np.ndarray
    levels: np.ndarray
    d: int
    edges: np.ndarray | None
    binning: str

    def merge(self, other: "CoverageStats") -> "CoverageStats":
        """Sum of two chunks' counts (same levels, d and fixed edges)."""
        if self.binning == "equal_count" or other.binning == "equal_count":
            raise DetcalInputError("equal_count statistics need global ranks and cannot be merged", field="binning")
        same_edges = (self.edges is None and other.edges is None) or (
            self.edges is not None and other.edges is not None and np.array_equal(self.edges, other.edges)
        )
        if not (same_edges and self.d == other.d and np.array_equal(self.levels, other.levels)):
            raise DetcalInputError("cannot merge coverage statistics with different edges, levels or d", field="range_")
        return CoverageStats(self.count + other.count, self.covered + other.covered, self.levels, self.d, self.edges, self.binning)


def _level_index(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """#{l : thresholds_l < values_i} [S] (= ``searchsorted(thresholds, values, "left")``).

    A linear scan over the L sorted thresholds with a small-integer
    accumulator: O(S) memory and, for L of a few tens, several times faster
    than a binary search on unsorted keys.
    """
    acc = np.zeros(len(values), dtype=np.uint8 if len(thresholds) < 255 else np.uint16)
    tmp = np.empty(len(values), dtype=bool)
    for th in thresholds:
        np.greater(values, th, out=tmp)
        acc += tmp
    return acc


def _coverage_counts(eps: np.ndarray, bin_idx: np.ndarray | None, n_bins: int, levels: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """count [B] and covered [B,L]: #{i in b : eps_i <= chi2_d.ppf(tau_l)}, in O(S + B L) memory.

    Each eps is located once among the sorted thresholds: lvl_i = #{l : thr_l < eps_i}
    (``bin_idx`` None: a single bin);
    sample i is covered at level l iff lvl_i <= l, so covered = cumsum of the
    (bin, lvl) histogram along lvl.
    """
    thr = chi2.ppf(levels, df=d)
    n_lv = len(levels)
    lvl = _level_index(eps, thr)
    flat = lvl if n_bins == 1 else bin_idx * (n_lv + 1) + lvl
    h = np.bincount(flat, minlength=n_bins * (n_lv + 1)).reshape(n_bins, n_lv + 1)
    covered = np.cumsum(h, axis=1)[:, :n_lv]
    return h.sum(axis=1).astype(np.int64), covered.astype(np.int64)


def coverage_stats(
    eps: Any, sigma_bin: Any | None, *, d: int = 1, levels: Any = QUANTILE_LEVELS, bins: int = 10,
    binning: str = "equal_width", range_: tuple[float, float] | None = None,
) -> CoverageStats:
    """Coverage counts of NEES values ``eps [S]`` per bin of ``sigma_bin [S]`` (None: one bin, marginal)."""
    lv = _validate_levels(levels)
    eps = np.asarray(eps, dtype=np.float64).reshape(-1)
    if sigma_bin is None:
        return CoverageStats(*_coverage_counts(eps, None, 1, lv, d), lv, d, None, "marginal")
    _check_choice(binning, BINNINGS, "binning")
    b = _check_bins(bins)
    sb = np.asarray(sigma_bin, dtype=np.float64).reshape(-1)
    if len(sb) == 0:
        return CoverageStats(np.zeros(b, np.int64), np.zeros((b, len(lv)), np.int64), lv, d, None, binning)
    idx, edges = _sigma_bins(sb, b, binning, range_)
    return CoverageStats(*_coverage_counts(eps, idx, b, lv, d), lv, d, edges, binning)


def m_qce_from_stats(stats: CoverageStats) -> MetricResult:
    """M-QCE = mean_tau |coverage(tau) - tau| from pooled coverage counts."""
    n = int(stats.count.sum())
    params = {"levels": stats.levels.tolist(), "d": stats.d, "n": n}
    if n == 0:
        return _nan_result("m_qce", "marginal", params)
    cov = stats.covered.sum(axis=0) / n
    return MetricResult(
        name="m_qce", value=float(np.mean(np.abs(cov - stats.levels))), variant="marginal", params=params,
        table={"tau": stats.levels.copy(), "coverage": cov},
    )


def c_qce_from_stats(stats: CoverageStats, *, sample_threshold: int = 1, policy: str = "drop") -> MetricResult:
    """C-QCE = mean_tau sum_b w_b |coverage_b(tau) - tau| from per-bin coverage counts.

    ``drop``: bins with N_b < sample_threshold leave numerator and denominator,
    w_b = N_b / N_kept (dropped sample fraction in ``extra``). ``netcal``
    (netcal 1.4.0, ``marginal=False``): such bins count with coverage 0 and
    keep their weight w_b = N_b / N.
    """
    _check_choice(policy, POLICIES, "policy")
    n = stats.count
    total = int(n.sum())
    params = {
        "levels": stats.levels.tolist(), "d": stats.d, "bins": int(len(n)), "binning": stats.binning,
        "sample_threshold": int(sample_threshold), "policy": policy, "n": total,
    }
    if total == 0:
        return _nan_result("c_qce", policy, params)
    kept = (n >= max(int(sample_threshold), 1))
    with np.errstate(invalid="ignore", divide="ignore"):
        cov_b = stats.covered / n[:, None]
    if policy == "drop":
        n_kept = int(n[kept].sum())
        dev = np.abs(cov_b[kept] - stats.levels[None, :])
        value = float(np.mean(np.sum(dev * n[kept, None], axis=0) / n_kept)) if n_kept else float("nan")
    else:
        cov_used = np.where(kept[:, None], cov_b, 0.0)
        dev = np.abs(cov_used - stats.levels[None, :])
        occ = n > 0
        value = float(np.mean(np.sum(dev[occ] * n[occ, None], axis=0) / total))
        n_kept = int(n[kept].sum())
    table: dict[str, np.ndarray] = {"count": n.copy(), "coverage": cov_b, "tau": stats.levels.copy()}
    if stats.edges is not None:
        table["edges"] = stats.edges.copy()
    return MetricResult(
        name="c_qce", value=value, variant=policy, params=params, table=table,
        extra={"dropped_fraction": 1.0 - n_kept / total, "kept_bins": int(kept.sum()), "occupied_bins": int((n > 0).sum())},
    )


def nees(mu: Any, sigma: Any, y: Any) -> np.ndarray:
    """Normalised estimation error squared eps = (y - mu)^2 / sigma^2 [S] (d = 1)."""
    m, s, t = _validate(mu, sigma, y)
    e2 = np.subtract(t, m)
    np.multiply(e2, e2, out=e2)
    # e^2 / sigma^2 exactly as netcal orders the operations (bit-identical coverage), two [S] buffers
    return np.divide(e2, np.multiply(s, s), out=e2)


def m_qce(mu: Any, sigma: Any, y: Any, *, levels: Any = QUANTILE_LEVELS) -> MetricResult:
    """Marginal Quantile Calibration Error (Kueppers et al. 2022; netcal ``QCE(marginal=True)``).

    eps = e^2/sigma^2; coverage(tau) = mean 1(eps <= chi2_1.ppf(tau));
    M-QCE = (1/L) sum_tau |coverage(tau) - tau|.
    """
    return m_qce_from_stats(coverage_stats(nees(mu, sigma, y), None, d=1, levels=levels))


def c_qce(
    mu: Any, sigma: Any, y: Any, *, levels: Any = QUANTILE_LEVELS, bins: int = 10, binning: str = "equal_width",
    sample_threshold: int = 1, policy: str = "drop", range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Conditional Quantile Calibration Error (Kueppers et al. 2022; netcal ``QCE(marginal=False)``).

    C-QCE = (1/L) sum_tau sum_b w_b |coverage_b(tau) - tau| with B bins over
    sigma (equal-width over [min, max] as netcal, or equal_count) and the
    sparse-bin ``policy`` of :func:`c_qce_from_stats`.
    """
    _, s, _ = _validate(mu, sigma, y)
    stats = coverage_stats(nees(mu, sigma, y), s, d=1, levels=levels, bins=bins, binning=binning, range_=range_)
    return c_qce_from_stats(stats, sample_threshold=sample_threshold, policy=policy)


def _joint_nees(mu: Any, sigma: Any, y: Any, cov: Any | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(eps [S], log det Sigma [S], sigma_G [S], d) for the joint case.

    eps = e^T Sigma^-1 e, via a vectorised Cholesky forward substitution
    (loop over K only); diagonal Sigma = diag(sigma^2) when ``cov`` is None.
    sigma_G = det(Sigma)^(1/(2d)) (standardised generalised std).
    """
    m, s, t = _validate(mu, sigma, y, ndim=2)
    e = t - m
    d = e.shape[1]
    if cov is None:
        eps = np.sum(np.square(e) / np.square(s), axis=1)
        logdet = 2.0 * np.sum(np.log(s), axis=1)
    else:
        c = np.asarray(cov, dtype=np.float64)
        if c.shape != (len(e), d, d):
            raise DetcalInputError(f"cov must have shape {(len(e), d, d)}, got {c.shape}", field="cov")
        if not np.isfinite(c).all():
            i = int(np.flatnonzero(~np.isfinite(c).all(axis=(1, 2)))[0])
            raise DetcalInputError("covariance must be finite", record=f"sample {i}", field="cov")
        try:
            chol = np.linalg.cholesky(c) if len(c) else c
        except np.linalg.LinAlgError:
            min_eig = np.linalg.eigvalsh(c)[:, 0]
            i = int(np.flatnonzero(min_eig <= 0)[0]) if (min_eig <= 0).any() else 0
            raise DetcalInputError(
                f"covariance is not positive definite (smallest eigenvalue {min_eig[i]:.3g})", record=f"sample {i}", field="cov"
            ) from None
        diag = np.diagonal(chol, axis1=1, axis2=2)
        z = np.empty_like(e)
        for k in range(d):
            acc = e[:, k] - np.einsum("sj,sj->s", chol[:, k, :k], z[:, :k])
            z[:, k] = acc / diag[:, k]
        eps = np.sum(z * z, axis=1)
        logdet = 2.0 * np.sum(np.log(diag), axis=1)
    return eps, logdet, np.exp(logdet / (2.0 * d)), d


def m_qce_joint(mu: Any, sigma: Any, y: Any, *, cov: Any | None = None, levels: Any = QUANTILE_LEVELS) -> MetricResult:
    """Joint M-QCE over d = K coordinates: eps = e^T Sigma^-1 e against chi2_d.ppf(tau) (Kueppers et al. 2022).

    Sigma = ``cov`` (full) or diag(sigma^2).
    """
    eps, _, _, d = _joint_nees(mu, sigma, y, cov)
    res = m_qce_from_stats(coverage_stats(eps, None, d=d, levels=levels))
    res.params["covariance"] = "diagonal" if cov is None else "full"
    return res


def c_qce_joint(
    mu: Any, sigma: Any, y: Any, *, cov: Any | None = None, levels: Any = QUANTILE_LEVELS, bins: int = 10,
    binning: str = "equal_width", sample_threshold: int = 1, policy: str = "drop",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Joint C-QCE: bins over sigma_G = det(Sigma)^(1/(2d)) (netcal 1.4.0 with covariances)."""
    eps, _, sg, d = _joint_nees(mu, sigma, y, cov)
    stats = coverage_stats(eps, sg, d=d, levels=levels, bins=bins, binning=binning, range_=range_)
    res = c_qce_from_stats(stats, sample_threshold=sample_threshold, policy=policy)
    res.params["covariance"] = "diagonal" if cov is None else "full"
    return res


# --------------------------------------------------------------------------- proper scores


def gaussian_nll(mu: Any, sigma: Any, y: Any) -> MetricResult:
    """Gaussian NLL = mean_t [0.5 log(2 pi sigma_t^2) + e_t^2 / (2 sigma_t^2)] (Levi et al. 2019, Eq. 10)."""
    m, s, t = _validate(mu, sigma, y)
    params = {"n": int(len(s))}
    if len(s) == 0:
        return _nan_result("nll", "gaussian", params)
    z = np.subtract(t, m)
    np.divide(z, s, out=z)
    np.multiply(z, z, out=z)
    value = 0.5 * _LOG_2PI + float(np.mean(np.log(s))) + 0.5 * float(np.mean(z))
    return MetricResult(name="nll", value=value, variant="gaussian", params=params)


def gaussian_nll_joint(mu: Any, sigma: Any, y: Any, *, cov: Any | None = None) -> MetricResult:
    """Joint Gaussian NLL = mean_t 0.5 [d log 2 pi + log det Sigma_t + e_t^T Sigma_t^-1 e_t].

    Sigma = ``cov`` (full) or diag(sigma^2) (then the sum of per-coordinate NLLs).
    """
    eps, logdet, _, d = _joint_nees(mu, sigma, y, cov)
    params = {"n": int(len(eps)), "d": d, "covariance": "diagonal" if cov is None else "full"}
    if len(eps) == 0:
        return _nan_result("nll", "gaussian_joint", params)
    nll = 0.5 * (d * _LOG_2PI + logdet + eps)
    return MetricResult(name="nll", value=float(nll.mean()), variant="gaussian_joint", params=params)


def _abs_z_counts(absz: np.ndarray, z_thr: np.ndarray) -> np.ndarray:
    """#{i : absz_i <= z_thr_l} [L] for increasing thresholds, O(S) memory."""
    lvl = _level_index(absz, z_thr)
    return np.cumsum(np.bincount(lvl, minlength=len(z_thr) + 1))[: len(z_thr)]


def picp(mu: Any, sigma: Any, y: Any, *, tau: float = 0.95, levels: Any = QUANTILE_LEVELS) -> MetricResult:
    """Prediction Interval Coverage Probability of the central interval mu +- z sigma, z = Phi^-1(0.5 + tau/2).

    PICP(tau) = mean 1(|e| <= z_tau sigma); value at ``tau``, table over ``levels``
    (with MPIW(tau) = mean 2 z_tau sigma).
    """
    m, s, t = _validate(mu, sigma, y)
    lv = _validate_levels(np.union1d(_validate_levels(levels), [tau]))
    params = {"tau": float(tau), "n": int(len(s))}
    if len(s) == 0:
        return _nan_result("picp", "central", params)
    z = ndtri(0.5 + lv / 2.0)
    cov = _abs_z_counts(np.abs(t - m) / s, z) / len(s)
    mpiw = 2.0 * z * s.mean()
    i = int(np.flatnonzero(lv == tau)[0])
    return MetricResult(
        name="picp", value=float(cov[i]), variant="central", params=params,
        table={"tau": lv, "picp": cov, "mpiw": mpiw},
    )


def mpiw(mu: Any, sigma: Any, y: Any, *, tau: float = 0.95) -> MetricResult:
    """Mean Prediction Interval Width of the central tau interval: MPIW = mean 2 Phi^-1(0.5 + tau/2) sigma."""
    _, s, _ = _validate(mu, sigma, y)
    _validate_levels([tau], "tau")
    params = {"tau": float(tau), "n": int(len(s))}
    if len(s) == 0:
        return _nan_result("mpiw", "central", params)
    return MetricResult(name="mpiw", value=float(2.0 * ndtri(0.5 + tau / 2.0) * s.mean()), variant="central", params=params)


def pinball_loss(mu: Any, sigma: Any, y: Any, *, levels: Any = QUANTILE_LEVELS) -> MetricResult:
    """Pinball (quantile) loss, textbook form, averaged over levels and samples.

    q_tau = mu + sigma Phi^-1(tau); rho_tau(y - q) = max(tau (y - q), (tau - 1)(y - q));
    value = (1/L) sum_tau mean_t rho_tau; per-level means in the table
    (Koenker & Bassett 1978; not netcal's ``QuantileLoss``).
    """
    m, s, t = _validate(mu, sigma, y)
    lv = _validate_levels(levels)
    params = {"levels": lv.tolist(), "n": int(len(s))}
    if len(s) == 0:
        return _nan_result("pinball", "textbook", params)
    per = np.empty(len(lv))
    for j, tau in enumerate(lv):  # loop over L levels keeps memory O(S)
        u = t - (m + s * ndtri(tau))
        per[j] = np.mean(np.maximum(tau * u, (tau - 1.0) * u))
    return MetricResult(name="pinball", value=float(per.mean()), variant="textbook", params=params, table={"tau": lv, "loss": per})


def crps_gaussian(mu: Any, sigma: Any, y: Any) -> MetricResult:
    """CRPS of N(mu, sigma^2), closed form (Gneiting et al. 2005; properscoring ``crps_gaussian``).

    z = e / sigma; CRPS = sigma [z (2 Phi(z) - 1) + 2 phi(z) - 1/sqrt(pi)]; value = mean.
    """
    m, s, t = _validate(mu, sigma, y)
    params = {"n": int(len(s))}
    if len(s) == 0:
        return _nan_result("crps", "gaussian", params)
    z = (t - m) / s
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
    crps = s * (z * (2.0 * ndtr(z) - 1.0) + 2.0 * pdf - 1.0 / np.sqrt(np.pi))
    return MetricResult(name="crps", value=float(crps.mean()), variant="gaussian", params=params)


def interval_calibration_error(
    mu: Any, sigma: Any, y: Any, *, m: int = 100, levels: Any | None = None, weights: Any | None = None,
    reduction: str = "sum", kind: str = "one_sided",
) -> MetricResult:
    """Calibration error of Kuleshov et al. 2018: CE = sum_j w_j (p_j - P_hat(p_j))^2.

    ``one_sided`` (Kuleshov): p_t = Phi(e_t / sigma_t), P_hat(p) = share of p_t <= p.
    ``interval`` (uncertainty-toolbox): share of samples inside the central p
    interval, |2 Phi(e/sigma) - 1| <= p. Default levels np.linspace(0, 1, m)
    (uncertainty-toolbox, m = 100), w_j = 1; ``reduction`` ``sum`` (Kuleshov)
    or ``mean`` (over the m levels). Note: uncertainty-toolbox normalises
    (mu - y)/sigma; the one-sided curve here uses e = y - mu (METRICS.md).
    """
    mu_, s, t = _validate(mu, sigma, y)
    _check_choice(reduction, ("sum", "mean"), "reduction")
    _check_choice(kind, ("one_sided", "interval"), "kind")
    lv = np.linspace(0.0, 1.0, int(m)) if levels is None else np.asarray(levels, dtype=np.float64).reshape(-1)
    if len(lv) == 0 or np.any(np.diff(lv) <= 0) or lv[0] < 0 or lv[-1] > 1:
        raise DetcalInputError(f"levels must be strictly increasing in [0, 1], got {lv.tolist()}", field="levels")
    w = np.ones(len(lv)) if weights is None else np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape != lv.shape:
        raise DetcalInputError(f"weights must have {len(lv)} entries, got {w.shape}", field="weights")
    params = {"m": int(len(lv)), "reduction": reduction, "kind": kind, "n": int(len(s)), "weighted": weights is not None}
    if len(s) == 0:
        return _nan_result("interval_ce", kind, params)
    z = (t - mu_) / s
    p_t = ndtr(z) if kind == "one_sided" else np.abs(2.0 * ndtr(z) - 1.0)
    p_hat = _abs_z_counts(p_t, lv) / len(s)
    sq = w * np.square(lv - p_hat)
    value = float(sq.sum() if reduction == "sum" else sq.mean())
    return MetricResult(name="interval_ce", value=value, variant=kind, params=params, table={"p": lv, "p_hat": p_hat})


# --------------------------------------------------------------------------- retention family


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


def _n_keep(n: int, rejected: np.ndarray) -> np.ndarray:
    """Retained counts N - floor(f N) (>= 1 for f < 1), robust to float representation of f."""
    return n - np.floor(np.round(rejected * n, 9)).astype(np.int64)


def _uncertainty(s: np.ndarray, uncertainty: Any | None) -> np.ndarray:
    if uncertainty is None:
        return s
    u = np.asarray(uncertainty, dtype=np.float64).reshape(-1)
    if u.shape != s.shape:
        raise DetcalInputError(f"uncertainty must have {len(s)} entries, got {u.shape}", field="uncertainty")
    if not np.isfinite(u).all():
        i = int(np.flatnonzero(~np.isfinite(u))[0])
        raise DetcalInputError("uncertainty must be finite", record=f"sample {i}", field="uncertainty")
    return u


def _validate_rejected(rejected: Any) -> np.ndarray:
    f = np.asarray(rejected, dtype=np.float64).reshape(-1)
    if len(f) == 0 or f[0] != 0 or np.any(np.diff(f) <= 0) or f[-1] >= 1:
        raise DetcalInputError("rejected fractions must start at 0, increase strictly and stay < 1", field="rejected")
    return f


def retention_curve(
    mu: Any, sigma: Any, y: Any, *, error: str = "rmse", uncertainty: Any | None = None,
    rejected: Any = RETENTION_REJECT, variant: str = "retained",
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
    m, s, t = _validate(mu, sigma, y)
    _check_choice(variant, ("retained", "shifts"), "variant")
    _check_choice(error, ("rmse", "mae", "mse") if variant == "retained" else ("mse", "mae"), "error")
    u = _uncertainty(s, uncertainty)
    params: dict[str, Any] = {"error": error, "variant": variant, "n": int(len(s)),
                              "uncertainty": "sigma" if uncertainty is None else "given"}
    if len(s) == 0:
        return _nan_result("r_auc", variant, params)
    e = t - m
    err = np.abs(e) if error == "mae" else e * e
    (es,) = _sorted_by_uncertainty(u, err)
    cs = np.cumsum(es)
    n = len(s)
    if variant == "shifts":
        curve = np.zeros(n + 1)
        curve[:n] = cs[::-1] / n
        ret = 1.0 - np.arange(n + 1) / n
        return MetricResult(
            name="r_auc", value=float(curve.mean()), variant=variant, params=params,
            table={"retained_fraction": ret, "error": curve},
        )
    f = _validate_rejected(rejected)
    params["rejected"] = f.tolist()
    k = _n_keep(n, f)
    curve = cs[k - 1] / k
    if error == "rmse":
        curve = np.sqrt(curve)
    ret = 1.0 - f
    auc = float(np.trapezoid(curve[::-1], ret[::-1])) if len(f) > 1 else float("nan")
    return MetricResult(
        name="r_auc", value=auc, variant=variant, params=params,
        table={"rejected_fraction": f, "retained_fraction": ret, "n_retained": k, "error": curve},
    )


def rmse_rmv_ratio(mu: Any, sigma: Any, y: Any, *, rejected: Any = RETENTION_REJECT) -> MetricResult:
    """RMSE / RMV over the sample (Lakara et al. 2022, Eqs. 1-2); ideal 1.

    RMSE = sqrt(mean e^2), RMV = sqrt(mean sigma^2). The table holds the
    RMSE/RMV retention curve (R3 curve): the ratio on the least uncertain
    N - floor(f N) samples at each rejected fraction f (sorted by sigma).
    """
    m, s, t = _validate(mu, sigma, y)
    f = _validate_rejected(rejected)
    params = {"n": int(len(s)), "rejected": f.tolist()}
    if len(s) == 0:
        return _nan_result("rmse_rmv", "", params)
    e = t - m
    e2s, v2s = _sorted_by_uncertainty(s, e * e, s * s)
    k = _n_keep(len(s), f)
    ratio = np.sqrt(np.cumsum(e2s)[k - 1] / np.cumsum(v2s)[k - 1])
    return MetricResult(
        name="rmse_rmv", value=float(ratio[0]), params=params,
        table={"rejected_fraction": f, "retained_fraction": 1.0 - f, "ratio": ratio},
        extra={"rmse": float(np.sqrt(np.mean(e * e))), "rmv": float(np.sqrt(np.mean(s * s)))},
    )


def ll_fu_scores(mu: Any, sigma: Any, y: Any) -> np.ndarray:
    """Per-sample LL-Fisher uncertainty [S] (Lakara et al. 2022, Eq. 6).

    LL-FU = max(0, 0.5 log(2 pi sigma^2)) + e^2 / (2 sigma^2).
    """
    m, s, t = _validate(mu, sigma, y)
    return np.maximum(0.0, 0.5 * (_LOG_2PI + 2.0 * np.log(s))) + 0.5 * np.square((t - m) / s)


def ll_fu(mu: Any, sigma: Any, y: Any) -> MetricResult:
    """Mean LL-Fisher uncertainty (Lakara et al. 2022, Eq. 6); use :func:`ll_fu_scores` as ``uncertainty``
    in :func:`retention_curve` / :func:`f1_retention` for their R-AUC and F1 tables."""
    sc = ll_fu_scores(mu, sigma, y)
    params = {"n": int(len(sc))}
    if len(sc) == 0:
        return _nan_result("ll_fu", "", params)
    return MetricResult(name="ll_fu", value=float(sc.mean()), params=params)


def mwse(
    mu: Any, sigma: Any, y: Any, *, weight: str = "variance", rejected: Any = RETENTION_REJECT,
) -> MetricResult:
    """Mean Weighted Squared Error (Lakara et al. 2022, Eq. 7): MWSE = (1/N) sum e_i^2 u_i.

    u = sigma^2 (``variance``, default) or sigma (``std``). The table holds the
    MWSE retention curve (mean over the least uncertain N - floor(f N)).
    """
    m, s, t = _validate(mu, sigma, y)
    _check_choice(weight, ("variance", "std"), "weight")
    f = _validate_rejected(rejected)
    params = {"weight": weight, "n": int(len(s)), "rejected": f.tolist()}
    if len(s) == 0:
        return _nan_result("mwse", weight, params)
    e = t - m
    w = e * e * (s * s if weight == "variance" else s)
    (ws,) = _sorted_by_uncertainty(s, w)
    k = _n_keep(len(s), f)
    curve = np.cumsum(ws)[k - 1] / k
    return MetricResult(
        name="mwse", value=float(w.mean()), variant=weight, params=params,
        table={"rejected_fraction": f, "retained_fraction": 1.0 - f, "mwse": curve},
    )


def f1_retention(
    mu: Any, sigma: Any, y: Any, *, threshold: float, error: str = "mse", uncertainty: Any | None = None,
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
    m, s, t = _validate(mu, sigma, y)
    _check_choice(error, ("mse", "mae"), "error")
    if not np.isfinite(threshold):
        raise DetcalInputError(f"threshold must be finite, got {threshold}", field="threshold")
    u = _uncertainty(s, uncertainty)
    params = {"threshold": float(threshold), "error": error, "beta": float(beta), "n": int(len(s)),
              "uncertainty": "sigma" if uncertainty is None else "given"}
    if len(s) == 0:
        return _nan_result("f1_auc", "shifts", params)
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
        name="f1_auc", value=auc, variant="shifts", params=params,
        table={"retained_fraction": x, "f1": f, "precision": prec, "recall": rec},
        extra={"f1_at_95": f95, "acceptable_fraction": float(tp[-1] / n)},
    )


# --------------------------------------------------------------------------- wrappers and suite


def per_coordinate(fn: Callable[..., MetricResult], sample: RegressionSample, **kw: Any) -> dict[str, MetricResult]:
    """Apply a 1-D metric ``fn(mu, sigma, y, **kw)`` to each coordinate of a RegressionSample.

    Returns {coordinate name: MetricResult}; each result records ``coordinate`` and ``space``.
    """
    out: dict[str, MetricResult] = {}
    for k, name in enumerate(sample.coords):
        r = fn(sample.mu[:, k], sample.sigma[:, k], sample.y[:, k], **kw)
        r.params.update(coordinate=name, space=sample.space)
        out[name] = r
    return out


def joint(fn: Callable[..., MetricResult], sample: RegressionSample, **kw: Any) -> MetricResult:
    """Apply a joint metric ``fn(mu, sigma, y, cov=..., **kw)`` to a RegressionSample (full cov when present)."""
    r = fn(sample.mu, sample.sigma, sample.y, cov=sample.cov, **kw)
    r.params.update(coordinate="joint", space=sample.space)
    return r


def regression_metrics(
    sample: RegressionSample, *, bins: int = 10, binning: str = "equal_count", qce_bins: int = 10,
    qce_binning: str = "equal_width", qce_sample_threshold: int = 1, qce_policy: str = "drop",
    levels: Any = QUANTILE_LEVELS, interval_m: int = 100, tau: float = 0.95, retention_error: str = "rmse",
    f1_threshold: float | None = None, with_joint: bool = True,
) -> dict[str, dict[str, MetricResult]]:
    """Default regression-calibration suite: {metric: {coordinate | "joint": MetricResult}}.

    Per coordinate: ence, cv, lence, uce, m_qce, c_qce, nll, picp, mpiw,
    pinball, crps, interval_ce, rmse_rmv, r_auc, ll_fu, mwse (and f1_auc when
    ``f1_threshold`` is given: acceptable error thresholds are task-specific).
    Joint (d = K, full covariance when the sample has one): nll, m_qce, c_qce.
    """
    qce_kw = dict(levels=levels, bins=qce_bins, binning=qce_binning, sample_threshold=qce_sample_threshold, policy=qce_policy)
    out: dict[str, dict[str, MetricResult]] = {
        "ence": per_coordinate(ence, sample, bins=bins, binning=binning),
        "cv": per_coordinate(coefficient_of_variation, sample),
        "lence": per_coordinate(lence, sample, bins=bins, binning=binning),
        "uce": per_coordinate(uce, sample, bins=bins),
        "m_qce": per_coordinate(m_qce, sample, levels=levels),
        "c_qce": per_coordinate(c_qce, sample, **qce_kw),
        "nll": per_coordinate(gaussian_nll, sample),
        "picp": per_coordinate(picp, sample, tau=tau, levels=levels),
        "mpiw": per_coordinate(mpiw, sample, tau=tau),
        "pinball": per_coordinate(pinball_loss, sample, levels=levels),
        "crps": per_coordinate(crps_gaussian, sample),
        "interval_ce": per_coordinate(interval_calibration_error, sample, m=interval_m),
        "rmse_rmv": per_coordinate(rmse_rmv_ratio, sample),
        "r_auc": per_coordinate(retention_curve, sample, error=retention_error),
        "ll_fu": per_coordinate(ll_fu, sample),
        "mwse": per_coordinate(mwse, sample),
    }
    if f1_threshold is not None:
        out["f1_auc"] = per_coordinate(f1_retention, sample, threshold=f1_threshold)
    if with_joint and len(sample) > 0:
        out["nll"]["joint"] = joint(gaussian_nll_joint, sample)
        out["m_qce"]["joint"] = joint(m_qce_joint, sample, levels=levels)
        out["c_qce"]["joint"] = joint(c_qce_joint, sample, **qce_kw)
    return out
