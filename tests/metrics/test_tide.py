"""TIDE error types (detcal.metrics.tide) equal tidecv 1.0.1, the authors' package (a test-only dependency).

Every reference number is computed by tidecv in the test itself, from the same COCO JSON files detcal reads:
the bundled real detectors (coco_mini79, coco_tfzoo) and generated sets built to hit every rule (crowd
boxes, equal scores, more than 100 detections in an image, images without ground truth or without
detections, classes without ground truth, boxes on the IoU thresholds). tidecv predates numpy 2 (it
uses ``np.float``-style aliases, set here) and its COCO reader needs a ``segmentation`` per annotation
(a box polygon is written where the file has none).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detcal.data import bundled
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.metrics.tide import CLS, ERROR_TYPES, LABELS, LOC, TP, tide

for _alias, _type in (("float", float), ("int", int), ("bool", bool)):
    if not hasattr(np, _alias):
        setattr(np, _alias, _type)
tidecv = pytest.importorskip("tidecv")


@pytest.fixture(autouse=True)
def _matplotlib_settings_kept() -> object:
    """tidecv's plotter changes matplotlib's global settings (dpi 150, seaborn's whitegrid style) when a TIDE
    object is built; they are put back after each test, so that later figure tests see the defaults."""
    import matplotlib

    with matplotlib.rc_context():
        yield


TOL = 1e-9
_SHORT = {"Cls": "cls", "Loc": "loc", "Both": "both", "Dupe": "dupe", "Bkg": "bkg", "Miss": "miss"}


def _with_segmentation(src: Path, out: Path) -> Path:
    """The instances file with a box polygon as ``segmentation`` where an annotation has none (tidecv reads it)."""
    d = json.loads(Path(src).read_text())
    for a in d["annotations"]:
        if "segmentation" not in a:
            x, y, w, h = a["bbox"]
            a["segmentation"] = [[x, y, x + w, y, x + w, y + h, x, y + h]]
    out.write_text(json.dumps(d))
    return out


def _reference(gt: Path, results: Path) -> dict:
    """tidecv's numbers and its per-detection types (index in the results file -> short name)."""
    from tidecv import TIDE, datasets

    t = TIDE()
    t.evaluate(datasets.COCO(str(gt)), datasets.COCOResult(str(results)), mode=TIDE.BOX, name="run")
    run = t.runs["run"]
    main = {_SHORT[k]: v for k, v in t.get_main_errors()["run"].items()}
    special = t.get_special_errors()["run"]
    types = {}
    for err_type, errs in run.error_dict.items():
        for e in errs:
            if hasattr(e, "pred"):
                types[e.pred["_id"]] = _SHORT[err_type.short_name]
    tps = {p["_id"] for p in run.preds.annotations if p.get("used") is True}
    counts = {_SHORT[e.short_name]: len(v) for e, v in run.error_dict.items()}
    return {"ap": run.ap, "main": main, "fp": special["FalsePos"], "fn": special["FalseNeg"], "types": types,
            "tps": tps, "counts": counts}  # fmt: skip


def _check(gt: Path, results: Path) -> None:
    ref = _reference(gt, results)
    ds, dets = load_coco_instances(gt), load_coco_results(results)
    got = tide(ds.images, ds.gt, dets)
    assert got.ap == pytest.approx(ref["ap"], abs=TOL)
    for k, v in ref["main"].items():
        assert got.main[k] == pytest.approx(v, abs=TOL), k
    assert got.special["fp"] == pytest.approx(ref["fp"], abs=TOL)
    assert got.special["fn"] == pytest.approx(ref["fn"], abs=TOL)
    assert got.counts == ref["counts"]
    labels = got.labels()
    want = np.full(len(dets), "", dtype=object)
    for i in ref["tps"]:
        want[i] = "tp"
    for i, name in ref["types"].items():
        want[i] = name
    assert (labels == want).all(), np.flatnonzero(labels != want)[:10]


@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_equals_tidecv_on_coco_mini79(detector: str, tmp_path: Path) -> None:
    gt = _with_segmentation(bundled.path("coco_mini79"), tmp_path / "gt.json")
    _check(gt, bundled.path("coco_mini79", detector))


@pytest.mark.slow
@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_equals_tidecv_on_coco_tfzoo(detector: str, tmp_path: Path) -> None:
    """All 5,000 val2017 images (tidecv takes about 3 s a detector)."""
    gt = _with_segmentation(bundled.path("coco_tfzoo"), tmp_path / "gt.json")
    _check(gt, bundled.path("coco_tfzoo", detector))


def _generated(seed: int, n_img: int = 40, n_cls: int = 4, quantise: bool = True) -> tuple[dict, list]:
    """A COCO set hitting TIDE's rules: class swaps, shifted and duplicated boxes, background boxes, crowd
    boxes, a crowded image past 100 detections, images without GT or detections, a class without GT, and
    (``quantise``) scores on a coarse grid so that many are equal."""
    rng = np.random.default_rng(seed)
    images, anns, dets = [], [], []
    for i in range(n_img):
        images.append({"id": i + 1, "width": 200, "height": 150, "file_name": f"{i}.jpg"})
        n_gt = 0 if i % 9 == 4 else int(rng.integers(1, 8))
        boxes = []
        for _ in range(n_gt):
            w, h = (float(v) for v in rng.uniform(10, 60, 2).round(1))
            x, y = round(float(rng.uniform(0, 200 - w)), 1), round(float(rng.uniform(0, 150 - h)), 1)
            c = int(rng.integers(1, n_cls + 1))
            crowd = int(rng.random() < 0.08)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": c, "bbox": [x, y, w, h],
                         "area": float(w * h), "iscrowd": crowd})  # fmt: skip
            boxes.append((x, y, w, h, c))
        if i % 11 == 7:
            continue  # no detections here
        n_det = 130 if i == 3 else int(rng.integers(0, 14))
        for _ in range(n_det):
            kind = rng.random()
            if boxes and kind < 0.75:
                x, y, w, h, c = boxes[int(rng.integers(len(boxes)))]
                s = rng.choice([0.0, 0.0, 2.0, 6.0, 12.0, 25.0])  # exact, small shifts, near and past IoU 0.5
                x, y = x + rng.uniform(-s, s), y + rng.uniform(-s, s)
                w, h = w * rng.uniform(0.8, 1.25), h * rng.uniform(0.8, 1.25)
                if rng.random() < 0.2:
                    c = int(rng.integers(1, n_cls + 2))  # class n_cls + 1 has no ground truth
            else:
                w, h = rng.uniform(5, 60, 2)
                x, y = rng.uniform(0, 190), rng.uniform(0, 140)
                c = int(rng.integers(1, n_cls + 2))
            score = float(rng.integers(1, 8) / 8) if quantise else float(rng.random())
            dets.append({"image_id": i + 1, "category_id": c, "bbox": [float(x), float(y), float(w), float(h)],
                         "score": score})  # fmt: skip
    cats = [{"id": c, "name": f"c{c}"} for c in range(1, n_cls + 2)]
    return {"images": images, "annotations": anns, "categories": cats}, dets


