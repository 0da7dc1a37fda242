"""report.html's table of the confidence measures: one row per registered measure, one column per IoU
threshold (and stage), labelled and formatted as the measure's registry entry says (:mod:`detcal.reports.measure_rows`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from detcal.core.results import Block, CalibrationEvaluationBlock, ConfidenceBlock, Results, as_results
from detcal.reports.html.fmt import ci_text, esc, num_attr, table
from detcal.reports.measure_rows import ARROWS, MeasureRow, measure_rows

__all__ = ["confidence_measures"]


def _blocks(res: Results) -> dict[str, Block | Mapping[str, Any]]:
    """{column label: confidence block}: evaluate's thresholds (a skipped one an empty column), or calibrate's
    before/after leaves."""
    if res.confidence:
        return {str(k): v if isinstance(v, ConfidenceBlock) else {} for k, v in res.confidence.items()}
    ev = res.evaluation
    if not isinstance(ev, CalibrationEvaluationBlock):
        return {}
    return {k: v for k, v in (("before", ev.before("confidence")), ("after", ev.after("confidence"))) if v}


def _cell(row: MeasureRow | None) -> str:
    if row is None or row.value is None:
        return "<td>–</td>"
    ci = ci_text(list(row.ci)) if row.ci else ""
    return f"<td class=n{num_attr(row.value)}>{esc(row.text)} {ci}</td>"


def confidence_measures(results: Results | Mapping[str, Any]) -> str:
    """Every registered confidence measure present in the run, its value and interval per threshold."""
    per = {label: {r.name: r for r in measure_rows(b)} for label, b in _blocks(as_results(results)).items()}
    names = list(dict.fromkeys(n for rows in per.values() for n in rows))
    if not names:
        return ""
    rows: list[str] = []
    for name in names:
        first = next(rows_[name] for rows_ in per.values() if name in rows_)
        head = f"<td>{esc(first.label)} {ARROWS.get(first.better, '')}</td><td><code>{esc(name)}</code></td>"
        rows.append(head + "".join(_cell(p.get(name)) for p in per.values()))
    return (
        "<h2 id=measures>Confidence measures</h2><p class=note>↓ lower is better, ↑ higher is better; "
        "definitions in docs/metrics.md under each key.</p>"
        + table(["measure", "key", *per], [[r] for r in rows], raw=True)
    )
