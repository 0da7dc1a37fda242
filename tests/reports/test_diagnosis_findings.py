"""The two leading diagnostics findings (the error type carrying most of the miscalibration, the costliest TIDE
error) reach the top of report.html's Findings and summary.md, with metrics.json's numbers
(detcal/reports/diagnosis_facts.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import detcal
from detcal.data import bundled
from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec
from detcal.reports.diagnosis_facts import (
    TYPE_NAMES,
    costliest_error,
    largest_miscalibration,
    miscalibration_sentence,
    tide_sentence,
)


def _numbers(node: Any, out: set[float]) -> set[float]:
    if isinstance(node, dict):
        for v in node.values():
            _numbers(v, out)
    elif isinstance(node, list):
        for v in node:
            _numbers(v, out)
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        out.add(float(node))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("diagfind")
    res = detcal.evaluate(
        *bundled.load("coco_mini79", "rfcn-resnet-101"), spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    )
    res.write(out, plots=False, csv=False, report=True)
    return out


def test_top_findings_and_summary_carry_the_two_diagnostics_facts(run: Path) -> None:
    m = json.loads((run / "metrics.json").read_text())
    diag = m["diagnostics"]
    cb, t = diag["calibration_by_error_type"], diag["tide"]
    # the choice, by hand: the error group (true positives aside) with the largest part of the D-ECE, and the
    # main TIDE type with the largest dAP
    errs = {k: v["dece_contribution"] for k, v in cb["types"].items() if k != "tp" and v["n"]}
    worst = max(errs, key=lambda k: errs[k])
    top = max(t["dap"], key=lambda k: t["dap"][k])
    assert errs[worst] > 0 and t["dap"][top] > 0
    # summary.md: the same sentences as metrics.json's findings, the miscalibration first
    md = (run / "summary.md").read_text()
    block = md[md.index("## Findings") :].split("\n## ")[0].split("\n### ")[0]
    lines = [ln[2:] for ln in block.splitlines() if ln.startswith("- ")]
    assert lines == [miscalibration_sentence(diag), tide_sentence(diag)]
    assert all(s in diag["findings"] for s in lines)
    assert TYPE_NAMES[worst] in lines[0] and f"{t['dap'][top]:.2f} points of {t['ap']:.2f}" in lines[1]
    # report.html: the top Findings list names both, every number shown is one of metrics.json
    page = (run / "report.html").read_text(encoding="utf-8")
    top_list = page[page.index("<h2 id=findings>") :]
    top_list = top_list[: top_list.index("</ul>")]
    assert f"<b>{TYPE_NAMES[worst]}</b> carry the largest part of the D-ECE" in top_list
    assert f"fixing the <b>{TYPE_NAMES[top]}</b> would gain the most AP" in top_list
    shown = {float(v) for v in re.findall(r'data-v="([^"]+)"', top_list)}
    assert shown <= _numbers(m, set())
    w = cb["types"][worst]
    expected = {w["dece_contribution"], w["dece_share"], w["n"], w["mean_confidence"], cb["dece"], t["ap"]}
    assert expected | {t["dap"][top], t["special_dap"]["fp"]} <= shown


def _diag(dece: dict[str, float], dap: dict[str, float], with_dece: bool = True) -> dict[str, Any]:
    types = {
        k: {
            "n": 10,
            "mean_confidence": 0.5,
            "accuracy": 0.0,
            "ece_contribution": v / 2,
            "ece_share": 0.5,
            "dece_contribution": v if with_dece else None,
            "dece_share": 0.25 if with_dece else None,
        }
        for k, v in dece.items()
    }
    return {
        "calibration_by_error_type": {
            "iou": "iou=0.50",
            "dece_from_contributions": sum(dece.values()) if with_dece else None,
            "ece": 0.1,
            "dece": 0.2,
            "types": types,
        },
        "tide": {"ap": 40.0, "dap": dap, "special_dap": {"fp": 3.0, "fn": 1.0}},
    }


def test_the_choice_by_hand() -> None:
    d = _diag({"tp": 0.5, "loc": 0.02, "bkg": 0.03, "dupe": -0.01}, {"cls": 1.0, "loc": 2.5, "miss": 0.0})
    assert largest_miscalibration(d)[:2] == ("bkg", "D-ECE")  # true positives never count
    assert costliest_error(d)[0] == "loc"
    assert "(25%; 10 detections at mean confidence 0.50)" in (miscalibration_sentence(d) or "")
    # no D-ECE split: the ECE's parts decide
    d = _diag({"tp": 0.5, "loc": 0.04, "bkg": 0.03}, {"cls": 0.0}, with_dece=False)
    assert largest_miscalibration(d)[:2] == ("loc", "ECE")
    assert costliest_error(d)[0] == "" and tide_sentence(d) == "TIDE: no error type costs AP (AP 40.00)."
    # no error group adds to the miscalibration, no TIDE: nothing to say
    d = _diag({"tp": 0.5, "loc": -0.01}, {})
    assert largest_miscalibration(d) is None and miscalibration_sentence(d) is None
    assert costliest_error({}) is None and tide_sentence({}) is None
