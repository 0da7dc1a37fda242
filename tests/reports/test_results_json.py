"""metrics.json is strict JSON (no NaN/Infinity tokens; a value that cannot be
computed is null with a reason beside it) and validates against the schema
shipped in the package, for every command that writes one."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import detcal
from detcal.apps import calibrate as calibrate_app, evaluate as evaluate_app
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, MatchingSpec
from detcal.reports import results_json


def _raise(name: str) -> Any:
    raise ValueError(f"non-strict JSON token {name}")


def _load_strict(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=_raise)


def _validate(m: dict[str, Any]) -> None:
    jsonschema.validate(m, results_json.schema())
    assert m["schema_version"] == "detcal.metrics/3"


def _walk(node: Any, path: str = "") -> list[tuple[str, Any]]:
    out = [(path, node)]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _walk(v, f"{path}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _walk(v, f"{path}[{i}]")
    return out


def test_strict_writer_turns_nan_into_null_with_a_reason() -> None:
    plain = results_json.strict({"a": float("nan"), "b": [1.0, float("inf")], "c": {"d": -float("inf")}})
    text = results_json.dumps(plain)
    loaded = json.loads(text, parse_constant=_raise)
    assert loaded["a"] is None and loaded["b"][1] is None and loaded["c"]["d"] is None
    assert "a" in loaded["skipped"] and loaded["c"]["skipped"]["d"]


def test_evaluate_metrics_json_with_uncomputable_values(tmp_path: Path) -> None:
    # IoU 0.99: no detection matches, so several confidence numbers cannot be computed
    spec = EvaluationSpec(matching=MatchingSpec(iou_thresholds=[0.5, 0.99]), bootstrap=BootstrapSpec(n=10))
    res = detcal.evaluate(DataSpec(n_images=30), spec=spec, workdir=tmp_path)
    res.write(tmp_path / "out", plots=False)
    m = _load_strict(tmp_path / "out" / "metrics.json")
    _validate(m)
    nulls = [(p, v) for p, v in _walk(m) if v is None]
    assert nulls, "expected uncomputable values at IoU 0.99"
    reasons = [v for p, v in _walk(m) if p.endswith("/skipped")]  # a null's reason, or a whole block's
    assert reasons and all(
        (isinstance(r, str) and r) or (isinstance(r, dict) and all(isinstance(t, str) and t for t in r.values()))
        for r in reasons
    )
    assert m["confidence"]["iou=0.99"] == {"skipped": m["confidence"]["iou=0.99"]["skipped"]}  # one spelling
    assert all(not (isinstance(v, float) and not math.isfinite(v)) for _, v in _walk(m))


def _run_app(main: Any, argv: list[str]) -> None:
    old = sys.argv
    sys.argv = argv
    try:
        main()
    finally:
        sys.argv = old


@pytest.mark.parametrize("app", [evaluate_app, calibrate_app], ids=["evaluate", "calibrate"])
def test_every_app_writes_schema_valid_strict_json(app: Any, tmp_path: Path) -> None:
    _run_app(
        app.main,
        [
            app.PROG,
            "data.n_images=60",
            "bootstrap.n=5",
            "output.plots=false",
            "output.print_summary=false",
            f"hydra.run.dir={tmp_path}",
        ],
    )
    m = _load_strict(tmp_path / "metrics.json")
    _validate(m)
    assert m["command"] == app.PROG and m["run_dir"] == str(tmp_path.resolve())
    assert m["config"]["data"]["n_images"] == 60 and "data.n_images=60" in m["overrides"]


def test_schema_rejects_a_wrong_layout() -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {
                "schema_version": "detcal.metrics/3",
                "detcal_version": "x",
                "command": "detcal-evaluate",
                "created": "now",
            },
            results_json.schema(),
        )