@pytest.mark.parametrize("seed,quantise", [(0, True), (1, True), (2, False), (3, True), (4, False)])
def test_equals_tidecv_on_generated_sets(seed: int, quantise: bool, tmp_path: Path) -> None:
    gt, dets = _generated(seed, quantise=quantise)
    gp, rp = tmp_path / "gt.json", tmp_path / "dt.json"
    gp.write_text(json.dumps(gt))
    rp.write_text(json.dumps(dets))
    _check(_with_segmentation(gp, gp), rp)
    r = tide(*_loaded(gp, rp))  # the set reaches every rule
    assert min(r.counts.values()) > 0 and r.to_dict()["n_ignored"] > 0 and (r.code == -1).sum() == 30


def _loaded(gp: Path, rp: Path) -> tuple:
    ds = load_coco_instances(gp)
    return ds.images, ds.gt, load_coco_results(rp)


def _tiny() -> tuple:
    """One 100 x 100 image, two GT boxes (class 1 top left, class 2 bottom right), six class-1 detections, one
    per type, scores falling from 0.9 (hand-built; the expected types are read off the rules)."""
    from detcal.core.types import Detections, GroundTruth, Images

    images = Images(id=np.array([1]), width=np.array([100.0]), height=np.array([100.0]))
    gt = GroundTruth(image_id=[1, 1], box=[[0, 0, 40, 40], [60, 60, 100, 100]], category=[1, 2])
    box = [
        [0, 0, 40, 40],  # tp: IoU 1 with the class-1 box
        [60, 60, 100, 100],  # cls: IoU 1 with the class-2 box
        [0, 0, 40, 40],  # dupe: IoU 1 with the class-1 box, already taken
        [0, 0, 40, 16],  # loc: IoU 640 / 1600 = 0.4 with the class-1 box
        [45, 45, 55, 55],  # bkg: no overlap
        [60, 60, 100, 72],  # both: IoU 480 / 1600 = 0.3 with the class-2 box, none with its own class
    ]
    dets = Detections(image_id=[1] * 6, box=box, score=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], category=[1] * 6)
    return images, gt, dets


