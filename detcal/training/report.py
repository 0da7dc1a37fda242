"""The Table 1 analogue of the main job (Levi et al. 2019, Table 1 layout): per-variant summaries of
the evaluation records, the table's JSON and its Markdown.

ENCE = (1/B) sum_b |RMV(b) - RMSE(b)| / RMV(b), RMV(b) = sqrt(mean_b sigma^2),
RMSE(b) = sqrt(mean_b (y - mu)^2) (Levi et al. Eq. 8); C_v = std(sigma, ddof=1) /
mean(sigma) (Eq. 9). Std scaling multiplies sigma by a constant per coordinate,
so C_v is unchanged by it (the paper's point: calibration does not create dispersion).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from detcal.core.types import COORDS
from detcal.metrics.paired import paired_bootstrap_many
from detcal.metrics.regression import coefficient_of_variation, ence

__all__ = [
    "PAPER_TABLE1",
    "ROW_LABELS",
    "DEFINITIONS",
    "row_label",
    "summaries",
    "table1_markdown",
    "intervals_markdown",
    "detection_row",
    "ence_changes",
    "conclusion",
]

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
    from scipy.stats import spearmanr  # lazy: scipy kept out of start-up

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
        conf = {
            "iou": conf_label,
            "ece": block["ece"]["value"],
            "dece": block["dece"]["value"],
            "n": block["_sample"]["n"],
            "ece_bins": block["ece"]["params"].get("bins"),
            "dece_bins": block["dece"]["params"].get("bins"),
        }
    counts = {}
    acc = metrics["detections"]
    for label, c in acc["per_threshold"].items():
        tp, fp = int(c["true_positives"]), int(c["false_positives"])
        counts[label] = {
            "detections": int(acc["considered"]),
            "true_positives": tp,
            "false_positives": fp,
            "ignored": int(c["ignored_region"]),
            "precision": tp / (tp + fp) if tp + fp else float("nan"),
        }
    return {
        "ence": ence,
        "cv": cv,
        "ence_tables": tables,
        "rmse_rmv_spearman": rho,
        "n_tp": int(reg["_sample"]["n"]),
        "confidence": conf,
        "detection": counts,
        "gt": int(metrics["data"]["counts"]["gt"]),
    }


def _fmt_pct(x: float) -> str:
    return "nan" if not np.isfinite(x) else f"{100 * x:.1f}%"


def intervals_markdown(iv: Mapping[str, Any] | None, cols: list[str]) -> list[str]:
    """Lines of the interval columns (conformal beside std scaling and isotonic); none without them."""
    if not iv:
        return []
    lv = float(iv["level"])
    lines = [
        "",
        f"Intervals on val: coverage of the central {lv:.0%} interval [bootstrap interval], mean width (deltas), "
        "ENCE and interval CE per coordinate (conformal: split conformal fitted on recal, its interval exactly):",
        "",
        "| variant | quantity | " + " | ".join(cols) + " |",
        "|---|---|" + "---|" * len(cols),
    ]
    for v, d in iv["variants"].items():
        cov = []
        for c in cols:
            ci = d["coverage_ci"][c]
            band = "" if ci is None else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"
            cov.append(f"{100 * d['coverage'][c]:.1f}%{band}")
        lines.append(f"| {v} | coverage | " + " | ".join(cov) + " |")
        lines.append(f"| {v} | width | " + " | ".join(f"{d['width'][c]:.4f}" for c in cols) + " |")
        lines.append(f"| {v} | ENCE | " + " | ".join(_fmt_pct(d["ence"][c]) for c in cols) + " |")
        lines.append(f"| {v} | interval CE | " + " | ".join(f"{d['interval_ce'][c]:.4f}" for c in cols) + " |")
    for v, per in iv.get("paired_vs_std_scaling", {}).items():
        cells = []
        for c in cols:
            ci = per[c].get("ci") or [float("nan"), float("nan")]
            cells.append(f"{100 * per[c]['difference']:+.1f} [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}]")
        lines.append(f"| {v} - std scaling | coverage (points) | " + " | ".join(cells) + " |")
    cl = iv["claim"]
    lines += ["", f"Claim: {cl['statement']}: {'holds' if cl['holds'] else 'does not hold'} on this run."]
    for v, cs in cl.get("interval_contains_nominal", {}).items():
        lines.append(f"- {v}: the coverage interval contains {lv:.0%} on {', '.join(cs) if cs else 'no coordinate'}")
    return lines


CV_NOISE = 1e-12
"""A C_v difference below this share of C_v is floating-point noise: printed as 0 (table1.json keeps it)."""


def cv_change_text(d: Any, a: Any) -> str:
    """A C_v change as text: ``0`` when ``|d| <= CV_NOISE * |a|`` (the rule :data:`CV_NOISE` states),
    else signed in scientific notation."""
    if not isinstance(d, (int, float)) or not math.isfinite(d):
        return "undefined"
    if isinstance(a, (int, float)) and abs(d) <= CV_NOISE * abs(a):
        return "0"
    return f"{d:+.1e}"


def _cv_markdown(t: Mapping[str, Any], cols: list[str], head: str) -> list[str]:
    """C_v per variant: one sentence when every variant equals the C_v row to :data:`CV_NOISE`, else a table."""
    before = t["rows"].get("C_v") or {}
    same = all(
        isinstance(before.get(c), (int, float))
        and abs(float(vals[c]) - float(before[c])) <= CV_NOISE * abs(float(before[c]))
        for vals in t["cv"].values()
        for c in cols
    )
    if same and before:
        return [
            "",
            f"C_v of every variant ({', '.join(t['cv'])}) equals the C_v row above to a relative {CV_NOISE:g}: "
            "std scaling and isotonic multiply sigma by a constant per coordinate (values in table1.json `cv`).",
        ]
    lines = ["", "C_v per variant:", "", head.rstrip("\n")]
    for v, vals in t["cv"].items():
        lines.append(f"| C_v {v} | " + " | ".join(f"{float(vals[c]):.6f}" for c in cols) + " |")
    return lines


def table1_markdown(t: Mapping[str, Any]) -> str:
    """Markdown of the Table 1 analogue (Levi et al. 2019 layout) plus calibration and detection sanity."""
    cols = list(t["columns"])
    head = "| | " + " | ".join(cols) + " |\n|---|" + "---|" * len(cols) + "\n"
    lines = [
        f"## Table 1 analogue (Levi et al. 2019): {t['split']} split, N = {t['n_tp_val']} true positives at IoU "
        f"{t['iou_threshold']}; ENCE over {t['bins']} {t['binning']} bins of sigma",
        "",
        head.rstrip("\n"),
    ]
    for row, vals in t["rows"].items():
        fmt = (lambda v: f"{v:.2f}") if row.startswith("C_v") else _fmt_pct
        lines.append(f"| {row} | " + " | ".join(fmt(float(vals[c])) for c in cols) + " |")
    if t.get("std_scaling_s"):
        lines.append(
            "| s (std scaling, fitted on recal) | "
            + " | ".join(f"{float(t['std_scaling_s'][c]):.3f}" for c in cols)
            + " |"
        )
    lines += _changes_markdown(t, cols)
    lines += intervals_markdown(t.get("intervals"), cols)
    lines += _cv_markdown(t, cols, head)
    lines += [
        "",
        "Spearman correlation of RMSE(b) with RMV(b) over the bins (1: the error rises with the predicted std):",
        "",
        head.rstrip("\n"),
    ]
    for v, vals in t["rmse_rmv_spearman"].items():
        lines.append(f"| {v} | " + " | ".join(f"{float(vals[c]):.2f}" for c in cols) + " |")
    lines += [
        "",
        "Detection and confidence calibration (before recalibration):",
        "",
        "| split | detections | TP | FP | precision | ECE | D-ECE |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d in t["detection"].items():
        c = d.get("confidence", {})
        lines.append(
            f"| {name} ({d.get('iou', '')}) | {d['detections']} | {d['true_positives']} | {d['false_positives']} | "
            f"{d['precision']:.3f} | {float(c.get('ece', float('nan'))):.4f} | {float(c.get('dece', float('nan'))):.4f} |"
        )
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
    row["confidence"] = {
        "ece": conf.get("ece"),
        "dece": conf.get("dece"),
        "ece_bins": conf.get("ece_bins"),
        "dece_bins": conf.get("dece_bins"),
    }
    row["gt"] = summ["gt"]
    return row


def _coord_metric(fn: Callable[..., Any], k: int, **kw: Any) -> Callable[..., Any]:
    def metric(mu: np.ndarray, sigma: np.ndarray, y: np.ndarray) -> Any:
        return fn(mu[:, k], sigma[:, k], y[:, k], **kw)

    return metric


def ence_changes(
    sample: Any,
    fitted: Mapping[str, Any],
    *,
    bins: int,
    binning: str,
    n_boot: int,
    level: float,
    seed: int,
    method: str,
) -> dict[str, dict[str, Any]]:
    """After minus before of ENCE and C_v per coordinate, for each fitted calibrator, with paired
    bootstrap intervals over the val images (:func:`detcal.metrics.paired.paired_bootstrap_many`:
    one image draw per replicate shared by both sides; ``method`` bca | bc | percentile).

    ``sample``: the val true positives before calibration (a
    :class:`~detcal.metrics.spaces.RegressionSample`, delta space); ``fitted``:
    calibrators by name (``transform(mu, sigma)``). Returns
    ``{variant: {"ence": {coord: PairedDifference dict}, "cv": {...}}}``.
    """
    fns: dict[str, Callable[..., Any]] = {}
    for k, c in enumerate(COORDS):
        fns[f"ence/{c}"] = _coord_metric(ence, k, bins=bins, binning=binning)
        fns[f"cv/{c}"] = _coord_metric(coefficient_of_variation, k)
    out: dict[str, dict[str, Any]] = {}
    for name, cal in fitted.items():
        mu_b, sg_b = cal.transform(sample.mu, sample.sigma)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ch = paired_bootstrap_many(
                fns,
                sample.image_id,
                (sample.mu, sample.sigma, sample.y),
                None,
                (np.asarray(mu_b), np.asarray(sg_b), sample.y),
                n_boot=n_boot,
                level=level,
                seed=seed,
                method=method,
                fast=False,
            )
        out[name] = {
            m: {
                c: {
                    **ch[f"{m}/{c}"].to_dict(),
                    "params": {"bins": bins, "binning": binning} if m == "ence" else {"ddof": 1},
                }
                for c in COORDS
            }
            for m in ("ence", "cv")
        }
    return out


def conclusion(changes: Mapping[str, Any], variant: str = "std_scaling", cv_rtol: float = 1e-9) -> dict[str, Any]:
    """Levi et al.'s Table 1 claim on this run: ``variant`` lowers the val ENCE on every coordinate and
    leaves C_v unchanged (relative change <= ``cv_rtol``); and whether each ENCE change's interval excludes 0."""
    if variant not in changes:
        return {"variant": variant, "holds": None, "note": f"{variant} was not fitted"}
    ch = changes[variant]
    lowered = {c: bool(ch["ence"][c]["difference"] is not None and ch["ence"][c]["difference"] < 0) for c in COORDS}
    excl = {c: bool(ch["ence"][c]["excludes_zero"] and ch["ence"][c]["ci"][1] < 0) for c in COORDS}
    cv_same = {
        c: bool(ch["cv"][c]["a"] is not None and abs(ch["cv"][c]["difference"]) <= cv_rtol * abs(ch["cv"][c]["a"]))
        for c in COORDS
    }
    return {
        "variant": variant,
        "claim": f"{variant} lowers the val ENCE on every coordinate, C_v unchanged",
        "holds": all(lowered.values()) and all(cv_same.values()),
        "ence_lowered": lowered,
        "ence_interval_below_zero": excl,
        "all_intervals_below_zero": all(excl.values()),
        "cv_unchanged": cv_same,
        "cv_rtol": cv_rtol,
    }


