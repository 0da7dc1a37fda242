"""The faster forms of issue 29 against the plain computations they replace (same numbers, to the bit)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth
from detcal.metrics._pairs import dense_codes
from detcal.metrics.image_reliability import kept_mask, split_and_kept, split_confidence
from detcal.metrics.oce import AGGREGATIONS, object_scores_by_aggregation, object_scores_of_sets

# the modules (the package exports functions of the same names)
oce_mod = importlib.import_module("detcal.metrics.oce")
tide_mod = importlib.import_module("detcal.metrics.tide")


def _naive_ap(cls: np.ndarray, tp: np.ndarray, n_gt: np.ndarray) -> float:
    """tidecv's per-class AP written out class by class: precision made non-increasing from the right, read at
    the first point reaching each of the 101 recalls; mean over the classes with a point or a box."""
    aps = []
    for c in range(len(n_gt)):
        t = tp[cls == c].astype(int)
        if len(t) == 0 and n_gt[c] == 0:
            continue
        if n_gt[c] == 0:
            aps.append(0.0)
            continue
        ntp = np.cumsum(t)
        prec = [ntp[i] / (i + 1) for i in range(len(t))]
        rec = [ntp[i] / n_gt[c] for i in range(len(t))]
        for i in range(len(prec) - 2, -1, -1):
            prec[i] = max(prec[i], prec[i + 1])
        ys = []
        for k in range(101):
            hit = [i for i in range(len(rec)) if rec[i] >= k / 100]
            ys.append(prec[hit[0]] if hit else 0.0)
        aps.append(float(np.sum(ys)) / 101 * 100)
    return float(np.mean(aps)) if aps else 0.0


@pytest.mark.parametrize("seed", range(8))
def test_tide_ap_from_true_positives_equals_the_written_out_ap(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_cls, n = 6, int(rng.integers(0, 300))
    cls = rng.integers(0, n_cls - 1, n)  # the last class has no point
    tp = rng.random(n) < rng.uniform(0, 0.9)
    n_gt = rng.integers(0, 40, n_cls)
    n_gt[0] = 0  # points without a box
    for c in range(n_cls):  # at least as many boxes as true positives
        n_gt[c] = max(n_gt[c], int(tp[cls == c].sum())) if c else 0
    tp[cls == 0] = False
    got = tide_mod._ap(cls, tp, n_gt)
    assert got == pytest.approx(_naive_ap(cls, tp, n_gt), abs=1e-10)
    order = np.argsort(cls, kind="stable")
    assert tide_mod._ap(cls[order], tp[order], n_gt, grouped=True) == got


def test_majority_label_equals_counting() -> None:
    rng = np.random.default_rng(3)
    obj = np.sort(rng.integers(0, 40, 500))
    label = rng.choice([3, 7, 11, 90], 500)
    got = oce_mod._majority_label(obj, label, 45)
    for o in range(45):
        labs = label[obj == o]
        if len(labs) == 0:
            assert got[o] == -1
            continue
        vals, counts = np.unique(labs, return_counts=True)
        assert got[o] == vals[np.flatnonzero(counts == counts.max())[0]]
    huge = label.astype(np.int64) * 2**40  # too wide for one integer key: the lexsort path
    assert np.array_equal(oce_mod._majority_label(obj, huge, 45), np.where(got >= 0, got * 2**40, -1))


@pytest.mark.parametrize("ids", [[5, 3, 3, 9, 0, 5], [10**12, 7, 10**12, -4], []])
def test_dense_codes_equal_unique(ids: list[int]) -> None:
    a = np.asarray(ids, np.int64)
    n, inv = dense_codes(a)
    uniq, ref = np.unique(a, return_inverse=True)
    assert n == len(uniq) and np.array_equal(inv, ref.reshape(-1)) and inv.dtype == np.int64


def _scene(seed: int, n_img: int = 12, probs: bool = False) -> tuple[Detections, GroundTruth]:
    rng = np.random.default_rng(seed)
    ng, nd = 60, 400
    gxy = rng.uniform(0, 80, (ng, 2))
    gbox = np.column_stack([gxy, gxy + rng.uniform(5, 30, (ng, 2))])
    src = rng.integers(0, ng, nd)
    dbox = gbox[src] + rng.normal(0, 4, (nd, 4))
    dbox[:, 2:] = np.maximum(dbox[:, 2:], dbox[:, :2] + 1)
    g_img = rng.integers(0, n_img, ng)
    cats = np.array([1, 2, 5])
    gt = GroundTruth(image_id=g_img, category=rng.choice(cats, ng), box=gbox, iscrowd=rng.random(ng) < 0.05)
    score = np.round(rng.uniform(0.05, 1, nd), 2)  # ties
    cp = None
    if probs:
        cp = rng.dirichlet(np.ones(3), nd) * 0.9
    dets = Detections(image_id=g_img[src], category=rng.choice(cats, nd), score=score, box=dbox, class_probs=cp)
    return dets, gt


@pytest.mark.parametrize("probs", [False, True])
def test_scores_of_a_subset_equal_those_of_the_selected_detections(probs: bool) -> None:
    dets, gt = _scene(4, probs=probs)
    mask = dets.score > 0.4
    whole, sub = object_scores_of_sets(dets, gt, (0.5, 0.75), [(None, AGGREGATIONS), (mask, AGGREGATIONS)])
    ref_whole = object_scores_by_aggregation(dets, gt, (0.5, 0.75), AGGREGATIONS)
    ref_sub = object_scores_by_aggregation(dets.select(mask), gt, (0.5, 0.75), AGGREGATIONS)
    for agg in AGGREGATIONS:
        for got, ref in ((whole[agg], ref_whole[agg]), (sub[agg], ref_sub[agg])):
            assert np.array_equal(got.brier, ref.brier) and np.array_equal(got.n_matched, ref.n_matched)
            assert np.array_equal(got.det_max_iou, ref.det_max_iou)
        assert not np.array_equal(whole[agg].n_matched, sub[agg].n_matched)  # the subset does change something


@pytest.mark.parametrize(("method", "param"), [("threshold", 0.4), ("topk", 5), ("nms", 0.5)])
def test_split_and_kept_equal_the_split_and_the_kept_set_by_definition(method: str, param: float) -> None:
    dets, _ = _scene(5)
    images = np.arange(14)  # two images without predictions
    pos, neg, kept = split_and_kept(dets.image_id, dets.score, images, method, param, dets.box)
    p2, n2 = split_confidence(dets.image_id, dets.score, images, method, param, box=dets.box)
    k2 = kept_mask(dets.image_id, dets.score, images, method, param, box=dets.box)
    assert np.array_equal(pos, p2) and np.array_equal(neg, n2) and np.array_equal(kept, k2)
    assert kept.any() and not kept.all()
    # the kept set by its definition: score above the threshold, the k best of each image, or greedy NMS
    if method == "nms":
        for i in np.unique(dets.image_id):
            rows = np.flatnonzero(dets.image_id == i)
            ref: list[int] = []
            for r in rows[np.lexsort((rows, -dets.score[rows]))]:  # descending score, ties in input order
                if all(_iou(dets.box[r], dets.box[k]) <= param for k in ref):
                    ref.append(int(r))
            assert set(rows[kept[rows]].tolist()) == set(ref)
    if method == "threshold":
        assert np.array_equal(kept, dets.score > param)
    if method == "topk":
        for i in np.unique(dets.image_id):
            rows = np.flatnonzero(dets.image_id == i)
            best = rows[np.lexsort((rows, -dets.score[rows]))][: int(param)]
            assert set(np.flatnonzero(kept[rows]) + 0) == set(np.searchsorted(rows, best))


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two xyxy boxes, by hand."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0
