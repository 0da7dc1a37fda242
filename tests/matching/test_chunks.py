"""Image chunks (detcal.matching.chunks): the matcher, the COCO AP layout and LRP run on cache-sized
blocks of whole images and give the same arrays as one pass over the whole set, whatever the chunk
size (chunk boundaries inside and between images, chunks of one image, images without ground truth
or without detections, rows not in image order)."""

from __future__ import annotations

import numpy as np
import pytest
from test_matching import make_coco, to_records

import detcal.matching.chunks as chunks_mod
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.matching.chunks import image_chunks, row_numbers, rows_index
from detcal.matching.engine import exclusive_layout, exclusive_outcome, exclusive_walk, match
from detcal.metrics.accuracy import accumulate_order, coco_eval_arrays
from detcal.metrics.lrp import detection_outcomes, lrp_table

_WHOLE = 10**9


def _data(seed: int, n_images: int = 50) -> tuple[GroundTruth, Detections]:
    """A seeded COCO-like set with a few images left without ground truth and a few without detections."""
    gt, dets = to_records(*make_coco(n_images=n_images, seed=seed, dets_per_img=20.0, crowd_frac=0.1))
    no_gt = np.isin(gt.image_id, [3, 7, 8])  # images 3, 7, 8: detections only
    no_det = np.isin(dets.image_id, [5, 11])  # images 5, 11: ground truth only
    return gt.select(~no_gt), dets.select(~no_det)


def _shuffled(dets: Detections, seed: int) -> Detections:
    return dets.select(np.random.default_rng(seed).permutation(len(dets)))


def _rows(index: slice | np.ndarray, n: int) -> np.ndarray:
    return np.arange(n)[index]


@pytest.mark.parametrize("size", [1, 7, 20, 55, 300])
@pytest.mark.parametrize("shuffle", [False, True])
def test_image_chunks_partition_whole_images(size: int, shuffle: bool) -> None:
    gt, dets = _data(0)
    if shuffle:
        dets = _shuffled(dets, 1)
    parts = image_chunks(dets.image_id, gt.image_id, size)
    det_rows = [_rows(c.det, len(dets)) for c in parts]
    gt_rows = [_rows(c.gt, len(gt)) for c in parts]
    # every detection in exactly one chunk, rows ascending, no chunk empty
    assert np.array_equal(np.sort(np.concatenate(det_rows)), np.arange(len(dets)))
    assert all(len(r) and np.all(np.diff(r) > 0) for r in det_rows)
    imgs = [set(dets.image_id[r].tolist()) for r in det_rows]
    for a in range(len(imgs)):  # whole images: no image in two chunks
        for b in range(a + 1, len(imgs)):
            assert not imgs[a] & imgs[b]
    for r, g, im in zip(det_rows, gt_rows, imgs):
        # the GT of a chunk: exactly the GT of its images (ascending); images without detections in none
        assert np.array_equal(g, np.flatnonzero(np.isin(gt.image_id, list(im))))
        if len(imgs) > 1:  # about ``size`` detections: a chunk passes it only by its last image
            last = dets.image_id[r] == max(im)
            assert (~last).sum() < size
    assert not np.isin([5, 11], np.concatenate([gt.image_id[g] for g in gt_rows])).any() or len(parts) == 1
    if not shuffle:  # a results file in image order: each chunk one slice of rows
        assert all(isinstance(c.det, slice) for c in parts)


