"""The sparse-cell warning of a default run: one line per evaluation with its numbers and a grid that fits,
logged once per command, none for metrics that were not computed; the numbers themselves unchanged."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.types import Dataset, Images
from detcal.pipeline import EvaluationSpec
from detcal.pipeline.sources import load_data
from detcal.pipeline.sparse_cells import SPARSE_MARK, fitting_bins, sparse_cells_line
from detcal.pipeline.spec import BootstrapSpec, DataSpec

QUIET = {"bootstrap": BootstrapSpec(n=0)}


def test_fitting_bins_by_hand() -> None:
    assert fitting_bins(10331, 5) == 4  # 4**5 = 1,024 <= 1,033.1 < 5**5 = 3,125
    assert fitting_bins(31250, 5) == 5  # 5**5 = 3,125 = 31,250 / 10 exactly
    assert fitting_bins(31249, 5) == 4
    assert fitting_bins(5, 5) == 1 and fitting_bins(160, 1) == 16


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> DataSpec:
    return DataSpec(source="synthetic", n_images=400, out_dir=str(tmp_path_factory.mktemp("syn")))


def test_one_line_per_evaluation_with_the_numbers(synthetic: DataSpec, caplog: pytest.LogCaptureFixture) -> None:
    from detcal.utils.warn import capture, collected

    with capture(), caplog.at_level(logging.WARNING, logger="detcal"):
        r1 = detcal.evaluate(synthetic, spec=EvaluationSpec(**QUIET))
        r2 = detcal.evaluate(synthetic, spec=EvaluationSpec(**QUIET))
        kept = collected()
    lines = [w for w in r1.record["warnings"] if SPARSE_MARK in w]
    assert len(lines) == 1 and r2.record["warnings"] == r1.record["warnings"]
    d = r1.record["confidence"]["iou=0.50"].metric("dece")
    n, cells = d.params["n"], d.extra["cells"]
    assert cells == 5**5 and cells > n / 10
    assert f"{cells:,} cells for {n:,} detections" in lines[0] and "iou=0.50 and iou=0.75" in lines[0]
    assert f"dece_binning.bins={fitting_bins(n, 5)}" in lines[0]
    logged = [r.getMessage() for r in caplog.records if SPARSE_MARK in r.getMessage()]
    assert logged == lines and kept.count(lines[0]) == 1  # once per command, not once per evaluation
    # the numbers are those of the metrics (the line replaces the warnings, not the values)
    assert d.extra["sparse_warning"] and np.isfinite(d.value)


def test_no_sparse_line_for_metrics_not_computed(synthetic: DataSpec, tmp_path: Path) -> None:
    data = load_data(synthetic, tmp_path)
    ds = data.dataset
    nan = np.full(len(ds.images), np.nan)
    no_size = Dataset(Images(ds.images.id, nan, nan, ds.images.file_name), ds.gt, dict(ds.categories), "no sizes")
    out = detcal.evaluate(no_size, data.detections, EvaluationSpec(**QUIET))
    assert out.to_dict()["confidence"]["iou=0.50"]["dece"]["value"] is None
    assert not [w for w in out.record["warnings"] if SPARSE_MARK in w]
    assert sparse_cells_line(out.record["confidence"]) is None
