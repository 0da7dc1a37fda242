"""Real detections bundled with detcal: four COCO detectors, no path needed.

Two sets (provenance and licences: ``docs/real_detectors.md`` and the
``README.md`` beside this file):

``coco_tfzoo``
    All 5,000 COCO val2017 images; 36,781 ground-truth boxes; the results of
    four TensorFlow model-zoo detectors (:data:`DETECTORS`) at score >= 0.3,
    from the example records of netcal (Küppers et al., CVPRW 2020). The
    records carry no crowd flag (``iscrowd`` is False everywhere) and no
    mask area (the COCO area of a box is its box area). Boxes are stored as
    the records' float32 relative ``[ymin, xmin, ymax, xmax]``; pixel boxes
    are ``x = x_rel * width``, ``y = y_rel * height`` in float64.
``coco_mini79``
    79 val2017 images with the official annotations (crowd flags, mask
    areas), and the same detectors' results on them.

>>> dataset, dets = load("coco_tfzoo", detector="rfcn-resnet-101")

Everything here is numpy only (plus gzip/json from the standard library).
"""

from __future__ import annotations

import atexit
import gzip
import json
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.coco import load_coco_instances, load_coco_results, write_coco_instances, write_coco_results

HERE = Path(__file__).resolve().parent

DETECTORS: tuple[str, ...] = ("faster-rcnn-resnet-50", "rfcn-resnet-101", "ssd-inception-v2", "ssd-resnet-50-v1")
"""Names of the bundled detectors (TF model zoo, COCO-trained)."""

SETS: tuple[str, ...] = ("coco_tfzoo", "coco_mini79")
"""Names of the bundled sets."""

DETECTOR_LABELS: dict[str, str] = {
    "faster-rcnn-resnet-50": "Faster R-CNN R-50",
    "rfcn-resnet-101": "R-FCN R-101",
    "ssd-inception-v2": "SSD Inception v2",
    "ssd-resnet-50-v1": "SSD R-50 v1",
}
"""Display names of :data:`DETECTORS`."""


def _check(name: str, detector: str | None) -> None:
    if name not in SETS:
        raise DetcalInputError(f"unknown bundled set {name!r}; choose one of {SETS}", field="name")
    if detector is not None and detector not in DETECTORS:
        raise DetcalInputError(f"unknown bundled detector {detector!r}; choose one of {DETECTORS}", field="detector")


@lru_cache(maxsize=1)
def _tfzoo() -> dict[str, np.ndarray]:
    with np.load(HERE / "coco_tfzoo.npz") as z:
        return {k: z[k] for k in z.files}