def test_image_chunks_edge_cases() -> None:
    none = np.zeros(0, np.int64)
    assert image_chunks(none, none, 4) == [(slice(0, 0), slice(0, 0))]
    one = image_chunks(np.array([9, 9, 9]), np.array([9, 2]), 4)  # fits: one chunk, every GT row
    assert one == [(slice(0, 3), slice(0, 2))]
    # one image larger than the size: a chunk of its own; GT rows not contiguous: an array
    parts = image_chunks(np.array([1, 1, 1, 1, 1, 2]), np.array([2, 1, 3, 1]), 2)
    assert [(_rows(c.det, 6).tolist(), _rows(c.gt, 4).tolist()) for c in parts] == [
        ([0, 1, 2, 3, 4], [1, 3]),
        ([5], [0]),
    ]
    assert rows_index(np.array([4, 5, 6])) == slice(4, 7)
    assert np.array_equal(rows_index(np.array([4, 6])), [4, 6])
    assert rows_index(np.zeros(0, np.int64)) == slice(0, 0)
    assert row_numbers(slice(3, 6), 10).tolist() == [3, 4, 5] and row_numbers(np.array([2, 8]), 10).tolist() == [2, 8]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"mode": "max"},
        {"class_agnostic": True},
        {"max_dets": None, "score_threshold": 0.4},
        {"max_dets": 3, "gt_ignore": "ignore_or_crowd"},
    ],
)
def test_match_in_chunks_equals_one_pass(seed: int, kw: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    gt, dets = _data(seed)
    thr = (0.0, 0.5, 0.75, 0.95)
    for d in (dets, _shuffled(dets, seed)):
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", _WHOLE)
        whole = match(d, gt, thr, **kw)
        for size in (1, 13, 97, len(d) // 2):
            monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", size)
            assert len(image_chunks(d.image_id, gt.image_id)) > 1
            part = match(d, gt, thr, **kw)
            for name in ("matched", "ignored", "gt_index", "iou", "considered"):
                a, b = getattr(whole, name), getattr(part, name)
                assert a.dtype == b.dtype and np.array_equal(a, b), (size, name)
            assert part.params == whole.params


@pytest.mark.parametrize("seed", [0, 3])
def test_layout_in_chunks_walks_as_one_pass(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The joined layout of image chunks gives exclusive_outcome's arrays of the whole layout under every
    GT flag set (with and without the reference walk), and the same ranks and considered flags."""
    gt, dets = _data(seed)
    dets = _shuffled(dets, seed)
    thr = [0.5, 0.6, 0.75, 0.9]
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", _WHOLE)
    whole = exclusive_layout(dets, gt, thr, max_dets=10)
    rng = np.random.default_rng(seed)
    flag_sets = [gt.iscrowd.copy(), np.ones(len(gt), bool), (rng.random(len(gt)) < 0.4) | gt.iscrowd]
    for size in (1, 40, 333):
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", size)
        part = exclusive_layout(dets, gt, thr, max_dets=10)
        assert np.array_equal(part.rank, whole.rank) and np.array_equal(part.considered, whole.considered)
        ref_w, ref_p = exclusive_walk(whole), exclusive_walk(part)
        for flags in flag_sets:
            for ref in (False, True):
                a = exclusive_outcome(whole, flags, ref_w if ref else None)
                b = exclusive_outcome(part, flags, ref_p if ref else None)
                assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


def _dataset(gt: GroundTruth, dets: Detections) -> Dataset:
    ids = np.union1d(gt.image_id, dets.image_id)
    images = Images(id=ids, width=np.full(len(ids), 640.0), height=np.full(len(ids), 480.0))
    return Dataset(images=images, gt=gt, categories={c: f"c{c}" for c in (1, 2, 3, 5, 8, 13)})


def test_coco_arrays_and_lrp_in_chunks_equal_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    gt, dets = _data(4, n_images=40)
    dets = _shuffled(dets, 4)
    ds = _dataset(gt, dets)
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", _WHOLE)
    whole = coco_eval_arrays(dets, ds)
    lrp_whole = lrp_table(detection_outcomes(dets, gt))
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", 50)
    part = coco_eval_arrays(dets, ds)
    o = detection_outcomes(dets, gt)
    order = accumulate_order(dets, sorted(ds.categories))
    assert all(np.array_equal(whole[k], part[k]) for k in whole)
    for t in (lrp_table(o), lrp_table(o, order)):  # LRP with AP's accumulate order: the same table
        for k, v in vars(lrp_whole).items():
            assert np.array_equal(np.asarray(getattr(t, k)), np.asarray(v), equal_nan=True), k


def test_lrp_reads_a_given_order_only_when_its_classes_are_in_blocks() -> None:
    gt, dets = _data(5, n_images=20)
    o = detection_outcomes(dets, gt)
    want = lrp_table(o)
    wrong = np.arange(len(dets))  # input order: classes not in ascending blocks, so it is not read
    got = lrp_table(o, wrong)
    for k, v in vars(want).items():
        assert np.array_equal(np.asarray(getattr(got, k)), np.asarray(v), equal_nan=True), k


def test_class_index_lookup_equals_binary_search() -> None:
    gt, dets = _data(6, n_images=20)
    o = detection_outcomes(dets, gt)
    want = np.searchsorted(o.gt_categories, o.category)
    want = np.where(o.gt_categories[np.minimum(want, len(o.gt_categories) - 1)] == o.category, want, -1)
    assert np.array_equal(o.class_index(), want)
    o.category = o.category - 9  # negative ids: the binary search path, the same answer
    o.gt_categories = o.gt_categories - 9
    assert np.array_equal(o.class_index(), want)
    o.gt_categories = o.gt_categories[:0]
    assert (o.class_index() == -1).all()
