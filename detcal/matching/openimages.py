"""The Open Images V7 detection rules as a matching mode: ``match_openimages``.

The challenge's protocol (the TF Object Detection API's
``OpenImagesDetectionChallengeEvaluator``, group-of weight 1), per image and
class, here vectorised:

1. only the detections of a class the image has a verified image-level label
   for (positive or negative) or a box of are evaluated (the others are not
   considered);
2. detections by descending score (ties: input order); each is paired with the
   non-group-of box of its image and class of highest IoU (taken or not); IoU
   ``>= t``: on a ``difficult`` (ignored) box the detection is ignored, else
   the first detection paired with the box is a true positive;
3. every detection not a true positive nor ignored by 2 is paired with the
   group-of box of highest IoA (intersection over the detection's area);
   IoA ``>= t``: the group-of box is found once: its highest-scored such
   detection is a true positive, the others are ignored;
4. the rest are false positives.

Step 2 follows the TF Object Detection API's ``per_image_evaluation``: a
detection whose best box is taken is a duplicate even where another free box
of the class overlaps it enough. hotcoco 1.3.0 lets it take that free box
instead (pycocotools' greedy rule); ``single="greedy"`` reproduces hotcoco.

A group-of box is one object to find (one positive in the AP denominator,
one missed object when nothing lies in it). The calibration sample follows
the same rules: a detection is a positive when 2 or 3 makes it the true
positive, leaves the sample when ignored or not evaluated, and is a negative
otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from detcal.core.types import Detections, GroundTruth, MatchResult
from detcal.data.openimages import OpenImagesRules
from detcal.matching.engine import match
from detcal.matching.lvis import top_per_image
from detcal.matching.voc import best_same_class

__all__ = ["MODE", "match_openimages"]

MODE = "openimages"
"""The ``MatchResult.mode`` of this rule."""


def _first_per_box(row: np.ndarray, cand: np.ndarray, order: np.ndarray) -> np.ndarray:
    """[D] the first candidate (in ``order``) paired with each box."""
    c = order[cand[order]]
    _, first = np.unique(row[c], return_index=True)
    out = np.zeros(len(row), bool)
    out[c[first]] = True
    return out


def _greedy_single(
    dets: Detections, gt: GroundTruth, single: np.ndarray, considered: np.ndarray, thr: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """pycocotools' greedy matching of the considered detections with the non-group-of boxes: matched [T, D],
    ignored (on a difficult box) [T, D] and the box rows [T, D]."""
    rows = np.flatnonzero(considered)
    sub = gt.select(single)
    sub.iscrowd = np.zeros(len(sub), bool)
    m = match(dets.select(rows), sub, tuple(thr.tolist()), gt_ignore="ignore_or_crowd", max_dets=None)
    t, d = len(thr), len(dets)
    matched, ignored, row = np.zeros((t, d), bool), np.zeros((t, d), bool), np.full((t, d), -1, np.int64)
    matched[:, rows], ignored[:, rows] = m.matched, m.ignored
    row[:, rows] = np.where(m.gt_index >= 0, single[np.maximum(m.gt_index, 0)], -1)
    return matched, ignored, row


def _rows(subset: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Rows of ``r`` (positions in the ``subset`` of ground truth, -1 none) in the whole ground truth."""
    if len(subset) == 0:
        return np.full(len(r), -1, np.int64)
    return np.where(r >= 0, subset[np.maximum(r, 0)], -1)


def match_openimages(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float],
    rules: OpenImagesRules,
    *,
    score_threshold: float = 0.0,
    max_dets: int | None = None,
    single: str = "tf",
) -> MatchResult:
    """The Open Images rules (module docstring) at each of ``T`` thresholds; a
    :class:`~detcal.core.types.MatchResult` like :func:`detcal.matching.match`, ``mode = "openimages"``.
    ``max_dets``: keep the best N of each image (None: all, as the challenge). ``single``: how step 2
    pairs a detection with a non-group-of box: ``"tf"`` (default) the box of highest IoU, taken or not,
    as the TF Object Detection API's ``per_image_evaluation``; ``"greedy"`` the best box still free
    (pycocotools' rule), as hotcoco 1.3.0's Open Images evaluation does."""
    thr = np.asarray(iou_thresholds, dtype=np.float64).reshape(-1)
    considered = rules.is_evaluable(dets.image_id, dets.category) & (dets.score >= score_threshold)
    considered &= top_per_image(dets, max_dets)
    grp = rules.group_of
    nongroup = np.flatnonzero(~grp)
    groups = np.flatnonzero(grp)
    if single not in ("tf", "greedy"):
        raise ValueError(f"single must be 'tf' or 'greedy', got {single!r}")
    iou, r1 = best_same_class(dets, gt.select(nongroup))
    ioa, r2 = best_same_class(dets, gt.select(groups), ioa=True)
    row1, row2 = _rows(nongroup, r1), _rows(groups, r2)
    difficult = (row1 >= 0) & gt.ignore[np.maximum(row1, 0)]
    order = np.lexsort((np.arange(len(dets)), -dets.score))
    t_n, d_n = len(thr), len(dets)
    matched, ignored = np.zeros((t_n, d_n), bool), np.zeros((t_n, d_n), bool)
    gt_index = np.full((t_n, d_n), -1, np.int64)
    greedy = _greedy_single(dets, gt, nongroup, considered, thr) if single == "greedy" else None
    for t, th in enumerate(thr.tolist()):  # one vectorised pass per threshold
        if greedy is not None:
            tp1, ign1, row1 = greedy[0][t], greedy[1][t], np.where(greedy[0][t] | greedy[1][t], greedy[2][t], row1)
        else:
            hit = considered & (row1 >= 0) & (iou >= th)
            tp1 = _first_per_box(row1, hit & ~difficult, order)
            ign1 = hit & difficult
        in_group = considered & ~tp1 & ~ign1 & (row2 >= 0) & (ioa >= th)
        tp2 = _first_per_box(row2, in_group, order)
        matched[t] = tp1 | tp2
        ignored[t] = ign1 | (in_group & ~tp2)
        gt_index[t] = np.where(tp1 | ign1, row1, np.where(in_group, row2, -1))
    return MatchResult(
        iou_thresholds=thr,
        matched=matched,
        ignored=ignored,
        gt_index=gt_index,
        iou=iou,
        considered=considered,
        mode=MODE,
        score_threshold=float(score_threshold),
        max_dets=max_dets,
        params={
            "rule": "Open Images challenge: verified classes only; best non-group box by IoU >= t (first detection "
            "TP); else best group-of box by IoA >= t (best-scored detection TP, others ignored)"
        },
    )