def test_types_and_daps_by_hand() -> None:
    images, gt, dets = _tiny()
    r = tide(images, gt, dets)
    assert r.labels().tolist() == ["tp", "cls", "dupe", "loc", "bkg", "both"]
    assert r.code[0] == TP and r.code[1] == CLS and r.code[3] == LOC
    assert r.target[1] == 1 and r.target[3] == 0  # the cls error points at the class-2 box, loc at the class-1 box
    # class 1: its true positive comes first, AP 100; class 2: one box, no detection, AP 0
    assert r.ap == pytest.approx(50.0)
    # fixing cls moves the second detection to class 2 as its true positive: both classes AP 100
    assert r.main["cls"] == pytest.approx(50.0)
    # the loc error's box is taken (not fixable); removing FPs ranked after the only TP changes nothing
    assert r.main["loc"] == r.main["dupe"] == r.main["bkg"] == r.main["both"] == 0.0
    # the class-2 box is a cls error's target, so it is no miss; as a false negative it leaves the count
    # and class 2 (no box, no detection) leaves the mean
    assert r.counts == {"cls": 1, "loc": 1, "both": 1, "dupe": 1, "bkg": 1, "miss": 0}
    assert r.special["fn"] == pytest.approx(50.0) and r.special["fp"] == pytest.approx(0.0)
    assert set(LABELS) == {"tp", *ERROR_TYPES}


def test_max_dets_cut_and_unknown_image() -> None:
    """Detections past the 100 best of an image, or in an image the dataset lacks, are not evaluated."""
    from detcal.core.types import Detections, GroundTruth, Images

    images = Images(id=np.array([1]), width=np.array([100.0]), height=np.array([100.0]))
    gt = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[1])
    n = 102
    dets = Detections(
        image_id=[1] * n + [9],
        box=[[50, 50, 60, 60]] * (n + 1),
        score=np.linspace(1, 0.5, n + 1),
        category=[1] * (n + 1),
    )
    r = tide(images, gt, dets)
    assert (r.code[:100] >= 0).all() and (r.code[100:] == -1).all()
    assert r.to_dict()["n_evaluated"] == 100


def test_grid_count_equals_searchsorted() -> None:
    """The arithmetic count of recall / score grid points equals a binary search, on the points themselves,
    their neighbouring floats and random values."""
    from detcal.metrics.tide import _X, grid_count

    rng = np.random.default_rng(0)
    v = np.concatenate([rng.random(100_000), _X, np.nextafter(_X, 2), np.nextafter(_X, -1), np.arange(1001) / 1000,
                        np.arange(301) / 300, [-0.5, 1.5]])  # fmt: skip
    assert (grid_count(v) == np.searchsorted(_X, v, side="right")).all()


def test_no_ground_truth_and_crowd_only() -> None:
    """Without any box every detection is background and no fix can gain AP (tidecv itself divides by zero
    there; detcal calls the mAP of nothing 0); inside a crowd box of its class a detection is ignored."""
    from detcal.core.types import Detections, GroundTruth, Images

    images = Images(id=np.array([1, 2]), width=np.array([100.0, 100.0]), height=np.array([100.0, 100.0]))
    none = GroundTruth(image_id=np.zeros(0, int), box=np.zeros((0, 4)), category=np.zeros(0, int))
    dets = Detections(image_id=[1, 2], box=[[0, 0, 10, 10], [5, 5, 20, 20]], score=[0.9, 0.4], category=[1, 2])
    r = tide(images, none, dets)
    assert r.labels().tolist() == ["bkg", "bkg"] and r.ap == 0.0
    assert all(v == 0.0 for v in r.main.values()) and all(v == 0.0 for v in r.special.values())
    crowd = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[1], iscrowd=[True])
    r = tide(images, crowd, dets)
    assert r.ignored.tolist() == [True, False] and r.labels().tolist() == ["bkg", "bkg"]
