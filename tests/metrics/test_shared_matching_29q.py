"""Issue 29, seventh pass (29q): the COCO accumulation read at the matched detections only, and the one
matching pass COCO AP and LRP share, give the arrays of the paths they replace.

* :func:`detcal.matching.engine.layout_and_match` equals :func:`exclusive_layout` (areas from the box
  corners) plus :func:`match` (the input's ``w * h``), array for array, in one piece and in image chunks,
  with ``w * h`` that differ from the corners' areas in the last bit;
* :func:`detcal.matching.blocks.slot_iou_areas` gives :func:`slot_iou`'s doubles for each area;
* :func:`coco_eval_arrays` (segment-space accumulation) equals pycocotools on sets built on the area-range
  edges (GT and detection areas of exactly 32² and 96²), with crowd GTs, tied scores, groups cut at 1, 10
  and 100, unknown categories and images without detections or without ground truth; with the shared
  layout it equals itself without;
* the pipeline's accuracy and localisation blocks are the same with the shared pass as computed apart.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

import detcal.matching.chunks as chunks_mod
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.matching.blocks import box_areas, slot_iou, slot_iou_areas
from detcal.matching.engine import ExclusiveLayout, exclusive_layout, layout_and_match, match
from detcal.metrics.accuracy import IOU_THRESHOLDS, accumulate_order, category_positions, coco_eval_arrays
from detcal.metrics.lrp import detection_outcomes, outcomes_from_match

_SIDES = np.array([4.0, 31.0, 32.0, 33.0, 64.0, 95.0, 96.0, 97.0, 150.0])
"""Box sides: squares of 32 and 96 sit on the area ranges' bounds (bounds inclusive)."""


def _edge_case(seed: int) -> tuple[Dataset, Detections]:
    """Integer boxes of the sides above (areas exact, on the bounds), crowd GTs, one-decimal scores (ties),
    one (image, category) group of 130 detections (cut at 100), detections of a category the ground
    truth does not have, an image without detections and one without ground truth."""
    rng = np.random.default_rng(seed)
    ni = 6
    images = Images(id=np.arange(1, ni + 1) * 5, width=np.full(ni, 400), height=np.full(ni, 400))
    ng = 30
    side = _SIDES[rng.integers(0, len(_SIDES), (ng, 2))]
    side[:2] = [[32.0, 32.0], [96.0, 96.0]]  # one GT on each bound
    xy = rng.integers(0, 200, (ng, 2)).astype(float)
    g_img = rng.choice(images.id[:-1], ng)  # the last image: no ground truth
    gt = GroundTruth(
        image_id=g_img,
        box=np.c_[xy, xy + side],
        category=rng.integers(1, 4, ng),
        iscrowd=(rng.random(ng) < 0.15).astype(int),
    )
    ds = Dataset(images=images, gt=gt, categories={1: "a", 2: "b", 3: "c"})
    nd = 260
    anchor = rng.integers(0, ng, nd)
    shift = rng.integers(-6, 7, (nd, 2)).astype(float)
    dside = np.where(
        rng.random((nd, 1)) < 0.5, gt.box[anchor, 2:] - gt.box[anchor, :2], _SIDES[rng.integers(0, 9, (nd, 2))]
    )
    dxy = gt.box[anchor, :2] + shift
    d_img = gt.image_id[anchor].copy()
    d_cat = gt.category[anchor].copy()
    d_cat[rng.random(nd) < 0.1] = 7  # a category the ground truth does not have
    d_img[:130], d_cat[:130] = gt.image_id[0], gt.category[0]  # one group past 100 detections
    d_img[d_img == images.id[1]] = images.id[0]  # the second image: ground truth only
    dets = Detections(image_id=d_img, box=np.c_[dxy, dxy + dside], score=np.round(rng.random(nd), 1), category=d_cat)
    return ds, dets


def _pycocotools_arrays(ds: Dataset, dets: Detections) -> tuple[np.ndarray, np.ndarray]:
    from pycocotools.cocoeval import COCOeval

    from detcal.data.coco import results_to_pycocotools, to_pycocotools

    g = to_pycocotools(ds)
    known = np.isin(dets.category, list(ds.categories))  # pycocotools' loadRes needs known categories
    with contextlib.redirect_stdout(io.StringIO()):
        e = COCOeval(g, results_to_pycocotools(g, dets.select(known)), "bbox")
        e.evaluate()
        e.accumulate()
    return e.eval["precision"], e.eval["recall"]


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("chunk", [None, 40])
def test_coco_arrays_equal_pycocotools_on_area_range_edges(seed: int, chunk: int | None, monkeypatch) -> None:
    if chunk is not None:
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", chunk)
    ds, dets = _edge_case(seed)
    areas = box_areas(ds.gt.box)
    assert {32.0**2, 96.0**2} <= set(areas.tolist())  # GTs on both bounds
    mine = coco_eval_arrays(dets.select(np.isin(dets.category, list(ds.categories))), ds)
    precision, recall = _pycocotools_arrays(ds, dets)
    np.testing.assert_array_equal(mine["precision"], precision)
    np.testing.assert_array_equal(mine["recall"], recall)
    # unknown categories leave the accumulation (they are in no category block)
    with_unknown = coco_eval_arrays(dets, ds)
    np.testing.assert_array_equal(with_unknown["precision"], precision)
    np.testing.assert_array_equal(with_unknown["recall"], recall)


