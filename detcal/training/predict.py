"""Inference: run the R-FCN over a dataset and export delta records.

:func:`predict` returns a :class:`PredictResult` whose ``detections`` is a
:class:`detcal.core.types.Detections` in image order (the rows of
``dataset.images``; within an image by descending score) with

* ``box [D,4]`` xyxy pixels (``decode(proposal, delta_mean)`` clipped to the image),
* ``score [D]`` (softmax probability of ``category``), ``category [D]`` (dataset ids),
* ``proposal [D,4]`` the RoI P, ``delta_mean [D,4]``, ``delta_std [D,4]``:
  *unweighted* R-CNN deltas of the target w.r.t. P and their standard
  deviations (box-coder weights divided out; docs/metrics.md, boxes and deltas),

and the settings that produced them (``score_threshold``: a detection is kept
when its score is strictly greater; class-wise NMS IoU; detections per image).
Stage 3 of Levi et al. 2019 (std scaling ``sigma' = s_k sigma``) is fitted on
these records of a recalibration split and applied with :func:`scale_delta_std`
(or ``detcal.calibration.regression.StdScaling.transform``).

Under ``torch.distributed`` each rank predicts a contiguous shard of the images
and every rank receives the gathered result.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset
from tqdm.auto import tqdm

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.models.rfcn import RFCN
from detcal.training.comm import gather_detections, get_rank_world
from detcal.training.data import DetectionDataset, ImageSource, LabelMap, collate, shard
from detcal.training.records import concat_detections, empty_detections


@dataclass
class PredictResult:
    """Detections (delta records, image order) and the inference settings that produced them."""

    detections: Detections
    score_threshold: float
    nms_threshold: float
    max_detections: int
    params: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """Provenance for result files."""
        return {
            "score_threshold": self.score_threshold,
            "nms_threshold": self.nms_threshold,
            "max_detections": self.max_detections,
            "n_detections": len(self.detections),
            **self.params,
        }


def _detections_from_outputs(image_ids: list[int], outputs: list[dict[str, torch.Tensor]]) -> Detections:
    counts = [len(o["scores"]) for o in outputs]
    if sum(counts) == 0:
        return empty_detections()
    cat = {
        k: torch.cat([o[k] for o in outputs]).cpu().double().numpy()
        for k in ("boxes", "scores", "proposals", "delta_mean", "delta_std")
    }
    category = torch.cat([o["category"] for o in outputs]).cpu().numpy().astype(np.int64)
    return Detections(
        image_id=np.repeat(np.asarray(image_ids, np.int64), counts),
        box=cat["boxes"],
        score=cat["scores"],
        category=category,
        proposal=cat["proposals"],
        delta_mean=cat["delta_mean"],
        delta_std=cat["delta_std"],
    )


@torch.no_grad()
def predict(
    model: RFCN,
    dataset: Dataset,
    images: ImageSource,
    batch_size: int = 4,
    score_threshold: float = 0.05,
    device: str | torch.device = "cpu",
    progress: bool = True,
    *,
    num_threads: int | None = None,
) -> PredictResult:
    """Detections of ``model`` on every image of ``dataset`` (see the module docstring).

    ``score_threshold`` overrides the model's ``box_score_thresh`` and is
    recorded in the result. The model is put in ``eval()`` mode.
    """
    if batch_size < 1:
        raise DetcalInputError(f"batch_size must be >= 1, got {batch_size}", field="batch_size")
    if not 0.0 <= score_threshold < 1.0:
        raise DetcalInputError(f"score_threshold must be in [0, 1), got {score_threshold}", field="score_threshold")
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    rank, world = get_rank_world()
    device = torch.device(device)
    model.to(device).eval()
    label_map = LabelMap(tuple(int(c) for c in model.category_ids.tolist()))
    ds = DetectionDataset(dataset, images, label_map)
    rows = np.arange(len(dataset.images))[shard(len(dataset.images), rank, world)]
    loader = DataLoader(Subset(ds, rows.tolist()), batch_size=batch_size, shuffle=False, collate_fn=collate)
    parts = []
    for imgs, targets in tqdm(loader, desc="R-FCN predict", disable=not progress or rank != 0, dynamic_ncols=True):
        outputs = model.detect([im.to(device) for im in imgs], score_thresh=score_threshold)
        ids = [int(dataset.images.id[int(t["image_index"])]) for t in targets]
        parts.append(_detections_from_outputs(ids, outputs))
    dets = concat_detections(parts)
    if world > 1:
        dets = gather_detections(dets, dataset.images)
    params = {
        "model": {k: v for k, v in model.config.items() if k != "backbone_weights"},
        "box_coder_weights": list(model.box_coder_weights),
        "n_images": len(dataset.images),
        "delta_space": "unweighted",
    }
    return PredictResult(dets, float(score_threshold), model.box_nms_thresh, model.box_detections_per_img, params)


def scale_delta_std(dets: Detections, scale: np.ndarray) -> Detections:
    """Std scaling (Levi et al. 2019, Eq. 12): ``delta_std' = delta_std * s`` per coordinate, ``s [4] > 0``."""
    if dets.delta_std is None:
        raise DetcalInputError("detections carry no delta_std (not delta records)", field="delta_std")
    s = np.asarray(scale, dtype=np.float64).reshape(-1)
    if s.shape != (4,) or not np.all(np.isfinite(s) & (s > 0)):
        raise DetcalInputError(f"scale must be 4 positive finite numbers, got {s.tolist()}", field="scale")
    return dataclasses.replace(dets, delta_std=dets.delta_std * s[None, :])
