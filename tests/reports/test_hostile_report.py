"""The report writers under hostile input (issue 33): thumbnails only from inside data.image_dir (each image
decoded once), every string of a metrics.json from elsewhere escaped in report.html (SVG <title> too),
summary.md table cells escaped, long names shortened in figures. Inputs: tests/data/hostile/report_inputs.json."""

from __future__ import annotations

import json
import logging
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import detcal
from detcal.pipeline.spec import BootstrapSpec, DeceBinningSpec, EvaluationSpec
from detcal.reports.html import render_report
from detcal.reports.html.fmt import esc, text
from detcal.reports.html.thumbs import find_image

CORPUS = json.loads((Path(__file__).parents[1] / "data" / "hostile" / "report_inputs.json").read_text())
PAYLOADS = CORPUS["strings"]


def _png(path: Path, colour: tuple[int, int, int] = (200, 30, 30)) -> None:
    from PIL import Image

    Image.new("RGB", (64, 48), colour).save(path)


@pytest.fixture
def image_dir(tmp_path: Path) -> Path:
    d = tmp_path / "images"
    d.mkdir()
    _png(d / "ok.png")
    _png(tmp_path / "outside.png", (0, 0, 0))  # a private image beside the folder
    (d / "link_out.png").symlink_to(tmp_path / "outside.png")
    return d


@pytest.mark.parametrize(("name", "why"), CORPUS["file_names"], ids=[n for n, _ in CORPUS["file_names"]])
def test_a_file_name_out_of_the_image_folder_is_refused_with_a_warning(
    image_dir: Path, name: str, why: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="detcal"):
        assert find_image(image_dir, name, 77) is None
    assert f"image id 77: its file_name {name[:200]!r}" in caplog.text and why in caplog.text


def test_inside_the_folder_and_the_id_fallback_still_work(image_dir: Path) -> None:
    assert find_image(image_dir, "ok.png", 1) == image_dir / "ok.png"
    _png(image_dir / "000042.png")
    assert find_image(image_dir, "", 42) == image_dir / "000042.png"
    (image_dir / "000043.png").symlink_to(image_dir.parent / "outside.png")
    assert find_image(image_dir, "", 43) is None


def _row(image_id: int, file_name: str, score: float = 0.9) -> dict[str, Any]:
    return {
        "image_id": image_id,
        "file_name": file_name,
        "class": "person",
        "score": score,
        "iou": 0.0,
        "matched": False,
        "cell": 0,
        "cell_gap": 0.5,
        "contribution": 0.01,
        "box": [4.0, 4.0, 30.0, 30.0],
        "gt_box": None,
        "image_gt_boxes": [],
    }


def test_the_report_shows_only_images_of_the_folder_each_decoded_once(
    image_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from PIL import Image

    opened: list[str] = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda p, *a, **k: (opened.append(str(p)), real_open(p, *a, **k))[1])
    rows = [_row(1, "ok.png"), _row(2, "../outside.png"), _row(3, "link_out.png"), _row(4, "/etc/hostname")]
    content = {
        "worst_detections": {
            "iou": 0.5,
            "definition": "test",
            "highest_confidence_false_positives": rows,
            "largest_contributions": [_row(1, "ok.png", 0.8)],  # the same image again
        }
    }
    page = render_report(content, image_dir=image_dir)
    assert page.count("<svg class=thumb") == 2  # both rows of ok.png, nothing else
    assert opened == [str(image_dir / "ok.png")]


def _payload_everywhere(node: Any, p: str) -> Any:
    """Every string of a metrics.json (keys included) with a payload, and one entry of every count list."""
    if isinstance(node, dict):
        out = {
            (k if k in ("value", "ci", "table", "count") else k + p): _payload_everywhere(v, p) for k, v in node.items()
        }
        for k, v in node.items():
            if k == "count" and isinstance(v, list) and len(v) > 1:
                out[k] = [v[0], p, *v[2:]]
        return out
    if isinstance(node, list):
        return [_payload_everywhere(v, p) for v in node]
    return node + p if isinstance(node, str) else node


