"""Per-class calibration: a table and reliability diagrams of the most frequent classes.

``per_class_table(p, y, category, names)`` -> rows (one per class, most
frequent first): ``category``, ``name``, ``n`` (detections), ``precision``
(mean y), ``mean_conf`` (mean p), ``ece`` (15 bins), ``mce``, ``brier``,
optionally ``ap`` / ``ap50`` from a per-class AP table.
``plot_per_class_reliability(...)`` draws one reliability diagram per class
for the ``top_n`` most frequent classes (optionally several detectors
overlaid in each panel). Loops run over classes only.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from detcal.binning.edges import feature_bin_index
from detcal.core.errors import DetcalInputError
from detcal.core.results import is_description
from detcal.metrics.confidence import ConfidenceMetric, SparseCellsWarning, brier
from detcal.metrics.narrow_ints import sort_code_type
from detcal.reports.tables import md_cell
from detcal.utils.io import write_bytes


def _check(p: Any, y: Any, category: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``p`` as float64, ``y`` and ``category`` as given (integers checked), all flat; nothing copied that is
    already of its type (the table reads a few classes' rows of each column, converted there)."""
    p_arr = np.asarray(p, np.float64).reshape(-1)
    y_arr = np.asarray(y).reshape(-1)
    c_arr = np.asarray(category).reshape(-1)
    if not (len(p_arr) == len(y_arr) == len(c_arr)):
        raise DetcalInputError(
            f"p, y, category must have the same length, got {len(p_arr)}, {len(y_arr)}, {len(c_arr)}", field="category"
        )
    if c_arr.size and not np.issubdtype(c_arr.dtype, np.integer):
        raise DetcalInputError(f"category must be integers, got {c_arr.dtype}", field="category")
    return p_arr, y_arr, c_arr.astype(np.int64, copy=False)


def _small_ids(c: np.ndarray) -> bool:
    """Whether the ids are non-negative and small enough to be counted in a table of their values."""
    return bool(c.size) and int(c.min()) >= 0 and int(c.max()) < 4 * c.size + 100_000


def most_frequent(category: Any, top_n: int | None = None) -> np.ndarray:
    """Category ids by descending count (ties: smaller id first), the first ``top_n``."""
    c = np.asarray(category, np.int64).reshape(-1)
    if _small_ids(c):  # counted by value: the same ids and counts as np.unique, without its sort
        n_of = np.bincount(c)
        cats = np.flatnonzero(n_of)
        counts = n_of[cats]
    else:
        cats, counts = np.unique(c, return_counts=True)
    order = np.lexsort((cats, -counts))
    return cats[order][: top_n if top_n is not None else len(cats)]


