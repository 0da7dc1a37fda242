"""Start-up of detcal-evaluate imports no scipy and no matplotlib (issue 29).

matplotlib comes in with the PNG figures: a run with figures off, or a user
importing the package, does not pay for it. The bootstrap's replicate product
loads scipy's compiled product kernels alone (no scipy.sparse) and its BCa
quantiles need no scipy.special.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_evaluate_start_up_imports_no_scipy_or_matplotlib() -> None:
    code = (
        "import sys, detcal, detcal.metrics, detcal.apps.evaluate, detcal.pipeline.evaluation, "
        "detcal.pipeline.accuracy_block, detcal.pipeline.oce_block, detcal.pipeline.confidence_block; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_lean_evaluate_run_leaves_the_calibrators_unimported(tmp_path: Path) -> None:
    """The whole lean command (intervals, figures, CSV, report off): no matplotlib, torch, nor the calibration
    package with its scipy.optimize (0.4 s); ``pipeline.registry`` is read by every command for its configs."""
    code = (
        "import atexit, runpy, sys; "
        "atexit.register(lambda: print(sorted(m for m in ('scipy.optimize', 'scipy.sparse', 'matplotlib', 'torch', "
        "'detcal.calibration') if m in sys.modules))); "
        "sys.argv = ['detcal-evaluate', 'data.n_images=20', 'bootstrap.n=0', 'output.plots=false', "
        "'output.detections_csv=false', 'report.enabled=false', "
        f"'hydra.run.dir={tmp_path / 'run'}']; "
        "runpy.run_module('detcal.apps.evaluate', run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "run" / "metrics.json").is_file()
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


def test_intervals_import_neither_scipy_sparse_nor_scipy_special(tmp_path: Path) -> None:
    """A COCO run with intervals (figures, CSV and report off) imports no scipy.sparse: the replicate product
    runs on scipy's compiled kernels loaded alone (:mod:`detcal.metrics.sparse_product`, the same numbers);
    and no scipy.special: the BCa interval's normal CDF and quantile are
    :mod:`detcal.metrics.normal` (the same doubles, tests/metrics/test_normal.py). (Box-uncertainty measures,
    absent from COCO results, still read scipy.special.)"""
    code = (
        "import atexit, runpy, sys; "
        "import detcal.apps.evaluate; "
        "print('start-up', 'scipy.sparse' in sys.modules); "
        "atexit.register(lambda: print('end', sorted(m for m in ('scipy.sparse', 'scipy.special') if m in sys.modules))); "
        "sys.argv = ['detcal-evaluate', 'data=coco_mini79', 'bootstrap.n=20', 'output.plots=false', "
        "'output.detections_csv=false', 'report.enabled=false', "
        f"'hydra.run.dir={tmp_path / 'run'}']; "
        "runpy.run_module('detcal.apps.evaluate', run_name='__main__')"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "start-up False", out.stdout[-500:]
    assert lines[-1] == "end []", out.stdout[-500:]
    metrics = (tmp_path / "run" / "metrics.json").read_text()
    assert '"ci": [' in metrics  # the intervals were computed
