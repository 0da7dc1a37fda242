"""Accuracy beside calibration in detcal-evaluate: the twelve COCO summarize()
numbers equal pycocotools' on the bundled official 79-image set and on a
synthetic set (crowd-free, small/medium boxes), through the pipeline."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

import detcal
from detcal.data import bundled
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

NAMES = (
    "AP",
    "AP50",
    "AP75",
    "AP_small",
    "AP_medium",
    "AP_large",
    "AR1",
    "AR10",
    "AR100",
    "AR_small",
    "AR_medium",
    "AR_large",
)


def _pycoco(gt: str, res: str) -> np.ndarray:
    with contextlib.redirect_stdout(io.StringIO()):
        G = COCO(gt)
        E = COCOeval(G, G.loadRes(res), "bbox")
        E.evaluate()
        E.accumulate()
        E.summarize()
    return np.asarray(E.stats)


def _ours(data: DataSpec, tmp: Path) -> np.ndarray:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    m = detcal.evaluate(data, spec=spec, workdir=tmp).to_dict()
    acc = m["accuracy"]
    # pycocotools' -1 (no ground truth in the range) is null with its reason in metrics.json (issue 33): compared
    # as pycocotools' -1, and only where the reason is there
    return np.array(
        [-1.0 if acc[k]["value"] is None and acc[k]["skipped"]["value"] else acc[k]["value"] for k in NAMES]
    )


def test_bundled_official_set_equals_pycocotools(tmp_path: Path) -> None:
    det = "faster-rcnn-resnet-50"
    ours = _ours(DataSpec(source="bundled", bundle="coco_mini79", detector=det), tmp_path)
    ref = _pycoco(str(bundled.path("coco_mini79")), str(bundled.path("coco_mini79", det)))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


def test_synthetic_set_equals_pycocotools_in_every_area_range(tmp_path: Path) -> None:
    p = write_synthetic(tmp_path / "s", n_images=120, seed=2, render=False)
    ours = _ours(DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"])), tmp_path)
    ref = _pycoco(str(p["coco_instances"]), str(p["coco_results"]))
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)
    assert (ours[[3, 4, 9, 10]] >= 0).all() and (ours[[9, 10]] <= 1).all()


def test_localisation_block_is_written(tmp_path: Path) -> None:
    m = detcal.evaluate(
        DataSpec(source="bundled", bundle="coco_mini79"),
        spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)),
        workdir=tmp_path,
    ).to_dict()
    loc = m["localisation"]
    assert 0 <= loc["lrp"]["value"] <= 1 and loc["olrp"]["value"] <= loc["lrp"]["value"]
    assert 0 <= loc["laece"]["value"] <= 1 and loc["choices"]
    assert set(loc["lrp_optimal_thresholds"]) and all(
        v is None or 0 <= v <= 1 for v in loc["lrp_optimal_thresholds"].values()
    )


def test_readme_real_detector_command_works(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.evaluate",
            "data=coco_tfzoo",
            "data.detector=rfcn-resnet-101",
            "bootstrap.n=0",
            "output.plots=false",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "accuracy: AP " in proc.stdout and (tmp_path / "metrics.json").is_file()
    assert "### Accuracy" in (tmp_path / "summary.md").read_text()  # the full tables stay in summary.md
    assert "Traceback" not in proc.stderr


def test_netcal_example_matching_through_the_pipeline_reproduces_netcal_flags(tmp_path: Path) -> None:
    from detcal.pipeline.spec import MatchingSpec

    det = "ssd-resnet-50-v1"
    spec = EvaluationSpec(
        matching=MatchingSpec(mode="netcal_example", iou_thresholds=[0.6, 0.75], max_dets=None),
        bootstrap=BootstrapSpec(n=0),
    )
    res = detcal.evaluate(DataSpec(source="bundled", bundle="coco_tfzoo", detector=det), spec=spec)
    rec = bundled.netcal_records(det)
    for i, t in enumerate((0.6, 0.75)):
        assert np.array_equal(res.match.matched[i], rec.matched(t))


@pytest.mark.slow
def test_pdq_with_a_fixed_covariance_through_the_pipeline(tmp_path: Path) -> None:
    from detcal.pipeline.spec import LocalisationSpec

    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), localisation=LocalisationSpec(pdq=True, pdq_fixed_cov=25.0))
    res = detcal.evaluate(DataSpec(source="bundled", bundle="coco_mini79"), spec=spec)
    p = res.to_dict()["localisation"]["pdq"]
    gt = res.data.dataset.gt
    assert 0 < p["value"] < 1
    # the default variant is pdq_evaluation's: crowd regions are objects too, masks from the segmentations
    assert p["variant"] == "pdq_evaluation" and p["params"]["gt_mask"] == "segmentation"
    assert p["extra"]["TP"] + p["extra"]["FN"] == len(gt)
    assert p["extra"]["TP"] + p["extra"]["FP"] == len(res.data.detections)
