"""detcal-evaluate end to end on a synthetic set with planted miscalibration,
a 2-run Hydra sweep (-m) and detcal-gather over it."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from PIL import Image
from scipy.stats import chi2

from detcal.apps._hydra import AppContext, register_schema
from detcal.apps.evaluate import task
from detcal.apps.schema import EvaluateApp
from detcal.data.coco import load_coco_results
from detcal.pipeline.registry import config_dir

REPO = Path(__file__).resolve().parents[2]
STD_SCALE = (1.0, 1.0, 2.0, 0.5)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("run")
    GlobalHydra.instance().clear()
    register_schema("evaluate", EvaluateApp)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose(
            "evaluate",
            overrides=[
                "experiment=planted_std_scale",
                "data.n_images=300",
                "data.seed=0",
                "bootstrap.n=30",
                "output.progress=false",
                "output.print_summary=false",
            ],
        )
    app = OmegaConf.to_object(cfg)
    assert isinstance(app, EvaluateApp)
    ctx = AppContext("detcal-evaluate", out, ["experiment=planted_std_scale"], {}, cfg)
    metrics = task(app, ctx)
    return out, metrics


def test_metrics_json_keys_and_provenance(run: tuple[Path, dict]) -> None:
    out, returned = run
    m = json.loads((out / "metrics.json").read_text())
    assert m["headline"] == returned["headline"]
    for key in (
        "detcal_version",
        "created",
        "config",
        "data",
        "matching",
        "variants",
        "headline",
        "confidence",
        "dece_maps",
        "regression",
        "files",
        "overrides",
    ):
        assert key in m, key
    import detcal

    assert m["detcal_version"] == detcal.__version__
    assert m["overrides"] == ["experiment=planted_std_scale"]
    d = m["data"]
    assert d["source"] == "synthetic" and d["detector_kwargs"] == {"std_scale": [1, 1, 2, 0.5]}
    assert Path(d["paths"]["coco_results"]).is_file() and str(out) in d["paths"]["coco_results"]
    assert d["adapter"]["source"] == "coco" and d["counts"]["uncertainty"] == "delta"
    mt = m["matching"]  # MatchResult.describe()
    assert mt["iou_thresholds"] == [0.5, 0.75] and mt["mode"] == "exclusive" and mt["max_dets"] == 100
    assert set(m["confidence"]) == {"iou=0.50", "iou=0.75"}
    ece = m["confidence"]["iou=0.50"]["ece"]
    assert ece["params"]["bins"] == [15] and ece["variant"] == "drop" and len(ece["ci"]) == 2
    assert ece["params"]["bootstrap"]["n_boot"] == 30
    dece = m["confidence"]["iou=0.50"]["dece"]
    assert dece["params"]["bins"] == [5] * 5 and dece["params"]["sample_threshold"] == 8
    assert {"cells", "occupied_cells", "dropped_fraction"} <= set(dece["extra"])
    assert set(m["variants"]) >= {"matching", "confidence", "regression", "bootstrap"}
    assert "docs/metrics.md" in m["variants"]["confidence"] and "policy=drop" in m["variants"]["confidence"]
    ence = m["regression"]["ence"]["tx"]
    assert ence["variant"] == "equal_count" and ence["params"]["bins"] == 10 and ence["ci"] is not None
    assert m["regression"]["_sample"]["space"] == "delta" and m["regression"]["_sample"]["iou_threshold"] == 0.5
    assert m["config"]["data"]["n_images"] == 300
    for k in ("ece", "dece", "ence_tx", "ence_th", "m_qce_joint"):
        assert np.isfinite(m["headline"][k]["value"]), k


def test_summary_csv_and_pngs(run: tuple[Path, dict]) -> None:
    out, m = run
    summary = (out / "summary.md").read_text()
    assert summary.startswith("# detcal-evaluate summary") and "## Headline" in summary
    assert "| ence |" in summary and "Confidence calibration at iou=0.50" in summary
    # one CSV row per detection of the results file (counted independently of the app)
    dets = load_coco_results(m["data"]["paths"]["coco_results"])
    with (out / "detections.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(dets) == m["data"]["counts"]["detections"]
    assert {"matched@0.5", "ignored@0.75", "gt_id@0.5", "rel_cx", "rel_h", "score", "iou", "x1"} <= set(rows[0])
    tp = sum(int(r["matched@0.5"]) for r in rows)
    assert tp == m["detections"]["per_threshold"]["iou=0.50"]["true_positives"] > 0
    np.testing.assert_allclose([float(r["score"]) for r in rows[:50]], dets.score[:50])
    pngs = [f for f in m["files"] if f.endswith(".png")]
    assert {
        "reliability_iou0.50.png",
        "dece_maps_iou0.50.png",
        "rmse_rmv.png",
        "qce_coverage.png",
        "retention.png",
    } <= set(pngs)
    for f in pngs:
        with Image.open(out / f) as im:
            im.verify()
        with Image.open(out / f) as im:
            assert im.format == "PNG" and min(im.size) > 100
    assert {p.name for p in out.iterdir()} >= set(m["files"])


def test_planted_border_overconfidence_shows_in_dece_map(run: tuple[Path, dict]) -> None:
    # The simulated detector reports score = q ** 0.5 >= q when the box centre lies within
    # 15 % of an image edge and score = q inside (P(TP | q) = q): only the outer ring of the
    # 5 x 5 (cx, cy) grid is miscalibrated.
    _, m = run
    mp = m["dece_maps"]["iou=0.50"]["cx_cy"]
    gap = np.array(mp["gap"], dtype=float)
    n = np.array(mp["kept_count"], dtype=float)
    assert gap.shape == (5, 5) and mp["axes"] == ["cx", "cy"]
    ring = np.ones((5, 5), bool)
    ring[1:4, 1:4] = False

    def mean(mask: np.ndarray) -> float:
        ok = mask & np.isfinite(gap)
        return float(np.sum(gap[ok] * n[ok]) / np.sum(n[ok]))

    assert mean(ring) > mean(~ring) + 0.03
    assert mean(ring) > gap[2, 2]


def test_planted_std_scale_shows_in_ence_and_qce(run: tuple[Path, dict]) -> None:
    # Reported std = true std * (1, 1, 2, 0.5). Closed forms for a Gaussian residual:
    #   RMSE/RMV = 1/s per bin  ->  ENCE = |1 - 1/s| = 0 (tx, ty), 0.5 (tw), 1.0 (th)
    #   NEES = z^2 / s^2  ->  coverage(tau) = P(chi2_1 <= s^2 chi2_1.ppf(tau)),
    #   M-QCE = mean_tau |coverage(tau) - tau| over tau = 0.05 .. 0.95.
    _, m = run
    h = {k: v["value"] for k, v in m["headline"].items()}
    tau = np.linspace(0.05, 0.95, 19)
    for k, s in zip(("tx", "ty", "tw", "th"), STD_SCALE):
        expected_ence = abs(1.0 - 1.0 / s)
        expected_mqce = float(np.mean(np.abs(chi2.cdf(s**2 * chi2.ppf(tau, 1), 1) - tau)))
        assert h[f"ence_{k}"] == pytest.approx(expected_ence, abs=0.15), k
        assert h[f"m_qce_{k}"] == pytest.approx(expected_mqce, abs=0.04), k
    floor = max(h["ence_tx"], h["ence_ty"])
    assert floor < 0.15 and min(h["ence_tw"], h["ence_th"]) > 3 * floor
    assert min(h["m_qce_tw"], h["m_qce_th"]) > 5 * max(h["m_qce_tx"], h["m_qce_ty"])
    assert min(h["c_qce_tw"], h["c_qce_th"]) > max(h["c_qce_tx"], h["c_qce_ty"])


def test_sweep_and_gather(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    cmd = [
        sys.executable,
        "-m",
        "detcal.apps.evaluate",
        "-m",
        "matching.iou_thresholds=[0.5],[0.75]",
        "data.n_images=25",
        "bootstrap.n=0",
        "output.plots=false",
        "output.progress=false",
        "output.print_summary=false",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted((tmp_path / "sweep").glob("*/metrics.json"))
    assert len(runs) == 2
    assert not (tmp_path / "outputs").exists()  # nothing written outside the sweep directory
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.gather", str(tmp_path / "sweep"), "--out", str(tmp_path / "table.md")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in (tmp_path / "table.md").read_text().splitlines() if ln.startswith("| ")]
    assert len(lines) == 1 + 2  # header + 2 runs
    assert lines[1].startswith("| matching.iou_thresholds=[0.5] |")
    assert lines[2].startswith("| matching.iou_thresholds=[0.75] |")
    ece = [json.loads(p.read_text())["headline"]["ece"]["value"] for p in runs]
    assert f"{ece[0]:.4f}" in lines[1] and f"{ece[1]:.4f}" in lines[2]
    with (tmp_path / "table.csv").open() as fh:
        assert len(list(csv.reader(fh))) == 3


def test_console_scripts_are_declared() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["detcal-evaluate"] == "detcal.apps.evaluate:main"
    assert scripts["detcal-calibrate"] == "detcal.apps.calibrate:main"
    assert scripts["detcal-gather"] == "detcal.apps.gather:main"
