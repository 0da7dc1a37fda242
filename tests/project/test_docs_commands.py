"""The README's KITTI example and the tutorial's commands run word for word
(on generated data laid out where the text says it is), and the docs exist
without pointing outside the repository."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from detcal.data.synthetic import write_synthetic

REPO = Path(__file__).resolve().parents[2]
APPS = {
    "detcal-evaluate": "evaluate",
    "detcal-calibrate": "calibrate",
    "detcal-gather": "gather",
    "detcal-match": "match",
}


def _commands(text: str, program: str) -> list[str]:
    """Shell command lines of ``program`` in the fenced bash blocks of ``text`` (continuations joined)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith(f".venv/bin/{program}"):
                out.append(line)
    return out


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    parts = []
    for cmd in line.split("&&"):
        args = shlex.split(cmd)
        prog = Path(args[0]).name
        parts.append([sys.executable, "-m", f"detcal.apps.{APPS[prog]}", *args[1:]])
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    proc = None
    for argv in parts:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
        if proc.returncode:
            break
    assert proc is not None
    return proc


def test_readme_kitti_example_runs_as_written(tmp_path: Path) -> None:
    lines = [ln for ln in _commands((REPO / "README.md").read_text(), "detcal-evaluate") if "data=kitti" in ln]
    assert lines, "the README has a KITTI example"
    p = write_synthetic(tmp_path / "gen", n_images=40, seed=0, render=True, kitti_images=True)
    train = tmp_path / "data" / "kitti" / "training"
    train.mkdir(parents=True)
    shutil.copytree(p["kitti_labels"], train / "label_2")
    shutil.copytree(p["kitti_images"], train / "image_2")  # sizes come from image_2 beside label_2
    shutil.copytree(p["kitti_results"], tmp_path / "my_results")
    proc = _run(lines[0], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list(tmp_path.glob("outputs/evaluate/*/*/metrics.json"))
    assert len(runs) == 1
    m = json.loads(runs[0].read_text())
    assert m["matching"]["iou_thresholds"] == "kitti" or m["spec"]["matching"]["iou_thresholds"] == "kitti"
    assert "KITTI devkit rules" in m["variants"]["matching"]


@pytest.mark.slow
def test_tutorial_commands_run_word_for_word(tmp_path: Path) -> None:
    text = (REPO / "docs" / "tutorial.md").read_text()
    p = write_synthetic(tmp_path / "gen", n_images=80, seed=0, render=False)
    shutil.copy(p["coco_instances"], tmp_path / "instances.json")
    shutil.copy(p["coco_results"], tmp_path / "results.json")
    lines = [ln for prog in ("detcal-evaluate", "detcal-calibrate", "detcal-gather") for ln in _commands(text, prog)]
    assert len(lines) >= 4
    for line in sorted(lines, key=lambda ln: "detcal-gather" in ln):  # gather after the sweep it reads
        proc = _run(line, tmp_path)
        assert proc.returncode == 0, (line, proc.stderr[-3000:])
    assert (tmp_path / "multirun" / "calibrate").is_dir()
    table = next((tmp_path / "multirun" / "calibrate").rglob("comparison.md")).read_text()
    assert "calibrator=position_logistic" in table and "calibrator=isotonic" in table


def test_docs_exist_and_stay_inside_the_repository() -> None:
    docs = REPO / "docs"
    for name in ("api.md", "configuration.md", "tutorial.md"):
        assert (docs / name).is_file(), name
    offenders = []
    for f in [
        *REPO.glob("*.md"),
        *docs.rglob("*.md"),
        *(REPO / "detcal").rglob("*.py"),
        *(REPO / "configs").rglob("*.yaml"),
        *(REPO / "tests").rglob("*.py"),
        *(REPO / "scripts").rglob("*.py"),
        *(REPO / "benchmarks").rglob("*.py"),
        *(REPO / "data").rglob("*.md"),
    ]:
        text = f.read_text(encoding="utf-8", errors="replace")
        if f.name == Path(__file__).name:
            continue
        if re.search(r"\.\./shared|/work/shared|METRICS\.md|REFERENCES\.md|STYLE\.md", text):
            offenders.append(str(f.relative_to(REPO)))
    assert not offenders, f"files pointing outside the repository: {offenders}"
