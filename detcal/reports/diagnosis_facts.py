"""The two leading diagnostics facts of a run, read from metrics.json's ``diagnostics`` (docs/metrics.md#diagnostics).

* the error type that carries the largest part of the miscalibration (of the
  D-ECE when its per-detection parts were computed, else of the ECE), true
  positives left aside;
* the costliest TIDE error: the main type whose fix gains the most AP.

The same choice feeds the ``findings`` sentences of metrics.json, the top of
summary.md and the Findings list of report.html, so the three always name the
same type. Every value returned is the one metrics.json holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TYPE_NAMES", "largest_miscalibration", "costliest_error", "miscalibration_sentence", "tide_sentence"]

TYPE_NAMES: dict[str, str] = {
    "cls": "classification errors (right box, wrong class)",
    "loc": "localisation errors (right class, IoU between the background and foreground thresholds)",
    "both": "errors of both class and box",
    "dupe": "duplicate detections",
    "bkg": "background detections (no object there)",
    "miss": "missed objects",
    "other": "other false positives",
    "tp": "true positives",
}
"""Plain names of the TIDE error types and the other groups of the calibration split."""


def largest_miscalibration(diag: Mapping[str, Any]) -> tuple[str, str, Mapping[str, Any], Mapping[str, Any]] | None:
    """(group, ``"D-ECE"`` or ``"ECE"``, the group's record, the ``calibration_by_error_type`` record) of the
    error group with the largest positive part of the calibration error; None when no error group adds to it."""
    cb = diag.get("calibration_by_error_type")
    if not isinstance(cb, Mapping) or not isinstance(cb.get("types"), Mapping):
        return None
    key = "dece_contribution" if cb.get("dece_from_contributions") else "ece_contribution"
    types = cb["types"]
    vals = {k: v[key] for k, v in types.items() if v.get(key) is not None and v.get("n") and k != "tp"}
    k = max(vals, key=lambda g: vals[g]) if vals else None
    if k is None or not vals[k] > 0:
        return None
    return k, "D-ECE" if key == "dece_contribution" else "ECE", types[k], cb


def costliest_error(diag: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """(main TIDE type with the largest dAP, the ``tide`` record); the type is ``""`` when no type costs AP;
    None without TIDE."""
    t = diag.get("tide")
    if not isinstance(t, Mapping) or not isinstance(t.get("dap"), Mapping) or not t["dap"]:
        return None
    dap = t["dap"]
    top = max(dap, key=lambda k: dap[k])
    return (top if dap[top] > 0 else ""), t


def tide_sentence(diag: Mapping[str, Any]) -> str | None:
    """The plain sentence on the costliest TIDE error (metrics.json ``findings``, summary.md)."""
    c = costliest_error(diag)
    if c is None:
        return None
    top, t = c
    if not top:
        return f"TIDE: no error type costs AP (AP {t['ap']:.2f})."
    return (
        f"TIDE: fixing the {TYPE_NAMES[top]} would gain the most AP ({t['dap'][top]:.2f} points of "
        f"{t['ap']:.2f}); scoring every false positive below every true positive would gain "
        f"{t['special_dap']['fp']:.2f}."
    )


def miscalibration_sentence(diag: Mapping[str, Any]) -> str | None:
    """The plain sentence on the error type carrying most of the miscalibration (metrics.json ``findings``,
    summary.md)."""
    c = largest_miscalibration(diag)
    if c is None:
        return None
    k, metric, v, cb = c
    share = v["dece_share" if metric == "D-ECE" else "ece_share"]
    pct = "share n/a" if share is None else f"{share:.0%}"
    return (
        f"Miscalibration: the {TYPE_NAMES[k]} carry the largest share of the {metric} at {cb['iou']} "
        f"({pct}; {v['n']} detections at mean confidence {v['mean_confidence']:.2f})."
    )
