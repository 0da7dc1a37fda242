"""The Table 1 analogue of the main job (Levi et al. 2019, Table 1 layout): per-variant summaries of
the evaluation records, the table's JSON and its Markdown.

ENCE = (1/B) sum_b |RMV(b) - RMSE(b)| / RMV(b), RMV(b) = sqrt(mean_b sigma^2),
RMSE(b) = sqrt(mean_b (y - mu)^2) (Levi et al. Eq. 8); C_v = std(sigma, ddof=1) /
mean(sigma) (Eq. 9). Std scaling multiplies sigma by a constant per coordinate,
so C_v is unchanged by it (the paper's point: calibration does not create dispersion).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from detcal.core.types import COORDS

__all__ = ["PAPER_TABLE1", "ROW_LABELS", "DEFINITIONS", "row_label", "summaries", "table1_markdown", "detection_row"]

ROW_LABELS: dict[str, str] = {
    "before": "ENCE before calibration",
    "std_scaling": "ENCE after std scaling",
    "kuleshov_isotonic": "ENCE after isotonic (Kuleshov)",
}
"""Table 1 row of each evaluated variant (calibrator name); other calibrators get ``ENCE after <name>``."""

PAPER_TABLE1: dict[str, dict[str, float]] = {
    "ENCE before calibration": {"tx": 0.165, "ty": 0.254, "tw": 0.244, "th": 0.126},
    "ENCE after std scaling": {"tx": 0.083, "ty": 0.047, "tw": 0.084, "th": 0.057},
    "ENCE after isotonic (Kuleshov)": {"tx": 0.060, "ty": 0.039, "tw": 0.126, "th": 0.112},
    "C_v": {"tx": 0.40, "ty": 0.33, "tw": 0.38, "th": 0.26},
}
"""Levi et al. 2019, Table 1 (KITTI val, R-FCN), as fractions."""

DEFINITIONS: dict[str, str] = {
    "ENCE": "(1/B) sum_b |RMV(b) - RMSE(b)| / RMV(b), RMV = sqrt(mean sigma^2), RMSE = sqrt(mean (y - mu)^2), "
            "bins over sigma (Levi et al. 2019 Eq. 8; docs/metrics.md)",
    "C_v": "std(sigma, ddof=1) / mean(sigma) (Levi et al. 2019 Eq. 9)",
    "std_scaling": "sigma' = s_k sigma, s_k = sqrt(mean (y - mu)^2 / sigma^2) on recal TPs (closed-form NLL minimiser)",
    "kuleshov_isotonic": "Kuleshov et al. 2018 recalibrated CDF R(Phi((y - mu)/sigma)); mean/std by exact integration",
    "sample": "true positives at the IoU threshold, delta space (tx, ty, tw, th w.r.t. the RoI), unweighted deltas",
}


def row_label(variant: str) -> str:
    """The Table 1 row label of an evaluated variant."""
    return ROW_LABELS.get(variant, f"ENCE after {variant.replace('_', ' ')}")


def _spearman(x: np.ndarray, y: np.ndarray) -> float:
    from scipy.stats import spearmanr

    ok = np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 3:
        return float("nan")
    return float(spearmanr(x[ok], y[ok]).statistic)


def summaries(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Table-1 numbers of one evaluated variant: ENCE and C_v per coordinate, bins, confidence, detection counts."""
    reg = metrics["regression"]
    ence = {c: float(reg["ence"][c]["value"]) for c in COORDS}
    cv = {c: float(reg["cv"][c]["value"]) for c in COORDS}
    tables = {c: {k: reg["ence"][c]["table"][k] for k in ("rmv", "rmse", "count")} for c in COORDS}
    rho = {c: _spearman(np.asarray(tables[c]["rmv"], float), np.asarray(tables[c]["rmse"], float)) for c in COORDS}
    conf_label = next(iter(metrics["confidence"]), None)
    conf = {}
    if conf_label is not None:
        block = metrics["confidence"][conf_label]
        conf = {"iou": conf_label, "ece": block["ece"]["value"], "dece": block["dece"]["value"],
                "n": block["_sample"]["n"], "ece_bins": block["ece"]["params"].get("bins"),
                "dece_bins": block["dece"]["params"].get("bins")}
    counts = {}
    acc = metrics["detections"]
    for label, c in acc["per_threshold"].items():
        tp, fp = int(c["true_positives"]), int(c["false_positives"])
        counts[label] = {"detections": int(acc["considered"]), "true_positives": tp, "false_positives": fp,
                         "ignored": int(c["ignored_region"]), "precision": tp / (tp + fp) if tp + fp else float("nan")}
    return {"ence": ence, "cv": cv, "ence_tables": tables, "rmse_rmv_spearman": rho, "n_tp": int(reg["_sample"]["n"]),
            "confidence": conf, "detection": counts, "gt": int(metrics["data"]["counts"]["gt"])}


