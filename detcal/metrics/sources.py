"""Named source variants: the keyword arguments that make each metric compute as a paper or tool did.

``SOURCES[source][metric]`` holds the keyword arguments of the metric
function (``detcal.metrics.confidence``, ``detcal.metrics.regression``,
:func:`detcal.metrics.confidence_suite.dece_by_class`) that select that
source's computation; a metric a source does not mention keeps detcal's
default. ``suite_kwargs(source)`` gives the matching keyword arguments of the
default suites (:func:`~detcal.metrics.confidence_suite.suite`: its
``binning`` and per-measure ``params``; and
:func:`~detcal.metrics.regression.regression_metrics`). docs/metrics.md
lists every variant with its reference.
"""

from __future__ import annotations

from typing import Any

from detcal.core.errors import DetcalInputError
from detcal.metrics.confidence_suite import SuiteBinning

SOURCES: dict[str, dict[str, dict[str, Any]]] = {
    "detcal": {},
    "guo2017": {
        "ece": {"bins": 15, "edges": "guo"},
        "mce": {"bins": 15, "edges": "guo"},
    },
    "levi2019": {
        "ence": {"bins": 10, "binning": "equal_count"},
        "lence": {"bins": 10, "binning": "equal_count"},
    },
    "lakara2022": {
        "ence": {"bins": 10, "binning": "equal_count"},
        "lence": {"bins": 10, "binning": "equal_count"},
        "ll_fu": {"log_base": "e"},
        "mwse": {"normalise": "retained"},
        "r_auc": {"variant": "shifts", "error": "mse"},
    },
    "lakara2022_code": {
        "ence": {"bins": 10, "binning": "equal_count"},
        "lence": {"bins": 10, "binning": "equal_count"},
        "ll_fu": {"log_base": "10"},
        "mwse": {"normalise": "total"},
        "r_auc": {"variant": "shifts", "error": "mse"},
    },
    "thetis": {
        "ece": {"bins": 20},
        "mce": {"bins": 20},
        "dece": {"sample_threshold": 1, "mode": "dimension"},
        "homogeneity": {"spread": "variance"},
    },
    "netcal": {
        "ece": {"policy": "netcal"},
        "mce": {"policy": "netcal"},
        "dece": {"policy": "netcal"},
        "ence": {"binning": "equal_width"},
        "uce": {"binning": "equal_width"},
        "c_qce": {"policy": "netcal"},
    },
}
"""source -> metric -> keyword arguments of the metric function."""

_SUITE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {  # (SuiteBinning fields + "params", regression)
    "detcal": ({}, {}),
    "guo2017": ({"confidence": 15, "edges": "guo"}, {}),
    "levi2019": ({}, {"bins": 10, "binning": "equal_count"}),
    "lakara2022": ({}, {"bins": 10, "binning": "equal_count", "ll_fu_log_base": "e", "mwse_normalise": "retained"}),
    "lakara2022_code": ({}, {"bins": 10, "binning": "equal_count", "ll_fu_log_base": "10", "mwse_normalise": "total"}),
    "thetis": ({"confidence": 20, "sample_threshold": 1, "params": {"homogeneity": {"spread": "variance"}}}, {}),
    "netcal": ({"policy": "netcal"}, {"binning": "equal_width", "qce_policy": "netcal"}),
}


def _check(source: str) -> None:
    if source not in SOURCES:
        raise DetcalInputError(f"unknown metric source {source!r}; known: {sorted(SOURCES)}", field="source")


def source_kwargs(source: str, metric: str) -> dict[str, Any]:
    """Keyword arguments of ``metric`` that select ``source``'s computation (empty: detcal's default)."""
    _check(source)
    return dict(SOURCES[source].get(metric, {}))


def suite_kwargs(source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(suite keyword arguments, regression_metrics keyword arguments)`` of ``source``.

    The first: ``binning`` (a :class:`~detcal.metrics.confidence_suite.SuiteBinning`)
    and ``params`` (per measure) of :func:`detcal.metrics.confidence_suite.suite`.

    The class dimension of Thetis's D-ECE needs the categories and is not part
    of the suite: call :func:`detcal.metrics.confidence_suite.dece_by_class`.
    """
    _check(source)
    conf, reg = _SUITE[source]
    fields = {k: v for k, v in conf.items() if k != "params"}
    params = {k: dict(v) for k, v in conf.get("params", {}).items()}
    return {"binning": SuiteBinning(**fields), "params": params}, dict(reg)
