"""Tests of detcal.matching.engine.

Independent references: pycocotools 2.0.11 COCOeval (exclusive parity on
seeded synthetic sets with crowd boxes, exact-duplicate boxes and 3-decimal
scores), a brute-force loop over images with detcal.core.boxes.pairwise_iou (max
mode), and hand-computed golden cases (arithmetic in the comments).
"""

from __future__ import annotations

import contextlib
import copy
import io

import numpy as np
import pytest

from detcal.core.boxes import pairwise_iou, xywh_to_xyxy
from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, Images, KittiRules
from detcal.matching import match

pycocotools = pytest.importorskip("pycocotools")
from pycocotools.coco import COCO  # noqa: E402
from pycocotools.cocoeval import COCOeval  # noqa: E402

# --------------------------------------------------------------------------- synthetic COCO data


def make_coco(
    n_images: int = 120, seed: int = 0, dets_per_img: float = 40.0, crowd_frac: float = 0.03
) -> tuple[dict, list[dict]]:
    """Seeded COCO-like set: crowd GTs, duplicate GT/det boxes (IoU ties), integer boxes (IoU exactly t), 3-decimal scores."""
    rng = np.random.default_rng(seed)
    cat_ids = np.array([1, 2, 3, 5, 8, 13])
    ng = rng.poisson(7, n_images)
    G = int(ng.sum())
    g_img = np.repeat(np.arange(n_images), ng)
    img_cats = cat_ids[rng.integers(0, len(cat_ids), (n_images, 3))]
    g_cat = img_cats[g_img, rng.integers(0, 3, G)]
    w, h = rng.uniform(8, 250, G), rng.uniform(8, 250, G)
    x, y = rng.uniform(0, 640 - w), rng.uniform(0, 480 - h)
    integer = rng.random(G) < 0.4  # integer boxes make IoU == 0.5 / 0.75 exactly attainable
    dec = np.where(integer, 0, 2)
    x, y, w, h = (np.round(v * 10.0**dec) / 10.0**dec for v in (x, y, w, h))
    crowd = rng.random(G) < crowd_frac
    dup = np.flatnonzero(rng.random(G) < 0.05)  # exact duplicate of the previous GT (same image): IoU tie
    dup = dup[(dup > 0) & (g_img[np.maximum(dup - 1, 0)] == g_img[dup])]
    for v in (x, y, w, h, g_cat):
        v[dup] = v[dup - 1]
    nd = rng.poisson(dets_per_img, n_images)
    D = int(nd.sum())
    d_img = np.repeat(np.arange(n_images), nd)
    gstart = np.cumsum(ng) - ng
    has = ng[d_img] > 0
    anchor = np.minimum(gstart[d_img] + (rng.random(D) * np.maximum(ng[d_img], 1)).astype(int), G - 1)
    near = has & (rng.random(D) < 0.8)
    s = rng.uniform(0.02, 0.35, D)
    dw = np.where(near, w[anchor] * np.exp(rng.normal(0, s)), rng.uniform(5, 200, D))
    dh = np.where(near, h[anchor] * np.exp(rng.normal(0, s)), rng.uniform(5, 200, D))
    dx = np.where(near, x[anchor] + rng.normal(0, s) * w[anchor], rng.uniform(0, 600, D))
    dy = np.where(near, y[anchor] + rng.normal(0, s) * h[anchor], rng.uniform(0, 440, D))
    # a share of detections on the integer grid: exact IoU values against integer GTs
    snap = rng.random(D) < 0.3
    dx, dy, dw, dh = (
        np.where(snap, np.round(v), np.round(v, 2)) for v in (dx, dy, np.maximum(dw, 1), np.maximum(dh, 1))
    )
    dcat = np.where(near & (rng.random(D) < 0.85), g_cat[anchor], img_cats[d_img, rng.integers(0, 3, D)])
    dd = np.flatnonzero(rng.random(D) < 0.03)  # duplicate detections
    dd = dd[dd > 0]
    for v in (dx, dy, dw, dh, dcat):
        v[dd] = v[dd - 1]
    score = np.round(rng.beta(2, 2, D), 2 if seed % 2 else 3)  # many score ties
    images = [{"id": int(i + 1), "width": 640, "height": 480, "file_name": f"{i + 1}.jpg"} for i in range(n_images)]
    anns = [
        {
            "id": int(10 * i + 7),
            "image_id": int(g_img[i]) + 1,
            "category_id": int(g_cat[i]),
            "bbox": [float(x[i]), float(y[i]), float(w[i]), float(h[i])],
            "area": float(w[i] * h[i]),
            "iscrowd": int(crowd[i]),
        }
        for i in range(G)
    ]
    gt = {"images": images, "annotations": anns, "categories": [{"id": int(c), "name": f"c{c}"} for c in cat_ids]}
    res = [
        {
            "image_id": int(d_img[i]) + 1,
            "category_id": int(dcat[i]),
            "bbox": [float(dx[i]), float(dy[i]), float(dw[i]), float(dh[i])],
            "score": float(score[i]),
        }
        for i in range(D)
    ]
    return gt, res


