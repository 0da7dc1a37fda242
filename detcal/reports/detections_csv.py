"""Per-detection CSV: one row per input detection (input order), match outcome per
IoU threshold, and for evaluations the box and its relative features.

Columns: ``image_id,category,score,considered,iou`` then per threshold T
``matched@T,ignored@T,gt_id@T`` (``@kitti`` for the per-class KITTI row);
:func:`detections_csv` appends ``x1,y1,x2,y2,rel_cx,rel_cy,rel_w,rel_h,clipped``.
Floats are written at round-trip precision.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from detcal.types import Detections, MatchResult

__all__ = ["format_csv", "detections_csv"]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")


def _column_names(result: MatchResult, per_class: bool) -> list[str]:
    tags = ["kitti"] if per_class else [f"{t:g}" for t in result.iou_thresholds]
    names = ["image_id", "category", "score", "considered", "iou"]
    for tag in tags:
        names += [f"matched@{tag}", f"ignored@{tag}", f"gt_id@{tag}"]
    return names


def format_csv(dets: Detections, result: MatchResult, gt_ids: np.ndarray, per_class: bool = False) -> str:
    """The CSV text (header + one row per detection, input order); floats at round-trip precision."""
    zero_one = np.array(["0", "1"])
    cols: list[list[str]] = [
        list(map(str, dets.image_id.tolist())),
        list(map(str, dets.category.tolist())),
        list(map(repr, dets.score.tolist())),
        zero_one[result.considered.astype(np.int64)].tolist(),
        list(map(repr, result.iou.tolist())),
    ]
    for t in range(result.matched.shape[0]):
        gi = result.gt_index[t]
        ids = np.where(gi >= 0, gt_ids[np.maximum(gi, 0)] if len(gt_ids) else -1, -1)
        cols += [
            zero_one[result.matched[t].astype(np.int64)].tolist(),
            zero_one[result.ignored[t].astype(np.int64)].tolist(),
            list(map(str, ids.tolist())),
        ]
    header = ",".join(_column_names(result, per_class))
    body = "\n".join(map(",".join, zip(*cols)))
    return header + "\n" + body + ("\n" if body else "")


def detections_csv(data: Any, mr: MatchResult, feats: np.ndarray, clipped: np.ndarray) -> str:
    """The evaluation's detections.csv: :func:`format_csv` plus box and relative features."""
    dets = data.detections
    per_class = not bool(np.all(np.isfinite(mr.iou_thresholds)))
    base = format_csv(dets, mr, data.dataset.gt.id, per_class).splitlines()
    extra_cols = [dets.box[:, 0], dets.box[:, 1], dets.box[:, 2], dets.box[:, 3], *feats.T]
    text_cols = [list(map(repr, c.tolist())) for c in extra_cols] + [list(map(str, clipped.astype(int).tolist()))]
    header = "x1,y1,x2,y2," + ",".join(f"rel_{n}" for n in FEATURES) + ",clipped"
    extra = [header] + list(map(",".join, zip(*text_cols)))
    return "\n".join(map(",".join, zip(base, extra))) + "\n"
