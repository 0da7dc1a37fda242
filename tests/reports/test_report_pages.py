"""The main job's and the study's report pages (issue #34): findings sentences with the numbers of the run,
Table 1 beside the paper's with the direction of each change, no raw arrays on the page, mean ± std over
splits; every number shown is a number of the run's JSON; the study's console lines."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from detcal.reports.console import console_summary
from detcal.reports.html import render_report


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


def _shown(page: str) -> list[float]:
    return [float(v) for v in re.findall(r'data-v="([^"]+)"', page)]


def _change(a: float, b: float, lo: float, hi: float) -> dict[str, Any]:
    return {
        "a": a,
        "b": b,
        "difference": b - a,
        "ci": [lo, hi],
        "excludes_zero": lo > 0 or hi < 0,
        "bootstrap": {"n_images": 480},
    }


def main_content() -> dict[str, Any]:
    thresholds = [float(x) for x in np.linspace(0, 1, 1500) ** 3 + 1e-7]  # an isotonic map: raw values
    return {
        "command": "detcal-main",
        "table": "Levi et al. 2019 Table 1 analogue",
        "split": "val",
        "n_tp_val": 1637,
        "columns": ["tx", "ty"],
        "rows": {
            "ENCE before calibration": {"tx": 0.208, "ty": 0.59},
            "ENCE after std scaling": {"tx": 0.11, "ty": 0.12},
            "ENCE after isotonic (Kuleshov)": {"tx": 0.229, "ty": 0.14},
            "C_v": {"tx": 0.55, "ty": 0.51},
        },
        "paper": {
            "ENCE before calibration": {"tx": 0.165, "ty": 0.254},
            "ENCE after std scaling": {"tx": 0.083, "ty": 0.047},
            "ENCE after isotonic (Kuleshov)": {"tx": 0.06, "ty": 0.039},
            "C_v": {"tx": 0.4, "ty": 0.33},
        },
        "ence_change": {
            "std_scaling": {"ence": {"tx": _change(0.208, 0.11, -0.12, -0.07), "ty": _change(0.59, 0.12, -0.5, -0.4)}},
            "kuleshov_isotonic": {
                "ence": {"tx": _change(0.208, 0.229, -0.01, 0.05), "ty": _change(0.59, 0.14, -0.5, -0.4)}
            },
        },
        "conclusion": {
            "claim": "std_scaling lowers the val ENCE on every coordinate, C_v unchanged",
            "holds": True,
            "cv_unchanged": {"tx": True, "ty": True},
            "cv_rtol": 1e-9,
        },
        "data": {"train": {"source": "synthetic", "n_images": 96}, "val": {"source": "synthetic", "n_images": 480}},
        "calibration": {
            "n_recal_tp": 1668,
            "methods": {
                "std_scaling": {"method": "StdScaling", "fitted": {"scale_": [1.5, 1.9]}},
                "kuleshov_isotonic": {
                    "method": "KuleshovIsotonic",
                    "fitted": {"x_thresholds_": [thresholds, thresholds], "fit_report_": {"ok": True}},
                },
            },
        },
        "timing_s": {"data": 0.2, "stage1": 103.0, "total": 132.6},
        "stages": {"stage1": {"status": "trained", "seconds": 103.0}},
    }


def test_main_job_page_findings_table_and_no_raw_arrays() -> None:
    m = main_content()
    page = render_report(m)
    shown = _shown(page)
    assert not {v for v in shown if v not in _numbers(m, set())}  # every number is one of the JSON
    findings = page.split("<ul class=findings>", 1)[1].split("</ul>", 1)[0]
    assert "std_scaling lowers the val ENCE on every coordinate, C_v unchanged: holds" in findings
    # each coordinate's change with its interval, in percent points
    assert 'data-v="-0.12">−12.0 pts' in findings and 'data-v="-0.07">−7.0 pts' in findings
    # what got worse: isotonic on tx, 20.8% -> 22.9%, its interval includes 0
    worse = [s for s in findings.split("<li>") if "worse" in s and "kuleshov_isotonic" in s]
    assert worse and "20.8%" in worse[0] and "22.9%" in worse[0] and "includes 0" in worse[0]
    assert "not comparable with the paper's KITTI numbers" in findings and "59.0%" in findings
    # Table 1 beside the paper's: each 'after' cell marked against 'before'
    t1 = page.split("<h2 id=table1>", 1)[1].split("</table>", 1)[0]
    assert t1.count("class=better") == 7 and t1.count("class=worse") == 1  # isotonic tx of this run
    assert "The paper's Table 1" in page
    # the isotonic thresholds are summarised (count), not printed
    assert len(shown) < 200 and "1500 values (in table1.json)" in page
    assert 0.000001 not in shown and thresholds_absent(page, m)


def thresholds_absent(page: str, m: dict[str, Any]) -> bool:
    xs = m["calibration"]["methods"]["kuleshov_isotonic"]["fitted"]["x_thresholds_"][0]
    return all(f'data-v="{x!r}"' not in page for x in xs[100:110])


def study_content() -> dict[str, Any]:
    rows = []
    for det, base in (("rfcn-resnet-101", 0.10), ("ssd-resnet-50-v1", 0.15)):
        for fs in ("conf", "conf,cx,cy,w,h"):
            for cal, f in (("uncalibrated", 1.0), ("histogram", 0.5), ("platt", 0.6), ("position_logistic", 0.4)):
                if cal == "position_logistic" and fs == "conf":
                    continue
                vals = [base * f, base * f * 1.1]
                rows.append(
                    {
                        "detector": det,
                        "iou": 0.6,
                        "features": fs,
                        "calibrator": cal,
                        "mean": float(np.mean(vals)),
                        "std": float(np.std(vals, ddof=1)),
                        "values": vals,
                    }
                )
    gain = [
        {
            "detector": "rfcn-resnet-101",
            "iou": 0.6,
            "position": "position_logistic",
            "baseline": "platt",
            "diff_mean": -0.02,
        }
    ]
    return {
        "command": "detcal-study",
        "study": "kueppers2020",
        "rows": rows,
        "full": [],
        "params": {"n_splits": 2, "ious": [0.6], "detectors": ["rfcn-resnet-101", "ssd-resnet-50-v1"]},
        "position_gain": gain,
    }


def test_study_page_mean_std_over_splits() -> None:
    m = study_content()
    page = render_report(m)
    assert not {v for v in _shown(page) if v not in _numbers(m, set())}
    first = page.split("<h2 id=table>", 1)[1].split("</table>", 1)[0]
    best = next(r for r in m["rows"] if r["calibrator"] == "position_logistic" and r["detector"] == "rfcn-resnet-101")
    assert f'<b><span class=n data-v="{best["mean"]!r}">' in first  # the lowest mean of the row in bold
    assert " ± " in first and "conf,cx,cy,w,h" in first and ">conf<" not in first  # only the full feature set
    findings = page.split("<ul class=findings>", 1)[1].split("</ul>", 1)[0]
    assert (
        "rfcn-resnet-101" in findings and "position_logistic" in findings and 'data-v="2">2</span> splits' in findings
    )
    assert "[0]/detector" not in page and "Other results" not in page


def test_study_console_prints_its_numbers(tmp_path: Any) -> None:
    text = console_summary(study_content(), tmp_path)
    lines = [ln for ln in text.splitlines() if ln.startswith("  rfcn-resnet-101")]
    assert len(lines) == 1 and "with position_logistic" in lines[0] and "before" in lines[0]
    assert "mean ± std over 2 splits" in text


def test_study_reports_progress_per_part() -> None:
    from detcal.studies import kueppers2020 as k

    lines: list[str] = []
    k.run(
        detectors=["rfcn-resnet-101"],
        ious=[0.6, 0.75],
        feature_sets=["conf"],
        calibrators=["platt"],
        n_splits=2,
        progress=lines.append,
    )
    assert len(lines) == 2 and lines[0].startswith("kueppers2020: 1/2 rfcn-resnet-101 at IoU 0.60 done")
    assert "2 splits, 1 calibrators" in lines[1] and "s so far" in lines[1]
