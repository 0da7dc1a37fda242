"""The memory-lean paths of the shared COCO AP/LRP matching (issue 29, eighth pass), each against the
path it replaced, kept here as the reference: the layouts of image chunks joined part by part
(:func:`detcal.matching.engine.join_layouts`, each part's arrays released as written) equal to the
concatenate-then-gather join; the greedy walk's one-pair steps written through their mask equal to the
walk through the (threshold, segment) index pairs; at chunk sizes down to one image, with images
without ground truth, images without detections and chunks without a single pair."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from test_matching import make_coco, to_records

import detcal.matching.blocks as blocks_mod
import detcal.matching.chunks as chunks_mod
from detcal.core.types import Detections, GroundTruth
from detcal.matching.blocks import stable_argsort
from detcal.matching.chunks import image_chunks, layout_chunk_size, row_numbers
from detcal.matching.engine import (
    ExclusiveLayout,
    exclusive_layout,
    exclusive_walk,
    join_layouts,
    layout_and_match,
    layout_match,
    match,
)

_WHOLE = 10**9


def _data(seed: int, n_images: int = 40, with_wh: bool = True) -> tuple[GroundTruth, Detections]:
    """A seeded COCO-like set (crowd boxes, IoU ties) with images 3, 7, 8 without ground truth, images 5, 11
    without detections, images 20-23 with detections but no ground truth of their classes, and the input's
    ``w * h`` areas (their bits differ from the corners' on some boxes)."""
    gt, dets = to_records(*make_coco(n_images=n_images, seed=seed, dets_per_img=20.0, crowd_frac=0.1))
    gt = gt.select(~np.isin(gt.image_id, [3, 7, 8, 20, 21, 22, 23]))
    dets = dets.select(~np.isin(dets.image_id, [5, 11]))
    if with_wh:
        rng = np.random.default_rng(seed)
        wh = np.stack([dets.box[:, 2] - dets.box[:, 0], dets.box[:, 3] - dets.box[:, 1]], axis=1)
        wh *= 1.0 + rng.choice([0.0, 1e-15], size=wh.shape)  # a last-bit difference here and there
        dets = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dets.category, wh=wh)
    return gt, dets


def _old_join(parts: Sequence[tuple[np.ndarray, np.ndarray, ExclusiveLayout]], n_det: int) -> ExclusiveLayout:
    """The join this pass replaced: every part concatenated, then gathered in the joined walk order."""
    ls = [lay for _, _, lay in parts]
    w_off = np.cumsum([0] + [len(lay.gt_row) for lay in ls])
    g_off = np.cumsum([0] + [(int(lay.gt_grp[-1]) + 1 if len(lay.gt_grp) else 0) for lay in ls])
    p_off = np.cumsum([0] + [len(lay.pair_iou) for lay in ls])

    def codes(lay: ExclusiveLayout) -> np.ndarray:
        n = len(lay.step_multi)
        bounds = np.empty(2 * n + 1, np.int64)
        bounds[0::2], bounds[1::2] = lay.step_seg, lay.step_multi
        return np.repeat(np.arange(2 * n, dtype=np.int64), np.diff(bounds))

    code = np.concatenate([codes(lay) for lay in ls])
    so = stable_argsort([code]) if len(code) else np.zeros(0, np.int64)
    code = code[so]
    seg_start = np.concatenate([lay.seg_start + p_off[i] for i, lay in enumerate(ls)])
    counts = np.diff(np.append(seg_start, p_off[-1]))[so]
    new_start = np.cumsum(counts) - counts
    pick = np.repeat(seg_start[so] - new_start, counts) + np.arange(int(p_off[-1]), dtype=np.int64)
    n_steps = int(code[-1]) // 2 + 1 if len(code) else 0
    rank = np.full(n_det, -1, np.int64)
    considered = np.zeros(n_det, bool)
    for d_rows, _, lay in parts:
        rank[d_rows], considered[d_rows] = lay.rank, lay.considered

    def cat(name: str, offsets: np.ndarray | None = None, rows: int | None = None) -> np.ndarray:
        vals = [getattr(lay, name) for lay in ls]
        if offsets is not None:
            vals = [v + offsets[i] for i, v in enumerate(vals)]
        if rows is not None:
            vals = [parts[i][rows][v] for i, v in enumerate(vals)]
        return np.concatenate(vals)

    return ExclusiveLayout(
        n_det=n_det,
        k_det=cat("k_det", rows=0)[so],
        pair_iou=cat("pair_iou")[pick],
        pair_g=cat("pair_g", w_off)[pick],
        pair_tie=cat("pair_tie", w_off)[pick],
        pair_seg=np.repeat(np.arange(len(so), dtype=np.int64), counts),
        seg_start=new_start,
        step_seg=np.searchsorted(code, 2 * np.arange(n_steps + 1)),
        step_multi=np.searchsorted(code, 2 * np.arange(n_steps) + 1),
        thr=ls[0].thr,
        gt_row=cat("gt_row", rows=1),
        gt_ign=cat("gt_ign"),
        gt_crowd=cat("gt_crowd"),
        g_of_tie=cat("g_of_tie", w_off),
        considered=considered,
        rank=rank,
        strict=ls[0].strict,
        k_grp=cat("k_grp", g_off)[so],
        gt_grp=cat("gt_grp", g_off),
    )


def _assert_same_layout(a: ExclusiveLayout, b: ExclusiveLayout) -> None:
    for name in ExclusiveLayout._fields:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name
        else:
            assert x == y, name


