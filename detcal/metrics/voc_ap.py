"""Pascal VOC average precision from a VOC match: the VOC2007 11-point and the area (VOC2010+) variants.

Per class, over all images: detections by descending score (ties in input
order), ignored ones (paired with a ``difficult`` box) left out; cumulative
true and false positives give ``recall = tp / npos`` (``npos`` the class's
non-difficult boxes) and ``precision = tp / (tp + fp)``. Then, as the VOC
devkit's ``VOCap``/``voc_ap``:

``voc07_11pt``
    the mean over ``r`` in {0, 0.1, ..., 1} of the highest precision at a
    recall ``>= r`` (0 where none); the points are ``k * 0.1`` in floating
    point, as ``np.arange(0, 1.1, 0.1)`` of the devkit's Python port makes
    them (so ``r = 0.6000000000000001`` and a recall of exactly 3/5 is below it);
``area``
    the precision envelope made monotone from the right, integrated over the
    recall steps (with the points (0, 0) and (1, 0) appended).

A class without non-difficult boxes has no AP (NaN; the devkit divides by
zero there) and is left out of the mean (mAP).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from detcal.core.types import Detections, GroundTruth, MatchResult

__all__ = ["VARIANTS", "VocAp", "voc_ap", "voc_ap_from_curve"]

VARIANTS: tuple[str, ...] = ("voc07_11pt", "area")
"""The named AP variants."""


@dataclass
class VocAp:
    """VOC AP at one IoU threshold: ``per_class`` {category: AP} (NaN without boxes) and ``mean``
    (over the classes with boxes), for ``variant`` (:data:`VARIANTS`)."""

    variant: str
    iou_threshold: float
    per_class: dict[int, float]
    mean: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready: the mean and the per-class APs (``null`` for NaN)."""
        return {
            "variant": self.variant,
            "iou_threshold": self.iou_threshold,
            "mAP": None if np.isnan(self.mean) else self.mean,
            "per_class": {str(k): (None if np.isnan(v) else v) for k, v in self.per_class.items()},
        }


def voc_ap_from_curve(recall: np.ndarray, precision: np.ndarray, variant: str) -> float:
    """AP of one class's cumulative ``recall`` and ``precision`` [n] in ``variant``."""
    if variant == "voc07_11pt":
        total = 0.0
        for r in np.arange(0.0, 1.1, 0.1):  # the 11 points as the devkit's Python port makes them: k * 0.1
            above = precision[recall >= r]
            total += float(above.max()) if above.size else 0.0
        return total / 11.0
    if variant != "area":
        raise ValueError(f"unknown VOC AP variant {variant!r}; choose one of {VARIANTS}")
    mrec = np.concatenate([[0.0], recall, [1.0]])
    mpre = np.concatenate([[0.0], precision, [0.0]])
    mpre = np.maximum.accumulate(mpre[::-1])[::-1]
    step = np.flatnonzero(mrec[1:] != mrec[:-1])
    return float(np.sum((mrec[step + 1] - mrec[step]) * mpre[step + 1]))


def voc_ap(
    dets: Detections, gt: GroundTruth, result: MatchResult, categories: list[int], variant: str = "area"
) -> list[VocAp]:
    """VOC AP per class and its mean, at each threshold of ``result`` (a ``mode="voc"`` match)."""
    difficult = gt.ignore | gt.iscrowd
    order = np.lexsort((np.arange(len(dets)), -dets.score))
    out = []
    for t, thr in enumerate(result.iou_thresholds.tolist()):
        per: dict[int, float] = {}
        for c in categories:  # one vectorised curve per class
            npos = int(np.sum((gt.category == c) & ~difficult))
            if npos == 0:
                per[int(c)] = float("nan")
                continue
            o = order[(dets.category[order] == c) & result.considered[order] & ~result.ignored[t, order]]
            tp = np.cumsum(result.matched[t, o], dtype=np.float64)
            fp = np.cumsum(~result.matched[t, o], dtype=np.float64)
            rec = tp / npos
            prec = tp / np.maximum(tp + fp, np.finfo(np.float64).eps)
            per[int(c)] = voc_ap_from_curve(rec, prec, variant)
        vals = [v for v in per.values() if not np.isnan(v)]
        out.append(VocAp(variant, float(thr), per, float(np.mean(vals)) if vals else float("nan")))
    return out
