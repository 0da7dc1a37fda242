"""A run directory holds one run (issue 33): a used directory is refused unless overwrite=true, a refused,
failed or killed run leaves the earlier run as it was, temporaries are removed, and the lock is never
written through a symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from detcal.apps import _run_dir
from detcal.core.errors import DetcalError

QUIET = [
    "data.n_images=20",
    "bootstrap.n=0",
    "output.plots=false",
    "output.print_summary=false",
    "output.progress=false",
]


def _evaluate(run: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "DETCAL_DEBUG")}
    return subprocess.run(
        [sys.executable, "-m", "detcal.apps.evaluate", *QUIET, f"hydra.run.dir={run}", *extra],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=run.parent,
        env=env,
    )


def _snapshot(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".detcal.lock"
    }


def test_a_used_directory_is_refused_and_overwrite_replaces_the_run_whole(tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert _evaluate(run).returncode == 0
    m = json.loads((run / "metrics.json").read_text())
    assert {".hydra/config.yaml", ".hydra/overrides.yaml", "evaluate.log", "synthetic/"} <= set(m["run_files"])
    (run / "stale.png").write_bytes(b"an earlier run's file")
    (run / ".detections.csv.k1ll3d.tmp").write_bytes(b"x" * 4096)  # what a kill during the CSV write leaves
    before = _snapshot(run)
    refused = _evaluate(run, "data.seed=5")
    assert refused.returncode == 2
    assert "already holds files" in refused.stderr and "overwrite=true" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert _snapshot(run) == before  # .hydra/overrides.yaml, the log and the outputs untouched
    failed = _evaluate(run, "data.seed=5", "bootstrap.n=-1", "overwrite=true")  # fails after Hydra started
    assert failed.returncode == 2 and "bootstrap.n" in failed.stderr
    assert _snapshot(run) == {k: v for k, v in before.items() if not k.endswith(".tmp")}  # temporaries removed
    ok = _evaluate(run, "data.seed=5", "overwrite=true")
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert not (run / "stale.png").exists() and "data.seed=5" in (run / ".hydra" / "overrides.yaml").read_text()
    assert not list(run.rglob("*.tmp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # nothing left aside


def test_a_folder_of_other_files_is_not_replaced_even_with_overwrite(tmp_path: Path) -> None:
    run = tmp_path / "mine"
    run.mkdir()
    (run / "thesis.tex").write_text("mine")
    with pytest.raises(DetcalError, match="not a detcal run"):
        _run_dir.claim(run, overwrite=True, resumable=False)
    assert [p.name for p in run.iterdir()] == ["thesis.tex"]


def test_a_directory_held_by_a_live_run_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    run = tmp_path / "run"
    aside = _run_dir.claim(run, overwrite=False, resumable=False)
    try:
        (run / "metrics.json").write_text("{}")
        proc = _evaluate(run, "overwrite=true")
        assert proc.returncode == 2 and "in use by another detcal run" in proc.stderr
        assert sorted(p.name for p in run.iterdir()) == [".detcal.lock", "metrics.json"]  # no .hydra, no log
    finally:
        _run_dir.finish(run, aside, ok=True)


def test_the_lock_is_never_written_through_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    (run / ".detcal.lock").symlink_to(target)
    with pytest.raises(DetcalError, match="symbolic link"):
        _run_dir.claim(run, overwrite=True, resumable=False)
    assert target.read_text() == "keep me"
    link = tmp_path / "linked"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(DetcalError, match="is a symbolic link"):
        _run_dir.claim(link, overwrite=False, resumable=False)


def _complete_run(d: Path, tag: str) -> None:
    (d / ".hydra").mkdir(parents=True)
    (d / ".hydra" / "overrides.yaml").write_text(f"- {tag}\n")
    (d / "evaluate.log").write_text(f"{tag} log\n")
    (d / "metrics.json").write_text(json.dumps({"tag": tag}))


def test_a_killed_overwrite_puts_the_earlier_run_back_on_the_next_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _complete_run(run, "old")
    before = _snapshot(run)
    aside = _run_dir.claim(run, overwrite=True, resumable=False)  # the earlier run moved aside ...
    assert aside is not None and aside.name.startswith(".run~previous-")
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("- new\n")
    (run / ".detections.csv.abc123.tmp").write_bytes(b"x" * 1000)  # ... and the new one is killed mid-write
    _run_dir._release(run)  # what the operating system does when the process dies
    with pytest.raises(DetcalError, match="already holds files"):  # the next run puts it back, then refuses
        _run_dir.claim(run, overwrite=False, resumable=False)
    assert _snapshot(run) == before and not aside.exists()


def test_a_failed_overwrite_puts_the_earlier_run_back(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _complete_run(run, "old")
    before = _snapshot(run)
    aside = _run_dir.claim(run, overwrite=True, resumable=False)
    (run / "metrics.json").write_text("{}")
    _run_dir.finish(run, aside, ok=False)
    assert _snapshot(run) == before and sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_resumed_run_keeps_its_files_and_removes_temporaries(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _complete_run(run, "old")
    (run / "stage1.pt").write_bytes(b"checkpoint")
    (run / ".metrics.json.x1y2.tmp").write_text("half")
    before = {k: v for k, v in _snapshot(run).items() if not k.endswith(".tmp")}
    aside = _run_dir.claim(run, overwrite=False, resumable=True)
    assert not (run / ".metrics.json.x1y2.tmp").exists() and (run / "stage1.pt").is_file()
    (run / ".hydra" / "overrides.yaml").write_text("- refused\n")
    with open(run / "evaluate.log", "a") as fh:
        fh.write("run failed: ...\n")
    _run_dir.finish(run, aside, ok=False)  # a refused resume: .hydra and the log as they were
    assert _snapshot(run) == before
    (run / "evaluate.log").unlink()
    (run / "evaluate.log").symlink_to(tmp_path / "elsewhere.txt")
    with pytest.raises(DetcalError, match="symbolic link"):
        _run_dir.claim(run, overwrite=False, resumable=True)


def test_overwrite_is_taken_off_the_command_line() -> None:
    argv = ["detcal-evaluate", "data=coco", "overwrite=true"]
    assert _run_dir.pop_overwrite(argv) is True and argv == ["detcal-evaluate", "data=coco"]
    assert _run_dir.pop_overwrite(argv) is False
