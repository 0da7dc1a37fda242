"""Every detcal command line of README.md and docs/*.md runs word for word.

The lines are read from the fenced ``bash`` blocks (continuations joined, comments cut, the
``python3 -m venv .venv && .venv/bin/pip install ... &&`` prefix of a fresh clone left out: the
test runs inside the installed environment). Each runs in a fresh directory laid out as the text
says: ``instances.json`` / ``results.json`` / ``instances_val2017.json`` (a generated COCO set),
``data/kitti/training/label_2`` + ``image_2`` and ``my_results`` (a generated KITTI set), ``examples/`` (the
YOLO and VOC examples of the repository); the
bundled detectors come with the package. Commands that need what a test cannot have (a GPU and the
real KITTI / ImageNet weights) are listed in ``NEEDS_REAL_DATA`` with the reason; the ones that take
minutes run in the slow suite. ``test_every_command_is_accounted_for`` keeps the lists complete.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APPS = {
    "detcal-evaluate": "evaluate",
    "detcal-calibrate": "calibrate",
    "detcal-gather": "gather",
    "detcal-match": "match",
    "detcal-compare": "compare",
    "detcal-study": "study",
    "detcal-main": "main",
    "detcal-levi-synthetic": "levi_synthetic",
    "detcal-split-kitti": "split_kitti",
}
_PREFIX = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install [^&]+&& ")

NEEDS_REAL_DATA = {
    "detcal-main experiment=levi2019_kitti model.backbone_weights=/path/to/resnet101.pth dry_run.enabled=true": "the dry "
    "run of the real-data experiment reads the user's KITTI images and weights and the experiment trains on CUDA; the "
    "dry run itself runs on the miniature KITTI data in tests/training/test_main_job_robust.py",
    ".venv/bin/detcal-main experiment=levi2019_kitti model.backbone_weights=data/weights/resnet101.pth": "COCO -> KITTI training on a GPU with the real KITTI images and ImageNet weights",
}
SHORTENED = {
    "detcal-study experiment=kueppers2020_coco": (
        "n_splits=2",
        "the paper's protocol repeats every fit over 20 seeded splits (tens of minutes on 2 cores); the test runs "
        "the same command over 2 of them",
    ),
}
"""Commands the test runs with one override added, and why: the same code path, a CI-sized workload."""

SLOW = (
    "detcal-main",
    "detcal-levi-synthetic",
    "detcal-study",
    "detcal-compare",
    "data=coco_tfzoo",
    " -m ",
    "detcal-gather",
)
"""Substrings of the lines that take half a minute or more (5,000 bundled images, training, sweeps)."""


def _bare(line: str) -> str:
    """The command without the ``.venv/bin/`` of a fresh clone: the same command either way, run once."""
    return line.removeprefix(".venv/bin/")


def doc_commands() -> list[tuple[str, str]]:
    """(file, command line) of every detcal command in README.md and docs/*.md, in order, without repeats."""
    out: list[tuple[str, str]] = []
    for f in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```bash\n(.*?)```", f.read_text(encoding="utf-8"), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+", " ", line.split(" #")[0]).strip()
                line = _PREFIX.sub("", line)
                if re.match(r"^(\.venv/bin/)?detcal-[a-z-]+\b", line) and _bare(line) not in [_bare(c) for _, c in out]:
                    out.append((f.name, line))
    return out


COMMANDS = doc_commands()


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the documents name, generated once (each test copies them)."""
    from detcal.data.synthetic import write_synthetic

    root = tmp_path_factory.mktemp("docs_layout")
    p = write_synthetic(root / "_gen", n_images=60, seed=0, render=True, kitti_images=True)
    for name in ("instances.json", "instances_val2017.json"):
        shutil.copy(p["coco_instances"], root / name)
    shutil.copy(p["coco_results"], root / "results.json")
    train = root / "data" / "kitti" / "training"
    train.mkdir(parents=True)
    shutil.copytree(p["kitti_labels"], train / "label_2")
    shutil.copytree(p["kitti_images"], train / "image_2")
    shutil.copytree(p["kitti_results"], root / "my_results")
    shutil.copytree(REPO / "examples", root / "examples")  # the YOLO and VOC examples of a fresh clone
    shutil.rmtree(root / "_gen")
    return root


def _run(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    proc = None
    for cmd in line.split("&&"):
        args = shlex.split(cmd)
        argv = [sys.executable, "-m", f"detcal.apps.{APPS[Path(args[0]).name]}", *args[1:]]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=1800, env=env)
        if proc.returncode:
            break
    assert proc is not None
    return proc


def _param(f: str, line: str) -> object:
    slow = any(s in line for s in SLOW)
    return pytest.param(line, id=f"{f}:{line[:70]}", marks=(pytest.mark.slow,) if slow else ())


def test_every_command_is_accounted_for() -> None:
    lines = [c for _, c in COMMANDS]
    assert len(lines) >= 20, lines
    assert set(NEEDS_REAL_DATA) <= set(lines), "NEEDS_REAL_DATA names a line no document has any more"
    assert set(SHORTENED) <= {_bare(c) for c in lines}, "SHORTENED names a line no document has any more"
    assert all(Path(shlex.split(c.split("&&")[0])[0]).name in APPS for c in lines), lines


@pytest.mark.parametrize("line", [_param(f, c) for f, c in COMMANDS if c not in NEEDS_REAL_DATA])
def test_doc_command_runs_word_for_word(line: str, layout: Path, tmp_path: Path) -> None:
    if "detcal-gather multirun/calibrate" == line.removeprefix(".venv/bin/"):
        first = _run(".venv/bin/detcal-calibrate -m calibrator=temperature,platt", tmp_path)  # a sweep to gather
        assert first.returncode == 0, first.stderr[-2000:]
    else:
        shutil.copytree(layout, tmp_path, dirs_exist_ok=True)
    extra = SHORTENED.get(_bare(line))
    proc = _run(f"{line} {extra[0]}" if extra else line, tmp_path)
    assert proc.returncode == 0, (line, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr
    last = shlex.split(line.split("&&")[-1])[0]
    if not last.endswith(
        ("detcal-gather", "detcal-match", "detcal-levi-synthetic", "detcal-main", "detcal-split-kitti")
    ):
        assert "run directory: " in proc.stdout, proc.stdout[-1500:]
