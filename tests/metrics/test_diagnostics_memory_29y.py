"""The diagnostics' and OCE's lower-memory paths (issue 29, eighth pass) give what the paths they replace gave:
TIDE on a scene whose pairs it releases equals TIDE on a fresh scene (and the confusion matrix computed before
it on the same scene), the scene's narrowed rows and ranks equal a plain int64 reference (ties, detections of
unknown images, an image past ``max_dets``), OCE's pairs in any block size, and the operating points without
the true positives' IoUs when the LRP thresholds are given."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth, Images
from detcal.metrics.confidence import ece
from detcal.metrics.confusion import agnostic_match, confusion_matrix
from detcal.metrics.lrp import DetectionOutcomes, lrp_table
from detcal.metrics.oce import object_scores_of_sets
from detcal.metrics.operating_points import operating_points
from detcal.metrics.tide import scene, scene_match, tide

oce_mod = importlib.import_module("detcal.metrics.oce")  # the module (the package's ``oce`` is the function)


def _boxes(rng: np.random.Generator, n: int, size: float = 60.0) -> np.ndarray:
    xy = rng.uniform(0, 100, (n, 2))
    return np.column_stack([xy, xy + rng.uniform(2, size, (n, 2))])


def _set(seed: int = 0, unknown: bool = True) -> tuple[Images, GroundTruth, Detections]:
    """Boxes (some crowd) in most images, images without a box, detections near the boxes and elsewhere, equal
    scores, 30 detections in image 0 (past ``max_dets=20``) and (``unknown``) some in an image not listed."""
    rng = np.random.default_rng(seed)
    n_img = 12
    images = Images(id=np.arange(100, 100 + n_img), width=np.full(n_img, 200.0), height=np.full(n_img, 200.0))
    g_img = rng.integers(0, n_img - 3, 40)  # the last three images have no box
    gbox = _boxes(rng, 40)
    gt = GroundTruth(
        image_id=images.id[g_img], box=gbox, category=rng.integers(1, 4, 40), iscrowd=rng.random(40) < 0.15
    )
    near = gbox[rng.integers(0, 40, 150)] + rng.normal(0, 4, (150, 4))
    box = np.vstack([near, _boxes(rng, 60)])
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    box = np.clip(box, 0, 200)
    d_img = np.concatenate([g_img[rng.integers(0, 40, 150)], rng.integers(0, n_img, 60)])
    d_img[:30] = 0
    ids = images.id[d_img]
    if unknown:
        ids[-5:] = 999  # an image the dataset does not list
    score = np.round(rng.random(210), 1)  # many equal scores
    dets = Detections(image_id=ids, box=box, score=score, category=rng.integers(1, 4, 210))
    return images, gt, dets


def _rank_reference(images: Images, dets: Detections) -> tuple[np.ndarray, np.ndarray]:
    """Rank in the image (descending score, ties in input order; -1 unknown image) and the known detections
    by image then rank, one image at a time, as int64."""
    img = images.index_of(dets.image_id).astype(np.int64)
    rank = np.full(len(img), -1, np.int64)
    by_image = []
    for i in range(len(images)):
        rows = np.flatnonzero(img == i)
        rows = rows[np.argsort(-dets.score[rows], kind="stable")]
        rank[rows] = np.arange(len(rows))
        by_image.extend(rows.tolist())
    return rank, np.asarray(by_image, np.int64)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scene_rows_and_ranks_equal_the_int64_reference(seed: int) -> None:
    images, gt, dets = _set(seed)
    sc = scene(images, gt, dets, max_dets=20)
    rank, by_image = _rank_reference(images, dets)
    assert sc.rank.dtype == np.int32 and sc.kd.dtype == np.int32 and sc.by_image.dtype == np.int32
    assert np.array_equal(sc.rank, rank) and np.array_equal(sc.by_image, by_image)
    assert (rank == -1).sum() == 5 and rank.max() >= 20  # unknown images and the max_dets cut exercised
    kept = np.flatnonzero((rank >= 0) & (rank < 20))
    assert np.array_equal(np.sort(sc.kd), kept)
    assert np.array_equal(sc.d_img, images.index_of(dets.image_id))


@pytest.mark.parametrize("seed", [0, 3, 4])
def test_tide_releasing_the_scene_equals_tide_on_its_own_scene(seed: int) -> None:
    """The diagnostics' order: the confusion matrix on the scene, then TIDE releasing its pairs; each equals
    the same measure computed alone on a fresh scene (every field, bit for bit)."""
    images, gt, dets = _set(seed)
    alone = tide(images, gt, dets, max_dets=20)
    am_alone = agnostic_match(dets, gt, 0.5, 20, images=images)
    sc = scene(images, gt, dets, max_dets=20)
    am = agnostic_match(dets, gt, 0.5, 20, paired=sc)
    got = tide(images, gt, dets, max_dets=20, paired=sc, release=True)
    assert sc.released and len(sc.pr.pd) == 0 and len(sc.kd) == 0
    assert (got.ap, got.main, got.special, got.counts) == (alone.ap, alone.main, alone.special, alone.counts)
    for name in ("code", "ignored", "target", "missed", "matched_gt"):
        assert np.array_equal(getattr(got, name), getattr(alone, name)), name
    assert got.code.dtype == np.int8 and (got.code > 0).any() and (got.code == -1).any()
    for name in ("gt_row", "ignored", "considered", "pair_iou", "any_iou"):
        assert np.array_equal(getattr(am, name), getattr(am_alone, name)), name
    cats = sorted(set(gt.category.tolist()))
    assert confusion_matrix(am, dets, gt, cats) == confusion_matrix(am_alone, dets, gt, cats)
    with pytest.raises(ValueError, match="released"):
        scene_match(sc, 0.5)


def test_tide_without_release_leaves_the_scene_usable() -> None:
    images, gt, dets = _set(1)
    sc = scene(images, gt, dets, max_dets=20)
    tide(images, gt, dets, max_dets=20, paired=sc)
    assert not sc.released
    got, _, _ = scene_match(sc, 0.5, classwise=False)
    assert np.array_equal(got, agnostic_match(dets, gt, 0.5, 20, images=images).gt_row[sc.kd])


@pytest.mark.parametrize("seed", [0, 5])
def test_oce_pairs_in_any_block_size_give_the_same_scores(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Blocks of one candidate pair, a few, and more than all of them (and a second set of detections)."""
    _, gt, dets = _set(seed, unknown=False)
    mask = dets.score >= 0.4
    sets = [(None, ("mean", "max_iou", "iou_weighted")), (mask, ("mean",))]
    runs = []
    for block in (1, 7, 1 << 20):
        monkeypatch.setattr(oce_mod, "OCE_PAIR_BLOCK", block)
        runs.append(object_scores_of_sets(dets, gt, (0.5, 0.75), sets))
    for run in runs[1:]:
        for k, by_agg in enumerate(run):
            for agg, s in by_agg.items():
                ref = runs[0][k][agg]
                assert np.array_equal(s.brier, ref.brier) and np.array_equal(s.n_matched, ref.n_matched)
                assert np.array_equal(s.det_max_iou, ref.det_max_iou)
    assert (runs[0][0]["mean"].n_matched > 0).any() and (runs[0][0]["mean"].n_matched == 0).any()


