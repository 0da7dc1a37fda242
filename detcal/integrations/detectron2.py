"""A detectron2 ``DatasetEvaluator``-shaped adapter (``reset / process(inputs, outputs) / evaluate``).

detectron2 is not imported (the class only has the methods its evaluation loop calls, so
``detectron2.evaluation.inference_on_dataset`` and ``DatasetEvaluators`` take it). It reads the
fields of detectron2 0.6's ``Instances`` in ``outputs[i]["instances"]``: ``pred_boxes`` (``Boxes``,
xyxy pixels of the input image), ``scores``, ``pred_classes``, and the covariance a probabilistic head
stores (probdet: ``pred_boxes_covariance`` [N,4,4], over the corners x1, y1, x2, y2); the inputs'
``image_id``, ``height``, ``width``, and their ``instances`` (``gt_boxes``, ``gt_classes``) when the
mapper keeps annotations; otherwise the ground truth comes from ``ground_truth`` (a detcal Dataset,
e.g. ``detcal.data.coco.load_coco_instances(json_file)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from detcal.integrations.evaluator import DetectionCalibration

__all__ = ["DetectionCalibrationEvaluator"]


class DetectionCalibrationEvaluator:
    """``class_ids[k]``: the dataset category id of contiguous class k (detectron2's metadata
    ``thing_dataset_id_to_contiguous_id``, inverted); None: the class indices are the ids.
    ``cov_field`` / ``cov_format`` (``"xyxy"`` corners or ``"xywh"``): the covariance field, if any."""

    def __init__(
        self,
        ground_truth: Any = None,
        spec: Any = None,
        *,
        class_ids: Sequence[int] | None = None,
        categories: Mapping[int, str] | None = None,
        cov_field: str = "pred_boxes_covariance",
        cov_format: str = "xyxy",
        **kwargs: Any,
    ) -> None:
        self._ev = DetectionCalibration(spec, ground_truth=ground_truth, categories=categories, **kwargs)
        self._ids = None if class_ids is None else np.asarray(class_ids, np.int64)
        self._cov = (cov_field, "box_cov_xyxy" if cov_format == "xyxy" else "box_cov")
        self.result: Any = None

    def reset(self) -> None:
        self._ev.reset()

    def _labels(self, cls: Any) -> Any:
        return cls if self._ids is None else self._ids[np.asarray(cls.cpu() if hasattr(cls, "cpu") else cls)]

    def process(self, inputs: Sequence[Mapping[str, Any]], outputs: Sequence[Mapping[str, Any]]) -> None:
        preds, targets = [], []
        for inp, out in zip(inputs, outputs):
            inst = out["instances"]
            p = {
                "boxes": inst.pred_boxes.tensor,
                "scores": inst.scores,
                "labels": self._labels(inst.pred_classes),
                "image_id": inp["image_id"],
            }
            if inst.has(self._cov[0]):
                p[self._cov[1]] = inst.get(self._cov[0])
            preds.append(p)
            if "instances" in inp:
                gt = inp["instances"]
                targets.append(
                    {
                        "boxes": gt.gt_boxes.tensor,
                        "labels": self._labels(gt.gt_classes),
                        "image_id": inp["image_id"],
                        "height": inp["height"],
                        "width": inp["width"],
                    }
                )
        self._ev.update(preds, targets if targets else None)

    def evaluate(self) -> dict[str, dict[str, float]]:
        """``{"calibration": headline numbers}`` on every rank; the full result is ``self.result``."""
        self.result = self._ev.compute()
        return {"calibration": {k: v["value"] for k, v in self.result.headline.items()}}
