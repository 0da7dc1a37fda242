"""The LVIS v1 rules as a matching mode: ``match_lvis``.

The evaluation of ``lvis.LVISEval`` (the official LVIS API), for boxes:

1. at most ``max_dets`` (300) detections per image, over all categories: when
   an image has more, the best by score (ties: input order), as
   ``LVISResults.limit_dets_per_image``;
2. federated filter: a detection of a category that is neither verified
   present (a ground-truth box of it in the image) nor verified absent (in the
   image's ``neg_category_ids``) is not evaluated (not considered here);
3. matching as pycocotools' ``evaluateImg`` (``exclusive``: greedy by score,
   the best free box with IoU >= t, a free non-ignored box before an ignored
   one), with no crowd boxes (LVIS has none; an ``ignore`` flag of a box is
   kept) and no cap per category;
4. an unmatched detection of a category in the image's
   ``not_exhaustive_category_ids`` is ignored (boxes may be missing there).

The calibration sample follows the same rules: the detections of 1 and 2 are
not considered and those of 4 (and those on ignored boxes) are ignored, so
none of them is a positive or a negative.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from detcal.core.types import Detections, GroundTruth, Images, MatchResult
from detcal.data.lvis import LvisRules
from detcal.matching.engine import match

__all__ = ["MODE", "lvis_considered", "match_lvis"]

MODE = "lvis"
"""The ``MatchResult.mode`` of this rule."""


def top_per_image(dets: Detections, max_dets: int | None) -> np.ndarray:
    """[D] the ``max_dets`` best-scored detections of each image (ties in input order)."""
    if max_dets is None or len(dets) == 0:
        return np.ones(len(dets), bool)
    o = np.lexsort((np.arange(len(dets)), -dets.score, dets.image_id))
    img = dets.image_id[o]
    new = np.ones(len(o), bool)
    new[1:] = img[1:] != img[:-1]
    start = np.maximum.accumulate(np.where(new, np.arange(len(o)), 0))
    keep = np.zeros(len(dets), bool)
    keep[o[np.arange(len(o)) - start < max_dets]] = True
    return keep


def lvis_considered(dets: Detections, gt: GroundTruth, rules: LvisRules, max_dets: int | None = 300) -> np.ndarray:
    """[D] the detections LVISEval evaluates: the per-image cut (1) and the federated filter (2)."""
    key_d = dets.image_id * (1 << 24) + dets.category
    present = np.isin(key_d, gt.image_id * (1 << 24) + gt.category)
    return top_per_image(dets, max_dets) & (present | rules.is_negative(dets.image_id, dets.category))


def match_lvis(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float],
    rules: LvisRules,
    *,
    max_dets: int | None = 300,
    score_threshold: float = 0.0,
    images: Images | None = None,
) -> MatchResult:
    """The LVIS rules (module docstring) at each of ``T`` thresholds; a
    :class:`~detcal.core.types.MatchResult` like :func:`detcal.matching.match`, ``mode = "lvis"``."""
    considered = lvis_considered(dets, gt, rules, max_dets) & (dets.score >= score_threshold)
    rows = np.flatnonzero(considered)
    plain = dataclasses.replace(gt, iscrowd=np.zeros(len(gt), bool))
    sub = match(
        dets.select(rows),
        plain,
        iou_thresholds,
        mode="exclusive",
        gt_ignore="ignore_or_crowd",
        max_dets=None,
        images=images,
    )
    t, d = len(sub.iou_thresholds), len(dets)
    matched, ignored = np.zeros((t, d), bool), np.zeros((t, d), bool)
    gt_index, iou = np.full((t, d), -1, np.int64), np.zeros(d)
    matched[:, rows], ignored[:, rows], gt_index[:, rows], iou[rows] = sub.matched, sub.ignored, sub.gt_index, sub.iou
    nel = rules.is_not_exhaustive(dets.image_id, dets.category) & considered
    ignored |= nel[None, :] & ~matched
    return MatchResult(
        iou_thresholds=sub.iou_thresholds,
        matched=matched,
        ignored=ignored,
        gt_index=gt_index,
        iou=iou,
        considered=considered,
        mode=MODE,
        score_threshold=float(score_threshold),
        max_dets=max_dets,
        params={
            "rule": "LVIS: 300 per image, detections of unverified categories not evaluated, pycocotools greedy "
            "matching without crowd, unmatched detections of not-exhaustive categories ignored"
        },
    )
