"""Leave-one-image-out values of the binned confidence metrics, from cell totals and per-image sums.

The jackknife of the BCa interval (:mod:`detcal.metrics.bootstrap`) needs the
metric with each image (or block of images) left out in turn. Leaving image
``i`` out changes only the cells it has samples in: their sums become
``total - a_ic`` and every other cell keeps its total. So each value is the
full-sample value corrected over the image's own (image, cell) pairs, and the
whole jackknife costs one pass over the pairs (linear in the detections),
where recomputing every cell for every image would cost images x cells.

Per metric (``kept``, ``gap`` and ``N_c`` as in :mod:`detcal.metrics.confidence`):

* ECE, D-ECE, ECE_q: ``sum_c kept N_c gap^q`` and the denominator are sums
  over cells; the image's correction is ``sum over its pairs of (new term -
  old term)``;
* MCE: the largest kept gap among the cells the image does not touch (the
  first cell, in the order of decreasing gap, missing from its pairs) against
  the largest among the cells it does touch;
* homogeneity: the weighted mean and spread of the gap from the sums
  ``W = sum w``, ``A = sum w (gap - m0)``, ``B = sum w (gap - m0)^2`` about
  the full-sample mean ``m0`` (each corrected per image);
* outliers: the samples of untouched kept cells above the image's threshold
  (cells sorted by gap once, the threshold found by bisection with the
  same comparison ``gap - mean > 2 std + tol``), corrected over its pairs.

The values equal the metric recomputed without the image up to rounding
(tests/metrics/test_bootstrap_bca.py compares them with the generic jackknife to
1e-12); the outlier count compares each gap with a threshold whose last bits
may differ from the recomputed one, which can only matter for a gap within
rounding of the threshold.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.binning.cells import CellSums
from detcal.metrics.confidence_compute import OUTLIER_TOL, ratio, select
from detcal.utils.scoped import Scoped


@dataclass(frozen=True)
class CellLOO:
    """Per-cell quantities at the totals ([C]) and at each (unit, cell) pair with the unit left out ([P])."""

    n_t: np.ndarray
    kept_t: np.ndarray
    gap_t: np.ndarray
    n_l: np.ndarray
    kept_l: np.ndarray
    gap_l: np.ndarray
    unit: np.ndarray
    col: np.ndarray
    m: int
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Quantities derived once and read by several measures (the spread of :func:`_spread`)."""


def _cells(n: np.ndarray, sum_y: np.ndarray, sum_p: np.ndarray, threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, gap) per cell as :func:`detcal.metrics.confidence_compute.cell_summary` (gap 0 where empty)."""
    occupied = n > 0
    kept = occupied & (n >= threshold)
    safe = select(occupied, n, 1.0)
    gap = select(occupied, np.abs(sum_y / safe - sum_p / safe))
    return kept, gap


def cell_loo(total: CellSums, unit: np.ndarray, col: np.ndarray, pair: CellSums, m: int, threshold: int) -> CellLOO:
    """Cells at the totals ``total [C]`` and with unit ``unit[j]`` left out at pair ``j`` (``pair [P]`` its sums)."""
    n_t, y_t, p_t = (np.asarray(a, dtype=np.float64) for a in (total.count, total.sum_y, total.sum_p))
    kept_t, gap_t = _cells(n_t, y_t, p_t, threshold)
    n_l = n_t[col] - pair.count
    kept_l, gap_l = _cells(n_l, y_t[col] - pair.sum_y, p_t[col] - pair.sum_p, threshold)
    return CellLOO(n_t, kept_t, gap_t, n_l, kept_l, gap_l, unit, col, m)


_LOO = Scoped()
"""While :func:`loo_shared` is active, its items: ``[inputs, threshold, CellLOO]`` of the last
:func:`shared_cell_loo`."""


@contextmanager
def loo_shared() -> Iterator[None]:
    """Within the block, :func:`shared_cell_loo` with the same input objects and sample threshold computes the
    cells once and hands them to every measure that asks (the measures of one grid: ECE, ECE_q and MCE;
    D-ECE, homogeneity and outliers); the values are those of a fresh computation. Cleared on exit."""
    with _LOO.open():
        yield


def shared_cell_loo(
    total: CellSums, unit: np.ndarray, col: np.ndarray, pair: CellSums, m: int, threshold: int
) -> CellLOO:
    """:func:`cell_loo`, reused while :func:`loo_shared` is active for the same inputs (the same array
    objects, and the same number of units)."""
    if not _LOO.active:
        return cell_loo(total, unit, col, pair, m, threshold)
    inputs, shared = (total, unit, col, pair), _LOO.items
    if shared and shared[1] == (threshold, m) and all(a is b for a, b in zip(shared[0], inputs)):
        return shared[2]  # type: ignore[no-any-return]
    shared[:] = []  # the previous cells released first
    c = cell_loo(total, unit, col, pair, m, threshold)
    shared[:] = [inputs, (threshold, m), c]
    return c


def _per_unit(c: CellLOO, x: np.ndarray) -> np.ndarray:
    return np.bincount(c.unit, weights=x, minlength=c.m)


def _weights(c: CellLOO, drop: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The samples each cell counts with, ``w_t [C]`` at the totals and ``w_l [P]`` with the pair's unit left out
    (kept cells only under ``drop``, else every sample), ``w_t`` at each pair's cell ``[P]`` and the per-unit
    total ``[m]``: computed once per :class:`CellLOO` and policy (the ratios' denominator and the spread's
    weights are the same numbers: ECE and ECE_q, D-ECE, homogeneity and the outlier share read them)."""
    key = "weights_drop" if drop else "weights_all"
    if key not in c.memo:
        if drop:
            w_t, w_l = select(c.kept_t, c.n_t), select(c.kept_l, c.n_l)
        else:
            w_t, w_l = c.n_t, c.n_l
        w_o = w_t[c.col]
        c.memo[key] = (w_t, w_l, w_o, w_t.sum() + _per_unit(c, w_l - w_o))
    return c.memo[key]  # type: ignore[no-any-return]


