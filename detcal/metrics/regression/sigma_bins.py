"""Metrics over bins of sigma: ENCE, C_v, LENCE and UCE (Levi et al. 2019; Lakara et al. 2022; Laves et al. 2020).

Mergeable statistics (torchmetrics style): over *fixed* equal-width edges the
per-bin sums (:class:`SigmaBinStats`) merge across chunks by addition; pass
the same ``range_`` to every chunk. ``equal_count`` binning needs global
ranks and is computed one-shot only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.edges import RankSegments, equal_count_segments, equal_width_bins
from detcal.binning.kernels import Workspace
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.regression._chunked import (
    LEAF,
    OrderedBincount,
    contiguous,
    equal_width_index_into,
    float_columns,
    min_max,
    sigma_range,
)
from detcal.metrics.regression._common import BINNINGS, check_bins, check_choice, nan_result, validate


def assign_sigma_bins(
    values: np.ndarray,
    bins: int,
    binning: str,
    range_: tuple[float, float] | None,
) -> tuple[np.ndarray | RankSegments, np.ndarray | None]:
    """Bins over ``values``: the bin index [S] and edges [B+1] (equal_width), or the
    :class:`~detcal.binning.RankSegments` and None (equal_count, ties shared)."""
    if binning == "equal_count":
        if range_ is not None:
            raise DetcalInputError("range_ only applies to equal_width binning", field="range_")
        return equal_count_segments(values, bins), None
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

    def merge(self, other: SigmaBinStats) -> SigmaBinStats:
        """Sum of two chunks' statistics; both must share the same fixed edges."""
        if self.edges is None or other.edges is None:
            raise DetcalInputError("equal_count statistics need global ranks and cannot be merged", field="binning")
        if (
            self.over != other.over
            or self.edges.shape != other.edges.shape
            or not np.array_equal(self.edges, other.edges)
        ):
            raise DetcalInputError(
                "cannot merge statistics with different bin edges; pass the same range_", field="range_"
            )
        return SigmaBinStats(
            self.count + other.count,
            self.sum_var + other.sum_var,
            self.sum_sq_err + other.sum_sq_err,
            self.edges,
            self.over,
            self.binning,
        )


def _bin_stats(
    var: np.ndarray,
    e2: np.ndarray,
    idx: np.ndarray | RankSegments,
    edges: np.ndarray | None,
    b: int,
    over: str,
    binning: str,
) -> SigmaBinStats:
    if isinstance(idx, RankSegments):
        return SigmaBinStats(
            count=idx.count,
            sum_var=idx.sums(var),
            sum_sq_err=idx.sums(e2),
            edges=edges,
            over=over,
            binning=binning,
        )
    return SigmaBinStats(
        count=np.bincount(idx, minlength=b).astype(np.int64),
        sum_var=np.bincount(idx, weights=var, minlength=b),
        sum_sq_err=np.bincount(idx, weights=e2, minlength=b),
        edges=edges,
        over=over,
        binning=binning,
    )


def _sigma_bin_stats(
    m: np.ndarray,
    s: np.ndarray,
    t: np.ndarray,
    bins: int,
    binning: str,
    over: str,
    range_: tuple[float, float] | None,
) -> tuple[SigmaBinStats, np.ndarray | RankSegments]:
    """Validated-input core of :func:`sigma_bin_stats`; also returns the bins (index [S] or RankSegments)."""
    b = check_bins(bins)
    check_choice(binning, BINNINGS, "binning")
    check_choice(over, ("sigma", "variance"), "over")
    var = s * s
    e2 = np.subtract(t, m)
    np.multiply(e2, e2, out=e2)
    if len(s) == 0:
        idx: np.ndarray | RankSegments = np.zeros(0, np.int64)
        edges = None if binning == "equal_count" else np.full(b + 1, np.nan)
    else:
        idx, edges = assign_sigma_bins(s if over == "sigma" else var, b, binning, range_)
    return _bin_stats(var, e2, idx, edges, b, over, binning), idx


