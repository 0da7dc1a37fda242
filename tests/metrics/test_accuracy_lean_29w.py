"""Issue 29, eighth pass (29w): COCO AP/AR's memory-lean paths give the arrays of the paths they replaced
(kept here as the reference): the reference walk's range bits and every area range's segment codes looked
up one threshold row at a time (no int64 copy of the [T, S] positions), and each max-dets' category
blocks and segment positions read off one cumulative count of the kept detections; LRP's outcomes share
the detections' columns read-only. On sets with groups cut at 1, 10 and 100, unknown categories, images
without detections or ground truth, in one piece and in image chunks."""

from __future__ import annotations

import numpy as np
import pytest
from test_shared_matching_29q import _edge_case

import detcal.matching.chunks as chunks_mod
import detcal.metrics.accuracy as acc
from detcal.matching.engine import ExclusiveLayout, exclusive_walk, layout_and_match
from detcal.metrics.lrp import detection_outcomes, lrp_table, outcomes_from_match


def _old_range_walk(layout: ExclusiveLayout, order: np.ndarray, gt_bits: np.ndarray) -> acc._RangeWalk:
    at = np.empty(len(order), np.int64)
    at[order] = np.arange(len(order), dtype=np.int64)
    pos = at[layout.k_det]
    seg = acc._position_order(pos, len(order))
    gt_bits_w = gt_bits[layout.gt_row]
    lut = np.empty(len(gt_bits_w) + 1, np.uint8)
    lut[0] = acc._NO_GT
    lut[1:] = gt_bits_w
    chosen = exclusive_walk(layout)
    chosen += 1
    return acc._RangeWalk(layout, seg, pos[seg], np.take(np.take(lut, chosen), seg, axis=1), gt_bits_w)


def _old_max_dets_orders(
    rank: np.ndarray, keep: np.ndarray, det_cat_k: np.ndarray, K: int, seg_pos: np.ndarray
) -> list[acc._Kept]:
    out: list[acc._Kept] = []
    for md in reversed(acc.MAX_DETS):
        if out and not (keep & (rank >= md)).any():
            out.append(out[-1])
            continue
        keep = keep & (rank < md)
        if keep.all():
            cat_bounds = np.searchsorted(det_cat_k, np.arange(K + 1))
            out.append(acc._Kept(None, cat_bounds, None, seg_pos, np.searchsorted(seg_pos, cat_bounds)))
            continue
        rows = np.flatnonzero(keep)
        cat_bounds = np.searchsorted(det_cat_k[rows], np.arange(K + 1))
        sel = np.flatnonzero(keep[seg_pos])
        place = np.cumsum(keep, dtype=np.int64)
        pos = place[seg_pos[sel]] - 1
        out.append(acc._Kept(rows, cat_bounds, sel, pos, np.searchsorted(pos, cat_bounds)))
    return out[::-1]


def _kepts_equal(a: list[acc._Kept], b: list[acc._Kept]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in acc._Kept._fields:
            u, v = getattr(x, name), getattr(y, name)
            assert (u is None) == (v is None), name
            if u is not None:
                assert u.dtype == v.dtype and np.array_equal(u, v), name


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("chunk", [None, 30])
def test_coco_arrays_equal_the_replaced_lookups(seed: int, chunk: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if chunk is not None:
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", chunk)
    ds, dets = _edge_case(seed)
    seen: list[tuple[list[acc._Kept], tuple]] = []
    new_orders = acc._max_dets_orders

    def both(*args: np.ndarray) -> list[acc._Kept]:
        got = new_orders(*args)
        seen.append((got, args))
        return got

    monkeypatch.setattr(acc, "_max_dets_orders", both)
    got = acc.coco_eval_arrays(dets, ds)
    assert seen and seen[0][0][0].rows is not None  # the max-dets cut something: the cumulative-count path
    _kepts_equal(seen[0][0], _old_max_dets_orders(*seen[0][1]))
    monkeypatch.setattr(acc, "_max_dets_orders", _old_max_dets_orders)
    monkeypatch.setattr(acc, "_range_walk", _old_range_walk)
    monkeypatch.setattr(acc, "_take_rows", np.take)
    want = acc.coco_eval_arrays(dets, ds)
    for k in want:
        assert got[k].dtype == want[k].dtype and np.array_equal(got[k], want[k]), k


def test_take_rows_equals_take() -> None:
    rng = np.random.default_rng(0)
    table = rng.integers(-5, 5, 40).astype(np.int8)
    for shape in ((10, 0), (3, 17), (1, 5)):
        for dtype in (np.uint8, np.int32):
            idx = rng.integers(0, 40, shape).astype(dtype)
            out = acc._take_rows(table, idx)
            assert out.dtype == table.dtype and np.array_equal(out, np.take(table, idx))


def test_lrp_outcomes_share_the_detections_read_only() -> None:
    ds, dets = _edge_case(2)
    _, m = layout_and_match(dets, ds.gt, acc.IOU_THRESHOLDS.tolist(), (0.5,), max_dets=100)
    o = outcomes_from_match(dets, ds.gt, 0.5, m.matched[0], m.ignored[0], m.gt_index[0], m.considered)
    for name in ("score", "category", "image_id"):
        col, det_col = getattr(o, name), getattr(dets, name)
        assert np.shares_memory(col, det_col) and np.array_equal(col, det_col)
        assert not col.flags.writeable and det_col.flags.writeable  # the detections stay writable
        with pytest.raises(ValueError):
            col[0] = col[0]
    want = lrp_table(detection_outcomes(dets, ds.gt, 0.5))
    for k, v in vars(lrp_table(o)).items():
        assert np.array_equal(np.asarray(v), np.asarray(getattr(want, k)), equal_nan=True), k
