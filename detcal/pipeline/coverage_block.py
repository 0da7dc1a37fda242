"""Coverage of the box intervals a run's detections carry (docs/metrics.md#coverage).

The intervals are the central ``regression.coverage_level`` intervals of each
detection's Gaussian (``mu -+ z sigma``; after the conformal recalibrator
these are its conformal intervals exactly, in the space it was fitted in),
on the true positives at ``regression.sample_iou``: per coordinate of the
evaluation space and on the pixel box edges (x1, y1, x2, y2), with box
coverage by COCO size and IoU band, and the box stretch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detcal.core.boxes import area
from detcal.core.types import Detections, GroundTruth, MatchResult, MetricResult
from detcal.metrics.spaces import RegressionSample, regression_sample

__all__ = ["coverage_block", "sample_coverage"]


def _gt_area_iou(dets: Detections, gt: GroundTruth, mr: MatchResult, rows: np.ndarray, t: float) -> tuple[Any, Any]:
    """GT box area [S] and the IoU [S] of each true positive with the GT it matched."""
    g = mr.gt_index[mr.threshold_index(t), rows]
    gb, db = gt.box[g], dets.box[rows]
    iw = np.minimum(gb[:, 2], db[:, 2]) - np.maximum(gb[:, 0], db[:, 0])
    ih = np.minimum(gb[:, 3], db[:, 3]) - np.maximum(gb[:, 1], db[:, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    union = area(gb) + area(db) - inter
    return area(gb), np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _pixel_side(sample: RegressionSample) -> np.ndarray | None:
    """The predicted box side each pixel coordinate is relative to (w for cx, w, x1, x2; h for the others)."""
    c = tuple(sample.coords)
    if c == ("cx", "cy", "w", "h"):
        w, h = sample.mu[:, 2], sample.mu[:, 3]
    elif c == ("x1", "y1", "x2", "y2"):
        w, h = sample.mu[:, 2] - sample.mu[:, 0], sample.mu[:, 3] - sample.mu[:, 1]
    else:
        return None
    return np.stack([w, h, w, h], axis=1)


def sample_coverage(
    sample: RegressionSample, level: float, gt_area: np.ndarray | None, iou: np.ndarray | None
) -> dict[str, dict[str, MetricResult]]:
    """Coverage and width of the central ``level`` Gaussian intervals of one sample (its own coordinates)."""
    from detcal.metrics.regression.coverage import (  # lazy: scipy kept out of start-up (regression.coverage)
        coverage_metrics,
        gaussian_interval,
    )

    lo, hi = gaussian_interval(sample.mu, sample.sigma, level)
    return coverage_metrics(
        lo,
        hi,
        sample.y,
        sample.coords,
        level=level,
        source="gaussian central interval mu -+ z sigma",
        side=_pixel_side(sample),
        gt_area=gt_area,
        iou=iou,
    )


def coverage_block(
    dets: Detections, gt: GroundTruth, mr: MatchResult, t: float, space: str, level: float
) -> dict[str, dict[str, MetricResult]]:
    """``{"coverage", "interval_width", "box_stretch"}`` of the detections' intervals, per coordinate
    (entries of the :class:`~detcal.core.results.RegressionBlock`)."""
    from detcal.metrics.regression.coverage import (  # lazy: scipy kept out of start-up (regression.coverage)
        box_stretch,
        edge_sample,
        gaussian_interval,
    )

    s = regression_sample(dets, gt, mr, iou_threshold=t, space=space)
    gt_area, iou = _gt_area_iou(dets, gt, mr, s.rows, t)
    res = sample_coverage(s, level, gt_area, iou)
    edges = edge_sample(s if space == "pixel" else regression_sample(dets, gt, mr, iou_threshold=t, space="pixel"))
    res_e = sample_coverage(edges, level, gt_area, iou)
    for key in ("coverage", "interval_width"):
        for c, v in res_e[key].items():
            res[key]["box_edges" if c == "box" else c] = v
    lo, hi = gaussian_interval(edges.mu, edges.sigma, level)
    pred_area = (edges.mu[:, 2] - edges.mu[:, 0]) * (edges.mu[:, 3] - edges.mu[:, 1])
    stretch = MetricResult(
        name="box_stretch",
        value=box_stretch(lo, hi, pred_area),
        variant="conformal_od",
        params={"level": float(level), "n": int(len(s)), "coords": "x1, y1, x2, y2 (pixels)"},
    )
    out: dict[str, dict[str, MetricResult]] = {k: dict(per) for k, per in res.items()}
    out["box_stretch"] = {"box": stretch}
    return out
