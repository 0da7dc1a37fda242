"""The result of :func:`detcal.calibrate`: before/after numbers, the calibrated detections,
summary.md, diagrams, and the calibrated results written in the input's format."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detcal.core.results import CalibrationEvaluationBlock, Results, shown
from detcal.core.types import MetricResult
from detcal.pipeline.evaluation import headline_entry
from detcal.pipeline.result import Result
from detcal.pipeline.writeback import write_calibrated
from detcal.reports.calibration_plots import calibration_plots
from detcal.reports.summary_md import REGRESSION_ROWS, calibration_summary

__all__ = ["CalibrationResult", "REGRESSION_ROWS"]


@dataclass
class CalibrationResult(Result):
    """``record`` (metrics.json content, its ``calibrators`` and ``evaluation`` typed blocks), ``calibrated``
    (the evaluation part's detections after both calibrators), the evaluation data, and the spec."""

    calibrated: Any = None
    evaluation_data: Any = None
    spec: Any = None
    write_gt: bool = True

    def __post_init__(self) -> None:
        self.command = "detcal-calibrate"
        self.record.setdefault("headline", _headline(self.record["evaluation"]))

    def _write_extra(self, out: Path, plots: bool, csv: bool) -> list[str]:

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
        return calibration_plots(out, plain["evaluation"], plain.get("dece_maps") or {}, self.spec)

    def _summary(self, results: Results) -> str:
        return calibration_summary(results)


HEADLINE: tuple[tuple[str, str, str, bool], ...] = (
    ("dece", "confidence", "dece", False),
    ("ece", "confidence", "ece", False),
    ("ence", "regression", "ence", True),
    ("m_qce", "regression", "m_qce", True),
    ("nll_box", "regression", "nll", True),
)
"""detcal-calibrate's headline: (key, part of the evaluation, metric, whether the coordinate mean)."""


def _headline(ev: CalibrationEvaluationBlock) -> dict[str, Any]:
    """Flat sweep-stable numbers: after first, then ``_uncal`` (before)."""
    out: dict[str, Any] = {}
    for suffix, stage in (("", "after"), ("_uncal", "before")):
        for key, part, name, mean in HEADLINE:
            m = (ev.means(part, stage) if mean else ev.stage(part, stage)).get(name)
            if isinstance(m, MetricResult):
                path = "/".join((part, stage, "_mean", name) if mean else (part, stage, name))
                e = headline_entry(m, f"evaluation/{path}")
                # written as the plain values (null without a reason beside it), as this headline always was
                e["value"], e["ci"] = shown(e["value"]), None if m.ci is None else [shown(v) for v in e["ci"]]
                out[key + suffix] = e
    return out
