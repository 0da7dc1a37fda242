"""Box-uncertainty (regression) calibration metrics, numpy/scipy only.

The metrics live in submodules by concern: :mod:`.sigma_bins` (ENCE, C_v,
LENCE, UCE), :mod:`.qce` (M-QCE, C-QCE), :mod:`.scores` (NLL, intervals,
pinball, CRPS, Kuleshov CE) and :mod:`.retention` (R-AUC, RMSE/RMV, LL-FU,
MWSE, F1); every public name is re-exported here.

Definitions: docs/metrics.md. Every metric takes 1-D arrays
for ONE coordinate, ``mu [S]``, ``sigma [S]`` (> 0) and ``y [S]`` (residual
``e = y - mu``), and returns one :class:`detcal.core.types.MetricResult`. The joint
(d = K) variants take ``mu [S,K]``, ``sigma [S,K]``, ``y [S,K]`` and an
optional full covariance ``cov [S,K,K]``. :func:`per_coordinate` and
:func:`joint` apply them to a :class:`detcal.metrics.spaces.RegressionSample`;
:func:`regression_metrics` runs the default suite.

Definitions: the binned ones (ENCE, LENCE, UCE, M-QCE, C-QCE, joint QCE,
Kuleshov's interval CE) are written plainly in :mod:`detcal.metrics.reference`;
each fast path here must equal its reference (tests/metrics/test_metrics_reference.py).

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

from collections.abc import Callable
from typing import Any

from numpy.typing import ArrayLike

from detcal.core.types import MetricResult
from detcal.metrics.regression._common import (  # noqa: F401
    BINNINGS,
    POLICIES,
    QUANTILE_LEVELS,
    RETENTION_REJECT,
)
from detcal.metrics.regression.qce import (  # noqa: F401
    CoverageStats,
    c_qce,
    c_qce_from_stats,
    c_qce_joint,
    coverage_stats,
    m_qce,
    m_qce_from_stats,
    m_qce_joint,
    nees,
)
from detcal.metrics.regression.retention import (  # noqa: F401
    LOG_BASES,
    MWSE_NORMALISATIONS,
    f1_retention,
    ll_fu,
    ll_fu_scores,
    mwse,
    retention_curve,
    rmse_rmv_ratio,
)
from detcal.metrics.regression.scores import (  # noqa: F401
    crps_gaussian,
    gaussian_nll,
    gaussian_nll_joint,
    interval_calibration_error,
    mpiw,
    picp,
    pinball_loss,
)
from detcal.metrics.regression.sigma_bins import (  # noqa: F401
    SigmaBinStats,
    coefficient_of_variation,
    ence,
    ence_from_stats,
    lence,
    sigma_bin_stats,
    uce,
    uce_from_stats,
)
from detcal.metrics.spaces import RegressionSample

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
    sample: RegressionSample,
    *,
    bins: int = 10,
    binning: str = "equal_count",
    qce_bins: int = 10,
    qce_binning: str = "equal_width",
    qce_sample_threshold: int = 1,
    qce_policy: str = "drop",
    levels: ArrayLike = QUANTILE_LEVELS,
    interval_m: int = 100,
    tau: float = 0.95,
    retention_error: str = "rmse",
    f1_threshold: float | None = None,
    with_joint: bool = True,
    ll_fu_log_base: str = "e",
    mwse_normalise: str = "retained",
) -> dict[str, dict[str, MetricResult]]:
    """Default regression-calibration suite: {metric: {coordinate | "joint": MetricResult}}.

    Per coordinate: ence, cv, lence, uce, m_qce, c_qce, nll, picp, mpiw,
    pinball, crps, interval_ce, rmse_rmv, r_auc, ll_fu, mwse (and f1_auc when
    ``f1_threshold`` is given: acceptable error thresholds are task-specific).
    Joint (d = K, full covariance when the sample has one): nll, m_qce, c_qce.
    Source variants: ``ll_fu_log_base`` ("e" | "10"), ``mwse_normalise``
    ("retained" | "total"); see docs/metrics.md.
    """
    qce_kw = dict(
        levels=levels, bins=qce_bins, binning=qce_binning, sample_threshold=qce_sample_threshold, policy=qce_policy
    )
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
        "ll_fu": per_coordinate(ll_fu, sample, log_base=ll_fu_log_base),
        "mwse": per_coordinate(mwse, sample, normalise=mwse_normalise),
    }
    if f1_threshold is not None:
        out["f1_auc"] = per_coordinate(f1_retention, sample, threshold=f1_threshold)
    if with_joint and len(sample) > 0:
        out["nll"]["joint"] = joint(gaussian_nll_joint, sample)
        out["m_qce"]["joint"] = joint(m_qce_joint, sample, levels=levels)
        out["c_qce"]["joint"] = joint(c_qce_joint, sample, **qce_kw)
    return out
