"""Every number of the bundled default runs stays what it was when recorded.

The fixtures under tests/data/regression/ hold every number of metrics.json
(headline, confidence, D-ECE maps, regression; for calibrate the before/after
evaluation and the learned calibrator parameters) of the default synthetic
runs of detcal-evaluate and detcal-calibrate, recorded before the pipeline
redesign. Refactors and speed-ups must reproduce them to 1e-12.

One deliberate change since: bootstrap intervals became bias-corrected (BCa)
by default, so the ``ci`` entries were re-recorded then (every point estimate
was checked unchanged at that moment, by the same comparison).

``evaluate_more.json.gz`` (issue 29, recorded before the intervals were
rebuilt on per-image cell statistics and COCO AP on array operations) holds
the other sections of the same default run: COCO AP/AR, localisation
(LRP, LaECE, LaACE), OCE and the per-class table (their intervals are off by
default; the confidence and box-uncertainty intervals are in evaluate.json.gz).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from support.regression_numbers import numbers

import detcal

DATA = Path(__file__).parents[1] / "data" / "regression"


def _expected(name: str) -> dict[str, float | None]:
    with gzip.open(DATA / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _compare(expected: dict[str, float | None], got: dict[str, float | None]) -> None:
    missing = [k for k in expected if k not in got]
    assert not missing, f"{len(missing)} recorded numbers are gone, e.g. {missing[:5]}"
    bad = [
        (k, v, got[k])
        for k, v in expected.items()
        if not (
            (v is None and got[k] is None)
            or (v is not None and got[k] is not None and abs(v - got[k]) <= 1e-12 * max(1.0, abs(v)))
        )
    ]
    assert not bad, f"{len(bad)} numbers changed, e.g. {bad[:5]}"


def _flat(doc: dict, sections: tuple[str, ...]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for s in sections:
        out.update(numbers(doc.get(s), s))
    return out


@pytest.fixture(scope="module")
def default_evaluate(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return detcal.evaluate(detcal.DataSpec(), workdir=tmp_path_factory.mktemp("evaluate")).to_dict()


def test_default_evaluate_numbers_unchanged(default_evaluate: dict) -> None:
    got = _flat(default_evaluate, ("headline", "confidence", "dece_maps", "regression"))
    _compare(_expected("evaluate"), got)


def test_default_evaluate_other_sections_unchanged(default_evaluate: dict) -> None:
    expected = _expected("evaluate_more")
    assert expected["accuracy/AP/value"] is not None and expected["oce/oce/value"] is not None
    got = _flat(default_evaluate, ("accuracy", "localisation", "oce", "per_class"))
    # recorded before COCO's -1 ("no ground truth to measure against") became null with its reason in
    # metrics.json: a recorded -1 must now read null, with the reason beside it, and nothing else may change
    for k in [k for k, v in expected.items() if v == -1.0 and k.startswith("accuracy/")]:
        section, key, leaf = k.split("/")
        assert got[k] is None and "pycocotools writes -1" in default_evaluate[section][key]["skipped"][leaf], k
        got[k] = -1.0
    _compare(expected, got)


def test_default_calibrate_numbers_unchanged(tmp_path: Path) -> None:
    res = detcal.calibrate(detcal.DataSpec(), workdir=tmp_path)
    res.write(tmp_path / "out", plots=False)
    got = _flat(
        json.loads((tmp_path / "out" / "metrics.json").read_text()),
        ("headline", "evaluation", "dece_maps", "calibrators"),
    )
    _compare(_expected("calibrate"), got)


def test_regression_fixture_has_teeth() -> None:
    exp = _expected("evaluate")
    k = next(k for k, v in exp.items() if v not in (None, 0.0))
    with pytest.raises(AssertionError):
        _compare(exp, {**exp, k: exp[k] * (1 + 1e-9)})