def _equal_width_stats(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    bins: int,
    binning: str,
    over: str,
    range_: tuple[float, float] | None,
) -> SigmaBinStats | None:
    """:func:`_sigma_bin_stats` for ``equal_width`` bins in one chunked pass (:mod:`._chunked`), bit for bit:
    no copies of strided columns, the per-bin sums added in input order. ``None``: use the one-shot path
    (equal_count, empty input)."""
    if binning != "equal_width":
        return None
    m, s, t = float_columns(mu, sigma, y)
    try:
        b = check_bins(bins)
        check_choice(over, ("sigma", "variance"), "over")
    except DetcalInputError:
        validate(mu, sigma, y)  # input errors first, as in the one-shot code
        raise
    n = len(s)
    if n == 0:
        return None
    step = min(n, LEAF)
    ws = Workspace(step)
    s_min, s_max = min_max(s, ws)
    if not (s_min > 0 and np.isfinite(s_max)):
        validate(mu, sigma, y)  # raises, naming the first bad sample
    lo, hi = sigma_range(s_min, s_max, over, range_)
    acc = OrderedBincount(b, 2, step)
    for a in range(0, n, step):
        k = min(n, a + step) - a
        sc = contiguous(ws, "s", s, a, a + k)
        var = np.multiply(sc, sc, out=acc.weight_buffer(0, k))
        e2 = np.subtract(t[a : a + k], m[a : a + k], out=acc.weight_buffer(1, k))
        np.multiply(e2, e2, out=e2)
        equal_width_index_into(sc if over == "sigma" else var, b, lo, hi, acc.key_buffer(k), ws)
        acc.add(k)
    if not np.isfinite(acc.sums[1].sum()):
        validate(mu, sigma, y)  # non-finite mu or y (a finite overflow passes)
    return SigmaBinStats(
        count=acc.counts.copy(),
        sum_var=acc.sums[0].copy(),
        sum_sq_err=acc.sums[1].copy(),
        edges=np.linspace(lo, hi, b + 1),
        over=over,
        binning=binning,
    )


def sigma_bin_stats(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    bins: int = 10,
    binning: str = "equal_count",
    over: str = "sigma",
    range_: tuple[float, float] | None = None,
) -> SigmaBinStats:
    """Per-bin counts and sums of sigma^2 and e^2 over bins of ``sigma`` (or sigma^2 when ``over="variance"``).

    ``equal_width`` bins span ``range_`` (default [min, max] of the binned
    quantity, as netcal); values outside a given range are clipped into the
    end bins (netcal drops them). Merge chunks with
    :meth:`SigmaBinStats.merge` (same ``range_``).
    """
    fast = _equal_width_stats(mu, sigma, y, bins, binning, over, range_)
    if fast is not None:
        return fast
    m, s, t = validate(mu, sigma, y)
    return _sigma_bin_stats(m, s, t, bins, binning, over, range_)[0]


