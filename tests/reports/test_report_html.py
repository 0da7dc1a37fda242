"""report.html: every number it shows is a number of metrics.json, the page is self-contained, the
worst-calibrated detections are defined exactly (hand calculation, netcal 1.4.0), thumbnails come from
images the test writes, and the commands end with the run directory and its files."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import detcal
from detcal.pipeline.spec import BootstrapSpec, DataSpec, DeceBinningSpec, EvaluationSpec
from detcal.reports.html import render_report, write_report
from detcal.reports.html.worst import cell_contributions, worst_detections

REPO = Path(__file__).resolve().parents[2]


def _numbers(node: Any, out: set[float]) -> set[float]:
    """Every number in a JSON value."""
    if isinstance(node, dict):
        for v in node.values():
            _numbers(v, out)
    elif isinstance(node, list):
        for v in node:
            _numbers(v, out)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        out.add(float(node))
    return out


def _page_numbers(page: str) -> list[float]:
    return [float(v) for v in re.findall(r'data-v="([^"]+)"', page)]


def _assert_numbers_from(page: str, content: dict) -> int:
    allowed = _numbers(content, set())
    shown = _page_numbers(page)
    stray = sorted({v for v in shown if v not in allowed})
    assert not stray, f"numbers in report.html that metrics.json does not hold: {stray[:10]}"
    return len(shown)


def _assert_self_contained(page: str) -> None:
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r'<script[^>]+src=|<link\b|@import|@font-face', page)
    assert not re.search(r'(src|href)="(https?:)?//', page), "a resource from the network"
    for url in re.findall(r'url\(([^)]*)\)', page):
        assert url.strip("'\"").startswith("data:"), url


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from detcal.data.synthetic import write_synthetic

    root = tmp_path_factory.mktemp("rep")
    p = write_synthetic(root / "set", n_images=60, seed=3, render=True)
    res = detcal.evaluate(
        str(p["coco_instances"]),
        str(p["coco_results"]),
        EvaluationSpec(bootstrap=BootstrapSpec(n=30), dece_binning=DeceBinningSpec(bins=3)),
        workdir=root,
    )
    out = root / "run"
    content = res.write(out, plots=False, csv=False, report=True, image_dir=p["images"])
    return out, {"content": content, "paths": p}


def test_hand_example_contributions() -> None:
    # cells over confidence (2 bins): {0.9 FP, 0.8 TP} conf 0.85 prec 0.5 gap +0.35; {0.3 TP, 0.2 FP} gap -0.25
    p, y = np.array([0.9, 0.8, 0.3, 0.2]), np.array([0, 1, 1, 0], dtype=bool)
    s = cell_contributions(p, y, np.array([1, 1, 0, 0]), 2, 1, "drop")
    np.testing.assert_allclose(s["gap"], [-0.25, 0.35])
    np.testing.assert_allclose(s["contribution"], [0.9 / 4, -0.2 / 4, 0.7 / 4, -0.2 / 4])
    assert s["contribution"].sum() == pytest.approx(0.5 * 0.35 + 0.5 * 0.25)  # D-ECE = 0.3
    w = worst_detections(
        {
            "p": p,
            "y": y,
            "features": None,
            "iou": np.array([0.3, 0.8, 0.6, 0.1]),
            "image_id": np.arange(4),
            "category": np.ones(4, int),
            "class_name": ["a"] * 4,
            "file_name": [""] * 4,
            "box": np.zeros((4, 4)),
            "gt_box": [None] * 4,
            "width": np.ones(4),
            "height": np.ones(4),
            "feature_names": ["confidence"],
        },
        [2],
        1,
        "drop",
        top=2,
    )
    assert [r["score"] for r in w["highest_confidence_false_positives"]] == [0.9, 0.2]
    assert [r["score"] for r in w["lowest_confidence_true_positives"]] == [0.3, 0.8]
    assert [r["score"] for r in w["largest_contributions"]] == [0.9, 0.3]
    assert w["largest_gap_cells"][0]["cell"] == 1 and w["largest_gap_cells"][0]["contribution"] == pytest.approx(0.175)


def test_contributions_sum_to_netcal_dece() -> None:
    """With sample_threshold 1 the D-ECE is netcal 1.4.0's detection ECE; the contributions sum to it."""
    netcal = pytest.importorskip("netcal.metrics")
    rng = np.random.default_rng(4)
    n = 3000
    p = rng.uniform(0.05, 0.99, n)
    f = rng.uniform(0, 1, (n, 2))
    y = rng.uniform(size=n) < p**1.5
    ref = netcal.ECE(bins=[4, 3, 3], detection=True, sample_threshold=1).measure(np.column_stack([p, f]), y)
    from detcal.binning.edges import cell_index

    cell, nc = cell_index(np.column_stack([p, f]), (4, 3, 3))
    s = cell_contributions(p, y, cell, nc, 1, "drop")
    assert s["contribution"].sum() == pytest.approx(float(ref), abs=1e-12)


