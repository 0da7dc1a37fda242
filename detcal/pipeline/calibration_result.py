"""The result of :func:`detcal.calibrate`: before/after numbers, the calibrated detections,
summary.md, diagrams, and the calibrated results written in the input's format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detcal.core.results import Results
from detcal.pipeline.result import Result
from detcal.reports import results_json
from detcal.reports.calibration_plots import calibration_plots
from detcal.reports.summary_md import CONFIDENCE_ROWS, REGRESSION_ROWS, calibration_summary, node

__all__ = ["CalibrationResult", "REGRESSION_ROWS", "CONFIDENCE_ROWS"]


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
        return calibration_plots(out, plain["evaluation"], plain.get("dece_maps") or {}, self.spec)

    def _summary(self, results: Results) -> str:
        return calibration_summary(results)


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
            got = node(ev, *(p.format(s=stage) for p in path))
            if got is not None:
                out[key + suffix] = {
                    "value": got["value"],
                    "ci": got.get("ci"),
                    "ci_level": got.get("ci_level"),
                    "source": "evaluation/" + "/".join(p.format(s=stage) for p in path),
                }
    return out
