"""LVIS v1 average precision: the numbers of ``lvis.LVISEval`` (bbox) from detcal's matching.

For each area range (all, small [0, 32^2], medium [32^2, 96^2], large [96^2,
1e10], inclusive as LVISEval) the considered detections
(:func:`detcal.matching.lvis.lvis_considered`) are matched again with the
ground truth outside the range ignored; an unmatched detection is ignored when
its box area is outside the range or its category is not exhaustively
annotated in its image. Per category (with at least one non-ignored box) and
IoU threshold (0.50:0.05:0.95): detections by descending score (ties: image
id, then input order), cumulative TP/FP, ``recall = tp / n_gt``,
``precision = tp / (tp + fp + eps)`` made monotone from the right and read at
the 101 recall points (``searchsorted``, 0 past the end). AP is the mean over
everything not -1; AP50/AP75 one threshold; APs/APm/APl one range; APr, APc,
APf the categories of one frequency group; AR@300 the final recall.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from detcal.core.types import Dataset, Detections
from detcal.data.lvis import FREQUENCIES, LvisRules
from detcal.matching.blocks import box_areas
from detcal.matching.engine import match
from detcal.matching.lvis import lvis_considered, match_lvis
from detcal.metrics.confidence import ece
from detcal.metrics.laece import dece_from_outcomes, laece_from_outcomes
from detcal.metrics.lrp import DetectionOutcomes, paired_iou

__all__ = ["AREA_RANGES", "IOU_THRESHOLDS", "REC_THRESHOLDS", "lvis_ap", "lvis_precision"]

IOU_THRESHOLDS: np.ndarray = np.linspace(0.5, 0.95, 10)
"""LVISEval's IoU thresholds."""
REC_THRESHOLDS: np.ndarray = np.linspace(0.0, 1.0, 101)
"""LVISEval's recall points."""
AREA_RANGES: dict[str, tuple[float, float]] = {
    "all": (0.0, 1e5**2),
    "small": (0.0, 32.0**2),
    "medium": (32.0**2, 96.0**2),
    "large": (96.0**2, 1e5**2),
}
"""LVISEval's area ranges (both ends inclusive)."""


def _curve(tps: np.ndarray, fps: np.ndarray, n_gt: int) -> tuple[np.ndarray, np.ndarray]:
    """Precision at the 101 recall points [T, R] and the final recall [T] of one category."""
    tp, fp = np.cumsum(tps, axis=1, dtype=np.float64), np.cumsum(fps, axis=1, dtype=np.float64)
    n = tp.shape[1]
    q = np.zeros((tp.shape[0], len(REC_THRESHOLDS)))
    if n == 0:
        return q, np.zeros(tp.shape[0])
    rc = tp / n_gt
    pr = np.maximum.accumulate((tp / (fp + tp + np.spacing(1)))[:, ::-1], axis=1)[:, ::-1]
    for t in range(tp.shape[0]):  # per IoU threshold
        idx = np.searchsorted(rc[t], REC_THRESHOLDS, side="left")
        ok = idx < n
        q[t, ok] = pr[t, idx[ok]]
    return q, rc[:, -1]


def lvis_precision(dets: Detections, ds: Dataset, rules: LvisRules, max_dets: int = 300) -> dict[str, Any]:
    """LVISEval's ``precision [T, R, K, A]`` and ``recall [T, K, A]`` (-1: no ground truth) and the
    category ids ``[K]`` (sorted), for the detections ``dets`` and the LVIS set ``ds``."""
    cats = np.array(sorted(ds.categories), dtype=np.int64)
    n_t, n_r, n_k, n_a = len(IOU_THRESHOLDS), len(REC_THRESHOLDS), len(cats), len(AREA_RANGES)
    precision, recall = -np.ones((n_t, n_r, n_k, n_a)), -np.ones((n_t, n_k, n_a))
    keep = np.flatnonzero(lvis_considered(dets, ds.gt, rules, max_dets))
    d = dets.select(keep)
    g_area = ds.gt.area if ds.gt.area is not None else box_areas(ds.gt.box, ds.gt.wh)
    d_area = box_areas(d.box, d.wh)
    nel = rules.is_not_exhaustive(d.image_id, d.category)
    order = np.lexsort((np.arange(len(d)), d.image_id, -d.score, d.category))
    cat_sorted = d.category[order]
    lo_k, hi_k = np.searchsorted(cat_sorted, cats, "left"), np.searchsorted(cat_sorted, cats, "right")
    for a, (lo, hi) in enumerate(AREA_RANGES.values()):  # one matching per area range
        g_ig = ds.gt.ignore | (g_area < lo) | (g_area > hi)
        gt = dataclasses.replace(ds.gt, iscrowd=np.zeros(len(ds.gt), bool), ignore=g_ig)
        m = match(d, gt, tuple(IOU_THRESHOLDS.tolist()), mode="exclusive", gt_ignore="ignore_or_crowd", max_dets=None)
        d_ig = m.ignored | (~m.matched & ((d_area < lo) | (d_area > hi) | nel)[None, :])
        tps, fps = (m.matched & ~d_ig)[:, order], (~m.matched & ~d_ig)[:, order]
        n_gt = np.bincount(np.searchsorted(cats, ds.gt.category[~g_ig]), minlength=n_k)
        for k in np.flatnonzero(n_gt > 0):  # per category with ground truth
            q, r = _curve(tps[:, lo_k[k] : hi_k[k]], fps[:, lo_k[k] : hi_k[k]], int(n_gt[k]))
            precision[:, :, k, a], recall[:, k, a] = q, r
    return {"precision": precision, "recall": recall, "categories": cats}


