""":class:`DetectionCalibrationMetric`: the streaming evaluator as a ``torchmetrics.Metric``.

Needs torchmetrics (not a detcal dependency; ``pip install torchmetrics``). The kept
columns of :class:`~detcal.integrations.evaluator.DetectionCalibration` are registered as
list states with ``dist_reduce_fx="cat"``, so torchmetrics gathers them across ranks
before ``compute()`` (``sync_on_compute``, on by default), the metric moves with
``.to(device)``, and it composes with ``MetricCollection`` and Lightning's ``self.log_dict``.

``compute()`` returns the headline numbers as a flat dict of float tensors (``ece``,
``dece``, ..., ``ence_tx``, ..., and COCO ``AP`` when computed); the whole
:class:`~detcal.pipeline.result.EvaluationResult` of the same call is ``metric.result``.
Every rank must call ``update`` at least once before a synchronised ``compute`` (as with
any torchmetrics list state), and every rank must give the same optional fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from detcal.integrations.evaluator import DetectionCalibration

__all__ = ["DetectionCalibrationMetric", "COLUMNS"]

COLUMNS: dict[str, tuple[int, ...]] = {
    "img_id": (),
    "img_w": (),
    "img_h": (),
    "img_ndet": (),
    "img_ngt": (),
    "det_box": (4,),
    "det_score": (),
    "det_label": (),
    "det_box_std": (4,),
    "det_box_cov": (4, 4),
    "det_corner_cov": (2, 2, 2),
    "det_delta_std": (4,),
    "det_delta_mean": (4,),
    "det_proposal": (4,),
    "gt_box": (4,),
    "gt_label": (),
    "gt_crowd": (),
    "gt_area": (),
    "gt_wh": (2,),
    "gt_ignore": (),
    "dropped": (),
}
"""Registered states (flattened 1-D tensors) and the per-row shape each is put back into."""

_REQUIRED = (
    "img_id",
    "img_w",
    "img_h",
    "img_ndet",
    "img_ngt",
    "det_box",
    "det_score",
    "det_label",
    "gt_box",
    "gt_label",
    "gt_crowd",
)
_BOOL = ("gt_crowd", "gt_ignore")


class DetectionCalibrationMetric(Metric):
    """``torchmetrics.Metric`` wrapper of :class:`~detcal.integrations.evaluator.DetectionCalibration`.

    Arguments as :class:`DetectionCalibration` (``spec``, ``box_format``, ``categories``,
    ``ground_truth``, ``order``, ``duplicate_images``), plus torchmetrics' ``Metric`` keyword
    arguments (``sync_on_compute``, ``process_group``, ``dist_sync_fn``, ``compute_on_cpu``).
    ``forward`` only updates (a calibration number of one batch means little) and returns None.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(
        self,
        spec: Any = None,
        *,
        box_format: str = "xyxy",
        categories: Mapping[int, str] | None = None,
        ground_truth: Any = None,
        order: str = "image_id",
        duplicate_images: str = "error",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._options = dict(
            box_format=box_format,
            categories=categories,
            ground_truth=ground_truth,
            order=order,
            duplicate_images=duplicate_images,
        )
        self._convert = DetectionCalibration(spec, sync_on_compute=False, **self._options)
        self.result: Any = None
        for name in COLUMNS:
            self.add_state(name, default=[], dist_reduce_fx="cat")

    @property
    def spec(self) -> Any:
        return self._convert.spec

    def update(self, preds: Sequence[Mapping[str, Any]], target: Sequence[Mapping[str, Any]] | None = None) -> None:
        """One batch, as :meth:`DetectionCalibration.update` (the same checks and conversions)."""
        conv = self._convert
        conv._chunks = []
        conv.update(preds, target)
        for chunk in conv._chunks:
            for name, v in chunk.items():
                a = np.asarray([v] if name == "dropped" else v)
                a = a.astype(np.uint8) if a.dtype == bool else a
                getattr(self, name).append(torch.from_numpy(np.ascontiguousarray(a).reshape(-1)).to(self.device))
        conv._chunks = []

    def forward(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.update(*args, **kwargs)

    def _columns(self) -> dict[str, Any]:
        cols: dict[str, Any] = {}
        for name, tail in COLUMNS.items():
            v = getattr(self, name)
            t = dim_zero_cat(v) if isinstance(v, list) and v else (v if isinstance(v, torch.Tensor) else None)
            if t is None or (t.numel() == 0 and name not in _REQUIRED):
                continue
            a = t.detach().cpu().numpy().reshape((-1,) + tail)
            cols[name] = a.astype(bool) if name in _BOOL else a
        cols["dropped"] = int(np.sum(cols.get("dropped", 0)))
        return cols

    def compute(self) -> dict[str, torch.Tensor]:
        """The headline numbers (float tensors; NaN where undefined); the full result is ``self.result``."""
        ev = DetectionCalibration(self.spec, sync_on_compute=False, **self._options)
        ev._load_columns(self._columns(), int(self._update_count), 0)  # checked, as load_state_dict does
        self.result = ev.compute()
        out = {k: (np.nan if v.get("value") is None else v["value"]) for k, v in self.result.headline.items()}
        ap = (self.result.to_dict().get("accuracy") or {}).get("AP")
        if isinstance(ap, dict) and ap.get("value") is not None:
            out["AP"] = ap["value"]
        return {k: torch.tensor(float(v), dtype=torch.float64) for k, v in out.items()}