def _last_bit_wh(rng: np.random.Generator, n: int, images: np.ndarray, cats: np.ndarray) -> Detections:
    """Detections whose ``x1 + w == x2`` holds exactly but ``w * h`` differs from the corners' area."""
    x1, y1 = rng.uniform(0, 300, n), rng.uniform(0, 300, n)
    w, h = rng.uniform(0.1, 120, n), rng.uniform(0.1, 120, n)
    box = np.c_[x1, y1, x1 + w, y1 + h]
    return Detections(
        image_id=rng.choice(images, n),
        box=box,
        score=np.round(rng.random(n), 2),
        category=rng.choice(cats, n),
        wh=np.c_[w, h],
    )


def _shared_case(seed: int) -> tuple[GroundTruth, Detections]:
    rng = np.random.default_rng(seed)
    imgs, cats = np.arange(1, 13), np.array([1, 2, 4])
    g = _last_bit_wh(rng, 60, imgs[:-1], cats)  # the last image: no ground truth
    gt = GroundTruth(image_id=g.image_id, box=g.box, category=g.category, iscrowd=rng.random(60) < 0.1, wh=g.wh)
    near = gt.box[rng.integers(0, 60, 300)] + rng.normal(0, 4, (300, 4))
    near[:, 2:] = np.maximum(near[:, 2:], near[:, :2] + 0.5)
    d = _last_bit_wh(rng, 300, imgs, cats)
    wh = near[:, 2:] - near[:, :2]
    box = np.c_[near[:, :2], near[:, :2] + wh]
    pick = rng.random(300) < 0.7
    img = np.where(pick, gt.image_id[rng.integers(0, 60, 300)], d.image_id)
    return gt, Detections(
        image_id=img,
        box=np.where(pick[:, None], box, d.box),
        score=d.score,
        category=d.category,
        wh=np.where(pick[:, None], wh, d.wh),
    )


def _assert_layouts_equal(a: ExclusiveLayout, b: ExclusiveLayout) -> None:
    for name in ExclusiveLayout._fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, name
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x == y, name


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("chunk", [None, 1, 37])
@pytest.mark.parametrize("max_dets", [100, 3])
def test_layout_and_match_equals_the_two_calls(seed: int, chunk: int | None, max_dets: int, monkeypatch) -> None:
    if chunk is not None:
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", chunk)
    gt, dets = _shared_case(seed)
    assert (box_areas(dets.box, dets.wh) != box_areas(dets.box)).any()  # the two areas differ somewhere
    plain = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category)
    thr = IOU_THRESHOLDS.tolist()
    for tau in (0.0, 0.5):
        lay, m = layout_and_match(dets, gt, thr, (tau, 0.75), max_dets=max_dets)
        _assert_layouts_equal(lay, exclusive_layout(plain, gt, thr, max_dets=max_dets))
        ref = match(dets, gt, (tau, 0.75), max_dets=max_dets)
        for name in ("matched", "ignored", "gt_index", "considered"):
            np.testing.assert_array_equal(getattr(m, name), getattr(ref, name), err_msg=name)
        assert m.gt_index.dtype == ref.gt_index.dtype


def test_layout_and_match_on_empty_inputs() -> None:
    gt, dets = _shared_case(0)
    none = dets.select(np.zeros(len(dets), bool))
    lay, m = layout_and_match(none, gt, [0.5], (0.0,))
    assert lay.n_det == 0 and m.matched.shape == (1, 0)
    lay, m = layout_and_match(dets, gt.select(np.zeros(len(gt), bool)), [0.5], (0.0,))
    assert len(lay.k_det) == 0 and not m.matched.any() and (m.gt_index == -1).all()


def test_slot_iou_areas_gives_slot_iou_per_area() -> None:
    rng = np.random.default_rng(3)
    S, W = 40, 9
    d = _last_bit_wh(rng, S, np.array([1]), np.array([1]))
    g = _last_bit_wh(rng, W, np.array([1]), np.array([1]))
    cnt = np.sort(rng.integers(1, W + 1, S))[::-1]
    g0 = rng.integers(0, W - cnt + 1)
    n_slot = np.searchsorted(-cnt, -np.arange(int(cnt.max())), side="left")
    crowd = rng.random(W) < 0.3
    areas = [box_areas(d.box, d.wh), box_areas(d.box)]
    off, res = slot_iou_areas(d.box.T, g0, n_slot, g.box.T, crowd, areas, box_areas(g.box, g.wh))
    for da, (iou, best, arg) in zip(areas, res):
        one = slot_iou(d.box.T, g0, n_slot, g.box.T, crowd, da, box_areas(g.box, g.wh))
        for x, y in zip((iou, off, best, arg), one):
            np.testing.assert_array_equal(x, y)


