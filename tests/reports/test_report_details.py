"""The smaller page and console details of issue 34: shares of the D-ECE in percent, each warning once on
the console, KITTI AP rows with class names, C_v changes below floating-point noise printed as 0, the
per-seed Table 1 of the main job (hand-made table1.json inputs, nothing trained)."""

from __future__ import annotations

import re
import statistics
from typing import Any

import numpy as np
import pytest

from detcal.reports.html.page import worst_section
from detcal.reports.html.worst import worst_detections


def _ctx(p: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    n = len(p)
    return {
        "p": p,
        "y": y,
        "features": None,
        "iou": np.full(n, 0.5),
        "image_id": np.arange(n),
        "category": np.ones(n, int),
        "class_name": ["a"] * n,
        "file_name": [""] * n,
        "box": np.zeros((n, 4)),
        "gt_box": [None] * n,
        "width": np.ones(n),
        "height": np.ones(n),
        "feature_names": ["confidence"],
    }


def test_share_of_dece_in_percent_one_format() -> None:
    # two cells: {0.9 FP, 0.8 TP} gap +0.35, {0.3 TP, 0.2 FP} gap -0.25; D-ECE = 0.175 + 0.125 = 0.3
    p, y = np.array([0.9, 0.8, 0.3, 0.2]), np.array([0, 1, 1, 0], dtype=bool)
    w = worst_detections(_ctx(p, y), [2], 1, "drop", top=4)
    cells = w["largest_gap_cells"]
    assert [c["share"] for c in cells] == pytest.approx([0.175 / 0.3, 0.125 / 0.3])
    assert sum(c["share"] for c in cells) == pytest.approx(1.0)
    first = w["largest_contributions"][0]  # the 0.9 false positive: (0.9 - 0) / 4 of the 0.3
    assert first["score"] == 0.9 and first["share"] == pytest.approx(0.225 / 0.3)
    html = worst_section({"worst_detections": {"iou": "iou=0.50", **w}}, None)
    assert "58.3%" in html and "41.7%" in html and "75.00%" in html
    tail = html[html.index("D-ECE cells with the largest share") :]
    shares = re.findall(r"<td class=n data-v=\"[^\"]+\" data-sort=\"[^\"]+\">([^<]*%)</td>", tail)
    assert len(shares) == 2 and all(re.fullmatch(r"\d+\.\d%", s) for s in shares)


def test_tiny_share_is_not_scientific() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0, 1, 4000)
    y = rng.uniform(size=4000) < p**2
    w = worst_detections(_ctx(p, y), [10], 1, "drop", top=10)
    html = worst_section({"worst_detections": {"iou": "iou=0.50", **w}}, None)
    assert not re.search(r">[−-]?\d\.\d+e[−+-]\d+%?<", html), "a number in scientific notation"
    for row in w["largest_contributions"]:
        assert f"{100 * row['share']:.2f}%".replace("-", "−") in html


