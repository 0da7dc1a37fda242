"""Issue 29, eleventh pass, second wave (29v3): COCO AP's category membership and LRP's class sums
without passes over every detection, each against the computation it replaced (kept here as the
reference), to the bit.

* whether a detection's category is evaluated, a byte gather from a table of the ids (the compare of
  the categories at their positions elsewhere);
* LRP's counts from the class starts, its true-positive counts and localisation sums over the true
  positives only (the dense ``np.bincount`` over every sorted row before), on outcomes with IoUs of 1
  (a localisation error of +0.0), classes without detections and the input and accumulate orders.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_shared_matching_29q import _edge_case

import detcal.metrics.accuracy as acc
import detcal.metrics.lrp as lrp_mod
from detcal.metrics.lrp import DetectionOutcomes, detection_outcomes, lrp_table


def _known_by_compare(cats: np.ndarray, category: np.ndarray) -> np.ndarray:
    k = np.searchsorted(cats, category)
    K = len(cats)
    return (k < K) & (cats[np.minimum(k, K - 1)] == category) if K else k < 0


@pytest.mark.parametrize(
    ("cats", "category"),
    [
        ([1, 3, 7], [0, 1, 2, 3, 7, 8, 3, 1]),  # table path, unknown ids between and past the known
        ([2, 5], [5, 5, 2]),
        ([0], [0, 0]),
        ([], [1, 2]),  # no category evaluated
        ([1, 3], []),
        ([-4, 3], [-4, 3, 0, 2]),  # negative ids: the search path
        ([3, 10**12], [10**12, 4, 3]),  # ids too large for a table
    ],
)
def test_known_categories_by_table(cats: list[int], category: list[int]) -> None:
    c = np.array(cats, np.int64)
    d = np.array(category, np.int64)
    pos, known = acc._positions_known(c, d)
    assert np.array_equal(pos, np.searchsorted(c, d)) and pos.dtype == np.searchsorted(c, d).dtype
    assert known.dtype == bool and np.array_equal(known, _known_by_compare(c, d))
    assert np.array_equal(acc.category_positions(c, d), pos)


def test_known_categories_random() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        cats = np.unique(rng.integers(0, 60, int(rng.integers(1, 20))))
        d = rng.integers(0, 70, int(rng.integers(0, 400)))
        pos, known = acc._positions_known(cats, d)
        assert np.array_equal(pos, np.searchsorted(cats, d))
        assert np.array_equal(known, _known_by_compare(cats, d))


def _dense_sums(o: DetectionOutcomes, order: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """The class sums as made before the pass: every sorted row in a weighted ``np.bincount``."""
    C = len(o.gt_categories)
    rows, seg, _ = lrp_mod._class_sorted(o, order)
    tp = o.tp[rows].astype(np.float64)
    loc_w = 1.0 - o.iou[rows]
    loc_w *= tp
    n_tp = np.bincount(seg, weights=tp, minlength=C)
    n_fp = np.bincount(seg, minlength=C).astype(np.float64) - n_tp
    return n_tp, n_fp, np.bincount(seg, weights=loc_w, minlength=C)


def _with_exact_ious(o: DetectionOutcomes, rng: np.random.Generator) -> DetectionOutcomes:
    """``o`` with some true positives' IoUs set to 1 (an error of +0.0) and others made ragged."""
    iou = o.iou.copy()
    tp = np.flatnonzero(o.tp)
    pick = rng.random(len(tp))
    iou[tp[pick < 0.3]] = 1.0
    iou[tp[pick > 0.8]] = np.round(iou[tp[pick > 0.8]], 1)
    return DetectionOutcomes(
        tau=o.tau,
        score=o.score,
        category=o.category,
        image_id=o.image_id,
        valid=o.valid,
        tp=o.tp,
        iou=iou,
        gt_categories=o.gt_categories,
        n_gt=o.n_gt,
        max_dets=o.max_dets,
        considered=o.considered,
    )


@pytest.mark.parametrize("seed", range(4))
def test_lrp_class_sums_over_the_true_positives(seed: int) -> None:
    ds, dets = _edge_case(seed)
    rng = np.random.default_rng(seed)
    for tau in (0.0, 0.5):
        o = _with_exact_ious(detection_outcomes(dets, ds.gt, tau), rng)
        assert o.tp.any()
        for order in (None, acc.accumulate_order(dets, sorted(ds.categories))):
            t = lrp_table(o, order)
            n_tp, n_fp, loc = _dense_sums(o, order)
            assert np.array_equal(t.n_tp, n_tp) and np.array_equal(t.n_fp, n_fp)
            has = n_tp > 0
            n_fn = o.n_gt.astype(np.float64) - n_tp
            scale = 1.0 - o.tau
            with np.errstate(divide="ignore", invalid="ignore"):
                want = {
                    "lrp": np.where(has, (loc / scale + n_fp + n_fn) / (n_tp + n_fp + n_fn), 1.0),
                    "loc": np.where(has, loc / n_tp, np.nan),
                    "fp": np.where(has, n_fp / (n_tp + n_fp), np.nan),
                }
            for k, v in want.items():
                got = getattr(t, k)
                assert np.array_equal(np.isnan(got), np.isnan(v)), k
                assert np.array_equal(got[has].view(np.uint64), v[has].view(np.uint64)), k


def test_lrp_table_without_true_positives_or_rows() -> None:
    o = DetectionOutcomes(
        tau=0.5,
        score=np.array([0.9, 0.4, 0.2]),
        category=np.array([1, 1, 4]),
        image_id=np.array([0, 0, 1]),
        valid=np.array([True, True, False]),
        tp=np.zeros(3, bool),
        iou=np.zeros(3),
        gt_categories=np.array([1, 2, 4]),
        n_gt=np.array([2, 1, 1]),
        max_dets=100,
    )
    t = lrp_table(o)
    assert np.array_equal(t.n_tp, [0.0, 0.0, 0.0]) and np.array_equal(t.n_fp, [2.0, 0.0, 0.0])
    assert np.array_equal(t.lrp, [1.0, 1.0, 1.0]) and np.isnan(t.loc).all()


def test_rank_standing_by_table() -> None:
    every = np.arange(256, dtype=np.uint8)  # every byte: area bits, kept bit and max-dets bits
    got = acc._rank_class(every)
    assert got.dtype == np.int8 and np.array_equal(got, acc._standing(every))
    rng = np.random.default_rng(4)
    rank = rng.integers(-1, 140, 3000)
    packed = acc._pack_cuts(rng.integers(0, 16, 3000).astype(np.uint8), rng.random(3000) < 0.8, rank)
    assert np.array_equal(acc._rank_class(packed), acc._standing(packed))
    assert np.array_equal(acc._rank_class(packed[:0]), np.zeros(0, np.int8))
