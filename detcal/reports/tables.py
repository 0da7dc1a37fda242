"""Markdown and CSV tables from metric results (no plotting, numpy only).

A *metric node* is anything with a ``value``: a
:class:`detcal.core.types.MetricResult`, its ``to_dict()`` form, or a plain
``{"value": v, "ci": [lo, hi]}`` dict. Nested dicts of metric nodes (the
``metrics.json`` written by ``detcal-evaluate``) are flattened into
``/``-joined keys, e.g. ``confidence/iou=0.50/ece``.

Values are printed with their percentile-bootstrap interval when present
(docs/metrics.md, "uncertainty of every headline number"), e.g.
``0.0312 [0.0281, 0.0345]``.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.utils.io import write_text

__all__ = [
    "format_number",
    "format_value",
    "iter_metrics",
    "flatten_metrics",
    "metrics_table",
    "comparison_table",
    "comparison_csv",
    "write_table",
]

_SKIP = frozenset({"table", "params", "extra", "config", "provenance", "skipped"})


def format_number(x: Any, digits: int = 4) -> str:
    """A number with ``digits`` decimals; scientific below 10^-digits or from 1e5; ``nan`` for NaN/None."""
    if x is None:
        return "nan"
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v != 0 and (abs(v) < 10.0 ** (-digits) or abs(v) >= 1e5):
        return f"{v:.{max(digits - 1, 1)}e}"
    return f"{v:.{digits}f}"


def _finite(x: Any) -> bool:
    try:
        return x is not None and math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def format_value(value: Any, ci: Sequence[float] | None = None, digits: int = 4) -> str:
    """``value`` or ``value [low, high]`` when a bootstrap interval ``ci`` is given.

    >>> format_value(0.03121, (0.02812, 0.03449))
    '0.0312 [0.0281, 0.0345]'
    """
    s = format_number(value, digits)
    if ci is not None:
        if len(ci) != 2:
            raise DetcalInputError(f"a confidence interval has 2 ends, got {len(ci)}", field="ci")
        if _finite(ci[0]) and _finite(ci[1]):
            s += f" [{format_number(ci[0], digits)}, {format_number(ci[1], digits)}]"
        else:
            s += " [no interval]"  # the bootstrap bias exceeds its spread (see ci_note in metrics.json)
    return s


def _as_node(obj: Any) -> Any:
    return obj.to_dict() if isinstance(obj, MetricResult) else obj


def _is_metric(obj: Any) -> bool:
    return isinstance(obj, Mapping) and "value" in obj and not isinstance(obj["value"], Mapping)


def iter_metrics(tree: Any, prefix: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Depth-first ``(key, metric node)`` pairs of a nested dict (keys joined with ``/``).

    Subtrees named ``table``, ``params``, ``extra``, ``config`` and
    ``provenance`` are not searched (they hold inputs and per-bin arrays, not
    headline numbers).
    """
    node = _as_node(tree)
    if _is_metric(node):
        yield prefix, node
        return
    if isinstance(node, Mapping):
        for k, v in node.items():
            if str(k) in _SKIP:
                continue
            yield from iter_metrics(v, f"{prefix}/{k}" if prefix else str(k))


def flatten_metrics(metrics_json: Any) -> dict[str, float]:
    """Every metric value in a nested metrics dict as ``{"a/b/name": float}`` (for comparisons)."""
    out: dict[str, float] = {}
    for key, node in iter_metrics(metrics_json):
        v = node["value"]
        out[key] = float("nan") if v is None else float(v)
    return out


def _params_text(params: Mapping[str, Any], limit: int = 6) -> str:
    parts = []
    for k, v in params.items():
        if isinstance(v, (str, int, float, bool)) or v is None:
            parts.append(f"{k}={v}")
        elif isinstance(v, (list, tuple)) and len(v) <= 5 and all(isinstance(x, (int, float, str)) for x in v):
            parts.append(f"{k}={list(v)}")
        if len(parts) >= limit:
            break
    return ", ".join(parts)


def md_cell(text: Any) -> str:
    """The text of one Markdown table cell (summary.md and every printed table): backslashes and ``|``
    escaped, line breaks and tabs made spaces, so a category name with ``|`` or a newline keeps the table
    whole."""
    t = str(text).replace("\\", "\\\\").replace("|", "\\|")
    return t.replace("\r\n", " ").replace("\n", " ").replace("\r", " ").replace("\t", " ")


_cell = md_cell


def metrics_table(metrics: Any, *, title: str | None = None, digits: int = 4, params: bool = True) -> str:
    """Markdown table of every metric node in ``metrics``: key, value [CI], variant, parameters."""
    lines = [f"### {title}", ""] if title else []
    head = ["metric", "value [CI]", "variant"] + (["parameters"] if params else [])
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---"] * len(head)) + "|")
    for key, node in iter_metrics(metrics):
        row = [key, format_value(node["value"], node.get("ci"), digits), str(node.get("variant", "") or "")]
        if params:
            row.append(_params_text(node.get("params") or {}))
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def _lookup(row: Mapping[str, Any], col: str) -> tuple[Any, Any]:
    v = _as_node(row.get(col))
    if _is_metric(v):
        return v["value"], v.get("ci")
    return v, None


def comparison_table(
    rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], *, label: str = "run", digits: int = 4
) -> str:
    """Markdown comparison table: one row per labelled run, one column per metric key.

    A row value is a number or a metric node (value with optional ``ci``);
    a missing one prints as ``-``.
    """
    head = [label] + list(columns)
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "|".join(["---"] * len(head)) + "|"]
    for name, row in rows.items():
        cells = [name]
        for col in columns:
            if col not in row:
                cells.append("-")
                continue
            v, ci = _lookup(row, col)
            cells.append(format_value(v, ci, digits))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def comparison_csv(rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str], *, label: str = "run") -> str:
    """CSV twin of :func:`comparison_table`; intervals go to ``<col>_ci_low``/``<col>_ci_high`` columns."""
    import csv  # lazy: detcal-compare's CSV only (kept out of detcal-evaluate's start-up)

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = [label]
    for col in columns:
        head += [col, f"{col}_ci_low", f"{col}_ci_high"]
    w.writerow(head)
    for name, row in rows.items():
        out: list[Any] = [name]
        for col in columns:
            v, ci = _lookup(row, col) if col in row else (None, None)
            out += ["" if v is None else repr(float(v))]
            out += ["", ""] if ci is None else ["" if not _finite(c) else repr(float(c)) for c in ci]
        w.writerow(out)
    return buf.getvalue()


def write_table(path: str | os.PathLike | None, text: str, *, echo: bool = True) -> Path | None:
    """Print ``text`` (when ``echo``) and write it atomically to ``path`` (when given)."""
    if echo:
        print(text, end="" if text.endswith("\n") else "\n")
    if path is None:
        return None
    p = Path(path)
    write_text(p, text)
    return p
