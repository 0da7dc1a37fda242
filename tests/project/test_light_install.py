"""Evaluation and recalibration need no torch: a quick check with torch made
unimportable, and (slow) a fresh virtual environment with ``pip install .``
and no extra running detcal-evaluate and detcal-calibrate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCK = (
    "import sys, runpy\n"
    "class _NoTorch:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('torch', 'torchvision'):\n"
    "            raise ImportError('torch is not installed (blocked by the test)')\n"
    "sys.meta_path.insert(0, _NoTorch())\n"
)
ARGS = ["data.n_images=40", "bootstrap.n=5", "output.plots=true", "output.print_summary=false"]


@pytest.mark.parametrize("app", ["evaluate", "calibrate", "match", "gather"])
def test_apps_run_with_torch_unimportable(app: str, tmp_path: Path) -> None:
    if app in ("match", "gather"):
        code = BLOCK + f"import detcal.apps.{app}, detcal.metrics, detcal.calibration, detcal.pipeline.evaluation\n"
        argv: list[str] = []
    else:
        code = BLOCK + (
            f"sys.argv = ['detcal-{app}'] + sys.argv[1:]\nrunpy.run_module('detcal.apps.{app}', run_name='__main__')\n"
        )
        argv = [*ARGS, f"hydra.run.dir={tmp_path / 'run'}"]
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    if argv:
        assert (tmp_path / "run" / "metrics.json").is_file()


def test_import_detcal_metrics_is_quick_and_light() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import detcal.metrics, detcal.matching.engine; "
        "print(time.perf_counter() - t); "
        "bad = [m for m in ('torch', 'hydra', 'scipy.stats', 'matplotlib') if m in sys.modules]; "
        "assert not bad, bad"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_fresh_venv_without_extras(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = venv / "bin" / "pip"
    proc = subprocess.run([str(pip), "install", "-q", str(REPO)], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    py = venv / "bin" / "python"
    assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DETCAL_CONFIG_DIR")}
    for app in ("evaluate", "calibrate"):
        run = tmp_path / app
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(venv / "bin" / f"detcal-{app}"), *ARGS, f"hydra.run.dir={run}"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert (run / "metrics.json").is_file(), time.perf_counter() - t0
