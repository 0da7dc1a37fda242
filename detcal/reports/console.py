"""The few lines a command prints at its end: headline numbers with intervals, what was left out and why,
warnings, the run directory, its files and the report (the full tables stay in summary.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from detcal.reports.tables import format_value

__all__ = ["console_summary", "run_footer"]


def _ci(ci: Any) -> str:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci):
        return f"[{format_value(ci[0])}, {format_value(ci[1])}]"
    return "(no interval)"


def _headline_lines(m: Mapping[str, Any]) -> list[str]:
    h = m.get("headline") or {}
    if not h:
        return []
    width = max(len(k) for k in h)
    lines = ["headline (value [interval] <- where in metrics.json):"]
    for k, e in h.items():
        if isinstance(e, Mapping):
            lines.append(f"  {k:<{width}}  {format_value(e.get('value'))} {_ci(e.get('ci'))}  <- {e.get('source', '')}")
    return lines


def _compare_lines(m: Mapping[str, Any]) -> list[str]:
    rows = m.get("table") if isinstance(m.get("table"), list) else []
    lines = []
    for r in rows:
        if isinstance(r, Mapping) and "detector" in r:
            lines.append(f"  {r['detector']}: AP {format_value(r.get('AP'))}, ECE {format_value(r.get('ece'))} "
                         f"{_ci(r.get('ece_ci'))}, D-ECE {format_value(r.get('dece'))} {_ci(r.get('dece_ci'))}")
    return (["detectors:"] + lines) if lines else []


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
    return [f"detections: {d['input']} in the input, {d.get('considered')} considered; left out: "
            + ("; ".join(parts) if parts else "none")]


def run_footer(run_dir: str | Path, files: list[str]) -> list[str]:
    """Where the run is and what it wrote."""
    rd = Path(run_dir).resolve()
    out = [f"run directory: {rd}", "files: " + (", ".join(files) if files else "(none)")]
    if "report.html" in files:
        out.append(f"report: {rd / 'report.html'}")
    if "summary.md" in files:
        out.append(f"full tables: {rd / 'summary.md'}")
    return out


def console_summary(m: Mapping[str, Any], run_dir: str | Path) -> str:
    """The end-of-command text of a run from its metrics.json content."""
    lines = [f"{m.get('command', 'detcal')} (detcal {m.get('detcal_version', '')})"]
    lines += _headline_lines(m) or _compare_lines(m)
    lines += _left_out(m)
    warns = m.get("warnings") or []
    if warns:
        lines.append(f"warnings ({len(warns)}, also in metrics.json 'warnings'):")
        lines += [f"  - {w}" for w in warns[:10]] + ([f"  ... {len(warns) - 10} more"] if len(warns) > 10 else [])
    lines += run_footer(run_dir, [str(f) for f in m.get("files") or []])
    return "\n".join(lines)
