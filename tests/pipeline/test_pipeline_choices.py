"""Choices instead of failures, and nothing silent: unknown categories, images
without sizes, thresholds with no match, and an account of every input detection."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.errors import DetcalInputError
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec

QUIET = dict(bootstrap=BootstrapSpec(n=0))


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_synthetic(tmp_path_factory.mktemp("set"), n_images=60, seed=3, render=False)


def _results(coco: dict[str, Path]) -> list[dict]:
    return json.loads(Path(coco["coco_results"]).read_text())


def test_unknown_categories_are_dropped_and_counted_or_an_error(coco: dict[str, Path], tmp_path: Path) -> None:
    res = _results(coco)
    for r in res[:7]:
        r["category_id"] = 999
    f = tmp_path / "res.json"
    f.write_text(json.dumps(res))
    out = detcal.evaluate(str(coco["coco_instances"]), str(f), EvaluationSpec(**QUIET))
    acc = out.record["detections"]
    assert acc["input"] == len(res) and acc["left_out_at_loading"] == {"unknown_category": 7}
    assert acc["considered"] == len(res) - 7
    assert "7 with a category not in the ground truth" in out.to_markdown()
    with pytest.raises(DetcalInputError, match="category_id") as info:
        detcal.evaluate(
            DataSpec(source="coco", gt=str(coco["coco_instances"]), results=str(f), unknown_category="error"),
            spec=EvaluationSpec(**QUIET),
        )
    assert str(f) in str(info.value)


def test_images_without_sizes_skip_only_the_position_metrics(coco: dict[str, Path], tmp_path: Path) -> None:
    gt = json.loads(Path(coco["coco_instances"]).read_text())
    for im in gt["images"][:5]:
        del im["width"], im["height"]
    f = tmp_path / "gt.json"
    f.write_text(json.dumps(gt))
    out = detcal.evaluate(str(f), str(coco["coco_results"]), EvaluationSpec(**QUIET))
    m = out.to_dict()
    assert any(str(f) in w and "'width'" in w for w in m["warnings"])
    blk = m["confidence"]["iou=0.50"]
    assert blk["dece"]["value"] is None and "width/height" in blk["dece"]["skipped"]["value"]
    assert blk["ece"]["value"] is not None and blk["nll"]["value"] is not None  # need no sizes
    full = detcal.evaluate(str(coco["coco_instances"]), str(coco["coco_results"]), EvaluationSpec(**QUIET)).to_dict()
    assert blk["ece"]["value"] == pytest.approx(full["confidence"]["iou=0.50"]["ece"]["value"], abs=1e-15)
    assert m["headline"]["dece"]["value"] is None
    assert "width" in out.to_markdown()
    # the calibration split by error type has no D-ECE either (the placeholder positions of the unsized
    # images' boxes are never binned)
    split = m["diagnostics"]["calibration_by_error_type"]
    assert split["dece"] is None and split["dece_from_contributions"] is None
    assert all(t.get("dece_contribution") is None for t in split["types"].values())


def test_a_threshold_without_matches_says_which_metrics_and_why(coco: dict[str, Path]) -> None:
    out = detcal.evaluate(
        str(coco["coco_instances"]),
        str(coco["coco_results"]),
        EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.999]), **QUIET),
    )
    m = out.to_dict()
    assert "iou=0.999" in m["confidence"]
    why = m["confidence"]["iou=0.999"]["skipped"]
    assert "no detection matched" in why and "confidence metrics cannot be computed" in why
    assert any("iou=0.999" in w for w in m["warnings"]) and "iou=0.999" in out.to_markdown()


def test_every_input_detection_is_accounted_for(coco: dict[str, Path]) -> None:
    res = _results(coco)
    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5], score_threshold=0.3, max_dets=2), **QUIET)
    out = detcal.evaluate(str(coco["coco_instances"]), str(coco["coco_results"]), spec)
    acc = out.record["detections"]
    score = np.array([r["score"] for r in res])
    assert acc["input"] == len(res)
    assert acc["below_score_threshold"] == int((score < 0.3).sum())
    assert acc["beyond_max_dets"] > 0
    assert acc["considered"] == acc["input"] - acc["below_score_threshold"] - acc["beyond_max_dets"]
    pt = acc["per_threshold"]["iou=0.50"]
    assert pt["evaluated"] + pt["ignored_region"] == acc["considered"]
    assert pt["true_positives"] + pt["false_positives"] == pt["evaluated"]
    assert out.to_dict()["confidence"]["iou=0.50"]["_sample"]["n"] == pt["evaluated"]
    text = out.to_markdown()
    assert f"{acc['below_score_threshold']} below the score threshold" in text
    assert f"{acc['beyond_max_dets']} beyond max_dets" in text
