"""The speed paths of issue 29 give the same results as the plain ones (the bucketed radix sort of
the matcher, the COCO accumulation that visits the true positives only)."""

from __future__ import annotations

import numpy as np
import pytest

import detcal.matching.blocks as blocks
from detcal.core.types import Dataset
from detcal.data import bundled
from detcal.matching.engine import match


@pytest.mark.parametrize("cache_rows", [1, 7, 64])
def test_bucketed_radix_sort_equals_lexsort(monkeypatch, cache_rows):
    """Keys with many ties and a wide most significant key: the bucketed order is np.lexsort's."""
    monkeypatch.setattr(blocks, "_CACHE_ROWS", cache_rows)
    rng = np.random.default_rng(0)
    n = 5000
    keys = [rng.integers(0, 3, n), rng.integers(0, 2**40, n) // 2**30, rng.integers(0, 70_000, n)]
    np.testing.assert_array_equal(blocks.stable_argsort(keys), np.lexsort(keys))
    # a constant most significant key: one bucket
    keys[-1] = np.full(n, 5)
    np.testing.assert_array_equal(blocks.stable_argsort(keys), np.lexsort(keys))


def test_matching_with_small_buckets_is_unchanged(monkeypatch):
    ds, dets = bundled.load("coco_tfzoo", "faster-rcnn-resnet-50")
    keep = ds.images.id[::20]
    sub = Dataset(
        images=ds.images.select(np.isin(ds.images.id, keep)),
        gt=ds.gt.select(np.isin(ds.gt.image_id, keep)),
        categories=ds.categories,
    )
    d = dets.select(np.isin(dets.image_id, keep))
    base = match(d, sub.gt, [0.5, 0.75])
    monkeypatch.setattr(blocks, "_CACHE_ROWS", 256)
    small = match(d, sub.gt, [0.5, 0.75])
    assert len(d) > 2 * 256
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        np.testing.assert_array_equal(getattr(small, name), getattr(base, name))
