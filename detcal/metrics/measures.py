"""The registry of confidence measures: one entry per measure, everything else iterates it.

A measure is a function of the mergeable cell statistics
(:class:`~detcal.binning.cells.CellSums` ``[..., C]``, vectorised over leading
axes: classes, bootstrap replicates). Its :class:`Measure` entry holds

* ``name`` (its key in metrics.json) and ``values(sums, settings) -> [...]``,
  the definition (:mod:`detcal.metrics.confidence_compute` for the built-ins);
* ``reference(p, y, features, settings) -> float``: the plain formula it must
  equal (:mod:`detcal.metrics.reference`);
* ``grid``: the cells it is computed on: ``"confidence"`` (equal-width bins of
  the confidence alone: ECE's grid), ``"position"`` (the D-ECE grid over
  confidence and box features) or ``"total"`` (no cells: the sums over the
  whole sample);
* ``defaults``: its parameters with their defaults (``sample_threshold``,
  ``policy``, ``q``, ``spread``; a grid's sample threshold and policy apply
  where it names none);
* ``headline`` (and ``headline_order``): whether it is one of the headline
  numbers of an evaluation, and ``display``: how reports show it (label,
  number format, which direction is better);
* what the fast paths need: the float statistics it reads (``reads``), the
  :class:`CellSums` fields of ``values`` (``value_fields``, the bootstrap
  carries only those) and an optional linear-time ``leave_one_out`` for the
  jackknife (else the dense one is used);
* what its :class:`~detcal.core.types.MetricResult` records besides the value
  (``describe``: extra entries and per-cell columns; ``params``; ``variant``;
  ``note``: why a cell-free value is undefined).

The suite of an evaluation (:func:`detcal.metrics.confidence_suite.suite`),
the per-class means, the bootstrap and jackknife, the streaming evaluator,
``detcal-compare``'s replicates, the headline numbers and the report's
confidence table all iterate :data:`MEASURES`. Adding a measure: write its
``values`` (and ``reference``) in one module and call :func:`register` once
(docs/architecture.md, "Adding a confidence measure").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.binning.cells import CellSums
from detcal.core.errors import DetcalInputError
from detcal.metrics.confidence_compute import (
    MeasureSettings,
    brier_values,
    ece_q_values,
    ece_values,
    gap_moments,
    homogeneity_values,
    mce_values,
    nll_values,
    outlier_values,
    overconfidence_values,
    sharpness_values,
    underconfidence_values,
)
from detcal.metrics.confidence_loo import (
    CellLOO,
    loo_homogeneity,
    loo_max_gap,
    loo_outliers,
    loo_sum_ratio,
)
from detcal.metrics.reference import (
    brier as ref_brier,
    dece as ref_dece,
    ece as ref_ece,
    ece_q as ref_ece_q,
    homogeneity as ref_homogeneity,
    mce as ref_mce,
    nll as ref_nll,
    outliers as ref_outliers,
    overconfidence as ref_overconfidence,
    sharpness as ref_sharpness,
    underconfidence as ref_underconfidence,
)

GRIDS: tuple[str, ...] = ("confidence", "position", "total")
"""The cells a measure is computed on (module docstring)."""

DIRECTIONS: tuple[str, ...] = ("lower", "higher", "neither")
"""Which values are better: ``lower`` (an error), ``higher`` (a score), ``neither`` (descriptive)."""


@dataclass(frozen=True)
class Display:
    """How a report shows a measure: ``label``, ``fmt`` (a :func:`format` spec) and ``better``;
    ``formula``: a short definition that tables spelling it show after the label (e.g. ``E[p|y=0]``)."""

    label: str
    fmt: str = ".4f"
    better: str = "lower"
    formula: str = ""

    @property
    def long_label(self) -> str:
        """The label followed by the formula, when there is one."""
        return f"{self.label} {self.formula}" if self.formula else self.label

    def __post_init__(self) -> None:
        if self.better not in DIRECTIONS:
            raise DetcalInputError(f"better must be one of {DIRECTIONS}, got {self.better!r}", field="better")

    def format(self, value: Any) -> str:
        """``value`` in this format; ``–`` for a missing or non-finite value."""
        if value is None or not np.isfinite(float(value)):
            return "–"
        return format(float(value), self.fmt)


Values = Callable[[CellSums, MeasureSettings], np.ndarray]
Reference = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", Any], float]
Describe = Callable[[dict[str, np.ndarray], CellSums, float, MeasureSettings], tuple[dict[str, Any], dict[str, Any]]]


@dataclass(frozen=True)
class Measure:
    """One confidence measure (module docstring). ``reference`` receives the
    :class:`~detcal.metrics.confidence.ConfidenceMetric` (``bins``, ``edges``,
    ``sample_threshold``, ``policy``, ``q``, ``spread``) as its settings."""

    name: str
    values: Values
    reference: Reference
    grid: str
    display: Display
    headline: bool = False
    headline_order: int = 100
    defaults: Mapping[str, Any] = field(default_factory=dict)
    reads: tuple[str, ...] = ("sum_p0", "sum_p1")
    value_fields: tuple[str, ...] = ("count", "sum_y", "sum_p")
    leave_one_out: Callable[[CellLOO, MeasureSettings], np.ndarray] | None = None
    describe: Describe | None = None
    params: Callable[[MeasureSettings], dict[str, Any]] | None = None
    variant: Callable[[MeasureSettings], str] | None = None
    note: Callable[[int, int], str | None] | None = None
    needs_y: bool = True
    doc: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name.startswith("_") or self.name.endswith("_per_class"):
            raise DetcalInputError(
                f"a measure's name must be an identifier without a leading '_' or a '_per_class' ending, "
                f"got {self.name!r}",
                field="name",
            )
        if self.grid not in GRIDS:
            raise DetcalInputError(f"grid must be one of {GRIDS}, got {self.grid!r}", field="grid")
        unknown = sorted(set(self.defaults) - {"sample_threshold", "policy", "q", "spread"})
        if unknown:
            raise DetcalInputError(f"unknown parameter(s) {unknown} of measure {self.name!r}", field="defaults")

    @property
    def binned(self) -> bool:
        """Whether the measure reads cells (``grid`` other than ``"total"``)."""
        return self.grid != "total"


MEASURES: dict[str, Measure] = {}
"""The registered measures, in the order metrics.json and the reports list them."""


def register(measure: Measure, *, replace: bool = False) -> Measure:
    """Add ``measure`` to :data:`MEASURES` (``replace``: over an entry of the same name) and return it."""
    if measure.name in MEASURES and not replace:
        raise DetcalInputError(f"a measure named {measure.name!r} is registered already", field="name")
    MEASURES[measure.name] = measure
    return measure


def unregister(name: str) -> Measure:
    """Remove the measure ``name`` from :data:`MEASURES` and return its entry."""
    return MEASURES.pop(get(name).name)


def get(name: str) -> Measure:
    """The entry of ``name`` (a one-line error naming the known measures otherwise)."""
    if name not in MEASURES:
        raise DetcalInputError(f"unknown confidence metric {name!r}; known: {tuple(MEASURES)}", field="name")
    return MEASURES[name]


def headline_names() -> tuple[str, ...]:
    """The headline measures, by ``headline_order`` then registry order."""
    heads = [m for m in MEASURES.values() if m.headline]
    order = {n: i for i, n in enumerate(MEASURES)}
    return tuple(m.name for m in sorted(heads, key=lambda m: (m.headline_order, order[m.name])))


# ----------------------------------------------------------------------------- built-in entries


HOMOGENEITY_RATINGS: tuple[tuple[float, str], ...] = ((0.02, "good"), (0.05, "fair"), (float("inf"), "poor"))
"""Rating of the homogeneity (weighted std of gap): the first ``(upper, label)`` with
``value <= upper``. detcal convention (no published thresholds exist): a gap
spread of at most 2 points of precision is good, at most 5 fair."""

OUTLIER_RATINGS: tuple[tuple[float, str], ...] = ((0.01, "good"), (0.05, "fair"), (float("inf"), "poor"))
"""Rating of the outlier sample share (share of kept samples in outlier cells):
first ``(upper, label)`` with ``share <= upper``. detcal convention: at most 1 %
of samples in outlier cells is good, at most 5 % fair."""


def rate(value: float, ratings: tuple[tuple[float, str], ...]) -> str:
    """The label of the first ``(upper, label)`` of ``ratings`` with ``value <= upper`` (``undefined`` for NaN)."""
    if not np.isfinite(value):
        return "undefined"
    for upper, label in ratings:
        if value <= upper:
            return label
    return ratings[-1][1]  # pragma: no cover - last upper is inf


def _gap_spread(summ: dict[str, np.ndarray], s: CellSums, value: float, m: MeasureSettings) -> dict[str, Any]:
    h = gap_moments(summ)
    return {
        "mean_gap": float(h["mean"]),
        "std_gap": float(h["std"]),
        "homogeneity_rating": rate(float(h["std"]), HOMOGENEITY_RATINGS),
    }


def _describe_homogeneity(
    summ: dict[str, np.ndarray], s: CellSums, value: float, m: MeasureSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    return _gap_spread(summ, s, value, m), {}


def _describe_outliers(
    summ: dict[str, np.ndarray], s: CellSums, value: float, m: MeasureSettings
) -> tuple[dict[str, Any], dict[str, Any]]:
    h = gap_moments(summ)
    out = h["outlier"]
    extra = {
        **_gap_spread(summ, s, value, m),
        "outlier_threshold": float(h["threshold"]),
        "outlier_cells": int(out.sum()),
        "outlier_samples": int(np.sum(s.count[out])),
        "outlier_share": value,
        "outlier_rating": rate(value, OUTLIER_RATINGS),
    }
    return extra, {"outlier": out}


def _binned_ref(fn: Callable[..., float], q: bool = False) -> Reference:
    def ref(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: Any) -> float:
        kw = {"q": m.q} if q else {}
        return fn(p, y, features, m.bins, m.sample_threshold, m.policy, edges=m.edges, **kw)

    return ref


def _conf_ref(fn: Callable[..., float]) -> Reference:
    def ref(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: Any) -> float:
        return fn(p, y, m.bins, sample_threshold=m.sample_threshold, policy=m.policy, edges=m.edges)

    return ref


def _free_ref(fn: Callable[[np.ndarray, np.ndarray], float]) -> Reference:
    return lambda p, y, features, m: fn(p, y)


def _ece_q_ref(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: Any) -> float:
    return ref_ece_q(p, y, m.q, m.bins, sample_threshold=m.sample_threshold, policy=m.policy, edges=m.edges)


def _homogeneity_ref(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: Any) -> float:
    return ref_homogeneity(p, y, features, m.bins, m.sample_threshold, spread=m.spread)


def _outliers_ref(p: np.ndarray, y: np.ndarray, features: np.ndarray | None, m: Any) -> float:
    return ref_outliers(p, y, features, m.bins, m.sample_threshold)


def _loo_ratio(c: CellLOO, m: MeasureSettings) -> np.ndarray:
    return loo_sum_ratio(c, 1.0, m.policy, power=False)


def _loo_ratio_q(c: CellLOO, m: MeasureSettings) -> np.ndarray:
    return loo_sum_ratio(c, m.q, m.policy, power=True)


def _all_matched(n: int, n1: int) -> str | None:
    return "all detections are matched: E[p | y = 0] is undefined" if n1 == n else None


def _none_matched(n: int, n1: int) -> str | None:
    return "no detection is matched: E[1 - p | y = 1] is undefined" if n1 == 0 else None


# The measures of docs/metrics.md, in metrics.json order: one register call each.
_ONE = {"sample_threshold": 1}
register(
    Measure(
        "ece", ece_values, _conf_ref(ref_ece), "confidence", Display("ECE"),
        headline=True, headline_order=1, defaults=_ONE, leave_one_out=_loo_ratio, doc="ece",
    )
)  # fmt: skip
register(
    Measure(
        "ece_q", ece_q_values, _ece_q_ref, "confidence", Display("ECE_q"),
        defaults={**_ONE, "q": 2.0}, leave_one_out=_loo_ratio_q, params=lambda m: {"q": float(m.q)}, doc="ece_q",
    )
)  # fmt: skip
register(
    Measure(
        "mce", mce_values, _conf_ref(ref_mce), "confidence", Display("MCE"),
        headline=True, headline_order=3, defaults=_ONE, leave_one_out=lambda c, m: loo_max_gap(c), doc="mce",
    )
)  # fmt: skip
register(
    Measure(
        "dece", ece_values, _binned_ref(ref_dece), "position", Display("D-ECE"),
        headline=True, headline_order=2, leave_one_out=_loo_ratio, doc="dece",
    )
)  # fmt: skip
register(
    Measure(
        "homogeneity", homogeneity_values, _homogeneity_ref, "position", Display("homogeneity"),
        defaults={"policy": "drop", "spread": "std"},
        leave_one_out=lambda c, m: loo_homogeneity(c, m.spread == "variance"),
        describe=_describe_homogeneity,
        params=lambda m: {"spread": m.spread, "weights": "N_c / N_kept over kept cells"},
        variant=lambda m: "+variance" if m.spread == "variance" else "",
        doc="homogeneity",
    )
)  # fmt: skip
register(
    Measure(
        "outliers", outlier_values, _outliers_ref, "position", Display("outlier share"),
        defaults={"policy": "drop"}, leave_one_out=lambda c, m: loo_outliers(c), describe=_describe_outliers,
        doc="outliers",
    )
)  # fmt: skip
register(
    Measure(
        "nll", nll_values, _free_ref(ref_nll), "total", Display("NLL"), headline=True, headline_order=4,
        reads=("sum_nll",), value_fields=("count", "sum_y", "sum_nll"),
        params=lambda m: {"clip": 1e-12}, variant=lambda m: "clip=1e-12", doc="nll",
    )
)  # fmt: skip
register(
    Measure(
        "brier", brier_values, _free_ref(ref_brier), "total", Display("Brier"), headline=True, headline_order=5,
        reads=("sum_se",), value_fields=("count", "sum_y", "sum_se"), doc="brier",
    )
)  # fmt: skip
register(
    Measure(
        "sharpness", sharpness_values, _free_ref(ref_sharpness), "total", Display("sharpness", better="neither"),
        reads=("sum_p0", "sum_p1", "sum_p2"), value_fields=("count", "sum_y", "sum_p", "sum_p2"),
        variant=lambda m: "var_ddof0", needs_y=False, doc="sharpness",
    )
)  # fmt: skip
register(
    Measure(
        "overconfidence", overconfidence_values, _free_ref(ref_overconfidence), "total", Display("over-confidence", formula="E[p|y=0]"),
        reads=("sum_p0",), value_fields=("count", "sum_y", "sum_p0"), note=_all_matched, doc="overconfidence",
    )
)  # fmt: skip
register(
    Measure(
        "underconfidence", underconfidence_values, _free_ref(ref_underconfidence), "total",
        Display("under-confidence", formula="E[1-p|y=1]"), reads=("sum_p1",), value_fields=("count", "sum_y", "sum_p1"),
        note=_none_matched, doc="underconfidence",
    )
)  # fmt: skip

__all__ = [
    "DIRECTIONS",
    "Display",
    "GRIDS",
    "HOMOGENEITY_RATINGS",
    "MEASURES",
    "Measure",
    "OUTLIER_RATINGS",
    "get",
    "headline_names",
    "rate",
    "register",
    "unregister",
]
