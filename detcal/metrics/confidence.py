"""Confidence-calibration metrics for detection (docs/metrics.md), numpy only.

Sample: the non-ignored detections at one IoU threshold; ``p [S]`` the score
in [0, 1], ``y [S]`` the matched flag (precision target), optional
``features [S,F]`` the relative box features (cx, cy, w, h in [0, 1], from
:func:`detcal.core.boxes.relative_features`), optional ``category [S]``.

Cells: equal-width bins over (p, features...), half-open ``[a, b)`` with the
last closed, ``bins`` an int or one count per feature (confidence first),
product grid (:func:`detcal.binning.cell_index`). Per cell c: ``N_c``,
``prec(c) = mean y``, ``conf(c) = mean p``, ``gap(c) = |prec(c) - conf(c)|``.
A cell is *occupied* when ``N_c > 0`` and *kept* when ``N_c >=
sample_threshold`` (and occupied).

Sparse-cell policy (always reported in ``variant`` and ``params``):

* ``"drop"`` (default): non-kept cells leave numerator and denominator,
  ``N_kept = sum_kept N_c`` replaces ``N``; the dropped sample fraction is in
  ``extra["dropped_fraction"]``.
* ``"netcal"``: netcal 1.4.0: non-kept cells count with gap 0 but their
  samples stay in ``N``. This variant also copies netcal's binning exactly
  (features clipped to ``[eps, 1-eps]``, ``np.linspace`` edges; see
  :mod:`detcal.binning.edges`), so that it reproduces netcal's numbers.

Every metric is computed in two stages (torchmetrics style): the ``_update``
stage :func:`detcal.binning.cell_stats` returns mergeable per-cell sums
(:class:`~detcal.binning.CellStats`), and :meth:`ConfidenceMetric.values`
turns sums ``[..., C]`` into values ``[...]`` (vectorised over leading axes:
classes, bootstrap replicates). The public functions (:func:`ece`,
:func:`dece`, ...) are thin wrappers; :func:`confidence_metrics` computes the
default suite from shared statistics.

Definitions: each binned metric is written out plainly, as its formula, in
:mod:`detcal.metrics.reference` (``ece``, ``ece_q``, ``mce``, ``dece``,
``homogeneity``, ``outliers``); the fast path here must equal it
(tests/test_metrics_reference.py).

Results are :class:`detcal.core.types.MetricResult`; an empty sample or an
undefined quantity gives ``value = NaN`` with ``extra["note"]``, never an
exception.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from detcal.binning.cells import CellStats, CellSums, cell_stats, pair_sums
from detcal.binning.edges import EDGE_RULES, normalise_bins
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.confidence_compute import (
    _binned_values,
    _cell_free_values,
    _homogeneity,
    _summary,
)  # noqa: F401
from detcal.metrics.confidence_loo import cell_loo, loo_homogeneity, loo_max_gap, loo_outliers, loo_sum_ratio

POLICIES: tuple[str, ...] = ("drop", "netcal")
"""Sparse-cell policies."""

BINNED_METRICS: tuple[str, ...] = ("ece", "ece_q", "mce", "dece", "homogeneity", "outliers")
"""Metrics defined over cells."""

CELL_FREE_METRICS: tuple[str, ...] = ("nll", "brier", "sharpness", "overconfidence", "underconfidence")
"""Metrics defined over the whole sample (computed from the cell sums summed over cells)."""

HOMOGENEITY_RATINGS: tuple[tuple[float, str], ...] = ((0.02, "good"), (0.05, "fair"), (float("inf"), "poor"))
"""Rating of the homogeneity (weighted std of gap): the first ``(upper, label)`` with
``value <= upper``. detcal convention (no published thresholds exist): a gap
spread of at most 2 points of precision is good, at most 5 fair."""

OUTLIER_RATINGS: tuple[tuple[float, str], ...] = ((0.01, "good"), (0.05, "fair"), (float("inf"), "poor"))
"""Rating of the outlier sample share (share of kept samples in outlier cells):
first ``(upper, label)`` with ``share <= upper``. detcal convention: at most 1 %
of samples in outlier cells is good, at most 5 % fair."""

SPARSE_RATIO: int = 10
"""Warn when the number of cells exceeds ``samples / SPARSE_RATIO``."""


class SparseCellsWarning(UserWarning):
    """More cells than samples/10: the binned estimate is dominated by sparse cells."""


def _rate(value: float, ratings: tuple[tuple[float, str], ...]) -> str:
    if not np.isfinite(value):
        return "undefined"
    for upper, label in ratings:
        if value <= upper:
            return label
    return ratings[-1][1]  # pragma: no cover - last upper is inf


_REQUIRED_STATS: dict[str, tuple[str, ...]] = {
    "nll": ("sum_nll",),
    "brier": ("sum_se",),
    "sharpness": ("sum_p0", "sum_p1", "sum_p2"),
    "overconfidence": ("sum_p0",),
    "underconfidence": ("sum_p1",),
}
"""Float statistics read by the cell-free metrics; the binned ones read ``sum_p0`` and ``sum_p1``."""

_VALUE_FIELDS: dict[str, tuple[str, ...]] = {
    "nll": ("sum_nll",),
    "brier": ("sum_se",),
    "sharpness": ("sum_p", "sum_p2"),
    "overconfidence": ("sum_p0",),
    "underconfidence": ("sum_p1",),
}
""":class:`CellSums` fields read by the cell-free metrics' ``values`` besides ``count`` and ``sum_y``."""


