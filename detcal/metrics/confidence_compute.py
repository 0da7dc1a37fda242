"""The ``_compute`` stages of the confidence metrics: values [...] from cell sums [..., C] (vectorised over leading axes)."""

from __future__ import annotations

import numpy as np

from detcal.binning.cells import CellSums

OUTLIER_TOL: float = 1e-12
"""A cell is an outlier when ``gap - mean_gap > 2 * std + OUTLIER_TOL`` (the
tolerance keeps equal gaps from becoming outliers through rounding)."""


def _summary(s: CellSums, sample_threshold: int, policy: str) -> dict[str, np.ndarray]:
    """Per-cell precision, confidence, gap and the kept mask, [..., C]; N and the denominator [...]."""
    n_c = np.asarray(s.count, dtype=np.float64)
    occupied = n_c > 0
    kept = occupied & (n_c >= sample_threshold)
    safe = np.where(occupied, n_c, 1.0)
    prec = np.where(occupied, s.sum_y / safe, np.nan)
    conf = np.where(occupied, s.sum_p / safe, np.nan)
    gap = np.abs(prec - conf)
    n = n_c.sum(axis=-1)
    n_kept = np.where(kept, n_c, 0.0).sum(axis=-1)
    denom = n_kept if policy == "drop" else n
    return {
        "n_c": n_c,
        "occupied": occupied,
        "kept": kept,
        "prec": prec,
        "conf": conf,
        "gap": gap,
        "n": n,
        "n_kept": n_kept,
        "denom": denom,
    }


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    den = np.asarray(den, dtype=np.float64)
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _homogeneity(summ: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Weighted mean/std of gap over kept cells, weights N_c / N_kept, and the outlier mask."""
    kept, n_c, gap = summ["kept"], summ["n_c"], np.nan_to_num(summ["gap"])
    w = np.where(kept, n_c, 0.0)
    n_kept = summ["n_kept"][..., None]
    wn = _ratio(w, n_kept)
    mean = np.sum(wn * gap, axis=-1)
    var = np.sum(wn * (gap - mean[..., None]) ** 2, axis=-1)
    std = np.sqrt(np.maximum(var, 0.0))
    threshold = mean + 2.0 * std
    outlier = kept & (gap - mean[..., None] > 2.0 * std[..., None] + OUTLIER_TOL)
    share = _ratio(np.where(outlier, n_c, 0.0).sum(axis=-1), summ["n_kept"])
    return {"mean": mean, "std": std, "threshold": threshold, "outlier": outlier, "share": share}


def _binned_values(name: str, summ: dict[str, np.ndarray], q: float) -> np.ndarray:
    kept, n_c, gap = summ["kept"], summ["n_c"], np.nan_to_num(summ["gap"])
    if name in ("ece", "dece"):
        return _ratio(np.where(kept, n_c * gap, 0.0).sum(axis=-1), summ["denom"])
    if name == "ece_q":
        return _ratio(np.where(kept, n_c * gap**q, 0.0).sum(axis=-1), summ["denom"]) ** (1.0 / q)
    if name == "mce":
        m = np.max(np.where(kept, gap, -np.inf), axis=-1, initial=-np.inf)
        return np.where(np.isfinite(m), m, np.nan)
    h = _homogeneity(summ)
    if name == "homogeneity":
        return np.where(summ["n_kept"] > 0, h["std"], np.nan)
    return h["share"]  # outliers


def _cell_free_values(name: str, t: CellSums) -> np.ndarray:
    """Values [...] from totals [..., 1]."""
    n, n1 = t.count[..., 0], t.sum_y[..., 0]
    if name == "nll":
        return _ratio(t.sum_nll[..., 0], n)
    if name == "brier":
        return _ratio(t.sum_se[..., 0], n)
    if name == "sharpness":
        mean = _ratio(t.sum_p[..., 0], n)
        return np.maximum(_ratio(t.sum_p2[..., 0], n) - mean**2, 0.0)
    if name == "overconfidence":
        return _ratio(t.sum_p0[..., 0], n - n1)
    return _ratio(n1 - t.sum_p1[..., 0], n1)  # underconfidence
