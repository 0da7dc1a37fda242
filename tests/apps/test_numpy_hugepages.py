"""A detcal command started fresh asks numpy not to advise huge pages for its arrays, unless the environment sets
``NUMPY_MADVISE_HUGEPAGE``; importing the apps package where numpy is already loaded changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from detcal.apps import HUGEPAGE_VARIABLE

# numpy's own switch, read back: _set_madvise_hugepage returns the setting it replaces (numpy 2 and 1.x paths)
STATE = (
    "import os, numpy\n"
    "try:\n"
    "    from numpy._core.multiarray import _set_madvise_hugepage as s\n"
    "except ImportError:\n"
    "    from numpy.core.multiarray import _set_madvise_hugepage as s\n"
    f"print(os.environ.get('{HUGEPAGE_VARIABLE}', '-'), s(False))\n"
)


def _probe(first: str, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k != HUGEPAGE_VARIABLE}
    proc = subprocess.run(
        [sys.executable, "-c", first + "\n" + STATE], env={**clean, **env}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_fresh_command_process_asks_for_no_huge_pages() -> None:
    assert _probe("import detcal.apps") == "0 False"


@pytest.mark.parametrize("value", ["1", "0"])
def test_a_users_setting_is_kept(value: str) -> None:
    assert _probe("import detcal.apps", **{HUGEPAGE_VARIABLE: value}) == f"{value} {value == '1'}"


def test_nothing_is_set_where_numpy_was_imported_first() -> None:
    """numpy then keeps its own choice (advice on, on a kernel that has huge pages) and the variable stays unset."""
    out = _probe("import numpy, detcal.apps")
    assert out.split()[0] == "-"
    assert out == _probe("import numpy")  # the same state as numpy alone


def test_the_evaluate_command_runs_with_the_setting() -> None:
    """The command itself (its module as ``python -m`` runs it) imports the apps package before numpy."""
    code = (
        "import runpy, sys\n"
        "sys.argv = ['detcal-evaluate', '--help']\n"
        "try:\n"
        "    runpy.run_module('detcal.apps.evaluate', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass"
    )
    assert _probe(code).splitlines()[-1] == "0 False"