def loo_sum_ratio(c: CellLOO, q: float, policy: str, power: bool) -> np.ndarray:
    """ECE / D-ECE (``power=False``) or ECE_q (``power=True``) with each unit left out ``[m]``."""
    if power:
        term_t = select(c.kept_t, c.n_t * c.gap_t**q)
        term_l = select(c.kept_l, c.n_l * c.gap_l**q)
    else:
        term_t = select(c.kept_t, c.n_t * c.gap_t)
        term_l = select(c.kept_l, c.n_l * c.gap_l)
    num = term_t.sum() + _per_unit(c, term_l - term_t[c.col])
    den = _weights(c, policy == "drop")[3]
    v = ratio(num, den)
    return v ** (1.0 / q) if power else v


def _unit_starts(unit: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Start of each unit's pairs (pairs sorted by unit) and the pair count of each unit ``[m]``."""
    counts = np.bincount(unit, minlength=m)
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64), counts


def loo_max_gap(c: CellLOO) -> np.ndarray:
    """MCE with each unit left out ``[m]``: the larger of the untouched and the touched cells' largest kept gap."""
    key_t = select(c.kept_t, c.gap_t, -np.inf)
    order = np.argsort(-key_t, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    sorted_key = np.append(key_t[order], -np.inf)
    # pairs by (unit, rank of their cell): the first rank missing from a unit's pairs is its untouched maximum
    r = rank[c.col]
    # each (unit, cell) pair once: the keys unit * C + rank are distinct, so one sort of them gives lexsort's order
    by = np.argsort(c.unit.astype(np.int64) * len(order) + r, kind="stable")
    starts, counts = _unit_starts(c.unit, c.m)
    pos = np.arange(len(by)) - np.repeat(starts, counts)
    first = np.where(r[by] != pos, pos, counts[c.unit[by]])
    missing = np.zeros(c.m, dtype=np.int64)
    has = counts > 0
    if len(by):
        missing[has] = np.minimum.reduceat(first, starts[has])
    untouched = sorted_key[missing]
    touched = np.full(c.m, -np.inf)
    if len(by):
        touched[has] = np.maximum.reduceat(select(c.kept_l, c.gap_l, -np.inf)[by], starts[has])
    best = np.maximum(untouched, touched)
    return np.where(np.isfinite(best), best, np.nan)


def _spread(c: CellLOO) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per unit: kept samples ``W``, the weighted mean and std of the gap, and the totals' weights ``w_t``
    (computed once per :class:`CellLOO`: homogeneity and the outlier share both read it)."""
    if "spread" not in c.memo:
        c.memo["spread"] = _spread_of(c)
    return c.memo["spread"]  # type: ignore[no-any-return]


def _spread_of(c: CellLOO) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    w_t, w_l, w_o, w = _weights(c, True)
    big_w = w_t.sum()
    m0 = float(np.sum(w_t * c.gap_t) / big_w) if big_w > 0 else 0.0
    d_t, d_l = c.gap_t - m0, c.gap_l - m0
    d_o = d_t[c.col]
    a = np.sum(w_t * d_t) + _per_unit(c, w_l * d_l - w_o * d_o)
    b = np.sum(w_t * d_t * d_t) + _per_unit(c, w_l * d_l * d_l - w_o * d_o**2)
    shift = ratio(a, w)
    mean = m0 + shift
    std = np.sqrt(np.maximum(ratio(b, w) - shift * shift, 0.0))
    return w, mean, std, w_t


def loo_homogeneity(c: CellLOO, variance: bool) -> np.ndarray:
    """Homogeneity (the weighted std of the gap over kept cells; its square for ``variance``) per unit left out."""
    w, _, std, _ = _spread(c)
    v = np.where(w > 0, std, np.nan)
    return v * v if variance else v


def _first_above(sorted_gap: np.ndarray, mean: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per unit, the first index of ``sorted_gap`` with ``gap - mean > limit`` (monotone in gap: bisection)."""
    lo = np.zeros(len(mean), dtype=np.int64)
    hi = np.full(len(mean), len(sorted_gap), dtype=np.int64)
    padded = np.append(sorted_gap, np.inf)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        above = (padded[mid] - mean > limit) & (lo < hi)
        hi = np.where(above, mid, hi)
        lo = np.where(above | (lo >= hi), lo, mid + 1)
    return lo


def loo_outliers(c: CellLOO) -> np.ndarray:
    """Outlier share (samples of kept cells with ``gap - mean > 2 std + tol`` over kept samples) per unit left out."""
    w, mean, std, w_t = _spread(c)
    limit = 2.0 * std + OUTLIER_TOL
    kept_cells = np.flatnonzero(c.kept_t)
    order = kept_cells[np.argsort(c.gap_t[kept_cells], kind="stable")]
    suffix = np.append(np.cumsum(w_t[order][::-1])[::-1], 0.0)
    with np.errstate(invalid="ignore"):
        all_above = suffix[_first_above(c.gap_t[order], np.nan_to_num(mean), np.nan_to_num(limit))]
        mu, lim = mean[c.unit], limit[c.unit]
        old = select(c.kept_t[c.col] & (c.gap_t[c.col] - mu > lim), _weights(c, True)[2])
        new = select(c.kept_l & (c.gap_l - mu > lim), c.n_l)
    return ratio(all_above + _per_unit(c, new - old), w)