def ence_from_stats(stats: SigmaBinStats) -> MetricResult:
    """ENCE = (1/B') sum_b |RMV(b) - RMSE(b)| / RMV(b) over the B' non-empty bins (Levi et al. 2019, Eq. 8).

    RMV(b) = sqrt(mean sigma^2), RMSE(b) = sqrt(mean e^2); table = reliability diagram.

    Definition: :func:`detcal.metrics.reference.ence`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
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
        name="ence",
        value=value,
        variant=stats.binning,
        params={"bins": int(len(n)), "binning": stats.binning, "over": stats.over, "n": int(n.sum())},
        table=table,
        extra={"occupied_bins": int(occupied.sum())},
    )


def ence(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    bins: int = 10,
    binning: str = "equal_count",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Expected Normalized Calibration Error (Levi et al. 2019, Eq. 8).

    ENCE = (1/B') sum_{b non-empty} |RMV(b) - RMSE(b)| / RMV(b), bins over sigma:
    ``equal_count`` (default; sort by sigma, B consecutive groups, the first
    S mod B one larger) or ``equal_width`` over [min sigma, max sigma] (netcal
    1.4.0 ``ENCE``). The per-bin table (rmv, rmse, count) is the reliability
    diagram; ``sigma_lo``/``sigma_hi`` give each bin's sigma range. ENCE grows
    with B even for calibrated data: always report B.

    Ties (``equal_count``): samples with equal sigma are exchangeable, so a
    tie group that straddles a bin edge is shared between the bins it
    overlaps in proportion to its ranks in each (each member carries the
    group's mean e^2); the bin sizes stay exactly those of Levi et al. and the
    value does not depend on the input order (:class:`detcal.binning.RankSegments`).
    Without such ties this is the plain split of a stable sort by sigma.

    Definition: :func:`detcal.metrics.reference.ence`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    fast = _equal_width_stats(mu, sigma, y, bins, binning, "sigma", range_)
    if fast is not None:
        return ence_from_stats(fast)
    m, s, t = validate(mu, sigma, y)
    stats, idx = _sigma_bin_stats(m, s, t, bins, binning, "sigma", range_)
    res = ence_from_stats(stats)
    if len(s) and isinstance(idx, RankSegments):
        res.table.update(sigma_lo=idx.lo_value.copy(), sigma_hi=idx.hi_value.copy())
    return res


def coefficient_of_variation(mu: ArrayLike, sigma: ArrayLike, y: ArrayLike) -> MetricResult:
    """C_v = sqrt(sum_t (sigma_t - mean sigma)^2 / (T - 1)) / mean sigma (Levi et al. 2019, Eq. 9).

    Dispersion of the predicted uncertainties; NaN for T < 2. Exactly 0 when
    every sigma is equal (``np.std`` of a constant that binary floating point
    cannot represent exactly, such as 0.1, returns about 1e-17 instead).
    """
    _, s, _ = validate(mu, sigma, y)
    params = {"n": int(len(s)), "ddof": 1}
    if len(s) < 2:
        return nan_result("cv", "", params)
    if s.min() == s.max():
        return MetricResult(name="cv", value=0.0, params=params, extra={"note": "all sigma equal"})
    return MetricResult(name="cv", value=float(np.std(s, ddof=1) / s.mean()), params=params)


def lence(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    bins: int = 10,
    binning: str = "equal_count",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Logarithmic ENCE (Lakara et al. 2022, Eq. 5): LENCE = ln|ENCE + 1/C_v|.

    ENCE with the given binning and C_v with T - 1 (see :func:`ence`,
    :func:`coefficient_of_variation`); both are recorded in ``extra``. The
    logarithm is natural (the paper's Table 1: ln|3.551 + 1/0.550| = 1.6804).
    Degenerate case (Lakara et al.): when every sigma is equal, C_v = 0 exactly
    and LENCE = inf, whatever the constant; ``extra["reason"]`` says why
    (metrics.json writes it as null with that reason).

    Definition: :func:`detcal.metrics.reference.lence`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    e = ence(mu, sigma, y, bins=bins, binning=binning, range_=range_)
    cv = coefficient_of_variation(mu, sigma, y)
    extra: dict[str, Any] = {"ence": e.value, "cv": cv.value}
    if cv.value == 0:
        value = float("inf")
        extra["reason"] = "C_v = 0 (every sigma equal): 1/C_v and LENCE are infinite"
    else:
        value = float(np.log(np.abs(e.value + 1.0 / cv.value)))
    return MetricResult(name="lence", value=value, variant=e.variant, params=dict(e.params), extra=extra)


def uce_from_stats(stats: SigmaBinStats) -> MetricResult:
    """UCE = sum_b N_b/N |MSE(b) - MV(b)| from per-bin sums over variance bins.

    Definition: :func:`detcal.metrics.reference.uce`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
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
        name="uce",
        value=value,
        variant=stats.binning,
        params={"bins": int(len(n)), "binning": stats.binning, "over": stats.over, "n": total},
        table=table,
    )


def uce(
    mu: ArrayLike,
    sigma: ArrayLike,
    y: ArrayLike,
    *,
    bins: int = 10,
    binning: str = "equal_width",
    range_: tuple[float, float] | None = None,
) -> MetricResult:
    """Uncertainty Calibration Error (Laves et al. 2020; netcal 1.4.0 ``UCE``).

    UCE = sum_b N_b/N |MSE(b) - MV(b)| with B bins over the variance sigma^2,
    equal-width over [min sigma^2, max sigma^2] by default (netcal).

    Definition: :func:`detcal.metrics.reference.uce`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return uce_from_stats(sigma_bin_stats(mu, sigma, y, bins=bins, binning=binning, over="variance", range_=range_))
