"""KITTI AP (11- and 40-point) equal to the devkit's eval_class (line-by-line reading in tests/support/devkit_reference.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from support import devkit_reference as ref
from support.kitti_like import make_frames, write_frames

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth
from detcal.data.kitti import load_kitti_labels, load_kitti_results
from detcal.matching.kitti_ap import kitti_ap, score_thresholds

_NAMES = {1: "car", 4: "pedestrian", 6: "cyclist"}


def _reference(frames, cls: str, difficulty: str) -> dict:
    gts = [ref.parse_labels(lab) for lab, _ in frames]
    dts = [ref.parse_results(res) for _, res in frames]
    return ref.eval_class(cls, gts, dts, difficulty)


def _same(a, b) -> bool:
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def _check(frames, tmp_path: Path, difficulties=("easy", "moderate", "hard")) -> list:
    lab, res = write_frames(frames, tmp_path)
    ds = load_kitti_labels(lab, difficulty="moderate")  # the load difficulty does not matter to kitti_ap
    dets = load_kitti_results(res, ds)
    out = kitti_ap(dets, ds.gt, difficulties=difficulties)
    for r in out:
        want = _reference(frames, _NAMES[r.category], r.difficulty)
        assert r.n_gt == want["n_gt"]
        assert r.score_thresholds.tolist() == want["thresholds"]
        assert r.tp.tolist() == want["tp"] and r.fp.tolist() == want["fp"] and r.fn.tolist() == want["fn"]
        assert _same(r.precision, want["precision"]), (r.category, r.difficulty)
        p = want["precision"]
        assert r.ap11 == pytest.approx(sum(p[0::4]) / 11, rel=0, abs=1e-15) or (
            math.isnan(r.ap11) and math.isnan(sum(p[0::4]))
        )
        assert r.ap40 == pytest.approx(sum(p[1:41]) / 40, rel=0, abs=1e-15) or (
            math.isnan(r.ap40) and math.isnan(sum(p[1:41]))
        )
    return out


def test_ap_equals_devkit_eval_class_on_kitti_like_frames(tmp_path: Path) -> None:
    out = _check(make_frames(50, seed=3), tmp_path)
    assert len(out) == 9
    assert any(0.05 < r.ap40 < 0.95 for r in out) and all(len(r.score_thresholds) > 3 for r in out if r.category == 4)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, 9])
def test_ap_equals_devkit_eval_class_many_frames(tmp_path: Path, seed: int) -> None:
    _check(make_frames(250, seed=seed), tmp_path)


def test_ap_by_hand() -> None:
    # One image, three valid Pedestrian boxes (h 100, easy), three detections:
    # A 0.9 on box 0 (IoU 1), B 0.8 on nothing, C 0.7 on box 1 (IoU 1); box 2 missed.
    # Recall pass TPs: scores 0.9, 0.7, n_gt 3 -> getThresholds keeps both (recall 1/3, 2/3).
    # PR at 0.9: tp 1 fp 0 -> 1.0; at 0.7: tp 2 fp 1 -> 2/3. precision[41] = [1, 2/3, 0, ...].
    # AP11 = (1 + 0 ...) / 11 = 1/11 (only index 0 of 0, 4, ...); AP40 = (2/3) / 40.
    box = [[0, 0, 40, 100], [100, 0, 140, 100], [200, 0, 240, 100]]
    g = GroundTruth(image_id=[1, 1, 1], box=box, category=[4, 4, 4], difficulty=[0, 0, 0])
    d = Detections(
        image_id=[1, 1, 1], box=[box[0], [500, 0, 540, 100], box[1]], score=[0.9, 0.8, 0.7], category=[4, 4, 4]
    )
    (r,) = kitti_ap(d, g, categories=[4], difficulties=["easy"])
    assert r.score_thresholds.tolist() == [0.9, 0.7]
    assert r.tp.tolist() == [1, 2] and r.fp.tolist() == [0, 1] and r.fn.tolist() == [2, 1]
    assert r.precision[:3].tolist() == [1.0, 2 / 3, 0.0]
    assert r.ap11 == 1 / 11 and r.ap40 == pytest.approx((2 / 3) / 40, abs=1e-17)


def test_score_thresholds_follow_get_thresholds() -> None:
    # n_gt 80, 80 TP scores: recall steps of 1/80, one threshold about every second score (41 in all)
    v = np.linspace(1, 0.01, 80)
    t = score_thresholds(v, 80)
    assert t.tolist() == ref.get_thresholds(v.tolist(), 80)
    assert len(t) == 41
    assert score_thresholds(np.zeros(0), 5).size == 0


def test_kitti_ap_input_errors() -> None:
    d = Detections(image_id=[1], box=[[0, 0, 10, 40]], score=[0.5], category=[4])
    g = GroundTruth(image_id=[1], box=[[0, 0, 10, 40]], category=[4])
    with pytest.raises(DetcalInputError, match="difficulty"):
        kitti_ap(d, g, difficulties=["medium"])
    with pytest.raises(DetcalInputError, match="iou_threshold"):
        kitti_ap(d, g, iou_threshold=1.5)
