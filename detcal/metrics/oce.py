"""Object-level Calibration Error (OCE) of Park, Sobolewski and Azizan (IEEE TPAMI 2026, arXiv 2412.01782).

OCE scores calibration per ground-truth *object* instead of per detection.
For an IoU threshold ``tau`` and an object ``g`` of class ``y``, let ``M_g``
be every detection of the same image whose IoU with ``g`` is at least ``tau``
(whatever the detection's class). The detections of ``M_g`` are aggregated
into one prediction and scored with a Brier score against ``y``; an object
with ``M_g`` empty (missed) scores 1::

    OCE_tau = mean over objects of Brier(g)
    OCE     = mean over tau in iou_thresholds (default 0.5 and 0.75)

Aggregation (``aggregation``):

``mean``          the mean of the matched predictions;
``max_iou``       the prediction of the matched detection with the highest
                  IoU (ties: the first in the results' order);
``iou_weighted``  the IoU-weighted mean, weights ``IoU / sum IoU``.

Brier score (``brier``):

``multiclass``    exact: with class distributions ``p`` [C] (``Detections.class_probs``,
                  one column per category of the ground-truth file in
                  ascending category-id order), ``sum_c (1[c = y] - pbar_c)^2``
                  of the aggregated distribution ``pbar``;
``binary``        the approximation used when only the top score ``s`` and
                  the predicted class ``l`` are known: the classes collapse
                  to {l, not l}, so the Brier score is ``2 (1 - s)^2`` when
                  ``l = y`` and ``2 s^2`` otherwise. The aggregated ``s`` is
                  the mean / best-IoU / IoU-weighted score and ``l`` the
                  majority class of ``M_g`` (ties: the smallest category id)
                  for ``mean``, the best-IoU detection's class otherwise.
``auto``          ``multiclass`` when the detections carry ``class_probs``.

Variants (``variant``): ``detcal`` (default) takes the ground-truth boxes
that are neither crowd regions nor ignored as the objects; ``uq_detr`` takes
every box as an object, as uq-detr 0.1.1 does (it has no crowd flag). With
no object at all OCE is NaN (uq-detr returns 1).

What OCE does not see: a detection that overlaps no object at IoU ``tau``
never enters any ``M_g``, so false positives away from every object are
not penalised. Report it beside a detection-level measure (D-ECE, LaECE) and
the false-positive part of LRP.

IoUs are computed from the ``xyxy`` corners (``(x2 - x1) * (y2 - y1)``
areas). The (object, detection) pairs that can reach the lowest threshold are
built with array operations (:func:`detcal.metrics._pairs.overlap_pairs`);
there is no loop over objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MetricResult
from detcal.metrics._pairs import BoxColumns, BoxRows, overlap_pairs

OCE_PAIR_BLOCK: int = 1 << 15
"""Candidate pairs OCE examines at once (:func:`detcal.metrics._pairs.overlap_pairs`' ``block``): a quarter of
the default, which cuts the OCE stage's peak memory (each block's gathered box columns) by about 17 MB at 295k
detections at no measured cost in time; every block is computed alone, so the size changes no number."""
OCE_THRESHOLDS: tuple[float, ...] = (0.5, 0.75)
"""IoU thresholds of the paper (and of uq-detr's default)."""
AGGREGATIONS: tuple[str, ...] = ("mean", "max_iou", "iou_weighted")
BRIER_KINDS: tuple[str, ...] = ("auto", "multiclass", "binary")
VARIANTS: tuple[str, ...] = ("detcal", "uq_detr")


@dataclass
class ObjectScores:
    """Per-object Brier scores of OCE.

    ``gt_rows [O]`` rows of the objects in the ground truth; ``image_id [O]``;
    ``iou_thresholds [T]``; ``brier [T,O]``; ``n_matched [T,O]`` detections
    aggregated (0: missed, Brier 1); ``brier_kind`` ``"multiclass"`` or
    ``"binary"``; ``aggregation``; ``variant``; ``det_max_iou [D]`` each detection's highest IoU
    with any object when it reaches the lowest threshold, else 0: a detection with
    ``det_max_iou < tau`` never enters OCE at ``tau``.
    """

    gt_rows: np.ndarray
    image_id: np.ndarray
    iou_thresholds: np.ndarray
    brier: np.ndarray
    n_matched: np.ndarray
    brier_kind: str
    aggregation: str
    variant: str
    det_max_iou: np.ndarray | None = None

    @property
    def per_object(self) -> np.ndarray:
        """Brier score of every object averaged over the thresholds [O]."""
        return self.brier.mean(axis=0) if self.brier.shape[0] else np.zeros(self.brier.shape[1])

    def per_threshold(self) -> np.ndarray:
        """OCE at each threshold [T] (NaN without objects).

        Summed image by image in ascending image id (each image's objects in their order), so the
        value does not depend on the order in which the images were given (to the last bit)."""
        if self.brier.shape[1] == 0:
            return np.full(self.brier.shape[0], np.nan)
        return self.brier[:, np.argsort(self.image_id, kind="stable")].mean(axis=1)

    @property
    def value(self) -> float:
        """OCE: the mean over thresholds of the mean over objects."""
        return float(self.per_threshold().mean()) if self.brier.shape[0] else float("nan")


def _check_args(thresholds: Sequence[float], aggregation: str, brier: str, variant: str) -> np.ndarray:
    taus = np.asarray(list(thresholds), dtype=np.float64).reshape(-1)
    if len(taus) == 0 or not np.all(np.isfinite(taus)) or np.any(taus <= 0) or np.any(taus > 1):
        raise DetcalInputError(f"OCE IoU thresholds must lie in (0, 1], got {list(thresholds)}", field="iou_thresholds")
    for value, allowed, name in (
        (aggregation, AGGREGATIONS, "aggregation"),
        (brier, BRIER_KINDS, "brier"),
        (variant, VARIANTS, "variant"),
    ):
        if value not in allowed:
            raise DetcalInputError(f"unknown OCE {name} {value!r}; choose one of {allowed}", field=name)
    return taus


def _class_columns(dets: Detections, gt: GroundTruth, rows: np.ndarray, categories: Sequence[int] | None) -> np.ndarray:
    """Column of each object's class in ``class_probs`` [O] (checks the distribution's shape and values)."""
    probs = dets.class_probs
    if probs is None:
        raise DetcalInputError(
            "the multiclass Brier score needs class distributions (class_probs / all_scores)", field="class_probs"
        )
    cats = np.unique(gt.category) if categories is None else np.asarray(list(categories), dtype=np.int64)
    if np.any(np.diff(cats) <= 0):
        raise DetcalInputError("categories must be strictly ascending category ids", field="categories")
    if probs.shape[1] != len(cats):
        raise DetcalInputError(
            f"class_probs has {probs.shape[1]} columns, expected one per category ({len(cats)})", field="class_probs"
        )
    bad = ~np.isfinite(probs) | (probs < 0) | (probs > 1)
    if bad.any():
        i = int(np.flatnonzero(bad.any(axis=1))[0])
        raise DetcalInputError(
            "class probabilities must lie in [0, 1]", record=f"detection row {i}", field="class_probs"
        )
    col = np.searchsorted(cats, gt.category[rows])
    col_c = np.clip(col, 0, max(len(cats) - 1, 0))
    missing = (len(cats) == 0) | (cats[col_c] != gt.category[rows]) if len(cats) else np.ones(len(rows), bool)
    if np.any(missing):
        j = int(rows[np.flatnonzero(missing)[0]])
        raise DetcalInputError(
            f"ground-truth category {int(gt.category[j])} has no class_probs column",
            record=f"ground-truth row {j}",
            field="category",
        )
    return col_c


class _PairBlock:
    """One block of (object, detection) pairs cut at a threshold, sorted by object and, within an object, by
    detection row; the matched count [n_obj] and the best-IoU detection of each object (computed once, on
    first use, and shared by the aggregations)."""

    def __init__(self, obj: np.ndarray, det: np.ndarray, iou: np.ndarray, n_obj: int):
        self.obj, self.det, self.iou, self.n_obj = obj, det, iou, n_obj
        self.n = np.bincount(obj, minlength=n_obj)
        self.hit = self.n > 0
        self._best: np.ndarray | None = None

    @property
    def best_det(self) -> np.ndarray:
        """Detection row [n_obj] of each object's highest IoU, the first of equal ones (0 where no pair)."""
        if self._best is None:
            # the pairs of an object are contiguous: its maximum is a segment maximum (exact)
            starts = np.flatnonzero(np.concatenate([[True], self.obj[1:] != self.obj[:-1]]))
            seg = np.cumsum(np.concatenate([[False], self.obj[1:] != self.obj[:-1]]))
            gmax = np.maximum.reduceat(self.iou, starts)
            pos = np.where(self.iou == gmax[seg], np.arange(len(self.iou)), len(self.iou))
            first = np.minimum.reduceat(pos, starts)
            self._best = np.zeros(self.n_obj, np.int64)
            self._best[self.obj[starts]] = self.det[first]
        return self._best


def _majority_label(obj: np.ndarray, label: np.ndarray, n_obj: int, ascending: bool = False) -> np.ndarray:
    """Most frequent label per object [n_obj] (ties: the smallest label); -1 where no pair; ``ascending``: ``obj``
    is known to be ascending (a block's are), not checked."""
    out = np.full(n_obj, -1, np.int64)
    if len(obj) == 0:
        return out
    # an object whose pairs all carry one label has it as the majority: only the others are counted (pairs in
    # ascending object, as a block's are: a label change within an object's run marks it)
    change = np.flatnonzero((obj[1:] == obj[:-1]) & (label[1:] != label[:-1]))
    if len(change) * 4 < len(obj) and (ascending or not np.any(obj[1:] < obj[:-1])):
        out[obj] = label  # a pure object's label (the mixed ones are overwritten below)
        if not len(change):
            return out
        mixed = np.zeros(n_obj, bool)
        mixed[obj[change]] = True
        sel = np.flatnonzero(mixed[obj])
        obj, label = obj[sel], label[sel]
    lab64 = np.asarray(label, np.int64)
    lo, hi = int(lab64.min()), int(lab64.max())
    if (hi - lo + 1) * (n_obj + 1) < 2**62:  # (object, label) as one integer, sorted as values: only the sorted
        # (object, label) values are read below, so equal keys may come in any order (no stable sort, no gathers)
        span = hi - lo + 1
        key = np.asarray(obj, np.int64) * span
        key += lab64 - lo
        key.sort()
        o, lab = np.divmod(key, span)
        lab += lo
    else:
        order = np.lexsort((label, obj))
        o, lab = obj[order], label[order]
    new = np.ones(len(o), bool)
    new[1:] = (o[1:] != o[:-1]) | (lab[1:] != lab[:-1])
    starts = np.flatnonzero(new)
    counts = np.diff(np.append(starts, len(o)))
    # per object, its (object, label) runs in ascending label: the first run with the most detections
    og = o[starts]
    bound = np.concatenate([[True], og[1:] != og[:-1]])
    first, seg = np.flatnonzero(bound), np.cumsum(bound) - 1
    best = np.maximum.reduceat(counts, first)
    pick = np.minimum.reduceat(np.where(counts == best[seg], np.arange(len(og)), len(og)), first)
    out[og[first]] = lab[starts][pick]
    return out


def _threshold_block(obj: np.ndarray, det: np.ndarray, iou: np.ndarray, taus: np.ndarray, n_obj: int) -> _PairBlock:
    """One :class:`_PairBlock` of the pairs cut at every threshold: object ``t * n_obj + o`` is object ``o`` at
    ``taus[t]``, its pairs those reaching ``taus[t]`` in their order (each object's pairs, sums and maxima as a
    block per threshold: the same values, one pass instead of one per threshold)."""
    keep = [np.flatnonzero(iou >= tau) for tau in taus]
    at = np.concatenate(keep)
    key = np.repeat(np.arange(len(taus), dtype=np.int64) * n_obj, [len(k) for k in keep]) + obj[at]
    return _PairBlock(key, det[at], iou[at], len(taus) * n_obj)


def _threshold_groups(n_taus: int, kind: str) -> list[tuple[int, int]]:
    """The thresholds whose pairs are examined together: all of them, but one at a time for class
    distributions, whose dense [objects, classes] mean would otherwise grow with the number of thresholds."""
    return [(t, t + 1) for t in range(n_taus)] if kind == "multiclass" else [(0, n_taus)]


def _block_brier(
    blk: _PairBlock, dets: Detections, ycol: np.ndarray, ycat: np.ndarray, aggregation: str, kind: str
) -> np.ndarray:
    """Brier [n_obj] of one block of pairs already cut at the threshold."""
    obj, det, iou, n, n_obj, hit = blk.obj, blk.det, blk.iou, blk.n, blk.n_obj, blk.hit
    out = np.ones(n_obj)
    if not hit.any():
        return out
    if aggregation == "iou_weighted":
        w = iou / np.bincount(obj, weights=iou, minlength=n_obj)[obj]
    if kind == "multiclass":
        probs = dets.class_probs
        assert probs is not None  # checked by _class_columns
        if aggregation == "max_iou":
            pbar = probs[blk.best_det[hit]]
        else:
            wt = np.ones(len(obj)) if aggregation == "mean" else w
            from scipy import sparse  # lazy: a class-distribution input only; start-up stays light

            pbar = np.asarray(sparse.csr_matrix((wt, (obj, det)), shape=(n_obj, len(probs))) @ probs)[hit]
            if aggregation == "mean":
                pbar = pbar / n[hit][:, None]
        pbar[np.arange(len(pbar)), ycol[hit]] -= 1.0
        out[hit] = np.sum(pbar * pbar, axis=1)
        return out
    conf = dets.score
    s: np.ndarray
    if aggregation == "mean":
        s = np.bincount(obj, weights=conf[det], minlength=n_obj)[hit] / n[hit]
        lab = _majority_label(obj, dets.category[det], n_obj, ascending=True)[hit]  # a block's objects ascend
    elif aggregation == "max_iou":
        s = conf[blk.best_det[hit]]
        lab = dets.category[blk.best_det[hit]]
    else:
        s = np.bincount(obj, weights=w * conf[det], minlength=n_obj)[hit]
        lab = dets.category[blk.best_det[hit]]
    out[hit] = np.where(lab == ycat[hit], 2.0 * (1.0 - s) ** 2, 2.0 * s**2)
    return out


def object_scores_by_aggregation(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] = OCE_THRESHOLDS,
    aggregations: Sequence[str] = AGGREGATIONS,
    *,
    brier: str = "auto",
    variant: str = "detcal",
    categories: Sequence[int] | None = None,
) -> dict[str, ObjectScores]:
    """Per-object Brier scores of OCE for several aggregations from one pass over the pairs."""
    return object_scores_of_sets(
        dets, gt, iou_thresholds, [(None, aggregations)], brier=brier, variant=variant, categories=categories
    )[0]


