"""The diagnostics block of detcal-evaluate (docs/metrics.md#diagnostics): calibration split by TIDE error type
(the per-type contributions sum to the ECE and the D-ECE), the confusion matrix and likely label errors, the
operating points, detections.csv's ``tide_error`` column and the switch ``diagnostics.tide=false``."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data import bundled
from detcal.metrics.confusion import agnostic_match, confusion_matrix, label_errors
from detcal.metrics.operating_points import GRID, f1_optimal
from detcal.metrics.tide import tide
from detcal.pipeline.spec import BootstrapSpec, DataSpec, DiagnosticsSpec, EvaluationSpec

QUICK = EvaluationSpec(bootstrap=BootstrapSpec(n=0))


@pytest.fixture(scope="module")
def mini79() -> detcal.EvaluationResult:
    return detcal.evaluate(*bundled.load("coco_mini79", "rfcn-resnet-101"), spec=QUICK)


def _check_split(m: dict) -> None:
    cb = m["diagnostics"]["calibration_by_error_type"]
    lbl = cb["iou"]
    ece, dece = m["confidence"][lbl]["ece"]["value"], m["confidence"][lbl]["dece"]["value"]
    types = cb["types"]
    assert sum(v["ece_contribution"] for v in types.values()) == pytest.approx(ece, abs=1e-12)
    assert sum(v["dece_contribution"] for v in types.values()) == pytest.approx(dece, abs=1e-12)
    assert sum(v["ece_share"] for v in types.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(v["dece_share"] for v in types.values()) == pytest.approx(1.0, abs=1e-12)
    assert sum(v["n"] for v in types.values()) == cb["n"] == m["confidence"][lbl]["_sample"]["n"]
    # the D-ECE split uses the same per-detection contributions as the worst-detections table
    assert cb["dece_from_contributions"] == pytest.approx(m["worst_detections"]["dece_from_contributions"], abs=1e-15)
    assert types["tp"]["accuracy"] == 1.0
    assert all(types[k]["accuracy"] in (0.0, None) for k in types if k != "tp")


def test_calibration_by_type_sums_to_ece_and_dece_on_a_real_detector(mini79: detcal.EvaluationResult) -> None:
    m = mini79.to_dict()
    _check_split(m)
    # true positives are matched at the sample's IoU; every false positive TIDE also calls an error keeps its type
    cb = m["diagnostics"]["calibration_by_error_type"]["types"]
    t = m["diagnostics"]["tide"]
    assert cb["tp"]["n"] + sum(cb[k]["n"] for k in ("cls", "loc", "both", "dupe", "bkg", "other")) > 0
    assert cb["loc"]["n"] <= t["counts"]["loc"]
    assert any("carry the largest share" in s for s in m["diagnostics"]["findings"])


def test_calibration_by_type_sums_on_a_generated_set(tmp_path: Path) -> None:
    m = detcal.evaluate(DataSpec(n_images=400), spec=QUICK, workdir=tmp_path).to_dict()
    _check_split(m)


def test_tide_in_evaluate_equals_the_module_and_fills_detections_csv(
    mini79: detcal.EvaluationResult, tmp_path: Path
) -> None:
    ds, dets = bundled.load("coco_mini79", "rfcn-resnet-101")
    r = tide(ds.images, ds.gt, dets)
    m = mini79.to_dict()["diagnostics"]["tide"]
    assert m["ap"] == r.ap and m["dap"] == r.main and m["counts"] == r.counts
    mini79.write(tmp_path, plots=False)
    with open(tmp_path / "detections.csv") as fh:
        col = [int(row["tide_error"]) for row in csv.DictReader(fh)]
    assert col == r.code.tolist()


def test_diagnostics_switches(tmp_path: Path) -> None:
    data = bundled.load("coco_mini79", "rfcn-resnet-101")
    off = EvaluationSpec(bootstrap=BootstrapSpec(n=0), diagnostics=DiagnosticsSpec(tide=False))
    res = detcal.evaluate(*data, spec=off)
    d = res.to_dict()["diagnostics"]
    assert "tide" not in d and "calibration_by_error_type" not in d and "confusion" in d
    res.write(tmp_path, plots=False)
    assert "tide_error" not in (tmp_path / "detections.csv").read_text().splitlines()[0]
    none = DiagnosticsSpec(tide=False, confusion=False, operating_points=False)
    d = detcal.evaluate(*data, spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0), diagnostics=none)).to_dict()
    assert d["diagnostics"] == {"skipped": "diagnostics.tide, .confusion and .operating_points are false"}
    with pytest.raises(detcal.ConfigError, match="diagnostics.tide_background"):
        DiagnosticsSpec(tide_background=0.6)


def _scene() -> tuple[Images, GroundTruth, Detections]:
    """One 100 x 100 image: a class-1 box at the top left, a class-2 box at the bottom right, a class-1 crowd
    box at the top right. Detections (score): (0.9) class 1 on the class-1 box; (0.8) class 1 on the class-2
    box, IoU 1; (0.75) class 2 in empty space; (0.6) class 2 on the class-1 box, taken already; (0.4) class 1
    inside the crowd box; (0.3) class 2 overlapping the class-2 box by IoU 0.3 (hand-built)."""
    images = Images(id=np.array([7]), width=np.array([100.0]), height=np.array([100.0]), file_name=["a.jpg"])
    gt = GroundTruth(image_id=[7, 7, 7], box=[[0, 0, 40, 40], [60, 60, 100, 100], [60, 0, 100, 40]],
                     category=[1, 2, 1], iscrowd=[False, False, True])  # fmt: skip
    box = [[0, 0, 40, 40], [60, 60, 100, 100], [20, 45, 40, 55], [0, 0, 40, 40], [65, 5, 95, 35], [60, 60, 100, 72]]
    dets = Detections(image_id=[7] * 6, box=box, score=[0.9, 0.8, 0.75, 0.6, 0.4, 0.3], category=[1, 1, 2, 2, 1, 2])
    return images, gt, dets


def test_confusion_matrix_by_hand() -> None:
    images, gt, dets = _scene()
    am = agnostic_match(dets, gt, 0.5)
    c = confusion_matrix(am, dets, gt, [1, 2], score_threshold=0.5)
    # kept: 0.9 (gt 1 -> pred 1), 0.8 (gt 2 -> pred 1), 0.75 (background -> pred 2), 0.6 (class-1 box taken:
    # background -> pred 2); no box missed (both taken); 0.4 and 0.3 are under the score threshold
    assert c["matrix"] == [[1, 0, 0], [1, 0, 0], [0, 2, 0]]
    assert c["n_matched_other_class"] == 1 and c["n_background_detections"] == 2 and c["n_missed_boxes"] == 0
    c0 = confusion_matrix(am, dets, gt, [1, 2], score_threshold=0.0)
    # at 0: the crowd-box detection is ignored (not in the matrix); the 0.3 one has IoU 0.3 < 0.5: background
    assert c0["matrix"] == [[1, 0, 0], [1, 0, 0], [0, 3, 0]]


def test_label_errors_by_hand() -> None:
    images, gt, dets = _scene()
    am = agnostic_match(dets, gt, 0.5)
    le = label_errors(am, dets, gt, {1: "a", 2: "b"}, min_score=0.7, min_iou=0.8)
    assert [r["detection"] for r in le["unannotated"]] == [2]  # 0.75 in empty space
    assert [r["detection"] for r in le["class_disagreement"]] == [1]  # class 1 on the class-2 box, IoU 1
    assert le["class_disagreement"][0]["gt_class"] == "b" and le["class_disagreement"][0]["iou"] == 1.0


def test_f1_optimal_by_hand() -> None:
    # scores 0.9 TP, 0.8 FP, 0.7 TP, 0.7 FP, 0.5 TP; 4 GT. Cuts between different scores only:
    # keep 1: F1 = 2/(1+4) = 0.4; keep 2: 2/6; keep 4 (both 0.7s): 4/8 = 0.5; keep 5: 6/9 = 0.667
    s = np.array([0.9, 0.8, 0.7, 0.7, 0.5])
    y = np.array([True, False, True, False, True])
    thr, f1, p, r = f1_optimal(s, y, 4)
    assert (thr, f1, p, r) == (0.5, pytest.approx(6 / 9), pytest.approx(3 / 5), pytest.approx(3 / 4))
    thr, f1, _, _ = f1_optimal(s[:4], y[:4], 2)  # 1: 2/3; 2: 2/4; 4: 4/6 = 2/3 -> the first (highest) threshold
    assert thr == 0.9 and f1 == pytest.approx(2 / 3)


def test_operating_points_agree_with_the_sample(mini79: detcal.EvaluationResult) -> None:
    m = mini79.to_dict()
    op = m["diagnostics"]["operating_points"]
    lbl = op["iou"]
    s = m["confidence"][lbl]
    assert op["ece_kept"]["all"]["ece"] == pytest.approx(s["ece"]["value"], abs=1e-15)
    assert op["ece_kept"]["all"]["n"] == s["_sample"]["n"]
    # at threshold 0 everything is kept: the pooled precision is the sample's accuracy
    acc = m["detections"]["per_threshold"][lbl]
    assert op["pooled"]["precision"][0] == pytest.approx(acc["true_positives"] / acc["evaluated"])
    assert len(op["pooled"]["f1"]) == len(GRID)
    best = op["pooled"]["f1_optimal"]
    assert best["f1"] >= max(v for v in op["pooled"]["f1"] if v == v) - 1e-12
    assert len(op["per_class_curves"]) == min(9, len(op["per_class"]["category"]))


def test_one_perfect_detection() -> None:
    ds = Dataset(
        images=Images(id=np.array([1]), width=np.array([10.0]), height=np.array([10.0])),
        gt=GroundTruth(image_id=[1], box=[[0, 0, 5, 5]], category=[1]),
        categories={1: "a"},
    )
    dets = Detections(image_id=[1], box=[[0, 0, 5, 5]], score=[0.9], category=[1])
    d = detcal.evaluate(ds, dets, spec=QUICK).to_dict()["diagnostics"]
    assert d["tide"]["ap"] == pytest.approx(100.0) and d["tide"]["counts"]["miss"] == 0


def test_per_class_f1_equals_the_pooled_rule_class_by_class(mini79: detcal.EvaluationResult) -> None:
    """The vectorised per-class F1-optimal points equal :func:`f1_optimal` run on each class alone."""
    m = mini79.to_dict()
    op = m["diagnostics"]["operating_points"]
    i = mini79.match.threshold_index(float(op["iou"].removeprefix("iou=")))
    keep = mini79.match.considered & ~mini79.match.ignored[i]
    d = mini79.data.detections
    pc = op["per_class"]
    for k, cat in enumerate(pc["category"]):
        sel = keep & (d.category == cat)
        want = f1_optimal(d.score[sel], mini79.match.matched[i, sel], pc["n_gt"][k])
        got = [pc[key][k] for key in ("f1_threshold", "f1", "precision_at_f1", "recall_at_f1")]
        got = [np.nan if v is None else v for v in got]  # metrics.json writes NaN as null
        assert got == pytest.approx(want, nan_ok=True), cat
        assert (got[0] == got[0]) == bool(sel.any())  # a class with boxes has a threshold once it has detections


def test_the_command_turns_tide_off_with_the_override(tmp_path: Path) -> None:
    """``detcal-evaluate diagnostics.tide=false`` (the Hydra override of the issue) reaches the spec: no TIDE
    record, no ``tide_error`` column; the default run has both."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    from detcal.apps._hydra import AppContext, register_schema
    from detcal.apps.evaluate import task
    from detcal.apps.schema import EvaluateApp
    from detcal.pipeline.registry import config_dir

    for extra, want in (([], True), (["diagnostics.tide=false"], False)):
        GlobalHydra.instance().clear()
        register_schema("evaluate", EvaluateApp)
        over = ["data.n_images=40", "bootstrap.n=0", "output.plots=false", "output.progress=false",
                "output.print_summary=false", "report.enabled=false", *extra]  # fmt: skip
        with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
            cfg = compose("evaluate", overrides=over)
        app = OmegaConf.to_object(cfg)
        out = tmp_path / str(want)
        out.mkdir()
        m = task(app, AppContext("detcal-evaluate", out, extra, {}, cfg))
        assert ("tide" in m["diagnostics"]) is want
        header = (out / "detections.csv").read_text().splitlines()[0].split(",")
        assert ("tide_error" in header) is want
