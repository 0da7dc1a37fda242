"""The inputs of a detector comparison: one ground truth and several detectors' results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from detcal.core.types import Dataset, Detections
from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.pipeline.input_checks import check_input
from detcal.pipeline.sources import LoadedData, _need
from detcal.pipeline.spec import ConfigError, DataSpec

__all__ = ["load_runs"]


def _check(data: DataSpec, ds: Dataset, runs: Mapping[str, Detections], results: Mapping[str, str]) -> None:
    """The input checks of evaluate (docs/formats.md#input-checks) on every detector's results (an unknown
    category is already an error of the loader here)."""
    for n, dets in runs.items():
        prov = {"source": "coco", "gt": data.gt, "results": str(results[n])}
        check_input(LoadedData(ds, dets, None, prov), data)


def load_runs(
    data: DataSpec, detectors: Sequence[str], results: Mapping[str, str]
) -> tuple[Dataset, dict[str, Detections], np.ndarray | None]:
    """``(dataset, {name: detections}, gt areas or None)``: the bundled detectors (``data.source=bundled``;
    ``detectors`` empty: all four) or COCO results files (``data.source=coco``: ``results`` name -> path)."""
    if data.source == "bundled":
        names = list(detectors) or list(bundled.DETECTORS)
        bad = [n for n in names if n not in bundled.DETECTORS]
        if bad:
            raise ConfigError("detectors", f"{bad} not among {', '.join(bundled.DETECTORS)}")
        ds = bundled.load_dataset(data.bundle)
        return ds, {n: bundled.load_detections(data.bundle, n) for n in names}, bundled.gt_area(data.bundle)
    if data.source == "coco":
        if not results:
            raise ConfigError("results", "give the detectors' results files: '+results={name: path, ...}'")
        ds = load_coco_instances(_need(data.gt, "data.gt"))
        runs: dict[str, Any] = {str(n): load_coco_results(_need(p, f"results.{n}"), ds) for n, p in results.items()}
        _check(data, ds, runs, results)
        return ds, runs, ds.gt.area
    raise ConfigError("data.source", f"detcal-compare reads bundled or coco data, got {data.source!r}")
