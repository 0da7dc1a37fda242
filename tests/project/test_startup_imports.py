"""Start-up of detcal-evaluate imports no scipy and no matplotlib (issue 29).

scipy.sparse and scipy.special come in with the bootstrap (the replicate
product, the BCa quantiles), matplotlib with the PNG figures: a run with
intervals and figures off, or a user importing the package, does not pay for
them.
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
