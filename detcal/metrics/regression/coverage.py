"""Coverage of box intervals (docs/metrics.md#coverage), as Timans et al. 2024 evaluate them, numpy only.

Inputs: per sample s and coordinate k an interval ``[lo_sk, hi_sk]`` and the
target ``y_sk`` (``[S,K]`` arrays, K = 4 coordinates of one box). The
definitions follow ``alextimans/conformal-od`` (``evaluation/metrics.py`` at
commit 26ce7025, the file last changed in 9d16585; line numbers in docs/metrics.md):

* coverage of coordinate k: ``mean_s 1[lo_sk <= y_sk <= hi_sk]`` (both ends closed);
* box coverage: ``mean_s 1[all four coordinates covered]``;
* mean interval width: ``mean_s |hi_sk - lo_sk|`` (MPIW), and the same
  divided by the predicted box's side (width for x-like coordinates, height
  for y-like ones) when the sides are given;
* box coverage by object size: GT box area in ``(0, 32^2]``, ``(32^2, 96^2]``,
  ``(96^2, 1e10]`` (small, medium, large; lower end open, upper closed, as the code's masks);
* box coverage by IoU band: IoU of the detection with its GT in
  ``(0, 0.7]``, ``(0.7, 0.9]``, ``(0.9, 1]``;
* box stretch (Andeol et al. 2023, Eq. 20): on the pixel box edges
  ``(x1, y1, x2, y2)``, ``mean_s sqrt((hi_x2 - lo_x1)(hi_y2 - lo_y1) / A_s)``
  with ``A_s`` the predicted box's area: the side ratio of the outer interval
  box to the predicted box.

An empty stratum has coverage NaN (the code's 0/0). :func:`edge_sample`
turns a pixel sample ``(cx, cy, w, h)`` into the edges with their propagated
standard deviations, so Gaussian and conformal intervals can be compared on
the edges the code uses.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import ndtri

from detcal.core.types import MetricResult
from detcal.metrics.regression._common import validate
from detcal.metrics.spaces import RegressionSample

__all__ = [
    "EDGE_COORDS",
    "IOU_BANDS",
    "SIZE_BINS",
    "box_stretch",
    "coverage_metrics",
    "edge_sample",
    "gaussian_coverage",
    "gaussian_interval",
    "gaussian_width",
    "interval_coverage",
]

SIZE_BINS: tuple[tuple[str, float, float], ...] = (
    ("small", 0.0, 32.0**2),
    ("medium", 32.0**2, 96.0**2),
    ("large", 96.0**2, 1e5**2),
)
"""COCO object sizes by GT area: ``lo < area <= hi`` (conformal-od ``_size_bins``)."""

IOU_BANDS: tuple[tuple[str, float, float], ...] = (("iou<=0.7", 0.0, 0.7), ("0.7-0.9", 0.7, 0.9), ("iou>0.9", 0.9, 1.0))
"""IoU of a detection with its GT: ``lo < iou <= hi`` (conformal-od ``_iou_bins``)."""

EDGE_COORDS: tuple[str, ...] = ("x1", "y1", "x2", "y2")

# (cx, cy, w, h) -> (x1, y1, x2, y2)
_J_CXCYWH_TO_EDGES = np.array(
    [[1.0, 0.0, -0.5, 0.0], [0.0, 1.0, 0.0, -0.5], [1.0, 0.0, 0.5, 0.0], [0.0, 1.0, 0.0, 0.5]]
)


def gaussian_interval(mu: np.ndarray, sigma: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Central ``level`` interval of ``N(mu, sigma^2)``: ``mu -+ Phi^-1((1 + level) / 2) sigma``."""
    z = float(ndtri(0.5 + 0.5 * float(level)))
    mu_a, sg_a = np.asarray(mu, dtype=np.float64), np.asarray(sigma, dtype=np.float64)
    return mu_a - z * sg_a, mu_a + z * sg_a


