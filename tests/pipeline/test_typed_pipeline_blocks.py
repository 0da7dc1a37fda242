"""The pipeline hands its results on as the typed blocks of detcal.core.results (issue 28, part 2).

The block functions return blocks whose leaves are MetricResult objects (no metrics.json dicts inside
the pipeline); the headline reads them; metrics.json read back gives the same numbers in the same
blocks; calibrate's before/after table takes its labels from the registry of measures."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

import detcal
from detcal.core.results import (
    AccuracyBlock,
    Block,
    CalibrationEvaluationBlock,
    CalibratorsBlock,
    ConfidenceBlock,
    DiagnosticsBlock,
    LocalisationBlock,
    OCEBlock,
    RegressionBlock,
    Results,
    UQDetrBlock,
)
from detcal.core.types import MetricResult, Skipped
from detcal.metrics import measures
from detcal.metrics.paired import PairedDifference
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, UqDetrSpec
from detcal.reports.measure_rows import before_after_rows

LEAF = {"name", "value", "variant", "params", "table", "extra", "ci", "ci_level"}


def _dict_leaves(node: Any, path: str = "") -> Iterator[str]:
    """Paths of metric leaves still held as metrics.json dicts."""
    if isinstance(node, Block):
        node = node.entries
    if isinstance(node, Mapping):
        if LEAF <= set(node):
            yield path
            return
        for k, v in node.items():
            yield from _dict_leaves(v, f"{path}/{k}")


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=20, seed=1), uq_detr=UqDetrSpec(enabled=True))
    return detcal.evaluate(DataSpec(n_images=40), spec=spec, workdir=tmp_path_factory.mktemp("ev"))


def test_evaluate_record_holds_typed_blocks(evaluated: Any) -> None:
    rec = evaluated.record
    kinds = {
        "regression": RegressionBlock,
        "accuracy": AccuracyBlock,
        "localisation": LocalisationBlock,
        "oce": OCEBlock,
        "uq_detr": UQDetrBlock,
        "diagnostics": DiagnosticsBlock,
    }
    for key, kind in kinds.items():
        assert isinstance(rec[key], kind), key
    assert rec["confidence"] and all(isinstance(b, ConfidenceBlock) for b in rec["confidence"].values())
    # every leaf is a MetricResult, but uq_detr's (written with "table": null on purpose)
    for key in ("confidence", "regression", "accuracy", "localisation", "oce"):
        assert list(_dict_leaves(rec[key])) == [], key
    ece = rec["confidence"]["iou=0.50"].metric("ece")
    assert isinstance(ece, MetricResult) and ece.ci is not None
    assert all(isinstance(m, MetricResult) for m in rec["regression"].per_coordinate()["ence"].values())
    assert isinstance(rec["accuracy"].metric("AP"), MetricResult)


def test_headline_and_read_back_are_the_blocks_numbers(evaluated: Any) -> None:
    rec, content = evaluated.record, evaluated.to_dict()
    blk = rec["confidence"]["iou=0.50"]
    for name in measures.headline_names():
        m = blk.metric(name)
        h = content["headline"][name]
        assert _same(m.value, float("nan") if h["value"] is None else h["value"]), name
        assert h["source"] == f"confidence/iou=0.50/{name}"
    for coord, m in rec["regression"].per_coordinate()["ence"].items():
        assert content["headline"][f"ence_{coord}"]["value"] == m.value
    back = Results.from_json(content)
    for key in ("accuracy", "localisation", "oce"):
        a, b = rec[key].metrics(), back.block(key, type(rec[key])).metrics()
        assert list(a) == list(b) and a, key
        assert all(_same(a[k].value, b[k].value) for k in a), key
    got = back.confidence["iou=0.50"].metrics()
    assert all(_same(got[k].value, blk.metric(k).value) for k in got)


def test_a_skipped_block_stays_skipped(tmp_path: Path) -> None:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    spec = dataclasses.replace(spec, accuracy=dataclasses.replace(spec.accuracy, enabled=False))
    res = detcal.evaluate(DataSpec(n_images=12), spec=spec, workdir=tmp_path)
    assert res.record["accuracy"] == Skipped("accuracy.enabled=false")
    assert res.to_dict()["accuracy"] == {"skipped": "accuracy.enabled=false"}
    assert res.record["per_class"]["rows"]  # the per-class table is written without the AP columns


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from detcal.pipeline.calibration import calibrate

    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=20, seed=2))
    return calibrate(DataSpec(n_images=60), spec, workdir=str(tmp_path_factory.mktemp("cal")))


def test_calibrate_record_holds_typed_blocks(calibrated: Any) -> None:
    rec = calibrated.record
    assert isinstance(rec["calibrators"], CalibratorsBlock) and isinstance(
        rec["evaluation"], CalibrationEvaluationBlock
    )
    ev = rec["evaluation"]
    assert list(_dict_leaves(ev)) == []
    after, change = ev.after("confidence"), ev.change("confidence")
    assert isinstance(after["ece"], MetricResult) and isinstance(change["ece"], PairedDifference)
    assert isinstance(ev.means("regression", "after")["ence"], MetricResult)
    h = calibrated.to_dict()["headline"]
    assert h["ece"]["value"] == after["ece"].value and h["ece_uncal"]["value"] == ev.before("confidence")["ece"].value
    assert h["ence"]["source"] == "evaluation/regression/after/_mean/ence"
    back = Results.from_json(calibrated.to_dict()).evaluation
    assert isinstance(back, CalibrationEvaluationBlock)
    assert back.sample == ev.sample and back.after("confidence")["ece"].value == after["ece"].value
    assert back.change("confidence")["ece"]["difference"] == pytest.approx(change["ece"].difference, abs=0)


def test_before_after_labels_come_from_the_registry(calibrated: Any, tmp_path: Path) -> None:
    labels = dict(before_after_rows())
    assert labels["ece"] == "ECE" and labels["overconfidence"] == "over-confidence E[p|y=0]"
    old = measures.get("ece")
    measures.register(dataclasses.replace(old, display=measures.Display("toy ECE", formula="(toy)")), replace=True)
    try:
        assert dict(before_after_rows())["ece"] == "toy ECE (toy)"
        assert "| toy ECE (toy) |" in calibrated.to_markdown()
    finally:
        measures.register(old, replace=True)
    assert "| ECE |" in calibrated.to_markdown()
