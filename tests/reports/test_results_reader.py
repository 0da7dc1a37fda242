"""Typed results (detcal.core.results) and the metrics.json reader for schema /3 and /2.

The /2 files in tests/data/metrics_v2/ were written by the code before schema /3
(see the README there). Read through the /2 reader, their numbers are the recorded
regression numbers, and every results section equals what the current code writes.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import pytest
from support.regression_numbers import numbers

import detcal
from detcal.core.results import (
    SCHEMA_V2,
    SCHEMA_V3,
    AccuracyBlock,
    CalibratorsBlock,
    ConfidenceBlock,
    RegressionBlock,
    Results,
    upgrade_v2,
)
from detcal.core.types import MetricResult, Skipped
from detcal.errors import DetcalInputError
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec
from detcal.reports import results_json
from detcal.reports.console import console_summary
from detcal.reports.gather import gather
from detcal.reports.html import render_report

DATA = Path(__file__).parents[1] / "data"
V2 = DATA / "metrics_v2"
PROVENANCE = ("created", "run_dir", "overrides", "config", "run_files", "data", "timing_s", "files", "outputs")


def _v2(name: str) -> dict[str, Any]:
    with gzip.open(V2 / f"{name}.metrics.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _recorded(name: str) -> dict[str, float | None]:
    with gzip.open(DATA / "regression" / f"{name}.json.gz", "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _flat(doc: dict[str, Any], sections: tuple[str, ...]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for s in sections:
        out.update(numbers(doc.get(s), s))
    return out


def _same_numbers(expected: dict[str, float | None], got: dict[str, float | None]) -> None:
    """The rule of tests/test_regression_numbers.py: null where null, else equal to 1e-12 (relative above 1)."""
    assert set(expected) <= set(got), sorted(set(expected) - set(got))[:5]
    bad = [
        k
        for k, v in expected.items()
        if not (
            (v is None and got[k] is None)
            or (v is not None and got[k] is not None and abs(v - got[k]) <= 1e-12 * max(1.0, abs(v)))
        )
    ]
    assert not bad, bad[:5]


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    out = [(path, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, f"{path}[{i}]")
    return out


@pytest.mark.parametrize("name", ["evaluate", "calibrate", "mini79_yolo", "compare"])
def test_a_v2_file_reads_into_blocks_with_every_number_where_it_was(name: str, tmp_path: Path) -> None:
    raw = _v2(name)
    assert raw["schema_version"] == SCHEMA_V2
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(raw))
    res = results_json.read_results(path)
    assert res.content["schema_version"] == SCHEMA_V3
    # the blocks serialise back to the /3 content, key for key
    assert results_json.strict(res.to_json()) == res.content
    # every number of the /2 file, at its path; only the n = 0 of a skipped block's empty sample is gone
    before = dict(numbers({k: v for k, v in raw.items() if k not in PROVENANCE}))
    after = dict(numbers({k: v for k, v in res.content.items() if k not in PROVENANCE}))
    gone = {k for k in before if k not in after}
    assert all(k.endswith("/_sample/n") and before[k] == 0 for k in gone), sorted(gone)[:5]
    assert {k: before[k] for k in after} == after
    # /3 says "not computed" one way: no _skipped, _null, _sample.skipped, or note beside a null value
    for p, v in _walk(res.content):
        assert not p.endswith(("/_skipped", "/_null", "/_sample/skipped")), p
        if isinstance(v, dict) and {"name", "value", "extra"} <= set(v) and v["value"] is None:
            assert "note" not in (v["extra"] or {}) and v["skipped"]["value"], p


def test_the_v2_regression_runs_read_as_the_recorded_numbers() -> None:
    """The /2 files of the default runs, read through the /2 reader, hold every recorded regression number."""
    ev = results_json.read_results(_v2("evaluate")).content
    _same_numbers(_recorded("evaluate"), _flat(ev, ("headline", "confidence", "dece_maps", "regression")))
    more = _recorded("evaluate_more")
    got = _flat(ev, ("accuracy", "localisation", "oce", "per_class"))
    for k in [k for k, v in more.items() if v == -1.0 and k.startswith("accuracy/")]:  # COCO's -1: null + reason
        section, key, leaf = k.split("/")
        assert got[k] is None and "pycocotools writes -1" in ev[section][key]["skipped"][leaf]
        got[k] = -1.0
    _same_numbers(more, got)
    cal = results_json.read_results(_v2("calibrate")).content
    _same_numbers(_recorded("calibrate"), _flat(cal, ("headline", "evaluation", "dece_maps", "calibrators")))


def _skeleton(node: Any) -> Any:
    """``node`` with every float replaced by one marker: its names, reasons, flags, integers and nulls (an
    optimiser's stop message left out: which of its tests ends the same iteration can turn on the last bit)."""
    if isinstance(node, dict):
        return {k: _skeleton(v) for k, v in node.items() if not (k == "message" and "n_iter" in node)}
    if isinstance(node, list):
        return [_skeleton(v) for v in node]
    return "<float>" if isinstance(node, float) else node


def test_the_current_code_writes_what_the_v2_files_read_as(tmp_path: Path) -> None:
    """Every results section of the default evaluate and calibrate runs equals the /2 file read through the
    reader (only provenance differs: paths, times, the configuration dump): every text, flag, integer and
    null the same, every float by the regression rule (:func:`_same_numbers`: 1e-12, relative above 1).
    The /2 files were written on a processor with AVX-512; numpy's vectorised sums take another order
    with narrower vectors (AVX2), which moves some floats by a few units in the last place (seen: at most
    4e-13 relative, on a BCa acceleration) and can end the temperature fit's L-BFGS-B at the same
    iteration by another of its tests (its ``message``)."""
    for name, run in (("evaluate", detcal.evaluate), ("calibrate", detcal.calibrate)):
        old = results_json.read_results(_v2(name)).content
        new = run(detcal.DataSpec(), workdir=tmp_path / name).to_dict()
        sections = sorted(set(old) - set(PROVENANCE))
        assert sections == sorted(set(new) - set(PROVENANCE))
        differ = [s for s in sections if _skeleton(old[s]) != _skeleton(new[s])]
        assert not differ, (name, differ)
        before, after = _flat(old, tuple(sections)), _flat(new, tuple(sections))
        assert set(before) == set(after), (name, sorted(set(before) ^ set(after))[:5])
        _same_numbers(before, after)


def test_blocks_are_typed_and_skipped_is_one_type() -> None:
    res = results_json.read_results(_v2("mini79_yolo"))
    conf = res.confidence["iou=0.50"]
    assert isinstance(conf, ConfidenceBlock) and conf.sample["n"] > 0
    ece = conf.metrics()["ece"]
    assert isinstance(ece, MetricResult) and ece.name == "ece" and 0 <= ece.value <= 1
    assert res.regression == Skipped("the detections carry no box uncertainty (docs/formats.md)")
    assert isinstance(res.uq_detr, Skipped) and res.uq_detr.reason == "uq_detr.enabled=false"
    assert isinstance(res.accuracy, AccuracyBlock) and isinstance(res.accuracy.metrics()["AP"], MetricResult)
    assert set(res.skipped()) == {"regression", "uq_detr"}
    ev = results_json.read_results(_v2("evaluate"))
    reg = ev.regression
    assert isinstance(reg, RegressionBlock) and reg.sample["n"] > 0
    assert set(reg.per_coordinate()["ence"]) == {"tx", "ty", "tw", "th"}
    large = ev.accuracy.metrics()["AP_large"]  # type: ignore[union-attr]
    assert math.isnan(large.value) and "pycocotools writes -1" in large.skipped.reason  # type: ignore[union-attr]
    cal = results_json.read_results(_v2("calibrate"))
    assert isinstance(cal.calibrators, CalibratorsBlock) and cal.calibrators.role("confidence")["name"]


def test_a_metric_without_a_value_carries_its_reason_in_one_place() -> None:
    undefined = MetricResult("overconfidence", float("nan"), extra={"note": "all detections are matched", "n": 3})
    d = results_json.strict(undefined.to_dict())
    assert d["value"] is None and d["skipped"] == {"value": "all detections are matched"} and d["extra"] == {"n": 3}
    defined = MetricResult("cv", 0.0, extra={"note": "all sigma equal"})
    assert defined.to_dict()["extra"] == {"note": "all sigma equal"} and "skipped" not in defined.to_dict()
    assert results_json.strict({"block": Skipped("oce.enabled=false")}) == {"block": {"skipped": "oce.enabled=false"}}
    inf = results_json.strict(MetricResult("lence", float("inf")).to_dict())
    assert inf["value"] is None and inf["skipped"]["value"].startswith("infinite")


def test_upgrade_v2_rewrites_the_four_spellings() -> None:
    v2 = {
        "schema_version": SCHEMA_V2,
        "diagnostics": {"_skipped": "diagnostics off"},
        "confidence": {"iou=0.99": {"_sample": {"n": 0, "skipped": "no detection matched"}}},
        "accuracy": {"AP": {"name": "AP", "value": None, "variant": "", "params": {}, "table": {}, "extra": {},
                            "ci": None, "ci_level": None, "_null": {"value": "undefined"}}},
        "oce": {"oce": {"name": "oce", "value": None, "variant": "", "params": {}, "table": {},
                        "extra": {"note": "empty sample"}, "ci": None, "ci_level": None,
                        "_null": {"value": "not computable (empty sample, bin or class)"}}},
        "calibrators": {"confidence_skipped": "no confidence calibrator configured"},
    }  # fmt: skip
    v3 = upgrade_v2(v2)
    assert v3["schema_version"] == SCHEMA_V3
    assert v3["diagnostics"] == {"skipped": "diagnostics off"}
    assert v3["confidence"]["iou=0.99"] == {"skipped": "no detection matched"}
    assert v3["accuracy"]["AP"]["skipped"] == {"value": "undefined"} and "_null" not in v3["accuracy"]["AP"]
    assert v3["oce"]["oce"]["skipped"] == {"value": "empty sample"} and v3["oce"]["oce"]["extra"] == {}
    assert v3["calibrators"] == {"confidence": {"skipped": "no confidence calibrator configured"}}
    res = Results.from_json(v2)
    assert res.diagnostics == Skipped("diagnostics off") and res.confidence["iou=0.99"] == Skipped(
        "no detection matched"
    )
    assert res.calibrators.role("confidence") == Skipped("no confidence calibrator configured")  # type: ignore[union-attr]


def test_the_reader_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    f = tmp_path / "metrics.json"
    f.write_text(json.dumps({"schema_version": "detcal.metrics/9", "command": "detcal-evaluate"}))
    with pytest.raises(DetcalInputError, match=r"metrics.json.*detcal.metrics/9"):
        results_json.read_results(f)
    f.write_text('{"schema_version": "detcal.metrics/3", "x": NaN}')
    with pytest.raises(DetcalInputError, match="metrics.json"):
        results_json.read_results(f)
    assert (
        results_json.read_results(f, lenient=True).content["x"]
        != results_json.read_results(f, lenient=True).content["x"]
    )


def test_report_and_console_read_a_v2_run_as_its_v3_reading(tmp_path: Path) -> None:
    raw = _v2("mini79_yolo")
    up = results_json.read_results(raw)
    page_v2, page_v3 = render_report(raw), render_report(up)
    assert page_v2 == page_v3 and "Skipped: the detections carry no box uncertainty" in page_v3
    assert SCHEMA_V3 in page_v3 and ">skipped<" not in page_v3  # reasons are not listed as numbers
    assert console_summary(raw, tmp_path) == console_summary(up, tmp_path)


def test_gather_reads_old_and_new_runs_together(tmp_path: Path) -> None:
    old = tmp_path / "sweep" / "0"
    old.mkdir(parents=True)
    (old / "metrics.json").write_text(json.dumps(_v2("evaluate")))
    new = tmp_path / "sweep" / "1"
    res = detcal.evaluate(
        detcal.DataSpec(n_images=30),
        spec=EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5]), bootstrap=BootstrapSpec(n=0)),
        workdir=tmp_path / "w",
    )
    res.write(new, plots=False, csv=False)
    g = gather(tmp_path / "sweep", metrics=["accuracy/AP_large"])
    assert list(g.columns) == ["accuracy/AP_large"] and len(g.rows) == 2  # the reasons are not columns
    g = gather(tmp_path / "sweep")
    assert {"ece", "dece"} <= set(g.columns) and all(r["ece"]["value"] is not None for r in g.rows.values())


