"""Detection confusion matrix and likely label errors (docs/metrics.md#confusion-matrix).

Both come from one class-agnostic matching (pycocotools' greedy rule with
``useCats=0``, :func:`detcal.matching.match`): per image, the detections with
``score >= score_threshold`` in descending score order each take the
untaken ground-truth box of any class with the highest IoU, when that IoU is
at least ``iou``; crowd boxes make a detection ignored (it leaves the matrix).

Confusion matrix ``M [C+1, C+1]``, rows the ground-truth class, columns the
predicted class, the last row and column *background*:

* a matched detection adds 1 to ``M[class of its box, its class]``;
* an unmatched detection adds 1 to ``M[background, its class]``;
* an untaken non-crowd box adds 1 to ``M[its class, background]``.

Likely label errors, each list ranked by descending score:

* ``unannotated``: detections with ``score >= min_score`` that overlap no
  ground-truth box of any class at all (IoU 0, crowd boxes included), where
  a missing annotation is as likely as a false alarm;
* ``class_disagreement``: matched pairs with IoU ``>= min_iou`` whose classes
  differ and whose detection has ``score >= min_score``, where the box label
  may be wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from detcal.core.types import Detections, GroundTruth
from detcal.matching.engine import match
from detcal.metrics.lrp import paired_iou

__all__ = ["AgnosticMatch", "agnostic_match", "confusion_matrix", "label_errors"]


@dataclass
class AgnosticMatch:
    """Class-agnostic matching at one IoU: ``gt_row [D]`` (-1 unmatched), ``ignored [D]``,
    ``considered [D]`` (score at or above the threshold, within ``max_dets``), ``pair_iou [D]`` IoU with the
    matched box (0 unmatched), ``any_iou [D]`` best IoU with any box (crowd: over the detection's area)."""

    iou: float
    gt_row: np.ndarray
    ignored: np.ndarray
    considered: np.ndarray
    pair_iou: np.ndarray
    any_iou: np.ndarray


def agnostic_match(dets: Detections, gt: GroundTruth, iou: float = 0.5, max_dets: int | None = 100) -> AgnosticMatch:
    """Class-agnostic greedy matching (pycocotools ``useCats=0``) at ``iou``. The walk takes detections in
    descending score order, so the detections at or above any score threshold are matched exactly as if the
    others were absent: :func:`confusion_matrix` applies its threshold to this one matching."""
    m = match(dets, gt, (float(iou),), class_agnostic=True, max_dets=max_dets)
    row = np.where(m.matched[0], m.gt_index[0], -1)
    pair = np.zeros(len(dets))
    hit = np.flatnonzero(row >= 0)
    pair[hit] = paired_iou(dets.box[hit], gt.box[row[hit]])
    return AgnosticMatch(float(iou), row, m.ignored[0] & m.considered, m.considered, pair,
                         np.nan_to_num(m.iou))  # fmt: skip


def confusion_matrix(
    am: AgnosticMatch, dets: Detections, gt: GroundTruth, categories: list[int], score_threshold: float = 0.5
) -> dict[str, Any]:
    """The matrix (module docstring) of the detections with ``score >= score_threshold`` over ``categories``
    (class ids, sorted) plus background."""
    cats = np.asarray(sorted(categories), np.int64)
    c = len(cats)

    def code(x: np.ndarray) -> np.ndarray:
        """Row/column of each class id (background for an id outside ``categories``)."""
        if c == 0:
            return np.zeros(len(x), np.int64)
        pos = np.clip(np.searchsorted(cats, x), 0, c - 1)
        return np.where(cats[pos] == x, pos, c)

    live = am.considered & ~am.ignored & (dets.score >= score_threshold)
    matched = live & (am.gt_row >= 0)
    unmatched = live & (am.gt_row < 0)
    dcode = code(dets.category)
    gcode = code(gt.category[am.gt_row[matched]])
    rows = [gcode, np.full(int(unmatched.sum()), c)]
    cols = [dcode[matched], dcode[unmatched]]
    real = ~(gt.iscrowd | gt.ignore)
    taken = np.zeros(len(gt), bool)
    taken[am.gt_row[matched]] = True
    missed = np.flatnonzero(real & ~taken)
    rows.append(code(gt.category[missed]))
    cols.append(np.full(len(missed), c))
    r, k = np.concatenate(rows), np.concatenate(cols)
    m = np.bincount(r * (c + 1) + k, minlength=(c + 1) ** 2).reshape(c + 1, c + 1)
    return {
        "iou": am.iou,
        "score_threshold": float(score_threshold),
        "categories": cats.tolist(),
        "matrix": m.tolist(),
        "layout": "rows: ground-truth class then background; columns: predicted class then background",
        "n_matched": int(matched.sum()),
        "n_matched_other_class": int((dcode[matched] != gcode).sum()),
        "n_background_detections": int(unmatched.sum()),
        "n_missed_boxes": int(len(missed)),
    }


def _rows(idx: np.ndarray, dets: Detections, gt: GroundTruth, am: AgnosticMatch, names: dict[int, str]) -> list:
    out = []
    for i in idx.tolist():
        g = int(am.gt_row[i])
        row: dict[str, Any] = {
            "detection": i,
            "image_id": int(dets.image_id[i]),
            "category": int(dets.category[i]),
            "class": names.get(int(dets.category[i]), str(int(dets.category[i]))),
            "score": float(dets.score[i]),
            "box": [float(v) for v in dets.box[i]],
        }
        if g >= 0:
            gc = int(gt.category[g])
            row.update(gt_id=int(gt.id[g]), gt_category=gc, gt_class=names.get(gc, str(gc)),
                       gt_box=[float(v) for v in gt.box[g]], iou=float(am.pair_iou[i]))  # fmt: skip
        out.append(row)
    return out


def label_errors(
    am: AgnosticMatch,
    dets: Detections,
    gt: GroundTruth,
    names: dict[int, str],
    *,
    min_score: float = 0.7,
    min_iou: float = 0.8,
    top: int = 20,
) -> dict[str, Any]:
    """Likely label errors (module docstring), the ``top`` of each list by descending score (input order on ties)."""
    live = am.considered & ~am.ignored
    s = dets.score
    alone = np.flatnonzero(live & (am.gt_row < 0) & (am.any_iou <= 0) & (s >= min_score))
    m = np.flatnonzero(live & (am.gt_row >= 0))
    dis = m[(dets.category[m] != gt.category[am.gt_row[m]]) & (am.pair_iou[m] >= min_iou) & (s[m] >= min_score)]
    alone = alone[np.lexsort((alone, -s[alone]))]
    dis = dis[np.lexsort((dis, -s[dis]))]
    return {
        "params": {"iou": am.iou, "min_score": float(min_score), "min_iou": float(min_iou), "top": int(top)},
        "n_unannotated": int(len(alone)),
        "n_class_disagreement": int(len(dis)),
        "unannotated": _rows(alone[:top], dets, gt, am, names),
        "class_disagreement": _rows(dis[:top], dets, gt, am, names),
    }
