"""The seventh speed pass's forms of the diagnostics and OCE (issue 29) against the plain computations they
replace, to the bit: TIDE's scene in image order and its greedy matching in rank order, the crowd pairs of the
few images with a crowd box, the fixed-set APs read through a mask, the fp special AP from class counts, the
stable descending order from two unstable sorts, OCE's boxes read a row at a time, the confusion matrix's
class codes by lookup table and the operating points' ECE of every detection."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from detcal.core.types import Detections, GroundTruth, Images
from detcal.matching.blocks import box_areas
from detcal.metrics._pairs import BoxColumns, BoxRows, overlap_pairs
from detcal.metrics.confusion import agnostic_match, confusion_matrix
from detcal.metrics.score_order import descending_order, stable_descending
from detcal.metrics.tide import scene, scene_match

tide_mod = importlib.import_module("detcal.metrics.tide")  # the module (the package exports a function `tide`)
op_mod = importlib.import_module("detcal.metrics.operating_points")


def _boxes(rng: np.random.Generator, n: int, size: float = 60.0) -> np.ndarray:
    xy = rng.uniform(0, 100, (n, 2))
    return np.column_stack([xy, xy + rng.uniform(2, size, (n, 2))])


def _set(seed: int, crowd_share: float = 0.15, n_img: int = 12) -> tuple[Images, GroundTruth, Detections]:
    """Images with several boxes (some crowd), three images without a box, detections near the boxes and
    elsewhere, shuffled across images (not image-contiguous), many equal scores, an image over ``max_dets``."""
    rng = np.random.default_rng(seed)
    images = Images(id=np.arange(100, 100 + n_img), width=np.full(n_img, 200.0), height=np.full(n_img, 200.0))
    n_g = 4 * n_img
    g_img = rng.integers(0, n_img - 3, n_g)
    gbox = _boxes(rng, n_g)
    gt = GroundTruth(
        image_id=images.id[g_img], box=gbox, category=rng.integers(1, 4, n_g), iscrowd=rng.random(n_g) < crowd_share
    )
    near = gbox[rng.integers(0, n_g, 15 * n_img)] + rng.normal(0, 4, (15 * n_img, 4))
    box = np.vstack([near, _boxes(rng, 5 * n_img)])
    box[:, 2:] = np.maximum(box[:, 2:], box[:, :2] + 1)
    d_img = np.concatenate([g_img[rng.integers(0, n_g, 15 * n_img)], rng.integers(0, n_img, 5 * n_img)])
    d_img[:30] = 0  # image 0: more detections than max_dets below
    score = np.round(rng.random(len(box)), 1)  # many equal scores
    dets = Detections(image_id=images.id[d_img], box=box, score=score, category=rng.integers(1, 4, len(box)))
    return images, gt, dets


def _greedy_reference(
    images: Images, gt: GroundTruth, dets: Detections, max_dets: int, pos: float, classwise: bool
) -> np.ndarray:
    """tidecv's greedy matching written out image by image: the detections by descending score (ties in input
    order), the first ``max_dets``, each taking the untaken non-crowd box (of its class when ``classwise``)
    with the highest IoU reaching ``pos``, the first such box in input order on ties. GT row per detection."""
    d_img, g_img = images.index_of(dets.image_id), images.index_of(gt.image_id)
    da, ga = box_areas(dets.box, dets.wh), box_areas(gt.box, gt.wh)
    out = np.full(len(dets), -1, np.int64)
    for im in range(len(images)):
        rows = np.flatnonzero(d_img == im)
        rows = rows[np.argsort(-dets.score[rows], kind="stable")][:max_dets]
        boxes = [g for g in range(len(gt)) if g_img[g] == im and not gt.iscrowd[g]]
        taken: set[int] = set()
        for d in rows:
            best, arg = -1.0, -1
            for g in boxes:
                if g in taken or (classwise and gt.category[g] != dets.category[d]):
                    continue
                a, b = dets.box[d], gt.box[g]
                iw = min(a[2], b[2]) - max(a[0], b[0])
                ih = min(a[3], b[3]) - max(a[1], b[1])
                iou = iw * ih / (da[d] + ga[g] - iw * ih) if iw > 0 and ih > 0 else 0.0
                if iou > best:
                    best, arg = iou, g
            if arg >= 0 and best >= pos:
                out[d] = arg
                taken.add(arg)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("classwise", [True, False])
def test_greedy_in_rank_order_equals_the_image_by_image_matching(seed: int, classwise: bool) -> None:
    images, gt, dets = _set(seed)
    sc = scene(images, gt, dets, max_dets=20)
    assert np.all(np.diff(images.index_of(dets.image_id)[sc.kd]) >= 0)  # the kept detections by image
    n_matched = 0
    for pos in (0.3, 0.5, 0.75):
        got, _, _ = scene_match(sc, pos, classwise=classwise, best=False)
        row = np.full(len(dets), -1, np.int64)
        row[sc.kd] = got
        assert np.array_equal(row, _greedy_reference(images, gt, dets, 20, pos, classwise)), pos
        n_matched += int((row >= 0).sum())
    assert n_matched > 8


def _pairs_reference(
    images: Images, gt: GroundTruth, dets: Detections, kd: np.ndarray, crowd: bool
) -> list[tuple[int, int, float]]:
    """(kept position, GT row, IoU) of every overlapping pair, one detection and one box at a time."""
    d_img, g_img = images.index_of(dets.image_id), images.index_of(gt.image_id)
    da, ga = box_areas(dets.box, dets.wh), box_areas(gt.box, gt.wh)
    out = []
    for k, d in enumerate(kd):
        for g in range(len(gt.box)):
            if g_img[g] != d_img[d] or bool(gt.iscrowd[g]) != crowd:
                continue
            a, b = dets.box[d], gt.box[g]
            iw = min(a[2], b[2]) - max(a[0], b[0])
            ih = min(a[3], b[3]) - max(a[1], b[1])
            if iw > 0 and ih > 0:
                out.append((k, g, iw * ih / (da[d] if crowd else da[d] + ga[g] - iw * ih)))
    return out


@pytest.mark.parametrize("crowd_share", [0.0, 0.15, 0.9])  # crowd boxes in one image (the subset path), many
@pytest.mark.parametrize("chunk", [1, 5, 1 << 17])
def test_crowd_and_plain_pairs_equal_the_pair_by_pair_reference(
    monkeypatch: pytest.MonkeyPatch, crowd_share: float, chunk: int
) -> None:
    images, gt, dets = _set(7, crowd_share)
    if crowd_share == 0:  # two crowd boxes, both in the image of the first box
        first = np.flatnonzero(gt.image_id == gt.image_id[0])[:2]
        gt.iscrowd[first] = True
    monkeypatch.setattr(tide_mod, "_CHUNK", chunk)
    sc = scene(images, gt, dets, max_dets=20)
    for pr, crowd in ((sc.pr, False), (sc.cr, True)):
        want = _pairs_reference(images, gt, dets, sc.kd, crowd)
        assert [(k, g) for k, g, _ in want] == list(zip(pr.pd.tolist(), pr.pg.tolist()))  # in order
        assert np.array_equal(pr.iou, [v for *_, v in want])  # bit for bit
        assert np.array_equal(pr.count, np.bincount(pr.pd, minlength=len(sc.kd)))
        assert np.array_equal(pr.start, np.cumsum(pr.count) - pr.count)
    assert len(sc.cr.pd) > 0


def test_scene_with_the_callers_score_order_is_the_same_scene() -> None:
    images, gt, dets = _set(2)
    a = scene(images, gt, dets, max_dets=20)
    b = scene(images, gt, dets, max_dets=20, desc=np.argsort(-dets.score, kind="stable"))
    for name in ("rank", "kd", "desc", "by_image", "has_gt"):
        assert np.array_equal(getattr(a, name), getattr(b, name)), name
    for f in ("pd", "pg", "start", "count", "iou", "same"):
        assert np.array_equal(getattr(a.pr, f), getattr(b.pr, f)) and np.array_equal(getattr(a.cr, f), getattr(b.cr, f))


@pytest.mark.parametrize("seed", range(6))
def test_ap_of_kept_points_equals_the_ap_of_the_gathered_points(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_cls, n = 7, int(rng.integers(0, 400))
    cls = np.sort(rng.integers(0, n_cls - 1, n))  # grouped by class; the last class has no point
    keep = rng.random(n) < rng.uniform(0.2, 1.0)
    tp = keep & (rng.random(n) < 0.4)
    n_gt = rng.integers(0, 30, n_cls)
    n_gt[1] = 0
    tp[cls == 1] = False  # a class with points and no box
    for c in range(n_cls):
        n_gt[c] = max(n_gt[c], int(tp[cls == c].sum())) if c != 1 else 0
    ends = np.cumsum(np.bincount(cls, minlength=n_cls))
    want = tide_mod._ap(cls[keep], tp[keep], n_gt, grouped=True)
    assert tide_mod._ap_kept(ends, keep, tp, n_gt) == want
    # the fp special: every true positive of a class before its false positives
    fp = keep & ~tp
    order = np.concatenate([np.flatnonzero(tp), np.flatnonzero(fp)])
    rng.shuffle(order[: int(tp.sum())])  # the true positives' own order does not matter
    want_fp = tide_mod._ap(cls[order], tp[order], n_gt)
    assert tide_mod._ap_true_positives_first(cls[tp], cls[fp], n_gt) == want_fp


@pytest.mark.parametrize("seed", range(10))
def test_stable_descending_equals_the_stable_sort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 500))
    choices = (
        rng.random(n),
        np.round(rng.random(n), 1),
        rng.choice(np.array([0.0, -0.0, 0.5, 1.0]), n),
        rng.integers(0, 3, n).astype(np.float32),
    )
    for s in choices:
        assert np.array_equal(stable_descending(s), np.argsort(-s, kind="stable"))


def test_stable_descending_falls_back_on_non_finite_scores_and_the_order_is_reused() -> None:
    s = np.array([np.nan, 0.5, np.nan, 0.5, np.inf, -np.inf, 0.5])
    assert np.array_equal(stable_descending(s), np.argsort(-s, kind="stable"))
    assert len(stable_descending(np.zeros(0))) == 0 and list(stable_descending(np.array([0.3]))) == [0]
    score = np.round(np.random.default_rng(0).random(1000), 2)
    first = descending_order(score)
    assert descending_order(score) is first  # checked, then reused
    assert np.array_equal(first, np.argsort(-score, kind="stable"))


def test_overlap_pairs_from_box_rows_equal_box_columns() -> None:
    """The detections' boxes read a row at a time give the same pairs and IoUs as their column copies, with
    many equal left edges (ties of the sort key) and blocks of every size."""
    rng = np.random.default_rng(5)
    n_g, n_d = 90, 500
    gi, di = rng.integers(0, 6, n_g) * 3 + 1, rng.integers(0, 7, n_d) * 3 + 1
    xy = np.round(rng.uniform(0, 100, (n_g, 2)))
    gb = np.hstack([xy, xy + np.round(rng.uniform(1, 50, (n_g, 2)))])
    db = gb[rng.integers(0, n_g, n_d)] + np.round(rng.normal(0, 3, (n_d, 4)))
    db[:, 2:] = np.maximum(db[:, 2:], db[:, :2] + 1)
    rows = np.flatnonzero(rng.random(n_g) < 0.85)
    for t in (0.3, 0.5, 0.75):
        for block in (1, 7, 1 << 17):
            a = list(overlap_pairs(di, BoxRows(db), gi, BoxColumns(gb), t, rows, block=block))
            b = list(overlap_pairs(di, BoxColumns(db), gi, BoxColumns(gb), t, rows, block=block))
            assert len(a) == len(b) and sum(len(x[0]) for x in a) > 0
            for x, y in zip(a, b):
                assert all(np.array_equal(u, v) for u, v in zip(x, y))
        # and every pair at the threshold, in (GT row, detection row) order
        got = [(g, d) for G, D, _ in overlap_pairs(di, BoxRows(db), gi, BoxColumns(gb), t, rows) for g, d in zip(G, D)]
        gcols, dcols = BoxColumns(gb), BoxColumns(db)
        want = []
        for g in rows:
            for d in range(n_d):
                if di[d] != gi[g]:
                    continue
                iw = max(0.0, min(gb[g, 2], db[d, 2]) - max(gb[g, 0], db[d, 0]))
                ih = max(0.0, min(gb[g, 3], db[d, 3]) - max(gb[g, 1], db[d, 1]))
                union = gcols.area[g] + dcols.area[d] - iw * ih
                if union > 0 and iw * ih / union >= t:
                    want.append((g, d))
        assert got == want


@pytest.mark.parametrize("categories", [[1, 2, 3], [5, 900, 3_000_000], [0, 2, 7]])
def test_confusion_matrix_codes_by_table_equal_the_binary_search(categories: list[int]) -> None:
    """Small ids go through a lookup table, large ones through a binary search: the same matrix; detections
    of an id outside the categories (between them, above them) count as background."""
    images, gt, dets = _set(3)
    cats = np.asarray(categories)
    gt = GroundTruth(image_id=gt.image_id, box=gt.box, category=cats[gt.category - 1], iscrowd=gt.iscrowd)
    dcat = cats[dets.category - 1].copy()
    dcat[:5] = cats.max() + 1
    dcat[5:8] = 4 if 4 not in categories else 6
    dets = Detections(image_id=dets.image_id, box=dets.box, score=dets.score, category=dcat)
    am = agnostic_match(dets, gt, 0.5, 20, images=images)
    m = np.asarray(confusion_matrix(am, dets, gt, list(categories), 0.3)["matrix"])
    # the matrix written out detection by detection
    c = len(cats)
    code = {int(k): i for i, k in enumerate(sorted(categories))}
    want = np.zeros((c + 1, c + 1), np.int64)
    taken = set()
    for d in range(len(dets)):
        if not am.considered[d] or am.ignored[d] or dets.score[d] < 0.3:
            continue
        col = code.get(int(dets.category[d]), c)
        g = int(am.gt_row[d])
        want[code.get(int(gt.category[g]), c) if g >= 0 else c, col] += 1
        if g >= 0:
            taken.add(g)
    for g in range(len(gt)):
        if not gt.iscrowd[g] and not gt.ignore[g] and g not in taken:
            want[code.get(int(gt.category[g]), c), c] += 1
    assert np.array_equal(m, want)


def test_ece_of_every_detection_without_a_mask_equals_the_masked_one() -> None:
    rng = np.random.default_rng(0)
    p = rng.random(300)
    y = rng.random(300) < p
    seen = []

    def ece(a: np.ndarray, b: np.ndarray):  # type: ignore[no-untyped-def]
        seen.append((a.copy(), b.copy()))
        return type("R", (), {"value": float(np.abs(a.mean() - b.mean()))})()

    assert op_mod._ece_kept(ece, p, y, None) == op_mod._ece_kept(ece, p, y, np.ones(300, bool))
    assert np.array_equal(seen[0][0], seen[1][0]) and np.array_equal(seen[0][1], seen[1][1])
    assert op_mod._ece_kept(ece, p, y, np.zeros(300, bool)) == {"n": 0, "ece": None}


@pytest.mark.parametrize("pure", [1.0, 0.9, 0.3])
@pytest.mark.parametrize("ordered", [True, False])
def test_majority_label_of_mostly_pure_objects_equals_counting(pure: float, ordered: bool) -> None:
    """Objects whose pairs all carry one label take it directly; the mixed ones (and any set whose objects are
    not in ascending order) are counted: the same labels as counting each object's pairs."""
    oce_mod = importlib.import_module("detcal.metrics.oce")
    rng = np.random.default_rng(int(pure * 10) + ordered)
    obj = np.sort(rng.integers(0, 60, 700))
    own = rng.choice(np.array([2, 5, 9, 40]), 65)
    label = np.where(rng.random(700) < pure, own[obj], rng.choice(np.array([2, 5, 9, 40]), 700))
    if not ordered:
        p = rng.permutation(700)
        obj, label = obj[p], label[p]
    got = oce_mod._majority_label(obj, label, 65)
    for o in range(65):
        labs = label[obj == o]
        if len(labs) == 0:
            assert got[o] == -1
            continue
        vals, counts = np.unique(labs, return_counts=True)
        assert got[o] == vals[np.flatnonzero(counts == counts.max())[0]], o


@pytest.mark.parametrize("seed", range(3))
def test_greedy_on_a_file_written_image_after_image(seed: int) -> None:
    """Detections already grouped by image (no sort of the kept ones): the same matching and TIDE result as
    the written-out matching, and as the same detections in another row order (per detection)."""
    images, gt, dets = _set(seed)
    order = np.argsort(images.index_of(dets.image_id), kind="stable")
    grouped = Detections(image_id=dets.image_id[order], box=dets.box[order], score=dets.score[order],
                         category=dets.category[order])  # fmt: skip
    sc = scene(images, gt, grouped, max_dets=20)
    assert np.all(np.diff(sc.kd) > 0)  # in row order
    got, _, _ = scene_match(sc, 0.5, best=False)
    row = np.full(len(dets), -1, np.int64)
    row[sc.kd] = got
    assert np.array_equal(row, _greedy_reference(images, gt, grouped, 20, 0.5, True))
    a = tide_mod.tide(images, gt, grouped, max_dets=20)
    b = tide_mod.tide(images, gt, dets, max_dets=20)
    assert (a.ap, a.main, a.special, a.counts) == (b.ap, b.main, b.special, b.counts)
    assert np.array_equal(a.code, b.code[order]) and np.array_equal(a.target, b.target[order])
