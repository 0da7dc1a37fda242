"""detcal's ``popordanoska2024_code`` variant against the figures the authors' own evaluation code printed.

tests/data/kde_reference/README.md says how ``reference.json`` was made (the authors' functions at a
pinned commit, pycocotools' COCOeval, the bundled 79-image COCO set and the same set with its crowd
annotations moved to the front of the file). ECE / ECE50 / ECE75 of their binary link ("thresh") and of
their IoU link ("id") are compared; their code computes in torch, so the tolerance is 1e-7.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth
from detcal.data import bundled
from detcal.data.coco import load_coco_instances
from detcal.metrics.kde_ece import detection_kde_ece

REF = Path(__file__).parents[1] / "data" / "kde_reference" / "reference.json"


def _crowd_first(tmp: Path) -> Path:
    """The bundled ground truth with its crowd annotations first, the rest in file order (as the README says)."""
    d = json.loads(bundled.path("coco_mini79").read_text())
    anns = d["annotations"]
    d["annotations"] = [a for a in anns if a.get("iscrowd")] + [a for a in anns if not a.get("iscrowd")]
    out = tmp / "gt_crowd_first.json"
    out.write_text(json.dumps(d))
    return out


CASES = [
    pytest.param(c, marks=pytest.mark.slow) if c.startswith("coco_tfzoo") else c  # 5,000 images: classes split
    for c in sorted(json.loads(REF.read_text())["sets"])
]


@pytest.mark.parametrize("case", CASES)
def test_code_variant_equals_the_authors_figures(case: str, tmp_path: Path) -> None:
    ref = json.loads(REF.read_text())["sets"][case]
    name, det = case.split("/")
    gt = load_coco_instances(_crowd_first(tmp_path)).gt if name == "coco_mini79_crowd_first" else None
    ds, dets = bundled.load("coco_mini79" if gt is not None else name, det)
    gt = ds.gt if gt is None else gt
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = detection_kde_ece(dets, gt)
        i50 = detection_kde_ece(dets, gt, link="iou")
        i75 = detection_kde_ece(dets, gt, link="iou", iou_thresholds=[0.75])
    th, idl = ref["thresh"], ref["id"]
    assert b.value == pytest.approx(th["ECE"], abs=1e-7)
    assert b.extra["per_threshold"]["0.50"] == pytest.approx(th["ECE50"], abs=1e-7)
    assert b.extra["per_threshold"]["0.75"] == pytest.approx(th["ECE75"], abs=1e-7)
    assert i50.value == pytest.approx(idl["ECE"], abs=1e-7)
    assert i75.value == pytest.approx(idl["ECE75"], abs=1e-7)


def test_one_detection_and_the_crowd_column_by_hand() -> None:
    # a class with one detection: the code's ratio is 1[y > 0] (binary: |y - s|; IoU link: |1 - s| for a hit)
    gt = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[1])
    dets = Detections(image_id=[1], box=[[0, 0, 10, 8]], score=[0.7], category=[1])
    assert detection_kde_ece(dets, gt, iou_thresholds=[0.5]).value == pytest.approx(0.3)
    assert detection_kde_ece(dets, gt, link="iou").value == pytest.approx(0.3)  # IoU 0.8, yet |1 - 0.7|
    assert np.isnan(detection_kde_ece(dets, gt, iou_thresholds=[0.5], variant="popordanoska2024").value)
    # a crowd object listed before the object a detection matches: the code reads the crowd object's column
    # (pycocotools puts crowd objects last in gtIds; the IoU matrix keeps the file's order)
    gt2 = GroundTruth(image_id=[1, 1], box=[[0, 0, 40, 40], [50, 50, 60, 60]], category=[1, 1], iscrowd=[True, False])
    dets2 = Detections(image_id=[1, 1], box=[[50, 50, 60, 58], [0, 0, 20, 20]], score=[0.9, 0.6], category=[1, 1])
    # detection 0 matches object 1 (IoU 0.8); its position among the non-crowd objects is 0, so the code reads
    # column 0, the crowd box: intersection 0 -> IoU 0. Detection 1 lies in the crowd region: ignored.
    code = detection_kde_ece(dets2, gt2, link="iou")
    clean = detection_kde_ece(dets2, gt2, link="iou", variant="popordanoska2024")
    assert code.value == pytest.approx(abs(0.0 - 0.9))  # one detection left, target 0
    assert np.isnan(clean.value)  # the definition: one score, no estimate
