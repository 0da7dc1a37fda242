"""detcal-calibrate's command line for the conformal box intervals.

* ``regression=NAME`` (configs/regression/) is the short form of
  ``calibrator@regression_calibrator=NAME``: the same composed config for every
  box-uncertainty calibrator, its parameters overridable as
  ``regression_calibrator.<name>=...``; an unknown name or a contradicting long
  form ends with one line and exit status 2.
* ``regression_calibrator.space=edges`` fits and evaluates the conformal
  intervals on the pixel box edges (x1, y1, x2, y2), checked on a hand-built
  set whose quantiles and coverages are worked out below by hand.
"""

from __future__ import annotations

import json
import os
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
from detcal.core.errors import DetcalError
from detcal.data.coco import load_coco_instances, load_coco_results
from detcal.pipeline.registry import config_dir

QUIET = ["output.progress=false", "output.print_summary=false", "output.plots=false", "bootstrap.n=0"]
REGRESSION = sorted(p.stem for p in (config_dir() / "regression").glob("*.yaml"))


def _compose(overrides: list[str]) -> Any:
    GlobalHydra.instance().clear()
    register_schema("calibrate", CalibrateApp)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return compose(config_name="calibrate", overrides=overrides, return_hydra_config=True)


def _job(overrides: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The composed job config (without ``hydra``) and the group choices."""
    cfg = _compose(overrides)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return OmegaConf.to_container(cfg), choices  # type: ignore[return-value]


def _run(out: Path, overrides: list[str]) -> dict[str, Any]:
    cfg = _compose(QUIET + overrides)
    choices = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return task(OmegaConf.to_object(cfg), AppContext("detcal-calibrate", out, overrides, choices, cfg))


def test_every_box_uncertainty_calibrator_has_a_short_form() -> None:
    assert REGRESSION == ["conformal", "kuleshov_isotonic", "sigma_histogram", "std_scaling", "std_scaling_sgd"]
    for name in REGRESSION:
        short, ch_short = _job([f"regression={name}"])
        long, ch_long = _job([f"calibrator@regression_calibrator={name}"])
        assert short == long, name
        assert ch_short["calibrator@regression_calibrator"] == ch_long["calibrator@regression_calibrator"] == name
    # without the short form nothing changes: std scaling stays the default
    cfg, ch = _job([])
    assert ch["regression"] is None and cfg["regression_calibrator"]["_target_"].endswith("StdScaling")


def test_short_form_parameters_are_overridable() -> None:
    cfg, _ = _job(
        [
            "regression=conformal",
            "regression_calibrator.alpha=0.05",
            "regression_calibrator.groups=class",
            "regression_calibrator.bonferroni=true",
            "regression_calibrator.space=edges",
            "regression.space=pixel",  # the evaluation spec's key is untouched by the group
        ]
    )
    rc = cfg["regression_calibrator"]
    assert rc["_target_"] == "detcal.calibration.conformal.ConformalBoxIntervals"
    assert (rc["alpha"], rc["groups"], rc["bonferroni"], rc["space"], rc["score"]) == (
        0.05,
        "class",
        True,
        "edges",
        "normalised",
    )
    assert cfg["regression"]["space"] == "pixel" and cfg["regression"]["sample_iou"] == 0.5


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    argv = [sys.executable, "-m", "detcal.apps.calibrate", *args, f"hydra.run.dir={tmp_path / 'run'}"]
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)


def test_unknown_short_form_is_one_line_exit_2(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "regression=conformel")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "regression/conformel" in lines[0] and "conformal, kuleshov_isotonic" in lines[0], lines[0]


def test_contradicting_long_form_is_refused(tmp_path: Path) -> None:
    for extra in ("calibrator@regression_calibrator=std_scaling", "~calibrator@regression_calibrator"):
        with pytest.raises(DetcalError, match="regression=conformal contradicts"):
            _run(tmp_path, ["regression=conformal", extra])


def test_unknown_space_is_refused(tmp_path: Path, hand_set: dict[str, Path]) -> None:
    with pytest.raises(DetcalError, match="space must be null or 'edges'"):
        _run(tmp_path, _data(hand_set) + ["regression=conformal", "regression_calibrator.space=corners"])


# --------------------------------------------------------------------------- hand-worked edges

# Every ground-truth box is [200, 200, 300, 300] (x1, y1, x2, y2), one per image; each detection moves
# its edges by the offsets below and carries bbox_std (cx, cy, w, h) = (3, 3, 8, 8), so every edge has
# sigma = sqrt(3^2 + 8^2 / 4) = 5 (x1 = cx - w/2).
CAL_OFFSETS = [(5, -10, 0, 15), (-15, 5, 10, 0), (10, 0, -5, -5)]  # scores |offset| / 5: (1,2,0,3) (3,1,2,0) (2,0,1,1)
EVAL_OFFSETS = [(8, -3, 6, -4), (-12, 2, -1, 4.5), (3, 1, -2, 0)]


def _write_set(path: Path, offsets: list[tuple[float, ...]]) -> dict[str, str]:
    images, anns, dets = [], [], []
    for i, (a, b, c, d) in enumerate(offsets, start=1):
        images.append({"id": i, "width": 640, "height": 480, "file_name": f"{i}.jpg"})
        anns.append(
            {"id": i, "image_id": i, "category_id": 1, "bbox": [200, 200, 100, 100], "area": 10000.0, "iscrowd": 0}
        )
        x1, y1, x2, y2 = 200 + a, 200 + b, 300 + c, 300 + d
        box = [x1, y1, x2 - x1, y2 - y1]
        dets.append({"image_id": i, "category_id": 1, "bbox": box, "score": 0.9, "bbox_std": [3, 3, 8, 8]})
    gt = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "thing"}]}
    (path / "gt.json").write_text(json.dumps(gt))
    (path / "dets.json").write_text(json.dumps(dets))
    return {"gt": str(path / "gt.json"), "results": str(path / "dets.json")}


@pytest.fixture
def hand_set(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "cal").mkdir()
    (tmp_path / "ev").mkdir()
    return {"cal": _write_set(tmp_path / "cal", CAL_OFFSETS), "ev": _write_set(tmp_path / "ev", EVAL_OFFSETS)}


def _data(s: dict[str, Any]) -> list[str]:
    return [
        "data=coco",
        f"data.gt={s['cal']['gt']}",
        f"data.results={s['cal']['results']}",
        "data@eval_data=coco",
        f"eval_data.gt={s['ev']['gt']}",
        f"eval_data.results={s['ev']['results']}",
        "~calibrator",
    ]


def test_conformal_on_box_edges_by_hand(tmp_path: Path, hand_set: dict[str, Any]) -> None:
    # alpha 0.5 with n = 3: m = ceil(4 * 0.5) = 2, the second smallest score per edge:
    # x1 {1,3,2} -> 2, y1 {2,1,0} -> 1, x2 {0,2,1} -> 1, y2 {3,0,1} -> 1; half-widths q * 5 = 10, 5, 5, 5.
    m = _run(
        tmp_path / "run",
        _data(hand_set)
        + ["regression=conformal", "regression_calibrator.alpha=0.5", "regression_calibrator.space=edges"]
        + ["regression.coverage_level=0.5"],
    )
    reg = m["calibrators"]["regression"]
    assert reg["name"] == "conformal" and reg["coords"] == ["x1", "y1", "x2", "y2"] and reg["n_fit"] == 3
    assert reg["space"] == "pixel" and "skipped" in reg["writeback"]
    np.testing.assert_allclose(reg["describe"]["fitted"]["quantile_"], [2, 1, 1, 1], rtol=1e-12)
    assert reg["describe"]["params"]["space"] == "edges"
    ev = m["evaluation"]["regression"]
    # after: |offset| within (10, 5, 5, 5)? (8 y, 3 y, 6 n, 4 y) (12 n, 2 y, 1 y, 4.5 y) (all y)
    after = {c: v["value"] for c, v in ev["after"]["coverage"].items()}
    assert after == pytest.approx({"x1": 2 / 3, "y1": 1.0, "x2": 2 / 3, "y2": 1.0, "box": 1 / 3}, abs=1e-12)
    widths = {c: v["value"] for c, v in ev["after"]["interval_width"].items()}
    assert widths == pytest.approx({"x1": 20.0, "y1": 10.0, "x2": 10.0, "y2": 10.0}, rel=1e-9)
    # before: the model's own central 50% Gaussian interval, half-width 5 * 0.6745 = 3.37:
    # (8 n, 3 y, 6 n, 4 n) (12 n, 2 y, 1 y, 4.5 n) (3 y, 1 y, 2 y, 0 y)
    before = {c: v["value"] for c, v in ev["before"]["coverage"].items()}
    assert before == pytest.approx({"x1": 1 / 3, "y1": 1.0, "x2": 2 / 3, "y2": 1 / 3, "box": 1 / 3}, abs=1e-12)
    # the results file cannot carry edge intervals: it keeps the original bbox_std
    ds = load_coco_instances(m["outputs"]["gt"])
    written = load_coco_results(m["outputs"]["results"], dataset=ds)
    assert written.box_std is not None
    np.testing.assert_array_equal(written.box_std, np.tile([3.0, 3.0, 8.0, 8.0], (3, 1)))


def test_conformal_without_edges_works_in_the_evaluation_space(tmp_path: Path, hand_set: dict[str, Any]) -> None:
    # pixel (cx, cy, w, h): cx offsets (a + c) / 2 = 2.5, -2.5, 2.5 over sigma 3 -> the second smallest is 2.5 / 3
    m = _run(
        tmp_path / "run",
        _data(hand_set) + ["regression=conformal", "regression_calibrator.alpha=0.5", "regression.space=pixel"],
    )
    reg = m["calibrators"]["regression"]
    assert reg["coords"] == ["cx", "cy", "w", "h"] and "skipped" not in reg["writeback"]
    assert reg["describe"]["fitted"]["quantile_"][0] == pytest.approx(2.5 / 3, rel=1e-12)
