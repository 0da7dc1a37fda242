"""Quantile calibration: M-QCE and C-QCE, per coordinate and joint (Kueppers et al. 2022; netcal 1.4.0 ``QCE``).

Memory: QCE never builds an [S, L] matrix; each sample's NEES is located
among the L sorted chi^2 thresholds once (a small-integer level index) and
per-bin coverage counts follow from a ``bincount`` + ``cumsum`` (O(S + B L)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.edges import RankSegments
from detcal.binning.kernels import Workspace
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics._special import gammaincinv
from detcal.metrics.regression._chunked import (
    LEAF,
    contiguous,
    equal_width_index_into,
    float_columns,
    min_max,
    sigma_range,
)
from detcal.metrics.regression._common import (
    BINNINGS,
    POLICIES,
    QUANTILE_LEVELS,
    check_bins,
    check_choice,
    nan_result,
    validate,
    validate_levels,
)
from detcal.metrics.regression.sigma_bins import assign_sigma_bins


@dataclass
class CoverageStats:
    """Per-bin quantile-coverage counts of QCE; merge by addition.

    ``count [B]`` int64, ``covered [B,L]`` int64 (float64 for equal_count bins
    with a tie group shared between bins) (samples with NEES <=
    chi2_d.ppf(tau_l)), ``levels [L]``, ``d`` degrees of freedom, ``edges``
    [B+1] of the sigma bins (None for equal_count or the marginal B = 1 case).
    """

    count: np.ndarray
    covered: np.ndarray
    levels: np.ndarray
    d: int
    edges: np.ndarray | None
    binning: str

    def merge(self, other: CoverageStats) -> CoverageStats:
        """Sum of two chunks' counts (same levels, d and fixed edges)."""
        if self.binning == "equal_count" or other.binning == "equal_count":
            raise DetcalInputError("equal_count statistics need global ranks and cannot be merged", field="binning")
        same_edges = (self.edges is None and other.edges is None) or (
            self.edges is not None and other.edges is not None and np.array_equal(self.edges, other.edges)
        )
        if not (same_edges and self.d == other.d and np.array_equal(self.levels, other.levels)):
            raise DetcalInputError("cannot merge coverage statistics with different edges, levels or d", field="range_")
        return CoverageStats(
            self.count + other.count, self.covered + other.covered, self.levels, self.d, self.edges, self.binning
        )


