"""Box conversions, deltas and IoU: hand-computed golden values and pycocotools parity."""

import numpy as np
from pycocotools import mask as mask_api

from detcal.core import boxes


def test_xywh_xyxy_roundtrip_and_values():
    xywh = np.array([[10.0, 20.0, 30.0, 40.0]])
    xyxy = boxes.xywh_to_xyxy(xywh)
    np.testing.assert_array_equal(xyxy, [[10, 20, 40, 60]])  # 10+30, 20+40
    np.testing.assert_array_equal(boxes.xyxy_to_xywh(xyxy), xywh)
    c = boxes.xyxy_to_cxcywh(xyxy)
    np.testing.assert_array_equal(c, [[25, 40, 30, 40]])  # centre (10+15, 20+20)
    np.testing.assert_array_equal(boxes.cxcywh_to_xyxy(c), xyxy)


def test_deltas_by_hand():
    p = np.array([[0.0, 0.0, 10.0, 20.0]])  # centre (5, 10), size (10, 20)
    g = np.array([[2.0, 4.0, 22.0, 24.0]])  # centre (12, 14), size (20, 20)
    d = boxes.encode_deltas(p, g)
    # tx = (12-5)/10, ty = (14-10)/20, tw = log(20/10), th = log(20/20)
    np.testing.assert_allclose(d, [[0.7, 0.2, np.log(2.0), 0.0]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(boxes.decode_deltas(p, d), g, atol=1e-12)


def test_pairwise_iou_matches_pycocotools_bbiou_with_crowd():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 50, size=(30, 2))
    wh = rng.uniform(1, 40, size=(30, 2))
    a = np.concatenate([xy, wh], 1)
    xy = rng.uniform(0, 50, size=(20, 2))
    wh = rng.uniform(1, 40, size=(20, 2))
    b = np.concatenate([xy, wh], 1)
    crowd = rng.random(20) < 0.3
    ref = mask_api.iou(a.tolist(), b.tolist(), crowd.astype(np.uint8).tolist())
    got = boxes.pairwise_iou(boxes.xywh_to_xyxy(a), boxes.xywh_to_xyxy(b), crowd)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


def test_pairwise_iou_empty_shapes():
    assert boxes.pairwise_iou(np.zeros((0, 4)), np.zeros((3, 4))).shape == (0, 3)
    assert boxes.pairwise_iou(np.zeros((2, 4)), np.zeros((0, 4))).shape == (2, 0)


def test_relative_features_clip_and_count():
    b = np.array([[0.0, 0.0, 50.0, 50.0], [90.0, 40.0, 130.0, 60.0]])
    f, n = boxes.relative_features(b, np.array([100.0, 100.0]), np.array([100.0, 100.0]))
    # first: centre (25, 25), size (50, 50) -> 0.25 0.25 0.5 0.5; second: cx = 110 -> clipped to 1
    np.testing.assert_allclose(f, [[0.25, 0.25, 0.5, 0.5], [1.0, 0.5, 0.4, 0.2]])
    assert n == 1
