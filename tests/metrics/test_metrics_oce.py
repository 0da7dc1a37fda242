"""OCE and image-level reliability against hand calculations (the definitions in docs/newest_measures.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth
from detcal.metrics._pairs import pair_iou
from detcal.metrics.image_reliability import contrastive_conf, fit_lambda, pearson, per_image_oce, split_confidence
from detcal.metrics.oce import object_scores, oce


def _scene(probs: bool = False) -> tuple[Detections, GroundTruth]:
    """Image 1: object a (class 1, [0,0,10,10]), object b (class 2, missed), a crowd box (missed).

    Detections: A = a's box (IoU 1, score 0.8, class 1); B = [0,0,10,5] (IoU 0.5 with a,
    score 0.6, class 2); C far from everything (score 0.9, class 1); D on image 2 (no objects)."""
    gt = GroundTruth(
        image_id=[1, 1, 1],
        box=[[0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 30]],
        category=[1, 2, 1],
        iscrowd=[False, False, True],
    )
    cp = np.array([[0.8, 0.1], [0.3, 0.6], [0.9, 0.05], [0.5, 0.5]]) if probs else None
    dets = Detections(
        image_id=[1, 1, 1, 2],
        box=[[0, 0, 10, 10], [0, 0, 10, 5], [200, 200, 210, 210], [0, 0, 5, 5]],
        score=[0.8, 0.6, 0.9, 0.5],
        category=[1, 2, 1, 1],
        class_probs=cp,
    )
    return dets, gt


# Hand calculation, binary Brier (2 (1 - s)^2 when the aggregated class is the object's, else 2 s^2).
# tau 0.5: A and B match object a; tau 0.75: only A.
#   mean:          s = 0.7, classes {1, 2} tie -> 1 (the smallest): 2 * 0.3^2 = 0.18; tau 0.75: 2 * 0.2^2 = 0.08
#   max_iou:       A: 0.08 at both thresholds
#   iou_weighted:  s = (1 * 0.8 + 0.5 * 0.6) / 1.5 = 11/15, class of A: 2 * (4/15)^2; tau 0.75: 0.08
# object b is missed: 1 at both thresholds.
BINARY_A = {"mean": (0.18, 0.08), "max_iou": (0.08, 0.08), "iou_weighted": (2 * (4 / 15) ** 2, 0.08)}


@pytest.mark.parametrize("aggregation", ["mean", "max_iou", "iou_weighted"])
def test_oce_binary_hand(aggregation: str) -> None:
    dets, gt = _scene()
    a5, a75 = BINARY_A[aggregation]
    r = oce(dets, gt, aggregation=aggregation)
    assert r.params["brier"] == "binary" and r.variant == "detcal"
    np.testing.assert_allclose(r.table["oce"], [(a5 + 1) / 2, (a75 + 1) / 2], rtol=0, atol=1e-15)
    assert r.value == pytest.approx(((a5 + 1) / 2 + (a75 + 1) / 2) / 2, abs=1e-15)
    assert r.extra["n_objects"] == 2
    assert list(r.table["n_missed"]) == [1, 1]
    s = object_scores(dets, gt, aggregation=aggregation)
    np.testing.assert_allclose(s.per_object, [(a5 + a75) / 2, 1.0], atol=1e-15)
    assert list(s.gt_rows) == [0, 1]
    assert s.n_matched.tolist() == [[2, 0], [1, 0]]
    # uq-detr's objects: every box, the crowd one too (missed: 1)
    u = oce(dets, gt, aggregation=aggregation, variant="uq_detr")
    assert u.value == pytest.approx(((a5 + 2) / 3 + (a75 + 2) / 3) / 2, abs=1e-15)


def test_oce_multiclass_hand() -> None:
    dets, gt = _scene(probs=True)
    # tau 0.5, mean: pbar = ([0.8, 0.1] + [0.3, 0.6]) / 2 = [0.55, 0.35]; object a is class 1 (column 0):
    #   (1 - 0.55)^2 + 0.35^2 = 0.325; tau 0.75: A alone: 0.2^2 + 0.1^2 = 0.05
    r = oce(dets, gt, aggregation="mean")
    assert r.params["brier"] == "multiclass"
    np.testing.assert_allclose(r.table["oce"], [(0.325 + 1) / 2, (0.05 + 1) / 2], atol=1e-15)
    # iou_weighted, tau 0.5: pbar = ([0.8, 0.1] + 0.5 [0.3, 0.6]) / 1.5 = [0.95, 0.4] / 1.5
    w = np.array([0.95, 0.4]) / 1.5
    exp = (1 - w[0]) ** 2 + w[1] ** 2
    r = oce(dets, gt, aggregation="iou_weighted")
    np.testing.assert_allclose(r.table["oce"], [(exp + 1) / 2, (0.05 + 1) / 2], atol=1e-15)
    # forcing the binary approximation on the same detections gives the binary numbers
    b = oce(dets, gt, aggregation="mean", brier="binary")
    np.testing.assert_allclose(b.table["oce"], [(0.18 + 1) / 2, (0.08 + 1) / 2], atol=1e-15)


def test_oce_majority_class_and_ties() -> None:
    gt = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[3])
    box = [[0, 0, 10, 10], [0, 0, 10, 9], [0, 0, 10, 10]]
    # classes {3, 5, 5}: the majority is 5 (not the object's): 2 * mean^2
    d = Detections(image_id=[1, 1, 1], box=box, score=[0.9, 0.3, 0.6], category=[3, 5, 5])
    assert oce(d, gt, (0.5,)).value == pytest.approx(2 * 0.6**2, abs=1e-15)
    # max_iou: rows 0 and 2 both have IoU 1; the first in the results' order (row 0, class 3) wins
    assert oce(d, gt, (0.5,), "max_iou").value == pytest.approx(2 * 0.1**2, abs=1e-15)


def test_oce_order_invariant_and_images_without_detections() -> None:
    rng = np.random.default_rng(3)
    n = 300
    xy = rng.uniform(0, 80, (n, 2))
    box = np.hstack([xy, xy + rng.uniform(5, 30, (n, 2))])
    gt = GroundTruth(
        image_id=rng.integers(0, 30, 60),
        box=box[:60] + rng.normal(0, 2, (60, 4)).clip(-1, 1),
        category=rng.integers(0, 3, 60),
    )
    d = Detections(image_id=rng.integers(0, 25, n), box=box, score=rng.uniform(0, 1, n), category=rng.integers(0, 3, n))
    perm = rng.permutation(n)
    for agg in ("mean", "iou_weighted"):
        assert oce(d, gt, aggregation=agg).value == pytest.approx(
            oce(d.select(perm), gt, aggregation=agg).value, abs=1e-14
        )
    # images 25..29 have no detection: their objects all score 1
    s = object_scores(d, gt)
    late = s.image_id >= 25
    assert late.any() and np.all(s.per_object[late] == 1.0)
    # per-image OCE = mean of the image's per-object scores
    per = per_image_oce(s, np.arange(31))
    for i in np.unique(s.image_id)[[0, 3, -1]]:
        assert per[i] == pytest.approx(s.per_object[s.image_id == i].mean(), abs=1e-15)
    assert np.isnan(per[30]) and np.isnan(per[np.setdiff1d(np.arange(30), s.image_id)]).all()


def test_pair_iou() -> None:
    a = np.array([[0, 0, 10, 10.0]])
    assert pair_iou(a, np.array([[5, 0, 15, 10.0]]))[0] == pytest.approx(50 / 150)
    assert pair_iou(a, np.array([[20, 20, 30, 30.0]]))[0] == 0.0


def test_oce_errors() -> None:
    dets, gt = _scene(probs=True)
    with pytest.raises(DetcalInputError, match="thresholds"):
        oce(dets, gt, (0.0,))
    with pytest.raises(DetcalInputError, match="aggregation"):
        oce(dets, gt, aggregation="median")
    with pytest.raises(DetcalInputError, match="columns"):
        oce(dets, gt, categories=[1, 2, 3])
    with pytest.raises(DetcalInputError, match="no class_probs column"):
        oce(dets, gt, categories=[1, 7])
    plain, _ = _scene()
    with pytest.raises(DetcalInputError, match="class distributions"):
        oce(plain, gt, brier="multiclass")
    empty = GroundTruth(image_id=np.zeros(0), box=np.zeros((0, 4)), category=np.zeros(0))
    assert np.isnan(oce(plain, empty).value)


def test_contrastive_conf_hand() -> None:
    # image 7: scores 0.9, 0.5, 0.2, 0.1; image 8: 0.25, 0.05 (nothing above 0.3); image 9: no prediction
    ids = np.array([7, 7, 7, 7, 8, 8])
    s = np.array([0.5, 0.9, 0.1, 0.2, 0.25, 0.05])
    pos, neg = split_confidence(ids, s, [7, 8, 9], "threshold", 0.3)
    np.testing.assert_allclose(pos, [0.7, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(neg, [0.15, 0.15, 0.0], atol=1e-15)
    np.testing.assert_allclose(contrastive_conf(ids, s, [7, 8, 9], "threshold", 0.3, 2.0), [0.4, -0.3, 0.0], atol=1e-15)
    pos, neg = split_confidence(ids, s, [7, 8, 9], "topk", 3)
    np.testing.assert_allclose(pos, [1.6 / 3, 0.15, 0.0], atol=1e-15)
    np.testing.assert_allclose(neg, [0.1, 0.0, 0.0], atol=1e-15)
    # NMS at 0.5: boxes 0.9 and 0.5 overlap fully (the 0.5 one is suppressed), 0.2 and 0.1 are apart:
    # kept {0.9, 0.2, 0.1}; discarded: outside the 3 highest scores -> {0.1}
    box = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [50, 50, 60, 60], [90, 90, 99, 99], [0, 0, 1, 1], [5, 5, 6, 6.0]])
    pos, neg = split_confidence(ids, s, [7, 8, 9], "nms", 0.5, box=box)
    np.testing.assert_allclose(pos, [1.2 / 3, 0.15, 0.0], atol=1e-15)
    np.testing.assert_allclose(neg, [0.1, 0.0, 0.0], atol=1e-15)
    with pytest.raises(DetcalInputError, match="unknown image id"):
        split_confidence(ids, s, [7], "threshold", 0.3)


def test_fit_lambda_picks_the_best_correlation() -> None:
    rng = np.random.default_rng(5)
    pos, neg = rng.uniform(0.3, 1, 200), rng.uniform(0, 0.3, 200)
    rel = pos - 4.0 * neg + rng.normal(0, 0.01, 200)
    rel[3] = np.nan
    lam, r, all_r = fit_lambda(pos, neg, rel)
    assert lam == 4.0 and r == all_r.max()
    ok = ~np.isnan(rel)
    # the correlation of the chosen lambda, written out
    x = pos[ok] - 4.0 * neg[ok]
    want = np.sum((x - x.mean()) * (rel[ok] - rel[ok].mean())) / np.sqrt(
        np.sum((x - x.mean()) ** 2) * np.sum((rel[ok] - rel[ok].mean()) ** 2)
    )
    assert r == pytest.approx(want, abs=1e-12)
    assert pearson(np.ones((1, 5)), np.arange(5.0))[0] != pearson(np.ones((1, 5)), np.arange(5.0))[0]  # NaN
    with pytest.raises(DetcalInputError, match="at least 3"):
        fit_lambda(pos[:2], neg[:2], rel[:2])


def test_evaluate_writes_oce_without_changing_other_numbers(tmp_path) -> None:
    import csv
    import json

    import jsonschema

    from detcal.data.bundled import load
    from detcal.metrics.uq_detr import uq_detr_suite
    from detcal.pipeline.evaluation import evaluate
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, OCESpec, UqDetrSpec

    ds, dets = load("coco_mini79", detector="rfcn-resnet-101")
    on = EvaluationSpec(bootstrap=BootstrapSpec(n=0), oce=OCESpec(per_image_csv=True), uq_detr=UqDetrSpec(enabled=True))
    off = EvaluationSpec(bootstrap=BootstrapSpec(n=0), oce=OCESpec(enabled=False))
    a = evaluate(ds, dets, on).write(tmp_path / "on", plots=False, csv=False)
    b = evaluate(ds, dets, off).write(tmp_path / "off", plots=False, csv=False)
    schema = json.loads((Path(__file__).parents[2] / "detcal/schemas/metrics.schema.json").read_text())
    jsonschema.validate(a, schema)
    same = (
        "data",
        "matching",
        "detections",
        "headline",
        "confidence",
        "regression",
        "accuracy",
        "localisation",
        "per_class",
    )
    assert {k: a[k] for k in same} == {k: b[k] for k in same}
    assert b["oce"] == {"skipped": "oce.enabled=false"}
    assert a["oce"]["oce"]["value"] == oce(dets, ds.gt).value
    assert a["oce"]["oce"]["params"]["brier"] == "binary"
    for agg in ("max_iou", "iou_weighted"):
        assert a["oce"]["by_aggregation"][agg]["value"] == oce(dets, ds.gt, aggregation=agg).value
    ref = uq_detr_suite(dets, ds.gt)
    assert {k: a["uq_detr"][k]["value"] for k in ref} == {k: r.value for k, r in ref.items()}
    rel = a["oce"]["image_reliability"]
    assert rel["n_images"] == 79 and rel["lambda"] in rel["lambda_grid"] and -1 <= rel["pearson_test"] <= 1
    assert "raw outputs" in rel["warning"]  # the bundled detections are cut at 0.3
    rows = list(csv.DictReader((tmp_path / "on" / "oce_per_image.csv").open()))
    assert len(rows) == 79 and "oce_per_image.csv" in a["files"]
    kept = dets.select(dets.score > 0.3)
    s = object_scores(kept, ds.gt)
    ids = np.sort(ds.images.id)  # the CSV lists the images in ascending id
    assert [int(r["image_id"]) for r in rows] == ids.tolist()
    per = per_image_oce(s, ids)
    got = np.array([float(r["oce"]) if r["oce"] else np.nan for r in rows])
    np.testing.assert_allclose(got, per, rtol=0, atol=1e-15)
    assert "Object-level calibration" in (tmp_path / "on" / "summary.md").read_text()


def test_all_scores_in_coco_results_give_the_exact_brier(tmp_path: Path) -> None:
    import json

    from detcal.data.coco import load_coco_instances, load_coco_results
    from detcal.pipeline.evaluation import evaluate
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec

    inst = {
        "images": [{"id": 1, "width": 100, "height": 100}, {"id": 2, "width": 100, "height": 100}],
        "categories": [{"id": 3, "name": "a"}, {"id": 1, "name": "b"}],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "area": 100, "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 3, "bbox": [20, 20, 10, 10], "area": 100, "iscrowd": 0},
        ],
    }
    res = [
        {"image_id": 1, "category_id": 1, "bbox": [0, 0, 10, 10], "score": 0.7, "all_scores": [0.7, 0.2]},
        {"image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 5], "score": 0.6, "all_scores": [0.3, 0.6]},
        {"image_id": 2, "category_id": 1, "bbox": [50, 50, 10, 10], "score": 0.9, "all_scores": [0.9, 0.1]},
    ]
    (tmp_path / "gt.json").write_text(json.dumps(inst))
    (tmp_path / "res.json").write_text(json.dumps(res))
    ds = load_coco_instances(tmp_path / "gt.json")
    dets = load_coco_results(tmp_path / "res.json", dataset=ds)
    np.testing.assert_array_equal(dets.class_probs, [[0.7, 0.2], [0.3, 0.6], [0.9, 0.1]])
    from detcal.data.coco import write_coco_results

    write_coco_results(tmp_path / "again.json", dets)  # written back as all_scores, read back exactly
    np.testing.assert_array_equal(load_coco_results(tmp_path / "again.json", dataset=ds).class_probs, dets.class_probs)
    # columns in ascending category id: column 0 is category 1, column 1 category 3.
    # image 1, object of category 1 (column 0): tau 0.5, mean of both rows: [0.5, 0.4] -> 0.5^2 + 0.4^2 = 0.41;
    # tau 0.75: the first row alone: 0.3^2 + 0.2^2 = 0.13. Image 2's object is missed: 1.
    r = evaluate(tmp_path / "gt.json", tmp_path / "res.json", EvaluationSpec(bootstrap=BootstrapSpec(n=0)))
    o = r.to_dict()["oce"]["oce"]
    assert o["params"]["brier"] == "multiclass"
    np.testing.assert_allclose(o["table"]["oce"], [(0.41 + 1) / 2, (0.13 + 1) / 2], atol=1e-15)
    res[1]["all_scores"] = [0.3, 1.5]
    (tmp_path / "bad.json").write_text(json.dumps(res))
    with pytest.raises(DetcalInputError, match="all_scores"):
        load_coco_results(tmp_path / "bad.json", dataset=ds)
    res[1]["all_scores"] = [0.3, 0.5, 0.2]
    (tmp_path / "bad.json").write_text(json.dumps(res))
    with pytest.raises(DetcalInputError, match="all_scores"):
        load_coco_results(tmp_path / "bad.json", dataset=ds)


@pytest.mark.slow  # a detcal-evaluate subprocess (Hydra start-up)
def test_oce_and_uq_detr_settings_from_the_command_line(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from detcal.pipeline.spec import ConfigError, OCESpec, UqDetrSpec

    args = [
        "data=coco_mini79",
        "bootstrap.n=0",
        "output.plots=false",
        "output.detections_csv=false",
        "output.print_summary=false",
        "confidence.enabled=false",
        "regression.enabled=false",
        "oce.aggregation=iou_weighted",
        "oce.variant=uq_detr",
        "oce.reliability_method=topk",
        "oce.reliability_param=5",
        "uq_detr.enabled=true",
        "uq_detr.tp_criterion=independent",
        f"hydra.run.dir={tmp_path}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((tmp_path / "metrics.json").read_text())
    assert m["oce"]["oce"]["params"]["aggregation"] == "iou_weighted" and m["oce"]["oce"]["variant"] == "uq_detr"
    assert m["oce"]["image_reliability"]["method"] == "topk"
    assert m["uq_detr"]["laece"]["params"]["tp_criterion"] == "independent"
    assert m["uq_detr"]["laece"]["params"]["iou_rule"] == "> tau"
    with pytest.raises(ConfigError, match="oce.aggregation"):
        OCESpec(aggregation="median")
    with pytest.raises(ConfigError, match="uq_detr.tau"):
        UqDetrSpec(tau=0.0)


def test_overlap_pairs_finds_every_pair_at_the_threshold() -> None:
    from detcal.metrics._pairs import BoxColumns, overlap_pairs

    rng = np.random.default_rng(4)
    n_g, n_d = 80, 400
    gi, di = rng.integers(0, 5, n_g) * 7 + 3, rng.integers(0, 6, n_d) * 7 + 3
    xy = rng.uniform(-50, 150, (n_g, 2))
    gb = np.hstack([xy, xy + rng.uniform(1, 60, (n_g, 2))])
    near = rng.integers(0, n_g, n_d)
    db = gb[near] + rng.normal(0, 8, (n_d, 4))
    db[:, 2:] = np.maximum(db[:, 2:], db[:, :2] + 0.5)
    db[:40] = gb[near[:40]]  # identical boxes: IoU exactly 1
    db[40:60] = gb[near[40:60]] + [5, 0, 5, 0]  # shifted copies
    gc, dc = BoxColumns(gb), BoxColumns(db)
    rows = np.flatnonzero(rng.uniform(size=n_g) < 0.8)
    for t in (0.1, 0.5, 0.75, 1.0):
        got = [(g, d) for G, D, _ in overlap_pairs(di, dc, gi, gc, t, rows, block=50) for g, d in zip(G, D)]
        want = [
            (g, d) for g in rows for d in range(n_d) if di[d] == gi[g] and pair_iou(gb[g][None], db[d][None])[0] >= t
        ]
        assert got == want, t


def test_training_loop_evaluator_takes_class_distributions() -> None:
    from detcal.integrations.evaluator import DetectionCalibration
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec

    dets, gt = _scene(probs=True)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    metric = DetectionCalibration(spec=spec, categories={1: "a", 2: "b"})
    targets = [
        {
            "image_id": i,
            "boxes": gt.box[gt.image_id == i],
            "labels": gt.category[gt.image_id == i],
            "iscrowd": gt.iscrowd[gt.image_id == i],
            "width": 300,
            "height": 300,
        }
        for i in (1, 2)
    ]
    preds = [
        {
            "boxes": dets.box[dets.image_id == i],
            "scores": dets.class_probs[dets.image_id == i],
            "labels": dets.category[dets.image_id == i],
        }
        for i in (1, 2)
    ]
    metric.update(preds, targets)
    o = metric.compute().to_dict()["oce"]["oce"]
    assert o["params"]["brier"] == "multiclass"
    # the hand calculation of test_oce_multiclass_hand (the same scene)
    np.testing.assert_allclose(o["table"]["oce"], [(0.325 + 1) / 2, (0.05 + 1) / 2], atol=1e-15)
    bad = DetectionCalibration(spec=spec, categories={1: "a", 2: "b", 3: "c"})
    bad.update(preds, targets)
    with pytest.raises(DetcalInputError, match="class columns"):
        bad.compute()
    mixed = [dict(preds[0]), dict(preds[1], scores=dets.score[dets.image_id == 2])]
    with pytest.raises(DetcalInputError, match="class distributions"):
        DetectionCalibration(spec=spec).update(mixed, targets)
