"""Calibration metrics (numpy/scipy only; importing this package never imports torch).

Confidence calibration (:mod:`detcal.metrics.confidence`; every confidence measure is
one entry of the registry :mod:`detcal.metrics.measures`), object-level calibration
(:mod:`detcal.metrics.oce`, :mod:`detcal.metrics.image_reliability`; uq-detr's conventions in
:mod:`detcal.metrics.uq_detr`), the percentile
bootstrap over images (:mod:`detcal.metrics.bootstrap`) and the
regression-uncertainty metrics (:mod:`detcal.metrics.regression`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from detcal.metrics.confidence import (
    ConfidenceMetric,
    SparseCellsWarning,
    brier,
    dece,
    dece_kueppers,
    ece,
    ece_q,
    homogeneity,
    mce,
    nll,
    outliers,
    overconfidence,
    sharpness,
    underconfidence,
)
from detcal.metrics.confidence_suite import SuiteBinning, confidence_metrics, per_class, suite
from detcal.metrics.image_reliability import contrastive_conf, fit_lambda, per_image_oce, split_confidence
from detcal.metrics.measures import MEASURES, Display, Measure, register, unregister
from detcal.metrics.oce import ObjectScores, object_scores, oce
from detcal.utils.lazy_names import lazy_getattr

if TYPE_CHECKING:  # the names below are read on first use (``__getattr__``); type checkers see them here
    from detcal.metrics.bootstrap import (
        bootstrap_ci,
        bootstrap_many,
        bootstrap_values,
        percentile_interval,
        with_ci,
    )
    from detcal.metrics.regression import (
        CoverageStats,
        SigmaBinStats,
        c_qce,
        c_qce_from_stats,
        c_qce_joint,
        coefficient_of_variation,
        coverage_stats,
        crps_gaussian,
        ence,
        ence_from_stats,
        f1_retention,
        gaussian_nll,
        gaussian_nll_joint,
        interval_calibration_error,
        joint,
        lence,
        ll_fu,
        ll_fu_scores,
        m_qce,
        m_qce_from_stats,
        m_qce_joint,
        mpiw,
        mwse,
        nees,
        per_coordinate,
        picp,
        pinball_loss,
        regression_metrics,
        retention_curve,
        rmse_rmv_ratio,
        sigma_bin_stats,
        uce,
        uce_from_stats,
    )

_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "detcal.metrics.bootstrap": (
        "bootstrap_ci",
        "bootstrap_many",
        "bootstrap_values",
        "percentile_interval",
        "with_ci",
    ),
    "detcal.metrics.regression": (
        "CoverageStats",
        "SigmaBinStats",
        "c_qce",
        "c_qce_from_stats",
        "c_qce_joint",
        "coefficient_of_variation",
        "coverage_stats",
        "crps_gaussian",
        "ence",
        "ence_from_stats",
        "f1_retention",
        "gaussian_nll",
        "gaussian_nll_joint",
        "interval_calibration_error",
        "joint",
        "lence",
        "ll_fu",
        "ll_fu_scores",
        "m_qce",
        "m_qce_from_stats",
        "m_qce_joint",
        "mpiw",
        "mwse",
        "nees",
        "per_coordinate",
        "picp",
        "pinball_loss",
        "regression_metrics",
        "retention_curve",
        "rmse_rmv_ratio",
        "sigma_bin_stats",
        "uce",
        "uce_from_stats",
    ),
}
_LAZY: dict[str, str] = {name: module for module, names in _LAZY_MODULES.items() for name in names}
"""Public names imported on first use, and their modules: the bootstrap and the regression metrics (~20 ms
of imports) are not read by a plain confidence evaluation (PEP 562 module ``__getattr__``)."""


__getattr__ = lazy_getattr(__name__, globals(), _LAZY)


__all__ = [
    "ConfidenceMetric",
    "Display",
    "MEASURES",
    "Measure",
    "SuiteBinning",
    "register",
    "suite",
    "unregister",
    "dece_kueppers",
    "ObjectScores",
    "CoverageStats",
    "SigmaBinStats",
    "SparseCellsWarning",
    "bootstrap_ci",
    "bootstrap_many",
    "bootstrap_values",
    "brier",
    "c_qce",
    "c_qce_from_stats",
    "c_qce_joint",
    "coefficient_of_variation",
    "confidence_metrics",
    "contrastive_conf",
    "coverage_stats",
    "crps_gaussian",
    "dece",
    "ece",
    "ece_q",
    "ence",
    "ence_from_stats",
    "f1_retention",
    "fit_lambda",
    "gaussian_nll",
    "gaussian_nll_joint",
    "homogeneity",
    "interval_calibration_error",
    "joint",
    "lence",
    "ll_fu",
    "ll_fu_scores",
    "m_qce",
    "m_qce_from_stats",
    "m_qce_joint",
    "mce",
    "mpiw",
    "mwse",
    "nees",
    "nll",
    "object_scores",
    "oce",
    "outliers",
    "overconfidence",
    "per_class",
    "per_image_oce",
    "per_coordinate",
    "percentile_interval",
    "picp",
    "pinball_loss",
    "regression_metrics",
    "retention_curve",
    "rmse_rmv_ratio",
    "sharpness",
    "sigma_bin_stats",
    "split_confidence",
    "uce",
    "uce_from_stats",
    "underconfidence",
    "with_ci",
]
