"""Split conformal box intervals per coordinate (docs/calibration.md#conformal-box-intervals), numpy/scipy only.

Per coordinate k (tx, ty, tw, th in delta space; cx, cy, w, h in pixels; or
the pixel box edges x1, y1, x2, y2 of :func:`detcal.metrics.regression.coverage.edge_sample`)
and calibration sample t = 1..n:

* nonconformity score ``s_tk = |y_tk - mu_tk| / sigma_tk`` (``score="normalised"``,
  adaptive intervals) or ``s_tk = |y_tk - mu_tk|`` (``score="absolute"``, one
  width for every box);
* per-coordinate miscoverage ``a_k = alpha`` or, with ``bonferroni=True``,
  ``a_k = alpha / K`` so that all K coordinates of a box are covered together
  with probability ``>= 1 - alpha`` (union bound);
* the finite-sample quantile ``q_k`` = the ``m``-th smallest score,
  ``m = ceil((n + 1)(1 - a_k))`` (the empirical quantile at level ``m / n``),
  which guarantees ``P(y in [mu - q sigma, mu + q sigma]) >= 1 - a_k`` for an
  exchangeable new sample (and ``<= 1 - a_k + 1/(n+1)`` without ties);
* interval ``[mu - q_k sigma, mu + q_k sigma]`` (or ``mu +- q_k``).

Mondrian (``groups="class"``): one quantile per class, from that class's own
calibration samples (coverage holds within each class). A class with fewer
than ``ceil(1/a_k) - 1`` samples (``m > n``: the guarantee needs an infinite
interval) and a class unseen at fit use the pooled quantile; the classes
that did are ``fallback_groups_`` (and in ``fit_report_["notes"]``). When
even the pooled sample is that small the largest score is used, the report
is not ``ok`` (a warning) and its message says the guarantee is lost.

As a recalibrator the intervals are carried by a Gaussian: ``mu' = mu`` and
``sigma' = half-width / z_k`` with ``z_k = Phi^-1(1 - a_k / 2)``, so the
central ``1 - a_k`` interval of ``N(mu', sigma'^2)`` is the conformal
interval exactly (other levels follow the Gaussian shape); the written
results file carries that sigma. :meth:`ConformalBoxIntervals.interval`
returns the interval itself.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import ndtri

from detcal.calibration.base import RegressionCalibrator
from detcal.calibration.report import make_report
from detcal.core.errors import DetcalInputError

__all__ = ["ConformalBoxIntervals", "conformal_quantile", "conformal_rank"]

_SCORES = ("normalised", "absolute")
_GROUPS = ("pooled", "class")
_SPACES = (None, "edges")


def conformal_rank(n: int, alpha: float) -> int:
    """``m = ceil((n + 1)(1 - alpha))``: the rank (1-based) of the conformal quantile among n scores.

    Computed in exact rational arithmetic on the simplest fraction within 1e-12
    of ``alpha`` (0.1 -> 1/10, 1/3 -> 1/3): ``(n+1)(1-alpha)`` is often an
    integer that float rounding would push up by one.
    """
    a = Fraction(float(alpha)).limit_denominator(10**12)
    return int(math.ceil((n + 1) * (1 - a)))


def conformal_quantile(scores: np.ndarray, alpha: Any, axis: int = 0) -> np.ndarray:
    """Finite-sample conformal quantile of ``scores`` along ``axis``: the ``m``-th smallest, ``m = ceil((n+1)(1-a))``.

    ``alpha`` is a scalar or one value per remaining column (broadcast over the
    other axes). Where ``m > n`` the result is ``+inf`` (no finite interval
    has the guarantee). Batched inputs (``[B,n,K]`` with ``axis=1``) are sorted
    once: this is the vectorised path of the coverage tests.
    """
    s = np.sort(np.asarray(scores, dtype=np.float64), axis=axis)
    n = s.shape[axis]
    s = np.moveaxis(s, axis, -1)  # [..., n]
    a = np.broadcast_to(np.asarray(alpha, dtype=np.float64), s.shape[:-1])
    ranks = np.vectorize(lambda v: conformal_rank(n, float(v)), otypes=[np.int64])(a) if a.size else a.astype(int)
    idx = np.clip(ranks - 1, 0, max(n - 1, 0))
    out = np.take_along_axis(s, idx[..., None], axis=-1)[..., 0] if n else np.full(a.shape, np.inf)
    return np.where(ranks > n, np.inf, out)


class ConformalBoxIntervals(RegressionCalibrator):
    """Split conformal prediction intervals per box coordinate (Timans et al. 2024's
    "box-level" intervals; Papadopoulos et al. 2002, Lei et al. 2018 for the normalised score).

    Hyper-parameters: ``alpha`` (miscoverage, default 0.1), ``score``
    (``"normalised"`` |y-mu|/sigma, or ``"absolute"`` |y-mu|; with ``sigma=None``
    at fit the score is absolute), ``groups`` (``"pooled"`` or ``"class"``:
    Mondrian per category, the categories passed as ``groups=`` to
    :meth:`fit` and :meth:`transform`), ``bonferroni`` (``a_k = alpha / K``
    for box-level coverage), ``space`` (``None``: the coordinates the caller
    gives, in detcal-calibrate those of ``regression.space``; ``"edges"``:
    detcal-calibrate fits and evaluates it on the pixel box edges x1, y1, x2,
    y2 of :func:`detcal.metrics.regression.coverage.edge_sample`). Learned: ``alpha_coord_ [K]``, ``z_ [K]``,
    ``quantile_ [K]`` (pooled), ``group_ids_ [G]``, ``group_quantile_ [G,K]``,
    ``group_n_ [G]``, ``fallback_groups_``, ``score_`` (the score used). See the module docstring.
    """

    uses_groups: bool = True

    def __init__(
        self,
        alpha: float = 0.1,
        score: str = "normalised",
        groups: str = "pooled",
        bonferroni: bool = False,
        space: str | None = None,
    ) -> None:
        self.alpha = alpha
        self.score = score
        self.groups = groups
        self.bonferroni = bonferroni
        self.space = space

    # ------------------------------------------------------------------ checks

    def _check_params(self) -> None:
        if not (isinstance(self.alpha, (int, float)) and 0.0 < float(self.alpha) < 1.0):
            raise DetcalInputError(f"alpha must lie in (0, 1), got {self.alpha!r}", field="alpha")
        if self.score not in _SCORES:
            raise DetcalInputError(f"score must be one of {_SCORES}, got {self.score!r}", field="score")
        if self.groups not in _GROUPS:
            raise DetcalInputError(f"groups must be one of {_GROUPS}, got {self.groups!r}", field="groups")
        if self.space not in _SPACES:
            raise DetcalInputError(f"space must be null or 'edges', got {self.space!r}", field="space")

    @staticmethod
    def _groups_array(groups: Any, n: int) -> np.ndarray:
        g = np.asarray(groups)
        if g.ndim != 1 or len(g) != n:
            raise DetcalInputError(f"groups must be one label per sample ({n}), got shape {g.shape}", field="groups")
        if g.dtype.kind not in "iu":
            raise DetcalInputError("groups must be integer category ids", field="groups")
        return g.astype(np.int64)

    # ------------------------------------------------------------------ fit

    def fit(self, mu: Any, sigma: Any, y: Any, groups: Any = None) -> ConformalBoxIntervals:
        """Learn the conformal quantiles on a calibration split; ``sigma=None`` means absolute residual scores.

        ``groups [S]`` (integer category ids) is needed with ``groups="class"``
        and ignored with ``"pooled"``.
        """
        self._check_params()
        self._no_sigma = sigma is None
        if sigma is None:
            sigma = np.ones_like(np.asarray(mu, dtype=np.float64))
        n = len(np.asarray(mu))
        self._fit_groups = None if self.groups == "pooled" else self._need_groups(groups, n)
        super().fit(mu, sigma, y)
        self._fit_groups = None
        return self

    def _need_groups(self, groups: Any, n: int) -> np.ndarray:
        if groups is None:
            raise DetcalInputError('groups="class" needs the category of each sample: pass groups=', field="groups")
        return self._groups_array(groups, n)

    def _fit(self, mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> None:
        n, k = mu.shape
        absolute = self.score == "absolute" or self._no_sigma
        scores = np.abs(y - mu) if absolute else np.abs(y - mu) / sigma
        a = float(self.alpha) / (k if self.bonferroni else 1)
        self.score_ = "absolute" if absolute else "normalised"
        self.alpha_coord_ = np.full(k, a)
        self.z_ = np.full(k, float(ndtri(1.0 - a / 2.0)))
        q = conformal_quantile(scores, self.alpha_coord_, axis=0)
        too_few = not np.all(np.isfinite(q))
        if too_few:
            q = scores.max(axis=0)
        self.quantile_ = q
        gids, gq, gn, fallback = self._fit_mondrian(scores, a, q)
        self.group_ids_, self.group_quantile_, self.group_n_ = gids, gq, gn
        self.fallback_groups_ = fallback
        msg = (
            f"split conformal, {self.score_} score, per-coordinate miscoverage {a:g}"
            f"{' (Bonferroni over ' + str(k) + ' coordinates)' if self.bonferroni else ''}, {self.groups}"
        )
        if too_few:
            msg = (
                f"only {n} calibration samples: the conformal rank {conformal_rank(n, a)} exceeds them, the largest "
                f"score is used and the coverage guarantee is lost ({msg})"
            )
        notes = [
            f"class {int(g)}: {int(c)} calibration samples, fewer than the conformal rank; pooled quantile used"
            for g, c in zip(gids[np.isin(gids, fallback)], gn[np.isin(gids, fallback)])
        ]
        self.fit_report_ = make_report(converged=not too_few, message=msg, notes=notes)

    def _fit_mondrian(
        self, scores: np.ndarray, a: float, pooled: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per-class quantiles ``[G,K]``, class ids and counts, and the classes that fell back to ``pooled``."""
        k = scores.shape[1]
        if self._fit_groups is None:
            return np.zeros(0, np.int64), np.zeros((0, k)), np.zeros(0, np.int64), np.zeros(0, np.int64)
        gids, inv, counts = np.unique(self._fit_groups, return_inverse=True, return_counts=True)
        quant = np.empty((len(gids), k))
        order = np.argsort(inv, kind="stable")
        starts = np.concatenate(([0], np.cumsum(counts)))
        s_sorted = scores[order]
        for gi in range(len(gids)):  # one pass per class (not per detection)
            quant[gi] = conformal_quantile(s_sorted[starts[gi] : starts[gi + 1]], a, axis=0)
        small = ~np.all(np.isfinite(quant), axis=1)
        quant[small] = pooled
        return gids.astype(np.int64), quant, counts.astype(np.int64), gids[small].astype(np.int64)

    # ------------------------------------------------------------------ apply

    def _quantiles_for(self, n: int, groups: Any) -> np.ndarray:
        """Quantile ``[S,K]`` of each sample: its class's (Mondrian) or the pooled one."""
        if self.groups == "pooled" or len(self.group_ids_) == 0:
            return np.broadcast_to(self.quantile_, (n, len(self.quantile_)))
        g = self._need_groups(groups, n)
        pos = np.searchsorted(self.group_ids_, g)
        pos_c = np.clip(pos, 0, len(self.group_ids_) - 1)
        known = self.group_ids_[pos_c] == g
        return np.where(known[:, None], self.group_quantile_[pos_c], self.quantile_[None, :])

    def _half_width(self, mu: Any, sigma: Any, groups: Any) -> tuple[np.ndarray, np.ndarray, bool]:
        if sigma is None:
            sigma = np.ones_like(np.asarray(mu, dtype=np.float64))
        mu_a, sg_a, one_d = self._prepare(mu, sigma)
        q = self._quantiles_for(len(mu_a), groups)
        half = q if self.score_ == "absolute" else q * sg_a
        return mu_a, np.ascontiguousarray(half, dtype=np.float64), one_d

    def interval(self, mu: Any, sigma: Any = None, groups: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """The conformal interval ``(lower, upper)``, each with the shape of ``mu``."""
        mu_a, half, one_d = self._half_width(mu, sigma, groups)
        lo, hi = mu_a - half, mu_a + half
        return (lo[:, 0], hi[:, 0]) if one_d else (lo, hi)

    def transform(self, mu: Any, sigma: Any = None, groups: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, half-width / z)``: the Gaussian whose central ``1 - a_k`` interval is the conformal one."""
        mu_a, half, one_d = self._half_width(mu, sigma, groups)
        sg = np.maximum(half / self.z_, np.finfo(np.float64).tiny)  # a zero score would give sigma' = 0
        return (mu_a[:, 0].copy(), sg[:, 0]) if one_d else (mu_a.copy(), sg)

    def _transform(self, mu: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.transform(mu, sigma)
