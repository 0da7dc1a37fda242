"""The PNG diagrams of an evaluation (from the strict metrics.json content)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from detcal.reports import plots

__all__ = ["evaluation_plots", "figure_inputs", "plan_evaluation_plots"]


def _f(v: Any) -> Any:
    return np.nan if v is None else v


def figure_inputs(m: Mapping[str, Any]) -> dict[str, Any]:
    """The part of the metrics ``m`` that :func:`plan_evaluation_plots` reads: per threshold the ECE block and
    the D-ECE value, the D-ECE maps and the box-uncertainty block (what a figure process is sent: at 365
    classes about 0.75 MB of the 1.2 MB of metrics, with the intervals' tables and the per-class blocks, to
    pickle and unpickle for nothing). The same figures as from ``m``."""
    confidence = {}
    for label, block in m["confidence"].items():
        kept = {"ece": block["ece"]} if "ece" in block else {}
        dece = block.get("dece")
        if dece is not None:
            kept["dece"] = {"value": dece.get("value")} if isinstance(dece, Mapping) else dece
        confidence[label] = kept
    out = {"confidence": confidence, "regression": m["regression"]}
    if "dece_maps" in m:
        out["dece_maps"] = m["dece_maps"]
    return out


def evaluation_plots(out_dir: Path, m: Mapping[str, Any], spec: Any) -> list[str]:
    """Reliability diagram and D-ECE maps per threshold; RMSE vs RMV, QCE coverage and
    retention curves of the box-uncertainty sample. Returns the file names."""
    jobs = plan_evaluation_plots(out_dir, m, spec)
    for _, draw in jobs:
        draw()
    return [name for name, _ in jobs]


def plan_evaluation_plots(out_dir: Path, m: Mapping[str, Any], spec: Any) -> list[tuple[str, Callable[[], Any]]]:
    """The figures :func:`evaluation_plots` draws, as (file name, drawing call) pairs, nothing drawn yet:
    the names are known before the drawing (which may then run elsewhere, e.g. in a forked child)."""
    files: list[tuple[str, Callable[[], Any]]] = []
    reuse: dict[str, Any] = {}  # a figure of one threshold, redrawn for the next where it fits
    for label, block in m["confidence"].items():
        e = block.get("ece")
        if e:
            t = e["table"]
            name = f"reliability_{label.replace('=', '')}.png"
            draw = partial(
                plots.reliability_diagram,
                out_dir / name,
                t.get("confidence", []),
                t.get("precision", []),
                t.get("count", []),
                ece=_f(e["value"]),
                title=f"Reliability at {label}",
                log_counts=spec.confidence.log_counts,
                reuse=reuse,
            )
            files.append((name, draw))
        mp = (m.get("dece_maps") or {}).get(label)
        if mp:
            name = f"dece_maps_{label.replace('=', '')}.png"
            mp = {
                k: {
                    **v,
                    **{
                        g: np.asarray([[_f(x) for x in row] for row in v[g]], dtype=float)
                        for g in ("gap", "signed_gap")
                        if g in v
                    },
                }
                for k, v in mp.items()
            }
            draw = partial(
                plots.dece_heatmaps,
                out_dir / name,
                mp,
                sample_threshold=spec.dece_binning.sample_threshold,
                dece=_f((block.get("dece") or {}).get("value")),
                title=f"D-ECE maps at {label}",
                reuse=reuse,
            )
            files.append((name, draw))
    reg = m["regression"]
    if "ence" in reg:
        draw = partial(
            plots.rmse_rmv_diagram,
            out_dir / "rmse_rmv.png",
            {c: v["table"] for c, v in reg["ence"].items()},
            ence={c: _f(v["value"]) for c, v in reg["ence"].items()},
            log=spec.regression.log_plot,
        )
        files.append(("rmse_rmv.png", draw))
    if "m_qce" in reg:
        per = reg["m_qce"]
        tau: Any = next((v["table"].get("tau") for v in per.values() if v.get("table", {}).get("tau") is not None), [])
        draw = partial(
            plots.qce_coverage_diagram,
            out_dir / "qce_coverage.png",
            tau,
            {c: v["table"].get("coverage", [np.nan] * len(tau)) for c, v in per.items()},
            mqce={c: _f(v["value"]) for c, v in per.items()},
        )
        files.append(("qce_coverage.png", draw))
    if "r_auc" in reg:
        curves = {
            c: {
                "retained": v["table"].get("retained_fraction", []),
                "error": v["table"].get("error", []),
                "auc": _f(v["value"]),
            }
            for c, v in reg["r_auc"].items()
        }
        draw = partial(plots.retention_diagram, out_dir / "retention.png", curves, ylabel="RMSE on retained")
        files.append(("retention.png", draw))
    return files
