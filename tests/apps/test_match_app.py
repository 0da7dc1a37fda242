"""Tests of the ``detcal-match`` command line (detcal.apps.match).

Inputs are small COCO JSON / KITTI text files written here; expected rows are
worked out by hand in the comments.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from detcal.apps.match import main


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture()
def coco_files(tmp_path: Path) -> tuple[Path, Path]:
    gt = {
        "images": [
            {"id": 1, "width": 100, "height": 100, "file_name": "a.jpg"},
            {"id": 2, "width": 100, "height": 100, "file_name": "b.jpg"},
        ],
        "annotations": [
            {"id": 17, "image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 10], "area": 100, "iscrowd": 0},
            {"id": 42, "image_id": 2, "category_id": 3, "bbox": [0, 0, 50, 50], "area": 2500, "iscrowd": 1},
        ],
        "categories": [{"id": 3, "name": "car"}],
    }
    res = [
        # row 0: score .5, IoU 1 with GT 17, but row 1 (score .9) goes first and takes it -> FP
        {"image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 10], "score": 0.5},
        # row 1: [0,0,10,12] vs [0,0,10,10]: IoU 100/120 = 0.8333 -> TP at 0.5 and 0.75, gt_id 17
        {"image_id": 1, "category_id": 3, "bbox": [0, 0, 10, 12], "score": 0.9},
        # row 2: inside the crowd box of image 2 (IoA 1) -> ignored, gt_id 42
        {"image_id": 2, "category_id": 3, "bbox": [5, 5, 10, 10], "score": 0.7},
        # row 3: score .05, nowhere near a GT -> FP; cut by --score-threshold 0.1
        {"image_id": 2, "category_id": 3, "bbox": [60, 60, 10, 10], "score": 0.05},
    ]
    g, r = tmp_path / "gt.json", tmp_path / "res.json"
    g.write_text(json.dumps(gt))
    r.write_text(json.dumps(res))
    return g, r


def test_coco_rows_in_input_order(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    g, r = coco_files
    out = tmp_path / "out" / "matches.csv"
    rc = main(["--gt", str(g), "--results", str(r), "--format", "coco", "--iou", "0.5", "0.75", "--out", str(out)])
    assert rc == 0
    rows = read_rows(out)
    assert [row["image_id"] for row in rows] == ["1", "1", "2", "2"]
    assert [row["score"] for row in rows] == ["0.5", "0.9", "0.7", "0.05"]
    assert [row["matched@0.5"] for row in rows] == ["0", "1", "0", "0"]
    assert [row["matched@0.75"] for row in rows] == ["0", "1", "0", "0"]
    assert [row["ignored@0.5"] for row in rows] == ["0", "0", "1", "0"]
    assert [row["gt_id@0.5"] for row in rows] == ["-1", "17", "42", "-1"]
    assert [row["considered"] for row in rows] == ["1"] * 4
    assert float(rows[1]["iou"]) == pytest.approx(100 / 120)
    assert float(rows[0]["iou"]) == 1.0
    meta = json.loads((tmp_path / "out" / "matches.csv.json").read_text())
    assert meta["match"]["mode"] == "exclusive" and meta["match"]["max_dets"] == 100
    assert meta["match"]["score_threshold"] == 0.0 and meta["match"]["iou_thresholds"] == [0.5, 0.75]
    assert meta["counts"]["matched"] == [1, 1] and meta["counts"]["ignored"] == [1, 1]


def test_coco_options(coco_files: tuple[Path, Path], tmp_path: Path) -> None:
    g, r = coco_files
    out = tmp_path / "m.csv"
    # --score-threshold 0.1 drops row 3; --max-dets 1 keeps only row 1 in image 1 (and row 2 in image 2)
    rc = main(
        [
            "--gt",
            str(g),
            "--results",
            str(r),
            "--score-threshold",
            "0.1",
            "--max-dets",
            "1",
            "--mode",
            "max",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = read_rows(out)
    assert [row["considered"] for row in rows] == ["0", "1", "1", "0"]
    assert [row["matched@0.5"] for row in rows] == ["0", "1", "0", "0"]
    meta = json.loads(out.with_name("m.csv.json").read_text())
    assert meta["match"]["mode"] == "max" and meta["match"]["max_dets"] == 1
    assert meta["match"]["score_threshold"] == 0.1
    # max mode without a cap: rows 0 and 1 both match GT 17
    rc = main(["--gt", str(g), "--results", str(r), "--mode", "max", "--max-dets", "none", "--out", str(out)])
    assert rc == 0
    assert [row["gt_id@0.5"] for row in read_rows(out)] == ["17", "17", "42", "-1"]


def test_bad_input_fails_cleanly(coco_files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    g, _ = coco_files
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"image_id": 1, "category_id": 3, "bbox": [0, 0, 1], "score": 0.5}]))
    out = tmp_path / "x.csv"
    assert main(["--gt", str(g), "--results", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and "bbox" in err
    assert not out.exists()


KITTI_LABEL = (
    "Car 0.00 0 0.0 0.00 0.00 10.00 100.00 1.5 1.6 3.9 1.0 1.0 10.0 0.0\n"  # GT row 0, id 1: Car
    "Van 0.00 0 0.0 50.00 0.00 60.00 100.00 2.0 1.8 4.5 1.0 1.0 10.0 0.0\n"  # GT row 1, id 2: Van
    "DontCare -1 -1 -10 200.00 0.00 300.00 100.00 -1 -1 -1 -1000 -1000 -1000 -10\n"
)
KITTI_RESULT = (
    # det 0: Car on the Car GT, IoU 700/1000 = 0.7 -> not > 0.7 -> FP
    "Car -1 -1 -10 0.00 0.00 10.00 70.00 -1 -1 -1 -1000 -1000 -1000 -10 0.90\n"
    # det 1: Car on the Van GT (IoU 1) -> ignored (neighbour class)
    "Car -1 -1 -10 50.00 0.00 60.00 100.00 -1 -1 -1 -1000 -1000 -1000 -10 0.80\n"
    # det 2: Car inside DontCare -> ignored
    "Car -1 -1 -10 210.00 10.00 240.00 60.00 -1 -1 -1 -1000 -1000 -1000 -10 0.70\n"
    # det 3: Car, IoU with the Car GT 900/1000 = 0.9 -> TP (the GT is still free: det 0 did not take it)
    "Car -1 -1 -10 0.00 0.00 10.00 90.00 -1 -1 -1 -1000 -1000 -1000 -10 0.60\n"
)


def test_kitti_rules(tmp_path: Path) -> None:
    labels, results = tmp_path / "label_2", tmp_path / "results"
    labels.mkdir()
    results.mkdir()
    (labels / "000000.txt").write_text(KITTI_LABEL)
    (results / "000000.txt").write_text(KITTI_RESULT)
    sizes = tmp_path / "sizes.txt"
    sizes.write_text("000000 1242 375\n")
    out = tmp_path / "k.csv"
    rc = main(
        [
            "--gt",
            str(labels),
            "--results",
            str(results),
            "--format",
            "kitti",
            "--sizes",
            str(sizes),
            "--difficulty",
            "moderate",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    rows = read_rows(out)
    assert [row["matched@kitti"] for row in rows] == ["0", "0", "0", "1"]
    assert [row["ignored@kitti"] for row in rows] == ["0", "1", "1", "0"]
    assert [row["gt_id@kitti"] for row in rows] == ["-1", "2", "-1", "1"]
    meta = json.loads(out.with_name("k.csv.json").read_text())
    assert meta["match"]["iou_thresholds"] == "kitti" and meta["match"]["max_dets"] is None
    assert meta["match"]["iou_rule"] == ">"
