"""OCE, the uq_detr variants of D-ECE / LaECE / LRP and the image-level reliability equal uq-detr 0.1.1.

uq-detr (Park, Sobolewski and Azizan, TPAMI 2026) is a test-only dependency (the ``test`` extra). Every
number below is computed by uq-detr in the test itself, on the bundled detectors and on synthetic sets
with class distributions generated here; detcal must agree to 1e-12.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth
from detcal.data.bundled import DETECTORS, load
from detcal.metrics.image_reliability import contrastive_conf, fit_lambda, per_image_oce, split_confidence
from detcal.metrics.oce import object_scores
from detcal.metrics.uq_detr import range_bins, uq_detr_suite

uq = pytest.importorskip("uq_detr")
assert uq.__version__ == "0.1.1"

TOL = 1e-12
AGGREGATIONS = ("mean", "max_iou", "iou_weighted")


def _to_uq(images: np.ndarray, dets: Detections, gt: GroundTruth, probs: np.ndarray | None = None) -> tuple[list, list]:
    """uq-detr's per-image inputs: every GT box an object, detections in the results' order."""
    out_d, out_g = [], []
    for i in images:
        m = dets.image_id == i
        scores = dets.score[m] if probs is None else probs[m]
        out_d.append(uq.Detections(boxes=dets.box[m], scores=scores, labels=dets.category[m]))
        g = gt.image_id == i
        out_g.append(uq.GroundTruth(boxes=gt.box[g], labels=gt.category[g]))
    return out_d, out_g


def _check_all(
    images: np.ndarray,
    dets: Detections,
    gt: GroundTruth,
    probs: np.ndarray | None = None,
    categories: np.ndarray | None = None,
) -> None:
    D, G = _to_uq(images, dets, gt, probs)
    if probs is not None:
        dets = Detections(
            image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category, class_probs=probs
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # uq-detr warns that it uses the binary approximation
        for agg in AGGREGATIONS:
            ref = uq.oce(D, G, aggregation=agg)
            s = object_scores(dets, gt, aggregation=agg, variant="uq_detr", categories=categories)
            assert s.brier_kind == ("binary" if probs is None else "multiclass")
            assert abs(s.value - ref.score) <= TOL, agg
            # per-object scores: uq-detr lists them image by image, in each image's GT order
            order = np.concatenate([np.flatnonzero(gt.image_id == i) for i in images])
            assert np.array_equal(s.gt_rows, np.arange(len(gt)))
            np.testing.assert_allclose(s.per_object[order], ref.per_element, rtol=0, atol=TOL)
    for crit in ("greedy", "independent"):
        got = uq_detr_suite(dets, gt, tp_criterion=crit)
        assert abs(got["dece"].value - uq.dece(D, G, tp_criterion=crit).score) <= TOL, crit
        assert abs(got["laece"].value - uq.laece(D, G, tp_criterion=crit).score) <= TOL, crit
    assert abs(got["lrp"].value - uq.lrp(D, G).score) <= TOL


@pytest.mark.parametrize("detector", DETECTORS)
def test_bundled_79_equal(detector: str) -> None:
    ds, dets = load("coco_mini79", detector=detector)
    assert ds.gt.iscrowd.any()  # crowd boxes are plain objects for uq-detr, and for the uq_detr variants
    _check_all(ds.images.id, dets, ds.gt)


@pytest.mark.slow
@pytest.mark.parametrize("detector", DETECTORS)
def test_bundled_5k_equal(detector: str) -> None:
    ds, dets = load("coco_tfzoo", detector=detector)
    _check_all(ds.images.id, dets, ds.gt)


def _synthetic(seed: int, n_img: int = 40, queries: int = 30, n_cls: int = 4) -> tuple:
    """Raw DETR-like outputs: per image up to ``queries`` boxes near the objects or anywhere, with a
    softmax class distribution over ``n_cls`` classes plus background (the background column dropped)."""
    rng = np.random.default_rng(seed)
    cats = np.array([2, 5, 11, 40][:n_cls])
    images = np.arange(1000, 1000 + n_img)
    n_obj = rng.integers(0, 6, n_img)
    gi = np.repeat(images, n_obj)
    xy = rng.uniform(0, 200, (len(gi), 2))
    gbox = np.hstack([xy, xy + rng.uniform(10, 60, (len(gi), 2))])
    gcat = cats[rng.integers(0, n_cls, len(gi))]
    gt = GroundTruth(image_id=gi, box=gbox, category=gcat)
    n_q = rng.integers(0, queries, n_img)
    di = np.repeat(images, n_q)
    near = rng.uniform(size=len(di)) < 0.6
    box = np.zeros((len(di), 4))
    xy = rng.uniform(0, 200, (len(di), 2))
    box[:] = np.hstack([xy, xy + rng.uniform(10, 60, (len(di), 2))])
    for k in np.flatnonzero(near):  # a jittered copy of one of the image's objects (test data only)
        own = np.flatnonzero(gi == di[k])
        if len(own):
            box[k] = gbox[rng.choice(own)] + rng.normal(0, 4, 4)
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    logits = rng.normal(0, 2, (len(di), n_cls + 1))
    p = np.exp(logits)
    probs = (p / p.sum(axis=1, keepdims=True))[:, :n_cls]
    label = cats[probs.argmax(axis=1)]
    dets = Detections(image_id=di, box=box, score=probs.max(axis=1), category=label)
    return images, dets, gt, probs, cats


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_synthetic_with_class_distributions_equal(seed: int) -> None:
    images, dets, gt, probs, cats = _synthetic(seed)
    # uq-detr indexes the class distribution by the label: give it column indices
    col = {int(c): i for i, c in enumerate(cats)}
    gt_col = GroundTruth(image_id=gt.image_id, box=gt.box, category=[col[int(c)] for c in gt.category])
    dets_col = Detections(
        image_id=dets.image_id, box=dets.box, score=dets.score, category=[col[int(c)] for c in dets.category]
    )
    _check_all(images, dets_col, gt_col, probs, categories=np.arange(len(cats)))
    # and the same numbers with the category ids themselves (columns in ascending id order)
    D, G = _to_uq(images, dets_col, gt_col, probs)
    full = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category, class_probs=probs)
    assert abs(object_scores(full, gt, variant="uq_detr", categories=cats).value - uq.oce(D, G).score) <= TOL
    # binary approximation on the same set
    _check_all(images, dets, gt)


@pytest.mark.parametrize(
    ("method", "param"), [("threshold", 0.3), ("threshold", 0.5), ("topk", 5), ("topk", 1), ("nms", 0.5), ("nms", 0.3)]
)
def test_contrastive_conf_and_fit_lambda_equal(method: str, param: float) -> None:
    images, dets, gt, probs, cats = _synthetic(7, n_img=60, queries=50)
    queries = [uq.Detections(boxes=dets.box[dets.image_id == i], scores=probs[dets.image_id == i]) for i in images]
    for lam in (0.0, 2.5, 5.0):
        ref = uq.contrastive_conf(queries, method=method, param=param, lambda_=lam)
        got = contrastive_conf(dets.image_id, dets.score, images, method, param, lam, box=dets.box)
        np.testing.assert_allclose(got, ref, rtol=0, atol=TOL)
    # lambda fitted against minus the per-image OCE of the thresholded outputs (NaN: no object)
    kept = dets.score > 0.3
    s = object_scores(dets.select(kept), gt, variant="uq_detr")
    rel = -per_image_oce(s, images)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_lam, ref_r = uq.fit_lambda(queries, rel, method=method, param=param)
    pos, neg = split_confidence(dets.image_id, dets.score, images, method, param, box=dets.box)
    lam, r, _ = fit_lambda(pos, neg, rel)
    assert lam == ref_lam and abs(r - ref_r) <= TOL
    # the per-image OCE is uq-detr's OCE of that image alone
    D, G = _to_uq(images, dets.select(kept), gt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in np.flatnonzero(~np.isnan(rel))[:10]:
            assert abs(-rel[k] - uq.oce([D[k]], [G[k]]).score) <= TOL


def test_range_bins_are_linspace_digitize() -> None:
    rng = np.random.default_rng(11)
    for n, bins in ((1, 25), (2, 3), (500, 25), (200, 10)):
        x = np.round(rng.uniform(0.2, 0.95, n), 3)  # rounded: values on the edges occur
        group = rng.integers(0, 3, n)
        if n > 2:  # group 0 also holds every edge of its own range exactly
            x = np.concatenate([x, np.linspace(0.2, 0.95, bins + 1)])
            group = np.concatenate([group, np.zeros(bins + 1, np.int64)])
        got = range_bins(x, group, 3, bins)
        for g in np.unique(group):
            xs = x[group == g]
            want = np.clip(np.digitize(xs, np.linspace(xs.min(), xs.max(), bins + 1), right=True), 1, bins) - 1
            assert np.array_equal(got[group == g], want)