def level_index(values: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
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


def _coverage_counts(
    eps: np.ndarray,
    bin_idx: np.ndarray | RankSegments | None,
    n_bins: int,
    levels: np.ndarray,
    d: int,
) -> tuple[np.ndarray, np.ndarray]:
    """count [B] and covered [B,L]: #{i in b : eps_i <= chi2_d.ppf(tau_l)}, in O(S + B L) memory.

    Each eps is located once among the sorted thresholds: lvl_i = #{l : thr_l < eps_i}
    (``bin_idx`` None: a single bin);
    sample i is covered at level l iff lvl_i <= l, so covered = cumsum of the
    (bin, lvl) histogram along lvl. Equal-count bins (:class:`RankSegments`)
    share a tie group straddling a bin edge by its rank share (covered is then
    fractional, float64).
    """
    thr = 2.0 * gammaincinv(d / 2.0, levels)  # chi2_d.ppf, without importing scipy.stats (same values)
    n_lv = len(levels)
    lvl = level_index(eps, thr)
    if isinstance(bin_idx, RankSegments):
        flat = bin_idx.index * (n_lv + 1) + lvl
        h = np.bincount(flat, minlength=(n_bins + 1) * (n_lv + 1)).reshape(n_bins + 1, n_lv + 1)[:n_bins]
        if not bin_idx.groups:
            return bin_idx.count.astype(np.int64), np.cumsum(h, axis=1)[:, :n_lv].astype(np.int64)
        hf = h.astype(np.float64)
        for members, share in bin_idx.groups:
            hf += share[:, None] * np.bincount(lvl[members], minlength=n_lv + 1)[None, :]
        return bin_idx.count.astype(np.int64), np.cumsum(hf, axis=1)[:, :n_lv]
    flat = lvl if bin_idx is None else bin_idx * (n_lv + 1) + lvl
    h = np.bincount(flat, minlength=n_bins * (n_lv + 1)).reshape(n_bins, n_lv + 1)
    covered = np.cumsum(h, axis=1)[:, :n_lv]
    return h.sum(axis=1).astype(np.int64), covered.astype(np.int64)


def coverage_stats(
    eps: ArrayLike,
    sigma_bin: ArrayLike | None,
    *,
    d: int = 1,
    levels: ArrayLike = QUANTILE_LEVELS,
    bins: int = 10,
    binning: str = "equal_width",
    range_: tuple[float, float] | None = None,
) -> CoverageStats:
    """Coverage counts of NEES values ``eps [S]`` per bin of ``sigma_bin [S]`` (None: one bin, marginal)."""
    lv = validate_levels(levels)
    eps = np.asarray(eps, dtype=np.float64).reshape(-1)
    if sigma_bin is None:
        return CoverageStats(*_coverage_counts(eps, None, 1, lv, d), lv, d, None, "marginal")
    check_choice(binning, BINNINGS, "binning")
    b = check_bins(bins)
    sb = np.asarray(sigma_bin, dtype=np.float64).reshape(-1)
    if len(sb) == 0:
        return CoverageStats(np.zeros(b, np.int64), np.zeros((b, len(lv)), np.int64), lv, d, None, binning)
    idx, edges = assign_sigma_bins(sb, b, binning, range_)
    return CoverageStats(*_coverage_counts(eps, idx, b, lv, d), lv, d, edges, binning)


def m_qce_from_stats(stats: CoverageStats) -> MetricResult:
    """M-QCE = mean_tau |coverage(tau) - tau| from pooled coverage counts.

    Definition: :func:`detcal.metrics.reference.qce_from_nees`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    n = int(stats.count.sum())
    params = {"levels": stats.levels.tolist(), "d": stats.d, "n": n}
    if n == 0:
        return nan_result("m_qce", "marginal", params)
    cov = stats.covered.sum(axis=0) / n
    return MetricResult(
        name="m_qce",
        value=float(np.mean(np.abs(cov - stats.levels))),
        variant="marginal",
        params=params,
        table={"tau": stats.levels.copy(), "coverage": cov},
    )


def c_qce_from_stats(stats: CoverageStats, *, sample_threshold: int = 1, policy: str = "drop") -> MetricResult:
    """C-QCE = mean_tau sum_b w_b |coverage_b(tau) - tau| from per-bin coverage counts.

    ``drop``: bins with N_b < sample_threshold leave numerator and denominator,
    w_b = N_b / N_kept (dropped sample fraction in ``extra``). ``netcal``
    (netcal 1.4.0, ``marginal=False``): such bins count with coverage 0 and
    keep their weight w_b = N_b / N.

    Definition: :func:`detcal.metrics.reference.qce_from_nees`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    check_choice(policy, POLICIES, "policy")
    n = stats.count
    total = int(n.sum())
    params = {
        "levels": stats.levels.tolist(),
        "d": stats.d,
        "bins": int(len(n)),
        "binning": stats.binning,
        "sample_threshold": int(sample_threshold),
        "policy": policy,
        "n": total,
    }
    if total == 0:
        return nan_result("c_qce", policy, params)
    kept = n >= max(int(sample_threshold), 1)
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
        name="c_qce",
        value=value,
        variant=policy,
        params=params,
        table=table,
        extra={
            "dropped_fraction": 1.0 - n_kept / total,
            "kept_bins": int(kept.sum()),
            "occupied_bins": int((n > 0).sum()),
        },
    )


def nees(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike) -> np.ndarray:
    """Normalised estimation error squared eps = (y - mu)^2 / sigma^2 [S] (d = 1)."""
    return _nees(*validate(mu, sigma, y))


