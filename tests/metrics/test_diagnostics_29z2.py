"""The ninth speed pass's forms of the diagnostics (issue 29) against the plain computations they replace, to the
bit: TIDE's error codes from per-detection flags against the segment maxima, the per-class table's rows grouped
in one pass against one mask per class, the operating points' per-class F1 from the pooled points in score
order, and the narrow integer types' one home."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest

from detcal.metrics.confidence import SparseCellsWarning, brier, ece, mce
from detcal.metrics.narrow_ints import index_type, narrow_codes, radix_sort, small_sort, sort_code_type
from detcal.reports.per_class import most_frequent, per_class_table

tide_mod = importlib.import_module("detcal.metrics.tide")  # the module (the package exports a function `tide`)
op_mod = importlib.import_module("detcal.metrics.operating_points")


def _pairs(rng: np.random.Generator, n: int) -> tuple[object, np.ndarray, np.ndarray, np.ndarray]:
    """Random pairs of ``n`` detections (some without a pair) with IoUs on a coarse grid (many ties, values at
    the thresholds exactly), GT taken flags and images with and without boxes."""
    count = rng.integers(0, 6, n)
    count[rng.random(n) < 0.2] = 0
    p = int(count.sum())
    pd = np.repeat(np.arange(n), count)
    n_gt = 40
    pg = rng.integers(0, n_gt, p)
    iou = np.round(rng.random(p), 1)  # 0.0, 0.1, ..., 1.0: every threshold hit exactly, ties within a run
    pr = tide_mod._Pairs(pd, pg, np.cumsum(count) - count, count, iou, rng.random(p) < 0.5)
    used = rng.random(n_gt) < 0.4
    got = np.where(rng.random(n) < 0.2, rng.integers(0, n_gt, n), -1)
    has_gt = rng.random(n) < 0.85
    return pr, got, used, has_gt


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pos,bg", [(0.5, 0.1), (0.5, 0.5), (0.3, 0.6), (0.7, 0.2), (1.0, 0.1)])
def test_error_codes_from_flags_equal_segment_maxima(seed: int, pos: float, bg: float) -> None:
    rng = np.random.default_rng(seed)
    pr, got, used, has_gt = _pairs(rng, 300)
    code, target = tide_mod._classify_by_flags(pr, got, used, has_gt, pos, bg)
    want_code, want_target = tide_mod._classify_by_maxima(pr, got, used, has_gt, pos, bg)
    np.testing.assert_array_equal(code, want_code)
    np.testing.assert_array_equal(target, want_target)
    assert {int(c) for c in np.unique(code)} >= {tide_mod.TP, tide_mod.BKG}  # the rules are exercised


def test_error_codes_with_a_nan_iou_take_the_maxima() -> None:
    rng = np.random.default_rng(3)
    pr, got, used, has_gt = _pairs(rng, 50)
    pr.iou[0] = np.nan
    code, target = tide_mod._classify_block(pr, got, used, has_gt, 0.5, 0.1)
    want_code, want_target = tide_mod._classify_by_maxima(pr, got, used, has_gt, 0.5, 0.1)
    np.testing.assert_array_equal(code, want_code)
    np.testing.assert_array_equal(target, want_target)


def _table_by_masks(p: np.ndarray, y: np.ndarray, cat: np.ndarray, bins: int, top_n: int | None) -> list[dict]:
    """The per-class table as it was computed before: one mask of the whole sample per class."""
    rows = []
    for c in most_frequent(cat, top_n):
        m = cat == c
        pc, yc = p[m], y[m].astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SparseCellsWarning)
            e, mc = ece(pc, yc, bins).value, mce(pc, yc, bins).value
        rows.append(
            {"category": int(c), "n": int(m.sum()), "precision": float(yc.mean()), "mean_conf": float(pc.mean()),
             "ece": e, "mce": mc, "brier": brier(pc, yc).value}
        )  # fmt: skip
    return rows


@pytest.mark.parametrize("ids", ["small", "large", "negative"])
@pytest.mark.parametrize("top_n", [None, 3])
def test_per_class_table_equals_one_mask_per_class(ids: str, top_n: int | None) -> None:
    rng = np.random.default_rng(11)
    n = 4000
    cat = rng.choice(np.array([3, 1, 7, 2, 9, 4]), n, p=[0.3, 0.25, 0.2, 0.1, 0.1, 0.05])
    if ids == "large":
        cat = cat * 10**12  # no table of the values: the binary search
    elif ids == "negative":
        cat = cat - 5
    p, y = np.round(rng.random(n), 3), rng.random(n) < 0.4
    got = per_class_table(p, y, cat, {}, bins=7, top_n=top_n)
    want = _table_by_masks(p, y, cat, 7, top_n)
    assert len(got) == len(want) == (top_n or 6)
    for g, w in zip(got, want):
        for k, v in w.items():
            assert g[k] == v or (v != v and g[k] != g[k]), (k, g[k], v)


def test_most_frequent_counts_by_value_as_unique() -> None:
    rng = np.random.default_rng(2)
    cat = rng.integers(0, 50, 3000)
    cats, counts = np.unique(cat, return_counts=True)
    np.testing.assert_array_equal(most_frequent(cat), cats[np.lexsort((cats, -counts))])
    np.testing.assert_array_equal(most_frequent(cat * 10**13, 5), (cats[np.lexsort((cats, -counts))] * 10**13)[:5])


def test_class_f1_from_sorted_points_equals_gathered() -> None:
    rng = np.random.default_rng(4)
    n, c = 2000, 12
    code = rng.integers(0, c - 1, n)
    score, tp = np.round(rng.random(n), 2), rng.random(n) < 0.4
    n_gt = rng.integers(0, 30, c)
    by_score = np.argsort(-score, kind="stable")
    got = op_mod._class_f1_sorted(score[by_score], tp[by_score], code[by_score], n_gt)
    for k in range(c):
        sel = code == k
        want = op_mod.f1_optimal(score[sel], tp[sel], int(n_gt[k]))
        assert np.array_equal(got[k], want, equal_nan=True), k


@pytest.mark.parametrize("bound", [1, 2**15 - 1, 2**15, 2**31])
def test_narrow_types(bound: int) -> None:
    codes = np.array([-1, 0, bound - 1], np.int64)
    assert narrow_codes(codes, bound).dtype == (np.int16 if bound < 2**15 else np.int32 if bound < 2**31 else np.int64)
    assert sort_code_type(bound) is (np.int16 if bound < 2**15 else np.int64)
    assert index_type(bound) is (np.int32 if bound < 2**31 else np.int64)
    np.testing.assert_array_equal(narrow_codes(codes, bound), codes)


@pytest.mark.parametrize("bound", [5, 2**15 + 3])
def test_small_sort_is_the_stable_argsort(bound: int) -> None:
    codes = np.random.default_rng(1).integers(0, bound, 5000)
    np.testing.assert_array_equal(small_sort(codes, bound), np.argsort(codes, kind="stable"))


@pytest.mark.parametrize("bound", [7, 2**15 + 3, 2**16, 2**16 + 1, 3_000_000, 2**32, 2**33])
def test_radix_sort_is_the_stable_argsort(bound: int) -> None:
    rng = np.random.default_rng(bound % 97)
    codes = rng.integers(0, bound, 20_000)
    codes[:50] = bound - 1  # the largest code, repeated (ties keep their order)
    codes[50:100] = 0
    want = np.argsort(codes, kind="stable")
    np.testing.assert_array_equal(radix_sort(codes, bound), want)
    np.testing.assert_array_equal(radix_sort(codes.astype(np.int32) if bound <= 2**31 else codes, bound), want)