def to_records(gt_dict: dict, res: list[dict]) -> tuple[GroundTruth, Detections]:
    a = gt_dict["annotations"]
    gt = GroundTruth(
        image_id=[o["image_id"] for o in a],
        box=xywh_to_xyxy(np.array([o["bbox"] for o in a]).reshape(-1, 4)),
        category=[o["category_id"] for o in a],
        iscrowd=[bool(o["iscrowd"]) for o in a],
        id=[o["id"] for o in a],
    )
    dets = Detections(
        image_id=[o["image_id"] for o in res],
        box=xywh_to_xyxy(np.array([o["bbox"] for o in res]).reshape(-1, 4)),
        score=[o["score"] for o in res],
        category=[o["category_id"] for o in res],
    )
    return gt, dets


def coco_eval(gt_dict: dict, res: list[dict], thr: list[float], use_cats: int = 1, max_det: int = 100) -> tuple:
    """pycocotools per-detection outcome: matched GT id [T,D] (0 none), dtIgnore [T,D], evaluated [D], E."""
    with contextlib.redirect_stdout(io.StringIO()):
        c = COCO()
        c.dataset = copy.deepcopy(gt_dict)
        c.createIndex()
        r = c.loadRes(copy.deepcopy(res))
        E = COCOeval(c, r, "bbox")
        E.params.iouThrs = np.array(thr)
        E.params.areaRng = [[0, 1e10]]
        E.params.areaRngLbl = ["all"]
        E.params.maxDets = [max_det]
        E.params.useCats = use_cats
        E.evaluate()
    T, D = len(thr), len(res)
    m = np.zeros((T, D), np.int64)
    ig = np.zeros((T, D), bool)
    seen = np.zeros(D, bool)
    for e in E.evalImgs:
        if e is None or len(e["dtIds"]) == 0:
            continue
        rows = np.asarray(e["dtIds"], np.int64) - 1  # loadRes numbers results 1..n in file order
        m[:, rows] = e["dtMatches"]
        ig[:, rows] = e["dtIgnore"]
        seen[rows] = True
    return m, ig, seen, E


def ours_ids(gt: GroundTruth, r) -> np.ndarray:
    return np.where(r.gt_index >= 0, gt.id[np.maximum(r.gt_index, 0)], 0)


# --------------------------------------------------------------------------- pycocotools parity


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("use_cats", [1, 0])
def test_exclusive_equals_pycocotools(seed: int, use_cats: int) -> None:
    gt_dict, res = make_coco(seed=seed)
    gt, dets = to_records(gt_dict, res)
    m, ig, seen, _ = coco_eval(gt_dict, res, [0.5, 0.75], use_cats)
    r = match(dets, gt, (0.5, 0.75), class_agnostic=not use_cats)
    assert gt.iscrowd.sum() > 0 and (m > 0).sum() > 0 and ig.sum() > 0  # crowd absorption is exercised
    assert np.array_equal(r.considered, seen)
    assert np.array_equal(ours_ids(gt, r), m)  # 100 % of detections, both thresholds
    assert np.array_equal(r.ignored, ig)
    assert np.array_equal(r.matched, (m > 0) & ~ig)