def object_scores_of_sets(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float],
    sets: Sequence[tuple[np.ndarray | None, Sequence[str]]],
    *,
    brier: str = "auto",
    variant: str = "detcal",
    categories: Sequence[int] | None = None,
    selected_max_iou: bool = True,
) -> list[dict[str, ObjectScores]]:
    """Per-object Brier scores of OCE of several sets of the detections, each ``(mask [D] or None for every
    detection, its aggregations)``, from one pass over the pairs (a pair's IoU does not depend on the other
    detections): set ``k`` equals :func:`object_scores_by_aggregation` of ``dets.select(mask)`` (its
    ``det_max_iou`` over the selected detections; None with ``selected_max_iou=False``, for a caller that does
    not read it: no compress of every detection); the input checks look at every detection."""
    taus = _check_args(iou_thresholds, "mean", brier, variant)
    for _, aggs in sets:
        for agg in aggs:
            _check_args(iou_thresholds, agg, brier, variant)
    kind = ("multiclass" if dets.class_probs is not None else "binary") if brier == "auto" else brier
    rows = np.arange(len(gt)) if variant == "uq_detr" else np.flatnonzero(~(gt.iscrowd | gt.ignore))
    ycol = _class_columns(dets, gt, rows, categories) if kind == "multiclass" else np.zeros(len(rows), np.int64)
    if kind == "binary" and (np.any(~np.isfinite(dets.score)) or np.any((dets.score < 0) | (dets.score > 1))):
        raise DetcalInputError("detection scores must lie in [0, 1]", field="score")
    local = np.full(len(gt), -1, np.int64)
    local[rows] = np.arange(len(rows))
    ycat = gt.category[rows]
    outs = [{a: np.ones((len(taus), len(rows))) for a in aggs} for _, aggs in sets]
    n_matched = [np.zeros((len(taus), len(rows)), np.int64) for _ in sets]
    det_max_iou = np.zeros(len(dets))
    gcols, dcols = BoxColumns(gt.box), BoxRows(dets.box)  # the detections' rows: no column copies of every box
    # pairs below every threshold never count
    pairs = overlap_pairs(dets.image_id, dcols, gt.image_id, gcols, float(taus.min()), rows, OCE_PAIR_BLOCK)
    for g, d, iou in pairs:
        if len(g) == 0:
            continue
        np.maximum.at(det_max_iou, d, iou)
        lo, hi = int(local[g[0]]), int(local[g[-1]]) + 1
        obj = local[g] - lo
        for k, (mask, aggs) in enumerate(sets):
            sel = np.flatnonzero(mask[d]) if mask is not None else slice(None)
            for t0, t1 in _threshold_groups(len(taus), kind):
                blk = _threshold_block(obj[sel], d[sel], iou[sel], taus[t0:t1], hi - lo)
                yk = np.tile(ycat[lo:hi], t1 - t0)
                yc = np.tile(ycol[lo:hi], t1 - t0) if kind == "multiclass" else yk  # (read for distributions only)
                for agg in aggs:
                    brier_t = _block_brier(blk, dets, yc, yk, agg, kind)
                    outs[k][agg][t0:t1, lo:hi] = brier_t.reshape(t1 - t0, hi - lo)
                n_matched[k][t0:t1, lo:hi] = blk.n.reshape(t1 - t0, hi - lo)
    return [
        {
            agg: ObjectScores(
                gt_rows=rows,
                image_id=gt.image_id[rows],
                iou_thresholds=taus,
                brier=outs[k][agg],
                n_matched=n_matched[k],
                brier_kind=kind,
                aggregation=agg,
                variant=variant,
                det_max_iou=det_max_iou if mask is None else det_max_iou[mask] if selected_max_iou else None,
            )
            for agg in aggs
        }
        for k, (mask, aggs) in enumerate(sets)
    ]


