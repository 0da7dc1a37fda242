"""What the HTML report needs beyond the metrics: the worst-calibrated detections of an evaluation."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from detcal.core.results import ConfidenceBlock
from detcal.core.types import Dataset, MatchResult, Skipped
from detcal.pipeline.confidence_block import grid_bins, sample_feature_columns, threshold_label
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import EvaluationSpec
from detcal.reports.html.worst import GridCells, worst_detections

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
    feats: np.ndarray | Callable[[], np.ndarray],
    conf: Mapping[str, ConfidenceBlock | Skipped],
    top: int = 10,
    cells: GridCells | None = None,
) -> dict[str, Any]:
    """The worst-calibrated detections at the first evaluated IoU threshold (``{}`` when none was).

    ``feats``: the relative box features, or a function that makes them (called only when read); ``cells``:
    this sample's D-ECE cells on the full grid (confidence and features) as the calibration split by error type
    computed them (:func:`detcal.pipeline.diagnostics_block.diagnostics_block`'s ``keep``): read instead of
    binning the sample again when made with this table's grid, and then no feature is read."""

    labels = [lbl for lbl, blk in conf.items() if not isinstance(blk, Skipped)]
    if not labels:
        return {}
    i = next(k for k, t in enumerate(mr.iou_thresholds) if threshold_label(float(t)) == labels[0])
    rows = np.flatnonzero(mr.considered & ~mr.ignored[i])
    d, ds = data.detections, data.dataset
    y = mr.matched[i, rows]
    p = d.score[rows]
    b = spec.dece_binning
    first = conf[labels[0]]
    dece = first.metric("dece") if isinstance(first, ConfidenceBlock) else None
    params = dece.params if dece is not None else {}
    edges = str(params.get("edges") or "floor")
    names = ["confidence", *b.features]
    bins = grid_bins(params, b.bins, len(names))
    columns: list[np.ndarray] | None = None
    if cells is None or cells.key != (tuple(bins), edges, int(b.sample_threshold), b.policy, len(rows)):
        cells = None  # binned here: the grid's columns
        columns = [p] + (sample_feature_columns(spec, feats() if callable(feats) else feats, rows) or [])
        if not all(np.isfinite(c).all() for c in columns[1:]):
            columns = columns[:1]  # images without sizes: the confidence-only grid
        names = names[: len(columns)]
        bins = grid_bins(params, b.bins, len(names))
    # the tables show a few rows: every column but the grid's is read at those rows only (no pass over the sample)
    ctx = {
        "p": p,
        "y": y,
        "features": None,  # the grid is given as its columns
        "grid_columns": columns,
        "iou": _At(rows, mr.iou.__getitem__),
        "image_id": _At(rows, d.image_id.__getitem__),
        "category": _At(rows, d.category.__getitem__),
        "box": _At(rows, d.box.__getitem__),
        "feature_names": names,
        "class_name": _At(rows, lambda r: ds.categories.get(int(d.category[r]), str(d.category[r]))),
        "file_name": _At(rows, lambda r: _image_field(ds, int(d.image_id[r]), "file_name")),
        "width": _At(rows, lambda r: _image_field(ds, int(d.image_id[r]), "width")),
        "height": _At(rows, lambda r: _image_field(ds, int(d.image_id[r]), "height")),
        "gt_box": _At(rows, lambda r: None if mr.gt_index[i, r] < 0 else ds.gt.box[mr.gt_index[i, r]]),
    }
    out = worst_detections(ctx, bins, b.sample_threshold, b.policy, edges=edges, top=top, cells=cells)
    for key in ("highest_confidence_false_positives", "lowest_confidence_true_positives", "largest_contributions"):
        for r in out[key]:
            r["image_gt_boxes"] = _gt_boxes(data, r["image_id"], r["category"])
    return {"iou": labels[0], **out}


def _image_field(ds: Dataset, image_id: int, name: str) -> Any:
    """``file_name``, ``width`` or ``height`` of one image ("" / NaN when the id is not in the dataset)."""
    r = int(ds.images.index_of(np.asarray([image_id]))[0])
    if name == "file_name":
        return ds.images.file_name[r] if r >= 0 else ""
    return getattr(ds.images, name)[r] if r >= 0 else np.nan


class _At:
    """A column of the sample read at one position at a time: item ``j`` is ``get(rows[j])``."""

    def __init__(self, rows: np.ndarray, get: Callable[[int], Any]):
        self.rows, self.get = rows, get

    def __getitem__(self, j: int) -> Any:
        return self.get(int(self.rows[j]))
