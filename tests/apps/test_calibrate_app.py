"""detcal-calibrate end to end on synthetic sets with planted miscalibration.

The synthetic detector (detcal.data.synthetic) reports ``score = q ** (1 - bo)``
for boxes whose centre lies within ``border_width`` of an image edge and
``score = q`` elsewhere, with ``P(TP | q) = q``: a position-dependent
over-confidence that one global temperature cannot undo, while a calibrator
that sees the box position can. Golden values below are closed forms
(temperature/STD scaling formulas applied by numpy to the files) or
properties of the planted truth, never numbers copied from a run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from detcal.apps._hydra import AppContext, register_schema
from detcal.apps.calibrate import task
from detcal.apps.schema import CalibrateApp
from detcal.calibration.regression import StdScaling
from detcal.core.errors import DetcalError
from detcal.core.types import Detections, GroundTruth, MatchResult
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.data.kitti import load_kitti_labels, load_kitti_results
from detcal.data.synthetic import write_synthetic
from detcal.metrics.spaces import regression_sample
from detcal.pipeline.registry import config_dir
from detcal.pipeline.writeback import apply_regression_calibrator

REPO = Path(__file__).resolve().parents[2]
QUIET = ["output.progress=false", "output.print_summary=false", "bootstrap.n=0"]


def _compose(overrides: list[str]) -> Any:
    GlobalHydra.instance().clear()
    register_schema("calibrate", CalibrateApp)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="calibrate", overrides=overrides, return_hydra_config=True)


def _run(out: Path, overrides: list[str]) -> dict[str, Any]:
    cfg = _compose(QUIET + overrides)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return task(OmegaConf.to_object(cfg), AppContext("detcal-calibrate", out, overrides, choices, cfg))


@pytest.fixture(scope="module")
def border_set(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """1,200 images, border over-confidence 0.7 (score = q ** 0.3 near the border)."""
    root = tmp_path_factory.mktemp("border")
    return write_synthetic(root, n_images=1200, seed=0, detector_kwargs={"border_overconfidence": 0.7}, render=False)


def _coco(paths: dict[str, Path]) -> list[str]:
    return ["data=coco", f"data.gt={paths['coco_instances']}", f"data.results={paths['coco_results']}"]


def test_end_to_end_coco_writes_and_reloads(border_set: dict[str, Path], tmp_path: Path) -> None:
    m = _run(tmp_path, _coco(border_set) + ["output.plots=true", "output.print_summary=true"])
    out = Path(m["outputs"]["results"])
    assert out == tmp_path / "calibrated" / "detections.json"
    # the written pair re-loads with the ordinary COCO adapter
    ds_eval = load_coco_instances(m["outputs"]["gt"])
    dets_new = load_coco_results(out, dataset=ds_eval)
    ds_all = load_coco_instances(border_set["coco_instances"])
    dets_all = load_coco_results(border_set["coco_results"], dataset=ds_all)
    # split: by image, disjoint, complete, the configured fraction (round(0.5 * 1200) = 600 each)
    eval_ids = np.array(m["split"]["evaluation_image_ids"])
    assert len(eval_ids) == 600 and m["split"]["n_images"] == {"calibration": 600, "evaluation": 600}
    assert set(ds_eval.images.id.tolist()) == set(eval_ids.tolist())
    assert m["split"]["seed"] == 0 and m["split"]["calibration_fraction"] == 0.5 and m["split"]["in_sample"] is False
    old = dets_all.select(np.isin(dets_all.image_id, eval_ids))
    assert len(dets_new) == len(old) and np.array_equal(dets_new.image_id, old.image_id)
    # temperature scaling: p' = sigmoid(logit(p) / T) on every evaluation detection
    conf = m["calibrators"]["confidence"]
    assert conf["describe"]["method"] == "TemperatureScaling" and conf["name"] == "temperature"
    T = conf["describe"]["fitted"]["temperature_"]
    assert T > 1.0  # the planted detector is over-confident (near the border)
    p = np.clip(old.score, 1e-12, 1 - 1e-12)
    expected = 1.0 / (1.0 + np.exp(-(np.log(p) - np.log1p(-p)) / T))
    np.testing.assert_allclose(dets_new.score, expected, rtol=1e-9, atol=1e-12)
    # std scaling: delta_std' = s_k * delta_std, means and boxes unchanged
    s = np.array(m["calibrators"]["regression"]["describe"]["fitted"]["scale_"])
    np.testing.assert_allclose(dets_new.delta_std, old.delta_std * s, rtol=1e-12)
    np.testing.assert_array_equal(dets_new.delta_mean, old.delta_mean)
    np.testing.assert_allclose(dets_new.box, old.box, rtol=0, atol=1e-9)
    # planted std_scale = 1: std scaling should learn s close to 1 (synthetic docstring)
    assert np.all(np.abs(s - 1.0) < 0.1)
    # before/after table (printed and written) and the diagrams
    summary = (tmp_path / "summary.md").read_text()
    assert "## Before / after (held-out evaluation split)" in summary
    for row in (
        "| D-ECE |",
        "| ECE |",
        "| NLL |",
        "| Brier |",
        "| ENCE tx |",
        "| C_v th |",
        "| M-QCE tw |",
        "| Kuleshov CE ty |",
    ):
        assert row in summary, row
    for f in (
        "reliability_before.png",
        "reliability_after.png",
        "dece_maps_before.png",
        "dece_maps_after.png",
        "rmse_rmv_before.png",
        "rmse_rmv_after.png",
        "metrics.json",
    ):
        assert (tmp_path / f).is_file() and f in m["files"] + ["metrics.json"], f
    on_disk = json.loads((tmp_path / "metrics.json").read_text())
    assert on_disk["headline"]["ece"]["value"] == pytest.approx(m["headline"]["ece"]["value"])
    # temperature scaling fixes the global over-confidence part: held-out ECE falls
    assert m["headline"]["ece"]["value"] < m["headline"]["ece_uncal"]["value"]
    # C_v is invariant to a per-coordinate scaling (Levi et al., Eq. 9)
    reg = m["evaluation"]["regression"]
    for c in ("tx", "ty", "tw", "th"):
        assert reg["after"]["cv"][c]["value"] == pytest.approx(reg["before"]["cv"][c]["value"], rel=1e-9)


def test_position_dependent_calibrators_beat_temperature_on_dece(border_set: dict[str, Path], tmp_path: Path) -> None:
    common = _coco(border_set) + ["output.plots=false", "dece_binning.features=[cx,cy]", "calibration.features=[cx,cy]"]
    fall = {}
    for name in ("temperature", "position_logistic", "histogram"):
        m = _run(tmp_path / name, common + [f"calibrator={name}"])
        h = m["headline"]
        fall[name] = h["dece_uncal"]["value"] - h["dece"]["value"]
        assert m["calibrators"]["confidence"]["features"] == ([] if name == "temperature" else ["cx", "cy"])
    # one temperature cannot undo a position-dependent miscalibration; (logit p, position) models can
    assert fall["position_logistic"] > fall["temperature"] + 0.01, fall
    assert fall["histogram"] > fall["temperature"], fall
    assert fall["position_logistic"] > 0.0 and fall["histogram"] > 0.0, fall


def test_kitti_input_is_written_as_kitti(tmp_path: Path) -> None:
    m = _run(
        tmp_path,
        [
            "data=synthetic",
            "data.n_images=40",
            f"data.out_dir={tmp_path / 'syn'}",
            "data.format=kitti",
            "calibrator=platt",
            "output.plots=false",
            "calibration.in_sample=true",
        ],
    )
    assert m["outputs"]["format"] == "kitti"
    cal = tmp_path / "calibrated"
    ds = load_kitti_labels(cal / "label_2", sizes=cal / "sizes.txt")
    dets = load_kitti_results(cal / "results", dataset=ds)
    assert set(ds.images.id.tolist()) == set(m["split"]["evaluation_image_ids"])
    assert len(dets) == m["data"]["evaluation"]["counts"]["detections"]
    a, b = (
        m["calibrators"]["confidence"]["describe"]["fitted"]["a_"],
        m["calibrators"]["confidence"]["describe"]["fitted"]["b_"],
    )
    orig = load_kitti_results(tmp_path / "syn" / "kitti" / "results")
    orig = orig.select(np.isin(orig.image_id, ds.images.id))
    z = np.log(orig.score.clip(1e-12, 1 - 1e-12)) - np.log1p(-orig.score.clip(1e-12, 1 - 1e-12))
    # KITTI files hold 2 decimals where exact, else repr: compare at the written precision
    np.testing.assert_allclose(dets.score, 1 / (1 + np.exp(-(a * z + b))), atol=5e-3)
    # KITTI results carry no box uncertainty: regression calibration is skipped, and says why
    assert "no box uncertainty" in m["calibrators"]["regression"]["skipped"]
    # in-sample numbers only when asked, labelled so
    assert m["in_sample"] and "confidence" in m["in_sample"]
    assert "## In-sample" in (tmp_path / "summary.md").read_text()


def test_two_datasets_mode(tmp_path: Path) -> None:
    a = write_synthetic(tmp_path / "a", n_images=60, seed=1, render=False)
    b = write_synthetic(tmp_path / "b", n_images=50, seed=2, render=False)
    m = _run(
        tmp_path / "run",
        _coco(a)
        + [
            "data@eval_data=coco",
            f"eval_data.gt={b['coco_instances']}",
            f"eval_data.results={b['coco_results']}",
            "output.plots=false",
            "calibrator@regression_calibrator=kuleshov_isotonic",
        ],
    )
    assert m["split"]["mode"] == "two_datasets"
    assert m["split"]["n_images"] == {"calibration": 60, "evaluation": 50}
    assert m["outputs"]["gt"] == str(Path(b["coco_instances"]).resolve())
    dets = load_coco_results(m["outputs"]["results"], dataset=load_coco_instances(b["coco_instances"]))
    assert len(dets) == len(load_coco_results(b["coco_results"]))
    # Kuleshov isotonic also reports the CE of its recalibrated CDF itself
    assert set(m["evaluation"]["regression"]["after"]["interval_ce_cdf"]) == {"tx", "ty", "tw", "th"}


def test_bad_configurations_name_the_field(border_set: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(DetcalError, match="calibrator"):
        _run(tmp_path / "a", _coco(border_set) + ["calibrator=std_scaling", "output.plots=false"])
    with pytest.raises(DetcalError, match="calibration_fraction"):
        _run(tmp_path / "b", _coco(border_set) + ["calibration.split.calibration_fraction=1.0", "output.plots=false"])
    with pytest.raises(DetcalError, match="calibration.features"):
        _run(tmp_path / "c", _coco(border_set) + ["calibration.features=[cz]", "output.plots=false"])


def _box_records(n: int, rng: np.random.Generator, kind: str) -> tuple[Detections, GroundTruth, MatchResult]:
    xy = rng.uniform(50, 100, size=(n, 2))
    wh = rng.uniform(20, 60, size=(n, 2))
    box = np.concatenate([xy, xy + wh], axis=1)
    gt_box = box + rng.normal(0, 2.0, size=(n, 4))
    kw: dict[str, Any] = {}
    if kind == "box_cov":
        a = rng.normal(size=(n, 4, 4))
        kw["box_cov"] = np.einsum("nij,nkj->nik", a, a) + 4.0 * np.eye(4)
    else:
        c = rng.normal(size=(n, 2, 2, 2))
        kw["corner_cov"] = np.einsum("nsij,nskj->nsik", c, c) + 3.0 * np.eye(2)
    dets = Detections(image_id=np.zeros(n), box=box, score=np.full(n, 0.5), category=np.ones(n), **kw)
    gt = GroundTruth(image_id=np.zeros(n), box=gt_box, category=np.ones(n))
    mr = MatchResult(
        iou_thresholds=np.array([0.5]),
        matched=np.ones((1, n), bool),
        ignored=np.zeros((1, n), bool),
        gt_index=np.arange(n)[None],
        iou=np.ones(n),
        considered=np.ones(n, bool),
    )
    return dets, gt, mr


@pytest.mark.parametrize("kind", ["box_cov", "corner_cov"])
@pytest.mark.parametrize("space", ["delta", "pixel"])
def test_covariance_writeback_scales_each_coordinate(kind: str, space: str) -> None:
    rng = np.random.default_rng(3)
    dets, gt, mr = _box_records(200, rng, kind)
    before = regression_sample(dets, gt, mr, 0.5, space)
    cal = StdScaling().fit(before.mu, before.sigma, before.y)
    new, notes = apply_regression_calibrator(dets, cal, space)
    after = regression_sample(new, gt, mr, 0.5, space)
    # std scaling: every propagated sigma is multiplied by its coordinate's s; means unchanged
    np.testing.assert_allclose(after.sigma, before.sigma * cal.scale_, rtol=1e-9)
    np.testing.assert_allclose(after.mu, before.mu, atol=1e-12)
    # correlations are kept: cov'_ij / (s_i s_j) = cov_ij in (cx, cy, w, h)
    np.testing.assert_allclose(after.cov / np.outer(cal.scale_, cal.scale_), before.cov, rtol=1e-8, atol=1e-12)
    if kind == "corner_cov":  # the four s differ, so independent corners cannot hold it: written as bbox_covar
        assert new.corner_cov is None and new.box_cov is not None and "converted" in notes


def test_sweep_then_gather_gives_one_table(border_set: dict[str, Path], tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    cmd = [
        sys.executable,
        "-m",
        "detcal.apps.calibrate",
        "-m",
        "calibrator=temperature,platt",
        f"hydra.sweep.dir={sweep}",
        *(o for o in _coco(border_set)),
        *QUIET,
        "output.plots=false",
    ]
    res = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    from detcal.reports.gather import gather

    g = gather(sweep)
    assert list(g.rows) == ["calibrator=temperature", "calibrator=platt"]
    assert g.columns[:5] == ["dece", "ece", "ence", "m_qce", "nll_box"]
    assert {"dece_uncal", "ece_uncal", "ence_uncal"} <= set(g.columns)
    # same split and data in every row: the uncalibrated columns agree, the calibrated ones differ
    t, p = g.rows["calibrator=temperature"], g.rows["calibrator=platt"]
    assert t["ece_uncal"]["value"] == p["ece_uncal"]["value"]
    assert t["ece"]["value"] != p["ece"]["value"]
    assert "| calibrator=temperature |" in g.markdown
