"""Localisation-Recall-Precision error (LRP) and LRP-optimal score thresholds.

LRP (Oksuz et al., ECCV 2018; the form of Oksuz et al., TPAMI 2021 used by
the calibration benchmark of Kuzucu et al., ECCV 2024), for one class with
``N_TP`` true positives of IoU ``u_i`` (IoU with the GT each one took),
``N_FP`` false positives and ``N_FN`` missed ground-truth boxes, at the TP
validation IoU ``tau``::

    LRP = ( sum_TP (1 - u_i) / (1 - tau) + N_FP + N_FN ) / (N_TP + N_FP + N_FN)

and its components::

    LRP_loc = sum_TP (1 - u_i) / N_TP      (NaN without a TP)
    LRP_FP  = N_FP / (N_TP + N_FP)         (NaN without a TP)
    LRP_FN  = N_FN / N_GT                  (N_GT = N_TP + N_FN)

A class without any TP has LRP = LRP_FN = 1. A class without non-ignored
ground truth is undefined (NaN) and leaves every average, as in the
reference. The averages are means over the classes where the value is
defined (``nanmean``).

LRP-optimal threshold of a class: sort its detections by descending score;
LRP of every prefix (cumulative sums); the optimal LRP (oLRP) is the minimum
and the threshold is the score of the last detection of the first prefix
reaching it. Detections with ``score >= threshold`` are kept. A class
without a TP or without ground truth gets a NaN threshold, which keeps all
its detections (the reference's ``score < NaN`` is false).

Matching is pycocotools' greedy rule (:func:`detcal.matching.match`,
``exclusive`` mode, per image and class, ``max_dets`` per image and class)
at the single IoU threshold ``tau``; crowd / ignored GT make a detection
ignored; a detection outside the ``max_dets`` cut is not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MetricResult
from detcal.matching.blocks import factorize, float_key, stable_argsort
from detcal.matching.engine import match
from detcal.metrics.narrow_ints import sort_code_type

DEFAULT_TAU: float = 0.0
"""TP-validation IoU of the reference library's defaults (``LaECE_0``, LRP at tau 0)."""


@dataclass
class DetectionOutcomes:
    """Per-detection TP/FP outcome at one TP-validation IoU ``tau``.

    ``valid [D]`` true positive or false positive (considered and not
    ignored); ``tp [D]``; ``iou [D]`` IoU with the GT it took (0 for FP and
    invalid rows); ``score [D]``, ``category [D]``, ``image_id [D]`` the
    detections' (read-only views from :func:`detection_outcomes`); ``gt_categories [C]`` the classes with non-ignored
    ground truth and ``n_gt [C]`` their counts.
    """

    tau: float
    score: np.ndarray
    category: np.ndarray
    image_id: np.ndarray
    valid: np.ndarray
    tp: np.ndarray
    iou: np.ndarray
    gt_categories: np.ndarray
    n_gt: np.ndarray
    max_dets: int | None
    considered: np.ndarray | None = None
    """[D] passed the max-detections cut (matched, unmatched or ignored); None: not recorded (taken as ``valid``)."""

    @property
    def fp(self) -> np.ndarray:
        return self.valid & ~self.tp

    def class_index(self) -> np.ndarray:
        """Row of each detection's class in ``gt_categories`` [D] (-1: a class without ground truth)."""
        cats, cat = self.gt_categories, self.category
        if len(cats) == 0:
            return np.full(len(cat), -1, np.int64)
        if len(cat) and int(cats[0]) >= 0 and int(cat.min()) >= 0:
            hi = max(int(cats.max()), int(cat.max()))
            if hi < 4 * len(cat) + 2_000_000:  # small ids: one lookup table instead of a binary search a row
                table = np.full(hi + 1, -1, np.int64)
                table[cats[::-1]] = np.arange(len(cats) - 1, -1, -1, dtype=np.int64)  # the first of equal ids
                return table[cat]
        pos = np.searchsorted(cats, cat)
        pos = np.clip(pos, 0, len(cats) - 1)
        return np.where(cats[pos] == cat, pos, -1).astype(np.int64)


def paired_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU [P] of row-paired ``xyxy`` boxes ``a`` [P,4] and ``b`` [P,4] (0 without overlap)."""
    iw = np.clip(np.minimum(a[:, 2], b[:, 2]) - np.maximum(a[:, 0], b[:, 0]), 0, None)
    ih = np.clip(np.minimum(a[:, 3], b[:, 3]) - np.maximum(a[:, 1], b[:, 1]), 0, None)
    inter = iw * ih
    union = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]) + (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]) - inter
    out = np.zeros(len(inter))
    np.divide(inter, union, out=out, where=inter > 0)
    return out


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``: the detections' columns shared with :class:`DetectionOutcomes` without a
    copy (three columns of the detections' size held through LRP and LaECE), and never written through it."""
    v = a.view()
    v.flags.writeable = False
    return v