def _fmt_pct(x: float) -> str:
    return "nan" if not np.isfinite(x) else f"{100 * x:.1f}%"


def table1_markdown(t: Mapping[str, Any]) -> str:
    """Markdown of the Table 1 analogue (Levi et al. 2019 layout) plus calibration and detection sanity."""
    cols = list(t["columns"])
    head = "| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    lines = [f"## Table 1 analogue (Levi et al. 2019): {t['split']} split, N = {t['n_tp_val']} true positives at IoU "
             f"{t['iou_threshold']}; ENCE over {t['bins']} {t['binning']} bins of sigma", "", head.rstrip("\n")]
    for row, vals in t["rows"].items():
        fmt = (lambda v: f"{v:.2f}") if row.startswith("C_v") else _fmt_pct
        lines.append(f"| {row} | " + " | ".join(fmt(float(vals[c])) for c in cols) + " |")
    if t.get("std_scaling_s"):
        lines.append("| s (std scaling, fitted on recal) | " + " | ".join(f"{float(t['std_scaling_s'][c]):.3f}" for c in cols) + " |")
    lines += ["", "C_v per variant (std scaling and isotonic multiply sigma by a constant per coordinate, so C_v is unchanged):", "",
              head.rstrip("\n")]
    for v, vals in t["cv"].items():
        lines.append(f"| C_v {v} | " + " | ".join(f"{float(vals[c]):.6f}" for c in cols) + " |")
    lines += ["", "Spearman correlation of RMSE(b) with RMV(b) over the bins (1: the error rises with the predicted std):", "",
              head.rstrip("\n")]
    for v, vals in t["rmse_rmv_spearman"].items():
        lines.append(f"| {v} | " + " | ".join(f"{float(vals[c]):.2f}" for c in cols) + " |")
    lines += ["", "Detection and confidence calibration (before recalibration):", "",
              "| split | detections | TP | FP | precision | ECE | D-ECE |", "|---|---|---|---|---|---|---|"]
    for name, d in t["detection"].items():
        c = d.get("confidence", {})
        lines.append(f"| {name} ({d.get('iou', '')}) | {d['detections']} | {d['true_positives']} | {d['false_positives']} | "
                     f"{d['precision']:.3f} | {float(c.get('ece', float('nan'))):.4f} | {float(c.get('dece', float('nan'))):.4f} |")
    paper = t.get("paper", {})
    if paper:
        lines += ["", "Levi et al. 2019, Table 1 (KITTI val, R-FCN), for reference:", "", head.rstrip("\n")]
        for row, vals in paper.items():
            fmt = (lambda v: f"{v:.2f}") if row.startswith("C_v") else _fmt_pct
            lines.append(f"| {row} | " + " | ".join(fmt(float(vals[c])) for c in cols) + " |")
    lines += ["", "Files: " + ", ".join(t["files"]), ""]
    return "\n".join(lines)


def detection_row(name: str, summ: Mapping[str, Any]) -> dict[str, Any]:
    conf = summ["confidence"]
    label = conf.get("iou") or next(iter(summ["detection"]))
    row = dict(summ["detection"].get(label, {}))
    row["iou"] = label
    row["confidence"] = {"ece": conf.get("ece"), "dece": conf.get("dece"), "ece_bins": conf.get("ece_bins"),
                         "dece_bins": conf.get("dece_bins")}
    row["gt"] = summ["gt"]
    return row
