"""Adapters that put detcal inside a training loop (docs/api.md, "During training").

* :class:`detcal.integrations.evaluator.DetectionCalibration`: framework-free streaming evaluator
  (``update(preds, targets)`` / ``compute()`` / ``reset()`` / ``merge()``), numpy or torch input;
* :mod:`detcal.integrations.torchmetrics`: the same as a ``torchmetrics.Metric`` (needs torchmetrics);
* :mod:`detcal.integrations.detectron2`: a detectron2 ``DatasetEvaluator``-shaped adapter;
* :mod:`detcal.integrations.mmdet`: an mmengine ``BaseMetric``-shaped adapter.

None of them imports torch, torchmetrics, detectron2 or mmengine at detcal import time.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DetectionCalibration"]


def __getattr__(name: str) -> Any:  # lazy: the evaluator pulls in the pipeline
    if name == "DetectionCalibration":
        from detcal.integrations.evaluator import DetectionCalibration  # lazy: the package attribute loads on first use

        return DetectionCalibration
    raise AttributeError(f"module 'detcal.integrations' has no attribute {name!r}")
