"""The relative box features made again after the accuracy and OCE stages (not held across them) are the ones
the confidence block read, and diagnostics reads them the same whether given the array or the function."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import detcal
import detcal.pipeline.evaluation as evaluation
from detcal.data.synthetic import write_synthetic
from detcal.pipeline.diagnostics_block import diagnostics_block
from detcal.pipeline.evaluation import features_when_read, relative_box_features
from detcal.pipeline.spec import DataSpec, EvaluationSpec


def test_features_when_read_made_once_and_kept(tmp_path: Path, monkeypatch) -> None:
    p = write_synthetic(tmp_path / "s", n_images=12, seed=5, render=False)
    data = evaluation.as_loaded(DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"])))
    calls = []
    real = evaluation.relative_box_features
    monkeypatch.setattr(evaluation, "relative_box_features", lambda *a, **k: calls.append(1) or real(*a, **k))
    f = features_when_read(data)
    assert not calls  # nothing made until read
    first = f()
    assert f() is first and len(calls) == 1
    assert np.array_equal(first, real(data, needed=False)[0])


def test_evaluate_features_and_diagnostics_unchanged_by_the_late_features(tmp_path: Path) -> None:
    p = write_synthetic(tmp_path / "s", n_images=40, seed=4, render=False)
    data = DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"]))
    spec = EvaluationSpec()
    res = detcal.evaluate(data, spec=spec, workdir=tmp_path / "run")
    feats = relative_box_features(res.data, needed=False)[0]
    assert np.array_equal(res.features, feats, equal_nan=True)
    conf, loc = res.record["confidence"], res.record["localisation"]
    given, _ = diagnostics_block(spec, res.data, res.match, feats, conf, loc)
    made, _ = diagnostics_block(spec, res.data, res.match, lambda: feats, conf, loc)
    text = [json.dumps(b.to_dict(), sort_keys=True, default=str) for b in (given, made, res.record["diagnostics"])]
    assert text[0] == text[1] == text[2]  # as text: NaN values compare equal
    assert "calibration_by_error_type" in made.to_dict()  # the part that reads the features ran
