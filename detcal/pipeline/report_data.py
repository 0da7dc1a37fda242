"""What the HTML report needs beyond the metrics: the worst-calibrated detections of an evaluation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from detcal.core.results import ConfidenceBlock
from detcal.core.types import Dataset, MatchResult, Skipped
from detcal.pipeline.confidence_block import sample_features, threshold_label
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec
from detcal.reports.html.worst import worst_detections

__all__ = ["worst_block"]

_MAX_GT_PER_IMAGE = 20


def _gt_boxes(data: LoadedData, image_id: int, category: int) -> list[list[float]]:
    """Ground-truth boxes of one image and class (xyxy), for the thumbnails."""
    gt = data.dataset.gt
    sel = np.flatnonzero((gt.image_id == image_id) & (gt.category == category))[:_MAX_GT_PER_IMAGE]
    return [[float(v) for v in gt.box[j]] for j in sel]


def worst_block(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray,
    conf: Mapping[str, ConfidenceBlock | Skipped],
    top: int = 10,
) -> dict[str, Any]:
    """The worst-calibrated detections at the first evaluated IoU threshold (``{}`` when none was)."""

    labels = [lbl for lbl, blk in conf.items() if not isinstance(blk, Skipped)]
    if not labels:
        return {}
    i = next(k for k, t in enumerate(mr.iou_thresholds) if threshold_label(float(t)) == labels[0])
    rows = np.flatnonzero(mr.considered & ~mr.ignored[i])
    d, ds = data.detections, data.dataset
    y = mr.matched[i, rows]
    f = sample_features(spec, np.take(feats, rows, axis=0), None)
    if f is not None and not np.isfinite(f).all():
        f = None  # images without sizes: the confidence-only grid
    b = spec.dece_binning
    names = ["confidence"] + (list(b.features) if f is not None else [])
    bins = [b.bins] * len(names) if isinstance(b.bins, int) else list(b.bins)[: len(names)]
    img_rows = ds.images.index_of(d.image_id[rows])
    gi = mr.gt_index[i, rows]
    ctx = {
        "p": d.score[rows],
        "y": y,
        "features": f,
        "iou": mr.iou[rows],
        "image_id": d.image_id[rows],
        "category": d.category[rows],
        "box": d.box[rows],
        "feature_names": names,
        "class_name": [ds.categories.get(int(c), str(c)) for c in d.category[rows]],
        "file_name": [ds.images.file_name[r] if r >= 0 else "" for r in img_rows],
        "width": np.where(img_rows >= 0, ds.images.width[img_rows], np.nan),
        "height": np.where(img_rows >= 0, ds.images.height[img_rows], np.nan),
        "gt_box": [None] * len(rows),
    }
    first = conf[labels[0]]
    dece = first.metric("dece") if isinstance(first, ConfidenceBlock) else None
    params = dece.params if dece is not None else {}
    edges = str(params.get("edges") or "floor")
    if len(params.get("bins") or []) == len(names):
        bins = [int(v) for v in params["bins"]]
    out = worst_detections(_Lazy(ctx, gi, ds), bins, b.sample_threshold, b.policy, edges=edges, top=top)
    for key in ("highest_confidence_false_positives", "lowest_confidence_true_positives", "largest_contributions"):
        for r in out[key]:
            r["image_gt_boxes"] = _gt_boxes(data, r["image_id"], r["category"])
    return {"iou": labels[0], **out}


class _Lazy(dict):
    """The context with ``gt_box`` looked up only for the rows the tables show."""

    def __init__(self, ctx: dict[str, Any], gi: np.ndarray, ds: Dataset):
        super().__init__(ctx)
        self["gt_box"] = _GtBoxes(gi, ds.gt.box)


class _GtBoxes:
    def __init__(self, gi: np.ndarray, boxes: np.ndarray):
        self.gi, self.boxes = gi, boxes

    def __getitem__(self, i: int) -> Any:
        g = int(self.gi[i])
        return None if g < 0 else self.boxes[g]
