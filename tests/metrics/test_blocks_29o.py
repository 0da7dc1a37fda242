"""The blocked paths of the diagnostics and the confidence block (issue 29, sixth pass) equal the whole
computation and plain references: TIDE's pairs read in blocks of detections (any block size, blocks without
a pair), the per-class F1-optimal points in blocks of classes, the cell sums with their y halves as two
blocks, and the per-cell summary shared by the measures of one grid."""

from __future__ import annotations

import numpy as np
import pytest

import detcal.metrics.operating_points as op_mod
import detcal.metrics.tide as tide_mod
from detcal.binning.cells import cell_stats
from detcal.core.types import Detections, GroundTruth, Images
from detcal.matching.blocks import box_areas
from detcal.metrics.confidence_compute import summaries_shared
from detcal.metrics.confidence_suite import suite
from detcal.metrics.operating_points import class_blocks, f1_optimal
from detcal.metrics.tide import scene, tide


def _boxes(rng: np.random.Generator, n: int, size: float = 60.0) -> np.ndarray:
    xy = rng.uniform(0, 100, (n, 2))
    return np.column_stack([xy, xy + rng.uniform(2, size, (n, 2))])


def _set(seed: int = 0) -> tuple[Images, GroundTruth, Detections]:
    """Images with several boxes (some crowd), images without boxes, detections near the boxes and elsewhere,
    equal scores, more detections in an image than ``max_dets``."""
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
    d_img = np.concatenate([g_img[rng.integers(0, 40, 150)], rng.integers(0, n_img, 60)])
    d_img[:30] = 0  # image 0: more detections than max_dets below
    score = np.round(rng.random(210), 1)  # many equal scores
    dets = Detections(image_id=images.id[d_img], box=box, score=score, category=rng.integers(1, 4, 210))
    return images, gt, dets


def _pairs_reference(
    images: Images, gt: GroundTruth, dets: Detections, kd: np.ndarray, crowd: bool
) -> list[tuple[int, int, float]]:
    """(kept position, GT row, IoU) of every overlapping pair, one detection and one box at a time."""
    d_img, g_img = images.index_of(dets.image_id), images.index_of(gt.image_id)
    da, ga = box_areas(dets.box, dets.wh), box_areas(gt.box, gt.wh)
    out = []
    for k, d in enumerate(kd):
        for g in range(len(gt.box)):  # GT rows in input order within the image
            if g_img[g] != d_img[d] or bool(gt.iscrowd[g]) != crowd:
                continue
            a, b = dets.box[d], gt.box[g]
            iw = min(a[2], b[2]) - max(a[0], b[0])
            ih = min(a[3], b[3]) - max(a[1], b[1])
            if iw > 0 and ih > 0:
                inter = iw * ih
                out.append((k, g, inter / (da[d] if crowd else da[d] + ga[g] - inter)))
    return out


