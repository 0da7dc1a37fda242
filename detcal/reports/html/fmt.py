"""HTML escaping and number formatting shared by the report modules.

Every number shown in the page goes through :func:`num` (or :func:`num_attr`):
it is written with its exact value in a ``data-v`` attribute (``repr`` of the
float in metrics.json) beside the rounded text, so a test can check that each
number of the page is a number of metrics.json.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["esc", "fmt", "text", "num", "num_attr", "table", "is_number", "pct_cell"]


def esc(s: Any) -> str:
    """HTML-escaped text of ``s``: the one escape of the report, for element text and quoted attributes
    alike (``& < > " '``), whatever the origin of ``s`` (a metrics.json from elsewhere included)."""
    return html.escape(str(s), quote=True)


def is_number(v: Any) -> bool:
    """True for an int or float (not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt(v: Any, digits: int = 4) -> str:
    """Rounded text of a number: ints as they are, floats with ``digits`` decimals (scientific when tiny/huge).
    Plain text, not HTML (anything else comes back as ``str(v)``): put it in a page through :func:`text`."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        a = abs(v)
        if a != 0 and (a < 10 ** -(digits - 1) or a >= 1e6):
            return f"{v:.{max(digits - 1, 1)}e}"
        return f"{v:.{digits}f}"
    return str(v)


def text(v: Any, digits: int = 4) -> str:
    """:func:`fmt`, escaped: the text of a value anywhere in the page (SVG ``<title>`` elements included)."""
    return esc(fmt(v, digits))


def num_attr(v: Any) -> str:
    """The ``data-v`` attribute of a number (empty for anything else)."""
    return f' data-v="{v!r}"' if is_number(v) else ""


def num(v: Any, digits: int = 4, tag: str = "span") -> str:
    """A number as ``<span data-v="exact">rounded</span>``; ``None`` as a dash; text escaped."""
    if is_number(v):
        return f"<{tag} class=n{num_attr(v)}>{fmt(v, digits)}</{tag}>"
    return f"<{tag}>{esc(fmt(v))}</{tag}>"


def ci_text(ci: Sequence[Any] | None) -> str:
    """``[lo, hi]`` with both ends as numbers, or empty when there is none."""
    if not ci or len(ci) != 2 or ci[0] is None or ci[1] is None:
        return ""
    return f"[{num(ci[0])}, {num(ci[1])}]"


def cell(v: Any) -> str:
    """A table cell: numbers right-aligned with their exact value, lists of two numbers as an interval."""
    if is_number(v):
        return f"<td class=n{num_attr(v)} data-sort=\"{v!r}\">{fmt(v)}</td>"
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(is_number(x) or x is None for x in v):
        return f"<td>{ci_text(v) or '–'}</td>"
    if isinstance(v, (list, tuple)):
        return f"<td>{esc(', '.join(fmt(x) for x in v))}</td>" if len(v) <= 8 else f"<td>{len(v)} values</td>"
    if isinstance(v, dict):
        return f"<td>{esc(', '.join(f'{k}={fmt(x)}' for k, x in list(v.items())[:6]))}</td>"
    return f"<td>{esc(fmt(v))}</td>"


def pct_cell(v: Any, digits: int = 1) -> str:
    """A fraction as a table cell in percent with ``digits`` decimals (``12.3%``, ``−0.4%``), one fixed format
    whatever the size; the exact fraction in ``data-v``; a dash for anything else."""
    if not is_number(v) or not math.isfinite(v):
        return "<td>–</td>"
    return f"<td class=n{num_attr(v)} data-sort=\"{v!r}\">{f'{100 * v:.{digits}f}%'.replace('-', '−')}</td>"


def table(
    header: Sequence[str], rows: Iterable[Sequence[Any]], *, sortable: bool = True, cls: str = "", raw: bool = False
) -> str:
    """An HTML table; ``raw`` rows hold ready ``<td>`` strings, else values formatted by :func:`cell`."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(r if raw else (cell(v) for v in r)) + "</tr>" for r in rows)
    klass = " ".join(c for c in (cls, "sortable" if sortable else "") if c)
    return f'<table class="{klass}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
