"""KITTI results can carry box uncertainty: 4 columns after the score (pixel std of cx, cy, w, h),
so the box-uncertainty metrics run on KITTI data too."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import detcal
from detcal.core.errors import DetcalInputError
from detcal.data.kitti import load_kitti_results
from detcal.data.kitti_write import write_kitti_results
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, RegressionSpec


def test_std_columns_round_trip_and_feed_the_regression_metrics(tmp_path: Path) -> None:
    p = write_synthetic(tmp_path / "s", n_images=60, seed=1, render=False)
    dets = load_kitti_results(p["kitti_results"])
    rng = np.random.default_rng(0)
    std = rng.uniform(0.5, 5.0, size=(len(dets), 4))
    write_kitti_results(tmp_path / "res", dataclasses.replace(dets, box_std=std))
    back = load_kitti_results(tmp_path / "res")
    np.testing.assert_array_equal(back.box_std, std)  # repr round trip is exact
    np.testing.assert_array_equal(back.box, dets.box)
    assert back.uncertainty_kind == "box_std"
    res = detcal.evaluate(
        DataSpec(
            source="kitti",
            label_dir=str(p["kitti_labels"]),
            results_dir=str(tmp_path / "res"),
            sizes=str(p["kitti_sizes"]),
        ),
        spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0), regression=RegressionSpec(space="box")),
    )
    reg = res.to_dict()["regression"]
    assert reg["_sample"]["n"] > 0 and reg["ence"]["tx"]["value"] is not None


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ("Car -1 -1 -10 10 20 110 90 -1 -1 -1 -1000 -1000 -1000 -10 0.9 1 1 1", "columns"),
        ("Car -1 -1 -10 10 20 110 90 -1 -1 -1 -1000 -1000 -1000 -10 0.9 1 1 0 1", "std_w"),
        ("Car -1 -1 -10 10 20 110 90 -1 -1 -1 -1000 -1000 -1000 -10 0.9 1 nan 1 1", "std_cy"),
    ],
)
def test_bad_std_columns_name_the_field(tmp_path: Path, line: str, field: str) -> None:
    d = tmp_path / "r"
    d.mkdir()
    (d / "000000.txt").write_text(line + "\n")
    with pytest.raises(DetcalInputError) as info:
        load_kitti_results(d)
    assert info.value.field == field and "000000.txt" in str(info.value)