def test_exclusive_equals_pycocotools_with_max_dets_cut() -> None:
    gt_dict, res = make_coco(seed=3, dets_per_img=60)
    gt, dets = to_records(gt_dict, res)
    for use_cats in (1, 0):
        m, ig, seen, _ = coco_eval(gt_dict, res, [0.5], use_cats, max_det=6)
        r = match(dets, gt, (0.5,), class_agnostic=not use_cats, max_dets=6)
        assert (~seen).sum() > 100  # the cut is exercised
        assert np.array_equal(r.considered, seen)
        assert np.array_equal(ours_ids(gt, r), m)
        assert np.array_equal(r.ignored, ig)


def test_data_exercises_ties_and_exact_thresholds() -> None:
    """The parity data holds score ties within a group and IoUs exactly at 0.5/0.75 (pycocotools' own IoUs)."""
    gt_dict, res = make_coco(seed=0)
    _, _, _, E = coco_eval(gt_dict, res, [0.5, 0.75])
    vals = np.concatenate([np.ravel(v) for v in E.ious.values() if len(v)])
    assert (vals == 0.5).sum() + (vals == 0.75).sum() > 0
    key = [(o["image_id"], o["category_id"], o["score"]) for o in res]
    assert len(set(key)) < len(key)


def test_iou_column_equals_pycocotools_ious() -> None:
    gt_dict, res = make_coco(seed=4)
    gt, dets = to_records(gt_dict, res)
    _, _, _, E = coco_eval(gt_dict, res, [0.5])
    r = match(dets, gt, (0.5,))
    ref = np.zeros(len(res))
    for (img, cat), mat in E.ious.items():
        if len(mat) == 0 or mat.shape[1] == 0:
            continue
        dts = E._dts[img, cat]
        order = np.argsort([-d["score"] for d in dts], kind="mergesort")[: mat.shape[0]]
        rows = np.array([dts[i]["id"] for i in order]) - 1
        ref[rows] = mat.max(axis=1)
    assert np.allclose(r.iou, ref, rtol=1e-12, atol=1e-15)


def test_parity_has_teeth_tie_order_and_crowd_rule() -> None:
    """pycocotools' own rules matter: reversing the tie order or dropping the crowd rule changes outcomes."""
    gt_dict, res = make_coco(seed=1)
    gt, dets = to_records(gt_dict, res)
    m, ig, _, _ = coco_eval(gt_dict, res, [0.5, 0.75])
    # reversed file order of the detections = reversed tie order; map the result back
    rev = np.arange(len(dets))[::-1]
    r_rev = match(dets.select(rev), gt, (0.5, 0.75))
    ids_rev = np.empty_like(m)
    ids_rev[:, rev] = ours_ids(gt, r_rev)
    assert (ids_rev != m).sum() > 0
    # crowd GT treated as regular boxes: IoU instead of IoA and one detection each
    no_crowd = copy.deepcopy(gt)
    no_crowd.iscrowd[:] = False
    r_nc = match(dets, no_crowd, (0.5, 0.75))
    assert ((ours_ids(gt, r_nc) != m) | (r_nc.ignored != ig)).sum() > 0


def test_multi_threshold_equals_single_runs() -> None:
    gt_dict, res = make_coco(seed=5)
    gt, dets = to_records(gt_dict, res)
    thr = (0.5, 0.6, 0.75, 0.9)
    r = match(dets, gt, thr)
    for i, t in enumerate(thr):
        s = match(dets, gt, (t,))
        assert np.array_equal(r.matched[i], s.matched[0])
        assert np.array_equal(r.ignored[i], s.ignored[0])
        assert np.array_equal(r.gt_index[i], s.gt_index[0])


def test_permuting_detections_permutes_result() -> None:
    gt_dict, res = make_coco(seed=6)
    gt, dets = to_records(gt_dict, res)
    dets.score = dets.score + np.arange(len(dets)) * 1e-9  # unique scores: no tie order
    perm = np.random.default_rng(0).permutation(len(dets))
    a = match(dets, gt, (0.5, 0.75))
    b = match(dets.select(perm), gt, (0.5, 0.75))
    assert np.array_equal(a.gt_index[:, perm], b.gt_index)
    assert np.array_equal(a.ignored[:, perm], b.ignored)


# --------------------------------------------------------------------------- max mode vs brute force


