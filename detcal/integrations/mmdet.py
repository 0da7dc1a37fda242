"""An mmengine ``BaseMetric`` for mmdetection: ``process(data_batch, data_samples)`` /
``compute_metrics(results)``.

With mmengine installed the class *is* an ``mmengine.evaluator.BaseMetric``, registered in
mmengine's ``METRICS`` when this module is imported (``custom_imports`` in an mmdet config); without
mmengine, a class of the same shape. It reads mmdet 3.x data samples (as dicts, what mmengine's
``Evaluator`` hands over): ``pred_instances`` with ``bboxes`` (xyxy pixels of the original image), ``scores``, ``labels``
(contiguous class indices), ``img_id``, ``ori_shape`` (h, w), and the ground truth as mmdet's
``CocoMetric`` does without an annotation file: ``instances``, a list of dicts with ``bbox``
(xyxy), ``bbox_label`` and ``ignore_flag`` (crowd); or from ``ground_truth`` (a detcal Dataset).
Each image is kept as one compact result (numpy columns), so mmengine's collection across ranks
(which drops the sampler's padding) applies unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from detcal.integrations.evaluator import DetectionCalibration, concat_chunks

try:
    from mmengine.evaluator import BaseMetric as _Base
    from mmengine.registry import METRICS as _METRICS
except ImportError:  # the same shape without mmengine
    _METRICS = None

    class _Base:  # type: ignore[no-redef]
        default_prefix: str | None = None

        def __init__(self, collect_device: str = "cpu", prefix: str | None = None, **_: Any) -> None:
            self.results: list[Any] = []
            self.prefix = prefix or self.default_prefix


__all__ = ["MMDetCalibrationMetric"]


class MMDetCalibrationMetric(_Base):
    """``class_ids[k]``: the category id of class index k (mmdet's ``CocoMetric.cat_ids``)."""

    default_prefix = "detcal"

    def __init__(
        self,
        spec: Any = None,
        *,
        ground_truth: Any = None,
        class_ids: Sequence[int] | None = None,
        categories: Mapping[int, str] | None = None,
        collect_device: str = "cpu",
        prefix: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(collect_device=collect_device, prefix=prefix)
        self._opts = dict(spec=spec, ground_truth=ground_truth, categories=categories, sync_on_compute=False, **kwargs)
        self._ids = None if class_ids is None else np.asarray(class_ids, np.int64)
        self.result: Any = None

    def _labels(self, lab: Any) -> Any:
        return lab if self._ids is None else self._ids[np.asarray(lab.cpu() if hasattr(lab, "cpu") else lab)]

    def process(self, data_batch: Any, data_samples: Sequence[Mapping[str, Any]]) -> None:
        conv = DetectionCalibration(**self._opts)
        for s in data_samples:
            pi = s["pred_instances"]
            p = {
                "boxes": pi["bboxes"],
                "scores": pi["scores"],
                "labels": self._labels(pi["labels"]),
                "image_id": s["img_id"],
            }
            t = None
            if "instances" in s:
                inst = s["instances"]
                h, w = s["ori_shape"][:2]
                t = [
                    {
                        "boxes": np.asarray([a["bbox"] for a in inst], np.float64).reshape(-1, 4),
                        "image_id": s["img_id"],
                        "labels": self._labels(np.asarray([a["bbox_label"] for a in inst], np.int64)),
                        "iscrowd": np.asarray([a.get("ignore_flag", 0) for a in inst], bool),
                        "height": h,
                        "width": w,
                    }
                ]
            conv._chunks = []
            conv.update([p], t)
            self.results.append(conv._chunks[0])

    def compute_metrics(self, results: list) -> dict[str, float]:
        """The headline numbers (mmengine prefixes them with ``detcal/``); the full result is ``self.result``."""
        ev = DetectionCalibration(**self._opts)
        ev._load_columns(concat_chunks(list(results)), len(results), 0)  # checked, as load_state_dict does
        self.result = ev.compute()
        return {k: v["value"] for k, v in self.result.headline.items()}


if (
    _METRICS is not None
):  # configs can name it: dict(type="MMDetCalibrationMetric", ...) (mmdet's registry asks its parent)
    _METRICS.register_module(module=MMDetCalibrationMetric, force=True)