def test_every_number_on_the_page_is_in_metrics_json(synthetic: tuple[Path, dict]) -> None:
    out, d = synthetic
    page = (out / "report.html").read_text(encoding="utf-8")
    content = json.loads((out / "metrics.json").read_text())
    assert content == d["content"]
    assert _assert_numbers_from(page, content) > 200
    shown = set(_page_numbers(page))
    assert all(h["value"] is not None for h in content["headline"].values())
    for name, h in content["headline"].items():  # the headline and its interval are on the page
        assert h["value"] in shown, name
        assert all(v in shown for v in (h.get("ci") or []) if v is not None), name
    w = content["worst_detections"]
    assert w["dece_from_contributions"] == pytest.approx(content["confidence"][w["iou"]]["dece"]["value"], abs=1e-12)
    for r in w["highest_confidence_false_positives"]:
        assert r["score"] in shown and not r["matched"]
    _assert_self_contained(page)
    assert "report.html" in content["files"]


def test_thumbnails_from_the_image_directory(synthetic: tuple[Path, dict]) -> None:
    import base64
    import io

    from PIL import Image

    out, d = synthetic
    page = (out / "report.html").read_text(encoding="utf-8")
    thumbs = re.findall(r'<svg class=thumb viewBox="0 0 (\d+) (\d+)".*?base64,([^"]+)".*?</svg>', page)
    w = d["content"]["worst_detections"]
    shown = sum(
        len(w[k])
        for k in ("highest_confidence_false_positives", "lowest_confidence_true_positives", "largest_contributions")
    )
    assert len(thumbs) == shown > 0
    for tw, th, data in thumbs:
        im = Image.open(io.BytesIO(base64.b64decode(data)))
        assert im.size == (int(tw), int(th)) and max(im.size) == 180
    assert page.count('class="detbox"') == shown
    # the same content without images: no thumbnails, the tables stay
    bare = render_report(d["content"], out, image_dir=out / "no_such_dir")
    assert "<svg class=thumb" not in bare and "Highest-confidence false positives" in bare


def test_generic_keys_and_other_commands(synthetic: tuple[Path, dict], tmp_path: Path) -> None:
    _, d = synthetic
    c = dict(d["content"])
    c["oce"] = {"name": "oce", "value": 0.123456789, "ci": [0.1, 0.2], "params": {"bins": 7}}
    page = render_report(c)
    assert "<h3>oce</h3>" in page and 'data-v="0.123456789"' in page
    _assert_numbers_from(page, c)
    cmp_like = {
        "command": "detcal-compare",
        "table": [{"detector": "a", "AP": 0.4, "ece": 0.1, "ece_ci": [0.05, 0.15]}],
        "differences": [
            {
                "detector": "a",
                "baseline": "b",
                "metric": "ece",
                "diff": -0.02,
                "ci": [-0.03, -0.01],
                "excludes_zero": True,
            }
        ],
    }
    page = write_report(tmp_path, cmp_like).read_text()
    assert "Paired differences" in page and "<th>excludes_zero</th>" in page
    assert "a vs b (paired over images, intervals that exclude 0): ece" in page
    _assert_numbers_from(page, cmp_like)


