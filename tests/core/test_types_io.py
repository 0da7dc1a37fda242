"""Typed records and atomic output."""

import json
import os

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, Images, MatchResult, MetricResult
from detcal.utils.io import atomic_write, write_json


def test_detections_shapes_and_select():
    d = Detections(
        image_id=[1, 2, 3],
        box=np.arange(12).reshape(3, 4),
        score=[0.1, 0.2, 0.3],
        category=[1, 1, 2],
        delta_std=np.ones((3, 4)),
        delta_mean=np.zeros((3, 4)),
        proposal=np.ones((3, 4)),
    )
    assert len(d) == 3 and d.uncertainty_kind == "delta"
    s = d.select(np.array([True, False, True]))
    assert len(s) == 2 and s.delta_std.shape == (2, 4)
    np.testing.assert_array_equal(s.image_id, [1, 3])


def test_empty_records_have_right_shapes():
    d = Detections(image_id=[], box=[], score=[], category=[])
    assert d.box.shape == (0, 4) and len(d) == 0 and d.uncertainty_kind is None
    g = GroundTruth(image_id=[], box=[], category=[])
    assert g.box.shape == (0, 4) and g.iscrowd.shape == (0,)


def test_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="score"):
        Detections(image_id=[1, 2], box=np.zeros((2, 4)), score=[0.5], category=[1, 1])


def test_images_index_of():
    im = Images(id=[10, 3, 7], width=[1, 2, 3], height=[1, 2, 3])
    np.testing.assert_array_equal(im.index_of(np.array([7, 10, 4, 3])), [2, 0, -1, 1])


def test_match_result_sample():
    m = MatchResult(
        iou_thresholds=np.array([0.5, 0.75]),
        matched=np.array([[1, 0, 1], [0, 0, 1]], bool),
        ignored=np.array([[0, 1, 0], [0, 0, 0]], bool),
        gt_index=np.full((2, 3), -1),
        iou=np.zeros(3),
        considered=np.array([True, True, False]),
    )
    rows, y = m.sample(0.5)
    np.testing.assert_array_equal(rows, [0])  # row 1 ignored, row 2 not considered
    np.testing.assert_array_equal(y, [True])
    with pytest.raises(KeyError):
        m.threshold_index(0.6)


def test_metric_result_to_dict_is_json():
    r = MetricResult("ece", np.float64(0.1), "equal_width", {"bins": np.int64(15)}, {"count": np.arange(3)})
    d = r.to_dict()
    assert json.loads(json.dumps(d))["table"]["count"] == [0, 1, 2]


def test_error_names_file_record_field():
    e = DetcalInputError("must be > 0", file="a.json", record=3, field="bbox_std")
    assert "a.json" in str(e) and "record 3" in str(e) and "bbox_std" in str(e)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "out.json"
    write_json(p, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic_write(p) as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    assert json.loads(p.read_text()) == {"a": 1}
    assert [f for f in os.listdir(tmp_path)] == ["out.json"]  # no temp file left