def test_a_logged_warning_is_not_repeated_by_the_console_summary(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import warnings

    from detcal.calibration.report import CalibrationFitWarning
    from detcal.reports.console import console_summary
    from detcal.utils.warn import capture, collected

    with capture(), caplog.at_level("WARNING", logger="detcal"):
        warnings.warn("StdScalingSGD: fit is not trustworthy: max_steps=5 reached", CalibrationFitWarning, stacklevel=1)
        fit = collected()[0]
        text = console_summary({"command": "detcal-calibrate", "warnings": [fit, "input: 3% outside"]}, tmp_path)
    assert (caplog.text + text).count("fit is not trustworthy") == 1
    assert "input: 3% outside" in text and "1 logged above" in text


def test_kitti_ap_rows_name_their_class(tmp_path: Any) -> None:
    from support.kitti_like import make_frames, write_frames

    from detcal.pipeline.accuracy_block import accuracy_block
    from detcal.pipeline.sources import load_data
    from detcal.pipeline.spec import DataSpec, EvaluationSpec
    from detcal.reports.html.sections import accuracy
    from detcal.reports.summary_md import _accuracy_md

    lab, res = write_frames(make_frames(12, seed=3), tmp_path)
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("".join(f"{i:06d} 1242 375\n" for i in range(12)))
    data = load_data(DataSpec(source="kitti", label_dir=str(lab), results_dir=str(res), sizes=str(sizes)))
    acc = accuracy_block(EvaluationSpec(), data)
    names = {r["category"]: r["class"] for r in acc["kitti_ap"]}
    assert names == {1: "Car", 4: "Pedestrian", 6: "Cyclist"}
    html = accuracy({"accuracy": acc, "localisation": {}})
    md = "\n".join(_accuracy_md(acc, {}))
    for text in (html, md):
        assert "Car" in text and "Pedestrian" in text and "Cyclist" in text
    assert "<td class=n data-v=\"1\" data-sort=\"1\">1</td><td>easy" not in html  # no bare id in the class column


def _table1_fixture() -> dict[str, Any]:
    import json
    from pathlib import Path

    t = json.loads((Path(__file__).parents[1] / "data" / "regression" / "main_table1.json").read_text())
    cols = ["tx", "ty", "tw", "th"]
    return {
        **t,
        "columns": cols,
        "split": "val",
        "iou_threshold": 0.5,
        "bins": 8,
        "binning": "equal_count",
        "files": [],
    }


def test_cv_noise_reads_zero_and_cv_values_once() -> None:
    from detcal.training.report import table1_markdown

    t = _table1_fixture()
    d = t["ence_change"]["std_scaling"]["cv"]["tx"]["difference"]
    assert d != 0 and abs(d) < 1e-15  # the recorded run's noise, kept in table1.json
    md = table1_markdown(t)
    assert not re.search(r"[+-]\d\.\de-1[3-9]", md), "a floating-point noise difference printed"
    assert "| C_v std scaling - before | 0 | 0 | 0 | 0 |" in md and "reads 0" in md
    assert len(re.findall(r"^\| C_v( [a-z_]+)? \|", md, flags=re.M)) == 1  # the values of C_v once
    assert t["ence_change"]["std_scaling"]["cv"]["tx"]["difference"] == d  # the JSON number unchanged
    # a real change is still printed, and C_v per variant becomes a table again
    t["ence_change"]["std_scaling"]["cv"]["tx"]["difference"] = 0.01
    t["cv"]["std_scaling"] = {**t["cv"]["std_scaling"], "tx": t["cv"]["before"]["tx"] + 0.01}
    md = table1_markdown(t)
    assert "| C_v std scaling - before | +1.0e-02 | 0 |" in md and "| C_v std_scaling |" in md


def _seed_table(before: list[float], std: list[float], cv: list[float], holds: bool) -> dict[str, Any]:
    cols = ["tx", "ty", "tw", "th"]
    return {
        "table": "Table 1 analogue",
        "columns": cols,
        "rows": {
            "ENCE before calibration": dict(zip(cols, before)),
            "ENCE after std scaling": dict(zip(cols, std)),
            "C_v": dict(zip(cols, cv)),
        },
        "conclusion": {"claim": "std_scaling lowers the val ENCE on every coordinate, C_v unchanged", "holds": holds},
    }


def test_per_seed_table_with_mean_and_std(tmp_path: Any) -> None:

    from detcal.reports.html.main_page import seeds_table

    tables = {
        "seed 0": _seed_table([0.20, 0.60, 0.30, 0.32], [0.10, 0.07, 0.09, 0.10], [0.35, 0.44, 0.49, 0.53], True),
        "seed 1": _seed_table([0.22, 0.56, 0.28, 0.30], [0.12, 0.08, 0.10, 0.08], [0.37, 0.42, 0.50, 0.51], True),
        "seed 2": _seed_table([0.21, 0.58, 0.29, 0.34], [0.14, 0.06, 0.08, 0.09], [0.36, 0.43, 0.48, 0.52], False),
    }
    assert seeds_table({"seed 0": tables["seed 0"]}) == ""  # one seed: no per-seed table
    html = seeds_table(tables)
    # ENCE after std scaling, tx: 0.10, 0.12, 0.14 -> mean 12.0%, sample std 2.0%
    assert "12.0%</span> ± <span class=n" in html and ">2.0%</span>" in html
    assert f'data-v="{statistics.stdev([0.10, 0.12, 0.14])!r}"' in html
    # C_v th: 0.53, 0.51, 0.52 -> 0.520 ± 0.010
    assert ">0.520</span> ± <span class=n" in html and ">0.010</span>" in html
    assert html.count("mean ± std") == 3 and "holds on <span class=n data-v=\"2\">2</span> of" in html
    # the seed study writes it as seeds.html beside seeds.md
    from detcal.studies import main_job_seeds

    page = main_job_seeds.write_seeds_page(tmp_path, tables).read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Table 1 per training seed" in page and "seed 2" in page


def test_reliability_png_keeps_every_label_inside(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from detcal.reports import plots

    figs: list[Any] = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (figs.append(fig), save(fig, path))[1])
    count = np.array([120000, 45000, 3000, 800, 90, 12, 0, 5, 40, 2500])  # six-digit histogram ticks
    conf = np.linspace(0.05, 0.95, 10)
    prec = np.clip(conf - 0.1, 0, 1)
    plots.reliability_diagram(tmp_path / "r.png", conf, prec, count, ece=0.1)
    (fig,) = figs
    r = fig.canvas.get_renderer()
    box = fig.bbox
    texts = [t for ax in fig.axes for t in (ax.yaxis.label, ax.xaxis.label, ax.title) if t.get_text()]
    texts += [t for ax in fig.axes for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
    assert any(t.get_text() == "samples" for t in texts)
    for t in texts:
        e = t.get_window_extent(r)
        assert e.x0 >= box.x0 - 0.5 and e.x1 <= box.x1 + 0.5 and e.y0 >= box.y0 - 0.5 and e.y1 <= box.y1 + 0.5, (
            t.get_text()
        )
