"""relative_box_features, computed a column at a time in row blocks, equals the plain whole-array formula."""

from __future__ import annotations

import numpy as np
import pytest

import detcal.pipeline.evaluation as evaluation
from detcal.core.boxes import relative_features, xyxy_to_cxcywh
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.pipeline.evaluation import as_loaded, relative_box_features


@pytest.mark.parametrize("block", [7, 1 << 16])
def test_relative_box_features_equal_the_formula(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    rng = np.random.default_rng(1)
    n_img, nd = 9, 100
    images = Images(id=np.arange(10, 10 + n_img), width=rng.uniform(50, 90, n_img), height=rng.uniform(40, 70, n_img))
    xy = rng.uniform(-20, 80, (nd, 2))  # some boxes reach past the image: clipped
    box = np.column_stack([xy, xy + rng.uniform(1, 40, (nd, 2))])
    img = rng.integers(0, n_img, nd)
    dets = Detections(image_id=images.id[img], category=np.ones(nd, np.int64), score=rng.random(nd), box=box)
    gt = GroundTruth(image_id=images.id[:1], category=np.ones(1, np.int64), box=np.array([[0.0, 0, 5, 5]]))
    data = as_loaded(Dataset(images=images, gt=gt, categories={1: "a"}), dets)
    monkeypatch.setattr(evaluation, "_FEATURE_BLOCK", block)
    feats, n_clipped, clipped = relative_box_features(data, needed=True)
    w, h = images.width[img], images.height[img]
    ref, n_ref = relative_features(box, w, h)
    rel = xyxy_to_cxcywh(box) / np.stack([w, h, w, h], axis=-1)
    assert np.array_equal(feats, ref) and n_clipped == n_ref > 0
    assert np.array_equal(clipped, np.any((rel < 0) | (rel > 1), axis=-1))
