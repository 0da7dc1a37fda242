"""One sentence per finding, generated from the numbers of metrics.json (each number shown is one of them)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detcal.core.results import (
    CalibrationEvaluationBlock,
    ConfidenceBlock,
    DiagnosticsBlock,
    Results,
    as_results,
    shown,
)
from detcal.core.types import MetricResult
from detcal.reports.diagnosis_facts import TYPE_NAMES, costliest_error, largest_miscalibration
from detcal.reports.html.fmt import ci_text, esc, is_number, num, num_attr

__all__ = ["findings"]


def _pct(v: Any) -> str:
    """A fraction in percent with one decimal, its exact value in ``data-v`` (a dash when not a number)."""
    return f"<span class=n{num_attr(v)}>{100 * v:.1f}%</span>" if is_number(v) else "<span>–</span>"


def _first_ece(res: Results) -> tuple[str, MetricResult] | None:
    """(label, ECE) of the first computed confidence threshold; calibrate: (``before``, the ECE before)."""
    if res.confidence:
        for label, blk in res.confidence.items():
            ece = blk.metric("ece") if isinstance(blk, ConfidenceBlock) else None
            if ece is not None:
                return label, ece
        return None
    ev = res.evaluation
    ece = ev.before("confidence").get("ece") if isinstance(ev, CalibrationEvaluationBlock) else None
    return ("before", ece) if isinstance(ece, MetricResult) else None


def _when(label: str) -> str:
    """``At iou=0.50`` for a threshold, ``Before calibration`` / ``After calibration`` for a stage."""
    if label in ("before", "after"):
        return f"{label.capitalize()} calibration"
    return f"At {esc(label)}"


def _bin_sentences(label: str, ece: MetricResult) -> list[str]:
    """Where the confidence is too high or too low, from the ECE bins."""
    count, prec, conf = (shown(ece.table.get(k)) or [] for k in ("count", "precision", "confidence"))
    n_bins = len(count)
    rows = [
        (b, count[b], prec[b], conf[b]) for b in range(n_bins) if is_number(prec[b]) and is_number(conf[b]) and count[b]
    ]
    if not rows:
        return []
    out = []
    over = [r for r in rows if r[3] > r[2]]
    under = [r for r in rows if r[3] < r[2]]
    for kind, group in (("over-confident", over), ("under-confident", under)):
        if not group:
            continue
        lo = min(r[0] for r in group) / n_bins
        worst = max(group, key=lambda r: r[1] * abs(r[3] - r[2]))
        share = len(group) == len(rows)
        where = (
            "in every occupied confidence bin"
            if share
            else f"in {len(group)} of {len(rows)} occupied bins (from {lo:.2f} up)"
        )
        out.append(
            f"{_when(label)}, the detector is <b>{kind}</b> {where}; the largest weight of the gap is at "
            f"confidence {num(worst[3], 2)}: precision {num(worst[2], 2)} over {num(worst[1])} detections."
        )
    return out


def _headline_sentence(name: str, h: Mapping[str, Any]) -> str:
    v, ci = h.get("value"), h.get("ci")
    if not is_number(v):
        return ""
    s = f"<b>{esc(name)}</b> = {num(v)}"
    if ci and ci_text(ci):
        s += f" ({num(h.get('ci_level'), 2)} interval {ci_text(ci)})"
        if not (ci[0] <= v <= ci[1]):
            s += " (the interval does not contain the estimate: the bootstrap distribution is shifted; see its note)"
    else:
        s += " (no interval)"
    return s + "."


def _map_sentences(maps: Mapping[str, Any]) -> list[str]:
    out = []
    for label, per in (maps or {}).items():
        if not isinstance(per, Mapping):
            continue
        for m in per.values():
            if not isinstance(m, Mapping) or "gap" not in m:
                continue
            best = None
            for i, row in enumerate(m["gap"]):
                for j, v in enumerate(row):
                    if is_number(v) and (best is None or abs(v) > abs(best[2])):
                        best = (i, j, v)
            if best:
                a = m.get("axes", ["f1", "f2"])
                kind = "over-confident" if best[2] > 0 else "under-confident"
                out.append(
                    f"D-ECE map over ({esc(a[0])}, {esc(a[1])}) at {esc(label)}: the largest gap, "
                    f"{num(best[2])} ({kind}), is in {esc(a[0])} bin {best[0]}, {esc(a[1])} bin {best[1]}."
                )
        break  # the first threshold (or 'before') only
    return out


def _change_sentences(change: Mapping[str, Any]) -> list[str]:
    out = []
    for name, c in (change or {}).items():
        if not isinstance(c, Mapping) or not is_number(c.get("a")) or not is_number(c.get("b")):
            continue
        verb = "lowers" if c["b"] < c["a"] else "raises"
        sure = "the interval excludes 0" if c.get("excludes_zero") else "the interval includes 0: not a clear change"
        out.append(
            f"Calibration {verb} {esc(name)} from {num(c['a'])} to {num(c['b'])} "
            f"(paired difference {num(c.get('difference'))} {ci_text(c.get('ci'))}; {sure})."
        )
    return out


def _diff_sentences(diffs: Any) -> list[str]:
    """One sentence per detector: the differences from the baseline whose paired interval excludes 0."""
    by_det: dict[str, list[Mapping[str, Any]]] = {}
    for d in diffs or []:
        if isinstance(d, Mapping) and d.get("excludes_zero") and is_number(d.get("diff")):
            by_det.setdefault(str(d["detector"]), []).append(d)
    out = []
    for det, rows in by_det.items():
        parts = [
            f"{esc(d['metric'])} {'+' if d['diff'] > 0 else ''}{num(d['diff'])} {ci_text(d.get('ci'))}" for d in rows
        ]
        out.append(
            f"{esc(det)} vs {esc(rows[0]['baseline'])} (paired over images, intervals that exclude 0): "
            + "; ".join(parts)
            + "."
        )
    return out


def _best_sentences(table: Any) -> list[str]:
    """compare: the best detector by AP and by ECE / D-ECE, with their intervals."""
    rows = [r for r in table or [] if isinstance(r, Mapping) and "detector" in r] if isinstance(table, list) else []
    out = []
    for key, best, what in (("ece", min, "lowest ECE"), ("dece", min, "lowest D-ECE"), ("AP", max, "highest AP")):
        ok = [r for r in rows if is_number(r.get(key))]
        if len(ok) > 1:
            r = best(ok, key=lambda x: x[key])
            ci = ci_text(r.get(f"{key}_ci"))
            out.append(f"{what}: <b>{esc(r['detector'])}</b>, {num(r[key])}{(' ' + ci) if ci else ''}.")
    return out


def _diagnosis_sentences(diag: Any) -> list[str]:
    """The error type carrying most of the miscalibration and the costliest TIDE error (the diagnosis section
    has the rest)."""
    if not isinstance(diag, Mapping):
        return []
    out = []
    c = largest_miscalibration(diag)
    if c is not None:
        k, metric, v, cb = c
        key = "dece" if metric == "D-ECE" else "ece"
        total, part, share = cb.get(key), v.get(f"{key}_contribution"), v.get(f"{key}_share")
        out.append(
            f"{_when(str(cb.get('iou')))}, the <b>{esc(TYPE_NAMES.get(k, k))}</b> carry the largest part of the "
            f"{metric}: {num(part)} of {num(total)} "
            f"(share {num(share, 2)}; {num(v.get('n'))} detections at mean confidence "
            f"{num(v.get('mean_confidence'), 2)}; <a href=#diagnosis>diagnosis</a>)."
        )
    t = costliest_error(diag)
    if t is not None and t[0]:
        top, rec = t
        out.append(
            f"TIDE: fixing the <b>{esc(TYPE_NAMES.get(top, top))}</b> would gain the most AP: "
            f"{num(rec['dap'][top], 2)} points of {num(rec.get('ap'), 2)}; scoring every false positive below "
            f"every true positive would gain {num((rec.get('special_dap') or {}).get('fp'), 2)}."
        )
    return out


def findings(results: Results | Mapping[str, Any]) -> list[str]:
    """HTML sentences, most important first."""
    res = as_results(results)
    m = res.content
    out: list[str] = []
    for name, h in list((m.get("headline") or {}).items())[:3]:
        s = _headline_sentence(name, h) if isinstance(h, Mapping) else ""
        if s:
            out.append(s)
    first = _first_ece(res)
    if first:
        out += _bin_sentences(*first)
    diag = res.diagnostics
    out += _diagnosis_sentences(diag.entries if isinstance(diag, DiagnosticsBlock) else None)
    out += _map_sentences(m.get("dece_maps") or {})
    ev = res.evaluation
    out += _change_sentences(ev.change("confidence") if isinstance(ev, CalibrationEvaluationBlock) else {})
    out += _best_sentences(m.get("table"))
    out += _diff_sentences(m.get("differences"))
    worst = m.get("worst_detections") or {}
    cells = worst.get("largest_gap_cells") or []
    if cells:
        c = cells[0]
        out.append(
            f"The D-ECE cell with the largest share ({_pct(c.get('share'))} of the D-ECE "
            f"{num(worst.get('dece_from_contributions'))}) holds {num(c['count'])} detections with mean "
            f"confidence {num(c['confidence'], 2)} and precision {num(c['precision'], 2)}."
        )
    for w in m.get("warnings") or []:
        out.append(f"Warning: {esc(w)}")
    return out
