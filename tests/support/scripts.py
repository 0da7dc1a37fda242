"""The repository's scripts (``scripts/``, ``benchmarks/``) loaded as modules, for the tests of their functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def load_script(relative: str) -> ModuleType:
    """The script at ``REPO / relative`` (e.g. ``"benchmarks/bench_vs_rust.py"``) executed as a module of its
    file's name; not put in ``sys.modules``."""
    path = REPO / relative
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