def _check_tau(tau: float) -> float:
    tau = float(tau)
    if not (np.isfinite(tau) and 0.0 <= tau < 1.0):
        raise DetcalInputError(f"TP-validation IoU tau must lie in [0, 1), got {tau}", field="tau")
    return tau


def detection_outcomes(
    dets: Detections, gt: GroundTruth, tau: float = DEFAULT_TAU, *, max_dets: int | None = 100
) -> DetectionOutcomes:
    """Match at IoU ``tau`` (pycocotools rule) and return the TP/FP/IoU of every detection."""
    tau = _check_tau(tau)
    m = match(dets, gt, (tau,), mode="exclusive", max_dets=max_dets)
    return outcomes_from_match(
        dets, gt, tau, m.matched[0], m.ignored[0], m.gt_index[0], m.considered, max_dets=max_dets
    )


def outcomes_from_match(
    dets: Detections,
    gt: GroundTruth,
    tau: float,
    matched: np.ndarray,
    ignored: np.ndarray,
    gt_index: np.ndarray,
    considered: np.ndarray,
    *,
    max_dets: int | None = 100,
) -> DetectionOutcomes:
    """:func:`detection_outcomes` from the matching at ``tau`` when already made (its ``matched``,
    ``ignored``, ``gt_index`` row and ``considered``, [D] each: e.g.
    :func:`detcal.matching.engine.layout_and_match`, shared with COCO AP)."""
    tau = _check_tau(tau)
    if not (len(matched) == len(ignored) == len(gt_index) == len(considered) == len(dets)):
        raise DetcalInputError("the matching's arrays must have one row per detection", field="matched")
    valid = considered & ~ignored
    tp = valid & matched
    iou = np.zeros(len(dets))
    rows = np.flatnonzero(tp)
    iou[rows] = paired_iou(dets.box[rows], gt.box[gt_index[rows]])
    real = ~(gt.ignore | gt.iscrowd)
    cats, counts = np.unique(gt.category[real], return_counts=True)
    return DetectionOutcomes(
        tau=tau,
        score=read_only(dets.score),
        category=read_only(dets.category),
        image_id=read_only(dets.image_id),
        valid=valid,
        tp=tp,
        iou=iou,
        gt_categories=cats.astype(np.int64),
        n_gt=counts.astype(np.int64),
        max_dets=max_dets,
        considered=considered.copy(),
    )


