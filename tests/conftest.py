"""Shared fixtures of the test suite; the suite mirrors the package tree (tests/metrics/ for detcal/metrics,
tests/pipeline/ for detcal/pipeline, ..., tests/data_formats/ for detcal/data since tests/data holds the
fixture files, tests/project/ for the checks over the whole repository).

pytest imports this file with its directory on ``sys.path``, so the helper package ``tests/support``
is importable from every subfolder (``from support.streaming_common import text``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from detcal.pipeline.spec import DataSpec


@pytest.fixture(scope="session", autouse=True)
def compose_cache_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The commands the tests run (in the process and in subprocesses) keep their cache of composed
    configurations (detcal.apps._compose_cache) in a temporary directory, never in the home directory."""
    before = os.environ.get("DETCAL_CACHE_DIR")
    os.environ["DETCAL_CACHE_DIR"] = str(tmp_path_factory.mktemp("detcal-cache"))
    yield
    if before is None:
        os.environ.pop("DETCAL_CACHE_DIR", None)
    else:
        os.environ["DETCAL_CACHE_DIR"] = before


@pytest.fixture(scope="module")
def coco(tmp_path_factory: pytest.TempPathFactory) -> DataSpec:
    """A synthetic COCO set of 150 images (seed 4, no rendering), as a DataSpec; one per test module."""
    from detcal.data.synthetic import write_synthetic

    p = write_synthetic(tmp_path_factory.mktemp("set"), n_images=150, seed=4, render=False)
    return DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"]))
