"""pycocotools to the last bit: box areas as w*h of the input, and the `ignore` key as pycocotools 2.0.x reads it.

Boxes whose IoU is exactly 0.5 or 0.75 in decimal arithmetic land on either
side of the threshold in float64 depending on how the areas are computed;
detcal must take COCOeval's side on every one of them.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from test_matching import coco_eval, ours_ids

from detcal.core.boxes import pairwise_iou
from detcal.core.errors import DetcalInputError
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.matching import match
from detcal.matching.blocks import box_areas


def exact_iou_cases(n: int, seed: int = 0) -> tuple[dict, list[dict], np.ndarray]:
    """One GT and one detection per image, IoU exactly 1/2 or 3/4 in decimal (2-decimal coordinates).

    In cents: the boxes share one axis (same start and extent); along the other
    they overlap by ``o``; IoU = o / (a + b - o) with ``a``, ``b`` the extents:
    1/2 for ``a + b = 3o`` (a in [o, 2o]), 3/4 for ``o = 3q``, ``a + b = 7q``
    (a in [3q, 4q]). Half the cases are transposed (overlap along y), half
    put the detection first.
    """
    rng = np.random.default_rng(seed)
    images, anns, res, target = [], [], [], []
    for i in range(n):
        half = i % 2 == 0
        if half:
            o = int(rng.integers(150, 30000))
            a = int(rng.integers(o, 2 * o + 1))
            b = 3 * o - a
        else:
            q = int(rng.integers(50, 10000))
            o = 3 * q
            a = int(rng.integers(3 * q, 4 * q + 1))
            b = 7 * q - a
        s0 = int(rng.integers(0, 60000))
        ext = int(rng.integers(100, 40000))
        s1 = int(rng.integers(0, 60000))
        g_lo, d_lo = s0, s0 + a - o
        if rng.random() < 0.5:  # detection on the other side
            g_lo, d_lo = s0 + b - o, s0
        g = [g_lo, s1, a, ext]
        d = [d_lo, s1, b, ext]
        if rng.random() < 0.5:  # overlap along y
            g = [g[1], g[0], g[3], g[2]]
            d = [d[1], d[0], d[3], d[2]]
        images.append({"id": i + 1, "width": 1000, "height": 1000, "file_name": f"{i + 1}.jpg"})
        anns.append(
            {
                "id": i + 1,
                "image_id": i + 1,
                "category_id": 1,
                "iscrowd": 0,
                "bbox": [float(f"{v / 100:.2f}") for v in g],
                "area": 1.0,
            }
        )
        res.append({"image_id": i + 1, "category_id": 1, "bbox": [float(f"{v / 100:.2f}") for v in d], "score": 0.5})
        target.append(0.5 if half else 0.75)
    gt = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}
    return gt, res, np.asarray(target)


def _load(tmp_path: Path, gt: dict, res: list[dict]):
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "res.json").write_text(json.dumps(res))
    ds = load_coco_instances(tmp_path / "gt.json")
    return ds, load_coco_results(tmp_path / "res.json", ds)


def test_iou_exactly_at_05_and_075_agrees_with_cocoeval(tmp_path: Path) -> None:
    gt, res, target = exact_iou_cases(2000)
    ds, dets = _load(tmp_path, gt, res)
    thr = [0.5, 0.75]
    m_ref, ig_ref, seen, _ = coco_eval(gt, res, thr)
    assert seen.all()
    r = match(dets, ds.gt, thr, max_dets=100)
    assert (ours_ids(ds.gt, r) == m_ref).all() and (r.ignored == ig_ref).all()  # 100% of the decisions
    # the data sit on the threshold: pycocotools' float64 IoU falls on both sides of it
    at = np.where(target == 0.5, m_ref[0] > 0, m_ref[1] > 0)
    assert 0.1 < at.mean() < 0.9
    # and corner arithmetic ((x2 - x1) * (y2 - y1)) would disagree with COCOeval on some of them
    plain = match(dataclasses.replace(dets, wh=None), dataclasses.replace(ds.gt, wh=None), thr, max_dets=100)
    n_diff = int((ours_ids(ds.gt, plain) != m_ref).sum())
    assert n_diff >= 20


def test_box_areas_use_input_width_height_only_when_they_are_the_box() -> None:
    # x = 0.1, w = 0.2: x2 = 0.30000000000000004, so x2 - x1 = 0.20000000000000004 != 0.2
    box = np.array([[0.1, 0.0, 0.1 + 0.2, 1.0], [0.1, 0.0, 0.5, 1.0]])
    wh = np.array([[0.2, 1.0], [0.2, 1.0]])  # row 1: stale width (the box was changed)
    a = box_areas(box, wh)
    assert a[0] == 0.2 and (0.1 + 0.2) - 0.1 != 0.2
    assert a[1] == (0.5 - 0.1) * 1.0
    assert box_areas(box, None).tolist() == [((0.1 + 0.2) - 0.1) * 1.0, (0.5 - 0.1) * 1.0]


def test_pairwise_iou_with_input_width_height(tmp_path: Path) -> None:
    gt, res, _ = exact_iou_cases(200, seed=1)
    ds, dets = _load(tmp_path, gt, res)
    _, _, _, E = coco_eval(gt, res, [0.5])
    for k in range(0, 200, 7):
        want = float(np.asarray(E.ious[(k + 1, 1)]).reshape(-1)[0])
        got = pairwise_iou(
            dets.box[k : k + 1], ds.gt.box[k : k + 1], a_wh=dets.wh[k : k + 1], b_wh=ds.gt.wh[k : k + 1]
        )[0, 0]
        assert got == want
        r = match(dets.select([k]), ds.gt.select([k]), [0.5])
        assert r.iou[0] == want


def _ignore_set() -> tuple[dict, list[dict]]:
    # image 1: GT with ignore=1, iscrowd=0 and a detection on it; image 2: ignore=0, iscrowd=1 with a detection;
    # image 3: ignore=1 and iscrowd=1.
    box = [10.0, 10.0, 50.0, 40.0]
    images = [{"id": i, "width": 100, "height": 100, "file_name": f"{i}.jpg"} for i in (1, 2, 3)]
    anns = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": box, "area": 2000.0, "iscrowd": 0, "ignore": 1},
        {"id": 2, "image_id": 2, "category_id": 1, "bbox": box, "area": 2000.0, "iscrowd": 1, "ignore": 0},
        {"id": 3, "image_id": 3, "category_id": 1, "bbox": box, "area": 2000.0, "iscrowd": 1, "ignore": 1},
    ]
    res = [{"image_id": i, "category_id": 1, "bbox": box, "score": 0.9} for i in (1, 2, 3)]
    return {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}, res


def test_ignore_key_read_as_pycocotools(tmp_path: Path) -> None:
    gt, res = _ignore_set()
    ds, dets = _load(tmp_path, gt, res)
    m_ref, ig_ref, _, _ = coco_eval(gt, res, [0.5])
    # pycocotools 2.0.x: ignore := iscrowd, so the 'ignore': 1 box of image 1 is a regular GT (TP)
    assert m_ref[0].tolist() == [1, 2, 3] and ig_ref[0].tolist() == [False, True, True]
    r = match(dets, ds.gt, [0.5])
    assert (ours_ids(ds.gt, r) == m_ref).all() and (r.ignored == ig_ref).all()
    assert r.params["gt_ignored"] == "iscrowd (pycocotools)"
    # detcal's earlier reading, behind the option: the 'ignore': 1 box is ignored
    old = match(dets, ds.gt, [0.5], gt_ignore="ignore_or_crowd")
    assert old.ignored[0].tolist() == [True, True, True] and not old.matched.any()
    with pytest.raises(DetcalInputError, match="gt_ignore"):
        match(dets, ds.gt, [0.5], gt_ignore="coco")