@pytest.mark.parametrize("chunk", [1, 5, 64, 1 << 17])
def test_scene_pairs_in_blocks_equal_the_pair_by_pair_reference(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    images, gt, dets = _set()
    monkeypatch.setattr(tide_mod, "_CHUNK", chunk)
    sc = scene(images, gt, dets, max_dets=20)
    assert len(sc.kd) < len(dets)  # the max_dets cut is exercised
    for pr, crowd in ((sc.pr, False), (sc.cr, True)):
        want = _pairs_reference(images, gt, dets, sc.kd, crowd)
        got = sorted(zip(pr.pd.tolist(), pr.pg.tolist(), pr.iou.tolist()))
        assert [(k, g) for k, g, _ in got] == sorted((k, g) for k, g, _ in want)
        assert np.array_equal([v for *_, v in got], [v for *_, v in sorted(want)])  # bit for bit
        # pairs grouped by kept detection, in order, with their start and count
        assert np.all(np.diff(pr.pd) >= 0)
        assert np.array_equal(pr.count, np.bincount(pr.pd, minlength=len(sc.kd)))
        assert np.array_equal(pr.start, np.cumsum(pr.count) - pr.count)
        assert np.array_equal(pr.same, dets.category[sc.kd[pr.pd]] == gt.category[pr.pg])


def test_tide_is_the_same_for_every_pair_block_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole TIDE result (dAPs, per-detection types, targets) does not depend on the block size."""
    images, gt, dets = _set(3)
    results = []
    for chunk in (1, 3, 1 << 17):
        monkeypatch.setattr(tide_mod, "_CHUNK", chunk)
        results.append(tide(images, gt, dets, max_dets=20))
    for r in results[1:]:
        assert (r.ap, r.main, r.special, r.counts) == (results[0].ap, results[0].main, results[0].special,
                                                      results[0].counts)  # fmt: skip
        for name in ("code", "ignored", "target", "missed", "matched_gt"):
            assert np.array_equal(getattr(r, name), getattr(results[0], name)), name
    assert (results[0].code >= 0).any() and (results[0].code > 0).any()


@pytest.mark.parametrize("block", [1, 2, 7])
def test_tide_is_the_same_for_every_classify_block_size(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Kept detections classified in blocks (their runs of pairs, the GTs' taken flags shared) give the same
    TIDE result as one block: codes, targets, dAPs."""
    images, gt, dets = _set(5)
    whole = tide(images, gt, dets, max_dets=20)
    monkeypatch.setattr(tide_mod, "_CLASSIFY_BLOCK", block)
    got = tide(images, gt, dets, max_dets=20)
    assert (got.ap, got.main, got.special, got.counts) == (whole.ap, whole.main, whole.special, whole.counts)
    for name in ("code", "ignored", "target", "missed", "matched_gt"):
        assert np.array_equal(getattr(got, name), getattr(whole, name)), name
    assert len(np.unique(whole.code[whole.code > 0])) >= 3  # several error types, targets set for some
    assert (whole.target >= 0).any()


def test_scene_with_no_pair_at_all() -> None:
    """Every block empty: no box overlaps any detection (and an image without any box)."""
    images = Images(id=np.array([1, 2]), width=np.full(2, 100.0), height=np.full(2, 100.0))
    gt = GroundTruth(image_id=np.array([1]), box=np.array([[0.0, 0, 5, 5]]), category=np.array([1]))
    dets = Detections(
        image_id=np.array([1, 1, 2]), box=np.array([[50.0, 50, 60, 60], [70, 70, 80, 80], [0, 0, 5, 5]]),
        score=np.array([0.9, 0.5, 0.7]), category=np.array([1, 1, 1]),
    )  # fmt: skip
    sc = scene(images, gt, dets)
    assert len(sc.pr.pd) == len(sc.cr.pd) == 0 and np.array_equal(sc.pr.count, np.zeros(3, np.int64))
    r = tide(images, gt, dets)
    assert r.counts["bkg"] == 3 and r.counts["miss"] == 1


def test_class_blocks_cover_every_class_in_order() -> None:
    ends = np.cumsum([0, 5, 0, 0, 12, 1, 1, 0, 3])
    for size in (1, 2, 5, 6, 100):
        blocks = class_blocks(ends, size)
        assert blocks[0][0] == 0 and blocks[-1][1] == len(ends)
        assert all(b0[1] == b1[0] for b0, b1 in zip(blocks, blocks[1:]))  # contiguous, in order
        assert len(blocks) <= int(ends[-1]) // size + 2
    # by hand: a block closes after the last class ending at or below each multiple of ``size``
    assert class_blocks(ends, 5) == [(0, 4), (4, 8), (8, 9)]
    assert class_blocks(ends, 2) == [(0, 1), (1, 4), (4, 6), (6, 8), (8, 9)]
    assert class_blocks(np.zeros(0, np.int64), 4) == []
    assert class_blocks(np.zeros(3, np.int64), 4) == [(0, 3)]  # classes without points: one block


@pytest.mark.parametrize("block", [1, 7, 1 << 18])
def test_per_class_f1_in_blocks_equals_each_class_alone(monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    rng = np.random.default_rng(5)
    n, c = 400, 9
    code = rng.integers(0, c - 2, n)  # the last two classes have no point
    score, tp = np.round(rng.random(n), 2), rng.random(n) < 0.4
    n_gt = rng.integers(0, 30, c)
    n_gt[0] = 0  # a class with points and no box
    monkeypatch.setattr(op_mod, "_CLASS_BLOCK", block)
    got = op_mod._class_f1(score, tp, code, n_gt, np.argsort(-score, kind="stable"))
    for k in range(c):
        sel = code == k
        want = f1_optimal(score[sel], tp[sel], int(n_gt[k]))
        assert np.array_equal(got[k], want, equal_nan=True), k


def test_grouped_cell_sums_equal_each_group_alone() -> None:
    """cell_stats with groups (the y halves of every sum as two blocks) equals cell_stats of each group alone."""
    rng = np.random.default_rng(2)
    n, groups = 3000, 6
    p, y = rng.random(n), rng.random(n) < 0.3
    f = rng.random((n, 2))
    g = rng.integers(0, groups, n)
    st = cell_stats(p, y, f, (4, 3, 2), groups=g, n_groups=groups)
    for k in range(groups):
        one = cell_stats(p[g == k], y[g == k], f[g == k], (4, 3, 2))
        assert np.array_equal(st.count[k], one.count) and np.array_equal(st.sum_y[k], one.sum_y)
        for name, words in one.fixed.items():
            assert np.array_equal(st.fixed[name][k], words), name
    assert np.array_equal(st.sum_y.sum(), y.sum()) and st.count.sum() == n


def test_shared_summaries_give_the_values_computed_alone() -> None:
    """Inside summaries_shared, every measure of the suite (class-agnostic and per class, alternating, as the
    suite asks) equals its value computed outside; the shared summaries are dropped on exit."""
    rng = np.random.default_rng(4)
    n = 2000
    p, y, f = rng.random(n), rng.random(n) < 0.5, rng.random((n, 4))
    g = rng.integers(0, 5, n)
    measures = suite()
    plain = {}
    for name, m in measures.items():
        st = m.stats(p, y, f if m.binned else None, groups=g, n_groups=5)
        plain[name] = (st, m.values(st.sum_groups().sums()), m.values(st.sums()))
    with summaries_shared():
        for name, m in measures.items():
            st = plain[name][0]
            agn, per = st.sum_groups().sums(), st.sums()
            for _ in range(2):  # asked again: the shared summary
                assert np.array_equal(m.values(agn), plain[name][1], equal_nan=True), name
                assert np.array_equal(m.values(per), plain[name][2], equal_nan=True), name


def test_map_cells_by_table_equal_the_digits() -> None:
    """The D-ECE map cells read from a table over the grid's cells (more samples than cells) equal the digit
    arithmetic, and both equal binning each sample on the sub-grid by hand."""
    from detcal.pipeline.confidence_block import _map_cells_of, map_cell_digits

    grid, dims = (3, 2, 4, 5), [1, 3]
    rng = np.random.default_rng(6)
    digits = np.column_stack([rng.integers(0, b, 500) for b in grid])
    cell = np.ravel_multi_index(digits.T, grid)
    want = np.ravel_multi_index((digits[:, 0], digits[:, 1], digits[:, 3]), (3, 2, 5))
    assert len(cell) > np.prod(grid)  # the table path
    assert np.array_equal(_map_cells_of(cell, grid, dims), want)
    assert np.array_equal(map_cell_digits(cell, grid, dims), want)
    assert np.array_equal(_map_cells_of(cell[:7], grid, dims), want[:7])  # fewer samples than cells: digits
    assert _map_cells_of(cell[:0], grid, dims).shape == (0,)