@dataclass(frozen=True)
class ConfidenceMetric:
    """One confidence-calibration metric with its parameters; callable as ``m(p, y, features=None)``.

    ``name`` is one of :data:`BINNED_METRICS` or :data:`CELL_FREE_METRICS`;
    ``bins`` an int or per-feature tuple (confidence first);
    ``sample_threshold`` the minimum ``N_c`` of a kept cell; ``policy`` the
    sparse-cell policy; ``q`` the exponent of ECE_q; ``use_features``: whether
    the box features enter the grid (D-ECE, homogeneity, outliers) or are
    ignored (ECE on confidence alone); ``edge_rule`` overrides the edge rule
    of the cells (``None``: netcal's under the netcal policy, else ``floor``;
    ``"guo"``: Guo et al.'s ``((m-1)/B, m/B]``, :mod:`detcal.binning.edges`);
    ``spread`` of homogeneity: ``"std"`` (detcal default) or ``"variance"``
    (Thetis rates the variance of the calibration error).

    The object also provides the stages used by the bootstrap fast path
    (:mod:`detcal.metrics.bootstrap`): :meth:`grid_key`, :meth:`pair_sums`,
    :meth:`values`.
    """

    name: str
    bins: int | tuple[int, ...] = 15
    sample_threshold: int = 1
    policy: str = "drop"
    q: float = 1.0
    use_features: bool = False
    edge_rule: str | None = None
    spread: str = "std"

    def __post_init__(self) -> None:
        if self.edge_rule is not None and self.edge_rule not in EDGE_RULES:
            raise DetcalInputError(
                f"edge_rule must be one of {EDGE_RULES} or None, got {self.edge_rule!r}", field="edges"
            )
        if self.spread not in ("std", "variance"):
            raise DetcalInputError(f"spread must be 'std' or 'variance', got {self.spread!r}", field="spread")
        if self.name not in BINNED_METRICS + CELL_FREE_METRICS:
            raise DetcalInputError(
                f"unknown confidence metric {self.name!r}; known: {BINNED_METRICS + CELL_FREE_METRICS}", field="name"
            )
        if self.policy not in POLICIES:
            raise DetcalInputError(f"policy must be one of {POLICIES}, got {self.policy!r}", field="policy")
        if isinstance(self.bins, (bool, float)) or (
            np.ndim(self.bins) == 0 and not isinstance(self.bins, (int, np.integer))
        ):
            raise DetcalInputError(f"bins must be an int or a list of ints, got {self.bins!r}", field="bins")
        bins = int(self.bins) if np.ndim(self.bins) == 0 else tuple(int(b) for b in self.bins)  # type: ignore[arg-type,union-attr]
        if min(np.atleast_1d(bins)) < 1:
            raise DetcalInputError(f"every bin count must be >= 1, got {self.bins!r}", field="bins")
        object.__setattr__(self, "bins", bins)
        if int(self.sample_threshold) != self.sample_threshold or self.sample_threshold < 1:
            raise DetcalInputError(
                f"sample_threshold must be an integer >= 1, got {self.sample_threshold!r}", field="sample_threshold"
            )
        object.__setattr__(self, "sample_threshold", int(self.sample_threshold))
        if not (np.isfinite(self.q) and self.q >= 1.0):
            raise DetcalInputError(f"q must be a finite number >= 1, got {self.q!r}", field="q")

    # -- grid -------------------------------------------------------------
    @property
    def binned(self) -> bool:
        return self.name in BINNED_METRICS

    @property
    def edges(self) -> str:
        """Edge rule: ``edge_rule`` when given, else netcal's under the netcal policy, else ``floor``."""
        if not self.binned:
            return "floor"
        if self.edge_rule is not None:
            return self.edge_rule
        return "netcal" if self.policy == "netcal" else "floor"

    @property
    def variant(self) -> str:
        """Variant label recorded in results: the policy, plus ``+guo`` / ``+variance`` when chosen."""
        v = self.policy
        if (
            self.binned
            and self.edge_rule is not None
            and self.edge_rule != ("netcal" if self.policy == "netcal" else "floor")
        ):
            v += f"+edges={self.edge_rule}"
        if self.name == "homogeneity" and self.spread == "variance":
            v += "+variance"
        return v

    def _grid(self, features: Any) -> tuple[Any, int | tuple[int, ...]]:
        """Features entering the grid and the bins (a cell-free metric uses one cell)."""
        if not self.binned:
            return None, 1
        if not self.use_features or features is None:
            return None, self.bins
        return features, self.bins

    def grid_key(self, p: Any = None, y: Any = None, features: Any = None) -> Hashable:
        """Metrics with equal keys share their cell statistics (same call shape as ``__call__``)."""
        f, b = self._grid(features)
        n_feat = 1 + (0 if f is None else np.shape(f)[1] if np.ndim(f) == 2 else 1)
        try:
            return (normalise_bins(b, n_feat), self.edges, f is not None)
        except ValueError as exc:
            raise DetcalInputError(f"{exc} (confidence first)", field="bins") from None

    @property
    def required_stats(self) -> tuple[str, ...]:
        """The float statistics (:data:`detcal.binning.FLOAT_STATS`) this metric reads."""
        return _REQUIRED_STATS.get(self.name, ("sum_p0", "sum_p1"))

    # -- _update ----------------------------------------------------------
    def stats(
        self,
        p: Any,
        y: Any = None,
        features: Any = None,
        *,
        groups: Any = None,
        n_groups: int | None = None,
        which: Sequence[str] | None = None,
    ) -> CellStats:
        """Per-cell statistics on this metric's grid (:func:`detcal.binning.cell_stats`).

        ``which``: the float statistics to compute (default: only those this
        metric reads, :attr:`required_stats`; a suite sharing the stats between
        metrics asks for all of them).
        """
        f, b = self._grid(features)
        return cell_stats(
            p,
            self._y(p, y),
            f,
            b,
            edges=self.edges,
            groups=groups,
            n_groups=n_groups,
            stats=self.required_stats if which is None else which,
        )

    def pair_sums(
        self,
        group_index: np.ndarray,
        p: Any,
        y: Any = None,
        features: Any = None,
        *,
        fields: Sequence[str] | None = None,
    ) -> tuple[np.ndarray, np.ndarray, CellSums, int]:
        """Float sums per occupied (image, cell) pair (:func:`detcal.binning.pair_sums`; ``fields`` as there)."""
        f, b = self._grid(features)
        return pair_sums(group_index, p, self._y(p, y), f, b, edges=self.edges, fields=fields)

    @property
    def value_fields(self) -> tuple[str, ...]:
        """The :class:`CellSums` fields :meth:`values` reads (the bootstrap carries only these)."""
        if self.binned:
            return ("count", "sum_y", "sum_p")
        return ("count", "sum_y") + _VALUE_FIELDS[self.name]

    def leave_one_out(
        self, total: CellSums, unit: np.ndarray, col: np.ndarray, pair: CellSums, m: int
    ) -> np.ndarray | None:
        """Values ``[m]`` with each unit (image or block of images) left out, for the jackknife.

        ``total [C]``: the cell sums of the whole sample; ``pair [P]``: the
        sums of unit ``unit[j]`` in cell ``col[j]``, pairs sorted by unit.
        Binned metrics correct the full-sample value over each unit's own
        pairs (:mod:`detcal.metrics.confidence_loo`, linear in the pairs);
        the cell-free ones return ``None`` (one cell: the dense
        ``total - unit`` of :func:`detcal.metrics.image_cells.leave_out_values`
        is as cheap).
        """
        if not self.binned:
            return None
        c = cell_loo(total, unit, col, pair, m, self.sample_threshold)
        if self.name in ("ece", "dece"):
            return loo_sum_ratio(c, 1.0, self.policy, power=False)
        if self.name == "ece_q":
            return loo_sum_ratio(c, self.q, self.policy, power=True)
        if self.name == "mce":
            return loo_max_gap(c)
        if self.name == "homogeneity":
            return loo_homogeneity(c, self.spread == "variance")
        return loo_outliers(c)

    def _y(self, p: Any, y: Any) -> Any:
        """``y`` (sharpness alone accepts ``None``: it does not use the matched flag)."""
        if y is None:
            if self.name != "sharpness":
                raise DetcalInputError(f"{self.name} needs the matched flags y", field="y")
            return np.zeros(np.shape(p), dtype=bool)
        return y

    # -- _compute ---------------------------------------------------------
    def values(self, sums: CellSums) -> np.ndarray:
        """Metric values [...] from cell sums [..., C] (NaN where undefined).

        Per replicate/class, the value of the :mod:`detcal.metrics.reference` function of the same name.
        """
        if self.binned:
            v = _binned_values(self.name, _summary(sums, self.sample_threshold, self.policy), self.q)
            return v * v if (self.name == "homogeneity" and self.spread == "variance") else v
        return _cell_free_values(self.name, sums.total())

    def result(self, stats: CellStats, sums: CellSums | None = None) -> MetricResult:
        """The :class:`MetricResult` of statistics ``stats`` with cell axis only ([C]).

        ``sums``: ``stats.sums()`` (binned metrics) or ``stats.total().sums()`` (cell-free), when the
        caller already has them (a suite sharing one grid between metrics).
        """
        if stats.count.ndim != 1:
            raise DetcalInputError(f"result() needs stats [C], got {stats.count.shape}; use values()", field="stats")
        if self.binned:
            return self._binned_result(stats, sums)
        return self._cell_free_result(stats, sums)

    def __call__(self, p: Any, y: Any = None, features: Any = None) -> MetricResult:
        return self.result(self.stats(p, y, features))

    # -- result assembly --------------------------------------------------
    def _params(self, stats: CellStats) -> dict[str, Any]:
        params: dict[str, Any] = {"n": int(stats.n)}
        if self.binned:
            params.update(
                bins=list(stats.bins),
                n_features=len(stats.bins),
                sample_threshold=self.sample_threshold,
                policy=self.policy,
                edges=stats.edges,
            )
        if self.name == "ece_q":
            params["q"] = float(self.q)
        if self.name == "homogeneity":
            params.update(spread=self.spread, weights="N_c / N_kept over kept cells")
        if self.name == "nll":
            params["clip"] = 1e-12
        return params

    def _binned_result(self, stats: CellStats, sums: CellSums | None = None) -> MetricResult:
        s = stats.sums() if sums is None else sums
        summ = _summary(s, self.sample_threshold, self.policy)
        value = float(_binned_values(self.name, summ, self.q))
        if self.name == "homogeneity" and self.spread == "variance":
            value = value * value
        n = int(stats.n)
        n_cells = stats.n_cells
        sparse = int(np.sum(s.count[summ["occupied"] & ~summ["kept"]]))
        extra: dict[str, Any] = {
            "cells": n_cells,
            "occupied_cells": int(summ["occupied"].sum()),
            "kept_cells": int(summ["kept"].sum()),
            "n_kept": int(summ["n_kept"]),
            "sparse_samples": sparse,
            "sparse_fraction": sparse / n if n else float("nan"),
            "dropped_fraction": (sparse / n if n else float("nan")) if self.policy == "drop" else 0.0,
            "sparse_warning": bool(n_cells > n / SPARSE_RATIO),
        }
        if n and extra["sparse_warning"]:
            warnings.warn(
                f"{self.name}: {n_cells} cells for {n} samples (more than samples/{SPARSE_RATIO}); "
                "the estimate is dominated by sparse cells, consider fewer bins",
                SparseCellsWarning,
                stacklevel=5,
            )
        if n == 0:
            extra["note"] = "empty sample: no detections to evaluate"
        elif not np.isfinite(value):
            extra["note"] = f"no cell reaches sample_threshold={self.sample_threshold}"
        table: dict[str, np.ndarray] = {
            "count": s.count.astype(np.int64),
            "precision": summ["prec"],
            "confidence": summ["conf"],
            "gap": summ["gap"],
            "kept": summ["kept"],
            "bin_index": np.stack(np.unravel_index(np.arange(n_cells), stats.bins), axis=1),
        }
        if self.name in ("homogeneity", "outliers"):
            h = _homogeneity(summ)
            extra["mean_gap"] = float(h["mean"])
            extra["std_gap"] = float(h["std"])
            extra["homogeneity_rating"] = _rate(float(h["std"]), HOMOGENEITY_RATINGS)
            if self.name == "outliers":
                out = h["outlier"]
                extra["outlier_threshold"] = float(h["threshold"])
                extra["outlier_cells"] = int(out.sum())
                extra["outlier_samples"] = int(np.sum(s.count[out]))
                extra["outlier_share"] = value
                extra["outlier_rating"] = _rate(value, OUTLIER_RATINGS)
                table["outlier"] = out
        return MetricResult(
            name=self.name, value=value, variant=self.variant, params=self._params(stats), table=table, extra=extra
        )

    def _cell_free_result(self, stats: CellStats, sums: CellSums | None = None) -> MetricResult:
        value = float(_cell_free_values(self.name, stats.total().sums() if sums is None else sums))
        n = int(stats.n)
        n1 = int(np.sum(stats.sum_y))
        extra: dict[str, Any] = {"n_matched": n1, "n_unmatched": n - n1}
        if n == 0:
            extra["note"] = "empty sample: no detections to evaluate"
        elif self.name == "overconfidence" and n1 == n:
            extra["note"] = "all detections are matched: E[p | y = 0] is undefined"
        elif self.name == "underconfidence" and n1 == 0:
            extra["note"] = "no detection is matched: E[1 - p | y = 1] is undefined"
        variant = {"nll": "clip=1e-12", "sharpness": "var_ddof0"}.get(self.name, "")
        return MetricResult(name=self.name, value=value, variant=variant, params=self._params(stats), extra=extra)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def ece(
    p: Any,
    y: Any,
    bins: int = 15,
    *,
    sample_threshold: int = 1,
    policy: str = "drop",
    edges: str | None = None,
) -> MetricResult:
    """Expected calibration error on confidence alone (Guo et al. 2017; Naeini et al. 2015).

    ``ECE = sum_c N_c / N' * |prec(c) - conf(c)|`` over equal-width confidence
    bins (default 15), ``N' = N_kept`` (policy ``drop``) or ``N`` (``netcal``).
    With the default ``sample_threshold=1`` both policies agree (netcal
    ``ECE(bins=15)``) up to the edge rule. ``edges="guo"``: Guo et al.'s
    bins ``((m-1)/M, m/M]`` instead of the default ``[a, b)``.

    Definition: :func:`detcal.metrics.reference.ece`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("ece", bins, sample_threshold, policy, edge_rule=edges)(p, y)


def ece_q(
    p: Any,
    y: Any,
    q: float = 2,
    bins: int = 15,
    *,
    sample_threshold: int = 1,
    policy: str = "drop",
    edges: str | None = None,
) -> MetricResult:
    """ECE with exponent q: ``(sum_c N_c / N' * gap(c)^q)^(1/q)`` (``q = 1``: ECE; ``q = 2``: the l2-ECE).

    Reference: Kumar et al. 2019, "Verified uncertainty calibration" (l_p
    calibration error); cells and policy as :func:`ece`.

    Definition: :func:`detcal.metrics.reference.ece_q`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("ece_q", bins, sample_threshold, policy, q=float(q), edge_rule=edges)(p, y)


def mce(
    p: Any,
    y: Any,
    bins: int = 15,
    sample_threshold: int = 1,
    *,
    policy: str = "drop",
    edges: str | None = None,
) -> MetricResult:
    """Maximum calibration error ``max_c gap(c)`` over kept cells (Naeini et al. 2015).

    Both policies give the same value (netcal's sparse cells have gap 0), but
    ``policy="netcal"`` selects netcal's edge rule.

    Definition: :func:`detcal.metrics.reference.mce`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("mce", bins, sample_threshold, policy, edge_rule=edges)(p, y)


def dece(
    p: Any,
    y: Any,
    features: Any = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
    policy: str = "drop",
    *,
    edges: str | None = None,
) -> MetricResult:
    """Detection ECE over (confidence, box features) (Kueppers et al. 2020, CVPR-W).

    ``D-ECE = sum_c N_c / N' * |prec(c) - conf(c)|`` over the product grid of
    equal-width bins of (p, features[:, 0], ...) (default 5 per feature),
    kept cells ``N_c >= sample_threshold`` (default 8), ``N' = N_kept``
    (``drop``) or ``N`` with sparse cells counted as gap 0 (``netcal``:
    netcal 1.4.0 ``ECE(bins, detection=True, sample_threshold=...)``).
    ``features=None``: confidence only. Thetis computes D-ECE with no sample
    threshold (``sample_threshold=1``) and the class label as one more bin
    dimension (:func:`detcal.metrics.confidence_suite.dece_by_class`).

    Definition: :func:`detcal.metrics.reference.dece`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("dece", _bins_arg(bins), sample_threshold, policy, use_features=True, edge_rule=edges)(
        p, y, features
    )


def homogeneity(
    p: Any,
    y: Any,
    features: Any = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
    *,
    spread: str = "std",
) -> MetricResult:
    """Weighted standard deviation of the gap over kept cells of the D-ECE grid.

    ``mu = sum_kept w_c gap(c)``, ``value = sqrt(sum_kept w_c (gap(c) - mu)^2)``
    with ``w_c = N_c / N_kept``: the weights are normalised over the kept
    cells (so that they sum to 1 and the number is a true weighted standard
    deviation, unaffected by how many samples sparse cells drop; ``mu`` is then
    the D-ECE under the ``drop`` policy). 0 means the miscalibration is the
    same everywhere. Rated with :data:`HOMOGENEITY_RATINGS`
    (``extra["homogeneity_rating"]``, always rated on the std). detcal
    definition (docs/metrics.md). ``spread="variance"``: the same weighted
    variance without the square root, as Thetis's homogeneity (the variance of
    the calibration error across confidence levels), same weights.

    Definition: :func:`detcal.metrics.reference.homogeneity`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("homogeneity", _bins_arg(bins), sample_threshold, "drop", use_features=True, spread=spread)(
        p, y, features
    )


def outliers(
    p: Any, y: Any, features: Any = None, bins: int | Sequence[int] = 5, sample_threshold: int = 8
) -> MetricResult:
    """Share of kept samples that lie in outlier cells of the D-ECE grid.

    A kept cell is an outlier when ``gap(c) > mu + 2 sigma`` (``mu``, ``sigma``
    of :func:`homogeneity`, with tolerance :data:`OUTLIER_TOL`); ``value =
    sum_outlier N_c / N_kept``; ``extra`` has the cell count
    (``outlier_cells``), samples, threshold and the rating of
    :data:`OUTLIER_RATINGS`. detcal definition (docs/metrics.md).

    Definition: :func:`detcal.metrics.reference.outliers`, which this fast path must equal (tests/test_metrics_reference.py).
    """
    return ConfidenceMetric("outliers", _bins_arg(bins), sample_threshold, "drop", use_features=True)(p, y, features)


def nll(p: Any, y: Any) -> MetricResult:
    """Negative log-likelihood ``mean -[y log p + (1-y) log(1-p)]``, p clipped to ``[1e-12, 1-1e-12]``.

    The binary cross-entropy of the matched flag (as scikit-learn
    ``log_loss``, which clips with float eps instead).
    """
    return ConfidenceMetric("nll")(p, y)


def brier(p: Any, y: Any) -> MetricResult:
    """Brier score ``mean (p - y)^2`` (Brier 1950; scikit-learn ``brier_score_loss``)."""
    return ConfidenceMetric("brier")(p, y)


def sharpness(p: Any) -> MetricResult:
    """Sharpness ``Var(p) = mean p^2 - (mean p)^2`` (population variance, ddof 0; Gneiting et al. 2007)."""
    return ConfidenceMetric("sharpness")(p)


def overconfidence(p: Any, y: Any) -> MetricResult:
    """Over-confidence ``o = E[p | y = 0]``: mean score of the false positives (NaN if there are none)."""
    return ConfidenceMetric("overconfidence")(p, y)


def underconfidence(p: Any, y: Any) -> MetricResult:
    """Under-confidence ``u = E[1 - p | y = 1]``: mean missing score of the true positives (NaN if none)."""
    return ConfidenceMetric("underconfidence")(p, y)


def _bins_arg(bins: int | Sequence[int]) -> int | tuple[int, ...]:
    return int(bins) if np.ndim(bins) == 0 else tuple(int(b) for b in bins)  # type: ignore[arg-type,union-attr]
