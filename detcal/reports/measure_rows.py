"""The confidence measures of a result as display rows, from the registry (:mod:`detcal.metrics.measures`).

One function turns a confidence block of metrics.json (``{name: {"value", "ci", ...}}``) or a
``detcal-compare`` table row (``{name: value, name + "_ci": [lo, hi]}``) into one row per registered
measure it holds, in registry order, with the label, number format and direction of the measure's
entry. report.html's confidence table and the console's compare lines read these rows; a measure added
to the registry shows up in both without an edit here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from detcal.core.results import Block, shown
from detcal.core.types import MetricResult
from detcal.metrics.measures import MEASURES

__all__ = ["MeasureRow", "measure_rows", "row_text", "BEFORE_AFTER", "before_after_rows"]

ARROWS: dict[str, str] = {"lower": "↓", "higher": "↑", "neither": ""}
"""The mark of which direction is better, by :attr:`detcal.metrics.measures.Display.better`."""


class MeasureRow(NamedTuple):
    """One measure of a result: its key, label, value (``None`` when not computed), interval, the value as
    text (the entry's format) and which direction is better."""

    name: str
    label: str
    value: float | None
    ci: tuple[float, float] | None
    text: str
    better: str


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _interval(ci: Any) -> tuple[float, float] | None:
    if isinstance(ci, (list, tuple)) and len(ci) == 2:
        lo, hi = _number(ci[0]), _number(ci[1])
        if lo is not None and hi is not None:
            return lo, hi
    return None


def measure_rows(result: Block | Mapping[str, Any], names: Iterable[str] | None = None) -> list[MeasureRow]:
    """One :class:`MeasureRow` per registered measure in ``result`` (a confidence block or its leaves, a
    metrics.json block, or a compare row; only ``names`` when given), in registry order."""
    wanted = set(MEASURES if names is None else names)
    rows = []
    for name, entry in MEASURES.items():
        if name not in wanted or name not in result:
            continue
        node = result[name]
        if isinstance(node, MetricResult):  # as metrics.json writes it: None where undefined
            value, ci = _number(shown(node.value)), _interval(None if node.ci is None else [shown(x) for x in node.ci])
        elif isinstance(node, Mapping):
            value, ci = _number(node.get("value")), _interval(node.get("ci"))
        else:
            value, ci = _number(node), _interval(result.get(f"{name}_ci"))
        d = entry.display
        rows.append(MeasureRow(name, d.label, value, ci, d.format(value), d.better))
    return rows


BEFORE_AFTER: tuple[str, ...] = ("dece", "ece", "mce", "nll", "brier", "overconfidence", "underconfidence")
"""The confidence measures of detcal-calibrate's before/after table, in its order (labels from the registry)."""


def before_after_rows() -> tuple[tuple[str, str], ...]:
    """``(name, label)`` of the before/after table's measures that are registered: the label with its formula."""
    return tuple((n, MEASURES[n].display.long_label) for n in BEFORE_AFTER if n in MEASURES)


def row_text(row: MeasureRow, missing: str = "(no interval)") -> str:
    """``label value [lo, hi]`` in the measure's format (``missing`` when there is no interval)."""
    fmt = MEASURES[row.name].display.format if row.name in MEASURES else str
    ci = f"[{fmt(row.ci[0])}, {fmt(row.ci[1])}]" if row.ci else missing
    return f"{row.label} {row.text} {ci}"
