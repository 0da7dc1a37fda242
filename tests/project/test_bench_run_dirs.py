"""The benchmarks that run ``detcal-evaluate`` several times give each run a run directory of its own.

A run directory holds one run: ``detcal-evaluate`` refuses one that already holds a run's files. Both
scripts below used to pass the same ``hydra.run.dir`` to every run (bench_evaluate.py within one
invocation, bench_scale.py from one invocation to the next, its files being cached), so their second run
failed. Each is run here as a user runs it, on a small set, twice over.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.scripts import REPO


def _script(relative: str, *args: str, cwd: Path) -> str:
    proc = subprocess.run([sys.executable, str(REPO / relative), *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout


def test_bench_evaluate_repeats_each_command(tmp_path: Path) -> None:
    out = _script("benchmarks/bench_evaluate.py", "--images", "12", "--dets-per-image", "4", "--repeat", "2",
                  "--workers", "0", cwd=tmp_path)  # fmt: skip
    assert re.search(r"detcal-evaluate, calibration only\s+\d+\.\d+ s", out), out
    assert re.search(r"detcal-evaluate, \+ COCO AP/AR, LRP, LaECE\s+\d+\.\d+ s", out), out
    assert "'load'" in out  # the stages read back from each command's own metrics.json


@pytest.mark.slow
def test_bench_scale_runs_again_on_its_cached_files(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for _ in range(2):  # the second invocation reuses the cached files, and must not reuse a run directory
        out = _script("benchmarks/bench_scale.py", "--sizes", "0.002", "--cache", str(cache), cwd=tmp_path)
        assert re.search(r"\| 2,0\d\d \| 0 MB \| \d+\.\d s \| \d+ MB \|", out), out
    assert not list(cache.glob("run_*")), "the run directories are removed once read"
