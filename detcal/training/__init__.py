"""Two-stage R-FCN training, prediction (delta records) and data parallelism.

Importing this package does not import torch: the torch-based names below are
loaded on first use (``from detcal.training import train_stage``), so the
typed specs (:mod:`detcal.training.spec`) and the fingerprints work without
the ``train`` extra. The prediction function is
:func:`detcal.training.predict.predict` (``detcal.training.predict`` is its module).
"""

from __future__ import annotations

import importlib
from typing import Any

from detcal.training.torch_check import require_torch

_LAZY = {
    "DetectionDataset": "data",
    "ImageSource": "data",
    "IterationBatchSampler": "data",
    "LabelMap": "data",
    "collate": "data",
    "iteration_batch": "data",
    "toy_scenes": "data",
    "training_gt_mask": "data",
    "PredictResult": "predict",
    "scale_delta_std": "predict",
    "concat_detections": "records",
    "empty_detections": "records",
    "TrainingStopped": "trainer",
    "learning_rate": "trainer",
    "load_checkpoint": "trainer",
    "read_checkpoint": "trainer",
    "train_stage": "trainer",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'detcal.training' has no attribute {name!r}")
    if mod != "records":
        require_torch(f"detcal.training.{name}")
    return getattr(importlib.import_module(f"detcal.training.{mod}"), name)
