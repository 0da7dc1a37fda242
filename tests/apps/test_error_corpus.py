"""A corpus of malformed inputs (COCO and KITTI, ground truth and results) run
through every command that reads them: each ends with one clear message on
stderr that names the file, exit status 2 and no traceback.

The quick loop runs every input through ``detcal-evaluate`` and
``detcal-match`` in-process; the slow test also runs ``detcal-calibrate`` and
checks a few inputs as real subprocesses (the console scripts' behaviour).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from detcal.apps import calibrate as calibrate_app, evaluate as evaluate_app, match as match_cli

W, H = 640, 480


def _gt() -> dict:
    return {
        "images": [
            {"id": 1, "width": W, "height": H, "file_name": "a.jpg"},
            {"id": 2, "width": W, "height": H, "file_name": "b.jpg"},
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 10, 100, 80], "area": 8000, "iscrowd": 0},
            {"id": 2, "image_id": 2, "category_id": 2, "bbox": [200, 100, 50, 60], "area": 3000, "iscrowd": 0},
            {"id": 3, "image_id": 2, "category_id": 1, "bbox": [300, 200, 80, 40], "area": 3200, "iscrowd": 0},
        ],
        "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "person"}],
    }


def _res() -> list:
    return [
        {"image_id": 1, "category_id": 1, "bbox": [12, 11, 98, 80], "score": 0.9},
        {"image_id": 1, "category_id": 2, "bbox": [400, 300, 30, 30], "score": 0.4},
        {"image_id": 2, "category_id": 2, "bbox": [201, 101, 50, 58], "score": 0.8},
        {"image_id": 2, "category_id": 1, "bbox": [305, 200, 80, 40], "score": 0.7},
    ]


def _set(obj: dict | list, path: tuple, value: object) -> None:
    for k in path[:-1]:
        obj = obj[k]
    if value is _DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value


_DELETE = object()

# (name, "gt" | "res", mutation: a function of the parsed JSON, or raw text)
COCO_CASES: list[tuple[str, str, object]] = [
    ("gt_truncated_json", "gt", '{"images": [{"id": 1'),
    ("gt_empty_file", "gt", ""),
    ("gt_not_utf8", "gt", b"\xff\xfe\x00garbage"),
    ("gt_top_level_list", "gt", "[]"),
    ("gt_no_images", "gt", lambda g: g.pop("images")),
    ("gt_no_annotations", "gt", lambda g: g.pop("annotations")),
    ("gt_no_categories", "gt", lambda g: g.pop("categories")),
    ("gt_image_without_id", "gt", lambda g: g["images"][0].pop("id")),
    ("gt_image_id_string", "gt", lambda g: _set(g, ("images", 0, "id"), "abc")),
    ("gt_duplicate_image_id", "gt", lambda g: _set(g, ("images", 1, "id"), 1)),
    ("gt_ann_unknown_image", "gt", lambda g: _set(g, ("annotations", 0, "image_id"), 99)),
    ("gt_ann_bbox_3_numbers", "gt", lambda g: _set(g, ("annotations", 0, "bbox"), [1, 2, 3])),
    ("gt_ann_bbox_negative_w", "gt", lambda g: _set(g, ("annotations", 0, "bbox"), [1, 2, -3, 4])),
    ("gt_ann_bbox_string", "gt", lambda g: _set(g, ("annotations", 0, "bbox"), "10 10 5 5")),
    ("gt_ann_unknown_category", "gt", lambda g: _set(g, ("annotations", 0, "category_id"), 7)),
    ("gt_ann_missing_bbox", "gt", lambda g: g["annotations"][0].pop("bbox")),
    ("gt_category_without_id", "gt", lambda g: g["categories"][0].pop("id")),
    ("gt_ann_bbox_nan", "gt", lambda g: _set(g, ("annotations", 0, "bbox"), [float("nan"), 1, 2, 3])),
    ("gt_width_negative", "gt", lambda g: _set(g, ("images", 0, "width"), -640)),
    ("gt_iscrowd_string", "gt", lambda g: _set(g, ("annotations", 0, "iscrowd"), "yes")),
    ("gt_ann_id_missing_image_id", "gt", lambda g: g["annotations"][1].pop("image_id")),
    ("res_truncated_json", "res", '[{"image_id": 1,'),
    ("res_object_not_list", "res", '{"image_id": 1}'),
    ("res_empty_list", "res", "[]"),
    ("res_missing_score", "res", lambda r: r[0].pop("score")),
    ("res_score_nan", "res", lambda r: _set(r, (0, "score"), float("nan"))),
    ("res_score_string", "res", lambda r: _set(r, (0, "score"), "high")),
    ("res_score_above_one", "res", lambda r: _set(r, (0, "score"), 1.5)),
    ("res_bbox_5_numbers", "res", lambda r: _set(r, (0, "bbox"), [1, 2, 3, 4, 5])),
    ("res_bbox_negative_h", "res", lambda r: _set(r, (0, "bbox"), [1, 2, 3, -4])),
    ("res_bbox_inf", "res", lambda r: _set(r, (0, "bbox"), [1, 2, float("inf"), 4])),
    ("res_unknown_image", "res", lambda r: _set(r, (0, "image_id"), 42)),
    ("res_missing_category", "res", lambda r: r[0].pop("category_id")),
    ("res_image_id_float", "res", lambda r: _set(r, (0, "image_id"), 1.5)),
    ("res_bbox_std_negative", "res", lambda r: [d.update(bbox_std=[1, 1, -1, 1]) for d in r]),
    ("res_bbox_std_nan", "res", lambda r: [d.update(bbox_std=[1, 1, float("nan"), 1]) for d in r]),
    ("res_bbox_std_wrong_length", "res", lambda r: [d.update(bbox_std=[1, 1, 1]) for d in r]),
    ("res_bbox_covar_wrong_shape", "res", lambda r: [d.update(bbox_covar=[[1, 0], [0, 1]]) for d in r]),
    (
        "res_bbox_covar_not_psd",
        "res",
        lambda r: [d.update(bbox_covar=[[1, 5, 0, 0], [5, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]) for d in r],
    ),
    ("res_std_only_on_some", "res", lambda r: r[0].update(bbox_std=[1, 1, 1, 1])),
]

KITTI_LINE = "Car 0.00 0 -1.57 {x1} {y1} {x2} {y2} 1.5 1.6 3.9 1.0 1.7 10.0 -1.5"
KITTI_CASES: list[tuple[str, str, str]] = [
    ("kitti_gt_too_few_fields", "gt", "Car 0.00 0 -1.57 10 20 110"),
    ("kitti_gt_bbox_not_number", "gt", KITTI_LINE.format(x1="ten", y1=20, x2=110, y2=90)),
    ("kitti_gt_x2_before_x1", "gt", KITTI_LINE.format(x1=200, y1=20, x2=110, y2=90)),
    ("kitti_gt_truncation_nan", "gt", KITTI_LINE.format(x1=10, y1=20, x2=110, y2=90).replace(" 0.00 ", " nan ", 1)),
    ("kitti_res_no_score", "res", KITTI_LINE.format(x1=10, y1=20, x2=110, y2=90)),
    ("kitti_res_score_nan", "res", KITTI_LINE.format(x1=10, y1=20, x2=110, y2=90) + " nan"),
    ("kitti_res_score_word", "res", KITTI_LINE.format(x1=10, y1=20, x2=110, y2=90) + " high"),
    ("kitti_res_unknown_frame", "res", "frame:000099"),
]


def _write_coco(root: Path, kind: str, mutation: object) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    gt, res = root / "gt.json", root / "results.json"
    gt.write_text(json.dumps(_gt()))
    res.write_text(json.dumps(_res()))
    target = gt if kind == "gt" else res
    if isinstance(mutation, bytes):
        target.write_bytes(mutation)
    elif isinstance(mutation, str):
        target.write_text(mutation)
    else:
        data = json.loads(target.read_text())
        mutation(data)  # type: ignore[operator]
        target.write_text(json.dumps(data))  # NaN / Infinity tokens as Python writes them
    return gt, res


def _write_kitti(root: Path, kind: str, line: str) -> tuple[Path, Path, Path]:
    labels, results = root / "label_2", root / "results"
    labels.mkdir(parents=True)
    results.mkdir()
    good = KITTI_LINE.format(x1=10, y1=20, x2=110, y2=90)
    (labels / "000000.txt").write_text(good + "\n")
    (results / "000000.txt").write_text(good + " 0.9\n")
    sizes = root / "sizes.txt"
    sizes.write_text("000000 1242 375\n")
    if line.startswith("frame:"):
        (results / f"{line.split(':')[1]}.txt").write_text(good + " 0.5\n")
    elif kind == "gt":
        (labels / "000000.txt").write_text(good + "\n" + line + "\n")
    else:
        (results / "000000.txt").write_text(good + " 0.9\n" + line + "\n")
    return labels, results, sizes


def _bad_file(root: Path, name: str, kind: str) -> str:
    """The file (or directory) the message must name."""
    if name.startswith("kitti"):
        return str(root / ("label_2" if kind == "gt" else "results"))
    return str(root / ("gt.json" if kind == "gt" else "results.json"))


def _run_inprocess(main: Callable[[], object], argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    old = sys.argv
    sys.argv = argv
    try:
        rc = main()
        code = int(rc or 0)
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    return code, capsys.readouterr().err


def _hydra_args(prog: str, root: Path, name: str, kind: str) -> list[str]:
    if name.startswith("kitti"):
        labels, results, sizes = root / "label_2", root / "results", root / "sizes.txt"
        data = [
            "data=kitti",
            f"data.label_dir={labels}",
            f"data.results_dir={results}",
            f"data.sizes={sizes}",
            "matching=kitti",
        ]
    else:
        data = ["data=coco", f"data.gt={root / 'gt.json'}", f"data.results={root / 'results.json'}"]
    return [
        prog,
        *data,
        f"hydra.run.dir={root / 'run'}",
        "bootstrap.n=0",
        "output.plots=false",
        "output.print_summary=false",
        "output.progress=false",
        "regression.enabled=false",
    ]


def _match_args(root: Path, name: str) -> list[str]:
    if name.startswith("kitti"):
        return [
            "--gt",
            str(root / "label_2"),
            "--results",
            str(root / "results"),
            "--format",
            "kitti",
            "--sizes",
            str(root / "sizes.txt"),
            "--out",
            str(root / "m.csv"),
        ]
    return ["--gt", str(root / "gt.json"), "--results", str(root / "results.json"), "--out", str(root / "m.csv")]


ALL = [(n, k, m) for n, k, m in COCO_CASES] + [(n, k, m) for n, k, m in KITTI_CASES]
IDS = [c[0] for c in ALL]


def _make(tmp_path: Path, name: str, kind: str, mutation: object) -> Path:
    root = tmp_path / name
    if name.startswith("kitti"):
        root.mkdir()
        _write_kitti(root, kind, mutation)  # type: ignore[arg-type]
    else:
        _write_coco(root, kind, mutation)
    return root


def _check(code: int, err: str, prog: str, bad: str) -> None:
    assert code == 2, f"{prog} exited {code}; stderr:\n{err[-2000:]}"
    assert "Traceback" not in err, err[-2000:]
    lines = [ln for ln in err.strip().splitlines() if ln.startswith(f"{prog}: error:")]
    assert len(lines) == 1, err[-2000:]
    assert bad in lines[0] or Path(bad).name in lines[0], f"message does not name {bad}: {lines[0]}"


def test_corpus_is_large_enough() -> None:
    assert len(ALL) >= 40 and len(set(IDS)) == len(IDS)


@pytest.mark.parametrize(("name", "kind", "mutation"), ALL, ids=IDS)
def test_evaluate_and_match_fail_cleanly(
    name: str, kind: str, mutation: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _make(tmp_path, name, kind, mutation)
    bad = _bad_file(root, name, kind)
    code, err = _run_inprocess(evaluate_app.main, _hydra_args("detcal-evaluate", root, name, kind), capsys)
    _check(code, err, "detcal-evaluate", bad)
    code = match_cli.main(_match_args(root, name))
    _check(code, capsys.readouterr().err, "detcal-match", bad)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind", "mutation"), ALL, ids=IDS)
def test_calibrate_fails_cleanly(
    name: str, kind: str, mutation: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _make(tmp_path, name, kind, mutation)
    code, err = _run_inprocess(calibrate_app.main, _hydra_args("detcal-calibrate", root, name, kind), capsys)
    _check(code, err, "detcal-calibrate", _bad_file(root, name, kind))


@pytest.mark.parametrize("name", ["gt_truncated_json", "res_score_nan", "kitti_res_no_score"])
def test_console_script_prints_one_line_and_exits_2(name: str, tmp_path: Path) -> None:
    case = next(c for c in ALL if c[0] == name)
    root = _make(tmp_path, *case)
    argv = _hydra_args("detcal-evaluate", root, name, case[1])
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", *argv[1:]], capture_output=True, text=True, env=env, timeout=300
    )
    _check(proc.returncode, proc.stderr, "detcal-evaluate", _bad_file(root, name, case[1]))
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    # the run directory says why it failed
    log = (root / "run" / "evaluate.log").read_text()
    assert "run failed" in log
    assert not (root / "run" / "metrics.json").exists()
    # the traceback appears when asked for
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", *argv[1:]],
        capture_output=True,
        text=True,
        env={**env, "DETCAL_DEBUG": "1"},
        timeout=300,
    )
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_config_mistakes_are_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    for override, expect in [
        ("matching.max_dets=abc", "matching.max_dets"),
        ("matching.mode=foo", "matching.mode"),
        ("dece_binning=nope", "dece_binning/nope"),
        ("bogus.key=1", "bogus"),
        ("name=../../x", "plain directory name"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "detcal.apps.evaluate", override, "data.n_images=5"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )
        assert proc.returncode == 2, (override, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.startswith("detcal-evaluate: error:") and expect in proc.stderr, proc.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path.parent / "x").exists()