def _parts(dets: Detections, gt: GroundTruth, thr: list[float], size: int) -> list:
    out = []
    for c in image_chunks(dets.image_id, gt.image_id, size):
        lay = exclusive_layout(dets.select(c.det), gt.select(c.gt), thr, max_dets=10)
        out.append((row_numbers(c.det, len(dets)), row_numbers(c.gt, len(gt)), lay))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("size", [1, 9, 57, 400])
def test_join_part_by_part_equals_concatenate_then_gather(seed: int, size: int) -> None:
    gt, dets = _data(seed)
    dets = dets.select(np.random.default_rng(seed).permutation(len(dets)))  # rows not in image order
    thr = [0.5, 0.6, 0.75, 0.9]
    parts = _parts(dets, gt, thr, size)
    assert len(parts) > 1
    assert any(len(lay.pair_iou) == 0 for _, _, lay in parts) or size > 9  # small chunks: some without a pair
    want = _old_join(parts, len(dets))
    work = list(parts)
    got = join_layouts(work, len(dets))
    assert work == []  # the parts are consumed
    _assert_same_layout(got, want)


def test_join_of_parts_without_pairs_or_segments() -> None:
    """Every part without a pair (no image has ground truth of its detections' classes), and a mix with one."""
    gt, dets = _data(4, n_images=24)
    thr = [0.5, 0.75]
    far = GroundTruth(  # boxes of other classes only: no pair anywhere
        image_id=gt.image_id, box=gt.box, category=np.full(len(gt), 99), iscrowd=gt.iscrowd, id=gt.id
    )
    for g in (far, gt):
        parts = _parts(dets, g, thr, 15)
        want = _old_join(parts, len(dets))
        _assert_same_layout(join_layouts(list(parts), len(dets)), want)
    none = _parts(dets, far, thr, 15)
    joined = join_layouts(list(none), len(dets))
    assert len(joined.pair_iou) == 0 and len(joined.k_det) == 0 and len(joined.step_seg) == 1


@pytest.mark.parametrize("seed", [0, 3])
def test_layout_and_match_in_chunks_equals_one_pass(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared pass at every chunk size: the layout equal (array for array) to the one of a single chunk,
    and the match equal to :func:`match`'s; the layout's chunks are half the matcher's."""
    gt, dets = _data(seed)
    thr_l, thr_m = [0.5, 0.55, 0.75, 0.95], [0.1]
    monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", _WHOLE)
    whole_lay, whole_m = layout_and_match(dets, gt, thr_l, thr_m, max_dets=12)
    ref = match(dets, gt, thr_m, max_dets=12)
    for size in (2, 17, 90, len(dets)):
        monkeypatch.setattr(chunks_mod, "CHUNK_DETECTIONS", size)
        assert layout_chunk_size() == max(1, size // 2)
        lay, m = layout_and_match(dets, gt, thr_l, thr_m, max_dets=12)
        for name in ("matched", "ignored", "gt_index", "considered"):
            a, b = getattr(m, name), getattr(whole_m, name)
            assert a.dtype == b.dtype and np.array_equal(a, b), (size, name)
            assert np.array_equal(a, getattr(ref, name)), (size, name)
        # the joined layout walks as the one-chunk layout (its walk order within a step may differ)
        assert np.array_equal(lay.rank, whole_lay.rank) and np.array_equal(lay.considered, whole_lay.considered)
        for a, b in zip(layout_match(lay), layout_match(whole_lay)):
            assert np.array_equal(a, b), size


def _old_single_pair_step(
    pair_iou: np.ndarray,
    pair_g: np.ndarray,
    thr_pair: np.ndarray,
    strict: bool,
    pair_crowd: np.ndarray | None,
    p0: int,
    s0: int,
    s1: int,
    taken: np.ndarray,
    chosen: np.ndarray,
) -> None:
    """The one-pair step this pass replaced: through the (threshold, segment) pairs of its true entries
    (in the walk's present layout: ``taken`` [GT, T], each pair's crowd flag given, None for none)."""
    p1 = p0 + (s1 - s0)
    g = pair_g[p0:p1]
    iou = pair_iou[p0:p1]
    thr = thr_pair[:, p0:p1] if thr_pair.shape[1] > 1 else thr_pair
    ok = (iou > thr) if strict else (iou >= thr)
    crowd = np.zeros(len(g), bool) if pair_crowd is None else pair_crowd[p0:p1]
    ok &= crowd | ~taken[g].T
    ti, si = np.nonzero(ok)
    gi = g[si]
    taken[gi, ti] = True
    chosen[ti, s0 + si] = gi


@pytest.mark.parametrize("seed", [0, 1, 5])
def test_single_pair_steps_through_the_mask_equal_index_pairs(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The greedy walk (every threshold, crowd boxes reused, strict and not) with the one-pair steps written
    through their mask gives the chosen GTs of the walk through index pairs, under several GT flag sets."""
    gt, dets = _data(seed, with_wh=False)
    lay = exclusive_layout(dets, gt, [0.0, 0.3, 0.5, 0.75, 0.9, 1.0], max_dets=20)
    assert (lay.step_multi > lay.step_seg[:-1]).any() and (lay.step_seg[1:] > lay.step_multi).any()  # both kinds
    rng = np.random.default_rng(seed)
    flag_sets = [None, rng.random(len(lay.gt_row)) < 0.3, np.ones(len(lay.gt_row), bool)]
    for strict in (False, True):
        walk = lay._replace(strict=strict)
        got = [exclusive_walk(walk, f) for f in flag_sets]
        monkeypatch.setattr(blocks_mod, "_single_pair_step", _old_single_pair_step)
        want = [exclusive_walk(walk, f) for f in flag_sets]
        monkeypatch.undo()
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and np.array_equal(a, b)