def _outcomes(seed: int, with_iou: bool) -> DetectionOutcomes:
    rng = np.random.default_rng(seed)
    n = 400
    tp = rng.random(n) < 0.4
    iou = np.where(tp, rng.uniform(0.5, 1.0, n), 0.0)
    if not with_iou:
        iou = np.broadcast_to(np.float64(0.0), (n,))
    return DetectionOutcomes(
        tau=0.5, score=np.round(rng.random(n), 2), category=rng.integers(1, 6, n), image_id=rng.integers(0, 30, n),
        valid=rng.random(n) < 0.9, tp=tp, iou=iou, gt_categories=np.arange(1, 5), n_gt=np.array([40, 30, 0, 25]),
        max_dets=None,
    )  # fmt: skip


def test_operating_points_with_given_lrp_thresholds_do_not_read_the_ious() -> None:
    """The LRP-optimal thresholds given: the operating points are the same whatever the IoUs (the diagnostics
    then pass a view of one zero instead of gathering them)."""
    full, none = _outcomes(0, True), _outcomes(0, False)
    table = lrp_table(full)
    cats = full.gt_categories.tolist()
    lrp = (dict(zip(cats, table.threshold)), dict(zip(cats, table.olrp)), 0.5)
    names = {c: f"c{c}" for c in cats}
    a = operating_points(full, names, ece, [1, 2], lrp)
    b = operating_points(none, names, ece, [1, 2], lrp)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN written alike
    assert a["pooled"]["f1_optimal"]["threshold"] == a["pooled"]["f1_optimal"]["threshold"]  # not NaN