def test_a_written_run_is_the_serialisation_of_its_blocks(tmp_path: Path) -> None:
    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.99]), bootstrap=BootstrapSpec(n=0))
    res = detcal.evaluate(detcal.DataSpec(n_images=30), spec=spec, workdir=tmp_path / "w")
    written = res.write(tmp_path / "out", plots=False, csv=False, report=True)
    on_disk = results_json.loads_strict((tmp_path / "out" / "metrics.json").read_text())
    assert on_disk == written
    blocks = results_json.read_results(on_disk)
    assert results_json.strict(blocks.to_json()) == on_disk
    assert isinstance(blocks.confidence["iou=0.99"], Skipped)
    assert "skipped: no detection matched at iou=0.99" in (tmp_path / "out" / "summary.md").read_text()
    assert res.to_markdown() == blocks_markdown(res)


def blocks_markdown(res: Any) -> str:
    from detcal.reports.summary_md import evaluation_summary

    return evaluation_summary(res.results())


def test_sections_switched_off_are_skipped_blocks_and_the_run_goes_on(tmp_path: Path) -> None:
    from detcal.pipeline.spec import AccuracySpec, LocalisationSpec, OCESpec

    spec = EvaluationSpec(
        bootstrap=BootstrapSpec(n=0),
        accuracy=AccuracySpec(enabled=False),
        localisation=LocalisationSpec(enabled=False),
        oce=OCESpec(enabled=False),
    )
    res = detcal.evaluate(detcal.DataSpec(n_images=30), spec=spec, workdir=tmp_path)
    blocks = res.results()
    assert blocks.accuracy == Skipped("accuracy.enabled=false")
    assert blocks.localisation == Skipped("localisation.enabled=false") and blocks.oce == Skipped("oce.enabled=false")
    assert "tide" in blocks.diagnostics  # type: ignore[operator]  # diagnostics still runs without localisation
    assert res.to_dict()["accuracy"] == {"skipped": "accuracy.enabled=false"}
