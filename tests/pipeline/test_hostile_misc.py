"""The smaller cases of issue 33: COCO's -1 as null with a reason, a note on intervals from few images,
one-line errors for operating-system failures and oversized D-ECE grids, non-checkpoint pickles refused,
and a config's _target_ checked before it is called."""

from __future__ import annotations

import errno
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.pipeline.spec import BootstrapSpec, ConfigError, DataSpec, DeceBinningSpec, EvaluationSpec


def _crowd_only() -> tuple[Dataset, Detections]:
    ds = Dataset(
        images=Images(id=np.array([1, 2]), width=np.array([100.0, 100.0]), height=np.array([100.0, 100.0])),
        gt=GroundTruth(
            image_id=np.array([1]), box=np.array([[0, 0, 50, 50.0]]), category=np.array([1]), iscrowd=np.array([True])
        ),
        categories={1: "a"},
    )
    dets = Detections(
        image_id=np.array([1, 2]),
        box=np.array([[0, 0, 50, 50.0], [5, 5, 20, 20]]),
        score=np.array([0.9, 0.4]),
        category=np.array([1, 1]),
    )
    return ds, dets


def test_cocos_minus_one_is_null_with_a_reason_in_metrics_json_and_console(tmp_path: Path) -> None:
    from detcal.reports.console import console_summary

    ds, dets = _crowd_only()
    res = detcal.evaluate(ds, dets, EvaluationSpec(bootstrap=BootstrapSpec(n=0)))
    acc = res.to_dict()["accuracy"]
    for k in ("AP", "AP50", "AR100", "AP_small"):
        assert acc[k]["value"] is None, k
        assert "no non-crowd ground-truth box" in acc[k]["skipped"]["value"]
    assert "'small' area range" in acc["AP_small"]["skipped"]["value"]
    text = console_summary(res.to_dict(), tmp_path)
    assert "-1" not in text.split("accuracy:")[1].splitlines()[0]
    assert "AP is null: undefined: no non-crowd ground-truth box" in text


def test_intervals_from_few_images_carry_a_note(tmp_path: Path) -> None:
    res = detcal.evaluate(
        DataSpec(n_images=1), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=5)), workdir=tmp_path / "a"
    )
    w = res.to_dict()["warnings"]
    assert any("intervals from 1 image (fewer than 30)" in x and "zero width" in x for x in w)
    many = detcal.evaluate(
        DataSpec(n_images=40), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=5)), workdir=tmp_path / "b"
    )
    assert not any("intervals from" in x for x in many.to_dict()["warnings"])


@pytest.mark.parametrize(
    ("err", "words"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/runs/r/metrics.json"),
            "cannot write /runs/r/metrics.json: no space left",
        ),
        (PermissionError(errno.EACCES, "Permission denied", "/runs/r"), "cannot write /runs/r: Permission denied"),
        (OSError(errno.EROFS, "Read-only file system", "/mnt/ro/x"), "read-only file system"),
    ],
)
def test_operating_system_failures_are_one_line_user_errors(err: OSError, words: str) -> None:
    from detcal.apps._hydra import user_error_message

    try:
        raise RuntimeError("while writing") from err
    except RuntimeError as exc:
        assert user_error_message(exc) == words or words in (user_error_message(exc) or "")
    assert user_error_message(OSError(errno.EIO, "I/O error")) is None  # not something the user can fix: a traceback


def test_an_occupied_or_unwritable_run_directory_ends_with_one_line_and_status_2(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    for run, words in (
        (tmp_path / "afile", "is a file, not a directory"),
        (tmp_path / "afile" / "sub", "cannot create"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "detcal.apps.evaluate", "data.n_images=5", f"hydra.run.dir={run}"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_huge_dece_grid_is_refused_before_it_is_allocated(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ConfigError, match=r"100 x 100 x 100 x 100 x 100 = 10,000,000,000 cells needs about [\d,.]+ GiB"
    ):
        DeceBinningSpec(bins=100)
    import detcal.utils.memory as memory
    from detcal.binning.cells import cell_stats

    monkeypatch.setattr(memory, "available_bytes", lambda: 1_000)  # a tiny machine: the check runs first
    rng = np.random.default_rng(0)
    with pytest.raises(DetcalInputError, match="more than the 0.0 GiB available"):
        cell_stats(rng.uniform(size=10), rng.uniform(size=10) < 0.5, None, bins=500)


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # what a hostile pickle does on load
        return (Path.touch, (self.marker,))


def test_a_non_checkpoint_pickle_is_refused_and_nothing_in_it_runs(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from detcal.models.backbones import build_backbone, load_weights_file

    marker = tmp_path / "ran"
    evil, plain = tmp_path / "evil.pkl", tmp_path / "plain.pkl"
    evil.write_bytes(pickle.dumps(_Payload(marker)))
    plain.write_bytes(pickle.dumps({"a": [1, 2]}))
    for f in (evil, plain):
        with pytest.raises(DetcalInputError, match="not a weights-only torch checkpoint") as e:
            load_weights_file(f)
        assert str(f) in str(e.value) and "\n" not in str(e.value)
        with pytest.raises(DetcalInputError):
            build_backbone("tiny", weights=f)
    assert not marker.exists()


def test_a_target_that_is_not_a_calibrator_is_refused_before_it_is_called(tmp_path: Path) -> None:
    from detcal.apps._hydra import target_class
    from detcal.calibration.confidence import TemperatureScaling

    assert (
        target_class({"_target_": "detcal.calibration.confidence.TemperatureScaling"}, "calibrator")
        is TemperatureScaling
    )
    for target, words in (
        ("builtins.open", "is not a calibrator"),
        ("os.system", "is not a calibrator"),
        ("no.such.Thing", "is not a calibrator class"),
        ("detcal.core.types.Images", "is not a calibrator"),
    ):
        with pytest.raises(ConfigError, match=words):
            target_class({"_target_": target}, "calibrator")
    with pytest.raises(ConfigError, match="_partial_"):
        target_class({"_target_": "detcal.calibration.confidence.TemperatureScaling", "_partial_": True}, "calibrator")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "detcal.apps.calibrate",
            "data.n_images=10",
            "calibrator._target_=builtins.open",
            f"+calibrator.file={victim}",
            "+calibrator.mode=w",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "'builtins.open' is not a calibrator" in proc.stderr
    assert victim.read_text() == "keep"


def test_calibrate_intervals_from_few_images_carry_a_note(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """detcal-calibrate's before/after intervals resample the evaluation part's images: the same note."""
    import logging

    from detcal.pipeline.spec import CalibrationSpec

    with caplog.at_level(logging.WARNING, logger="detcal"):
        detcal.calibrate(
            DataSpec(n_images=12),
            EvaluationSpec(bootstrap=BootstrapSpec(n=5)),
            CalibrationSpec(),
            confidence="temperature",
            regression=None,
            workdir=tmp_path / "a",
        )
    assert any("fewer than 30" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