def _grouped(c_arr: np.ndarray, top: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of the classes ``top`` (distinct ids), grouped by class in ``top`` order, each class's rows in
    input order, and where each class's rows end: one pass over the column instead of one mask per class."""
    if _small_ids(c_arr):
        lut = np.full(int(c_arr.max()) + 1, -1, sort_code_type(len(top)))
        lut[top] = np.arange(len(top))
        at = lut[c_arr]
    else:
        srt = np.argsort(top, kind="stable")
        pos = np.searchsorted(top[srt], c_arr).clip(0, max(len(top) - 1, 0))
        at = np.where(top[srt][pos] == c_arr, srt[pos], -1) if len(top) else np.full(len(c_arr), -1)
    sel = np.flatnonzero(at >= 0)
    code = at[sel]
    rows = sel[np.argsort(code, kind="stable")]
    return rows, np.cumsum(np.bincount(code, minlength=len(top)))


def per_class_table(
    p: Any,
    y: Any,
    category: Any,
    names: Mapping[int, str] | None = None,
    *,
    bins: int = 15,
    top_n: int | None = None,
    ap_table: Mapping[str, np.ndarray] | None = None,
) -> list[dict[str, Any]]:
    """One row per class (most frequent first; see the module docstring).

    Each class's samples are the same values in the same order as a mask of the whole sample would give
    (the rows grouped by one stable sort), and ECE and MCE read one set of cell statistics when they share
    their grid: the same numbers."""
    p_arr, y_arr, c_arr = _check(p, y, category)
    names = names or {}
    ap_of: dict[int, tuple[float, float]] = {}
    if ap_table is not None:
        ap_of = {
            int(c): (float(a), float(a5)) for c, a, a5 in zip(ap_table["category"], ap_table["ap"], ap_table["ap50"])
        }
    top = most_frequent(c_arr, top_n)
    rows_of, ends = _grouped(c_arr, top)
    p_all, y_all = p_arr[rows_of], y_arr[rows_of].astype(np.float64)
    del rows_of
    em, mm = ConfidenceMetric("ece", bins), ConfidenceMetric("mce", bins)
    shared = em.grid_key() == mm.grid_key() and set(mm.required_stats) <= set(em.required_stats)
    rows = []
    for k, c in enumerate(top.tolist()):  # loop over classes
        lo = int(ends[k - 1]) if k else 0
        pc, yc = p_all[lo : int(ends[k])], y_all[lo : int(ends[k])]
        with warnings.catch_warnings():  # small classes have sparse bins by nature; n is in the row
            warnings.simplefilter("ignore", SparseCellsWarning)
            st = em.stats(pc, yc)
            e, mc = em.result(st).value, (mm.result(st) if shared else mm(pc, yc)).value
        row = {
            "category": int(c),
            "name": names.get(int(c), str(int(c))),
            "n": len(pc),
            "precision": float(yc.mean()),
            "mean_conf": float(pc.mean()),
            "ece": e,
            "mce": mc,
            "brier": brier(pc, yc).value,
        }
        if ap_table is not None:
            row["ap"], row["ap50"] = ap_of.get(int(c), (float("nan"), float("nan")))
        rows.append(row)
    return rows


def table_markdown(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None, digits: int = 4) -> str:
    """Rows of dicts as a Markdown table (floats with ``digits`` decimals)."""
    if not rows:
        return ""
    cols = list(columns or [k for k in rows[0] if not is_description(k)])

    fmt = lambda v: md_cell(f"{v:.{digits}f}" if isinstance(v, float) else v)
    lines = ["| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def reliability_curve(p: Any, y: Any, bins: int = 15) -> dict[str, np.ndarray]:
    """Per equal-width confidence bin: ``conf`` (mean p), ``precision`` (mean y), ``n``; NaN in empty bins."""

    p_arr = np.asarray(p, np.float64)
    y_arr = np.asarray(y, np.float64)
    b = feature_bin_index(p_arr, bins)
    n = np.bincount(b, minlength=bins).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(b, weights=p_arr, minlength=bins) / n
        prec = np.bincount(b, weights=y_arr, minlength=bins) / n
    return {"conf": conf, "precision": prec, "n": n.astype(np.int64), "edges": np.linspace(0, 1, bins + 1)}


def class_reliability_curves(
    p: Any, y: Any, category: Any, classes: Any, bins: int = 15
) -> list[dict[str, np.ndarray]]:
    """:func:`reliability_curve` of each class of ``classes`` (distinct ids), from one pass over the samples:
    the same numbers as the curve of each class's own samples (the sums run over the samples in the same
    order)."""
    p_arr = np.asarray(p, np.float64)
    y_arr = np.asarray(y, np.float64)
    cat = np.asarray(category, np.int64)
    classes = np.asarray(classes, np.int64)
    # one cell per (class, bin); other classes in the last row
    cell = _class_rank(cat, classes) * bins + feature_bin_index(p_arr, bins)
    size = (len(classes) + 1) * bins
    n = np.bincount(cell, minlength=size).astype(np.float64).reshape(-1, bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = np.bincount(cell, weights=p_arr, minlength=size).reshape(-1, bins) / n
        prec = np.bincount(cell, weights=y_arr, minlength=size).reshape(-1, bins) / n
    edges = np.linspace(0, 1, bins + 1)
    return [
        {"conf": conf[k], "precision": prec[k], "n": n[k].astype(np.int64), "edges": edges} for k in range(len(classes))
    ]


def _class_rank(cat: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """The position in ``classes`` (distinct ids) of each sample's class, ``len(classes)`` for any other class:
    a table of the ids when they are small (one gather), else a binary search among the sorted classes."""
    if not len(classes):
        return np.zeros_like(cat)
    if _small_ids(cat):
        top = int(cat.max())
        inside = np.flatnonzero((classes >= 0) & (classes <= top))[::-1]  # reversed: a repeated id keeps its first
        lut = np.full(top + 1, len(classes), np.int64)
        lut[classes[inside]] = inside
        return lut[cat]
    order = np.argsort(classes, kind="stable")
    at = np.searchsorted(classes[order], cat).clip(0, max(len(classes) - 1, 0))
    return np.where(classes[order][at] == cat, order[at], len(classes))


def plot_reliability(ax: Any, curves: Mapping[str, Mapping[str, np.ndarray]], title: str = "") -> None:
    """Overlaid reliability curves (one line per label) on ``ax``, with the diagonal."""
    ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
    for label, c in curves.items():
        ok = c["n"] > 0
        ax.plot(c["conf"][ok], c["precision"][ok], marker="o", ms=2.5, lw=1.1, label=short_label(label))
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("precision")
    if title:
        ax.set_title(short_label(title, 2 * LABEL_CHARS), fontsize=9, y=1.0)


LABEL_CHARS = 40
"""Longest category or detector name drawn in a figure; a longer one is shortened with an ellipsis."""


def short_label(name: Any, limit: int = LABEL_CHARS) -> str:
    """``name`` as drawn in a figure: at most ``limit`` characters (a 2,000,000-character category name
    would stall matplotlib's text layout), one line."""
    s = str(name)
    s = s if len(s) <= limit + 1 else s[:limit] + "…"
    return s.replace("\n", " ").replace("\r", " ").replace("$", "\\$")


@dataclass
class PerClassPanels:
    """What the per-class figure draws, computed before any drawing (small: it can travel to a figure
    process): the grid's ``ncol`` x ``nrow``, per panel the curves (label -> :func:`reliability_curve` of the
    class) and the title, and whether a legend names the labels."""

    ncol: int
    nrow: int
    curves: list[dict[str, dict[str, np.ndarray]]]
    titles: list[str]
    legend: bool


def per_class_panels(
    samples: Mapping[str, tuple[Any, Any, Any]],
    names: Mapping[int, str] | None = None,
    *,
    top_n: int = 9,
    bins: int = 15,
) -> PerClassPanels:
    """The panels of :func:`plot_per_class_reliability` (the ``top_n`` most frequent classes of the first
    sample), without drawing them."""
    if not samples:
        raise DetcalInputError("no samples to plot", field="samples")
    checked = {k: _check(*v) for k, v in samples.items()}
    first = next(iter(checked.values()))
    top = most_frequent(first[2], top_n)
    ncol = int(np.ceil(np.sqrt(max(len(top), 1))))
    nrow = int(np.ceil(max(len(top), 1) / ncol))
    names = names or {}
    per_label = {lab: class_reliability_curves(p, y, cat, top, bins) for lab, (p, y, cat) in checked.items()}
    # a class's count: its samples in the first sample's curve, every one of them in one of its bins
    counts = [int(c["n"].sum()) for c in next(iter(per_label.values()))]
    return PerClassPanels(
        ncol,
        nrow,
        [{lab: per_label[lab][k] for lab in checked} for k in range(len(top))],
        [f"{short_label(names.get(int(c), c))} (n={n})" for c, n in zip(top, counts)],
        len(checked) > 1,
    )


def draw_per_class_panels(panels: PerClassPanels, path: Any) -> None:
    """Draw :func:`per_class_panels`' grid straight into the PNG at ``path``, one panel after another with
    one axes moved from cell to cell (its ticks, labels and style made once: a fraction of the cost of a
    grid of axes)."""
    from detcal.reports.plots import agg_figure  # lazy: figures only

    fig = agg_figure(3.2 * panels.ncol, 3.0 * panels.nrow, dpi=110)
    grid = fig.add_gridspec(panels.nrow, panels.ncol)
    cells = [grid[k // panels.ncol, k % panels.ncol] for k in range(len(panels.titles))]
    _draw_panels(fig, path, list(zip(cells, panels.curves, panels.titles)), legend=panels.legend)


def plot_per_class_reliability(
    samples: Mapping[str, tuple[Any, Any, Any]],
    names: Mapping[int, str] | None = None,
    *,
    top_n: int = 9,
    bins: int = 15,
    path: Any = None,
) -> Any:
    """Reliability diagrams of the ``top_n`` most frequent classes (of the first sample).

    ``samples``: label -> ``(p, y, category)`` (one detector, or several
    overlaid). Without ``path``, returns the matplotlib figure (a grid of
    axes, one per class). With ``path``, the same grid is drawn straight into
    the PNG at ``path`` (:func:`draw_per_class_panels`), and ``None`` is
    returned.
    """
    panels = per_class_panels(samples, names, top_n=top_n, bins=bins)
    if path is not None:
        draw_per_class_panels(panels, path)
        return None
    from detcal.reports.plots import agg_figure, fixed_margins  # lazy: figures only

    fig = agg_figure(3.2 * panels.ncol, 3.0 * panels.nrow, dpi=110)
    grid = fig.add_gridspec(panels.nrow, panels.ncol)
    axes = [fig.add_subplot(grid[k // panels.ncol, k % panels.ncol]) for k in range(panels.nrow * panels.ncol)]
    # fixed margins (no layout engine: one draw when saved): tick labels and axis labels left and below each
    # panel, its title above
    fixed_margins(fig, **_PANEL_MARGINS)
    for k, ax in enumerate(axes):
        if k < len(panels.titles):
            plot_reliability(ax, panels.curves[k], panels.titles[k])
        else:
            ax.axis("off")
    if panels.legend:
        axes[0].legend(fontsize=7)
    return fig


_PANEL_MARGINS = {"left": 0.62, "right": 0.18, "bottom": 0.5, "top": 0.3, "wspace": 0.72, "hspace": 0.72}
"""Margins and gaps (inches) of the per-class grid: tick and axis labels left of and below each panel, the
title above."""


def _fix_ticks(ax: Any) -> None:
    """Keep the ticks, tick labels and axis-label places the axes was just drawn with, the same in every panel
    (the axes keeps its size, limits and texts from cell to cell), so that the later panels do not compute
    them again: the ticks and their labels become fixed lists, and each axis label keeps its place relative
    to the axes (matplotlib would otherwise measure the tick labels again to place it)."""
    from matplotlib.ticker import (  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn
        FixedFormatter,
        FixedLocator,
    )

    to_axes = ax.transAxes.inverted()
    for axis in (ax.xaxis, ax.yaxis):
        labels = [t.get_text() for t in axis.get_majorticklabels()]
        axis.set_major_locator(FixedLocator(axis.get_majorticklocs()))
        axis.set_major_formatter(FixedFormatter(labels))
        at = axis.label.get_transform().transform(axis.label.get_position())
        axis.set_label_coords(*to_axes.transform(at))


def _draw_panels(
    fig: Any, path: Any, panels: list[tuple[Any, dict[str, dict[str, np.ndarray]], str]], legend: bool
) -> None:
    """Draw ``panels`` (grid cell, curves, title) of the per-class figure into the PNG at ``path`` with one
    axes: the first panel makes its artists (:func:`plot_reliability`), each later one moves the axes to its
    cell and sets the curves' data and the title. The figure's background is drawn once; empty cells stay
    blank, as the grid's axes turned off."""
    from matplotlib.image import imsave  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn

    from detcal.reports.plots import fixed_margins  # lazy: figures only

    renderer = fig.canvas.get_renderer()
    renderer.clear()
    fig.patch.draw(renderer)
    if panels:
        ax = fig.add_subplot(panels[0][0])
        fixed_margins(fig, **_PANEL_MARGINS)
        for k, (cell, curves, title) in enumerate(panels):
            if k == 0:
                plot_reliability(ax, curves, title)
                lines = ax.lines[1:]  # after the diagonal, one line per curve, in order
                leg = ax.legend(fontsize=7) if legend else None
            else:
                ax.set_position(cell.get_position(fig))
                for line, c in zip(lines, curves.values()):
                    ok = c["n"] > 0
                    line.set_data(c["conf"][ok], c["precision"][ok])
                ax.title.set_text(short_label(title, 2 * LABEL_CHARS))
            ax.draw(renderer)
            if k == 0:
                _fix_ticks(ax)
            if leg is not None:
                leg.remove()
                leg = None
    buf = io.BytesIO()
    imsave(buf, np.asarray(renderer.buffer_rgba()), format="png", dpi=fig.dpi, pil_kwargs={"compress_level": 1})
    write_bytes(path, buf.getvalue())


__all__ = [
    "PerClassPanels",
    "draw_per_class_panels",
    "most_frequent",
    "per_class_panels",
    "per_class_table",
    "plot_per_class_reliability",
    "class_reliability_curves",
    "plot_reliability",
    "reliability_curve",
    "short_label",
    "table_markdown",
]