@pytest.fixture(scope="module")
def content(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from detcal.data.synthetic import write_synthetic

    root = tmp_path_factory.mktemp("hostile_report")
    p = write_synthetic(root / "set", n_images=20, seed=3, render=False)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=5), dece_binning=DeceBinningSpec(bins=3))
    res = detcal.evaluate(str(p["coco_instances"]), str(p["coco_results"]), spec, workdir=root)
    return res.write(root / "run", plots=False, csv=False, report=False)


@pytest.mark.parametrize("payload", PAYLOADS[:6])
def test_a_metrics_json_from_elsewhere_cannot_put_markup_into_the_page(content: dict, payload: str) -> None:
    page = render_report(_payload_everywhere(content, payload))
    assert payload not in page  # every occurrence escaped: text, attributes and SVG <title> alike
    assert esc(payload) in page
    titles = re.findall(r"<title>(.*?)</title>", page, flags=re.S)
    assert titles and not any("<" in t for t in titles)


def test_a_malformed_section_becomes_a_note_not_a_crash(content: dict) -> None:
    broken = json.loads(json.dumps(content))
    for blk in broken["confidence"].values():
        if isinstance(blk, dict) and isinstance(blk.get("ece"), dict):
            blk["ece"]["table"]["count"] = ["<b>x</b>"] * 2
    page = render_report(broken)
    assert "could not be drawn from this metrics.json" in page and "<b>x</b>" not in page


def test_text_is_the_escaped_fmt() -> None:
    assert text("<i>") == "&lt;i&gt;" and text(0.5) == "0.5000"


def test_summary_md_cells_keep_the_table_whole(tmp_path: Path) -> None:
    from detcal.data.synthetic import write_synthetic
    from detcal.reports.tables import md_cell

    nasty = PAYLOADS[-1]
    assert "\n" not in md_cell(nasty) and re.sub(r"\\.", "", md_cell(nasty)).count("|") == 0
    p = write_synthetic(tmp_path / "set", n_images=20, seed=3, render=False)
    gt = json.loads(Path(p["coco_instances"]).read_text())
    for c in gt["categories"]:
        c["name"] = f"{c['name']}{nasty}"
    Path(p["coco_instances"]).write_text(json.dumps(gt))
    res = detcal.evaluate(
        str(p["coco_instances"]), str(p["coco_results"]), EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    )
    md = res.to_markdown()
    tables: list[list[str]] = []
    prev = False
    for line in md.splitlines():
        if line.startswith("|") and not prev:
            tables.append([])
        if line.startswith("|"):
            tables[-1].append(line)
        prev = line.startswith("|")
    assert any("Pedestrian" in ln for t in tables for ln in t)
    for t in tables:  # every row of a table has as many unescaped | as its header
        widths = {len(re.findall(r"(?<!\\)\|", re.sub(r"\\\\", "", ln))) for ln in t}
        assert len(widths) == 1, t


def test_a_two_million_character_name_is_shortened_in_figures() -> None:
    from detcal.reports.per_class import plot_per_class_reliability, short_label

    rng = np.random.default_rng(0)
    p, y, cat = rng.uniform(size=200), rng.uniform(size=200) < 0.5, rng.integers(1, 3, 200)
    t0 = time.perf_counter()
    fig = plot_per_class_reliability({"d" * 10**6: (p, y, cat)}, {1: "x" * 2_000_000, 2: "$\\frac{a}{b}$"}, top_n=2)
    assert time.perf_counter() - t0 < 20
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert all(len(t) < 80 for t in titles) and any(t.startswith("x" * 40 + "…") for t in titles)
    assert short_label("a\nb") == "a b" and short_label("$x$") == "\\$x\\$"


def test_a_foreign_metrics_json_does_not_choose_the_image_folder(image_dir: Path, tmp_path: Path) -> None:
    content = {
        "run_dir": "/somewhere/else",
        "config": {"data": {"image_dir": str(image_dir)}},
        "worst_detections": {"iou": 0.5, "definition": "t", "highest_confidence_false_positives": [_row(1, "ok.png")]},
    }
    assert "<svg class=thumb" not in render_report(content, tmp_path / "run")
    assert "<svg class=thumb" in render_report(content, tmp_path / "run", image_dir=image_dir)  # the user's choice
    own = dict(content, run_dir=str(tmp_path / "run"))
    assert "<svg class=thumb" in render_report(own, tmp_path / "run")  # a run's own report, as before