def _nees(m: np.ndarray, s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """NEES of validated arrays."""
    e2 = np.subtract(t, m)
    np.multiply(e2, e2, out=e2)
    # e^2 / sigma^2 exactly as netcal orders the operations (bit-identical coverage), two [S] buffers
    return np.divide(e2, np.multiply(s, s), out=e2)


def m_qce(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, levels: ArrayLike = QUANTILE_LEVELS) -> MetricResult:
    """Marginal Quantile Calibration Error (Kueppers et al. 2022; netcal ``QCE(marginal=True)``).

    eps = e^2/sigma^2; coverage(tau) = mean 1(eps <= chi2_1.ppf(tau));
    M-QCE = (1/L) sum_tau |coverage(tau) - tau|.

    Definition: :func:`detcal.metrics.reference.m_qce`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return m_qce_from_stats(_coverage_chunked(mu, sigma, y, levels, None, "marginal", None))


def c_qce(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    levels: ArrayLike = QUANTILE_LEVELS,
    bins: int = 10,
    binning: str = "equal_width",
    sample_threshold: int = 1,
    policy: str = "drop",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Conditional Quantile Calibration Error (Kueppers et al. 2022; netcal ``QCE(marginal=False)``).

    C-QCE = (1/L) sum_tau sum_b w_b |coverage_b(tau) - tau| with B bins over
    sigma (equal-width over [min, max] as netcal, or equal_count) and the
    sparse-bin ``policy`` of :func:`c_qce_from_stats`.

    Definition: :func:`detcal.metrics.reference.c_qce`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    try:  # the argument checks of coverage_stats, after the input checks as there
        validate_levels(levels)
        check_choice(binning, BINNINGS, "binning")
        b = check_bins(bins)
    except DetcalInputError:
        validate(mu, sigma, y)
        raise
    if binning == "equal_width":
        stats = _coverage_chunked(mu, sigma, y, levels, b, binning, range_)
    else:
        m, s, t = validate(mu, sigma, y)
        stats = coverage_stats(_nees(m, s, t), s, d=1, levels=levels, bins=bins, binning=binning, range_=range_)
    return c_qce_from_stats(stats, sample_threshold=sample_threshold, policy=policy)


def _coverage_chunked(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    levels: ArrayLike,
    b: int | None,
    binning: str,
    range_: tuple[float, float] | None,
) -> CoverageStats:
    """Coverage counts of the per-coordinate NEES (d = 1) in one chunked pass (:mod:`._chunked`): marginal
    (``b`` None) or over ``b`` equal-width sigma bins; the counts of :func:`coverage_stats` exactly."""
    m, s, t = float_columns(mu, sigma, y)
    try:
        lv = validate_levels(levels)
    except DetcalInputError:
        validate(mu, sigma, y)  # input errors first, as in the one-shot code
        raise
    n, n_lv = len(s), len(lv)
    n_bins = 1 if b is None else b
    edges = None
    step = max(min(n, LEAF), 1)
    ws = Workspace(step)
    if b is not None:
        if n == 0:
            return CoverageStats(np.zeros(b, np.int64), np.zeros((b, n_lv), np.int64), lv, 1, None, binning)
        s_min, s_max = min_max(s, ws)
        if not (s_min > 0 and np.isfinite(s_max)):
            validate(mu, sigma, y)  # raises, naming the first bad sample
        lo, hi = sigma_range(s_min, s_max, "sigma", range_)
        edges = np.linspace(lo, hi, b + 1)
    thr = 2.0 * gammaincinv(0.5, lv)  # chi2_1.ppf
    h = np.zeros(n_bins * (n_lv + 1), dtype=np.int64)
    finite = True
    for a in range(0, n, step):
        k = min(n, a + step) - a
        sc = contiguous(ws, "s", s, a, a + k)
        if b is None and not (sc.min() > 0 and np.isfinite(sc.max())):
            validate(mu, sigma, y)  # raises, naming the first bad sample
        eps = np.subtract(t[a : a + k], m[a : a + k], out=ws.get("eps", np.float64, k))
        np.multiply(eps, eps, out=eps)
        np.divide(eps, np.multiply(sc, sc, out=ws.get("s2", np.float64, k)), out=eps)  # as _nees
        finite = finite and bool(np.isfinite(np.add.reduce(eps)))
        key = ws.get("key", np.int64, k)
        np.copyto(key, _level_index_into(eps, thr, ws), casting="unsafe")
        if b is not None:
            col = equal_width_index_into(sc, b, lo, hi, ws.get("bin", np.int64, k), ws)
            col *= n_lv + 1
            key += col
        h += np.bincount(key, minlength=len(h))
    if not finite:
        validate(mu, sigma, y)  # non-finite mu or y (a finite overflow passes)
    h2 = h.reshape(n_bins, n_lv + 1)
    covered = np.cumsum(h2, axis=1)[:, :n_lv].astype(np.int64)
    return CoverageStats(h2.sum(axis=1).astype(np.int64), covered, lv, 1, edges, binning)


def _level_index_into(values: np.ndarray, thresholds: np.ndarray, ws: Workspace) -> np.ndarray:
    """:func:`level_index` of one chunk in workspace buffers."""
    k = len(values)
    acc = ws.get("lvl", np.uint8 if len(thresholds) < 255 else np.uint16, k)
    acc[...] = 0
    tmp = ws.get("lvl_tmp", np.bool_, k)
    for th in thresholds:
        np.greater(values, th, out=tmp)
        acc += tmp
    return acc


def joint_nees(
    mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, cov: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(eps [S], log det Sigma [S], sigma_G [S], d) for the joint case.

    eps = e^T Sigma^-1 e, via a vectorised Cholesky forward substitution
    (loop over K only); diagonal Sigma = diag(sigma^2) when ``cov`` is None.
    sigma_G = det(Sigma)^(1/(2d)) (standardised generalised std).
    """
    m, s, t = validate(mu, sigma, y, ndim=2)
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
                f"covariance is not positive definite (smallest eigenvalue {min_eig[i]:.3g})",
                record=f"sample {i}",
                field="cov",
            ) from None
        diag = np.diagonal(chol, axis1=1, axis2=2)
        z = np.empty_like(e)
        for k in range(d):
            acc = e[:, k] - np.einsum("sj,sj->s", chol[:, k, :k], z[:, :k])
            z[:, k] = acc / diag[:, k]
        eps = np.sum(z * z, axis=1)
        logdet = 2.0 * np.sum(np.log(diag), axis=1)
    return eps, logdet, np.exp(logdet / (2.0 * d)), d


