"""Open Images V7: group-of boxes, hierarchy expansion and image-level labels; AP per class and mAP at
IoU 0.5 equal to hotcoco's Open Images evaluation, and hand-worked cases of the challenge's rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detcal.data.openimages import load_openimages
from detcal.matching.openimages import match_openimages
from detcal.metrics.voc_ap import voc_ap

# a small tree: 1 animal <- 2 dog, 3 cat; 4 vehicle <- 5 car; 6 person (a root)
CATS = [
    {"id": 1, "name": "animal"},
    {"id": 2, "name": "dog", "supercategory": "animal"},
    {"id": 3, "name": "cat", "supercategory": "animal"},
    {"id": 4, "name": "vehicle"},
    {"id": 5, "name": "car", "supercategory": "vehicle"},
    {"id": 6, "name": "person"},
]
PARENT = {2: 1, 3: 1, 5: 4}
LEAVES = (2, 3, 5, 6)


def _generate(root: Path, seed: int, n_images: int = 25) -> tuple[Path, Path]:
    """Leaf boxes (some group-of) and detections of leaves and parents near them and elsewhere; every image
    labels every class (so the verified-label filter keeps all: hotcoco does not read image-level labels)."""
    rng = np.random.default_rng(seed)
    images, anns, dets = [], [], []
    for i in range(1, n_images + 1):
        images.append({"id": i, "width": 400, "height": 300, "pos_category_ids": [], "neg_category_ids": [1, 4, 6]})
        for _ in range(int(rng.integers(0, 5))):
            c, group = int(rng.choice(LEAVES)), bool(rng.random() < 0.25)
            w, h = rng.uniform(10, 120) * (2 if group else 1), rng.uniform(10, 100) * (2 if group else 1)
            x, y = rng.uniform(0, 400 - w), rng.uniform(0, 300 - h)
            anns.append({"id": len(anns) + 1, "image_id": i, "category_id": c, "bbox": [x, y, w, h],
                         "area": w * h, "iscrowd": 0, "is_group_of": group})  # fmt: skip
            for _ in range(int(rng.integers(0, 4 if not group else 6))):
                if group:  # small boxes inside the group
                    bw, bh = w * rng.uniform(0.1, 0.4), h * rng.uniform(0.1, 0.4)
                    b = [x + rng.uniform(0, w - bw), y + rng.uniform(0, h - bh), bw, bh]
                else:
                    j = rng.normal(0, 0.1, 4) * [w, h, w, h]
                    b = [x + j[0], y + j[1], max(w + j[2], 2.0), max(h + j[3], 2.0)]
                cc = c if rng.random() < 0.7 else (PARENT.get(c, c) if rng.random() < 0.5 else int(rng.integers(1, 7)))
                dets.append({"image_id": i, "category_id": cc, "bbox": b})
        for _ in range(int(rng.integers(0, 3))):
            x, y = rng.uniform(0, 350), rng.uniform(0, 250)
            dets.append({"image_id": i, "category_id": int(rng.integers(1, 7)), "bbox": [x, y, 40.0, 40.0]})
    for d, s in zip(dets, rng.permutation(len(dets))):
        d["score"] = float((s + 1) / (len(dets) + 1))
        d["bbox"] = [float(v) for v in d["bbox"]]
    gt, dt = root / f"oi_{seed}.json", root / f"oi_dets_{seed}.json"
    gt.write_text(json.dumps({"images": images, "annotations": anns, "categories": CATS}))
    dt.write_text(json.dumps(dets))
    return gt, dt


def _hotcoco(gt: Path, dt: Path) -> dict[str, float]:
    hotcoco = pytest.importorskip("hotcoco")
    g = hotcoco.COCO(str(gt))
    ev = hotcoco.COCOeval(
        g, g.load_res(str(dt)), "bbox", oid_style=True, hierarchy=hotcoco.Hierarchy.from_parent_map(PARENT)
    )
    ev.run()
    return {k: float(v) for k, v in ev.get_results(per_class=True).items()}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_ap_per_class_and_map_equal_hotcoco(tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    gt, dt = _generate(tmp_path, seed)
    want = _hotcoco(gt, dt)
    capsys.readouterr()
    data = load_openimages(gt, dt)
    ds, dets = data.dataset, data.detections
    for single in ("tf", "greedy"):  # the two agree here: no duplicate has a second free box
        mr = match_openimages(dets, ds.gt, (0.5,), data.protocol, single=single)
        (got,) = voc_ap(dets, ds.gt, mr, sorted(ds.categories), "area")
        for c, ap in got.per_class.items():
            key = f"AP/{ds.categories[c]}"
            if key in want:
                assert ap == pytest.approx(want[key], abs=1e-12), (key, ap, want[key])
            else:
                assert np.isnan(ap)
        assert got.mean == pytest.approx(want["AP"], abs=1e-12)
    assert data.protocol.group_of.sum() > 0 and len(ds.gt) > len(json.loads(gt.read_text())["annotations"])


def _tiny(tmp_path: Path, images: list[dict[str, Any]], anns: list[dict[str, Any]], dets: list[dict[str, Any]]) -> Any:
    for k, a in enumerate(anns, 1):
        a.setdefault("id", k)
        a.setdefault("area", a["bbox"][2] * a["bbox"][3])
    (tmp_path / "gt.json").write_text(json.dumps({"images": images, "annotations": anns, "categories": CATS}))
    (tmp_path / "dt.json").write_text(json.dumps(dets))
    return load_openimages(tmp_path / "gt.json", tmp_path / "dt.json")


def test_hand_worked_rules(tmp_path: Path) -> None:
    """Image 1: a dog box A [0,0,10,10], a group-of car box G [50,50,100,100]; labels: person verified
    absent, cat verified present (no box). Detections, by score:

    0.9 dog on A (IoU 1): TP;  0.85 animal on A: TP of the expanded animal box (hierarchy);
    0.8 dog on A again: duplicate -> FP (no group-of dog box); 0.7 car inside G (IoA 1): the group's TP;
    0.6 car inside G: ignored (the group is found once); 0.5 person anywhere: FP (verified absent);
    0.4 cat anywhere: FP (verified present, no box); 0.3 vehicle in image 2 (no label, no box): not evaluated."""
    images = [
        {"id": 1, "width": 200, "height": 200, "pos_category_ids": [3], "neg_category_ids": [6]},
        {"id": 2, "width": 200, "height": 200},
    ]
    anns = [
        {"image_id": 1, "category_id": 2, "bbox": [0, 0, 10, 10]},
        {"image_id": 1, "category_id": 5, "bbox": [50, 50, 100, 100], "is_group_of": True},
    ]
    box = {"A": [0, 0, 10, 10], "in_G": [60, 60, 10, 10], "far": [170, 170, 10, 10]}
    dets = [
        {"image_id": 1, "category_id": 2, "bbox": box["A"], "score": 0.9},
        {"image_id": 1, "category_id": 1, "bbox": box["A"], "score": 0.85},
        {"image_id": 1, "category_id": 2, "bbox": box["A"], "score": 0.8},
        {"image_id": 1, "category_id": 5, "bbox": box["in_G"], "score": 0.7},
        {"image_id": 1, "category_id": 5, "bbox": [80, 80, 20, 20], "score": 0.6},
        {"image_id": 1, "category_id": 6, "bbox": box["far"], "score": 0.5},
        {"image_id": 1, "category_id": 3, "bbox": box["far"], "score": 0.4},
        {"image_id": 2, "category_id": 4, "bbox": box["far"], "score": 0.3},
    ]
    data = _tiny(tmp_path, images, anns, dets)
    g = data.dataset.gt
    # expansion: dog -> animal, group-of car -> group-of vehicle
    assert sorted(zip(g.category.tolist(), data.protocol.group_of.tolist())) == [
        (1, False), (2, False), (4, True), (5, True)
    ]  # fmt: skip
    mr = match_openimages(data.detections, g, (0.5,), data.protocol)
    assert mr.considered.tolist() == [True] * 7 + [False]
    assert mr.matched[0].tolist() == [True, True, False, True, False, False, False, False]
    assert mr.ignored[0].tolist() == [False, False, False, False, True, False, False, False]
    rows, y = mr.sample(0.5)
    assert rows.tolist() == [0, 1, 2, 3, 5, 6] and y.tolist() == [True, True, False, True, False, False]
    (ap,) = voc_ap(data.detections, g, mr, sorted(data.dataset.categories), "area")
    # dog: TP then FP, 1 box -> AP 1; car: the group is 1 object, found -> 1; animal -> 1;
    # person and cat: no boxes -> no AP; vehicle: its group-of box not found (no vehicle detection evaluated) -> 0
    assert ap.per_class[2] == 1.0 and ap.per_class[5] == 1.0 and ap.per_class[1] == 1.0
    assert ap.per_class[4] == 0.0 and np.isnan(ap.per_class[6]) and np.isnan(ap.per_class[3])
    assert ap.mean == pytest.approx(0.75)


def test_negative_labels_expand_down_and_positive_up(tmp_path: Path) -> None:
    images = [{"id": 1, "width": 50, "height": 50, "pos_category_ids": [5], "neg_category_ids": [1]}]
    data = _tiny(tmp_path, images, [], [])
    ev = data.protocol.evaluable.tolist()
    assert sorted(ev) == [[1, 1], [1, 2], [1, 3], [1, 4], [1, 5]]  # animal down to dog, cat; car up to vehicle


def test_evaluate_with_open_images_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """detcal.evaluate(data=openimages, matching=openimages): the accuracy block's mAP is hotcoco's, and the
    confidence sample is the Open Images sample (group-of extras and unverified classes left out)."""
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec

    gt, dt = _generate(tmp_path, 0)
    want = _hotcoco(gt, dt)
    capsys.readouterr()
    spec = EvaluationSpec(
        bootstrap=BootstrapSpec(n=0), matching=MatchingSpec(mode="openimages", iou_thresholds=[0.5], max_dets=None)
    )
    m = detcal.evaluate(DataSpec(source="openimages", gt=str(gt), results=str(dt)), spec=spec, workdir=tmp_path / "r")
    out = m.to_dict()
    assert out["accuracy"]["openimages_ap"]["mAP"] == pytest.approx(want["AP"], abs=1e-12)
    data = load_openimages(gt, dt)
    rows, _ = match_openimages(data.detections, data.dataset.gt, (0.5,), data.protocol).sample(0.5)
    assert out["confidence"]["iou=0.50"]["ece"]["params"]["n"] == len(rows) < len(data.detections)


def test_a_duplicate_does_not_fall_back_to_a_free_box(tmp_path: Path) -> None:
    """Two dog boxes A [0,0,10,10] and B [0,2,10,12] (IoU 8/12 = 0.667); detections on A at 0.9 and
    [0,1,10,11] at 0.8 (IoU 0.818 with A, 0.818 with B: the first in file order, A, is its best).
    TF rule: the second is a duplicate of A (FP), AP = 0.5 (recall 1/2 at precision 1, then nothing);
    hotcoco's greedy rule: it takes the free B, AP = 1."""
    images = [{"id": 1, "width": 50, "height": 50, "pos_category_ids": [2]}]
    anns = [
        {"image_id": 1, "category_id": 2, "bbox": [0, 0, 10, 10]},
        {"image_id": 1, "category_id": 2, "bbox": [0, 2, 10, 10]},
    ]
    dets = [
        {"image_id": 1, "category_id": 2, "bbox": [0, 0, 10, 10], "score": 0.9},
        {"image_id": 1, "category_id": 2, "bbox": [0, 1, 10, 10], "score": 0.8},
    ]
    data = _tiny(tmp_path, images, anns, dets)
    g = data.dataset.gt
    tf = match_openimages(data.detections, g, (0.5,), data.protocol)
    greedy = match_openimages(data.detections, g, (0.5,), data.protocol, single="greedy")
    assert tf.matched[0].tolist() == [True, False] and greedy.matched[0].tolist() == [True, True]
    assert voc_ap(data.detections, g, tf, [2], "area")[0].per_class[2] == pytest.approx(0.5)
    assert voc_ap(data.detections, g, greedy, [2], "area")[0].per_class[2] == pytest.approx(1.0)