def _mean(s: np.ndarray) -> float:
    v = s[s > -1]
    return float(np.mean(v)) if v.size else -1.0


def lvis_ap(dets: Detections, ds: Dataset, rules: LvisRules, max_dets: int = 300) -> dict[str, float]:
    """LVISEval's summary: AP, AP50, AP75, APs, APm, APl, APr, APc, APf, AR@300, ARs@300, ARm@300,
    ARl@300 (-1 where undefined, as LVISEval)."""
    e = lvis_precision(dets, ds, rules, max_dets)
    p, r, cats = e["precision"], e["recall"], e["categories"]
    out = {
        "AP": _mean(p[:, :, :, 0]),
        "AP50": _mean(p[0, :, :, 0]),
        "AP75": _mean(p[5, :, :, 0]),
        "APs": _mean(p[:, :, :, 1]),
        "APm": _mean(p[:, :, :, 2]),
        "APl": _mean(p[:, :, :, 3]),
    }
    for f in FREQUENCIES:
        group = np.array([rules.frequency.get(int(c)) == f for c in cats], dtype=bool)
        out[f"AP{f}"] = _mean(p[:, :, group, 0])
    out[f"AR@{max_dets}"] = _mean(r[:, :, 0])
    for a, name in ((1, "s"), (2, "m"), (3, "l")):
        out[f"AR{name}@{max_dets}"] = _mean(r[:, :, a])
    return out


def lvis_calibration_by_frequency(
    dets: Detections, ds: Dataset, rules: LvisRules, tau: float = 0.5, max_dets: int = 300
) -> dict[str, dict[str, Any]]:
    """ECE (15 bins), D-ECE (the benchmark's, 10 bins, binary targets) and LaECE (25 bins) of the LVIS
    calibration sample at IoU ``tau``, over all categories and per frequency group (``r``, ``c``, ``f``).

    The sample is :func:`detcal.matching.lvis.match_lvis`'s: the detections LVISEval evaluates, less the
    ignored ones (unmatched of a not-exhaustive category, on an ignored box); a true positive is a
    positive (LaECE target: its IoU with the box it took), every other detection a negative. A group's
    numbers use its categories' detections; LaECE averages over its categories with ground truth."""
    mr = match_lvis(dets, ds.gt, (tau,), rules, max_dets=max_dets)
    valid = mr.considered & ~mr.ignored[0]
    tp = mr.matched[0]
    row = mr.gt_index[0]
    iou = np.zeros(len(dets))
    iou[tp] = paired_iou(dets.box[tp], ds.gt.box[row[tp]])
    cat_of = np.array([rules.frequency.get(int(c), "") for c in dets.category.tolist()], dtype=object)
    gt_cat_freq = np.array([rules.frequency.get(int(c), "") for c in ds.gt.category.tolist()], dtype=object)
    out: dict[str, dict[str, Any]] = {}
    for group in ("all", *FREQUENCIES):  # the whole sample, then each frequency group
        mine = valid if group == "all" else valid & (cat_of == group)
        g_mine = ~ds.gt.ignore if group == "all" else ~ds.gt.ignore & (gt_cat_freq == group)
        cats, n_gt = np.unique(ds.gt.category[g_mine], return_counts=True)
        o = DetectionOutcomes(tau, dets.score, dets.category, dets.image_id, mine, tp & mine, iou, cats, n_gt, max_dets)
        p, y = dets.score[mine], tp[mine]
        out[group] = {
            "n": int(mine.sum()),
            "n_positive": int((tp & mine).sum()),
            "ece": ece(p, y).value if len(p) else float("nan"),
            "dece": dece_from_outcomes(o).value if len(p) else float("nan"),
            "laece": laece_from_outcomes(o).value if len(p) else float("nan"),
        }
    return out