def object_scores(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] = OCE_THRESHOLDS,
    aggregation: str = "mean",
    *,
    brier: str = "auto",
    variant: str = "detcal",
    categories: Sequence[int] | None = None,
) -> ObjectScores:
    """Per-object Brier scores of OCE (see the module docstring); ``categories``: the ascending
    category ids of the ``class_probs`` columns (default: the ground truth's categories)."""
    return object_scores_by_aggregation(
        dets, gt, iou_thresholds, (aggregation,), brier=brier, variant=variant, categories=categories
    )[aggregation]


def oce_from_scores(s: ObjectScores) -> MetricResult:
    """The OCE :class:`MetricResult` of per-object scores."""
    objects = "every ground-truth box" if s.variant == "uq_detr" else "ground-truth boxes that are not crowd or ignored"
    per_threshold = s.per_threshold()  # once: the value is its mean (as ``s.value``), the table lists it
    return MetricResult(
        name="oce",
        value=float(per_threshold.mean()) if s.brier.shape[0] else float("nan"),
        variant=s.variant,
        params={
            "iou_thresholds": [float(t) for t in s.iou_thresholds],
            "aggregation": s.aggregation,
            "brier": s.brier_kind,
            "objects": objects,
            "missed_object": 1.0,
            "matching": "every detection of the image with IoU >= tau, any class",
        },
        table={"iou_threshold": s.iou_thresholds, "oce": per_threshold, "n_missed": (s.n_matched == 0).sum(axis=1)},
        extra={
            "n_objects": int(s.brier.shape[1]),
            "brier_note": "exact multi-class Brier"
            if s.brier_kind == "multiclass"
            else "binary approximation from the top score and the predicted class",
        },
    )


def oce(
    dets: Detections,
    gt: GroundTruth,
    iou_thresholds: Sequence[float] = OCE_THRESHOLDS,
    aggregation: str = "mean",
    *,
    brier: str = "auto",
    variant: str = "detcal",
    categories: Sequence[int] | None = None,
) -> MetricResult:
    """Object-level Calibration Error of ``dets`` against ``gt`` (module docstring)."""
    return oce_from_scores(
        object_scores(dets, gt, iou_thresholds, aggregation, brier=brier, variant=variant, categories=categories)
    )