def _changes_markdown(t: Mapping[str, Any], cols: list[str]) -> list[str]:
    ch = t.get("ence_change")
    if not ch:
        return []
    first = ch[next(iter(ch))]["ence"][cols[0]]
    b = first["bootstrap"]
    lines = [
        "",
        f"Change of the val ENCE (after - before), with {100 * b['level']:.0f}% paired bootstrap intervals over "
        f"the {b['n_images']} val images ({b['method']}, {b['n_boot']} replicates, seed {b['seed']}); "
        "'excludes 0' says whether the interval lies wholly on one side of 0:",
        "",
        "| change | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for v, d in ch.items():
        cells = []
        for c in cols:
            e = d["ence"][c]
            lo, hi = e["ci"]
            ci = "undefined" if lo is None or hi is None else f"[{100 * lo:+.1f}, {100 * hi:+.1f}]"
            cells.append(
                f"{100 * e['difference']:+.1f} pp {ci}" + (" excludes 0" if e["excludes_zero"] else " includes 0")
            )
        lines.append(f"| ENCE {v.replace('_', ' ')} - before | " + " | ".join(cells) + " |")
    for v, d in ch.items():
        lines.append(
            f"| C_v {v.replace('_', ' ')} - before | "
            + " | ".join(cv_change_text(d["cv"][c].get("difference"), d["cv"][c].get("a")) for c in cols)
            + " |"
        )
    lines += ["", f"A C_v change below {CV_NOISE:g} of C_v (floating-point noise) reads 0; table1.json keeps it."]
    con = t.get("conclusion", {})
    if con.get("holds") is not None:
        verdict = "holds" if con["holds"] else "does NOT hold"
        below = [c for c, v in con["ence_interval_below_zero"].items() if v]
        lines += [
            "",
            f"Conclusion: '{con['claim']}' {verdict} on this run; the interval of the change lies below 0 for "
            f"{len(below)} of {len(cols)} coordinates ({', '.join(below) or 'none'}).",
        ]
    return lines
