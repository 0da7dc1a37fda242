"""The few lines a command prints at its end: headline numbers with intervals, what was left out and why,
warnings, the run directory, its files and the report (the full tables stay in summary.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from detcal.core.results import SKIP, AccuracyBlock, CalibratorsBlock, Results, as_results
from detcal.core.types import Skipped
from detcal.metrics.measures import headline_names
from detcal.reports.measure_rows import measure_rows, row_text
from detcal.reports.tables import format_value
from detcal.utils.warn import logged

__all__ = ["console_summary", "run_footer"]


def _ci(ci: Any, value: Any = None) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        out = f"[{format_value(ci[0])}, {format_value(ci[1])}]"
        if isinstance(value, (int, float)) and not ci[0] <= value <= ci[1]:
            out += " (the estimate lies outside: the interval's note in metrics.json says why)"
        return out
    return ""


def _value(e: Mapping[str, Any]) -> str:
    if e.get("value") is None:
        return "null (" + str((e.get(SKIP) or {}).get("value", "not computable")) + ")"
    return f"{format_value(e.get('value'))} {_ci(e.get('ci'), e.get('value'))}".rstrip()


def _headline_lines(m: Mapping[str, Any]) -> list[str]:
    h = {k: e for k, e in (m.get("headline") or {}).items() if isinstance(e, Mapping)}
    if not h:
        return []
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for k, e in h.items():  # per-coordinate entries (regression/<metric>/<coord>) on one line per metric
        src = str(e.get("source", ""))
        key = src.rsplit("/", 1)[0] if src.startswith(("regression/", "evaluation/regression/")) else k
        groups.setdefault(key, []).append((k, e))
    width = max(len(g[0][0]) if len(g) == 1 else len(key) for key, g in groups.items())
    some = any(_ci(e.get("ci")) for e in h.values())
    lines = [
        "headline (value [interval] <- where in metrics.json)"
        + ("" if some else "; no intervals (bootstrap.n=0)")
        + ":"
    ]
    for key, g in groups.items():
        if len(g) == 1:
            k, e = g[0]
            lines.append(f"  {k:<{width}}  {_value(e)}  <- {e.get('source', '')}")
        else:
            coords = [str(e.get("source", "")).rsplit("/", 1)[-1] for _, e in g]
            lines.append(f"  {key:<{width}}  " + "; ".join(f"{c} {_value(e)}" for c, (_, e) in zip(coords, g)))
    return lines


def _compare_lines(m: Mapping[str, Any]) -> list[str]:
    table = m.get("table")
    rows: list[Any] = table if isinstance(table, list) else []
    lines = []
    for r in rows:
        if isinstance(r, Mapping) and "detector" in r:
            cal = measure_rows(r, headline_names())  # the registry's headline measures, as it labels them
            lines.append(
                f"  {r['detector']}: AP {format_value(r.get('AP'))}, "
                + ", ".join(row_text(x, "(no interval: see ci_notes)") for x in cal)
            )
    return (["detectors:"] + lines) if lines else []


def _study_lines(m: Mapping[str, Any]) -> list[str]:
    """detcal-study kueppers2020: per detector and IoU, the D-ECE over every box feature before and with
    the best calibrator (mean ± std over the splits)."""
    if m.get("study") != "kueppers2020":
        return []
    groups: dict[tuple[Any, Any], dict[str, Mapping[str, Any]]] = {}
    for r in m.get("rows") or []:
        if isinstance(r, Mapping) and r.get("features") == "conf,cx,cy,w,h":
            groups.setdefault((r.get("detector"), r.get("iou")), {})[str(r.get("calibrator"))] = r
    lines = []
    for (det, iou), cal in groups.items():
        done = {k: v for k, v in cal.items() if k != "uncalibrated" and isinstance(v.get("mean"), (int, float))}
        if "uncalibrated" not in cal or not done:
            continue
        best = min(done, key=lambda k: done[k]["mean"])

        def ms(r: Mapping[str, Any]) -> str:
            return f"{format_value(r.get('mean'))} ± {format_value(r.get('std'))}"

        lines.append(f"  {det} IoU {iou}: {ms(cal['uncalibrated'])} before, {ms(done[best])} with {best}")
    n = (m.get("params") or {}).get("n_splits")
    head = f"D-ECE over (conf, cx, cy, w, h), mean ± std over {n} splits (every row: summary.md, report.html):"
    return [head, *lines] if lines else []


def _what(m: Mapping[str, Any], roles: CalibratorsBlock | Skipped | None) -> list[str]:
    """Which detector (data) and which calibrators (``roles``: calibrate's block) a run is about: one line."""
    d = m.get("data") or {}
    parts = [d.get("calibration") or d] if isinstance(d, Mapping) else []
    src = parts[0] if parts and isinstance(parts[0], Mapping) else {}
    who = " / ".join(str(src[k]) for k in ("source", "bundle", "detector", "results", "results_dir") if src.get(k))
    names = [f"{k} {n}" for k, n in roles.fitted().items()] if isinstance(roles, CalibratorsBlock) else []
    if not who and not names:
        return []
    return [
        (f"detector: {who}" if who else "")
        + ("; " if who and names else "")
        + ("calibrators: " + ", ".join(names) if names else "")
    ]


def _accuracy(res: Results) -> list[str]:
    acc = res.accuracy
    leaves = acc.metrics() if isinstance(acc, AccuracyBlock) else {}
    names = [k for k in ("AP", "AP50", "AP75", "AR100") if k in leaves]
    if not names:
        return []
    why = [  # a number COCO cannot define (its -1) is null with the reason beside it
        f"  {k} is null: {s.reason}"
        for k in names
        if math.isnan(leaves[k].value) and (s := leaves[k].why_undefined()) is not None
    ]
    return ["accuracy: " + ", ".join(f"{k} {format_value(leaves[k].value)}" for k in names), *why]


def _left_out(m: Mapping[str, Any]) -> list[str]:
    d = m.get("detections") or {}
    if not isinstance(d, Mapping) or "input" not in d:
        return []
    parts = []
    for k, v in (d.get("left_out_at_loading") or {}).items():
        if v:
            parts.append(f"{v} at loading ({k.replace('_', ' ')})")
    for k in ("below_score_threshold", "beyond_max_dets"):
        if d.get(k):
            parts.append(f"{d[k]} {k.replace('_', ' ')}")
    for label, pt in (d.get("per_threshold") or {}).items():
        if pt.get("ignored_region"):
            parts.append(f"{pt['ignored_region']} in ignored regions at {label}")
    return [
        f"detections: {d['input']} in the input, {d.get('considered')} considered; left out: "
        + ("; ".join(parts) if parts else "none")
    ]


def run_footer(run_dir: str | Path, files: list[str]) -> list[str]:
    """Where the run is and what is in it: ``files`` (what the command wrote, in order) and anything
    else the directory holds (calibrated results, the log; hidden entries left out)."""
    rd = Path(run_dir).resolve()
    present = (
        sorted(p.name + ("/" if p.is_dir() else "") for p in rd.iterdir() if not p.name.startswith("."))
        if rd.is_dir()
        else []
    )
    listed = [f for f in files if not (rd / f.rstrip("/")).exists() or f in present or f.rstrip("/") + "/" in present]
    names = list(dict.fromkeys(listed + [p for p in present if p not in listed and p.rstrip("/") not in listed]))
    out = [f"run directory: {rd}", "files: " + (", ".join(names) if names else "(none)")]
    if "report.html" in names:
        out.append(f"report: {rd / 'report.html'}")
    if "summary.md" in names:
        out.append(f"full tables: {rd / 'summary.md'}")
    return out


def _warning_lines(warns: list[str]) -> list[str]:
    """The run's warnings, each once on the console: those logged while the command ran are counted, not
    repeated (a calibrator's fit report was printed twice)."""

    if not warns:
        return []
    seen = set(logged())
    rest = [w for w in warns if w not in seen]
    above = len(warns) - len(rest)
    head = f"warnings ({len(warns)}, all in metrics.json 'warnings'" + (f"; {above} logged above" if above else "")
    out = [head + ("):" if rest else ")")]
    return out + [f"  - {w}" for w in rest[:10]] + ([f"  ... {len(rest) - 10} more"] if len(rest) > 10 else [])


def console_summary(results: Results | Mapping[str, Any], run_dir: str | Path) -> str:
    """The end-of-command text of a run from its results (or a metrics.json content, read into them)."""
    res = as_results(results)
    m = res.content
    lines = [f"{m.get('command', 'detcal')} (detcal {m.get('detcal_version', '')})"] + _what(m, res.calibrators)
    lines += _headline_lines(m) or _compare_lines(m) or _study_lines(m)
    lines += _accuracy(res) + _left_out(m)
    lines += _warning_lines(m.get("warnings") or [])
    lines += run_footer(run_dir, [str(f) for f in m.get("files") or []])
    return "\n".join(lines)