def m_qce_joint(
    mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, cov: ArrayLike | None = None, levels: ArrayLike = QUANTILE_LEVELS
) -> MetricResult:
    """Joint M-QCE over d = K coordinates: eps = e^T Sigma^-1 e against chi2_d.ppf(tau) (Kueppers et al. 2022).

    Sigma = ``cov`` (full) or diag(sigma^2).

    Definition: :func:`detcal.metrics.reference.qce_from_nees` of :func:`detcal.metrics.reference.joint_nees`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    eps, _, _, d = joint_nees(mu, sigma, y, cov)
    res = m_qce_from_stats(coverage_stats(eps, None, d=d, levels=levels))
    res.params["covariance"] = "diagonal" if cov is None else "full"
    return res


def c_qce_joint(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    cov: ArrayLike | None = None,
    levels: ArrayLike = QUANTILE_LEVELS,
    bins: int = 10,
    binning: str = "equal_width",
    sample_threshold: int = 1,
    policy: str = "drop",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Joint C-QCE: bins over sigma_G = det(Sigma)^(1/(2d)) (netcal 1.4.0 with covariances).

    Definition: :func:`detcal.metrics.reference.qce_from_nees` of :func:`detcal.metrics.reference.joint_nees`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    eps, _, sg, d = joint_nees(mu, sigma, y, cov)
    stats = coverage_stats(eps, sg, d=d, levels=levels, bins=bins, binning=binning, range_=range_)
    res = c_qce_from_stats(stats, sample_threshold=sample_threshold, policy=policy)
    res.params["covariance"] = "diagonal" if cov is None else "full"
    return res