def test_warnings_go_through_logging_and_into_metrics_json(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from detcal.reports.results_json import write_metrics
    from detcal.utils.warn import capture

    with capture(), caplog.at_level("WARNING", logger="detcal"):
        warnings.warn("cells too sparse\nsecond line", UserWarning, stacklevel=1)
        content = write_metrics(tmp_path / "m.json", {"warnings": ["own"]})
    assert [r.getMessage() for r in caplog.records] == ["UserWarning: cells too sparse"]
    assert content["warnings"] == ["own", "UserWarning: cells too sparse"]
    assert json.loads((tmp_path / "m.json").read_text())["warnings"] == content["warnings"]


def _app(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"detcal.apps.{module}", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_evaluate_ends_with_run_directory_files_and_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _app(
        "evaluate", ["data.n_images=40", "bootstrap.n=0", "output.progress=false", f"hydra.run.dir={run}"], tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((run / "metrics.json").read_text())
    tail = proc.stdout.strip().splitlines()
    assert f"run directory: {run.resolve()}" in tail
    files = next(ln for ln in tail if ln.startswith("files: "))
    assert files.startswith(f"files: {', '.join(m['files'])}") and "report.html" in m["files"]
    assert "evaluate.log" in files.split(", ")[len(m["files"]) :]  # and what else the directory holds
    assert f"report: {run.resolve() / 'report.html'}" in tail and (run / "report.html").is_file()
    assert len(tail) < 30 and "| ece |" not in proc.stdout  # the tables stay in summary.md
    assert "Files: " + ", ".join(m["files"]) in (run / "summary.md").read_text()
    assert "warnings.warn" not in proc.stderr and "Warning:" not in proc.stderr.replace("UserWarning: ", "")
    off = _app(
        "evaluate",
        [
            "data.n_images=40",
            "bootstrap.n=0",
            "output.progress=false",
            "report.enabled=false",
            f"hydra.run.dir={tmp_path / 'off'}",
        ],
        tmp_path,
    )
    assert off.returncode == 0 and not (tmp_path / "off" / "report.html").exists()


def test_calibrate_report_numbers_and_before_after(tmp_path: Path) -> None:
    res = detcal.calibrate(
        DataSpec(n_images=200),
        EvaluationSpec(bootstrap=BootstrapSpec(n=40), dece_binning=DeceBinningSpec(bins=3)),
        workdir=tmp_path,
    )
    content = res.write(tmp_path / "run", plots=False, csv=False, report=True)
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    assert _assert_numbers_from(page, content) > 100
    _assert_self_contained(page)
    change = content["evaluation"]["confidence"]["change"]["ece"]
    shown = set(_page_numbers(page))
    assert {change["a"], change["b"], change["difference"]} <= shown and set(change["ci"]) <= shown
    assert "Before and after calibration" in page and page.count("Reliability before") == 1
    assert page.count("Reliability after") == 1


def test_main_job_table1_section() -> None:
    t1 = {
        "command": "detcal-main",
        "table": "Levi et al. 2019 Table 1 analogue",
        "split": "val",
        "n_tp_val": 812,
        "columns": ["tx", "ty"],
        "rows": {"uncalibrated": {"tx": 0.31, "ty": 0.29}, "std scaling": {"tx": 0.05, "ty": 0.04}},
        "paper": {"ENCE before calibration": {"tx": 0.165, "ty": 0.254}},
    }
    page = render_report(t1)
    assert "Levi et al. 2019 Table 1 analogue" in page and "The paper's Table 1" in page
    _assert_numbers_from(page, t1)
    assert {0.31, 0.29, 0.05, 0.04, 0.165, 0.254, 812} <= set(_page_numbers(page))


def test_diagnosis_section_numbers_are_those_of_metrics_json(synthetic: tuple[Path, dict]) -> None:
    """The diagnosis section (TIDE bars, calibration by error type, confusion heat map, threshold curves, label
    errors) shows the numbers of metrics.json's ``diagnostics``, and its thumbnails come from the image folder."""
    out, d = synthetic
    page = (out / "report.html").read_text(encoding="utf-8")
    content = d["content"]
    diag = content["diagnostics"]
    section = page[page.index("<h2 id=diagnosis>") :]
    section = section[: section.index("<h2 id=", 10)] if "<h2 id=" in section[10:] else section
    _assert_numbers_from(section, content)
    shown = set(_page_numbers(section))
    t = diag["tide"]
    assert all(v in shown for v in t["dap"].values()) and all(v in shown for v in t["special_dap"].values())
    assert t["ap"] in shown
    for g in diag["calibration_by_error_type"]["types"].values():
        assert all(g[k] in shown for k in ("n", "ece_contribution", "dece_contribution") if g[k] is not None)
    cells = {v for row in diag["confusion"]["matrix"] for v in row if v}
    assert cells <= shown and len(re.findall(r'class="cellr" data-v=', section)) == sum(
        1 for row in diag["confusion"]["matrix"] for v in row if v
    )
    f1 = diag["operating_points"]["pooled"]["f1_optimal"]
    assert f1["threshold"] in shown and f1["f1"] in shown
    assert all(e["ece"] in shown for e in diag["operating_points"]["ece_kept"].values() if e["ece"] is not None)
    for f in diag["findings"]:
        assert html.escape(f) in section
    le = diag["label_errors"]
    n_rows = len(le["unannotated"]) + len(le["class_disagreement"])
    assert n_rows > 0
    assert section.count('<svg class="thumb label-error"') == n_rows
    assert section.count('class="detbox label-error"') == n_rows


def test_label_error_thumbnails_stay_inside_the_image_folder(tmp_path: Path) -> None:
    """A file name that climbs out of the image folder gets no thumbnail (the image outside is never read)."""
    from PIL import Image

    from detcal.reports.html.diagnosis import diagnosis_section

    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (50, 50)).save(tmp_path / "secret.jpg")
    Image.new("RGB", (50, 50)).save(tmp_path / "imgs" / "in.jpg")
    row = {"image_id": 1, "class": "a", "score": 0.9, "box": [1.0, 1.0, 20.0, 20.0], "detection": 0}
    le = {"params": {"min_score": 0.7, "min_iou": 0.8, "iou": 0.5, "top": 20}, "n_unannotated": 2,
          "n_class_disagreement": 0, "class_disagreement": [],
          "unannotated": [{**row, "file_name": "../secret.jpg"}, {**row, "file_name": "in.jpg", "image_id": 2}]}  # fmt: skip
    html_ = diagnosis_section({"diagnostics": {"label_errors": le}}, tmp_path / "imgs")
    assert html_.count('<svg class="thumb label-error"') == 1 and "image 2" in html_


def _doc_command(fmt: str) -> list[str]:
    """The ``detcal-evaluate data=<fmt>`` command of docs/formats.md, as its arguments."""
    lines = (REPO / "docs" / "formats.md").read_text(encoding="utf-8").splitlines()
    line = next(ln for ln in lines if ln.startswith(f"detcal-evaluate data={fmt} "))
    return line.split()[1:]


def _protocol_numbers(acc: dict) -> set[float]:
    """The numbers the protocol section must show: every LVIS summary and per-frequency entry, the Open
    Images mAP and per-class APs, both VOC variants' mAP and per-class APs."""
    want = _numbers(acc.get("lvis_ap", {}), set()) | _numbers(acc.get("calibration_by_frequency", {}), set())
    oi = acc.get("openimages_ap") or {}
    want |= _numbers([oi.get("mAP"), oi.get("per_class", {})], set()) if oi else set()
    for e in (acc.get("voc_ap") or {}).values():
        want |= _numbers([e["mAP"], e["per_class"]], set())
    return want


@pytest.mark.parametrize("fmt", ["lvis", "openimages", "voc"])
def test_protocol_accuracy_section_numbers_are_those_of_metrics_json(fmt: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _app("evaluate", [*_doc_command(fmt), "bootstrap.n=0", f"hydra.run.dir={run}"], REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    m = json.loads((run / "metrics.json").read_text())
    page = (run / "report.html").read_text(encoding="utf-8")
    assert _assert_numbers_from(page, m) > 50
    _assert_self_contained(page)
    start = page.index("<h2 id=protocol-accuracy>")
    section = page[start : page.index("<h2 ", start + 1)]
    want = _protocol_numbers(m["accuracy"])
    assert len(want) > 10 and want <= set(_page_numbers(section))
    heads = {"lvis": ["LVIS AP", "APr", "per frequency group", "LaECE"], "openimages": ["Open Images AP", "mAP@0.5"]}
    heads["voc"] = ["11-point (VOC2007)", "area (VOC2010 onwards)"]
    assert all(h in section for h in heads[fmt])
    if fmt != "lvis":  # per-class rows carry the class names of metrics.json
        assert "<td>person</td>" in section and "<td>toothbrush</td>" in section


def test_protocol_section_escapes_every_string() -> None:
    from detcal.reports.html.protocol import protocol_accuracy

    bad = "<script>x</script>"
    m = {
        "data": {"counts": {"categories": {"7": bad}}},
        "accuracy": {
            "definition": bad,
            "openimages_ap": {"variant": bad, "iou_threshold": 0.5, "mAP": 0.25, "per_class": {"7": 0.25, bad: None}},
            "voc_ap": {bad: {"mAP": 0.5, "per_class": {"7": 0.5}}},
            "calibration_by_frequency": {bad: {"n": 3, "ece": 0.1}},
            "lvis_ap": {"AP": 0.3, bad: 0.2},
        },
    }
    section = protocol_accuracy(m)
    assert "<script" not in section and section.count("&lt;script&gt;") >= 6
    assert {0.25, 0.5, 0.1, 0.3, 0.2, 3.0} <= set(_page_numbers(section))
