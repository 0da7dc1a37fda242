"""The failures a new user met in the first hour, fixed: calibrate on the bundled COCO detectors writes
COCO results, a KITTI label with an unknown type names it, a detection of an unknown category is a
logged warning naming the results file and the count (and a metrics.json warning), and docs/metrics.md
defines the accuracy, localisation and headline keys metrics.json writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from detcal.data import bundled

REPO = Path(__file__).resolve().parents[2]


def _app(module: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", f"detcal.apps.{module}", *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize(
    "detector", [pytest.param(d, marks=() if i == 0 else pytest.mark.slow) for i, d in enumerate(bundled.DETECTORS)]
)
def test_calibrate_bundled_detector_writes_coco(detector: str, tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = _app(
        "calibrate",
        [
            "data=coco_tfzoo",
            f"data.detector={detector}",
            "bootstrap.n=0",
            "output.plots=false",
            "output.progress=false",
            f"hydra.run.dir={run}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = json.loads((run / "calibrated" / "detections.json").read_text())
    cats = {c["id"] for c in json.loads((run / "calibrated" / "instances.json").read_text())["categories"]}
    assert written and {"image_id", "category_id", "bbox", "score"} <= set(written[0])
    assert {d["category_id"] for d in written} <= cats and len(cats) == 80
    assert f"run directory: {run.resolve()}" in proc.stdout and (run / "report.html").is_file()


def test_kitti_unknown_type_names_the_value(tmp_path: Path) -> None:
    from detcal.core.errors import DetcalInputError
    from detcal.data.kitti import load_kitti_labels

    (tmp_path / "label_2").mkdir()
    row = "0.00 0 -1.5 10 20 100 120 1.5 1.6 3.9 1 2 10 -1.5"
    (tmp_path / "label_2" / "000000.txt").write_text(f"Car {row}\nSpaceship {row}\n")
    with pytest.raises(DetcalInputError) as e:
        load_kitti_labels(tmp_path / "label_2")
    msg = str(e.value)
    assert "'Spaceship'" in msg and "000000.txt" in msg and "line 2" in msg and "type" in msg


@pytest.fixture()
def unknown_category_files(tmp_path: Path) -> tuple[Path, Path, int]:
    from detcal.data.synthetic import write_synthetic

    p = write_synthetic(tmp_path / "set", n_images=30, seed=1, render=False)
    dets = json.loads(Path(p["coco_results"]).read_text())
    for d in dets[:3]:
        d["category_id"] = 999  # not in the ground truth
    res = tmp_path / "results.json"
    res.write_text(json.dumps(dets))
    return Path(p["coco_instances"]), res, 3


def test_unknown_category_warning_names_file_and_count(
    unknown_category_files: tuple[Path, Path, int], tmp_path: Path
) -> None:
    gt, res, n = unknown_category_files
    run = tmp_path / "run"
    proc = _app(
        "evaluate",
        [
            "data=coco",
            f"data.gt={gt}",
            f"data.results={res}",
            "bootstrap.n=0",
            "output.plots=false",
            "output.progress=false",
            f"hydra.run.dir={run}",
        ],
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "WARNING" in ln and str(res.resolve()) in ln]
    assert len(lines) == 1 and f"left out {n} detections whose category is not in the ground truth" in lines[0]
    m = json.loads((run / "metrics.json").read_text())
    assert sum(f"left out {n} detections" in w for w in m["warnings"]) == 1
    assert m["detections"]["left_out_at_loading"]["unknown_category"] == n
    match = _app(
        "match",
        ["--gt", str(gt), "--results", str(res), "--format", "coco", "--out", str(tmp_path / "m.csv")],
        tmp_path,
    )
    assert match.returncode == 0, match.stderr[-2000:]
    assert re.search(rf"detcal-match: warning: {re.escape(str(res))}: left out {n} detections", match.stderr)


def _doc_names() -> set[str]:
    names: set[str] = set()
    for line in (REPO / "docs" / "metrics.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^#{2,4}\s+(.*)$", line)
        if m:
            names |= {t.strip("`* ").lower() for t in re.split(r"[,/]| and ", m.group(1))}
    return names


def test_docs_define_accuracy_localisation_and_headline_keys(tmp_path: Path) -> None:
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

    m = detcal.evaluate(
        DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)), workdir=tmp_path
    ).to_dict()
    written = {k for k in m["accuracy"] if not k.startswith("_")}
    assert {"AP", "AP50", "AP_small", "AR100", "AR_large"} <= written
    written |= {k for k, v in m["localisation"].items() if isinstance(v, dict) and "value" in v}
    coords = ("_tx", "_ty", "_tw", "_th", "_joint")
    written |= {next((k.removesuffix(c) for c in coords if k.endswith(c)), k) for k in m["headline"]}
    written |= {"headline", "worst-calibrated detections", "ap11", "ap40"}
    missing = sorted(n for n in written if n.lower() not in _doc_names())
    assert not missing, f"keys of metrics.json without a docs/metrics.md entry: {missing}"
