"""COCO AP/AR from detcal's matching equals pycocotools COCOeval.summarize()."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data import bundled
from detcal.data.coco import results_to_pycocotools, to_pycocotools
from detcal.metrics.accuracy import SUMMARY, coco_ap


def _pycoco_stats(coco_gt, coco_dt) -> np.ndarray:
    with contextlib.redirect_stdout(io.StringIO()):
        e = COCOeval(coco_gt, coco_dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return np.asarray(e.stats)


def _mine(dets, ds, area=None) -> np.ndarray:
    r = coco_ap(dets, ds, gt_area=area)
    return np.array([r[name].value for name, *_ in SUMMARY])


@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_mini79_equals_pycocotools(detector):
    """Official annotations: crowd boxes and mask areas (the COCO files, read by pycocotools itself)."""
    ds, dets = bundled.load("coco_mini79", detector)
    with contextlib.redirect_stdout(io.StringIO()):
        g = COCO(str(bundled.path("coco_mini79")))
        dt = g.loadRes(str(bundled.path("coco_mini79", detector)))
    ref = _pycoco_stats(g, dt)
    np.testing.assert_allclose(_mine(dets, ds, bundled.gt_area("coco_mini79")), ref, rtol=0, atol=1e-12)
    # box areas instead of the official mask areas change the size breakdown
    assert not np.allclose(_mine(dets, ds), ref)


def test_tfzoo_subset_equals_pycocotools():
    ds, dets = bundled.load("coco_tfzoo", "ssd-resnet-50-v1")
    keep_img = ds.images.id[::25]  # 200 images
    sub = Dataset(
        images=ds.images.select(np.isin(ds.images.id, keep_img)),
        gt=ds.gt.select(np.isin(ds.gt.image_id, keep_img)),
        categories=ds.categories,
    )
    d = dets.select(np.isin(dets.image_id, keep_img))
    g = to_pycocotools(sub)
    np.testing.assert_allclose(_mine(d, sub), _pycoco_stats(g, results_to_pycocotools(g, d)), rtol=0, atol=1e-12)


def test_arrays_equal_pycocotools_element_for_element():
    """precision [T,R,K,A,M] and recall [T,K,A,M] equal pycocotools' eval arrays exactly (the
    accumulation visits the true positives only), and area ranges in 2 processes give the same."""
    import detcal.metrics.accuracy as A

    ds, dets = bundled.load("coco_tfzoo", "faster-rcnn-resnet-50")
    keep_img = ds.images.id[::10]
    sub = Dataset(
        images=ds.images.select(np.isin(ds.images.id, keep_img)),
        gt=ds.gt.select(np.isin(ds.gt.image_id, keep_img)),
        categories=ds.categories,
    )
    d = dets.select(np.isin(dets.image_id, keep_img))
    base = A.coco_eval_arrays(d, sub)
    assert (base["precision"] > 0).any()
    g = to_pycocotools(sub)
    with contextlib.redirect_stdout(io.StringIO()):
        e = COCOeval(g, results_to_pycocotools(g, d), "bbox")
        e.evaluate()
        e.accumulate()
    np.testing.assert_array_equal(base["precision"], e.eval["precision"])
    np.testing.assert_array_equal(base["recall"], e.eval["recall"])
    two = A.coco_eval_arrays(d, sub, workers=2)
    for key in ("precision", "recall"):
        np.testing.assert_array_equal(two[key], base[key])


@pytest.mark.slow
@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_tfzoo_equals_pycocotools(detector):
    """All 5,000 images (pycocotools takes ~30-50 s per detector)."""
    ds, dets = bundled.load("coco_tfzoo", detector)
    g = to_pycocotools(ds)
    np.testing.assert_allclose(_mine(dets, ds), _pycoco_stats(g, results_to_pycocotools(g, dets)), rtol=0, atol=1e-12)


def _tiny():
    images = Images(id=[1, 2], width=[100, 100], height=[100, 100])
    gt = GroundTruth(image_id=[1, 1, 2], box=[[0, 0, 10, 10], [50, 50, 90, 90], [0, 0, 50, 50]], category=[1, 1, 1])
    return Dataset(images=images, gt=gt, categories={1: "a", 2: "b"})


def test_hand_computed_ap():
    """3 GT; detections TP (0.9), FP (0.8), TP (0.7): precision 1, 1/2, 2/3 at recall 1/3, 1/3, 2/3."""
    ds = _tiny()
    dets = Detections(
        image_id=[1, 1, 2],
        box=[[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 50, 50]],
        score=[0.9, 0.8, 0.7],
        category=[1, 1, 1],
    )
    r = coco_ap(dets, ds)
    # interpolated precision: 1 up to recall 1/3 (34 points 0..0.33), 2/3 up to 2/3 (33 points 0.34..0.66), 0 after
    expected = (34 * 1.0 + 33 * (2 / 3)) / 101
    assert r["AP"].value == pytest.approx(expected, abs=1e-15)
    assert r["AP50"].value == pytest.approx(expected, abs=1e-15)
    assert r["AR100"].value == pytest.approx(2 / 3, abs=1e-15)
    assert r["AR1"].value == pytest.approx(2 / 3, abs=1e-15)  # one per image (and category) suffices here
    assert r["AP_medium"].value == -1.0 or r["AP_medium"].value >= 0
    # category 2 has no GT: not averaged; per-class table NaN there
    np.testing.assert_array_equal(r["AP"].table["category"], [1, 2])
    assert np.isnan(r["AP"].table["ap"][1])


def test_errors():
    ds = _tiny()
    bad = Detections(image_id=[7], box=[[0, 0, 1, 1]], score=[0.5], category=[1])
    with pytest.raises(DetcalInputError, match="image_id"):
        coco_ap(bad, ds)
    with pytest.raises(DetcalInputError, match="gt_area"):
        coco_ap(bad.select(np.zeros(1, bool)), ds, gt_area=[1.0])
