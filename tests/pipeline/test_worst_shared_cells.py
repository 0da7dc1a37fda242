"""The calibration split by error type read from the confidence block's cells, and the worst-detections table
read from the D-ECE cells the calibration split by error type left is the table
binned afresh, the cells are read only when made on its grid, and then no box feature is made."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import detcal
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.confidence_block import confidence_blocks
from detcal.pipeline.diagnostics_block import diagnostics_block
from detcal.pipeline.evaluation import relative_box_features
from detcal.pipeline.progress import Progress
from detcal.pipeline.report_data import worst_block
from detcal.pipeline.spec import DataSpec, EvaluationSpec
from detcal.reports.html.worst import GridCells


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("shared")
    p = write_synthetic(tmp / "s", n_images=40, seed=7, render=False)
    data = DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"]))
    spec = EvaluationSpec()
    spec.dece_binning.bins = 2  # cells with enough detections for a D-ECE on a small set
    return spec, detcal.evaluate(data, spec=spec, workdir=tmp / "run")


def _text(rec: dict) -> str:
    return json.dumps(rec, sort_keys=True, default=str)  # as text: NaN values compare equal


def _split_cells(spec: EvaluationSpec, res: Any) -> tuple[dict, np.ndarray, dict[str, GridCells]]:
    """The run's confidence record, its box features, and the cells the calibration split by error type left."""
    conf, loc = res.record["confidence"], res.record["localisation"]
    feats = relative_box_features(res.data, needed=False)[0]
    keep: dict[str, GridCells] = {}
    diagnostics_block(spec, res.data, res.match, feats, conf, loc, keep)
    return conf, feats, keep


def test_shared_cells_give_the_same_table_without_features(run) -> None:
    spec, res = run
    conf, feats, keep = _split_cells(spec, res)
    assert "dece" in keep  # the split binned the full grid (confidence and the four features)
    assert keep["dece"].key[0] == (2, 2, 2, 2, 2)

    def no_features() -> np.ndarray:
        raise AssertionError("features read although the cells were given")

    shared = worst_block(spec, res.data, res.match, no_features, conf, cells=keep["dece"])
    fresh = worst_block(spec, res.data, res.match, feats, conf)
    assert _text(shared) == _text(fresh) == _text(res.record["worst_detections"])
    assert fresh["largest_contributions"]  # a table with rows


def test_cells_of_another_grid_are_not_read(run) -> None:
    spec, res = run
    conf, feats, keep = _split_cells(spec, res)
    c = keep["dece"]
    wrong = GridCells((c.key[0], c.key[1], c.key[2] + 1, c.key[3], c.key[4]), c.cell[::-1].copy(), c.stats)
    other = worst_block(spec, res.data, res.match, feats, conf, cells=wrong)
    assert _text(other) == _text(res.record["worst_detections"])


def test_split_from_the_confidence_blocks_cells_reads_no_feature(run) -> None:
    spec, res = run
    feats = relative_box_features(res.data, needed=False)[0]
    kept: dict = {}
    with Progress(False, "t", total=1) as bar:
        conf, _ = confidence_blocks(spec, res.data, res.match, feats, bar, [], None, kept)
    assert [k[2] for k in kept] == [True]  # the D-ECE grid alone (the ECE's cells are binned again)

    def no_features() -> np.ndarray:
        raise AssertionError("features read although the confidence block's cells were given")

    keep: dict[str, GridCells] = {}
    loc = res.record["localisation"]
    from_kept, _ = diagnostics_block(spec, res.data, res.match, no_features, conf, loc, keep, kept)
    fresh, _ = diagnostics_block(spec, res.data, res.match, feats, conf, loc)
    assert _text(from_kept.to_dict()) == _text(fresh.to_dict()) == _text(res.record["diagnostics"].to_dict())
    assert from_kept.to_dict()["calibration_by_error_type"]["dece_from_contributions"] is not None
    shared = worst_block(spec, res.data, res.match, no_features, conf, cells=keep["dece"])
    assert _text(shared) == _text(res.record["worst_detections"])
