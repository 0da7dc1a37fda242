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
classes, bootstrap replicates) through the measure's entry in the registry
:data:`detcal.metrics.measures.MEASURES`. The public functions (:func:`ece`,
:func:`dece_kueppers`, ...) are thin wrappers;
:func:`detcal.metrics.confidence_suite.confidence_metrics` computes the suite
of every registered measure from shared statistics.

Definitions: each binned metric is written out plainly, as its formula, in
:mod:`detcal.metrics.reference` (``ece``, ``ece_q``, ``mce``, ``dece``,
``homogeneity``, ``outliers``); the fast path here must equal it
(tests/metrics/test_metrics_reference.py).

Results are :class:`detcal.core.types.MetricResult`; an empty sample or an
undefined quantity gives ``value = NaN`` with ``extra["note"]``, never an
exception.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.cells import CellStats, CellSums, cell_stats, pair_sums
from detcal.binning.edges import EDGE_RULES, BinGrid
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.confidence_compute import cell_summary
from detcal.metrics.confidence_loo import shared_cell_loo
from detcal.metrics.measures import HOMOGENEITY_RATINGS, OUTLIER_RATINGS, Measure, get

POLICIES: tuple[str, ...] = ("drop", "netcal")
"""Sparse-cell policies."""

SPARSE_RATIO: int = 10
"""Warn when the number of cells exceeds ``samples / SPARSE_RATIO``."""

__all__ = [
    "HOMOGENEITY_RATINGS",
    "OUTLIER_RATINGS",
    "POLICIES",
    "SPARSE_RATIO",
    "ConfidenceMetric",
    "SparseCellsWarning",
    "brier",
    "dece",
    "dece_kueppers",
    "ece",
    "ece_q",
    "homogeneity",
    "mce",
    "nll",
    "outliers",
    "overconfidence",
    "sharpness",
    "underconfidence",
]


class SparseCellsWarning(UserWarning):
    """More cells than samples/10: the binned estimate is dominated by sparse cells."""


def _checked_bins(bins: Any) -> int | tuple[int, ...]:
    """``bins`` as an int or a tuple of ints (a :class:`BinGrid` stays one), each >= 1."""
    if isinstance(bins, (bool, float)) or (np.ndim(bins) == 0 and not isinstance(bins, (int, np.integer))):
        raise DetcalInputError(f"bins must be an int or a list of ints, got {bins!r}", field="bins")
    if np.ndim(bins) == 0:
        b: int | tuple[int, ...] = int(bins)
    else:
        b = bins if isinstance(bins, BinGrid) else tuple(int(v) for v in bins)
    if min(np.atleast_1d(b)) < 1:
        raise DetcalInputError(f"every bin count must be >= 1, got {bins!r}", field="bins")
    return b


