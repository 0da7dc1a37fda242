"""Isotonic regression core of the calibrators (numpy/scipy only).

* :func:`pav`: the non-decreasing weighted least-squares fit, computed by
  :func:`scipy.optimize.isotonic_regression` (pool adjacent violators);
* :func:`isotonic_thresholds`: scikit-learn's ``IsotonicRegression`` fit
  reduced to thresholds (ties in x merged, interior points of constant runs
  dropped);
* :func:`interp_thresholds`: the piecewise-linear map through those
  thresholds, constant outside them, finite for any gap between two
  thresholds (subnormal gaps included).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import isotonic_regression


def pav(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pool adjacent violators: the non-decreasing least-squares fit of ``y [M]`` with weights ``w [M]``.

    ``argmin_f sum_i w_i (y_i - f_i)^2  s.t.  f_1 <= ... <= f_M`` (Barlow et
    al. 1972; Ayer et al. 1955), by :func:`scipy.optimize.isotonic_regression`.
    """
    y = np.asarray(y, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if len(y) == 0:
        return y.copy()
    return np.asarray(isotonic_regression(y, weights=w, increasing=True).x, dtype=np.float64)


def isotonic_thresholds(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Thresholds ``(X [M], Y [M])`` of the non-decreasing isotonic fit of ``y`` on ``x``.

    As scikit-learn's ``IsotonicRegression``: ties in ``x`` are first merged
    (weighted mean of ``y``, summed weights), PAV runs on the unique ``x``,
    and only the first and last point of each run of equal fitted values are
    kept. The fitted function is :func:`interp_thresholds`.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones_like(x) if w is None else np.asarray(w, dtype=np.float64)
    ux, inv = np.unique(x, return_inverse=True)
    inv = inv.reshape(-1)
    sw = np.bincount(inv, weights=w, minlength=len(ux))
    sy = np.bincount(inv, weights=w * y, minlength=len(ux))
    fy = pav(sy / sw, sw)
    if len(fy) > 2:
        keep = np.ones(len(fy), dtype=bool)
        keep[1:-1] = (fy[:-2] != fy[1:-1]) | (fy[1:-1] != fy[2:])
        ux, fy = ux[keep], fy[keep]
    return ux, fy


def interp_thresholds(x: np.ndarray, xt: np.ndarray, yt: np.ndarray) -> np.ndarray:
    """``np.interp(x, xt, yt)`` (constant outside ``[xt[0], xt[-1]]``), finite for any gap.

    ``np.interp`` evaluates ``y0 + slope (x - x0)`` with ``slope = (y1 - y0) /
    (x1 - x0)``; when ``x1 - x0`` is subnormal the slope overflows to inf and
    a query inside that segment returns inf (clipped to 1 by a calibrator) or
    NaN. On such segments the value is computed as ``y0 + t (y1 - y0)`` with
    ``t = (x - x0) / (x1 - x0)`` in [0, 1] (subtraction of nearby doubles is
    exact, so ``t`` is the exact position up to one rounding). Elsewhere the
    result is ``np.interp``'s, bit for bit.
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.interp(x, xt, yt)
    if len(xt) < 2:
        return out
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        slope = np.diff(yt) / np.diff(xt)
    bad_seg = ~np.isfinite(slope)
    if not bad_seg.any():
        return out
    j = np.clip(np.searchsorted(xt, x, side="right") - 1, 0, len(xt) - 2)
    inside = (x >= xt[0]) & (x <= xt[-1]) & bad_seg[j]
    if inside.any():
        jj = j[inside]
        x0, x1 = xt[jj], xt[jj + 1]
        t = np.clip((x[inside] - x0) / (x1 - x0), 0.0, 1.0)
        out = out.copy()
        out[inside] = yt[jj] + t * (yt[jj + 1] - yt[jj])
    return out


__all__ = ["interp_thresholds", "isotonic_thresholds", "pav"]