def interval_coverage(lo: np.ndarray, hi: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """``(coverage per coordinate [K], box coverage)``: conformal-od ``coverage`` (all K covered for the box)."""
    covered = (np.asarray(lo) <= y) & (np.asarray(hi) >= y)
    if covered.shape[0] == 0:
        return np.full(covered.shape[1], np.nan), float("nan")
    return covered.mean(axis=0), float(np.all(covered, axis=1).mean())


def box_stretch(lo: np.ndarray, hi: np.ndarray, pred_area: np.ndarray) -> float:
    """Mean ``sqrt((hi_x2 - lo_x1)(hi_y2 - lo_y1) / pred_area)`` over boxes (edge intervals ``[S,4]``)."""
    if len(pred_area) == 0:
        return float("nan")
    outer = (hi[:, 2] - lo[:, 0]) * (hi[:, 3] - lo[:, 1])
    return float(np.mean(np.sqrt(outer / np.asarray(pred_area, dtype=np.float64))))


def edge_sample(sample: RegressionSample) -> RegressionSample:
    """The pixel sample ``(cx, cy, w, h)`` as box edges ``(x1, y1, x2, y2)``: linear, so exact.

    ``mu_e = J mu``, ``y_e = J y``, ``cov_e = J C J^T`` with ``C`` the sample's
    covariance (``diag(sigma^2)`` without one), ``sigma_e = sqrt(diag cov_e)``.
    """
    if sample.space != "pixel" or tuple(sample.coords) != ("cx", "cy", "w", "h"):
        raise ValueError(f"edge_sample needs a pixel (cx, cy, w, h) sample, got {sample.space} {sample.coords}")
    j = _J_CXCYWH_TO_EDGES
    cov = sample.cov if sample.cov is not None else sample.sigma[:, :, None] ** 2 * np.eye(4)[None]
    cov_e = np.einsum("ij,sjk,lk->sil", j, cov, j)
    return RegressionSample(
        mu=sample.mu @ j.T,
        sigma=np.sqrt(np.einsum("sii->si", cov_e)),
        y=sample.y @ j.T,
        rows=sample.rows,
        image_id=sample.image_id,
        space="pixel",
        cov=cov_e,
        coords=EDGE_COORDS,
        notes={**sample.notes, "edges": "x1 = cx - w/2, x2 = cx + w/2 (y alike); covariance J C J^T"},
    )


def _strata(
    covered_box: np.ndarray, values: np.ndarray | None, bins: tuple[tuple[str, float, float], ...]
) -> dict[str, Any]:
    if values is None:
        return {}
    out: dict[str, Any] = {}
    for name, lo, hi in bins:
        m = (values > lo) & (values <= hi)
        n = int(m.sum())
        out[name] = {"coverage": float(covered_box[m].mean()) if n else None, "n": n}
    return out


def coverage_metrics(
    lo: np.ndarray,
    hi: np.ndarray,
    y: np.ndarray,
    coords: tuple[str, ...] | list[str],
    *,
    level: float,
    source: str,
    side: np.ndarray | None = None,
    gt_area: np.ndarray | None = None,
    iou: np.ndarray | None = None,
) -> dict[str, dict[str, MetricResult]]:
    """``{"coverage": {coord..., "box"}, "interval_width": {coord...}}`` of intervals ``[S,K]``.

    ``side [S,K]``: the predicted box's side each coordinate is measured
    against (gives the relative width); ``gt_area [S]`` and ``iou [S]`` give
    the box coverage by object size and by IoU band (``table`` of ``box``).
    ``level`` is the nominal coverage, ``source`` how the intervals were made.
    """
    lo, hi, y = (np.asarray(a, dtype=np.float64) for a in (lo, hi, y))
    cov_k, cov_box = interval_coverage(lo, hi, y)
    width = np.abs(hi - lo)
    n = int(len(y))
    params = {"level": float(level), "intervals": source, "n": n}
    cov: dict[str, MetricResult] = {}
    wid: dict[str, MetricResult] = {}
    rel = None if side is None or n == 0 else (width / side).mean(axis=0)
    for k, c in enumerate(coords):
        cov[c] = MetricResult(name="coverage", value=float(cov_k[k]), variant="conformal_od", params=params)
        extra = {} if rel is None else {"relative": float(rel[k])}
        w = float(width[:, k].mean()) if n else float("nan")
        wid[c] = MetricResult(name="interval_width", value=w, variant="conformal_od", params=params, extra=extra)
    box_cov = np.all((lo <= y) & (hi >= y), axis=1)
    cov["box"] = MetricResult(
        name="coverage",
        value=cov_box,
        variant="conformal_od",
        params=params,
        extra={"by_size": _strata(box_cov, gt_area, SIZE_BINS), "by_iou": _strata(box_cov, iou, IOU_BANDS)},
    )
    return {"coverage": cov, "interval_width": wid}


def gaussian_coverage(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, level: float = 0.9) -> MetricResult:
    """Coverage of one coordinate's central ``level`` Gaussian intervals (1-D ``[S]``); ``extra``: mean width.

    The same quantity as ``picp(tau=level)`` (detcal.metrics.regression.scores), with conformal-od's closed
    interval ends; inputs checked as every box-uncertainty metric checks them (finite, sigma > 0)."""
    mu, sigma, y = validate(mu, sigma, y)
    lo, hi = gaussian_interval(mu, sigma, level)
    n = len(y)
    value = float(((lo <= y) & (hi >= y)).mean()) if n else float("nan")
    width = float(np.mean(hi - lo)) if n else float("nan")
    return MetricResult(
        name="coverage",
        value=value,
        variant="conformal_od",
        params={"level": float(level), "intervals": "gaussian central interval mu -+ z sigma", "n": n},
        extra={"mean_width": width},
    )


def gaussian_width(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray, level: float = 0.9) -> MetricResult:
    """Mean width ``2 z sigma`` of one coordinate's central ``level`` Gaussian intervals (``y`` unused; MPIW)."""
    mu, sigma, y = validate(mu, sigma, y)
    lo, hi = gaussian_interval(mu, sigma, level)
    value = float(np.mean(hi - lo)) if len(lo) else float("nan")
    return MetricResult(name="interval_width", value=value, variant="conformal_od", params={"level": float(level)})
