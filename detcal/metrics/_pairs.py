"""Every (ground-truth box, detection) pair of the same image, built with array operations.

Used by the object-level measures (:mod:`detcal.metrics.oce`), which look at
every detection overlapping an object whatever its class. Pairs are generated
in blocks of ground-truth rows so that memory stays bounded on large sets.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

PAIR_BLOCK: int = 4_000_000
"""Largest number of pairs built at once."""


def pair_iou(gt_box: np.ndarray, det_box: np.ndarray) -> np.ndarray:
    """IoU [P] of row-paired ``xyxy`` boxes (areas from the corners; 0 where the union is 0)."""
    iw = np.maximum(0.0, np.minimum(gt_box[:, 2], det_box[:, 2]) - np.maximum(gt_box[:, 0], det_box[:, 0]))
    ih = np.maximum(0.0, np.minimum(gt_box[:, 3], det_box[:, 3]) - np.maximum(gt_box[:, 1], det_box[:, 1]))
    inter = iw * ih
    area_g = (gt_box[:, 2] - gt_box[:, 0]) * (gt_box[:, 3] - gt_box[:, 1])
    area_d = (det_box[:, 2] - det_box[:, 0]) * (det_box[:, 3] - det_box[:, 1])
    union = area_g + area_d - inter
    out = np.zeros(len(inter))
    np.divide(inter, union, out=out, where=union > 0)
    return out


class BoxColumns:
    """The corners and area of boxes as contiguous columns, gathered per pair by :meth:`pair_iou`."""

    def __init__(self, box: np.ndarray) -> None:
        b = np.asarray(box, dtype=np.float64)
        self.x1, self.y1 = np.ascontiguousarray(b[:, 0]), np.ascontiguousarray(b[:, 1])
        self.x2, self.y2 = np.ascontiguousarray(b[:, 2]), np.ascontiguousarray(b[:, 3])
        self.area = (self.x2 - self.x1) * (self.y2 - self.y1)


def columns_iou(a: BoxColumns, b: BoxColumns, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """IoU [P] of the pairs (``a`` row ``ia``, ``b`` row ``ib``); the same arithmetic as :func:`pair_iou`."""
    iw = np.minimum(a.x2[ia], b.x2[ib])
    iw -= np.maximum(a.x1[ia], b.x1[ib])
    np.maximum(iw, 0.0, out=iw)
    ih = np.minimum(a.y2[ia], b.y2[ib])
    ih -= np.maximum(a.y1[ia], b.y1[ib])
    np.maximum(ih, 0.0, out=ih)
    iw *= ih  # the intersection
    union = a.area[ia]
    union += b.area[ib]
    union -= iw
    np.divide(iw, union, out=iw, where=union > 0)
    iw[union <= 0] = 0.0
    return iw


def pairs_at_least(
    a: BoxColumns, b: BoxColumns, ia: np.ndarray, ib: np.ndarray, min_iou: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs whose IoU is at least ``min_iou`` (> 0), with their IoU: pairs without overlap along x are
    dropped before the rest of the arithmetic (their IoU is 0); the IoUs are those of :func:`columns_iou`."""
    iw = np.minimum(a.x2[ia], b.x2[ib])
    iw -= np.maximum(a.x1[ia], b.x1[ib])
    keep = np.flatnonzero(iw > 0)
    ia, ib = ia[keep], ib[keep]
    iou = columns_iou(a, b, ia, ib)
    keep = np.flatnonzero(iou >= min_iou)
    return ia[keep], ib[keep], iou[keep]


def image_pairs(
    det_image: np.ndarray, gt_image: np.ndarray, gt_rows: np.ndarray | None = None, block: int = PAIR_BLOCK
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Blocks of ``(gt_row [P], det_row [P])``: every detection of the image of each ground-truth row.

    Within a block, pairs are ordered by ground-truth row (in ``gt_rows`` order) and then by
    detection row (ascending, i.e. the detections' input order).
    """
    gt_rows = np.arange(len(gt_image)) if gt_rows is None else np.asarray(gt_rows, dtype=np.int64)
    order = np.argsort(det_image, kind="stable")
    sorted_img = det_image[order]
    img = gt_image[gt_rows]
    start = np.searchsorted(sorted_img, img, side="left")
    count = np.searchsorted(sorted_img, img, side="right") - start
    cum = np.cumsum(count)
    lo = 0
    while lo < len(gt_rows):
        base = cum[lo - 1] if lo else 0
        hi = max(int(np.searchsorted(cum, base + block, side="right")), lo + 1)
        cnt = count[lo:hi]
        n = int(cnt.sum())
        g = np.repeat(gt_rows[lo:hi], cnt)
        offset = np.arange(n) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        d = order[np.repeat(start[lo:hi], cnt) + offset]
        yield g, d
        lo = hi