def brute_force_max(dets: Detections, gt: GroundTruth, t: float) -> tuple[np.ndarray, np.ndarray]:
    """netcal-example rule by a loop over (image, category): best same-class GT (non-ignored first on ties)."""
    matched = np.zeros(len(dets), bool)
    ignored = np.zeros(len(dets), bool)
    ign = gt.ignore | gt.iscrowd
    for img, cat in set(zip(dets.image_id.tolist(), dets.category.tolist())):
        di = np.flatnonzero((dets.image_id == img) & (dets.category == cat))
        gi = np.flatnonzero((gt.image_id == img) & (gt.category == cat))
        if len(gi) == 0:
            continue
        gi = gi[np.argsort(ign[gi], kind="stable")]
        iou = pairwise_iou(dets.box[di], gt.box[gi], crowd=gt.iscrowd[gi])
        best = iou.argmax(axis=1)
        ok = iou[np.arange(len(di)), best] >= t
        matched[di] = ok & ~ign[gi[best]]
        ignored[di] = ok & ign[gi[best]]
    return matched, ignored


def test_max_mode_equals_brute_force() -> None:
    gt_dict, res = make_coco(seed=7)
    gt, dets = to_records(gt_dict, res)
    r = match(dets, gt, (0.5, 0.75), mode="max", max_dets=None)
    for i, t in enumerate((0.5, 0.75)):
        m, ig = brute_force_max(dets, gt, t)
        assert np.array_equal(r.matched[i], m)
        assert np.array_equal(r.ignored[i], ig)
    assert r.matched[0].sum() > match(dets, gt, (0.5,), max_dets=None).matched[0].sum()  # several dets per GT


# --------------------------------------------------------------------------- golden hand cases


def dets_of(boxes, scores, cats=None, imgs=None) -> Detections:
    n = len(boxes)
    return Detections(
        image_id=imgs or [1] * n, box=np.array(boxes, float).reshape(-1, 4), score=scores, category=cats or [1] * n
    )


def gt_of(boxes, cats=None, imgs=None, crowd=None, ignore=None) -> GroundTruth:
    n = len(boxes)
    return GroundTruth(
        image_id=imgs or [1] * n,
        box=np.array(boxes, float).reshape(-1, 4),
        category=cats or [1] * n,
        iscrowd=crowd,
        ignore=ignore,
    )


def test_tie_goes_to_later_gt() -> None:
    # two identical GTs, IoU 1 with both: pycocotools keeps the later one (iou >= best)
    r = match(dets_of([[0, 0, 10, 10]], [0.9]), gt_of([[0, 0, 10, 10], [0, 0, 10, 10]]))
    assert r.gt_index[0].tolist() == [1] and r.matched[0, 0]


def test_iou_exactly_at_threshold_matches() -> None:
    # det [0,0,10,10] vs GT [0,0,10,20]: inter 100, union 100 + 200 - 100 = 200 -> IoU 0.5 exactly
    r = match(dets_of([[0, 0, 10, 10]], [0.9]), gt_of([[0, 0, 10, 20]]), (0.5, 0.51))
    assert r.iou[0] == 0.5
    assert r.matched[:, 0].tolist() == [True, False]


def test_iou_value_by_hand() -> None:
    # det [0,0,10,10] vs GT [5,0,15,10]: inter 5*10 = 50, union 100 + 100 - 50 = 150 -> 1/3
    r = match(dets_of([[0, 0, 10, 10]], [0.9]), gt_of([[5, 0, 15, 10]]))
    assert r.iou[0] == pytest.approx(1 / 3, abs=1e-15)
    assert not r.matched[0, 0] and not r.ignored[0, 0] and r.gt_index[0, 0] == -1


def test_regular_gt_beats_crowd_with_higher_overlap() -> None:
    # regular GT [0,0,10,12]: IoU 100/120 = 0.833; crowd GT [-5,-5,20,20]: IoA 100/100 = 1
    r = match(dets_of([[0, 0, 10, 10]], [0.9]), gt_of([[0, 0, 10, 12], [-5, -5, 20, 20]], crowd=[False, True]))
    assert r.gt_index[0, 0] == 0 and r.matched[0, 0] and not r.ignored[0, 0]


