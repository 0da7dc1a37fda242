"""COCO detection accuracy (AP / AR) from detcal's own matching.

``coco_ap(dets, dataset)`` returns the twelve numbers of pycocotools
``COCOeval.summarize()`` for bounding boxes, computed with
:func:`detcal.matching.match` (exclusive, pycocotools' ``evaluateImg``
rules) and pycocotools' ``accumulate`` rules:

* IoU thresholds ``0.50:0.05:0.95`` (10), recall thresholds ``0:0.01:1``
  (101), max detections per image and category 1 / 10 / 100;
* area ranges all ``[0, 1e10]``, small ``[0, 32^2]``, medium ``[32^2,
  96^2]``, large ``[96^2, 1e10]`` (bounds inclusive): a GT outside the range
  is ignored (the matching is read from one reference matching, and only
  the (image, category) groups whose GT flags change it are matched again:
  ``_RangeReference``), and a detection
  left unmatched outside the range (its box area ``w * h``) is ignored;
* per category, area range and max-dets: the kept detections of all images
  sorted by descending score (stable: image id, then the image's score
  order), ``tp`` / ``fp`` cumulative sums, ``recall = tp / n_gt``,
  ``precision = tp / (tp + fp + eps)`` made non-increasing from the right,
  read at the recall thresholds (0 beyond the last recall);
* AP is the mean of that precision over thresholds, recall points and the
  categories that have a non-ignored GT; AR the mean of the final recall.

The GT area is ``dataset`` GT box area unless ``gt_area`` (COCO ``area``,
e.g. mask areas) is given. No Python loop over detections: one loop over
categories (the cumulative sums are per category).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, MetricResult
from detcal.matching.engine import match

IOU_THRESHOLDS: np.ndarray = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
"""pycocotools ``iouThrs`` (the same float values)."""
RECALL_THRESHOLDS: np.ndarray = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
"""pycocotools ``recThrs``."""
AREA_RANGES: dict[str, tuple[float, float]] = {
    "all": (0.0, 1e5**2),
    "small": (0.0, 32.0**2),
    "medium": (32.0**2, 96.0**2),
    "large": (96.0**2, 1e5**2),
}
"""pycocotools ``areaRng`` by ``areaRngLbl``."""
MAX_DETS: tuple[int, int, int] = (1, 10, 100)

SUMMARY: tuple[tuple[str, str, float | None, str, int], ...] = (
    ("AP", "ap", None, "all", 100),
    ("AP50", "ap", 0.5, "all", 100),
    ("AP75", "ap", 0.75, "all", 100),
    ("AP_small", "ap", None, "small", 100),
    ("AP_medium", "ap", None, "medium", 100),
    ("AP_large", "ap", None, "large", 100),
    ("AR1", "ar", None, "all", 1),
    ("AR10", "ar", None, "all", 10),
    ("AR100", "ar", None, "all", 100),
    ("AR_small", "ar", None, "small", 100),
    ("AR_medium", "ar", None, "medium", 100),
    ("AR_large", "ar", None, "large", 100),
)
"""The twelve lines of ``COCOeval.summarize()``: (name, kind, IoU, area, max dets)."""


def _box_area(box: np.ndarray) -> np.ndarray:
    return (box[:, 2] - box[:, 0]) * (box[:, 3] - box[:, 1])


def _rank_in_group(dets: Detections) -> np.ndarray:
    """Rank of each detection by descending score (stable) within its (image, category)."""
    o = np.lexsort((np.arange(len(dets)), -dets.score, dets.category, dets.image_id))
    key_i, key_c = dets.image_id[o], dets.category[o]
    new = np.ones(len(o), bool)
    new[1:] = (key_i[1:] != key_i[:-1]) | (key_c[1:] != key_c[:-1])
    starts = np.flatnonzero(new)
    pos = np.arange(len(o)) - np.repeat(starts, np.diff(np.append(starts, len(o))))
    rank = np.empty(len(o), np.int64)
    rank[o] = pos
    return rank


def coco_eval_arrays(
    dets: Detections, dataset: Dataset, *, gt_area: Any = None, workers: int = 1
) -> dict[str, np.ndarray]:
    """pycocotools ``COCOeval.eval`` arrays: ``precision [T,R,K,A,M]`` and ``recall [T,K,A,M]``.

    ``K`` runs over ``sorted(dataset.categories)``, ``A`` over
    :data:`AREA_RANGES`, ``M`` over :data:`MAX_DETS`; -1 where a category has
    no non-ignored GT (as pycocotools). ``workers`` > 1: the area ranges are
    evaluated in that many forked processes (each range whole by one: the
    same arrays).
    """
    if not isinstance(dets, Detections) or not isinstance(dataset, Dataset):
        raise DetcalInputError("coco_ap needs Detections and a Dataset", field="dets")
    gt = dataset.gt
    area = _box_area(gt.box) if gt_area is None else np.asarray(gt_area, np.float64).reshape(-1)
    if area.shape != (len(gt),) or not np.isfinite(area).all():
        raise DetcalInputError(f"gt_area must hold {len(gt)} finite numbers", field="gt_area")
    if len(dets) and (dataset.images.index_of(dets.image_id) < 0).any():
        i = int(np.flatnonzero(dataset.images.index_of(dets.image_id) < 0)[0])
        raise DetcalInputError(
            f"image_id {int(dets.image_id[i])} is not among the dataset's images",
            record=f"detection row {i}",
            field="image_id",
        )
    cats = np.array(sorted(dataset.categories), np.int64)
    K = len(cats)
    # pycocotools overwrites a GT 'ignore' key with iscrowd; out-of-range boxes are ignored per area range
    base_ignore = gt.iscrowd.astype(bool) if gt.iscrowd is not None else np.zeros(len(gt), bool)
    rank = _rank_in_group(dets)
    det_area = _box_area(dets.box)
    # pycocotools' accumulate order: images by id, then score order within the image
    det_cat_k = np.searchsorted(cats, dets.category)
    known = (det_cat_k < K) & (cats[np.minimum(det_cat_k, K - 1)] == dets.category) if K else np.zeros(len(dets), bool)
    order = np.lexsort((rank, dets.image_id, -dets.score, det_cat_k))
    gt_k = np.searchsorted(cats, gt.category)
    ref = _RangeReference(dets, gt, base_ignore | _outside(area, AREA_RANGES["all"]))
    ctx = (dets, dataset, area, base_ignore, rank, det_area, det_cat_k, known, order, gt_k, K, ref)
    from detcal.utils.processes import map_in_processes

    parts = map_in_processes(_area_arrays, list(AREA_RANGES.values()), ctx, workers)
    return {
        "precision": np.stack([p for p, _ in parts], axis=3),
        "recall": np.stack([r for _, r in parts], axis=2),
        "categories": cats,
    }


def _outside(area: np.ndarray, bounds: tuple[float, float]) -> np.ndarray:
    """Outside the area range ``[lo, hi]`` (bounds inclusive, as pycocotools)."""
    return (area < bounds[0]) | (area > bounds[1])


class _RangeReference:
    """One exclusive matching (GT flags ``ignore``) from which every area range's matching is read.

    pycocotools matches each (image, category) group on its own, and an area
    range changes a group's matching only through its GT ``ignore`` flags
    (ignored GTs are sorted last and a detection on a non-ignored GT stops at
    the first ignored one). A group matches exactly as in the reference when
    its flags are the reference's, or when they are uniform in both (all
    ignored or none: the same GT order, the stop never applies); only then
    does the outcome change, by the flag of the matched GT. The other groups,
    those with GTs of mixed ranges, are matched again, alone.
    """

    def __init__(self, dets: Detections, gt: Any, ignore: np.ndarray) -> None:
        self.dets, self.gt, self.ignore = dets, gt, ignore
        self.m = _match_exclusive(dets, gt, ignore)
        n = len(gt)
        img = np.concatenate([gt.image_id, dets.image_id])
        cat = np.concatenate([gt.category, dets.category])
        ii = np.unique(img, return_inverse=True)[1].reshape(-1).astype(np.int64)
        ci = np.unique(cat, return_inverse=True)[1].reshape(-1).astype(np.int64)
        key = ii * (int(ci.max()) + 1 if len(ci) else 1) + ci
        self.key_g, self.key_d = key[:n], key[n:]

    def _changed(self, ignore: np.ndarray) -> np.ndarray:
        """Group keys whose matching may differ from the reference's under GT flags ``ignore``."""
        u, inv = np.unique(self.key_g, return_inverse=True)
        inv = inv.reshape(-1)
        n = np.bincount(inv, minlength=len(u))
        s_ref = np.bincount(inv, self.ignore, len(u))
        s_new = np.bincount(inv, ignore, len(u))
        diff = np.bincount(inv, self.ignore != ignore, len(u))
        uniform = ((s_ref == 0) | (s_ref == n)) & ((s_new == 0) | (s_new == n))
        return u[(diff > 0) & ~uniform]

    def matched_ignored(self, ignore: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``matched``, ``ignored`` [T,D] of the exclusive matching with GT flags ``ignore``."""
        gi = self.m.gt_index
        hit = gi >= 0
        on_ignored = ignore[np.maximum(gi, 0)] if len(ignore) else np.zeros(gi.shape, bool)
        matched, ignored = hit & ~on_ignored, hit & on_ignored
        changed = self._changed(ignore)
        if len(changed):
            d_sel = np.flatnonzero(np.isin(self.key_d, changed))
            g_sel = np.flatnonzero(np.isin(self.key_g, changed))
            sub = _match_exclusive(self.dets.select(d_sel), self.gt.select(g_sel), ignore[g_sel])
            matched[:, d_sel], ignored[:, d_sel] = sub.matched, sub.ignored
        return matched, ignored


def _match_exclusive(dets: Detections, gt: Any, ignore: np.ndarray) -> Any:
    g = gt.select(np.arange(len(gt)))
    g.ignore = ignore
    return match(dets, g, IOU_THRESHOLDS.tolist(), mode="exclusive", max_dets=MAX_DETS[-1], gt_ignore="ignore_or_crowd")


_SMALL = 20_000
"""Categories with at most this many (detections x recall thresholds) compare all at once."""


def _area_arrays(
    bounds: tuple[float, float],
    dets: Detections,
    dataset: Dataset,
    area: np.ndarray,
    base_ignore: np.ndarray,
    rank: np.ndarray,
    det_area: np.ndarray,
    det_cat_k: np.ndarray,
    known: np.ndarray,
    order: np.ndarray,
    gt_k: np.ndarray,
    K: int,
    ref: _RangeReference,
) -> tuple[np.ndarray, np.ndarray]:
    """``precision [T,R,K,M]`` and ``recall [T,K,M]`` of one area range ``(lo, hi)``."""
    T, R, M = len(IOU_THRESHOLDS), len(RECALL_THRESHOLDS), len(MAX_DETS)
    precision = -np.ones((T, R, K, M))
    recall = -np.ones((T, K, M))
    gt = dataset.gt
    gt_ignore = base_ignore | _outside(area, bounds)
    m_matched, m_ignored = ref.matched_ignored(gt_ignore)
    out_d = _outside(det_area, bounds)
    ignored = m_ignored | (~m_matched & out_d[None, :])
    npig_k = np.bincount(gt_k[~gt_ignore], minlength=K)[:K] if len(gt) else np.zeros(K, np.int64)
    # per detection, its T flags side by side ([D, T]): gathering a detection's row is one access
    tp_rows = np.ascontiguousarray((m_matched & ~ignored).T)
    fp_rows = np.ascontiguousarray((~m_matched & ~ignored).T)
    for mi, md in enumerate(MAX_DETS):
        keep = known & (rank < md) & ref.m.considered
        o = order[keep[order]]
        kk = det_cat_k[o]
        bounds_k = np.searchsorted(kk, np.arange(K + 1))
        tp_all, fp_all = tp_rows[o], fp_rows[o]  # [n, T] in accumulate order
        for k in range(K):
            npig = npig_k[k]
            if npig == 0:
                continue
            s, e = bounds_k[k], bounds_k[k + 1]
            tp = np.cumsum(tp_all[s:e], axis=0).T.astype(float)  # [T, nd]
            fp = np.cumsum(fp_all[s:e], axis=0).T.astype(float)
            nd = e - s
            if nd == 0:
                # pycocotools keeps a category whose images have GT but no detections: recall 0, precision 0
                recall[:, k, mi] = 0.0
                precision[:, :, k, mi] = 0.0
                continue
            rc = tp / npig
            pr = tp / (fp + tp + np.spacing(1))
            recall[:, k, mi] = rc[:, -1]
            if nd * R <= _SMALL:  # searchsorted(rc[t], thresholds, "left") of every t at once: rc is sorted
                inds = (rc[:, :, None] < RECALL_THRESHOLDS[None, None, :]).sum(axis=1)
            else:
                inds = np.stack([np.searchsorted(rc[t], RECALL_THRESHOLDS, side="left") for t in range(T)])
            precision[:, :, k, mi] = np.where(inds < nd, _suffix_max_at(pr, np.minimum(inds, nd - 1)), 0.0)
    return precision, recall


def _suffix_max_at(pr: np.ndarray, at: np.ndarray) -> np.ndarray:
    """``max(pr[t, at[t, r]:])`` for every (t, r) (``at`` non-decreasing along r): pycocotools'
    interpolated precision read at the recall positions, without the full right-to-left maximum.

    One ``maximum.reduceat`` over the segments between the read positions (each row also starts a
    segment at its first element, so no segment crosses rows), then the right-to-left maximum of
    those few segment maxima. A repeated position yields a one-element segment whose value is in the
    next segment as well, so the result is the same. Exact: only maxima are taken.
    """
    T, nd = pr.shape
    starts = np.empty((T, at.shape[1] + 1), np.int64)
    starts[:, 0] = 0
    starts[:, 1:] = at
    starts += (np.arange(T, dtype=np.int64) * nd)[:, None]
    seg = np.maximum.reduceat(pr.ravel(), starts.ravel()).reshape(starts.shape)
    return np.maximum.accumulate(seg[:, ::-1], axis=1)[:, -2::-1]


def _summarize(
    arrays: dict[str, np.ndarray], kind: str, iou: float | None, area: str, max_dets: int, k: slice | int = slice(None)
) -> float:
    a = list(AREA_RANGES).index(area)
    mi = MAX_DETS.index(max_dets)
    if kind == "ap":
        s = arrays["precision"][:, :, k, a, mi]
        if iou is not None:
            s = s[np.flatnonzero(IOU_THRESHOLDS == iou)]
    else:
        s = arrays["recall"][:, k, a, mi]
        if iou is not None:
            s = s[np.flatnonzero(IOU_THRESHOLDS == iou)]
    s = s[s > -1]
    return float(np.mean(s)) if s.size else -1.0


def coco_summary(arrays: dict[str, np.ndarray]) -> dict[str, float]:
    """The twelve ``summarize()`` numbers (:data:`SUMMARY`) of :func:`coco_eval_arrays` output."""
    return {name: _summarize(arrays, kind, iou, area, md) for name, kind, iou, area, md in SUMMARY}


def coco_ap(dets: Detections, dataset: Dataset, *, gt_area: Any = None, workers: int = 1) -> dict[str, MetricResult]:
    """COCO AP, AP50, AP75, AP_small/medium/large, AR1/10/100, AR_small/medium/large.

    Equal to pycocotools ``COCOeval(..., "bbox").summarize()`` (``stats``
    in that order). Each :class:`MetricResult` has ``params`` with the
    area range, max-dets and IoU; the ``AP`` result carries the per-class
    table (``table["category"]``, ``table["ap"]``, ``table["ap50"]``,
    ``table["n_gt"]``). ``workers``: :func:`coco_eval_arrays`.
    """
    arrays = coco_eval_arrays(dets, dataset, gt_area=gt_area, workers=workers)
    out: dict[str, MetricResult] = {}
    for name, kind, iou, area, md in SUMMARY:
        out[name] = MetricResult(
            name=name,
            value=_summarize(arrays, kind, iou, area, md),
            variant="coco",
            params={"kind": kind, "iou": "0.50:0.95" if iou is None else iou, "area": area, "max_dets": md},
        )
    cats = arrays["categories"]
    per_ap = np.array([_summarize(arrays, "ap", None, "all", 100, k) for k in range(len(cats))])
    per_ap50 = np.array([_summarize(arrays, "ap", 0.5, "all", 100, k) for k in range(len(cats))])
    out["AP"].table = {
        "category": cats,
        "ap": np.where(per_ap < 0, np.nan, per_ap),
        "ap50": np.where(per_ap50 < 0, np.nan, per_ap50),
    }
    return out


def per_class_ap(dets: Detections, dataset: Dataset, *, gt_area: Any = None) -> dict[str, np.ndarray]:
    """Per-category COCO AP and AP50 (NaN for a category without non-ignored GT)."""
    return coco_ap(dets, dataset, gt_area=gt_area)["AP"].table


__all__ = [
    "AREA_RANGES",
    "IOU_THRESHOLDS",
    "MAX_DETS",
    "RECALL_THRESHOLDS",
    "SUMMARY",
    "coco_ap",
    "coco_eval_arrays",
    "coco_summary",
    "per_class_ap",
]
