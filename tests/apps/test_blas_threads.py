"""A detcal command started fresh runs numpy's OpenBLAS on one thread, unless the environment names a BLAS
thread count; importing the apps package where numpy is already loaded changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from detcal.apps import BLAS_THREAD_VARIABLES

PROBE = (
    "import os, sys; import detcal.apps; import numpy; "
    "print(os.environ.get('OPENBLAS_NUM_THREADS', '-'), os.environ.get('OMP_NUM_THREADS', '-'))"
)


def _probe(code: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in BLAS_THREAD_VARIABLES}
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_fresh_command_process_runs_blas_on_one_thread() -> None:
    assert _probe(PROBE) == "1 -"


@pytest.mark.parametrize("var", BLAS_THREAD_VARIABLES)
def test_a_users_thread_count_is_kept(var: str) -> None:
    out = _probe(
        f"import os, detcal.apps; print(os.environ.get('OPENBLAS_NUM_THREADS', '-'), os.environ['{var}'])", **{var: "3"}
    )
    assert out == ("3 3" if var == "OPENBLAS_NUM_THREADS" else "- 3")


def test_nothing_is_set_where_numpy_was_imported_first() -> None:
    out = _probe("import numpy, os, detcal.apps; print(os.environ.get('OPENBLAS_NUM_THREADS', '-'))")
    assert out == "-"


def test_numpys_openblas_reads_the_setting() -> None:
    """numpy's bundled OpenBLAS takes the one thread (checked where threadpoolctl can read it)."""
    pytest.importorskip("threadpoolctl")
    code = (
        "import detcal.apps, numpy, threadpoolctl; "
        "print(sorted({i['num_threads'] for i in threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'}))"
    )
    out = _probe(code)
    if out == "[]":
        pytest.skip("this numpy does not use OpenBLAS")
    assert out == "[1]"


EVALUATE = (
    "import detcal.apps, json, sys, detcal; from detcal.data import bundled; "
    "r = detcal.evaluate(bundled.path('coco_mini79'), bundled.path('coco_mini79', 'rfcn-resnet-101')); "
    "d = r.to_dict(); d.pop('timing_s', None); d.pop('created', None); import re; "
    "print(re.sub(r'detcal_bundled_[^/]+', 'bundled', json.dumps(d, sort_keys=True)))"  # the data's temp folder
)


def test_the_numbers_do_not_depend_on_the_blas_thread_count() -> None:
    """Every number of a default evaluation (BCa intervals included) is the same on one BLAS thread and on two."""
    one = _probe(EVALUATE, OPENBLAS_NUM_THREADS="1")
    two = _probe(EVALUATE, OPENBLAS_NUM_THREADS="2")
    assert len(one) > 10_000
    assert one == two