def test_crowd_absorbs_many_detections() -> None:
    # three small boxes inside one crowd region: IoA 1 each -> all ignored, all point at the crowd row
    boxes = [[0, 0, 10, 10], [20, 20, 30, 30], [40, 40, 50, 50]]
    r = match(dets_of(boxes, [0.9, 0.8, 0.7]), gt_of([[0, 0, 100, 100]], crowd=[True]))
    assert r.ignored[0].all() and not r.matched[0].any() and r.gt_index[0].tolist() == [0, 0, 0]
    assert np.allclose(r.iou, 1.0)


def test_second_detection_falls_back_to_crowd() -> None:
    # regular GT taken by the higher score; the second det then takes the crowd GT -> ignored
    g = gt_of([[0, 0, 10, 10], [-50, -50, 60, 60]], crowd=[False, True])
    r = match(dets_of([[0, 0, 10, 10], [0, 0, 10, 11]], [0.9, 0.8]), g)
    assert r.gt_index[0].tolist() == [0, 1]
    assert r.matched[0].tolist() == [True, False] and r.ignored[0].tolist() == [False, True]


def test_ignored_non_crowd_gt_takes_one_detection() -> None:
    # an ignored (non-crowd) GT is matched at most once: the second det becomes a false positive
    # (the `ignore` flag counts with gt_ignore="ignore_or_crowd"; by default, as pycocotools, only iscrowd does)
    r = match(
        dets_of([[0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.8]),
        gt_of([[0, 0, 10, 10]], ignore=[True]),
        gt_ignore="ignore_or_crowd",
    )
    assert r.ignored[0].tolist() == [True, False] and not r.matched[0].any()
    assert r.gt_index[0].tolist() == [0, -1]


def test_greedy_by_score_and_best_free_gt() -> None:
    # det A (0.9): IoU with G0 [0,0,10,10] = 1.0, with G1 [0,0,10,14] = 100/140 = 0.714
    # det B (0.8): box [0,0,10,13]: IoU with G0 = 100/130 = 0.769, with G1 = 130/140 = 0.929
    # A takes G0; B takes G1 (its best free GT)
    g = gt_of([[0, 0, 10, 10], [0, 0, 10, 14]])
    r = match(dets_of([[0, 0, 10, 10], [0, 0, 10, 13]], [0.9, 0.8]), g)
    assert r.gt_index[0].tolist() == [0, 1]
    # B (0.95) now goes first and takes its best G1; A then G0
    r = match(dets_of([[0, 0, 10, 10], [0, 0, 10, 13]], [0.9, 0.95]), g)
    assert r.gt_index[0].tolist() == [0, 1]
    # one GT only: higher score wins even though the other overlaps more
    # A (0.9) box [0,0,10,16]: IoU with G [0,0,10,10] = 100/160 = 0.625; B (0.8) IoU 1.0
    r = match(dets_of([[0, 0, 10, 16], [0, 0, 10, 10]], [0.9, 0.8]), gt_of([[0, 0, 10, 10]]))
    assert r.matched[0].tolist() == [True, False]


def test_score_ties_keep_file_order() -> None:
    # equal scores: the first detection in file order takes the only GT
    r = match(dets_of([[0, 0, 10, 11], [0, 0, 10, 10]], [0.5, 0.5]), gt_of([[0, 0, 10, 10]]))
    assert r.matched[0].tolist() == [True, False]


def test_max_mode_multiple_matches_and_crowd() -> None:
    g = gt_of([[0, 0, 10, 10], [100, 100, 200, 200]], crowd=[False, True])
    d = dets_of([[0, 0, 10, 10], [0, 0, 10, 11], [120, 120, 130, 130]], [0.9, 0.8, 0.7])
    r = match(d, g, mode="max")
    assert r.matched[0].tolist() == [True, True, False]  # both dets match the one GT
    assert r.ignored[0].tolist() == [False, False, True]  # best GT is crowd -> ignored
    assert r.gt_index[0].tolist() == [0, 0, 1]
    e = match(d, g)
    assert e.matched[0].tolist() == [True, False, False]


def test_class_agnostic() -> None:
    d = dets_of([[0, 0, 10, 10]], [0.9], cats=[1])
    g = gt_of([[0, 0, 10, 10]], cats=[2])
    assert not match(d, g).matched.any() and match(d, g).iou[0] == 0.0
    r = match(d, g, class_agnostic=True)
    assert r.matched[0, 0] and r.gt_index[0, 0] == 0 and r.iou[0] == 1.0


def test_score_threshold() -> None:
    # A 0.9 (IoU 0.625), B 0.4 (IoU 1.0); threshold 0.5 removes B from consideration
    d = dets_of([[0, 0, 10, 16], [0, 0, 10, 10]], [0.9, 0.4])
    r = match(d, gt_of([[0, 0, 10, 10]]), score_threshold=0.5)
    assert r.considered.tolist() == [True, False]
    assert r.matched[0].tolist() == [True, False] and r.ignored[0].tolist() == [False, False]
    assert r.describe()["score_threshold"] == 0.5


def test_max_dets_per_image_and_category() -> None:
    # 3 dets of class 1 (scores .9, .7, .7) and 1 of class 2; max_dets=2 drops the later .7 of class 1 only
    d = dets_of(
        [[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10], [0, 0, 10, 10]], [0.9, 0.7, 0.7, 0.1], cats=[1, 1, 1, 2]
    )
    r = match(d, gt_of([[0, 0, 10, 10], [0, 0, 10, 10]], cats=[1, 2]), max_dets=2)
    assert r.considered.tolist() == [True, True, False, True]
    assert r.matched[0].tolist() == [True, False, False, True]
    # class-agnostic: the cut is per image over all classes (scores .9 .7 .7 .1 -> keep two)
    ra = match(d, gt_of([[0, 0, 10, 10]]), max_dets=2, class_agnostic=True)
    assert ra.considered.tolist() == [True, True, False, False]
    assert match(d, gt_of([[0, 0, 10, 10]]), max_dets=None).considered.all()


# --------------------------------------------------------------------------- KITTI rules

CAR, VAN, PED, SIT, CYC, DC = 1, 2, 4, 5, 6, 9


def test_kitti_strict_overlap_and_class_thresholds() -> None:
    # Car det [0,0,10,70] vs Car GT [0,0,10,100]: IoU 700/1000 = 0.7 exactly -> not > 0.7
    # Car det [0,0,10,80] vs GT [20,0,30,100]... shifted pairs in separate images
    # Ped det [0,0,10,60] vs Ped GT [0,0,10,100]: IoU 0.6 > 0.5 -> matched
    g = gt_of([[0, 0, 10, 100], [0, 0, 10, 100], [0, 0, 10, 100]], cats=[CAR, CAR, PED], imgs=[1, 2, 3])
    d = dets_of([[0, 0, 10, 70], [0, 0, 10, 80], [0, 0, 10, 60]], [0.9, 0.9, 0.9], cats=[CAR, CAR, PED], imgs=[1, 2, 3])
    rules = KittiRules()
    r = match(d, g, "kitti", kitti=rules)
    assert r.iou[0] == pytest.approx(0.7)
    assert r.matched[0].tolist() == [False, True, True]
    assert np.isnan(r.iou_thresholds[0]) and r.describe()["iou_thresholds"] == "kitti"
    # at a common 0.7 the same strict rule; COCO rule (>=) would match the first one
    assert match(d, g, (0.7,), kitti=rules).matched[0].tolist() == [False, True, False]
    assert match(d, g, (0.7,)).matched[0].tolist() == [True, True, False]


def test_kitti_neighbour_classes_are_ignored() -> None:
    # Car det on a Van GT -> ignored (not a FP); Pedestrian det on a Person_sitting GT -> ignored
    g = gt_of([[0, 0, 10, 100], [50, 0, 60, 100]], cats=[VAN, SIT])
    d = dets_of([[0, 0, 10, 100], [50, 0, 60, 100], [200, 0, 210, 100]], [0.9, 0.8, 0.7], cats=[CAR, PED, CAR])
    r = match(d, g, "kitti", kitti=KittiRules())
    assert r.ignored[0].tolist() == [True, True, False]
    assert not r.matched.any() and r.gt_index[0].tolist() == [0, 1, -1]
    # a Van detection still matches the Van GT as its own class
    rv = match(dets_of([[0, 0, 10, 100]], [0.9], cats=[VAN]), g, (0.5,), kitti=KittiRules())
    assert rv.matched[0, 0]


def test_kitti_dontcare_ignores_unmatched_detection() -> None:
    # DontCare [0,0,100,100]: det [10,10,40,40] lies inside (IoA 1 > 0.7) -> ignored;
    # det [80,0,120,40]: inter 20*40 = 800 over its area 40*40 = 1600 -> IoA 0.5 -> false positive
    g = gt_of([[0, 0, 100, 100]], cats=[DC])
    d = dets_of([[10, 10, 40, 40], [80, 0, 120, 40]], [0.9, 0.8], cats=[CAR, CAR])
    r = match(d, g, "kitti", kitti=KittiRules())
    assert r.ignored[0].tolist() == [True, False] and not r.matched.any()
    assert r.gt_index[0].tolist() == [-1, -1]
    # without KITTI rules DontCare is just another category: nothing ignored
    assert not match(d, g).ignored.any()


def test_kitti_min_height_and_difficulty_ignored_gt() -> None:
    # det height 24.9 (floor 24 < 25) -> ignored, and it does not take the GT from the valid det
    # GT 1 carries ignore=True (outside the difficulty): the det on it is ignored
    g = gt_of([[0, 0, 10, 30], [100, 0, 110, 30]], cats=[CAR, CAR], ignore=[False, True])
    d = dets_of([[0, 0, 10, 24.9], [0, 0, 10, 30], [100, 0, 110, 30]], [0.99, 0.5, 0.9], cats=[CAR, CAR, CAR])
    r = match(d, g, (0.5,), kitti=KittiRules(min_height=25.0))
    assert r.ignored[0].tolist() == [True, False, True]
    assert r.matched[0].tolist() == [False, True, False]
    assert r.gt_index[0].tolist() == [-1, 0, 1]
    # height 25.0 exactly is kept (devkit: int(height) < 25)
    r2 = match(dets_of([[0, 0, 10, 25.0]], [0.9], cats=[CAR]), g, (0.5,), kitti=KittiRules(min_height=25.0))
    assert not r2.ignored[0, 0]


# --------------------------------------------------------------------------- empty inputs and errors


def test_empty_inputs() -> None:
    none_d = dets_of(np.zeros((0, 4)), [])
    none_g = gt_of(np.zeros((0, 4)))
    r = match(none_d, gt_of([[0, 0, 1, 1]]), (0.5, 0.75))
    assert r.matched.shape == (2, 0) and r.gt_index.shape == (2, 0) and r.iou.shape == (0,)
    r = match(dets_of([[0, 0, 1, 1]], [0.5]), none_g)
    assert r.considered.tolist() == [True] and not r.matched.any() and r.gt_index[0, 0] == -1 and r.iou[0] == 0
    r = match(none_d, none_g, kitti=KittiRules(), iou_thresholds="kitti")
    assert r.matched.shape == (1, 0)
    # image 2 has GT but no detections; the detection on image 1 has no GT
    r = match(dets_of([[0, 0, 1, 1]], [0.5], imgs=[1]), gt_of([[0, 0, 1, 1]], imgs=[2]), mode="max")
    assert not r.matched.any() and r.iou[0] == 0


def test_input_errors_name_the_field() -> None:
    g = gt_of([[0, 0, 1, 1]])
    with pytest.raises(DetcalInputError, match="box"):
        match(dets_of([[0, 0, np.nan, 1]], [0.5]), g)
    with pytest.raises(DetcalInputError, match="negative extent"):
        match(dets_of([[0, 0, 1, 1]], [0.5]), gt_of([[5, 0, 1, 1]]))
    with pytest.raises(DetcalInputError, match="mode"):
        match(dets_of([[0, 0, 1, 1]], [0.5]), g, mode="greedy")
    with pytest.raises(DetcalInputError, match="iou_thresholds"):
        match(dets_of([[0, 0, 1, 1]], [0.5]), g, (1.5,))
    with pytest.raises(DetcalInputError, match="kitti"):
        match(dets_of([[0, 0, 1, 1]], [0.5]), g, "kitti")
    with pytest.raises(DetcalInputError, match="max_dets"):
        match(dets_of([[0, 0, 1, 1]], [0.5]), g, max_dets=0)
    with pytest.raises(DetcalInputError, match="image_id") as e:
        match(dets_of([[0, 0, 1, 1]], [0.5], imgs=[7]), g, images=Images(id=[1], width=[10], height=[10]))
    assert e.value.field == "image_id" and "row 0" in str(e.value.record)


# --------------------------------------------------------------------------- one layout, any GT flags


def _flagged(gt: GroundTruth, flags: np.ndarray) -> GroundTruth:
    g = copy.copy(gt)
    g.ignore = flags
    return g


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exclusive_outcome_equals_match_under_any_flags(seed: int) -> None:
    """One layout (IoUs, kept pairs, walk order), walked under many GT ignore flags (with and without the
    reference walk): every time match()'s outcome with those flags as GroundTruth.ignore."""
    from detcal.matching.engine import exclusive_layout, exclusive_outcome, exclusive_walk

    gt, dets = to_records(*make_coco(n_images=60, seed=seed, dets_per_img=25.0, crowd_frac=0.1))
    thr = [0.5, 0.6, 0.75, 0.9]
    layout = exclusive_layout(dets, gt, thr, max_dets=10 if seed % 2 else 100)
    ref = exclusive_walk(layout)
    rng = np.random.default_rng(seed)
    area = (gt.box[:, 2] - gt.box[:, 0]) * (gt.box[:, 3] - gt.box[:, 1])
    flag_sets = [
        np.zeros(len(gt), bool),
        np.ones(len(gt), bool),
        rng.random(len(gt)) < 0.3,
        rng.random(len(gt)) < 0.7,
        area < 32.0**2,
        (area < 32.0**2) | (area > 96.0**2),
    ]
    for flags in flag_sets:
        flags = flags | gt.iscrowd  # the reading of gt_ignore="ignore_or_crowd"
        want = match(dets, _flagged(gt, flags), thr, max_dets=layout_max(seed), gt_ignore="ignore_or_crowd")
        for reference in (None, ref):
            matched, ignored = exclusive_outcome(layout, flags, reference)
            np.testing.assert_array_equal(matched, want.matched)
            np.testing.assert_array_equal(ignored, want.ignored)
        np.testing.assert_array_equal(layout.considered, want.considered)


def layout_max(seed: int) -> int:
    return 10 if seed % 2 else 100


def test_exclusive_outcome_tie_between_gts_of_other_layout_flags() -> None:
    """An exact tie between two GTs that are both ignored under the walked flags, but not under the layout's
    own (a crowd GT and a plain one): pycocotools orders the two by file order, so the later one (the plain
    GT) is taken, and the next detection, which reaches only that GT, finds it taken (unmatched).

    d1 [0,0,10,10]: IoA with the crowd GT A [5,0,100,10] = 50/100 = 0.5; IoU with B [0,0,10,20] =
    100/200 = 0.5 (a tie at t = 0.5). d2 [0,10,10,20]: IoU with B = 100/200 = 0.5, no overlap with A.
    """
    from detcal.matching.engine import exclusive_layout, exclusive_outcome, exclusive_walk

    gt = gt_of([[5, 0, 100, 10], [0, 0, 10, 20]], crowd=[True, False])
    dets = dets_of([[0, 0, 10, 10], [0, 10, 10, 20]], [0.9, 0.8])
    layout = exclusive_layout(dets, gt, [0.5])
    for reference in (None, exclusive_walk(layout)):
        matched, ignored = exclusive_outcome(layout, np.array([True, True]), reference)
        assert matched.tolist() == [[False, False]] and ignored.tolist() == [[True, False]]
    want = match(dets, _flagged(gt, np.array([True, True])), [0.5], gt_ignore="ignore_or_crowd")
    assert want.gt_index.tolist() == [[1, -1]]
    # under the layout's own flags (only the crowd GT ignored) B is preferred: both detections find a GT
    matched, ignored = exclusive_outcome(layout, np.array([True, False]))
    assert matched.tolist() == [[True, False]] and ignored.tolist() == [[False, False]]
