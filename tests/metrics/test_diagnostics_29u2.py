"""The eleventh speed pass of issue 29 (diagnostics and OCE) against the paths it adds a shortcut to, to the bit:
TIDE's fixes when the kept rows run image after image (the score order's ties already in tidecv's visiting
order), the operating points' score-ordered points gathered from the full columns, and the post-processing
split's per-image counts from one cumulative count."""

from __future__ import annotations

import dataclasses
import importlib
import json

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth, Images
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.confusion import agnostic_match, confusion_matrix
from detcal.metrics.image_reliability import _sorted_split, split_and_kept
from detcal.metrics.lrp import DetectionOutcomes
from detcal.metrics.oce import object_scores_of_sets
from detcal.metrics.operating_points import operating_points
from detcal.metrics.score_order import stable_descending
from detcal.metrics.tide import scene, tide

oce_mod = importlib.import_module("detcal.metrics.oce")  # the module (the package exports a function `oce`)
op_mod = importlib.import_module("detcal.metrics.operating_points")


def _set(seed: int, n_det: int = 400, by_image: bool = True) -> tuple[Images, GroundTruth, Detections]:
    """Detections near boxes and elsewhere, written image after image (``by_image``) or in any order; crowd
    boxes, an image without boxes, scores with many ties (one decimal), and a -0.0 among the zeros."""
    rng = np.random.default_rng(seed)
    n_img, n_gt = 11, 60
    images = Images(id=np.arange(n_img) * 3 + 1, width=np.full(n_img, 200.0), height=np.full(n_img, 200.0))
    g_img = rng.integers(0, n_img - 1, n_gt)  # the last image has no box
    xy = rng.uniform(0, 100, (n_gt, 2))
    gbox = np.column_stack([xy, xy + rng.uniform(2, 60, (n_gt, 2))])
    gt = GroundTruth(
        image_id=images.id[g_img], box=gbox, category=rng.integers(1, 5, n_gt), iscrowd=rng.random(n_gt) < 0.1
    )
    pick = rng.integers(0, n_gt, n_det)
    box = gbox[pick] + rng.normal(0, 6, (n_det, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    d_img = np.where(rng.random(n_det) < 0.8, g_img[pick], rng.integers(0, n_img, n_det))
    o = np.argsort(d_img, kind="stable") if by_image else rng.permutation(n_det)
    score = np.round(rng.random(n_det), 1)
    score[score == 0] = -0.0
    dets = Detections(image_id=images.id[d_img[o]], box=box[o], score=score[o], category=rng.integers(1, 5, n_det))
    return images, gt, dets


def _same_tide(a: object, b: object) -> None:
    ra, rb = dataclasses.asdict(a), dataclasses.asdict(b)  # type: ignore[call-overload]
    for k, v in ra.items():
        if isinstance(v, np.ndarray):
            assert v.dtype == rb[k].dtype and np.array_equal(v, rb[k]), k
        else:
            assert json.dumps(v, sort_keys=True) == json.dumps(rb[k], sort_keys=True), k


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("max_dets", [100, 4])
def test_tide_with_rows_by_image_equals_the_visiting_order(seed: int, max_dets: int) -> None:
    """A file written image after image: the score order's ties are tidecv's (image, rank) order, so TIDE skips
    the radix sort of the runs; forcing that sort gives every output to the bit (every detection kept, and a
    few per image kept)."""
    images, gt, dets = _set(seed)
    fast = scene(images, gt, dets, max_dets)
    assert fast.rows_by_image and fast.all_kept == (max_dets == 100)
    slow = dataclasses.replace(scene(images, gt, dets, max_dets), rows_by_image=False)
    a = tide(images, gt, dets, max_dets=max_dets, paired=fast, release=True)
    b = tide(images, gt, dets, max_dets=max_dets, paired=slow, release=True)
    assert a.counts["cls"] + a.counts["loc"] + a.counts["dupe"] > 0 and a.ap > 0
    _same_tide(a, b)


@pytest.mark.parametrize("seed", range(4))
def test_tide_of_a_file_with_its_images_reordered_is_the_same(seed: int) -> None:
    """The same detections with the images' blocks of rows in another order (each image's rows in their order, so
    the ranks are the same): tidecv's visiting order is by image, then rank, so every number is the same, and the
    scene of the reordered file takes the radix sort of the runs."""
    images, gt, dets = _set(seed)
    rng = np.random.default_rng(seed)
    block = rng.permutation(len(images))[np.searchsorted(images.id, dets.image_id)]
    o = np.argsort(block, kind="stable")  # whole images moved, the rows of each in their order
    moved = Detections(image_id=dets.image_id[o], box=dets.box[o], score=dets.score[o], category=dets.category[o])
    sc = scene(images, gt, moved, 100)
    assert not sc.rows_by_image and not sc.all_kept
    a, b = tide(images, gt, dets), tide(images, gt, moved, paired=sc)
    assert (a.ap, a.main, a.special, a.counts) == (b.ap, b.main, b.special, b.counts)
    for name in ("code", "ignored", "target", "matched_gt"):
        assert np.array_equal(getattr(a, name)[o], getattr(b, name)), name


def _outcomes(seed: int) -> DetectionOutcomes:
    """Ties, -0.0 and 0.0 among the scores, invalid detections and a class without boxes and one not listed."""
    rng = np.random.default_rng(seed)
    n = 3000
    tp = rng.random(n) < 0.4
    score = np.round(rng.random(n), 2)
    score[score == 0] = np.where(rng.random(int((score == 0).sum())) < 0.5, -0.0, 0.0)
    return DetectionOutcomes(
        tau=0.5, score=score, category=rng.integers(1, 7, n), image_id=rng.integers(0, 30, n),
        valid=rng.random(n) < 0.85, tp=tp, iou=np.where(tp, 0.7, 0.0), gt_categories=np.arange(1, 6),
        n_gt=np.array([400, 300, 0, 250, 90]), max_dets=None,
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_operating_points_from_the_detections_order_equal_their_own_sort(seed: int) -> None:
    o = _outcomes(seed)
    names = {c: f"c{c}" for c in range(1, 7)}
    ece = ConfidenceMetric("ece", 15)
    a = operating_points(o, names, ece, [1, 2, 4], None, stable_descending(o.score))
    b = operating_points(o, names, ece, [1, 2, 4], None, None)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN and -0.0 written alike
    assert a["pooled"]["f1_optimal"]["threshold"] == a["pooled"]["f1_optimal"]["threshold"]  # not NaN


def _split_reference(
    image_id: np.ndarray, score: np.ndarray, images: np.ndarray, method: str, param: float, box: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The split with every per-image count a sum of flags (as before the pass)."""
    order, img, s, kept, rank, n_img = _sorted_split(image_id, score, images, method, param, box)
    counts = np.bincount(img, minlength=n_img)
    n_pos = np.bincount(img, weights=kept, minlength=n_img)
    neg = rank >= n_pos[img] if method == "nms" else ~kept
    with np.errstate(divide="ignore", invalid="ignore"):
        conf_pos = np.bincount(img, weights=np.where(kept, s, 0.0), minlength=n_img) / n_pos
        n_neg = np.bincount(img, weights=neg, minlength=n_img)
        conf_neg = np.bincount(img, weights=np.where(neg, s, 0.0), minlength=n_img) / n_neg
        conf_all = np.bincount(img, weights=s, minlength=n_img) / counts
    conf_neg = np.where(n_neg > 0, conf_neg, 0.0)
    none = n_pos == 0
    conf_pos = np.where(none, 0.0, conf_pos)
    conf_neg = np.where(none, np.where(counts > 0, conf_all, 0.0), conf_neg)
    in_order = np.zeros(len(order), bool)
    in_order[order] = kept
    return conf_pos, conf_neg, in_order


@pytest.mark.parametrize("method,param", [("threshold", 0.3), ("threshold", 0.95), ("topk", 3), ("nms", 0.5)])
@pytest.mark.parametrize("by_image", [True, False])
def test_split_counts_equal_the_summed_flags(method: str, param: float, by_image: bool) -> None:
    images, _, dets = _set(7, by_image=by_image)
    ids = np.concatenate([images.id, [1000]])  # an image without detections
    got = split_and_kept(dets.image_id, dets.score, ids, method, param, dets.box)
    ref = _split_reference(dets.image_id, dets.score, ids, method, param, dets.box)
    for x, y in zip(got, ref):
        assert x.dtype == y.dtype and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        if x.dtype.kind == "f":
            assert np.array_equal(np.signbit(x), np.signbit(y))
    assert got[2].any() and not got[2].all()


def test_sets_without_the_selected_max_iou_are_otherwise_the_same() -> None:
    images, gt, dets = _set(3)
    mask = dets.score > 0.3
    sets = [(None, ("mean", "max_iou", "iou_weighted")), (mask, ("mean",))]
    full = object_scores_of_sets(dets, gt, (0.5, 0.75), sets)
    lean = object_scores_of_sets(dets, gt, (0.5, 0.75), sets, selected_max_iou=False)
    assert lean[1]["mean"].det_max_iou is None and full[1]["mean"].det_max_iou is not None
    assert np.array_equal(lean[0]["mean"].det_max_iou, full[0]["mean"].det_max_iou)
    for a, b in zip(full, lean):
        for agg, s in a.items():
            assert np.array_equal(s.brier, b[agg].brier) and np.array_equal(s.n_matched, b[agg].n_matched)
    assert (full[1]["mean"].n_matched > 0).any()


@pytest.mark.parametrize("seed", range(6))
def test_majority_label_of_ascending_objects_unchecked_is_the_same(seed: int) -> None:
    rng = np.random.default_rng(seed)
    obj = np.sort(rng.integers(0, 50, 400))
    label = np.where(rng.random(400) < 0.9 - 0.15 * seed, obj % 7, rng.integers(0, 7, 400))
    want = oce_mod._majority_label(obj, label, 55)
    got = oce_mod._majority_label(obj, label, 55, ascending=True)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def _class_points(seed: int, decimals: int, n: int = 5000) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Points in descending score order (ties in any class order), their flags and classes; a class without
    boxes and one without points."""
    rng = np.random.default_rng(seed)
    s = -np.sort(-np.round(rng.random(n), decimals))
    code = rng.integers(0, 6, n)
    code[code == 4] = 5  # class 4: no points
    return s, rng.random(n) < 0.35, code, np.array([300, 0, 900, 40, 10, 250])


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("decimals", [1, 2])
def test_class_f1_from_cells_equals_the_sorted_classes(
    seed: int, decimals: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, tp, code, n_gt = _class_points(seed, decimals)
    got = op_mod._class_f1_cells(s, tp, code, n_gt)
    assert got is not None
    monkeypatch.setattr(op_mod, "_class_f1_cells", lambda *a: None)
    want = op_mod._class_f1_sorted(s, tp, code, n_gt)
    assert np.array_equal(got, want, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(want))
    for k in range(len(n_gt)):  # each class alone: its own best cut
        mine = code == k
        ref = op_mod._f1_optimal_sorted(s[mine], tp[mine], int(n_gt[k]))
        assert np.array_equal(got[k], np.asarray(ref, float), equal_nan=True), k
    assert np.isnan(got[1]).all() and np.isnan(got[4]).all() and not np.isnan(got[0]).any()


def test_class_f1_from_cells_falls_back_where_the_cells_are_not_the_points() -> None:
    s, tp, code, n_gt = _class_points(0, 1)
    assert op_mod._class_f1_cells(s, tp, code, n_gt) is not None
    s2 = np.where(s == 0, np.where(np.arange(len(s)) % 2, -0.0, 0.0), s)  # a run of both zeros
    assert (s2 == 0).any() and op_mod._class_f1_cells(s2, tp, code, n_gt) is None
    s3 = np.where(s == 0, -0.0, s)  # every zero negative: one zero, kept as it is
    got = op_mod._class_f1_cells(s3, tp, code, n_gt)
    assert got is not None and np.array_equal(
        np.signbit(got[:, 0]), np.signbit(op_mod._class_f1_sorted(s3, tp, code, n_gt)[:, 0])
    )
    fine, _, _, _ = _class_points(0, 6)  # nearly every score distinct: more cells than points
    assert op_mod._class_f1_cells(fine, tp, code, n_gt) is None
    assert op_mod._class_f1_cells(s, tp.astype(np.int64), code, n_gt) is None  # not flags


@pytest.mark.parametrize("seed", range(4))
def test_confusion_matrix_equals_counting_each_detection_and_box(seed: int) -> None:
    """Every count of the matrix against a loop over the detections and the boxes (a detection class outside
    the list counts as background)."""
    images, gt, dets = _set(seed)
    dets = Detections(
        image_id=dets.image_id, box=dets.box, score=dets.score, category=np.where(dets.category == 4, 9, dets.category)
    )
    am = agnostic_match(dets, gt, 0.5, 20, images=images)
    cats = [1, 2, 3, 4]
    got = confusion_matrix(am, dets, gt, cats, 0.3)
    idx = {k: i for i, k in enumerate(cats)}
    m = np.zeros((5, 5), np.int64)
    n_m = n_o = n_b = 0
    taken = set()
    for i in range(len(dets)):
        if not am.considered[i] or am.ignored[i] or dets.score[i] < 0.3:
            continue
        col = idx.get(int(dets.category[i]), 4)
        g = int(am.gt_row[i])
        if g >= 0:
            row = idx.get(int(gt.category[g]), 4)
            n_m, n_o, taken = n_m + 1, n_o + int(row != col), taken | {g}
        else:
            row, n_b = 4, n_b + 1
        m[row, col] += 1
    missed = [j for j in range(len(gt)) if not gt.iscrowd[j] and j not in taken]
    for j in missed:
        m[idx.get(int(gt.category[j]), 4), 4] += 1
    assert got["matrix"] == m.tolist() and n_m > 0 and n_b > 0
    assert (got["n_matched"], got["n_matched_other_class"], got["n_background_detections"]) == (n_m, n_o, n_b)
    assert got["n_missed_boxes"] == len(missed)
