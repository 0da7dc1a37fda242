"""The tenth speed pass of issue 29 (diagnostics and OCE) against the paths it adds a shortcut to, to the bit: a
scene whose detections are all kept in row order (its columns used as they are, its blocks of consecutive rows
read in place), TIDE's fixes with every detection kept, and the window searches in ascending order."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth, Images
from detcal.metrics._pairs import sorted_search
from detcal.metrics.confusion import agnostic_match
from detcal.metrics.tide import scene, tide

tide_mod = importlib.import_module("detcal.metrics.tide")  # the module (the package exports a function `tide`)


def _set(seed: int, n_det: int = 240) -> tuple[Images, GroundTruth, Detections]:
    """Detections written image after image (so every one is kept at ``max_dets=100``), near boxes and elsewhere;
    some crowd boxes and an image without boxes; scores with ties."""
    rng = np.random.default_rng(seed)
    n_img, n_gt = 9, 40
    images = Images(id=np.arange(n_img), width=np.full(n_img, 200.0), height=np.full(n_img, 200.0))
    g_img = rng.integers(0, n_img - 1, n_gt)  # the last image has no box
    xy = rng.uniform(0, 100, (n_gt, 2))
    gbox = np.column_stack([xy, xy + rng.uniform(2, 60, (n_gt, 2))])
    gt = GroundTruth(image_id=g_img, box=gbox, category=rng.integers(1, 4, n_gt), iscrowd=rng.random(n_gt) < 0.15)
    pick = rng.integers(0, n_gt, n_det)
    box = gbox[pick] + rng.normal(0, 6, (n_det, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    d_img = np.where(rng.random(n_det) < 0.8, g_img[pick], rng.integers(0, n_img, n_det))
    o = np.argsort(d_img, kind="stable")
    score = np.round(rng.random(n_det), 1)
    dets = Detections(image_id=d_img[o], box=box[o], score=score[o], category=rng.integers(1, 4, n_det))
    return images, gt, dets


def _with_unknown_image(dets: Detections) -> Detections:
    """``dets`` and one more detection, first, in an image the set does not have (never kept: the scene's
    columns are then scattered, and TIDE's orders filtered)."""
    return Detections(
        image_id=np.concatenate([[999], dets.image_id]),
        box=np.vstack([dets.box[:1], dets.box]),
        score=np.concatenate([[0.5], dets.score]),
        category=np.concatenate([[1], dets.category]),
    )


@pytest.mark.parametrize("seed", range(4))
def test_scene_pairs_of_consecutive_rows_equal_the_gathered_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    images, gt, dets = _set(seed)
    fast = scene(images, gt, dets, 100)
    assert fast.all_kept and np.array_equal(fast.kd, np.arange(len(dets)))
    block = tide_mod._pair_block
    monkeypatch.setattr(tide_mod, "_pair_block", lambda *a: block(*a[:12], False))  # every block gathered
    monkeypatch.setattr(tide_mod, "_CHUNK", 16)  # many blocks
    slow = scene(images, gt, dets, 100)
    monkeypatch.undo()
    for a, b in ((fast.pr, slow.pr), (fast.cr, slow.cr)):
        assert len(a.pd) > 0
        for name in ("pd", "pg", "start", "count", "iou", "same"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), name


@pytest.mark.parametrize("seed", range(4))
def test_tide_and_agnostic_match_with_every_detection_kept_equal_the_scattered_columns(seed: int) -> None:
    images, gt, dets = _set(seed)
    more = _with_unknown_image(dets)  # the same detections after one never kept
    a, b = scene(images, gt, dets, 100), scene(images, gt, more, 100)
    assert a.all_kept and not b.all_kept
    ta = tide(images, gt, dets, paired=a)
    tb = tide(images, gt, more, paired=b)
    assert (ta.ap, ta.main, ta.special, ta.counts) == (tb.ap, tb.main, tb.special, tb.counts)
    assert ta.code.dtype == tb.code.dtype and tb.code[0] == -1
    for name in ("code", "ignored", "target", "matched_gt"):
        x, y = getattr(ta, name), getattr(tb, name)
        assert x.dtype == y.dtype and np.array_equal(x, y[1:]), name
    ma, mb = agnostic_match(dets, gt, 0.5, 100, paired=a), agnostic_match(more, gt, 0.5, 100, paired=b)
    assert not mb.considered[0] and mb.gt_row[0] == -1 and mb.any_iou[0] == 0.0
    for name in ("gt_row", "ignored", "considered", "pair_iou", "any_iou"):
        x, y = getattr(ma, name), getattr(mb, name)
        assert x.dtype == y.dtype and np.array_equal(x, y[1:]), name


def test_scene_spread_and_of_kept() -> None:
    images, gt, dets = _set(0)
    sc = scene(images, gt, dets, 3)  # a few per image: not every detection kept
    assert not sc.all_kept and len(sc.kd) < len(dets)
    v = np.arange(len(sc.kd), dtype=np.int32) + 1
    out = sc.spread(v, -1)
    assert out.dtype == np.int32 and np.array_equal(out[sc.kd], v) and (out == -1).sum() == len(dets) - len(sc.kd)
    assert np.array_equal(sc.of_kept(sc.rank), sc.rank[sc.kd])
    every = scene(images, gt, dets, 100)
    w = np.ones(len(dets), bool)
    assert every.spread(w, False) is w and every.of_kept(every.rank) is every.rank


@pytest.mark.parametrize("side", ["left", "right"])
def test_sorted_search_is_searchsorted(side: str) -> None:
    rng = np.random.default_rng(3)
    a = np.sort(np.concatenate([np.round(rng.normal(0, 10, 5000), 1), [-np.inf, np.inf, np.nan]]))
    v = np.concatenate([np.round(rng.normal(0, 12, 3000), 1), [np.nan, -np.inf, np.inf, 0.0, -0.0]])
    got = sorted_search(a, v, side)
    assert got.dtype == np.int64 and np.array_equal(got, np.searchsorted(a, v, side=side))  # type: ignore[call-overload]
    assert len(sorted_search(a, v[:0], side)) == 0
