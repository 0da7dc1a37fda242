"""The ``_compute`` stages of the confidence measures: values [...] from cell sums [..., C] (vectorised over leading axes).

Each built-in measure of :mod:`detcal.metrics.measures` is defined here as one
function ``values(sums, settings) -> [...]`` of the mergeable cell sums
(:class:`~detcal.binning.cells.CellSums`, cells on the last axis; leading axes
are classes or bootstrap replicates) and the measure's settings (sample
threshold, sparse-cell policy, ``q``, ``spread``:
:class:`~detcal.metrics.measures.MeasureSettings`). The cell-free measures read
the sums over cells (``sums.total()``, one cell). Each function equals the
function of the same name in :mod:`detcal.metrics.reference` (the formula).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import numpy as np

from detcal.binning.cells import CellSums
from detcal.utils.scoped import Scoped

OUTLIER_TOL: float = 1e-12
"""A cell is an outlier when ``gap - mean_gap > 2 * std + OUTLIER_TOL`` (the
tolerance keeps equal gaps from becoming outliers through rounding)."""


class MeasureSettings(Protocol):
    """The parameters a measure's definition reads (:class:`~detcal.metrics.confidence.ConfidenceMetric` has them)."""

    @property
    def sample_threshold(self) -> int: ...

    @property
    def policy(self) -> str: ...

    @property
    def q(self) -> float: ...

    @property
    def spread(self) -> str: ...


_SUMMARIES = Scoped()
"""While :func:`summaries_shared` is active, its items: the last summaries, each ``[sums, sample_threshold, policy,
summary, moments]``, the most recent first (two: a grid's class-agnostic sums and its per-class sums
alternate, and the measures of one grid come one after the other)."""
_KEEP = 2


@contextmanager
def summaries_shared() -> Iterator[None]:
    """Within the block, :func:`cell_summary` (and :func:`gap_moments` of it) of the same :class:`CellSums`
    object with the same settings is computed once and handed to every measure that asks (the measures of one
    grid read the same per-cell summary; the values are those of a fresh computation). Cleared on exit."""
    with _SUMMARIES.open():
        yield


def _shared_entry(s: CellSums, sample_threshold: int, policy: str) -> list[Any] | None:
    for e in _SUMMARIES.items:
        if e[0] is s and e[1] == sample_threshold and e[2] == policy:
            return e
    return None


def cell_summary(s: CellSums, sample_threshold: int, policy: str) -> dict[str, np.ndarray]:
    """Per-cell precision, confidence, gap (``gap0``: ``np.nan_to_num`` of it, 0 in empty cells) and the kept
    mask, [..., C]; N and the denominator [...]."""
    if not _SUMMARIES.active:
        return _cell_summary(s, sample_threshold, policy)
    e = _shared_entry(s, sample_threshold, policy)
    if e is None:
        del _SUMMARIES.items[_KEEP - 1 :]  # the oldest released first
        e = [s, sample_threshold, policy, _cell_summary(s, sample_threshold, policy), None]
    else:
        del _SUMMARIES.items[next(i for i, x in enumerate(_SUMMARIES.items) if x is e)]
    _SUMMARIES.items.insert(0, e)
    return e[3]  # type: ignore[no-any-return]


def select(mask: np.ndarray, x: Any, other: float = 0.0) -> np.ndarray:
    """``np.where(mask, x, other)`` for a boolean ``mask`` and float64 ``x`` of its shape, by selecting bits: the
    64-bit pattern of ``x`` where ``mask`` holds, that of ``other`` elsewhere, in the memory order ``np.where``
    gives (both keep the inputs' order). The same array element for element, without the branch per element
    ``np.where`` takes (3-4 ns an element when the mask is irregular, as cell occupancy is, against well under 1
    ns here). Any other shapes or types go to ``np.where`` itself."""
    m = np.asarray(mask)
    a = np.asarray(x)
    if m.dtype != np.bool_ or a.dtype != np.float64 or m.shape != a.shape or a.ndim == 0:
        return np.asarray(np.where(mask, x, other))
    on = np.negative(m.view(np.int8))  # 0 or -1: every bit set where mask holds (sign-extended when widened)
    bits = np.bitwise_and(a.view(np.int64), on)
    fill = int(np.float64(other).view(np.int64))
    if fill:
        np.bitwise_or(bits, np.bitwise_and(np.invert(on, out=on), np.int64(fill)), out=bits)
    return bits.view(np.float64)


def nan_to_zero(gap: np.ndarray) -> np.ndarray:
    """``np.nan_to_num(gap)`` of a float64 array: NaN -> 0 by :func:`select` (an array holding an infinity goes to
    ``np.nan_to_num`` itself); the same array either way."""
    g = np.asarray(gap)
    if g.dtype != np.float64 or g.ndim == 0:
        return np.asarray(np.nan_to_num(gap))
    out = select(~np.isnan(g), g)
    return np.asarray(np.nan_to_num(gap)) if np.isinf(out).any() else out


