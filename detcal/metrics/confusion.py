"""Detection confusion matrix and likely label errors (docs/metrics.md#confusion-matrix).

Both come from one class-agnostic matching, TIDE's rule without the classes
(:func:`detcal.metrics.tide.scene_match`): per image, the ``max_dets`` (100)
highest-scored detections in descending score order each take the untaken
non-crowd box of any class with the highest IoU (the first such box on ties)
when that IoU is at least ``iou``; an unmatched detection with more than
``iou`` of its area inside a crowd box is ignored (it leaves the matrix). The
walk goes in descending score order, so the detections with ``score >=
score_threshold`` are matched exactly as if the others were absent.

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

from detcal.core.types import Detections, GroundTruth, Images
from detcal.metrics.lrp import paired_iou
from detcal.metrics.tide import Scene, scene, scene_match

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


def agnostic_match(
    dets: Detections,
    gt: GroundTruth,
    iou: float = 0.5,
    max_dets: int | None = 100,
    *,
    images: Images | None = None,
    paired: Scene | None = None,
) -> AgnosticMatch:
    """The class-agnostic matching at ``iou`` (module docstring); ``paired``: a :func:`detcal.metrics.tide.scene`
    of the same inputs to reuse (``images``: the dataset's images, else those the ids name)."""
    md = int(max_dets) if max_dets else max(len(dets), 1)
    sc = paired
    if sc is None or sc.max_dets != md:
        if images is None:
            ids = np.unique(np.concatenate([dets.image_id, gt.image_id]))
            images = Images(id=ids, width=np.full(len(ids), np.nan), height=np.full(len(ids), np.nan))
        sc = scene(images, gt, dets, md)
    got, ign, best = scene_match(sc, float(iou), classwise=False)
    assert best is not None
    nd = len(dets)
    # GT rows as the matching's integers (int32 when they fit: the same values); the kept detections' copies
    # released before the IoU of the matched pairs is gathered (peak memory)
    row, ignored, any_iou = (
        sc.spread(got, -1),
        sc.spread(ign, False),
        sc.spread(best.astype(np.float64, copy=False), 0.0),
    )
    considered = sc.spread(np.ones(len(got), bool), False)
    del got, ign, best
    pair = np.zeros(nd)
    hit = np.flatnonzero(row >= 0)
    pair[hit] = paired_iou(np.take(dets.box, hit, axis=0), np.take(gt.box, row[hit], axis=0))  # take: box[hit], quicker
    return AgnosticMatch(float(iou), row, ignored, considered, pair, any_iou)


def _code_table(cats: np.ndarray) -> np.ndarray:
    """Row of each class id in ``cats`` (distinct, ascending, non-negative), ``len(cats)`` (background) for the
    ids between them, indexed by id."""
    table = np.full(int(cats[-1]) + 1, len(cats), np.int64)
    table[cats] = np.arange(len(cats))
    return table


def confusion_matrix(
    am: AgnosticMatch, dets: Detections, gt: GroundTruth, categories: list[int], score_threshold: float = 0.5
) -> dict[str, Any]:
    """The matrix (module docstring) of the detections with ``score >= score_threshold`` over ``categories``
    (class ids, sorted) plus background."""
    cats = np.asarray(sorted(categories), np.int64)
    c = len(cats)

    # small non-negative ids: a lookup table (the same codes as a binary search, without one per detection)
    small = c > 0 and cats[0] >= 0 and cats[-1] < 1 << 20 and bool(np.all(cats[1:] > cats[:-1]))
    table = _code_table(cats) if small else None

    def code(x: np.ndarray) -> np.ndarray:
        """Row/column of each class id (background for an id outside ``categories``)."""
        if c == 0:
            return np.zeros(len(x), np.int64)
        if table is not None:
            inside = (x >= 0) & (x < len(table))
            return np.where(inside, table[np.where(inside, x, 0)], c)
        pos = np.clip(np.searchsorted(cats, x), 0, c - 1)
        return np.where(cats[pos] == x, pos, c)

    # only the detections in the matrix, their columns coded once: a matched one's row is its box's class, an
    # unmatched one's the background
    live = np.flatnonzero(am.considered & ~am.ignored & (dets.score >= score_threshold))
    g = am.gt_row[live]
    k = code(dets.category[live])
    del live
    hit = g >= 0
    g = g[hit]
    gcode = code(gt.category[g])
    r = np.full(len(k), c, np.int64)
    r[hit] = gcode
    n_matched, n_other = len(g), int((k[hit] != gcode).sum())
    real = ~(gt.iscrowd | gt.ignore)
    taken = np.zeros(len(gt), bool)
    taken[g] = True
    del g, gcode, hit
    missed = np.flatnonzero(real & ~taken)
    key = np.concatenate([r * (c + 1) + k, code(gt.category[missed]) * (c + 1) + c])
    del r, k
    m = np.bincount(key, minlength=(c + 1) ** 2).reshape(c + 1, c + 1)
    return {
        "iou": am.iou,
        "score_threshold": float(score_threshold),
        "categories": cats.tolist(),
        "matrix": m.tolist(),
        "layout": "rows: ground-truth class then background; columns: predicted class then background",
        "n_matched": n_matched,
        "n_matched_other_class": n_other,
        "n_background_detections": int(len(key) - len(missed) - n_matched),
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
