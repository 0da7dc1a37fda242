"""Bundled real-detector data: loader and netcal's example matching."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth
from detcal.data import bundled
from detcal.matching import match
from detcal.matching.netcal_example import match_netcal_example

COUNTS = {
    "faster-rcnn-resnet-50": 40062,
    "rfcn-resnet-101": 34025,
    "ssd-inception-v2": 23432,
    "ssd-resnet-50-v1": 44810,
}


def test_tfzoo_counts_and_boxes():
    ds = bundled.load_dataset("coco_tfzoo")
    assert len(ds.images) == 5000 and len(ds.gt) == 36781  # the official val2017 box count
    assert len(ds.categories) == 80 and ds.categories[1] == "person"
    assert not ds.gt.iscrowd.any()
    for det, n in COUNTS.items():
        d = bundled.load_detections("coco_tfzoo", det)
        assert len(d) == n
        assert d.score.min() >= 0.3 - 1e-7 and d.score.max() <= 1
        # pixel boxes inside their image
        row = ds.images.index_of(d.image_id)
        assert (row >= 0).all()
        assert (d.box[:, 2] <= ds.images.width[row] + 1e-6).all() and (
            d.box[:, 3] <= ds.images.height[row] + 1e-6
        ).all()
        assert (d.box[:, :2] >= 0).all()


def test_pixel_boxes_are_relative_times_size():
    ds = bundled.load_dataset("coco_tfzoo")
    r = bundled.netcal_records("ssd-inception-v2")
    d = bundled.load_detections("coco_tfzoo", "ssd-inception-v2")
    w, h = ds.images.width[r.image], ds.images.height[r.image]
    np.testing.assert_array_equal(d.box[:, 0], r.box_rel[:, 1] * w)
    np.testing.assert_array_equal(d.box[:, 3], r.box_rel[:, 2] * h)
    # first detection of the first image: the COCO results file had bbox [x, y, w, h] rounded to 0.001 px
    assert ds.images.id[0] == 397133
    np.testing.assert_allclose(
        bundled.load_detections("coco_tfzoo", "rfcn-resnet-101").box[0],
        [380.56, 70.412, 380.56 + 117.7, 70.412 + 278.667],
        atol=1e-3,
    )


def test_mini79_official_annotations():
    ds, d = bundled.load("coco_mini79", "ssd-inception-v2")
    assert len(ds.images) == 79 and len(ds.gt) == 624 and int(ds.gt.iscrowd.sum()) == 5
    assert len(d) == 375
    area = bundled.gt_area("coco_mini79")
    box_area = (ds.gt.box[:, 2] - ds.gt.box[:, 0]) * (ds.gt.box[:, 3] - ds.gt.box[:, 1])
    assert area.shape == (624,) and (area <= box_area + 1e-6).mean() > 0.95  # mask areas, not box areas
    assert not np.allclose(area, box_area)
    assert bundled.path("coco_mini79").read_bytes().startswith(b"{")


def test_unknown_names_raise():
    with pytest.raises(DetcalInputError, match="detector"):
        bundled.load("coco_tfzoo", "yolo")
    with pytest.raises(DetcalInputError, match="set"):
        bundled.load_dataset("kitti")
    with pytest.raises(DetcalInputError, match="0.60 and 0.75"):
        bundled.netcal_records("rfcn-resnet-101").matched(0.5)


def _relative(r):
    xy = lambda b: b[:, [1, 0, 3, 2]]  # [ymin, xmin, ymax, xmax] -> xyxy
    d = Detections(image_id=r.image, box=xy(r.box_rel), score=r.score, category=r.category)
    g = GroundTruth(image_id=r.gt_image, box=xy(r.gt_box_rel), category=r.gt_category)
    return d, g


@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_netcal_example_matching_reproduces_netcal_flags(detector):
    r = bundled.netcal_records(detector)
    d, g = _relative(r)
    m = match_netcal_example(d, g, [0.60, 0.75])
    np.testing.assert_array_equal(m.matched[0], r.matched_060)
    np.testing.assert_array_equal(m.matched[1], r.matched_075)
    # the pixel boxes of the loader give the same flags (IoU is invariant under separate x/y scaling)
    ds, dp = bundled.load("coco_tfzoo", detector)
    mp = match_netcal_example(dp, ds.gt, [0.60, 0.75])
    np.testing.assert_array_equal(mp.matched, m.matched)


def test_netcal_example_differs_from_class_wise_max():
    """A detection whose best overlap is a box of another class: unmatched here, matched by mode='max'."""
    gt = GroundTruth(image_id=[1, 1], box=[[0, 0, 10, 10], [0, 0, 10, 9]], category=[2, 1])
    det = Detections(image_id=[1, 1], box=[[0, 0, 10, 10], [0, 0, 10, 9]], score=[0.9, 0.8], category=[1, 1])
    mn = match_netcal_example(det, gt, [0.5])
    mm = match(det, gt, [0.5], mode="max")
    # det 0: best overall is the class-2 box (IoU 1) -> not matched; best class-1 box has IoU 0.9 -> 'max' matches
    assert mn.matched[0].tolist() == [False, True]
    assert mm.matched[0].tolist() == [True, True]
    assert mn.gt_index[0].tolist() == [-1, 1]  # not one-to-one: row 1 could be shared
    np.testing.assert_allclose(mn.iou, [1.0, 1.0])


def test_netcal_example_hand_case_and_errors():
    gt = GroundTruth(image_id=[1, 2], box=[[0, 0, 4, 4], [0, 0, 2, 2]], category=[1, 1])
    det = Detections(
        image_id=[1, 1, 2, 3],
        box=[[0, 0, 4, 2], [2, 0, 6, 4], [0, 0, 2, 2], [0, 0, 1, 1]],
        score=[0.9, 0.8, 0.7, 0.6],
        category=[1, 1, 1, 1],
    )
    m = match_netcal_example(det, gt, [0.5, 0.34])
    np.testing.assert_allclose(m.iou, [0.5, 8 / 24, 1.0, 0.0])
    assert m.matched.tolist() == [[True, False, True, False], [True, False, True, False]]
    assert not m.ignored.any() and m.mode == "netcal_example"
    with pytest.raises(DetcalInputError, match="box"):
        match_netcal_example(Detections(image_id=[1], box=[[3, 0, 1, 1]], score=[1.0], category=[1]), gt)
    with pytest.raises(DetcalInputError, match="thresholds"):
        match_netcal_example(det, gt, [1.5])


def test_path_into_a_directory_stays(tmp_path: Path) -> None:
    """bundled.path(..., directory=...) writes a file that outlives the process's temporary folder."""
    import json

    p = bundled.path("coco_mini79", "rfcn-resnet-101", directory=tmp_path / "kept")
    assert p.parent == tmp_path / "kept" and p.is_file()
    assert json.loads(p.read_text()) == json.loads(bundled.path("coco_mini79", "rfcn-resnet-101").read_text())
    g = bundled.path("coco_tfzoo", directory=tmp_path / "kept")
    assert g.parent == tmp_path / "kept" and len(json.loads(g.read_text())["images"]) == 5000
