"""The Pascal VOC devkit's matching as a mode: ``match_voc``.

The rule of the VOC development kit (``VOCevaldet.m``, and its Python port
``voc_eval.py``), per class over all images, here vectorised:

1. detections in descending score order (ties: input order; the devkit's
   unstable sort leaves ties unspecified);
2. each detection is paired with the ground-truth box of its image and class
   with the highest IoU, whether or not that box is taken already and whether
   or not it is ``difficult`` (on an exact IoU tie, the first such box in the
   ground-truth order);
3. at threshold ``t``: IoU ``> t`` (strictly) with a ``difficult`` box: the
   detection is *ignored* (neither true nor false positive); with another box:
   the first detection (in the order of 1) to pair with it is a true positive,
   every later one a false positive (a duplicate, even where a second box of
   the class overlaps it enough); IoU ``<= t``: false positive.

``difficult`` is ``GroundTruth.ignore`` (or ``iscrowd``), as the VOC adapter
(:mod:`detcal.data.voc`) reads it. IoU is ``inter / (area_d + area_g -
inter)`` of the continuous boxes; the VOC adapter turns the devkit's
one-based inclusive pixel boxes ``[xmin, xmax]`` into ``[xmin - 1, xmax]``,
which makes this IoU the devkit's ``+1`` IoU. Unlike pycocotools' greedy rule,
a detection never falls back to a second-best free box (step 2), so no
sequential pass is needed: the true positive of each box is the first
detection pairing with it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, Images, MatchResult

__all__ = ["MODE", "best_same_class", "match_voc"]

MODE = "voc"
"""The ``MatchResult.mode`` of this rule."""


def _group_key(image_id: np.ndarray, category: np.ndarray, class_agnostic: bool) -> np.ndarray:
    if class_agnostic:
        return np.stack([image_id, np.zeros_like(image_id)], axis=1)
    return np.stack([image_id, category], axis=1)


def best_same_class(
    dets: Detections, gt: GroundTruth, class_agnostic: bool = False, ioa: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """For each detection, the highest IoU with a GT box of its image (and class) and that box's row
    (first in GT order on a tie). Returns ``(iou [D], gt_row [D])``; ``0`` and ``-1`` where there is none.
    ``ioa``: intersection over the detection's area instead (the Open Images group-of measure)."""
    n_d = len(dets)
    iou = np.zeros(n_d)
    row = np.full(n_d, -1, np.int64)
    if n_d == 0 or len(gt) == 0:
        return iou, row
    gk = _group_key(gt.image_id, gt.category, class_agnostic)
    dk = _group_key(dets.image_id, dets.category, class_agnostic)
    g_order = np.lexsort((gk[:, 1], gk[:, 0]))  # stable: GT order kept within a group
    uniq, g_code = np.unique(gk[g_order], axis=0, return_inverse=True)
    g_code = g_code.reshape(-1)
    start = np.searchsorted(g_code, np.arange(len(uniq)), side="left")
    stop = np.searchsorted(g_code, np.arange(len(uniq)), side="right")
    # each detection's group among the GT groups (-1: none)
    loc = _find_rows(uniq, dk)
    has = loc >= 0
    count = np.where(has, stop[np.maximum(loc, 0)] - start[np.maximum(loc, 0)], 0)
    total = int(count.sum())
    if total == 0:
        return iou, row
    det_of_pair = np.repeat(np.arange(n_d), count)
    first_pair = np.cumsum(count) - count
    offset = np.arange(total) - np.repeat(first_pair, count)
    gt_of_pair = g_order[np.repeat(start[np.maximum(loc, 0)], count) + offset]
    d, g = dets.box[det_of_pair], gt.box[gt_of_pair]
    iw = np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0])
    ih = np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_d = (d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1])
    union = area_d if ioa else area_d + (g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1]) - inter
    pair_iou = np.divide(inter, union, out=np.zeros(total), where=union > 0)
    o = np.lexsort((offset, -pair_iou, det_of_pair))  # per detection: highest IoU, then GT order
    with_pairs = count > 0
    first = o[first_pair[with_pairs]]
    iou[with_pairs] = pair_iou[first]
    row[with_pairs] = gt_of_pair[first]
    return iou, row


