"""The figures of detcal-calibrate: reliability diagrams, D-ECE maps and RMSE-vs-RMV diagrams before
and after calibration, drawn from the run's metrics.json content."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.reports import plots
from detcal.reports.summary_md import node

__all__ = ["calibration_plots"]


def calibration_plots(out_dir: Path, ev: Mapping[str, Any], maps: Mapping[str, Any], spec: Any) -> list[str]:
    """detcal-calibrate's figures (reliability, D-ECE maps, RMSE vs RMV, before and after) from its
    metrics.json content; returns the file names."""

    files: list[str] = []
    reuse: dict[str, Any] = {}  # the "before" figure, redrawn for "after" where it fits
    conf = ev.get("confidence") or {}
    shared: dict[str, float] = {}  # one colour scale per panel for the before and after maps
    for stage in ("before", "after"):
        for k, v in (maps.get(stage) or {}).items():
            vals = [x for row in v["gap"] for x in row if x is not None and np.isfinite(x)]
            if vals:
                shared[k] = max(shared.get(k, 0.0), float(max(vals)))
    for stage in ("before", "after"):
        e = node(conf, stage, "ece")
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
                reuse=reuse,
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
            d = node(conf, stage, "dece", "value")
            plots.dece_heatmaps(
                out_dir / name,
                maps[stage],
                sample_threshold=spec.dece_binning.sample_threshold,
                dece=d,
                title=f"D-ECE maps {stage} calibration",
                vmax=shared,
                reuse=reuse,
            )
            files.append(name)
        reg = node(ev, "regression", stage, "ence")
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
