"""detcal-compare and detcal-study write their tables, figures and strict metrics.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from detcal.reports import results_json


def _run(module: str, args: list[str], out: Path) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", f"detcal.apps.{module}", *args, f"hydra.run.dir={out}", "output.print_summary=false"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text(), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    jsonschema.validate(m, results_json.schema())
    return m


def test_compare_two_bundled_detectors(tmp_path: Path) -> None:
    m = _run(
        "compare",
        ["data.bundle=coco_mini79", "detectors=[ssd-resnet-50-v1,rfcn-resnet-101]", "bootstrap.n=30"],
        tmp_path,
    )
    assert m["command"] == "detcal-compare" and m["detectors"] == ["ssd-resnet-50-v1", "rfcn-resnet-101"]
    assert len(m["table"]) == 2 and {d["detector"] for d in m["differences"]} == {"rfcn-resnet-101"}
    assert {"ece", "dece", "AP"} <= {d["metric"] for d in m["differences"]}
    text = (tmp_path / "summary.md").read_text()
    assert "rfcn-resnet-101" in text and (tmp_path / "reliability_overlay.png").is_file()


def test_unknown_detector_is_a_config_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "detcal.apps.compare", "detectors=[nope]", f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "detectors" in proc.stderr and "Traceback" not in proc.stderr


def test_study_lakara_retention(tmp_path: Path) -> None:
    m = _run("study", ["study=lakara_retention", "n_images=80"], tmp_path)
    assert m["study"] == "lakara_retention" and m["table"]
    assert (tmp_path / "lakara_retention.png").is_file() and "Lakara" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_study_kueppers2020_one_detector(tmp_path: Path) -> None:
    m = _run("study", ["study=kueppers2020", "detectors=[ssd-resnet-50-v1]", "n_splits=2"], tmp_path)
    assert m["study"] == "kueppers2020" and m["rows"] and (tmp_path / "kueppers2020.png").is_file()
