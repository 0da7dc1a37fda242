"""The second wave of the ninth speed pass (issue 29) against the plain computations it replaces, to the bit: the
operating points' kept-detection ECEs from one grouped pass, the class-agnostic best IoU without the gather of
every kept detection, TIDE's overlapping pairs without a mask, and OCE's thresholds in one block of pairs."""

from __future__ import annotations

import functools
import importlib

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth, Images
from detcal.metrics.confidence import ConfidenceMetric, ece
from detcal.metrics.oce import AGGREGATIONS, object_scores_of_sets
from detcal.metrics.tide import scene, scene_match

tide_mod = importlib.import_module("detcal.metrics.tide")  # the module (the package exports a function `tide`)
op_mod = importlib.import_module("detcal.metrics.operating_points")


@pytest.mark.parametrize(
    "metric",
    [
        ConfidenceMetric("ece", 15),
        ConfidenceMetric("ece", 10, policy="netcal"),
        ConfidenceMetric("ece", 7, edge_rule="guo"),
        ConfidenceMetric("ece", 15, sample_threshold=3),
    ],
)
@pytest.mark.parametrize("seed", range(3))
def test_kept_eces_from_one_grouped_pass_equal_one_pass_per_rule(metric: ConfidenceMetric, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2000
    p = np.round(rng.random(n), 2)  # values on the bin edges too
    y = rng.random(n) < p
    keeps = [None, p >= 0.4, rng.random(n) < 0.7, np.zeros(n, bool), p < 0.05]
    got = op_mod._ece_kept_all(metric, p, y, keeps)
    plain = functools.partial(lambda m, a, b: m(a, b), metric)  # not a ConfidenceMetric: one pass per rule
    want = op_mod._ece_kept_all(plain, p, y, keeps)
    assert want == [op_mod._ece_kept(metric, p, y, k) for k in keeps]
    assert got == want  # bit for bit (floats compared with ==)
    assert got[3] == {"n": 0, "ece": None}
    assert got[0]["ece"] is not None and got[0]["n"] == n


def test_kept_eces_equal_the_ece_function_of_each_subset() -> None:
    rng = np.random.default_rng(7)
    p = rng.random(500)
    y = rng.random(500) < p
    keep = p > 0.3
    got = op_mod._ece_kept_all(ConfidenceMetric("ece", 15), p, y, [None, keep])
    assert got[0]["ece"] == ece(p, y).value
    assert got[1] == {"n": int(keep.sum()), "ece": ece(p[keep], y[keep]).value}


@pytest.mark.parametrize("seed", range(8))
def test_segment_maxima_equal_those_with_positions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    count = rng.integers(0, 4, 60)
    count[rng.random(60) < 0.3] = 0
    if seed % 2:
        count[:5] = 0  # empty segments first
    if seed % 4 < 2:
        count[-7:] = 0  # and last
    if seed == 6:
        count[:] = 0  # none with a value
    val = np.round(rng.random(int(count.sum())), 1)
    start = np.cumsum(count) - count
    want, _ = tide_mod._seg_argmax(val, start, count, arg=False)
    got = tide_mod._seg_max(val, start, count)
    assert np.array_equal(got, want)
    assert np.all(got[count == 0] == 0.0)


def _set(seed: int) -> tuple[Images, GroundTruth, Detections]:
    """Images with several boxes (some crowd), an image without boxes, detections near the boxes and elsewhere."""
    rng = np.random.default_rng(seed)
    n_img, n_gt, n_det = 8, 30, 160
    images = Images(id=np.arange(n_img), width=np.full(n_img, 200.0), height=np.full(n_img, 200.0))
    g_img = rng.integers(0, n_img - 1, n_gt)
    xy = rng.uniform(0, 100, (n_gt, 2))
    gbox = np.column_stack([xy, xy + rng.uniform(2, 60, (n_gt, 2))])
    gt = GroundTruth(image_id=g_img, box=gbox, category=rng.integers(1, 4, n_gt), iscrowd=rng.random(n_gt) < 0.2)
    pick = rng.integers(0, n_gt, n_det)
    box = gbox[pick] + rng.normal(0, 6, (n_det, 4))
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    d_img = np.where(rng.random(n_det) < 0.8, g_img[pick], rng.integers(0, n_img, n_det))
    score = np.round(rng.random(n_det), 1)
    probs = rng.dirichlet(np.ones(3), n_det)
    dets = Detections(image_id=d_img, box=box, score=score, category=rng.integers(1, 4, n_det), class_probs=probs)
    return images, gt, dets


@pytest.mark.parametrize("seed", range(4))
def test_agnostic_best_iou_is_the_largest_iou_of_every_pair(seed: int) -> None:
    images, gt, dets = _set(seed)
    sc = scene(images, gt, dets, max_dets=15)
    _, _, best = scene_match(sc, 0.5, classwise=False)
    want = np.zeros(len(sc.kd))
    np.maximum.at(want, sc.pr.pd, sc.pr.iou)
    np.maximum.at(want, sc.cr.pd, sc.cr.iou)
    assert len(sc.cr.pd) and np.array_equal(best, want)


@pytest.mark.parametrize("seed", range(4))
def test_overlapping_pairs_equal_every_pair_cut_to_the_overlapping_ones(seed: int) -> None:
    images, gt, dets = _set(seed)
    every, some = scene(images, gt, dets, 15, overlap_only=False), scene(images, gt, dets, 15, overlap_only=True)
    for a, b in ((every.pr, some.pr), (every.cr, some.cr)):
        d, g = dets.box[every.kd[a.pd]], gt.box[a.pg]
        iw = np.minimum(d[:, 2], g[:, 2]) - np.maximum(d[:, 0], g[:, 0])
        ih = np.minimum(d[:, 3], g[:, 3]) - np.maximum(d[:, 1], g[:, 1])
        sel = (iw > 0) & (ih > 0)
        assert 0 < sel.sum() <= len(sel)  # crowd pairs are always the overlapping ones
        assert a is every.cr or sel.sum() < len(sel)
        for name in ("pd", "pg", "iou", "same"):
            assert np.array_equal(getattr(a, name)[sel], getattr(b, name)), name
        assert np.array_equal(np.bincount(a.pd[sel], minlength=len(some.kd)), b.count)
        assert np.array_equal(np.cumsum(b.count) - b.count, b.start)


@pytest.mark.parametrize("brier", ["binary", "multiclass"])
@pytest.mark.parametrize("seed", range(3))
def test_oce_thresholds_in_one_block_equal_each_threshold_alone(brier: str, seed: int) -> None:
    _, gt, dets = _set(seed)
    taus = (0.3, 0.5, 0.75)
    mask = np.random.default_rng(seed).random(len(dets)) < 0.6
    sets = [(None, AGGREGATIONS), (mask, ("mean", "max_iou"))]
    got = object_scores_of_sets(dets, gt, taus, sets, brier=brier, categories=[1, 2, 3])
    for t, tau in enumerate(taus):
        alone = object_scores_of_sets(dets, gt, (tau,), sets, brier=brier, categories=[1, 2, 3])
        for k, (_, aggs) in enumerate(sets):
            for agg in aggs:
                assert np.array_equal(got[k][agg].brier[t], alone[k][agg].brier[0]), (tau, k, agg)
                assert np.array_equal(got[k][agg].n_matched[t], alone[k][agg].n_matched[0])
    assert np.any(got[0]["mean"].n_matched[0] > 1)  # objects with several pairs: the aggregations are exercised


@pytest.mark.parametrize("seed", range(3))
def test_grid_counts_from_one_key_equal_the_summed_flags(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, c = 3000, 7
    score = np.round(rng.random(n), 2)  # on the grid points too
    tp = rng.random(n) < 0.4
    code = rng.integers(0, c, n)
    kept, tps = op_mod._counts(score, tp, code, c)
    want_kept, want_tps = op_mod._counts(score, tp.astype(np.float64), code, c)  # the flags summed as weights
    assert np.array_equal(kept, want_kept) and np.array_equal(tps, want_tps) and tps.dtype == np.float64
    # by hand: kept at threshold GRID[k] when score >= GRID[k]
    k = 37
    at = score >= op_mod.GRID[k]
    assert np.array_equal(kept[:, k], np.bincount(code[at], minlength=c))
    assert np.array_equal(tps[:, k], np.bincount(code[at & tp], minlength=c))
    one = op_mod._counts(score, tp, None, 1)
    zero = op_mod._counts(score, tp, np.zeros(n, np.int64), 1)
    assert np.array_equal(one[0], zero[0]) and np.array_equal(one[1], zero[1])
