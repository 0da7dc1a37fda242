"""Box conversions, R-CNN deltas and IoU (numpy only, vectorised).

Internal format is ``xyxy`` absolute pixels, float64, continuous coordinates
(width = x2 - x1, no +1); see docs/matching.md.

Deltas (Girshick 2015), reference box P and target box G as centre/size::

    tx = (Gx - Px) / Pw,  ty = (Gy - Py) / Ph,  tw = log(Gw / Pw),  th = log(Gh / Ph)
"""

from __future__ import annotations

import numpy as np

from detcal.core.errors import DetcalInputError


def xywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    """COCO ``[x, y, w, h]`` [...,4] -> ``xyxy`` [...,4]."""
    b = np.asarray(b, dtype=np.float64)
    return np.concatenate([b[..., :2], b[..., :2] + b[..., 2:4]], axis=-1)


def xyxy_to_xywh(b: np.ndarray) -> np.ndarray:
    """``xyxy`` [...,4] -> COCO ``[x, y, w, h]`` [...,4]."""
    b = np.asarray(b, dtype=np.float64)
    return np.concatenate([b[..., :2], b[..., 2:4] - b[..., :2]], axis=-1)


def xyxy_to_cxcywh(b: np.ndarray) -> np.ndarray:
    """``xyxy`` [...,4] -> ``(cx, cy, w, h)`` [...,4]."""
    b = np.asarray(b, dtype=np.float64)
    wh = b[..., 2:4] - b[..., :2]
    return np.concatenate([b[..., :2] + 0.5 * wh, wh], axis=-1)


def cxcywh_to_xyxy(b: np.ndarray) -> np.ndarray:
    """``(cx, cy, w, h)`` [...,4] -> ``xyxy`` [...,4]."""
    b = np.asarray(b, dtype=np.float64)
    half = 0.5 * b[..., 2:4]
    return np.concatenate([b[..., :2] - half, b[..., :2] + half], axis=-1)


def encode_deltas(reference: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Unweighted R-CNN deltas [...,K] of ``target`` w.r.t. ``reference`` (both xyxy [...,4])."""
    p = xyxy_to_cxcywh(reference)
    g = xyxy_to_cxcywh(target)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.stack(
            [
                (g[..., 0] - p[..., 0]) / p[..., 2],
                (g[..., 1] - p[..., 1]) / p[..., 3],
                np.log(g[..., 2] / p[..., 2]),
                np.log(g[..., 3] / p[..., 3]),
            ],
            axis=-1,
        )


def decode_deltas(reference: np.ndarray, deltas: np.ndarray) -> np.ndarray:
    """Inverse of :func:`encode_deltas`: boxes xyxy [...,4] from ``reference`` and deltas [...,K]."""
    p = xyxy_to_cxcywh(reference)
    d = np.asarray(deltas, dtype=np.float64)
    cx = p[..., 0] + d[..., 0] * p[..., 2]
    cy = p[..., 1] + d[..., 1] * p[..., 3]
    w = p[..., 2] * np.exp(d[..., 2])
    h = p[..., 3] * np.exp(d[..., 3])
    return cxcywh_to_xyxy(np.stack([cx, cy, w, h], axis=-1))


def area(b: np.ndarray) -> np.ndarray:
    """Area of ``xyxy`` boxes [...,4] (negative extents count as 0)."""
    b = np.asarray(b, dtype=np.float64)
    return np.clip(b[..., 2] - b[..., 0], 0, None) * np.clip(b[..., 3] - b[..., 1], 0, None)


def pairwise_iou(
    a: np.ndarray,
    b: np.ndarray,
    crowd: np.ndarray | None = None,
    a_wh: np.ndarray | None = None,
    b_wh: np.ndarray | None = None,
) -> np.ndarray:
    """IoU matrix [A,B] between ``xyxy`` boxes ``a`` [A,4] and ``b`` [B,4].

    ``crowd`` [B] bool: for those columns the union is the area of the ``a``
    box (intersection over detection area), as pycocotools ``maskApi.bbIou``.
    ``a_wh`` [A,2], ``b_wh`` [B,2]: the input's widths and heights (COCO
    ``bbox`` w, h); areas are then ``w * h`` as pycocotools takes them (where
    they are the box's exactly), so the IoU agrees to the last bit.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1, 4)
    b = np.asarray(b, dtype=np.float64).reshape(-1, 4)
    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    inter = np.clip(iw, 0, None) * np.clip(ih, 0, None)
    area_a = area(a) if a_wh is None else _wh_area(a, np.asarray(a_wh, np.float64).reshape(-1, 2))
    area_b = area(b) if b_wh is None else _wh_area(b, np.asarray(b_wh, np.float64).reshape(-1, 2))
    aa = area_a[:, None]
    union = aa + area_b[None, :] - inter
    if crowd is not None:
        union = np.where(np.asarray(crowd, bool)[None, :], aa, union)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(union > 0, inter / union, 0.0)
    return iou


def _wh_area(box: np.ndarray, wh: np.ndarray) -> np.ndarray:
    """``w * h`` where ``x1 + w == x2`` and ``y1 + h == y2`` exactly, else the corner area."""
    same = (box[:, 0] + wh[:, 0] == box[:, 2]) & (box[:, 1] + wh[:, 1] == box[:, 3])
    return np.where(same, wh[:, 0] * wh[:, 1], area(box))


def relative_features(box: np.ndarray, width: np.ndarray, height: np.ndarray) -> tuple[np.ndarray, int]:
    """Relative position features ``(cx/W, cy/H, w/W, h/H)`` [D,4] for D-ECE.

    Values outside [0, 1] are clipped; returns ``(features, n_clipped)`` where
    ``n_clipped`` is the number of detections with at least one clipped value
    (report it, never clip silently).
    """
    c = xyxy_to_cxcywh(box)
    wh = np.stack([width, height, width, height], axis=-1).astype(np.float64)
    rel = c / wh
    clipped = np.any((rel < 0) | (rel > 1), axis=-1)
    return np.clip(rel, 0.0, 1.0), int(clipped.sum())


def check_boxes(box: np.ndarray, what: str) -> None:
    """Refuse a box [N,4] (xyxy) with a non-finite coordinate or a negative extent, naming its row of ``what``."""
    finite = np.isfinite(box)
    if not finite.all():  # one flat test; the row only to name it
        finite = finite.all(axis=1)
        raise DetcalInputError(
            "box has a non-finite coordinate", record=f"{what} row {int(np.flatnonzero(~finite)[0])}", field="box"
        )
    bad = (box[:, 2] < box[:, 0]) | (box[:, 3] < box[:, 1])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DetcalInputError(
            f"box {box[i].tolist()} has x2 < x1 or y2 < y1 (negative extent)", record=f"{what} row {i}", field="box"
        )
