"""netcal's example matching as a mode: ``match_netcal_example``.

The detection example of netcal (Küppers et al., CVPRW 2020) labels each
detection with this rule, here vectorised:

1. the detection is paired with the ground-truth box of its image that has
   the highest IoU, *whatever its class* (on an exact IoU tie, the first
   such box in the GroundTruth order);
2. it counts as matched at threshold ``t`` when that IoU is ``>= t`` *and*
   that box has the detection's class.

It is not one-to-one: several detections can be matched to the same box.
Crowd and ignore flags play no part (the example knows none); no detection
is ignored. IoU is ``inter / (area_d + area_g - inter)`` with ``area = w *
h``. IoU is invariant under separate scaling of x and y, so boxes relative
to the image size can be matched directly.

Compare ``detcal.matching.match(..., mode="max")``, which picks the
highest-IoU box among those *of the detection's class*: a detection whose
best overlap is a box of another class is matched there but not here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from detcal.core.boxes import check_boxes
from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MatchResult

MODE = "netcal_example"
"""The ``MatchResult.mode`` of this rule."""


def best_overlap(dets: Detections, gt: GroundTruth) -> tuple[np.ndarray, np.ndarray]:
    """For each detection, the highest IoU with any GT box of its image and that box's row.

    Returns ``(iou [D], gt_row [D])``; ``iou = 0`` and ``gt_row = -1`` when the
    image has no GT box (or no box overlaps and the image has none).
    Vectorised over (detection, GT of the same image) pairs.
    """
    D = len(dets)
    iou = np.zeros(D)
    row = np.full(D, -1, np.int64)
    if D == 0 or len(gt) == 0:
        return iou, row
    g_order = np.argsort(gt.image_id, kind="stable")
    g_img = gt.image_id[g_order]
    start = np.searchsorted(g_img, dets.image_id, side="left")
    count = np.searchsorted(g_img, dets.image_id, side="right") - start
    has = count > 0
    total = int(count.sum())
    det_of_pair = np.repeat(np.arange(D), count)
    first_pair = np.cumsum(count) - count
    offset = np.arange(total) - np.repeat(first_pair, count)
    gt_of_pair = g_order[np.repeat(start, count) + offset]
    d = dets.box[det_of_pair]
    g = gt.box[gt_of_pair]
    iw = np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0])
    ih = np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_d = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
    area_g = (g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1])
    union = area_d + area_g - inter
    pair_iou = np.divide(inter, union, out=np.zeros(total), where=union > 0)
    # segment argmax, first on ties: order pairs by (det, -iou, gt order)
    o = np.lexsort((offset, -pair_iou, det_of_pair))
    first = o[first_pair[has]]
    iou[has] = pair_iou[first]
    row[has] = gt_of_pair[first]
    return iou, row


def match_netcal_example(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] = (0.6,),
    *,
    score_threshold: float = 0.0,
) -> MatchResult:
    """netcal's example matching (module docstring) at each of ``T`` thresholds.

    Returns a :class:`~detcal.core.types.MatchResult` like :func:`detcal.matching.match`:
    ``matched [T,D]``, ``ignored [T,D]`` (all False), ``gt_index [T,D]`` (the
    best-overlap GT row where matched, else -1), ``iou [D]`` (best IoU with a
    GT of *any* class), ``considered [D]`` (``score >= score_threshold``);
    ``mode = "netcal_example"``, ``class_agnostic = True``, ``max_dets = None``.
    """
    if not isinstance(dets, Detections):
        raise DetcalInputError(f"dets must be Detections, got {type(dets).__name__}", field="dets")
    if not isinstance(gt, GroundTruth):
        raise DetcalInputError(f"gt must be GroundTruth, got {type(gt).__name__}", field="gt")
    thr = np.asarray(iou_thresholds, dtype=np.float64).reshape(-1)
    if thr.size == 0 or not (np.isfinite(thr).all() and (thr >= 0).all() and (thr <= 1).all()):
        raise DetcalInputError(
            f"IoU thresholds must be a non-empty list in [0, 1], got {thr.tolist()}", field="iou_thresholds"
        )
    if not np.isfinite(score_threshold):
        raise DetcalInputError(f"score_threshold must be finite, got {score_threshold}", field="score_threshold")
    check_boxes(dets.box, "detection")
    check_boxes(gt.box, "ground truth")
    iou, row = best_overlap(dets, gt)
    considered = dets.score >= score_threshold
    same_class = (row >= 0) & (gt.category[np.maximum(row, 0)] == dets.category)
    matched = (iou[None, :] >= thr[:, None]) & (same_class & considered)[None, :]
    gt_index = np.where(matched, row[None, :], -1)
    return MatchResult(
        iou_thresholds=thr,
        matched=matched,
        ignored=np.zeros_like(matched),
        gt_index=gt_index,
        iou=iou,
        considered=considered,
        mode=MODE,
        class_agnostic=True,
        score_threshold=float(score_threshold),
        max_dets=None,
        params={"rule": "highest IoU over all classes, matched when IoU >= t and the classes agree; not one-to-one"},
    )


__all__ = ["MODE", "best_overlap", "match_netcal_example"]
