"""summary.md: the Markdown summary of a run, rendered from its results (:class:`detcal.core.results.Results`).

:func:`evaluation_summary` for detcal-evaluate, :func:`calibration_summary` for
detcal-calibrate; compare and study write their own text (``detcal.pipeline.compare``,
``detcal.studies``) and :func:`detcal.reports.finish.finish_run` adds the file list.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from detcal.core.results import (
    AccuracyBlock,
    CalibrationEvaluationBlock,
    CalibratorsBlock,
    DiagnosticsBlock,
    LocalisationBlock,
    OCEBlock,
    RegressionBlock,
    Results,
    UQDetrBlock,
    shown,
)
from detcal.core.types import MetricResult, Skipped
from detcal.reports.diagnosis_facts import miscalibration_sentence, tide_sentence
from detcal.reports.measure_rows import before_after_rows
from detcal.reports.per_class import table_markdown
from detcal.reports.tables import comparison_table, format_value, metrics_table

__all__ = ["evaluation_summary", "calibration_summary", "node", "table_row", "REGRESSION_ROWS"]

REGRESSION_ROWS: tuple[tuple[str, str], ...] = (
    ("ence", "ENCE"),
    ("cv", "C_v"),
    ("m_qce", "M-QCE"),
    ("c_qce", "C-QCE"),
    ("nll", "NLL"),
    ("interval_ce", "Kuleshov CE"),
)
"""Regression metrics of the before/after table, per coordinate (key in regression_metrics, label)."""


def _oce_md(o: OCEBlock | Skipped | None, u: UQDetrBlock | Skipped | None) -> list[str]:
    """OCE, what it does not see, the image-level reliability and the uq_detr variants."""
    out: list[str] = []
    oce = o.metric("oce") if isinstance(o, OCEBlock) else None
    if isinstance(o, OCEBlock) and oce is not None:
        p, by_agg, seen = oce.params, o["by_aggregation"], o["not_seen"]
        out += [
            f"### Object-level calibration (OCE, Park et al. 2026; docs/newest_measures.md; Brier: {p['brier']})",
            "",
            comparison_table({"detector": by_agg}, list(by_agg), label="aggregation"),
            f"IoU thresholds {p['iou_thresholds']}; objects: {p['objects']}. Not seen by OCE: "
            + ", ".join(f"{k}: {v}" for k, v in seen["n_overlapping_no_object"].items())
            + f" of {seen['n_detections']} detections overlap no object.",
            "",
        ]
        r = o.get("image_reliability") or {}
        if r.get("lambda") is not None:
            out += [
                f"Image-level reliability (contrastive confidence, {r['method']} {r['param']}): lambda "
                f"{r['lambda']} fitted on {r['n_validation']} images (Pearson {format_value(r['pearson_validation'])}"
                f"), Pearson with minus the per-image OCE on the other {r['n_test']}: "
                f"{format_value(r['pearson_test'])}" + (f" -- WARNING: {r['warning']}" if r.get("warning") else ""),
                "",
            ]
    if isinstance(u, UQDetrBlock) and "lrp" in u:
        out += [
            "### D-ECE, LaECE, LRP with uq-detr's conventions (uq_detr variants)",
            "",
            comparison_table({"detector": u.entries}, ["dece", "laece", "lrp"], label=""),
            "",
        ]
    return out


def evaluation_summary(results: Results) -> str:
    """summary.md of an evaluation, from its results (the numbers as metrics.json writes them)."""
    m = results.content
    parts = _header_md(m)
    head = {k: {"value [CI]": v, "source": v.get("source", "")} for k, v in m["headline"].items()}
    if head:
        parts += ["", "## Headline", "", comparison_table(head, ["value [CI]", "source"], label="metric")]
    diag = results.diagnostics
    parts += _diagnosis_md(diag.entries if isinstance(diag, DiagnosticsBlock) else {})
    parts += _confidence_md(results)
    block = results.regression
    if isinstance(block, RegressionBlock):
        reg = block.per_coordinate()
        s = block.sample
        coords = list(dict.fromkeys(c for per in reg.values() for c in per))
        parts += [
            f"### Box-uncertainty calibration ({s['space']} space, N = {s['n']} TP at IoU {s['iou_threshold']})",
            "",
            comparison_table(reg, coords, label="metric"),
            "",
        ]
    else:
        why = block.reason if isinstance(block, Skipped) else "not computed"
        parts += ["### Box-uncertainty calibration", "", f"skipped: {why}", ""]
    parts += _accuracy_md(results.accuracy, results.localisation)
    parts += _oce_md(results.oce, results.uq_detr)
    pc = m.get("per_class") or {}
    if pc.get("rows"):
        parts += [
            f"### Per class at {pc['iou']} (the {min(pc['top_n'], len(pc.get('rows') or []))} most frequent classes)",
            "",
            table_markdown(pc["rows"]),
            "",
        ]
    for label, mp in (m.get("dece_maps") or {}).items():
        for name, spec in mp.items():
            g = np.asarray([[np.nan if v is None else v for v in row] for row in spec["gap"]], dtype=float)
            parts.append(
                f"- D-ECE map {name} at {label}: grid {list(g.shape)}, "
                f"max gap {format_value(np.nanmax(g) if np.isfinite(g).any() else None)}"
            )
    parts += [
        "",
        "Definitions: docs/metrics.md; matching rules: docs/matching.md.",
        "Files: " + ", ".join(m.get("files") or []),
        "",
    ]
    return "\n".join(parts)


def _diagnosis_md(diag: Mapping[str, Any]) -> list[str]:
    """The two leading diagnostics findings (metrics.json ``diagnostics.findings`` has them and the rest)."""
    lines = [f"- {s}" for s in (miscalibration_sentence(diag), tide_sentence(diag)) if s]
    return ["", "## Findings", "", *lines, ""] if lines else []


def _header_md(m: Mapping[str, Any]) -> list[str]:
    """The title and the data / matching / detection-accounting / variants lines of summary.md."""
    parts = [f"# detcal-evaluate summary (detcal {m['detcal_version']})", ""]
    d = m["data"]
    c = d["counts"]
    parts.append(
        f"- data: {d.get('source')} ({c['images']} images, {c['gt']} GT, {c['detections']} detections; "
        f"box uncertainty: {c['uncertainty'] or 'none'})"
    )
    mt = m["matching"]
    asked = [t for t in (mt.get("iou_thresholds") or []) if t not in (mt.get("regression_only_thresholds") or [])]
    parts.append(
        f"- matching: mode={mt['mode']}, IoU thresholds={asked if asked else mt.get('iou_thresholds')}"
        + (
            f" (+ {mt['regression_only_thresholds']} for the box-uncertainty sample only)"
            if mt.get("regression_only_thresholds")
            else ""
        )
        + f", class_agnostic={mt['class_agnostic']}, score_threshold={mt['score_threshold']}, "
        f"max_dets={mt['max_dets']}"
    )
    acc = m["detections"]
    left = acc.get("left_out_at_loading") or {}
    parts.append(
        f"- detections: {acc['input']} in the input; left out: "
        f"{left.get('unknown_category', 0)} with a category not in the ground truth, "
        f"{acc['below_score_threshold']} below the score threshold, {acc['beyond_max_dets']} beyond max_dets; "
        f"{acc['considered']} considered"
    )
    for label, pt in acc["per_threshold"].items():
        parts.append(
            f"  - at {label}: {pt['evaluated']} evaluated ({pt['true_positives']} TP, "
            f"{pt['false_positives']} FP), {pt['ignored_region']} in ignored regions (crowd, DontCare, "
            f"neighbour class) left out"
        )
    parts.append(f"- relative features clipped to [0, 1]: {m['features']['n_clipped']} detections")
    for k, v in m["variants"].items():
        parts.append(f"- {k}: {v}")
    for w in m.get("warnings") or []:
        parts.append(f"- WARNING: {w}")
    return parts


def table_row(entry: Any) -> Any:
    """What a metrics table reads of ``entry``: a metric without its per-bin ``table`` and ``extra`` (which
    the row does not show; converting them to plain Python made a third of summary.md's time), else ``entry``."""
    return dataclasses.replace(entry, table={}, extra={}) if isinstance(entry, MetricResult) else entry


def _confidence_md(results: Results) -> list[str]:
    """The confidence-calibration tables of summary.md, one per IoU threshold, with the D-ECE grid's occupancy."""
    parts: list[str] = []
    for label, block in results.confidence.items():
        if isinstance(block, Skipped):
            parts += [f"### Confidence calibration at {label}", "", f"skipped: {block.reason}", ""]
            continue
        s = block.sample
        parts += [
            metrics_table(
                {k: table_row(v) for k, v in block.public().items()},
                title=f"Confidence calibration at {label} (N = {s['n']}, matched {s['n_matched']})",
            )
        ]
        dece = block.metrics().get("dece")
        ex = dece.extra if dece is not None else {}
        if ex:
            parts.append(
                f"D-ECE grid: {ex.get('cells')} cells, {ex.get('occupied_cells')} occupied, "
                f"{ex.get('kept_cells')} kept (N_c >= threshold); sparse-sample fraction "
                f"{format_value(ex.get('sparse_fraction'))}, dropped fraction "
                f"{format_value(ex.get('dropped_fraction'))}"
                + (" -- WARNING: more cells than samples/10" if ex.get("sparse_warning") else "")
            )
        parts.append("")
    return parts


def _protocol_accuracy_md(acc: AccuracyBlock) -> list[str]:
    """VOC AP, LVIS AP with the per-frequency calibration, or Open Images AP (docs/formats.md)."""
    out: list[str] = []
    proto = acc.protocol()
    if "voc_ap" in proto:
        rows = {v: {"mAP": e.get("mAP")} for v, e in proto["voc_ap"].items()}
        out += [
            "### Accuracy (VOC AP at IoU 0.5, the devkit's rules)",
            "",
            comparison_table(rows, ["mAP"], label="variant"),
            "",
        ]
    if "lvis_ap" in proto:
        out += [
            "### Accuracy (LVIS, equal to LVISEval)",
            "",
            comparison_table({"detector": proto["lvis_ap"]}, list(proto["lvis_ap"]), label=""),
            "",
        ]
    if "calibration_by_frequency" in proto:
        cols = ["n", "n_positive", "ece", "dece", "laece"]
        out += [
            "### Calibration per LVIS frequency group (IoU 0.5, the LVIS sample)",
            "",
            comparison_table(dict(proto["calibration_by_frequency"]), cols, label="group"),
            "",
        ]
    if "openimages_ap" in proto:
        e = proto["openimages_ap"]
        out += ["### Accuracy (Open Images AP at IoU 0.5, the challenge's rules)", "", f"mAP: {e.get('mAP')}", ""]
    return out


def _accuracy_md(acc: AccuracyBlock | Skipped | None, loc: LocalisationBlock | Skipped | None) -> list[str]:
    """Accuracy beside calibration: COCO AP/AR or KITTI AP, and LRP / LaECE."""
    a = acc if isinstance(acc, AccuracyBlock) else AccuracyBlock()
    lb = loc if isinstance(loc, LocalisationBlock) else LocalisationBlock()
    out: list[str] = []
    kitti = a.protocol().get("kitti_ap")
    if a.metric("AP") is not None:
        leaves = a.metrics()
        out += [
            "### Accuracy (COCO AP/AR from detcal's matching; equal to pycocotools' summarize)",
            "",
            comparison_table({"detector": leaves}, list(leaves), label=""),
            f"GT areas: {a.get('_areas')}",
            "",
        ]
    elif kitti:
        rows = {
            f"{r.get('class', r['category'])} {r['difficulty']}": {"AP11": r.get("ap11"), "AP40": r.get("ap40")}
            for r in kitti
        }
        out += [
            "### Accuracy (KITTI AP, the devkit's eval_class)",
            "",
            comparison_table(rows, ["AP11", "AP40"], label="class, difficulty"),
            "",
        ]
    out += _protocol_accuracy_md(a)
    lrp = lb.metric("lrp")
    if lrp is not None:
        leaves = {k: m for k in ("lrp", "olrp", "laece", "laace") if (m := lb.metric(k)) is not None}
        out += [
            "### Localisation-aware measures (Kuzucu et al. 2024; docs/newest_measures.md)",
            "",
            comparison_table({"detector": leaves}, list(leaves), label=""),
            "LRP components (loc, FP, FN): " + ", ".join(format_value(lrp.extra.get(k)) for k in LRP_COMPONENTS),
            "",
        ]
    return out


LRP_COMPONENTS: tuple[str, ...] = ("lrp_loc", "lrp_fp", "lrp_fn")
"""The components of LRP in its ``extra`` (localisation error, false-positive and false-negative parts)."""


def node(block: Mapping[str, Any], *path: str) -> Any:
    node: Any = block
    for k in path:
        if not isinstance(node, Mapping) or k not in node:
            return None
        node = node[k]
    return node


def _diff(a: MetricResult, b: MetricResult, paired: Mapping[str, Any] | None = None) -> Any:
    """After minus before; with its paired-bootstrap interval over images when there is one."""
    if paired and paired.get("difference") is not None:
        return {
            "value": paired["difference"],
            "ci": paired.get("ci") if any(v is not None for v in paired.get("ci") or []) else None,
        }
    if shown(a.value) is None or shown(b.value) is None:
        return None
    return float(a.value) - float(b.value)


def _before_after_table(block: CalibrationEvaluationBlock) -> str:
    """Each measure before, after and its change (typed leaves; the paired changes as metrics.json writes them)."""
    rows: dict[str, dict[str, Any]] = {}
    before, after, change = block.before("confidence"), block.after("confidence"), block.change("confidence")
    for key, label in before_after_rows():  # labels from the registry (detcal.metrics.measures)
        b, a = before.get(key), after.get(key)
        if b is not None and a is not None:
            rows[f"{label}"] = {"before": b, "after": a, "change": _diff(a, b, change.get(key))}
    before, after, change = block.before("regression"), block.after("regression"), block.change("regression")
    mean_b, mean_a = block.means("regression", "before"), block.means("regression", "after")
    for key, label in (("ence", "ENCE"), ("m_qce", "M-QCE"), ("nll", "NLL")):
        b, a = mean_b.get(key), mean_a.get(key)
        if b is not None and a is not None:
            rows[f"{label} (box, mean over coords)"] = {"before": b, "after": a, "change": _diff(a, b, change.get(key))}
    coords = list((before.get("ence") or {}).keys())
    for key, label in REGRESSION_ROWS:
        for c in coords:
            b, a = (before.get(key) or {}).get(c), (after.get(key) or {}).get(c)
            if b is not None and a is not None:
                rows[f"{label} {c}"] = {"before": b, "after": a, "change": _diff(a, b)}
    for c in coords:
        a = (after.get("interval_ce_cdf") or {}).get(c)
        if a is not None:
            rows[f"Kuleshov CE {c} (recalibrated CDF)"] = {"after": a}
    return (
        comparison_table(rows, ["before", "after", "change"], label="metric")
        + "\nchange = after - before; [interval]: paired bootstrap over images (docs/calibration.md#paired-bootstrap)\n"
    )


def calibration_summary(results: Results) -> str:
    """summary.md of detcal-calibrate, from its results."""
    m = results.content
    roles = results.calibrators
    sp = m["split"]
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
        typed = roles.role(role) if isinstance(roles, CalibratorsBlock) else None
        c = typed if isinstance(typed, Mapping) else None
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
            why = typed.reason if isinstance(typed, Skipped) else "not configured"
            parts.append(f"- {role} calibrator: none ({why})")
    ev = results.evaluation
    if not isinstance(ev, CalibrationEvaluationBlock):
        ev = CalibrationEvaluationBlock()
    es = ev.sample
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
    parts += ["", "## Before / after (held-out evaluation split)", "", _before_after_table(ev)]
    in_sample = CalibrationEvaluationBlock.from_json(m["in_sample"]) if m.get("in_sample") else None
    if isinstance(in_sample, CalibrationEvaluationBlock):
        parts += [
            "## In-sample (calibration split; optimistic, for reference only)",
            "",
            _before_after_table(in_sample),
        ]
    parts += [
        "Definitions: docs/metrics.md; calibrators and protocol: docs/calibration.md.",
        "Files: " + ", ".join(m.get("files") or []),
        "",
    ]
    return "\n".join(parts)
