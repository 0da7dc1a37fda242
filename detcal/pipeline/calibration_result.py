"""The result of :func:`detcal.calibrate`: before/after numbers, the calibrated detections,
summary.md, diagrams, and the calibrated results written in the input's format."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detcal.pipeline.result import Result
from detcal.reports import results_json

__all__ = ["CalibrationResult", "REGRESSION_ROWS", "CONFIDENCE_ROWS"]

REGRESSION_ROWS: tuple[tuple[str, str], ...] = (
    ("ence", "ENCE"),
    ("cv", "C_v"),
    ("m_qce", "M-QCE"),
    ("c_qce", "C-QCE"),
    ("nll", "NLL"),
    ("interval_ce", "Kuleshov CE"),
)
"""Regression metrics of the before/after table, per coordinate (key in regression_metrics, label)."""

CONFIDENCE_ROWS: tuple[tuple[str, str], ...] = (
    ("dece", "D-ECE"),
    ("ece", "ECE"),
    ("mce", "MCE"),
    ("nll", "NLL"),
    ("brier", "Brier"),
    ("overconfidence", "over-confidence E[p|y=0]"),
    ("underconfidence", "under-confidence E[1-p|y=1]"),
)
"""Confidence metrics of the before/after table (key in confidence_metrics, label)."""


@dataclass
class CalibrationResult(Result):
    """``record`` (metrics.json content), ``calibrated`` (the evaluation part's detections after
    both calibrators), the evaluation data, and the spec."""

    calibrated: Any = None
    evaluation_data: Any = None
    spec: Any = None
    write_gt: bool = True

    def __post_init__(self) -> None:
        self.command = "detcal-calibrate"
        self.record.setdefault("headline", _headline(results_json.strict(self.record["evaluation"])))

    def _write_extra(self, out: Path, plots: bool, csv: bool) -> list[str]:
        from detcal.pipeline.writeback import write_calibrated

        outputs = write_calibrated(
            out / "calibrated",
            self.evaluation_data.format,
            self.calibrated,
            self.evaluation_data.dataset,
            write_gt=self.write_gt,
        )
        if "gt" not in outputs:
            prov = self.evaluation_data.provenance
            outputs["gt"] = prov.get("gt") or prov.get("label_dir") or (prov.get("adapter") or {}).get("gt")  # type: ignore[assignment]
        self.record["outputs"] = outputs
        if not plots:
            return []
        plain = self.plain()
        return _plots(out, plain["evaluation"], plain.get("dece_maps") or {}, self.spec)

    def to_markdown(self) -> str:
        return _summary_md({**results_json.strict(results_json.header(self.command)), **self.plain()})

    def _markdown(self, content: Mapping[str, Any]) -> str:
        return _summary_md(content)


def _node(block: Mapping[str, Any], *path: str) -> Any:
    node: Any = block
    for k in path:
        if not isinstance(node, Mapping) or k not in node:
            return None
        node = node[k]
    return node


def _headline(ev: Mapping[str, Any]) -> dict[str, Any]:
    """Flat sweep-stable numbers: after first, then ``_uncal`` (before)."""
    out: dict[str, Any] = {}
    spec = [
        ("dece", ("confidence", "{s}", "dece")),
        ("ece", ("confidence", "{s}", "ece")),
        ("ence", ("regression", "{s}", "_mean", "ence")),
        ("m_qce", ("regression", "{s}", "_mean", "m_qce")),
        ("nll_box", ("regression", "{s}", "_mean", "nll")),
    ]
    for suffix, stage in (("", "after"), ("_uncal", "before")):
        for key, path in spec:
            node = _node(ev, *(p.format(s=stage) for p in path))
            if node is not None:
                out[key + suffix] = {
                    "value": node["value"],
                    "ci": node.get("ci"),
                    "ci_level": node.get("ci_level"),
                    "source": "evaluation/" + "/".join(p.format(s=stage) for p in path),
                }
    return out


def _diff(a: Mapping[str, Any], b: Mapping[str, Any], paired: Mapping[str, Any] | None = None) -> Any:
    """After minus before; with its paired-bootstrap interval over images when there is one."""
    if paired and paired.get("difference") is not None:
        return {
            "value": paired["difference"],
            "ci": paired.get("ci") if any(v is not None for v in paired.get("ci") or []) else None,
        }
    if a.get("value") is None or b.get("value") is None:
        return None
    return float(a["value"]) - float(b["value"])


def _before_after_table(ev: Mapping[str, Any]) -> str:
    from detcal.reports.tables import comparison_table

    rows: dict[str, dict[str, Any]] = {}
    conf = ev.get("confidence") or {}
    if conf:
        for key, label in CONFIDENCE_ROWS:
            b, a = _node(conf, "before", key), _node(conf, "after", key)
            if b is not None and a is not None:
                rows[f"{label}"] = {"before": b, "after": a, "change": _diff(a, b, _node(conf, "change", key))}
    reg = ev.get("regression") or {}
    if reg:
        for key, label in (("ence", "ENCE"), ("m_qce", "M-QCE"), ("nll", "NLL")):
            b, a = _node(reg, "before", "_mean", key), _node(reg, "after", "_mean", key)
            if b is not None and a is not None:
                rows[f"{label} (box, mean over coords)"] = {
                    "before": b,
                    "after": a,
                    "change": _diff(a, b, _node(reg, "change", key)),
                }
        coords = list((_node(reg, "before", "ence") or {}).keys())
        for key, label in REGRESSION_ROWS:
            for c in coords:
                b, a = _node(reg, "before", key, c), _node(reg, "after", key, c)
                if b is not None and a is not None:
                    rows[f"{label} {c}"] = {"before": b, "after": a, "change": _diff(a, b)}
        for c in coords:
            a = _node(reg, "after", "interval_ce_cdf", c)
            if a is not None:
                rows[f"Kuleshov CE {c} (recalibrated CDF)"] = {"after": a}
    return (
        comparison_table(rows, ["before", "after", "change"], label="metric")
        + "\nchange = after - before; [interval]: paired bootstrap over images (docs/calibration.md#paired-bootstrap)\n"
    )


def _summary_md(m: Mapping[str, Any]) -> str:
    sp = m["split"]
    cal = m["calibrators"]
    parts = [f"# detcal-calibrate summary (detcal {m['detcal_version']})", ""]
    if sp["mode"] == "split":
        parts.append(
            f"- split: by image, seed {sp['seed']}, calibration fraction {sp['calibration_fraction']} "
            f"({sp['n_images']['calibration']} calibration / {sp['n_images']['evaluation']} evaluation images)"
        )
    else:
        parts.append(
            f"- split: two datasets (calibration: {m['data']['calibration'].get('source')}, "
            f"evaluation: {m['data']['evaluation'].get('source')})"
        )
    for role in ("confidence", "regression"):
        c = cal.get(role)
        if c:
            fitted = c["describe"].get("fitted") or {}
            short = {k: v for k, v in fitted.items() if not isinstance(v, (list, dict)) or len(str(v)) < 120}
            parts.append(
                f"- {role} calibrator: {c['name']} ({c['describe']['method']}), fitted on "
                f"{c['n_fit']} samples; learned {json.dumps(short)}"
            )
            rep = c.get("fit_report") or {}
            if rep and (not rep.get("converged", True) or rep.get("at_bound")):
                parts.append(f"- WARNING: the {role} calibrator's fit did not converge cleanly: {json.dumps(rep)}")
        else:
            parts.append(f"- {role} calibrator: none ({cal.get(role + '_skipped', 'not configured')})")
    es = m["evaluation"]["_sample"]
    parts.append(
        f"- evaluation: held-out, N = {es['n_confidence']} detections ({es['n_matched']} matched) at IoU "
        f"{es['iou_threshold']}; labels from the matching of the original detections; in-sample numbers: "
        + ("yes, under `in_sample`" if m.get("in_sample") else "no")
    )
    if m.get("outputs"):
        parts.append(f"- calibrated results ({m['outputs']['format']}): {m['outputs']['results']}")
    rm = m.get("rematch") or {}
    if rm:
        parts.append(
            f"- re-matching the calibrated file changes {rm['changed']} of {rm['n']} outcomes "
            f"at the calibration IoU threshold"
        )
    parts += ["", "## Before / after (held-out evaluation split)", "", _before_after_table(m["evaluation"])]
    if m.get("in_sample"):
        parts += [
            "## In-sample (calibration split; optimistic, for reference only)",
            "",
            _before_after_table(m["in_sample"]),
        ]
    parts += [
        "Definitions: docs/metrics.md; calibrators and protocol: docs/calibration.md.",
        "Files: " + ", ".join(m.get("files") or []),
        "",
    ]
    return "\n".join(parts)


def _plots(out_dir: Path, ev: Mapping[str, Any], maps: Mapping[str, Any], spec: Any) -> list[str]:
    from detcal.reports import plots

    files: list[str] = []
    conf = ev.get("confidence") or {}
    shared: dict[str, float] = {}  # one colour scale per panel for the before and after maps
    for stage in ("before", "after"):
        for k, v in (maps.get(stage) or {}).items():
            vals = [x for row in v["gap"] for x in row if x is not None and np.isfinite(x)]
            if vals:
                shared[k] = max(shared.get(k, 0.0), float(max(vals)))
    for stage in ("before", "after"):
        e = _node(conf, stage, "ece")
        if e:
            t = e["table"]
            name = f"reliability_{stage}.png"
            plots.reliability_diagram(
                out_dir / name,
                t.get("confidence", []),
                t.get("precision", []),
                t.get("count", []),
                ece=e["value"],
                title=f"Reliability {stage} calibration (evaluation split)",
                log_counts=spec.confidence.log_counts,
            )
            files.append(name)
        if maps.get(stage):
            name = f"dece_maps_{stage}.png"
            maps = {
                **maps,
                stage: {
                    k: {
                        **v,
                        **{
                            g: np.asarray([[np.nan if x is None else x for x in row] for row in v[g]], dtype=float)
                            for g in ("gap", "signed_gap")
                            if g in v
                        },
                    }
                    for k, v in maps[stage].items()
                },
            }
            d = _node(conf, stage, "dece", "value")
            plots.dece_heatmaps(
                out_dir / name,
                maps[stage],
                sample_threshold=spec.dece_binning.sample_threshold,
                dece=d,
                title=f"D-ECE maps {stage} calibration",
                vmax=shared,
            )
            files.append(name)
        reg = _node(ev, "regression", stage, "ence")
        if reg:
            name = f"rmse_rmv_{stage}.png"
            plots.rmse_rmv_diagram(
                out_dir / name,
                {c: v["table"] for c, v in reg.items()},
                ence={c: v["value"] for c, v in reg.items()},
                log=spec.regression.log_plot,
                title=f"RMSE vs RMV {stage} calibration (evaluation split)",
            )
            files.append(name)
    return files