def _find_rows(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each ``keys`` pair in the sorted unique pairs ``table`` (-1 where absent)."""
    both = np.concatenate([table, keys])
    _, code = np.unique(both, axis=0, return_inverse=True)
    code = code.reshape(-1)
    lookup = np.full(int(code.max()) + 1, -1, np.int64)
    lookup[code[: len(table)]] = np.arange(len(table))
    return lookup[code[len(table) :]]


def _considered(dets: Detections, score_threshold: float, max_dets: int | None, class_agnostic: bool) -> np.ndarray:
    """Detections at or above ``score_threshold`` among the ``max_dets`` best of their image (and class)."""
    keep = dets.score >= score_threshold
    if max_dets is None or len(dets) == 0:
        return keep
    k = _group_key(dets.image_id, dets.category, class_agnostic)
    idx = np.flatnonzero(keep)
    o = idx[np.lexsort((idx, -dets.score[idx], k[idx, 1], k[idx, 0]))]
    ko = k[o]
    new = np.ones(len(o), bool)
    new[1:] = np.any(ko[1:] != ko[:-1], axis=1)
    group_start = np.maximum.accumulate(np.where(new, np.arange(len(o)), 0))
    rank = np.arange(len(o)) - group_start
    out = np.zeros(len(dets), bool)
    out[o[rank < max_dets]] = True
    return out


def match_voc(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] = (0.5,),
    *,
    class_agnostic: bool = False,
    score_threshold: float = 0.0,
    max_dets: int | None = None,
    images: Images | None = None,
) -> MatchResult:
    """The VOC devkit's matching (module docstring) at each of ``T`` thresholds.

    Returns a :class:`~detcal.core.types.MatchResult` like :func:`detcal.matching.match`:
    ``matched/ignored/gt_index [T,D]`` (``gt_index`` the paired GT row of true positives and of
    detections ignored on a difficult box, else -1), ``iou [D]`` the best IoU with a GT of the
    detection's image and class, ``considered [D]`` (score threshold and ``max_dets`` per image
    and class; the devkit has no cap: None); ``mode = "voc"``.
    """
    thr = np.asarray(iou_thresholds, dtype=np.float64).reshape(-1)
    if thr.size == 0 or not (np.isfinite(thr).all() and (thr >= 0).all() and (thr <= 1).all()):
        raise DetcalInputError(
            f"IoU thresholds must be a non-empty list in [0, 1], got {thr.tolist()}", field="iou_thresholds"
        )
    if images is not None and len(dets):
        bad = images.index_of(dets.image_id) < 0
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DetcalInputError(f"image id {int(dets.image_id[i])} is not in the images", record=i, field="image_id")
    considered = _considered(dets, score_threshold, max_dets, class_agnostic)
    iou, row = best_same_class(dets, gt, class_agnostic)
    difficult = (gt.ignore | gt.iscrowd)[np.maximum(row, 0)] & (row >= 0)
    hit = (iou[None, :] > thr[:, None]) & considered[None, :]
    ignored = hit & difficult[None, :]
    cand = hit & ~difficult[None, :]
    order = np.lexsort((np.arange(len(dets)), -dets.score))  # descending score, ties in input order
    matched = np.zeros_like(cand)
    for t in range(len(thr)):  # one vectorised pass per threshold
        c = order[cand[t, order]]
        _, first = np.unique(row[c], return_index=True)
        matched[t, c[first]] = True
    gt_index = np.where(matched | ignored, row[None, :], -1)
    return MatchResult(
        iou_thresholds=thr,
        matched=matched,
        ignored=ignored,
        gt_index=gt_index,
        iou=iou,
        considered=considered,
        mode=MODE,
        class_agnostic=class_agnostic,
        score_threshold=float(score_threshold),
        max_dets=max_dets,
        params={
            "rule": "VOC devkit: highest-IoU box of the class (taken or not); IoU > t; difficult -> ignored; "
            "the first detection by score on a box is the TP, later ones FP"
        },
    )