@dataclass(frozen=True)
class ConfidenceMetric:
    """One confidence-calibration measure with its parameters; callable as ``m(p, y, features=None)``.

    ``name`` is a key of the registry :data:`detcal.metrics.measures.MEASURES`
    (its entry defines the value, :attr:`entry`); ``bins`` an int, a
    per-feature tuple (confidence first) or a :class:`~detcal.binning.BinGrid`
    built once from a configuration (passed down as it is);
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
    bins: int | Sequence[int] = 15
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
        get(self.name)  # a registered measure
        if self.policy not in POLICIES:
            raise DetcalInputError(f"policy must be one of {POLICIES}, got {self.policy!r}", field="policy")
        object.__setattr__(self, "bins", _checked_bins(self.bins))
        if int(self.sample_threshold) != self.sample_threshold or self.sample_threshold < 1:
            raise DetcalInputError(
                f"sample_threshold must be an integer >= 1, got {self.sample_threshold!r}", field="sample_threshold"
            )
        object.__setattr__(self, "sample_threshold", int(self.sample_threshold))
        if not (np.isfinite(self.q) and self.q >= 1.0):
            raise DetcalInputError(f"q must be a finite number >= 1, got {self.q!r}", field="q")

    # -- grid -------------------------------------------------------------
    @property
    def entry(self) -> Measure:
        """The registry entry of :attr:`name` (:mod:`detcal.metrics.measures`)."""
        return get(self.name)

    @property
    def binned(self) -> bool:
        return self.entry.binned

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
        """Variant label recorded in results: the policy, plus ``+edges=...`` / the measure's own suffix."""
        v = self.policy
        if (
            self.binned
            and self.edge_rule is not None
            and self.edge_rule != ("netcal" if self.policy == "netcal" else "floor")
        ):
            v += f"+edges={self.edge_rule}"
        entry = self.entry
        if entry.binned and entry.variant is not None:
            v += entry.variant(self)
        return v

    def grid_inputs(self, features: ArrayLike | None) -> tuple[Any, int | Sequence[int]]:
        """Features entering the grid and the bins (a cell-free metric uses one cell)."""
        if not self.binned:
            return None, 1
        if not self.use_features or features is None:
            return None, self.bins
        return features, self.bins

    def grid_key(
        self, p: ArrayLike | None = None, y: ArrayLike | None = None, features: ArrayLike | None = None
    ) -> tuple[BinGrid, str, bool]:
        """Metrics with equal keys share their cell statistics (same call shape as ``__call__``)."""
        f, b = self.grid_inputs(features)
        n_feat = 1 + (0 if f is None else np.shape(f)[1] if np.ndim(f) == 2 else 1)
        try:
            return (BinGrid.of(b, n_feat), self.edges, f is not None)
        except ValueError as exc:
            raise DetcalInputError(f"{exc} (confidence first)", field="bins") from None

    @property
    def required_stats(self) -> tuple[str, ...]:
        """The float statistics (:data:`detcal.binning.FLOAT_STATS`) this metric reads."""
        return self.entry.reads

    # -- _update ----------------------------------------------------------
    def stats(
        self,
        p: ArrayLike,
        y: ArrayLike | None = None,
        features: ArrayLike | None = None,
        *,
        groups: ArrayLike | None = None,
        n_groups: int | None = None,
        which: Sequence[str] | None = None,
    ) -> CellStats:
        """Per-cell statistics on this metric's grid (:func:`detcal.binning.cell_stats`).

        ``which``: the float statistics to compute (default: only those this
        metric reads, :attr:`required_stats`; a suite sharing the stats between
        metrics asks for all of them).
        """
        f, b = self.grid_inputs(features)
        return cell_stats(
            p,
            self.y_or_zeros(p, y),
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
        p: ArrayLike,
        y: ArrayLike | None = None,
        features: ArrayLike | None = None,
        *,
        fields: Sequence[str] | None = None,
        cells: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, CellSums, int]:
        """Float sums per occupied (image, cell) pair (:func:`detcal.binning.pair_sums`; ``fields`` and
        ``cells``, the samples' cells on this grid already computed, as there)."""
        f, b = self.grid_inputs(features)
        if cells is not None:  # the whole grid, confidence first (the features are not read)
            f, b = None, self.grid_key(None, None, features)[0]
        return pair_sums(group_index, p, self.y_or_zeros(p, y), f, b, edges=self.edges, fields=fields, cells=cells)

    @property
    def value_fields(self) -> tuple[str, ...]:
        """The :class:`CellSums` fields :meth:`values` reads (the bootstrap carries only these)."""
        return self.entry.value_fields

    def leave_one_out(
        self, total: CellSums, unit: np.ndarray, col: np.ndarray, pair: CellSums, m: int
    ) -> np.ndarray | None:
        """Values ``[m]`` with each unit (image or block of images) left out, for the jackknife.

        ``total [C]``: the cell sums of the whole sample; ``pair [P]``: the
        sums of unit ``unit[j]`` in cell ``col[j]``, pairs sorted by unit.
        A measure with a ``leave_one_out`` in its entry corrects the
        full-sample value over each unit's own pairs
        (:mod:`detcal.metrics.confidence_loo`, linear in the pairs); the
        others return ``None`` (the dense ``total - unit`` of
        :func:`detcal.metrics.image_cells.leave_out_values` is used: for a
        cell-free measure, one cell, it is as cheap).
        """
        loo = self.entry.leave_one_out
        if not self.binned or loo is None:
            return None
        return loo(shared_cell_loo(total, unit, col, pair, m, self.sample_threshold), self)

    def y_or_zeros(self, p: ArrayLike, y: ArrayLike | None) -> ArrayLike:
        """``y`` (a measure that does not read the matched flag, e.g. sharpness, accepts ``None``)."""
        if y is None:
            if self.entry.needs_y:
                raise DetcalInputError(f"{self.name} needs the matched flags y", field="y")
            return np.zeros(np.shape(p), dtype=bool)
        return y

    # -- _compute ---------------------------------------------------------
    def values(self, sums: CellSums) -> np.ndarray:
        """Metric values [...] from cell sums [..., C] (NaN where undefined).

        Per replicate/class, the value of the measure's reference (:mod:`detcal.metrics.reference`).
        """
        return self.entry.values(sums, self)

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

    def __call__(self, p: ArrayLike, y: ArrayLike | None = None, features: ArrayLike | None = None) -> MetricResult:
        return self.result(self.stats(p, y, features))

    # -- result assembly --------------------------------------------------
    def result_params(self, stats: CellStats) -> dict[str, Any]:
        """The parameters a result records: ``n``, the grid of a binned measure, the measure's own."""
        params: dict[str, Any] = {"n": int(stats.n)}
        if self.binned:
            params.update(
                bins=list(stats.bins),
                n_features=len(stats.bins),
                sample_threshold=self.sample_threshold,
                policy=self.policy,
                edges=stats.edges,
            )
        own = self.entry.params
        if own is not None:
            params.update(own(self))
        return params

    def _binned_result(self, stats: CellStats, sums: CellSums | None = None) -> MetricResult:
        s = stats.sums() if sums is None else sums
        summ = cell_summary(s, self.sample_threshold, self.policy)
        value = float(self.values(s))
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
        describe = self.entry.describe
        if describe is not None:
            more, columns = describe(summ, s, value, self)
            extra.update(more)
            table.update(columns)
        return MetricResult(
            name=self.name,
            value=value,
            variant=self.variant,
            params=self.result_params(stats),
            table=table,
            extra=extra,
        )

    def _cell_free_result(self, stats: CellStats, sums: CellSums | None = None) -> MetricResult:
        value = float(self.values(stats.total().sums() if sums is None else sums))
        n = int(stats.n)
        n1 = int(np.sum(stats.sum_y))
        extra: dict[str, Any] = {"n_matched": n1, "n_unmatched": n - n1}
        entry = self.entry
        note = "empty sample: no detections to evaluate" if n == 0 else entry.note(n, n1) if entry.note else None
        if note:
            extra["note"] = note
        variant = entry.variant(self) if entry.variant is not None else ""
        return MetricResult(name=self.name, value=value, variant=variant, params=self.result_params(stats), extra=extra)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def ece(
    p: ArrayLike,
    y: ArrayLike,
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

    Definition: :func:`detcal.metrics.reference.ece`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("ece", bins, sample_threshold, policy, edge_rule=edges)(p, y)


def ece_q(
    p: ArrayLike,
    y: ArrayLike,
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

    Definition: :func:`detcal.metrics.reference.ece_q`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("ece_q", bins, sample_threshold, policy, q=float(q), edge_rule=edges)(p, y)


def mce(
    p: ArrayLike,
    y: ArrayLike,
    bins: int = 15,
    sample_threshold: int = 1,
    *,
    policy: str = "drop",
    edges: str | None = None,
) -> MetricResult:
    """Maximum calibration error ``max_c gap(c)`` over kept cells (Naeini et al. 2015).

    Both policies give the same value (netcal's sparse cells have gap 0), but
    ``policy="netcal"`` selects netcal's edge rule.

    Definition: :func:`detcal.metrics.reference.mce`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("mce", bins, sample_threshold, policy, edge_rule=edges)(p, y)


def dece_kueppers(
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None = None,
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

    Definition: :func:`detcal.metrics.reference.dece`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("dece", bins, sample_threshold, policy, use_features=True, edge_rule=edges)(p, y, features)


dece = dece_kueppers
"""Deprecated name of :func:`dece_kueppers` (kept for existing code; the other D-ECE conventions are
:func:`detcal.metrics.laece.dece_kuzucu` and :func:`detcal.metrics.uq_detr.dece_uq_detr`)."""


def homogeneity(
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None = None,
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

    Definition: :func:`detcal.metrics.reference.homogeneity`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("homogeneity", bins, sample_threshold, "drop", use_features=True, spread=spread)(
        p, y, features
    )


def outliers(
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None = None,
    bins: int | Sequence[int] = 5,
    sample_threshold: int = 8,
) -> MetricResult:
    """Share of kept samples that lie in outlier cells of the D-ECE grid.

    A kept cell is an outlier when ``gap(c) > mu + 2 sigma`` (``mu``, ``sigma``
    of :func:`homogeneity`, with tolerance :data:`detcal.metrics.confidence_compute.OUTLIER_TOL`); ``value =
    sum_outlier N_c / N_kept``; ``extra`` has the cell count
    (``outlier_cells``), samples, threshold and the rating of
    :data:`OUTLIER_RATINGS`. detcal definition (docs/metrics.md).

    Definition: :func:`detcal.metrics.reference.outliers`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    return ConfidenceMetric("outliers", bins, sample_threshold, "drop", use_features=True)(p, y, features)


def nll(p: ArrayLike, y: ArrayLike) -> MetricResult:
    """Negative log-likelihood ``mean -[y log p + (1-y) log(1-p)]``, p clipped to ``[1e-12, 1-1e-12]``.

    The binary cross-entropy of the matched flag (as scikit-learn
    ``log_loss``, which clips with float eps instead).
    """
    return ConfidenceMetric("nll")(p, y)


def brier(p: ArrayLike, y: ArrayLike) -> MetricResult:
    """Brier score ``mean (p - y)^2`` (Brier 1950; scikit-learn ``brier_score_loss``)."""
    return ConfidenceMetric("brier")(p, y)


def sharpness(p: ArrayLike) -> MetricResult:
    """Sharpness ``Var(p) = mean p^2 - (mean p)^2`` (population variance, ddof 0; Gneiting et al. 2007)."""
    return ConfidenceMetric("sharpness")(p)


def overconfidence(p: ArrayLike, y: ArrayLike) -> MetricResult:
    """Over-confidence ``o = E[p | y = 0]``: mean score of the false positives (NaN if there are none)."""
    return ConfidenceMetric("overconfidence")(p, y)


def underconfidence(p: ArrayLike, y: ArrayLike) -> MetricResult:
    """Under-confidence ``u = E[1 - p | y = 1]``: mean missing score of the true positives (NaN if none)."""
    return ConfidenceMetric("underconfidence")(p, y)