def test_lrp_outcomes_from_the_shared_match_equal_detection_outcomes() -> None:
    gt, dets = _shared_case(1)
    _, m = layout_and_match(dets, gt, IOU_THRESHOLDS.tolist(), (0.0,))
    a = outcomes_from_match(dets, gt, 0.0, m.matched[0], m.ignored[0], m.gt_index[0].astype(np.int32), m.considered)
    b = detection_outcomes(dets, gt, 0.0)
    for name in ("valid", "tp", "iou", "considered", "gt_categories", "n_gt", "score", "category", "image_id"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_coco_arrays_with_the_shared_layout_equal_without(monkeypatch) -> None:
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", 50)
    gt, dets = _shared_case(2)
    ids = np.unique(np.r_[gt.image_id, dets.image_id])
    ds = Dataset(
        images=Images(id=ids, width=np.full(len(ids), 400), height=np.full(len(ids), 400)),
        gt=gt,
        categories={1: "a", 2: "b", 4: "d"},
    )
    lay, _ = layout_and_match(dets, gt, IOU_THRESHOLDS.tolist(), (0.0,))
    order = accumulate_order(dets, sorted(ds.categories))
    a = coco_eval_arrays(dets, ds, order=order, layout=lay)
    b = coco_eval_arrays(dets, ds)
    np.testing.assert_array_equal(a["precision"], b["precision"])
    np.testing.assert_array_equal(a["recall"], b["recall"])
    with pytest.raises(Exception, match="layout"):
        coco_eval_arrays(dets, ds, layout=layout_and_match(dets, gt, [0.5], (0.0,))[0])


def test_category_positions_equal_searchsorted() -> None:
    rng = np.random.default_rng(0)
    cats = np.array([1, 2, 5, 9, 90])
    for values in (rng.integers(0, 120, 500), np.array([0, 1, 90, 91, 3]), np.array([], np.int64)):
        np.testing.assert_array_equal(category_positions(cats, values), np.searchsorted(cats, values))
    big = np.array([-4, 3, 10**12])  # negative and huge ids: the binary search
    np.testing.assert_array_equal(category_positions(cats, big), np.searchsorted(cats, big))


def test_layout_and_match_takes_the_match_at_the_inputs_areas() -> None:
    """A threshold equal to a detection's best IoU under ``w * h`` and above it under the corners' areas:
    the shared pass matches that detection as :func:`match` does (with ``w * h``), not as the corners
    would (the two sets of pairs are not mixed up)."""
    gt, dets = _shared_case(0)
    plain = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category)
    iou_wh, iou_c = match(dets, gt, (0.5,)).iou, match(plain, gt, (0.5,)).iou
    i = int(np.flatnonzero((iou_wh > iou_c) & (iou_c > 0.1))[0])
    t = float(iou_wh[i])
    _, m = layout_and_match(dets, gt, [0.5], (t,))
    ref, corners = match(dets, gt, (t,)), match(plain, gt, (t,))
    assert not np.array_equal(ref.matched, corners.matched)  # the areas decide at this threshold
    np.testing.assert_array_equal(m.matched, ref.matched)
    np.testing.assert_array_equal(m.gt_index, ref.gt_index)


def test_match_names_the_first_row_of_an_unknown_image() -> None:
    """The image check of :func:`match` (a membership test) names the first detection, then the first
    ground-truth row, whose image is not in ``images``."""
    from detcal.core.errors import DetcalInputError

    gt, dets = _shared_case(0)
    ids = np.unique(np.r_[gt.image_id, dets.image_id])
    images = Images(id=ids, width=np.full(len(ids), 400), height=np.full(len(ids), 400))
    assert match(dets, gt, (0.5,), images=images).matched.shape == (1, len(dets))
    gone = int(dets.image_id[5])
    rest = images.select(ids != gone)
    with pytest.raises(
        DetcalInputError, match=f"detection row {int(np.argmax(dets.image_id == gone))}, .*image_id {gone} is not"
    ):
        match(dets, gt, (0.5,), images=rest)
    keep = dets.image_id != gone
    if (gt.image_id == gone).any():
        with pytest.raises(DetcalInputError, match=f"ground truth row {int(np.argmax(gt.image_id == gone))}"):
            match(dets.select(keep), gt, (0.5,), images=rest)
