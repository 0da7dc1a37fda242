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


def _random_case(rng: np.random.Generator):
    from detcal.core.types import Detections, GroundTruth, Images

    ni, K = int(rng.integers(1, 6)), int(rng.integers(1, 4))
    images = Images(id=np.arange(1, ni + 1) * 3, width=np.full(ni, 200), height=np.full(ni, 200))
    ng = int(rng.integers(1, 25))
    xy, wh = rng.uniform(0, 150, (ng, 2)), rng.uniform(1, 120, (ng, 2))
    gt = GroundTruth(
        image_id=rng.choice(images.id, ng),
        box=np.c_[xy, xy + wh],
        category=rng.integers(1, K + 1, ng),
        iscrowd=(rng.random(ng) < 0.1).astype(int),
    )
    ds = Dataset(images=images, gt=gt, categories={k: str(k) for k in range(1, K + 1)})
    nd = int(rng.integers(1, 160))
    box = gt.box[rng.integers(0, ng, nd)] + rng.normal(0, 6, (nd, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 0.5)
    # one-decimal scores: many ties, broken by input order; some groups past 10 detections
    dets = Detections(
        image_id=rng.choice(images.id, nd),
        box=box,
        score=np.round(rng.random(nd), 1),
        category=rng.integers(1, K + 1, nd),
    )
    return ds, dets


@pytest.mark.parametrize("seed", range(12))
def test_accumulation_equals_pycocotools_arrays_on_random_sets(seed):
    """Tied scores, crowd GTs, groups cut at 1 and 10 detections, boxes of every area range: the
    precision and recall arrays equal pycocotools' element for element."""
    import contextlib
    import io

    from pycocotools.cocoeval import COCOeval

    from detcal.data.coco import results_to_pycocotools, to_pycocotools
    from detcal.metrics.accuracy import coco_eval_arrays

    ds, dets = _random_case(np.random.default_rng(seed))
    mine = coco_eval_arrays(dets, ds)
    g = to_pycocotools(ds)
    with contextlib.redirect_stdout(io.StringIO()):
        e = COCOeval(g, results_to_pycocotools(g, dets), "bbox")
        e.evaluate()
        e.accumulate()
    np.testing.assert_array_equal(mine["precision"], e.eval["precision"])
    np.testing.assert_array_equal(mine["recall"], e.eval["recall"])


def test_memory_thresholds_are_set_unless_opted_out(monkeypatch):
    """Every command sets glibc's mmap and trim thresholds; DETCAL_MALLOC_DEFAULTS=1 leaves them."""
    import ctypes
    import sys

    import detcal.apps._hydra as app

    calls: list[tuple[int, int]] = []

    class Libc:
        def mallopt(self, param: int, value: int) -> int:
            calls.append((param, value))
            return 1

    monkeypatch.setattr(ctypes, "CDLL", lambda name: Libc())
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("DETCAL_MALLOC_DEFAULTS", "1")
    app._reuse_freed_memory()
    assert calls == []
    monkeypatch.delenv("DETCAL_MALLOC_DEFAULTS")
    app._reuse_freed_memory()
    assert calls == [(-1, 2**31), (-3, 2**30)]  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD


def test_float_key_orders_as_the_floats_and_descending_is_its_complement():
    """The in-place bit trick orders like the floats (-0.0 as 0.0, subnormals, infinities), and the
    descending key is the bitwise complement of the ascending one."""
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            rng.normal(size=2000) * 10.0 ** rng.integers(-300, 300, 2000),
            [0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 1.0, 1.0, -2.5, -2.5],
        ]
    )
    key = blocks.float_key(x)
    assert key.dtype == np.uint64
    np.testing.assert_array_equal(np.argsort(key, kind="stable"), np.argsort(x + 0.0, kind="stable"))
    np.testing.assert_array_equal(blocks.float_key(x, descending=True), ~key)
    assert key[x == 0.0].min() == key[x == 0.0].max()  # -0.0 and 0.0 share a key
    x0 = x.copy()
    blocks.float_key(x)
    np.testing.assert_array_equal(x, x0)  # the input is left alone