def _pixels(box_rel: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    """[ymin, xmin, ymax, xmax] relative (float32) -> xyxy pixels (float64)."""
    b = box_rel.astype(np.float64)
    return np.stack([b[:, 1] * w, b[:, 0] * h, b[:, 3] * w, b[:, 2] * h], axis=1)


def _tfzoo_dataset() -> Dataset:
    z = _tfzoo()
    images = Images(
        id=z["image_id"], width=z["image_width"], height=z["image_height"], file_name=z["image_file_name"].tolist()
    )
    row = z["gt_image"].astype(np.int64)
    g = len(row)
    gt = GroundTruth(
        image_id=images.id[row],
        box=_pixels(z["gt_box_rel"], images.width[row], images.height[row]),
        category=z["gt_category"].astype(np.int64),
        iscrowd=np.zeros(g, bool),
        ignore=np.zeros(g, bool),
        id=np.arange(1, g + 1, dtype=np.int64),
    )
    cats = dict(zip(z["category_id"].tolist(), z["category_name"].tolist()))
    return Dataset(images=images, gt=gt, categories=cats, source="bundled:coco_tfzoo")


def _tfzoo_detections(detector: str) -> Detections:
    z = _tfzoo()
    row = z[f"{detector}/image"].astype(np.int64)
    w, h = z["image_width"][row].astype(np.float64), z["image_height"][row].astype(np.float64)
    return Detections(
        image_id=z["image_id"][row],
        box=_pixels(z[f"{detector}/box_rel"], w, h),
        score=z[f"{detector}/score"].astype(np.float64),
        category=z[f"{detector}/category"].astype(np.int64),
    )


def _mini79_file(stem: str, directory: Path | None = None) -> Path:
    """The gunzipped bundled JSON file in ``directory`` (default: a per-process temporary folder)."""
    out = (directory or Path(_mini79_dir())) / f"{stem}.json"
    if not out.exists():
        out.write_bytes(gzip.decompress((HERE / "coco_mini79" / f"{stem}.json.gz").read_bytes()))
    return out


@lru_cache(maxsize=1)
def _mini79_dir() -> str:
    d = tempfile.mkdtemp(prefix="detcal_bundled_")
    atexit.register(shutil.rmtree, d, True)
    return d


def path(name: str, detector: str | None = None, directory: str | Path | None = None) -> Path:
    """A plain JSON file of a bundled set (COCO instances, or one detector's COCO results).

    ``directory``: where to write it (created; the file stays, and is reused when there). Without
    it the file lies in a per-process temporary folder that is deleted when Python exits (for
    tools that read it within the same process). ``coco_mini79`` files are unpacked;
    ``coco_tfzoo`` is written as COCO JSON on first use.
    """
    _check(name, detector)
    where = None if directory is None else Path(directory)
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
    if name == "coco_mini79":
        return _mini79_file("gt" if detector is None else f"dt_{detector}", where)
    out = (where or Path(_mini79_dir())) / ("tfzoo_gt.json" if detector is None else f"tfzoo_dt_{detector}.json")
    if not out.exists():
        if detector is None:
            write_coco_instances(out, _tfzoo_dataset())
        else:
            write_coco_results(out, _tfzoo_detections(detector))
    return out


def load_dataset(name: str = "coco_tfzoo") -> Dataset:
    """The ground truth of a bundled set as a :class:`~detcal.core.types.Dataset`."""
    _check(name, None)
    if name == "coco_tfzoo":
        return _tfzoo_dataset()
    ds = load_coco_instances(_mini79_file("gt"))
    ds.source = "bundled:coco_mini79"
    return ds


def load_detections(name: str = "coco_tfzoo", detector: str = "rfcn-resnet-101") -> Detections:
    """One bundled detector's results as :class:`~detcal.core.types.Detections` (file order)."""
    _check(name, detector)
    if name == "coco_tfzoo":
        return _tfzoo_detections(detector)
    return load_coco_results(_mini79_file(f"dt_{detector}"))


def load(name: str = "coco_tfzoo", detector: str = "rfcn-resnet-101") -> tuple[Dataset, Detections]:
    """``(Dataset, Detections)`` of one bundled detector on a bundled set."""
    return load_dataset(name), load_detections(name, detector)


def gt_area(name: str = "coco_tfzoo") -> np.ndarray:
    """COCO ``area`` of each ground-truth box [G] (GroundTruth order).

    ``coco_mini79``: the official (mask) areas of the annotations;
    ``coco_tfzoo``: the box area ``w * h`` (the records carry no masks).
    """
    _check(name, None)
    if name == "coco_tfzoo":
        b = _tfzoo_dataset().gt.box
        return (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    doc = json.loads(_mini79_file("gt").read_bytes())
    return np.array([float(a["area"]) for a in doc["annotations"]], np.float64)


@dataclass
class NetcalRecords:
    """netcal's own per-detection view of one bundled detector (``coco_tfzoo``).

    ``box_rel [D,4]`` and ``gt_box_rel [G,4]`` relative ``[ymin, xmin, ymax,
    xmax]`` (float64 from float32), ``image [D]`` / ``gt_image [G]`` row into
    the 5,000 images, ``matched_060 [D]`` / ``matched_075 [D]`` netcal's own
    ``matched`` flags at IoU 0.60 / 0.75, in the detections' order.
    """

    image: np.ndarray
    category: np.ndarray
    score: np.ndarray
    box_rel: np.ndarray
    gt_image: np.ndarray
    gt_category: np.ndarray
    gt_box_rel: np.ndarray
    matched_060: np.ndarray
    matched_075: np.ndarray

    def matched(self, iou: float) -> np.ndarray:
        """netcal's flags at ``iou`` (0.60 or 0.75)."""
        if np.isclose(iou, 0.60):
            return self.matched_060
        if np.isclose(iou, 0.75):
            return self.matched_075
        raise DetcalInputError(f"netcal flags are bundled for IoU 0.60 and 0.75 only, got {iou}", field="iou")


def netcal_records(detector: str) -> NetcalRecords:
    """The relative boxes and netcal's ``matched`` flags of one detector on ``coco_tfzoo``."""
    _check("coco_tfzoo", detector)
    z = _tfzoo()
    return NetcalRecords(
        image=z[f"{detector}/image"].astype(np.int64),
        category=z[f"{detector}/category"].astype(np.int64),
        score=z[f"{detector}/score"].astype(np.float64),
        box_rel=z[f"{detector}/box_rel"].astype(np.float64),
        gt_image=z["gt_image"].astype(np.int64),
        gt_category=z["gt_category"].astype(np.int64),
        gt_box_rel=z["gt_box_rel"].astype(np.float64),
        matched_060=z[f"{detector}/netcal_matched_060"],
        matched_075=z[f"{detector}/netcal_matched_075"],
    )


__all__ = [
    "DETECTORS",
    "DETECTOR_LABELS",
    "SETS",
    "NetcalRecords",
    "gt_area",
    "load",
    "load_dataset",
    "load_detections",
    "netcal_records",
    "path",
]