def _class_sorted(o: DetectionOutcomes, order: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Valid detections of classes with GT, ordered by (class, descending score, image, input order).

    ``order``: every detection in that order with classes by ascending id (e.g. COCO AP's accumulate
    order, :func:`detcal.metrics.accuracy.accumulate_order`), read instead of sorting again; the rows
    kept here are then in it.

    Returns (rows [S], class row [S], start of each class run [C] as positions, -1 if the class has none).
    The class rows are the narrowest integers that hold them (:func:`~detcal.metrics.narrow_ints.sort_code_type`:
    int16 below 32,768 classes): they are gathered at random from a column a quarter of int64's size, which
    stays in the processor's caches and address translations at 20,000 images; the same values.
    """
    C = len(o.gt_categories)
    ci = o.class_index()
    narrow = ci.astype(sort_code_type(C), copy=False)  # -1 (no class) and [0, C): held by the narrow type
    keep = o.valid & (narrow >= 0)
    rows = None
    if order is not None and len(order) == len(keep):
        rows = order[keep[order]]
        cls = narrow[rows]
        if len(rows) > 1 and bool((cls[1:] < cls[:-1]).any()):  # classes not in ascending blocks
            rows = None
    if rows is None:
        rows = np.flatnonzero(keep)  # ascending: the input order is the last key
        img = factorize(o.image_id[rows])[0]  # order-preserving codes
        rows = rows[stable_argsort([img, float_key(o.score[rows], descending=True), ci[rows]])]  # radix: linear
        cls = narrow[rows]
    return rows, cls, np.searchsorted(cls, np.arange(C, dtype=cls.dtype))


def _segment_cumsum(
    x: np.ndarray, seg: np.ndarray, n_seg: int, counts: np.ndarray | None = None, start: np.ndarray | None = None
) -> np.ndarray:
    """Cumulative sum of ``x`` restarting at every change of the sorted segment ids ``seg`` (``counts``
    [n_seg]: the rows of each segment, ``np.bincount(seg, minlength=n_seg)``, and ``start`` [n_seg] the
    first row of each, ``np.searchsorted(seg, np.arange(n_seg))``, when known)."""
    c = np.cumsum(x, dtype=np.float64)
    if start is None:
        start = np.searchsorted(seg, np.arange(n_seg))  # int64 ids: any segment count, whatever seg's type
    base = np.zeros(n_seg)  # the sum before each segment's start
    later = start > 0
    base[later] = c[start[later] - 1]
    # ``base[seg]``: the sorted ids make it each segment's value repeated over its rows (written in order)
    c -= np.repeat(base, np.bincount(seg, minlength=n_seg) if counts is None else counts)
    return c


@dataclass
class LRPTable:
    """LRP per class at one ``tau``; arrays [C] over ``categories``.

    ``lrp``, ``loc``, ``fp``, ``fn`` (components), ``n_tp``, ``n_fp``,
    ``n_gt``; for the optimal point of every class ``olrp``, ``olrp_loc``,
    ``olrp_fp``, ``olrp_fn`` and ``threshold`` (NaN: keep all).
    """

    tau: float
    categories: np.ndarray
    lrp: np.ndarray
    loc: np.ndarray
    fp: np.ndarray
    fn: np.ndarray
    n_tp: np.ndarray
    n_fp: np.ndarray
    n_gt: np.ndarray
    olrp: np.ndarray
    olrp_loc: np.ndarray
    olrp_fp: np.ndarray
    olrp_fn: np.ndarray
    threshold: np.ndarray

    def means(self) -> dict[str, float]:
        """Class averages (nanmean over classes with ground truth)."""
        out = {}
        for k in ("lrp", "loc", "fp", "fn", "olrp", "olrp_loc", "olrp_fp", "olrp_fn"):
            v = getattr(self, k)
            out[k] = float(np.nanmean(v)) if np.isfinite(v).any() else float("nan")
        return out


def _class_sums(
    o: DetectionOutcomes, rows: np.ndarray, seg: np.ndarray, start: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Of the class-sorted ``rows`` (:func:`_class_sorted`: their classes ``seg``, the classes' ``start``):
    the true-positive flags [S] and localisation errors [S] as floats, and per class the rows [C], true
    positives [C] and summed errors [C]."""
    tp_b = o.tp[rows]
    tp = tp_b.astype(np.float64)
    # the localisation error of a true positive, 0 elsewhere ((1 - iou) * tp: times 1 the same float, and
    # +0.0 elsewhere, iou being 0 off the true positives): the IoUs gathered at the true positives only
    at = np.flatnonzero(tp_b)
    del tp_b
    err = 1.0 - o.iou[rows[at]]
    loc_w = np.zeros(len(rows))
    loc_w[at] = err
    # each class's rows are one run from its start (``seg`` is sorted): the counts are the runs' lengths
    # and the true positives the ones in each run (sums of zeros and ones: integers, exact in floats)
    bounds = np.append(start, len(rows))
    counts = np.diff(bounds)
    n_tp = np.diff(np.searchsorted(at, bounds)).astype(np.float64)
    # the class sums of the errors added in row order without the rows off the true positives: a sum
    # started at +0.0 is never -0.0, so adding +0.0 to it leaves it as it is (NaN terms are kept)
    loc = np.bincount(seg[at], weights=err, minlength=len(start))
    return tp, loc_w, counts, n_tp, loc


def lrp_table(o: DetectionOutcomes, order: np.ndarray | None = None) -> LRPTable:
    """LRP, its components and the LRP-optimal point of every class with ground truth (``order``: the
    detections by (category, descending score, image id, input order) when known, see :func:`_class_sorted`)."""
    C = len(o.gt_categories)
    rows, seg, start = _class_sorted(o, order)
    tp, loc_w, counts, n_tp, loc = _class_sums(o, rows, seg, start)
    # the false positives are the rest of each class's detections: sums of zeros and ones are integers,
    # exact in floats, so counts less true positives are the sums of the 1 - tp column, bit for bit
    n_fp = counts.astype(np.float64)
    n_fp -= n_tp
    # the prefix sums, each made in place from its column (the same operations in the same order); a
    # class's value over its rows is repeated in order (``seg`` is sorted), not gathered a row at a time
    tp_c = _segment_cumsum(tp, seg, C, counts, start)
    del tp
    fp_c = np.arange(1, len(rows) + 1, dtype=np.float64)  # detections so far in the class, less the tps
    fp_c -= np.repeat(start, counts)
    fp_c -= tp_c
    loc_c = _segment_cumsum(loc_w, seg, C, counts, start)
    del loc_w
    n_gt = o.n_gt.astype(np.float64)
    fn_c = np.repeat(n_gt, counts)
    fn_c -= tp_c
    scale = 1.0 - o.tau
    prefix = loc_c / scale  # (loc_c / scale + fp_c + fn_c) / (tp_c + fp_c + fn_c)
    prefix += fp_c
    prefix += fn_c
    den = tp_c + fp_c
    den += fn_c
    prefix /= den
    del den
    n_fn = n_gt - n_tp
    has_tp = n_tp > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        lrp = np.where(has_tp, (loc / scale + n_fp + n_fn) / (n_tp + n_fp + n_fn), 1.0)
        loc_comp = np.where(has_tp, loc / n_tp, np.nan)
        fp_comp = np.where(has_tp, n_fp / (n_tp + n_fp), np.nan)
    fn_comp = np.where(has_tp, n_fn / n_gt, 1.0)

    # optimal prefix per class: first minimum of the prefix LRP
    olrp = np.ones(C)
    olrp_loc = np.full(C, np.nan)
    olrp_fp = np.full(C, np.nan)
    olrp_fn = np.ones(C)
    thr = np.full(C, np.nan)
    if len(rows):
        # per class: smallest LRP, ties to the earliest position (each class is one run of ``seg``)
        runs = start[counts > 0]  # the start of each class's run (``segment_starts(seg)``)
        low = np.repeat(np.minimum.reduceat(prefix, runs), counts[counts > 0])
        at_min = np.flatnonzero(prefix == low)
        first = at_min[np.searchsorted(at_min, runs)]  # the first minimum of each run
        first = first[has_tp[seg[runs]]]
        cls = seg[first]
        olrp[cls] = prefix[first]
        olrp_loc[cls] = loc_c[first] / tp_c[first]
        olrp_fp[cls] = fp_c[first] / (tp_c[first] + fp_c[first])
        olrp_fn[cls] = fn_c[first] / n_gt[cls]
        thr[cls] = o.score[rows[first]]
    return LRPTable(
        tau=o.tau,
        categories=o.gt_categories.copy(),
        lrp=lrp,
        loc=loc_comp,
        fp=fp_comp,
        fn=fn_comp,
        n_tp=n_tp.astype(np.int64),
        n_fp=n_fp.astype(np.int64),
        n_gt=o.n_gt.copy(),
        olrp=olrp,
        olrp_loc=olrp_loc,
        olrp_fp=olrp_fp,
        olrp_fn=olrp_fn,
        threshold=thr,
    )


def lrp(
    dets: Detections, gt: GroundTruth, tau: float = DEFAULT_TAU, *, max_dets: int | None = 100, optimal: bool = False
) -> MetricResult:
    """Mean LRP over classes (``optimal=True``: mean oLRP), with per-class table and components in ``extra``."""
    t = lrp_table(detection_outcomes(dets, gt, tau, max_dets=max_dets))
    return lrp_result(t, optimal=optimal, max_dets=max_dets)


def lrp_result(t: LRPTable, *, optimal: bool = False, max_dets: int | None = 100) -> MetricResult:
    """The :class:`MetricResult` of an :class:`LRPTable` (value: mean LRP, or mean oLRP)."""
    means = t.means()
    pre = "olrp" if optimal else ""
    comp = {k: means[(pre + "_" + k) if pre else k] for k in ("loc", "fp", "fn")}
    table: dict[str, Any] = {
        "category": t.categories,
        "lrp": t.lrp,
        "loc": t.loc,
        "fp": t.fp,
        "fn": t.fn,
        "n_tp": t.n_tp,
        "n_fp": t.n_fp,
        "n_gt": t.n_gt,
        "olrp": t.olrp,
        "threshold": t.threshold,
    }
    return MetricResult(
        name="olrp" if optimal else "lrp",
        value=means["olrp" if optimal else "lrp"],
        variant="optimal" if optimal else "all_detections",
        params={
            "tau": t.tau,
            "max_dets": max_dets,
            "matching": "pycocotools greedy, per class",
            "average": "nanmean over classes with ground truth",
        },
        table=table,
        extra={"lrp_loc": comp["loc"], "lrp_fp": comp["fp"], "lrp_fn": comp["fn"], "n_classes": int(len(t.categories))},
    )


def lrp_optimal_thresholds(
    dets: Detections, gt: GroundTruth, tau: float = DEFAULT_TAU, *, max_dets: int | None = 100
) -> dict[int, float]:
    """LRP-optimal score threshold per class id (NaN: keep every detection of that class)."""
    t = lrp_table(detection_outcomes(dets, gt, tau, max_dets=max_dets))
    return {int(c): float(v) for c, v in zip(t.categories, t.threshold)}


def threshold_mask(dets: Detections, thresholds: dict[int, float]) -> np.ndarray:
    """Keep-mask [D]: ``score >= threshold[category]``; classes missing from the map or with NaN are kept."""
    if not thresholds:
        return np.ones(len(dets), bool)
    cats = np.array(sorted(thresholds), dtype=np.int64)
    vals = np.array([thresholds[int(c)] for c in cats], dtype=np.float64)
    pos = np.clip(np.searchsorted(cats, dets.category), 0, len(cats) - 1)
    thr = np.where(cats[pos] == dets.category, vals[pos], np.nan)
    return ~(dets.score < thr)  # NaN compares false: kept
