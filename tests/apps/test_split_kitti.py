"""Tests of the KITTI recalibration/validation split (detcal.data.kitti.split_frames, detcal-split-kitti)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from detcal.apps import split_kitti
from detcal.core.errors import DetcalInputError
from detcal.data.kitti import split_frames


@pytest.fixture()
def label_dir(tmp_path: Path) -> Path:
    """A miniature KITTI label_2: 75 frames (000000..000074), one Car each."""
    d = tmp_path / "label_2"
    d.mkdir()
    for i in range(75):
        (d / f"{i:06d}.txt").write_text("Car 0.00 0 0.00 1.00 1.00 50.00 50.00 1.50 1.60 3.90 1.00 1.50 20.00 0.00\n")
    return d


def test_split_frames_properties() -> None:
    frames = [f"{i:06d}" for i in range(100)][::-1]  # input order must not matter
    recal, val = split_frames(frames, 20, seed=3)
    assert len(val) == 20 and len(recal) == 80
    assert set(recal).isdisjoint(val)
    assert set(recal) | set(val) == set(frames)
    assert recal == sorted(recal) and val == sorted(val)
    assert split_frames(sorted(frames), 20, seed=3) == (recal, val)  # deterministic by seed
    assert split_frames(frames, 20, seed=4)[1] != val  # another seed, another split
    # a fraction: round(0.25 * 100) = 25
    assert len(split_frames(frames, 0.25, seed=0)[1]) == 25
    # ints are named like KITTI frames
    assert split_frames([3, 1, 2], 0, seed=0) == (["000001", "000002", "000003"], [])


def test_levi_sized_split() -> None:
    # 7,481 labelled KITTI training frames, 1,500 for validation -> 5,981 for recalibration
    frames = [f"{i:06d}" for i in range(7481)]
    recal, val = split_frames(frames, 1500, seed=0)
    assert (len(recal), len(val)) == (5981, 1500)


@pytest.mark.parametrize("bad", [-1, 101, 1.5, -0.2])
def test_split_frames_rejects_bad_sizes(bad) -> None:
    with pytest.raises(DetcalInputError) as info:
        split_frames([f"{i:06d}" for i in range(100)], bad, seed=0)
    assert info.value.field == "val_size"


def test_split_frames_rejects_duplicates() -> None:
    with pytest.raises(DetcalInputError):
        split_frames(["000001", "000001"], 1, seed=0)


def test_script_writes_sorted_disjoint_complete_lists(label_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "splits"
    assert (
        split_kitti.main(["--label-dir", str(label_dir), "--out-dir", str(out), "--val-size", "15", "--seed", "7"]) == 0
    )
    recal = (out / "recal.txt").read_text().splitlines()
    val = (out / "val.txt").read_text().splitlines()
    assert (len(recal), len(val)) == (60, 15)
    assert set(recal).isdisjoint(val) and set(recal) | set(val) == {f"{i:06d}" for i in range(75)}
    assert recal == sorted(recal) and val == sorted(val)
    assert "recal: 60" in capsys.readouterr().out
    # same seed -> same files; another seed -> another split
    out2 = tmp_path / "again"
    split_kitti.main(["--label-dir", str(label_dir), "--out-dir", str(out2), "--val-size", "15", "--seed", "7"])
    assert (out2 / "val.txt").read_bytes() == (out / "val.txt").read_bytes()
    out3 = tmp_path / "other"
    split_kitti.main(["--label-dir", str(label_dir), "--out-dir", str(out3), "--val-size", "0.2", "--seed", "8"])
    assert (out3 / "val.txt").read_text().splitlines() != val and len((out3 / "val.txt").read_text().splitlines()) == 15


def test_script_runs_as_a_program(label_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "s"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.split_kitti",
            "--label-dir",
            str(label_dir),
            "--out-dir",
            str(out),
            "--val-size",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert len((out / "val.txt").read_text().splitlines()) == 5
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.split_kitti",
            "--label-dir",
            str(tmp_path / "missing"),
            "--out-dir",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_split_file_feeds_the_loader(label_dir: Path, tmp_path: Path) -> None:
    from detcal.data.kitti import load_kitti_labels

    out = tmp_path / "splits"
    split_kitti.main(["--label-dir", str(label_dir), "--out-dir", str(out), "--val-size", "10"])
    val = load_kitti_labels(label_dir, image_ids=out / "val.txt")
    recal = load_kitti_labels(label_dir, image_ids=out / "recal.txt")
    assert len(val.images) == 10 and len(recal.images) == 65
    assert set(val.images.id.tolist()).isdisjoint(recal.images.id.tolist())


def test_split_files_are_accepted_by_every_command(tmp_path: Path) -> None:
    """The recal.txt / val.txt of detcal-split-kitti restrict detcal-evaluate, -calibrate and the API."""
    import json
    import subprocess
    import sys

    import detcal
    from detcal.data.synthetic import write_synthetic
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

    p = write_synthetic(tmp_path / "s", n_images=40, seed=0, render=False)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.split_kitti",
            "--label-dir",
            str(p["kitti_labels"]),
            "--out-dir",
            str(tmp_path / "splits"),
            "--val-size",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    val = tmp_path / "splits" / "val.txt"
    frames = [ln for ln in val.read_text().split() if ln]
    assert len(frames) == 10
    data = [
        "data=kitti",
        f"data.label_dir={p['kitti_labels']}",
        f"data.results_dir={p['kitti_results']}",
        f"data.sizes={p['kitti_sizes']}",
        f"data.image_ids={val}",
    ]
    for app in ("evaluate", "calibrate"):
        out = tmp_path / app
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                f"detcal.apps.{app}",
                *data,
                "bootstrap.n=0",
                "output.plots=false",
                "output.print_summary=false",
                f"hydra.run.dir={out}",
                *(["~calibrator@regression_calibrator"] if app == "calibrate" else []),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (app, proc.stderr[-2000:])
        m = json.loads((out / "metrics.json").read_text())
        assert m["data"]["image_ids"]["n"] == 10 if app == "evaluate" else True
    res = detcal.evaluate(
        DataSpec(
            source="kitti",
            label_dir=str(p["kitti_labels"]),
            results_dir=str(p["kitti_results"]),
            sizes=str(p["kitti_sizes"]),
            image_ids=str(val),
        ),
        spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)),
    )
    assert res.record["data"]["counts"]["images"] == 10


def test_console_script_is_declared() -> None:
    import tomllib

    scripts = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["detcal-split-kitti"] == "detcal.apps.split_kitti:main"