def _cell_summary(s: CellSums, sample_threshold: int, policy: str) -> dict[str, np.ndarray]:
    n_c = np.asarray(s.count, dtype=np.float64)
    occupied = n_c > 0
    kept = occupied & (n_c >= sample_threshold)
    safe = select(occupied, n_c, 1.0)
    prec = select(occupied, s.sum_y / safe, np.nan)
    conf = select(occupied, s.sum_p / safe, np.nan)
    gap = np.abs(prec - conf)
    n = n_c.sum(axis=-1)
    n_kept = select(kept, n_c).sum(axis=-1)
    denom = n_kept if policy == "drop" else n
    return {
        "n_c": n_c,
        "occupied": occupied,
        "kept": kept,
        "prec": prec,
        "conf": conf,
        "gap": gap,
        "gap0": nan_to_zero(gap),  # the gap read by the measures (0 in empty cells), made once per summary
        "n": n,
        "n_kept": n_kept,
        "denom": denom,
    }


def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` where ``den > 0``, NaN elsewhere."""
    den = np.asarray(den, dtype=np.float64)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def gap_moments(summ: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Weighted mean/std of gap over kept cells, weights N_c / N_kept, and the outlier mask."""
    for e in _SUMMARIES.items if _SUMMARIES.active else ():
        if e[3] is summ:  # a shared summary: its moments computed once
            if e[4] is None:
                e[4] = _gap_moments(summ)
            return e[4]  # type: ignore[no-any-return]
    return _gap_moments(summ)


def _gap_moments(summ: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    kept, n_c, gap = summ["kept"], summ["n_c"], summ["gap0"]
    w = select(kept, n_c)
    n_kept = summ["n_kept"][..., None]
    wn = ratio(w, n_kept)
    mean = np.sum(wn * gap, axis=-1)
    var = np.sum(wn * (gap - mean[..., None]) ** 2, axis=-1)
    std = np.sqrt(np.maximum(var, 0.0))
    threshold = mean + 2.0 * std
    outlier = kept & (gap - mean[..., None] > 2.0 * std[..., None] + OUTLIER_TOL)
    share = ratio(select(outlier, n_c).sum(axis=-1), summ["n_kept"])
    return {"mean": mean, "std": std, "threshold": threshold, "outlier": outlier, "share": share}


# -- binned measures ---------------------------------------------------------


def _summ(s: CellSums, m: MeasureSettings) -> dict[str, np.ndarray]:
    return cell_summary(s, m.sample_threshold, m.policy)


def ece_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """``sum_kept N_c gap(c) / N'`` (ECE, and D-ECE on the position grid): :func:`detcal.metrics.reference.ece`."""
    summ = _summ(s, m)
    kept, n_c, gap = summ["kept"], summ["n_c"], summ["gap0"]
    return ratio(select(kept, n_c * gap).sum(axis=-1), summ["denom"])


def ece_q_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """``(sum_kept N_c gap(c)^q / N')^(1/q)``: :func:`detcal.metrics.reference.ece_q`."""
    summ, q = _summ(s, m), m.q
    kept, n_c, gap = summ["kept"], summ["n_c"], summ["gap0"]
    return ratio(select(kept, n_c * gap**q).sum(axis=-1), summ["denom"]) ** (1.0 / q)


def mce_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """``max_kept gap(c)``: :func:`detcal.metrics.reference.mce`."""
    summ = _summ(s, m)
    mx = np.max(select(summ["kept"], summ["gap0"], -np.inf), axis=-1, initial=-np.inf)
    return np.where(np.isfinite(mx), mx, np.nan)


def homogeneity_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Weighted std (or variance) of the gap over kept cells: :func:`detcal.metrics.reference.homogeneity`."""
    summ = _summ(s, m)
    v = np.where(summ["n_kept"] > 0, gap_moments(summ)["std"], np.nan)
    return v * v if m.spread == "variance" else v


def outlier_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Share of kept samples in outlier cells: :func:`detcal.metrics.reference.outliers`."""
    return gap_moments(_summ(s, m))["share"]


# -- cell-free measures (totals [..., 1]) ------------------------------------


def nll_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Mean clipped log-loss."""
    t = s.total()
    return ratio(t.sum_nll[..., 0], t.count[..., 0])


def brier_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Mean squared error ``(p - y)^2``."""
    t = s.total()
    return ratio(t.sum_se[..., 0], t.count[..., 0])


def sharpness_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """Population variance of p."""
    t = s.total()
    n = t.count[..., 0]
    mean = ratio(t.sum_p[..., 0], n)
    return np.maximum(ratio(t.sum_p2[..., 0], n) - mean**2, 0.0)


def overconfidence_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """``E[p | y = 0]``."""
    t = s.total()
    return ratio(t.sum_p0[..., 0], t.count[..., 0] - t.sum_y[..., 0])


def underconfidence_values(s: CellSums, m: MeasureSettings) -> np.ndarray:
    """``E[1 - p | y = 1]``."""
    t = s.total()
    n1 = t.sum_y[..., 0]
    return ratio(n1 - t.sum_p1[..., 0], n1)
