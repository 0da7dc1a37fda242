"""Nothing silently wrong: every run has a directory of its own, a directory in
use is refused, and outputs that are written again replace the old ones whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import detcal
from detcal.apps import _hydra
from detcal.core.errors import DetcalError
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.spec import BootstrapSpec, CalibrationSpec, DataSpec, EvaluationSpec, SplitSpec
from detcal.utils.fresh_dir import fresh_dir

QUIET = [
    "bootstrap.n=0",
    "output.plots=false",
    "output.print_summary=false",
    "output.progress=false",
    "output.detections_csv=false",
    "data.n_images=40",
]


def test_two_runs_started_together_get_two_directories(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "detcal.apps.evaluate", f"data.seed={s}", *QUIET],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in (0, 1)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    runs = sorted(tmp_path.glob("outputs/evaluate/*/*/metrics.json"))
    assert len(runs) == 2 and runs[0].parent != runs[1].parent
    by_seed = {json.loads(r.read_text())["config"]["data"]["seed"]: json.loads(r.read_text()) for r in runs}
    assert set(by_seed) == {0, 1}
    for seed, m in by_seed.items():  # each directory holds the numbers of its own seed
        ref = detcal.evaluate(
            DataSpec(n_images=40, seed=seed),
            spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)),
            workdir=tmp_path / f"ref{seed}",
        )
        assert m["headline"]["ece"]["value"] == pytest.approx(ref.headline["ece"]["value"], abs=1e-12)
        assert Path(m["run_dir"]) == Path(m["data"]["paths"]["root"]).parent
    assert by_seed[0]["headline"]["ece"]["value"] != by_seed[1]["headline"]["ece"]["value"]


def test_a_directory_in_use_is_refused(tmp_path: Path) -> None:
    _hydra._lock_run_dir(tmp_path / "run")
    code = (
        "import fcntl, sys; from pathlib import Path; from detcal.apps._hydra import _lock_run_dir; "
        f"_lock_run_dir(Path({str(tmp_path / 'run')!r}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "in use by another detcal run" in proc.stderr
    with pytest.raises(DetcalError, match="in use"):  # a second run within this process too
        _hydra._lock_run_dir(tmp_path / "run")


def test_calibrate_rerun_with_a_new_split_leaves_no_stale_files(tmp_path: Path) -> None:
    paths = write_synthetic(tmp_path / "set", n_images=60, seed=0, render=False)
    data = DataSpec(
        source="kitti",
        label_dir=str(paths["kitti_labels"]),
        results_dir=str(paths["kitti_results"]),
        sizes=str(paths["kitti_sizes"]),
    )
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    spec.regression.enabled = False
    written = []
    for seed in (0, 1):
        res = detcal.calibrate(
            data, spec, CalibrationSpec(split=SplitSpec(seed=seed)), regression=None, workdir=tmp_path / "run"
        )
        res.write(tmp_path / "run", plots=False)
        eval_ids = res.record["split"]["evaluation_image_ids"]
        frames = sorted(p.stem for p in (tmp_path / "run" / "calibrated" / "results").glob("*.txt"))
        assert frames and set(frames) <= {f"{int(i):06d}" for i in eval_ids}
        written.append(frames)
    assert written[0] != written[1]
    assert not [p for p in (tmp_path / "run").iterdir() if p.name.startswith(".calibrated")]


def test_a_smaller_synthetic_set_replaces_a_larger_one_whole(tmp_path: Path) -> None:
    write_synthetic(tmp_path / "s", n_images=30, seed=0, render=False)
    p = write_synthetic(tmp_path / "s", n_images=10, seed=0, render=False)
    assert len(list(Path(p["kitti_labels"]).glob("*.txt"))) == 10
    assert len(list(Path(p["kitti_results"]).glob("*.txt"))) <= 10
    ds = detcal.evaluate(
        DataSpec(
            source="kitti",
            label_dir=str(p["kitti_labels"]),
            results_dir=str(p["kitti_results"]),
            sizes=str(p["kitti_sizes"]),
        ),
        spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)),
    )
    assert ds.record["data"]["counts"]["images"] == 10


def test_fresh_dir_keeps_the_old_content_when_the_block_fails(tmp_path: Path) -> None:
    final = tmp_path / "d"
    final.mkdir()
    (final / "old.txt").write_text("old")
    (tmp_path / ".d.killed").mkdir()  # a temporary left by a killed run
    with pytest.raises(RuntimeError):
        with fresh_dir(final) as tmp:
            (tmp / "new.txt").write_text("new")
            raise RuntimeError("boom")
    assert [p.name for p in final.iterdir()] == ["old.txt"]
    assert not (tmp_path / ".d.killed").exists()
    with fresh_dir(final) as tmp:
        (tmp / "new.txt").write_text("new")
    assert [p.name for p in final.iterdir()] == ["new.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]
    assert oct(final.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_written_files_honour_the_umask(tmp_path: Path) -> None:
    from detcal.utils.io import write_text

    old = os.umask(0o022)
    try:
        write_text(tmp_path / "a.txt", "x")
        assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        write_text(tmp_path / "b.txt", "x")
        assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
