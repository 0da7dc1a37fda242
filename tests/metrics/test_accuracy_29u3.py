"""Issue 29, eleventh pass (29u3): COCO AP/AR, LRP and LaECE without the gathers and repeated work they
did, each against the computation it replaced (kept here as the reference), to the bit.

* the matches to an ignored GT before each true positive, counted by placing the few among the many;
* the per-class AP and AP50 as one pass over every category (the per-category loop of ``_summarize``);
* the area bits, the kept flag and the max-dets standing packed in one byte (one gather in accumulate
  order), and the max-dets cuts made from it;
* COCO AP/AR on sets at the area-range edges with each range written in place (one process) against the
  stacked arrays of the ranges computed apart (two processes);
* LaECE/LaACE over every row in input order (excluded rows in a class of their own) against the
  gathered sample, ``extra`` fields included; LRP's class values repeated over their rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_shared_matching_29q import _edge_case

import detcal.metrics.accuracy as acc
import detcal.metrics.laece as laece_mod
import detcal.metrics.lrp as lrp_mod
from detcal.metrics.lrp import detection_outcomes, lrp_table


def test_counts_below_equal_searchsorted() -> None:
    rng = np.random.default_rng(0)
    for n, k in ((0, 0), (5, 0), (1000, 30), (200, 200), (50, 3)):
        both = rng.permutation(4 * (n + k) + 1)[: n + k]
        many, few = np.sort(both[:n]), np.sort(both[n:])
        for dt in (np.int32, np.int64):
            got = acc._counts_below(few, many, np.dtype(dt))
            assert got.dtype == dt and np.array_equal(got, np.searchsorted(few, many))


@pytest.mark.parametrize("seed", range(3))
def test_class_means_equal_the_per_class_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    T, R, K, A, M = len(acc.IOU_THRESHOLDS), len(acc.RECALL_THRESHOLDS), 37, len(acc.AREA_RANGES), 3
    p = np.round(rng.random((T, R, K, A, M)), int(rng.integers(1, 6)))
    p[:, :, [3, 8]] = -1.0  # no ground truth
    p[:, 60:, 5] = 0.0
    p[0, 0, 11, 0, 2] = -1.0  # a mix (never made by coco_eval_arrays): read by the loop
    arrays = {"precision": p}
    for iou in (None, 0.5):
        want = np.array([acc._summarize(arrays, "ap", iou, "all", 100, k) for k in range(K)])
        got = acc._class_means(arrays, iou)
        assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    assert acc._class_means({"precision": p[:, :, :0]}, None).shape == (0,)


def test_packed_cuts_stand_as_the_ranks() -> None:
    rng = np.random.default_rng(1)
    rank = rng.integers(-1, 140, 500)
    keep = rng.random(500) < 0.7
    area = rng.integers(0, 16, 500).astype(np.uint8)
    packed = acc._pack_cuts(area, keep, rank)
    assert np.array_equal(packed & np.uint8(15), area)
    assert np.array_equal((packed & acc._KEPT_BIT) > 0, keep)
    stand = acc._rank_class(packed)
    for md in acc.MAX_DETS:
        assert np.array_equal(stand < md, rank < md) and np.array_equal(stand >= md, rank >= md)


@pytest.mark.parametrize("seed", range(4))
def test_coco_ranges_in_place_equal_stacked(seed: int) -> None:
    ds, dets = _edge_case(seed)
    one = acc.coco_eval_arrays(dets, ds)
    two = acc.coco_eval_arrays(dets, ds, workers=2)
    for k in ("precision", "recall"):
        assert one[k].dtype == two[k].dtype and np.array_equal(one[k], two[k]), k
    assert (one["precision"] > 0).any() and (one["recall"] > 0).any()


def _gathered(o: lrp_mod.DetectionOutcomes, s: np.ndarray, keep_ignored: bool) -> tuple[np.ndarray, ...]:
    ci = o.class_index()
    pool = o.considered if keep_ignored and o.considered is not None else o.valid
    rows = np.flatnonzero(pool & (ci >= 0))
    return rows, ci[rows], s[rows], np.where(o.tp[rows], o.iou[rows], 0.0)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("variant", ["kuzucu2024", "fiveai"])
def test_laece_sample_over_every_row(seed: int, variant: str) -> None:
    ds, dets = _edge_case(seed)
    o = detection_outcomes(dets, ds.gt, 0.1)
    C = len(o.gt_categories)
    for keep_ignored in (False, True):
        sample = laece_mod._sample(o, o.score, keep_ignored)
        rows, cls, sv, tgt = _gathered(o, o.score, keep_ignored)
        assert sample.n == len(rows) and sample.n < len(dets)
        got_rows = sample.rows()
        for a, b in zip(got_rows, (rows, cls, sv, tgt)):
            assert np.array_equal(a, b)
        b = laece_mod.bin_index(sv, 25)
        want = laece_mod._class_errors(cls, b, sv, tgt, C, 25)
        got = laece_mod._class_errors(sample.cls, laece_mod.bin_index(sample.s, 25), sample.s, sample.target, C, 25)
        for x, y in zip(got, want):
            assert np.array_equal(x, y, equal_nan=True)
    e, a = laece_mod.laece_and_laace(o, variant=variant)
    assert e.extra["n_detections"] == len(_gathered(o, o.score, False)[0])
    keep = variant == "fiveai"
    _, cls, sv, tgt = _gathered(o, o.score, keep)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = np.bincount(cls, weights=np.abs(sv - tgt), minlength=C) / np.bincount(cls, minlength=C)
    assert np.array_equal(a.table["class_error"], err, equal_nan=True)


def test_segment_cumsum_repeats_the_class_base() -> None:
    rng = np.random.default_rng(2)
    seg = np.sort(rng.integers(0, 9, 300))
    seg[seg == 4] = 5  # a class without rows
    x = rng.random(300)
    c = np.cumsum(x)
    start = np.searchsorted(seg, np.arange(9))
    base = np.zeros(9)
    base[start > 0] = c[start[start > 0] - 1]
    want = c - base[seg]
    got = lrp_mod._segment_cumsum(x, seg, 9)
    assert np.array_equal(got.view(np.uint64), want.view(np.uint64))
    assert np.array_equal(lrp_mod._segment_cumsum(x, seg, 9, np.bincount(seg, minlength=9)), got)


@pytest.mark.parametrize("seed", range(3))
def test_lrp_table_with_and_without_the_order(seed: int) -> None:
    ds, dets = _edge_case(seed)
    o = detection_outcomes(dets, ds.gt, 0.0)
    a = lrp_table(o, acc.accumulate_order(dets, sorted(ds.categories)))
    b = lrp_table(o)
    for k in ("lrp", "loc", "fp", "fn", "olrp", "olrp_loc", "olrp_fp", "olrp_fn", "threshold", "n_tp", "n_fp"):
        assert np.array_equal(getattr(a, k), getattr(b, k), equal_nan=True), k
    assert np.isfinite(a.threshold).any()
