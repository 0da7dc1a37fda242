"""Calibration diagrams as PNG files (matplotlib, Agg canvas, imported lazily).

Every function takes plain arrays (or a ``MetricResult.table`` mapping) and a
path, draws with matplotlib's object-oriented API on an Agg canvas (no pyplot
global state, no display needed) and writes the PNG atomically through
:func:`detcal.utils.io.write_bytes`. Each returns the path it wrote.

Diagrams (definitions in docs/metrics.md):

* :func:`reliability_diagram`: per confidence bin b (equal width over [0, 1]),
  precision(b) against conf(b), gap bars ``|prec - conf|``, identity line, the
  ECE ``sum_b N_b/N gap(b)`` (Guo et al. 2017) in the title and the sample
  histogram ``N_b`` underneath.
* :func:`dece_heatmaps`: D-ECE maps (Kueppers et al. 2020) over two box
  features, e.g. (cx, cy) and (w, h): one value per 2-D cell, the gap
  marginalised over the other binned features (:func:`marginal_gap_map`);
  cells below the sample threshold are greyed out.
* :func:`rmse_rmv_diagram`: RMSE(b) against RMV(b) per coordinate (Levi et
  al. 2019), identity line, optional log-log axes, one panel per coordinate.
* :func:`qce_coverage_diagram`: observed coverage(tau) against tau per
  coordinate and jointly (Kueppers et al. 2022), identity line.
* :func:`retention_diagram`: error on the retained fraction after dropping
  the most uncertain first (Malinin et al., Lakara et al.).

The numpy helper :func:`marginal_gap_map` has no matplotlib dependency.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.reports.agg_text import text_caching_canvas
from detcal.reports.gap_colours import COLOUR_LABEL, DARK_TEXT_ABOVE, DIVERGING_STOPS, EMPTY_GREY, EMPTY_LABEL, y_down
from detcal.utils.io import write_bytes

__all__ = [
    "agg_figure",
    "import_matplotlib_for_drawing",
    "fixed_margins",
    "save_png",
    "marginal_gap_map",
    "reliability_diagram",
    "dece_heatmaps",
    "rmse_rmv_diagram",
    "qce_coverage_diagram",
    "retention_diagram",
]

_DPI = 100


# --------------------------------------------------------------------------- helpers


def _vec(a: Any, name: str, n: int | None = None) -> np.ndarray:
    """1-D float64 array, validated against length ``n`` when given."""
    arr = np.asarray([] if a is None else a, dtype=np.float64).reshape(-1)
    if n is not None and len(arr) != n:
        raise DetcalInputError(f"has length {len(arr)}, expected {n}", record="plot input", field=name)
    return arr


def agg_figure(width: float, height: float, dpi: float = _DPI) -> Any:
    """A matplotlib Figure bound to an Agg canvas (imported here, not at start-up; no pyplot: importing
    it costs more and keeps global state) whose renderer reuses the shaping and glyph images of repeated
    texts (:mod:`detcal.reports.agg_text`: the same pixels)."""
    from matplotlib.figure import Figure  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn

    fig = Figure(figsize=(width, height), dpi=dpi)
    text_caching_canvas(fig)
    return fig


def import_matplotlib_for_drawing() -> None:
    """Import the parts of matplotlib the figures use, without the ``set()`` signatures and docstrings of its
    artist classes (about a third of the import's CPU, ~0.07 s).

    For a process that only draws figures and then ends (the forked figure writer of a run): importing
    matplotlib gives every artist class a ``set()`` method whose signature lists each of its properties and
    whose docstring describes them (``Artist._update_set_signature_and_docstring``, which inspects every
    setter and parses its docstring; ``matplotlib.artist.kwdoc`` for the docstring); no one reads them
    there, so while the modules are imported each class gets its ``set()`` marked as generated (what the
    subclasses' own ``set()`` rests on) without the signature and docstring, and ``kwdoc`` answers an empty
    text; both are restored afterwards. ``set()`` itself works the same, and the figures are the same. Not
    for a long-lived process (its ``help()`` and ``inspect.signature`` of those ``set()`` methods would lack
    the properties). Saving a PNG then skips PIL's loading of its other common image plugins
    (:func:`_skip_pil_preinit`). Does nothing when matplotlib's artists are already imported."""
    if "matplotlib.artist" in sys.modules:
        return
    import matplotlib.artist  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn

    artist: Any = matplotlib.artist
    kwdoc = getattr(artist, "kwdoc", None)  # a matplotlib without it: a plain import
    base: Any = getattr(artist, "Artist", None)
    update = None if base is None else base.__dict__.get("_update_set_signature_and_docstring")
    if callable(kwdoc):
        artist.kwdoc = lambda _: ""
    if isinstance(update, classmethod):
        base._update_set_signature_and_docstring = classmethod(_mark_set_generated)
    try:
        import matplotlib.backends.backend_agg  # lazy: as above
        import matplotlib.figure  # noqa: F401  (lazy: as above)
    finally:
        if callable(kwdoc):
            artist.kwdoc = kwdoc
        if isinstance(update, classmethod):
            base._update_set_signature_and_docstring = update
    _skip_pil_preinit()


def _skip_pil_preinit() -> None:
    """Mark PIL's common image plugins as loaded once its PNG plugin is (matplotlib imports it): saving a
    PNG then skips ``PIL.Image.preinit``, which imports the BMP, GIF, JPEG and PPM plugins (~0.005 s). PIL
    still loads every plugin (``init``) when asked for a format it does not know."""
    image: Any = sys.modules.get("PIL.Image")
    if image is not None and "PIL.PngImagePlugin" in sys.modules and getattr(image, "_initialized", None) == 0:
        image._initialized = 1


def _mark_set_generated(cls: Any) -> None:
    """What ``Artist._update_set_signature_and_docstring`` leaves that matplotlib reads: ``cls.set`` marked as
    generated (a subclass then gets its own ``set()``)."""
    cls.set._autogenerated_signature = True


def fixed_margins(
    fig: Any, left: float, right: float, bottom: float, top: float, wspace: float = 0.0, hspace: float = 0.0
) -> None:
    """Place ``fig``'s subplot grid by margins and gaps in inches (no layout engine).

    A layout engine (``tight_layout``, constrained layout) measures every text
    of the figure and then has the figure drawn twice when saved; the figures
    here have a fixed size and labels of known extent, so fixed margins place
    them at the cost of nothing. ``wspace``/``hspace``: the gaps between
    columns/rows of the grid, in inches."""
    w, h = fig.get_size_inches()
    rows, cols = _grid_shape(fig)
    aw = max((w - left - right - (cols - 1) * wspace) / cols, 1e-3)
    ah = max((h - bottom - top - (rows - 1) * hspace) / rows, 1e-3)
    fig.subplots_adjust(
        left=left / w, right=1 - right / w, bottom=bottom / h, top=1 - top / h, wspace=wspace / aw, hspace=hspace / ah
    )


def _grid_shape(fig: Any) -> tuple[int, int]:
    for ax in fig.axes:
        ss = ax.get_subplotspec()
        if ss is not None:
            return ss.get_topmost_subplotspec().get_gridspec().get_geometry()
    return 1, 1


def save_png(fig: Any, path: str | os.PathLike, dpi: float = _DPI) -> Path:
    """Render ``fig`` to PNG bytes (one draw; zlib level 1, which costs a fraction of the default level
    and leaves flat-coloured figures a little larger) and write them atomically to ``path``."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, pil_kwargs={"compress_level": 1})
    path = Path(path)
    write_bytes(path, buf.getvalue())
    return path


def _save(fig: Any, path: str | os.PathLike) -> Path:
    """Render ``fig`` to PNG bytes and write them atomically to ``path``."""
    return save_png(fig, path)


def _no_data(ax: Any, text: str = "no samples") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.4f}"


from detcal.reports.gap_maps import marginal_gap_map  # noqa: E402,F401  (re-export)

# --------------------------------------------------------------------------- diagrams


def reliability_diagram(
    path: str | os.PathLike,
    confidence: Any,
    precision: Any,
    count: Any,
    *,
    edges: Any = None,
    ece: float | None = None,
    title: str = "Confidence reliability",
    log_counts: bool = False,
    reuse: dict[str, Any] | None = None,
) -> Path:
    """Reliability diagram with the sample histogram underneath (Guo et al. 2017).

    Per bin b of B equal-width bins over [0, 1] (or the given ``edges`` [B+1]):
    bars of precision(b) = mean y, gap bars between precision(b) and conf(b)
    = mean p, the identity line, ECE = sum_b N_b/N |prec(b) - conf(b)| in the
    title. ``confidence``, ``precision``, ``count`` are [B]; empty bins carry
    count 0 (their NaN means are not drawn). B = 0 draws an empty diagram.

    ``reuse``: a dict kept by the caller across calls (e.g. one diagram per
    IoU threshold). The figure is kept in it, and a later diagram with the
    same bins, occupied bins and scale is drawn into it by setting the bars'
    heights, the points, the histogram and the title (its axes, ticks, labels
    and legend are made once): the same PNG as a diagram drawn anew.
    """
    n = _vec(count, "count")
    b = len(n)
    conf = _vec(confidence, "confidence", b)
    prec = _vec(precision, "precision", b)
    e = np.linspace(0.0, 1.0, b + 1) if edges is None else _vec(edges, "edges", b + 1)
    occ = n > 0
    head = f"{title}\nECE = {_fmt(ece)}  (B = {b}, N = {int(n.sum())})"
    digits = len(str(int(n.max()))) if b and not log_counts else 4
    key = ("reliability", e.tobytes(), occ.tobytes(), log_counts)
    kept = None if reuse is None else reuse.get("reliability")
    if kept is not None and kept[0] == key:
        _update_reliability(kept[1], conf[occ], prec[occ], n, head, digits)
        return _save(kept[1]["fig"], path)
    fig = agg_figure(5.0, 6.0)
    gs = fig.add_gridspec(2, 1, height_ratios=(3, 1))
    ax = fig.add_subplot(gs[0])
    axh = fig.add_subplot(gs[1], sharex=ax)
    ax.plot([0, 1], [0, 1], ls="--", color="0.3", lw=1, label="identity")
    parts: dict[str, Any] = {"fig": fig, "axh": axh, "ax": ax}
    if b and occ.any():
        left, width = e[:-1][occ], np.diff(e)[occ]
        with _bars_without_data_limits(ax):  # its view is set to [0, 1] x [0, 1] below, not autoscaled
            parts["prec"] = ax.bar(
                left, prec[occ], width=width, align="edge", color="tab:blue", edgecolor="k", lw=0.5, label="precision"
            )
            lo = np.minimum(prec[occ], conf[occ])
            parts["gap"] = ax.bar(
                left,
                np.abs(prec[occ] - conf[occ]),
                bottom=lo,
                width=width,
                align="edge",
                color="tab:red",
                alpha=0.35,
                edgecolor="tab:red",
                hatch="//",
                lw=0.5,
                label="gap",
            )
        parts["points"] = ax.plot(conf[occ], prec[occ], "o", color="k", ms=3, label="(conf, prec)")[0]
        parts["hist"] = axh.bar(e[:-1], n, width=np.diff(e), align="edge", color="0.5", edgecolor="k", lw=0.5)
        if log_counts and np.any(n > 0):
            axh.set_yscale("log")
        if reuse is not None:
            reuse["reliability"] = (key, parts)
    else:
        _no_data(ax)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("precision")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(head, fontsize=10, y=1.0)
    ax.tick_params(labelbottom=False)
    axh.set_xlabel("confidence")
    axh.set_ylabel("samples")
    _reliability_margins(fig, digits)
    return _save(fig, path)


@contextlib.contextmanager
def _bars_without_data_limits(ax: Any) -> Iterator[None]:
    """Within the block, patches added to ``ax`` leave its data limits as they are: for an axes whose view
    limits are then set by hand (the data limits serve only autoscaling), this skips matplotlib's
    measuring of every bar's outline (``Axes._update_patch_limits``: its path's Bezier extrema through the
    patch transform, ~0.5 ms a bar). The drawing is the same."""
    ax._update_patch_limits = _leave_data_limits
    try:
        yield
    finally:
        del ax._update_patch_limits


def _leave_data_limits(patch: Any) -> None:
    """Stands for ``Axes._update_patch_limits`` in :func:`_bars_without_data_limits`."""


def _reliability_margins(fig: Any, digits: int) -> None:
    """Room for the histogram's tick labels (up to six digits; larger counts are drawn with an offset) and
    its label on the left, the two-line title on top."""
    fixed_margins(fig, left=0.36 + 0.0885 * min(max(digits, 3), 6), right=0.15, bottom=0.5, top=0.5, hspace=0.28)


def _update_reliability(
    parts: dict[str, Any], conf: np.ndarray, prec: np.ndarray, n: np.ndarray, head: str, digits: int
) -> None:
    """Set a kept reliability diagram (:func:`reliability_diagram`'s ``reuse``) to new occupied-bin means
    ``conf``, ``prec``, all-bin counts ``n`` and title ``head``, as the bars would be made anew."""
    lo = np.minimum(prec, conf)
    for bar, g, y in zip(parts["gap"], np.abs(prec - conf).tolist(), lo.tolist()):
        bar.set_y(y)
        bar.set_height(g)
        bar.sticky_edges.y[:] = [y]  # as ``bar(bottom=...)`` sets them
    for bar, p in zip(parts["prec"], prec.tolist()):
        bar.set_height(p)
    for bar, c in zip(parts["hist"], n.tolist()):
        bar.set_height(c)
    parts["points"].set_data(conf, prec)
    parts["ax"].title.set_text(head)
    axh = parts["axh"]
    axh.relim()
    axh.autoscale_view(scalex=False)
    _reliability_margins(parts["fig"], digits)


def _panel_data(name: str, spec: Mapping[str, Any], sample_threshold: int, vmax: Any) -> dict[str, Any]:
    """What one D-ECE map panel draws: the gaps, the masked (empty) cells, the top of the colour scale, the
    axis names; ``shape`` and ``legend`` are what its figure's layout depends on."""
    gap = np.asarray(spec.get("signed_gap", spec.get("gap", [])), dtype=np.float64)
    cnt = np.asarray(spec.get("count", np.zeros_like(gap)), dtype=np.float64)
    if gap.ndim != 2 or cnt.shape != gap.shape:
        raise DetcalInputError(
            f"gap {gap.shape} and count {cnt.shape} must be the same 2-D shape", record=name, field="gap"
        )
    ax_names = tuple(spec.get("axes", ("feature 0", "feature 1")))
    masked = np.ma.masked_where(~np.isfinite(gap) | (cnt < sample_threshold), gap)
    empty = np.ma.getmaskarray(masked)
    top = 1.0
    if gap.size:
        top = float(np.nanmax(np.abs(masked.filled(np.nan)))) if masked.count() else 1.0
        if vmax and name in vmax and np.isfinite(vmax[name]):
            top = float(vmax[name])
        top = max(top, 1e-6)
    label = COLOUR_LABEL if "signed_gap" in spec else "mean |gap|"
    legend = bool(gap.size and empty.any())
    layout = (gap.shape, ax_names, label, legend)
    return {"gap": gap, "masked": masked, "empty": empty, "top": top, "axes": ax_names, "label": label, "shape": layout}


def _cell_text(d: Mapping[str, Any], i: int, j: int) -> tuple[str, str]:
    """The label of map cell (i, j) and its colour (white on the darkest cells)."""
    gap, empty, top = d["gap"], d["empty"], d["top"]
    txt = "–" if empty[i, j] else f"{gap[i, j]:+.2f}".replace("-", "−")
    dark = not empty[i, j] and abs(gap[i, j]) > DARK_TEXT_ABOVE * top
    return txt, "w" if dark else "k"


def _gap_panel(fig: Any, ax: Any, name: str, d: Mapping[str, Any], sample_threshold: int, cmap: Any, grey: Any) -> Any:
    """One D-ECE map panel of :func:`dece_heatmaps` (the convention of :mod:`detcal.reports.gap_colours`) from
    :func:`_panel_data`; returns what a later map with the same layout sets (``None`` for an empty one)."""
    from matplotlib.patches import Patch  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn

    gap, top, down = d["gap"], d["top"], y_down(d["axes"])
    kept = None
    if gap.size:
        im = ax.imshow(
            d["masked"].T,
            origin="upper" if down else "lower",
            extent=(0.0, 1.0, 1.0, 0.0) if down else (0.0, 1.0, 0.0, 1.0),
            cmap=cmap,
            vmin=-top,
            vmax=top,
            aspect="auto",
            interpolation="nearest",
        )
        cb = fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, ticks=[-top, 0.0, top])
        cb.ax.set_yticklabels([f"{-top:+.2f}", "0", f"{top:+.2f}"])
        cb.set_label(d["label"], fontsize=7)
        bi, bj = gap.shape
        texts = {}
        if bi * bj <= 100:  # label small grids: the signed gap per cell, as the SVG of report.html
            for i, j in np.ndindex(bi, bj):
                txt, colour = _cell_text(d, i, j)
                y_txt = (j + 0.5) / bj
                texts[i, j] = ax.text((i + 0.5) / bi, y_txt, txt, ha="center", va="center", fontsize=9, color=colour)
        if d["empty"].any():
            ax.legend(
                handles=[Patch(facecolor=grey, label=f"{EMPTY_LABEL} (N < {sample_threshold})")],
                loc="upper center",
                bbox_to_anchor=(0.5, -0.14),
                fontsize=7,
                frameon=False,
            )
        kept = (im, cb, texts)
    else:
        _no_data(ax)
    ax.set_xlabel(d["axes"][0])
    ax.set_ylabel(d["axes"][1] + (" (0 = top)" if down else ""))
    ax.set_title(name, fontsize=9, y=1.0)
    return kept


def _update_gap_panel(kept: Any, d: Mapping[str, Any]) -> None:
    """Set a kept map panel (:func:`_gap_panel`) to the map ``d`` of the same layout, as drawn anew."""
    if kept is None:
        return
    im, cb, texts = kept
    top = d["top"]
    im.set_data(d["masked"].T)
    im.set_clim(-top, top)
    cb.set_ticks([-top, 0.0, top])
    cb.ax.set_yticklabels([f"{-top:+.2f}", "0", f"{top:+.2f}"])
    for (i, j), t in texts.items():
        txt, colour = _cell_text(d, i, j)
        t.set_text(txt)
        t.set_color(colour)


def dece_heatmaps(
    path: str | os.PathLike,
    maps: Mapping[str, Mapping[str, Any]],
    *,
    sample_threshold: int = 1,
    dece: float | None = None,
    title: str = "D-ECE maps",
    vmax: Mapping[str, float] | None = None,
    reuse: dict[str, Any] | None = None,
) -> Path:
    """Heatmaps of the marginalised D-ECE gap over pairs of box features.

    ``maps`` maps a panel name (e.g. ``"cx_cy"``) to ``{"gap": [Bi,Bj],
    "count": [Bi,Bj], "axes": (name_i, name_j)}`` (as :func:`marginal_gap_map`
    returns plus the axis names), drawn in the convention of
    :mod:`detcal.reports.gap_colours` (the SVG maps of report.html use it too):
    ``signed_gap`` when given (else ``gap``) on a symmetric diverging scale
    with a colour bar, the value in each cell, axis i across over [0, 1],
    axis j upwards (for ``cy`` downwards, as in the image); cells with
    ``count < sample_threshold`` or a NaN gap grey, explained in a legend. An empty mapping
    draws one empty panel. ``vmax``: per panel, the top of the colour scale
    (give before/after maps the same one to compare them). ``reuse``: as in
    :func:`reliability_diagram`: maps with the same panels, grid shapes, axes
    and legends are drawn into the kept figure (new colours, colour bar ends,
    cell labels and title): the same PNG as maps drawn anew.
    """
    names = list(maps)
    data = [_panel_data(name, maps[name], sample_threshold, vmax) for name in names]
    key = ("dece", tuple(names), tuple(d["shape"] for d in data), sample_threshold)
    head = f"{title} (D-ECE = {_fmt(dece)})"
    kept = None if reuse is None else reuse.get("dece")
    if kept is not None and kept[0] == key:
        fig, panels = kept[1]
        for panel, d in zip(panels, data):
            _update_gap_panel(panel, d)
        fig.suptitle(head, fontsize=10)  # the same title text, set anew
        return _save(fig, path)
    k = max(len(names), 1)
    fig = agg_figure(4.6 * k, 4.4)
    axes = [fig.add_subplot(1, k, i + 1) for i in range(k)]
    # the colour bar, its ticks and its label right of each map, the next map's axis label beyond
    fixed_margins(fig, left=0.62, right=0.8, bottom=0.5, top=0.75, wspace=1.45)
    if not names:
        _no_data(axes[0])
    from matplotlib.colors import (
        LinearSegmentedColormap,  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn
    )

    grey = (EMPTY_GREY[0] / 255, EMPTY_GREY[1] / 255, EMPTY_GREY[2] / 255)
    cmap = LinearSegmentedColormap.from_list(
        "detcal_gap", [(t, tuple(c / 255 for c in rgb)) for t, rgb in DIVERGING_STOPS]
    ).with_extremes(bad=grey)
    panels = [_gap_panel(fig, ax, name, d, sample_threshold, cmap, grey) for ax, name, d in zip(axes, names, data)]
    fig.suptitle(head, fontsize=10)
    if any(ax.get_legend() is not None for ax in axes):  # the legend of the grey cells under the maps
        fixed_margins(fig, left=0.62, right=0.8, bottom=0.78, top=0.75, wspace=1.45)
    if reuse is not None:
        reuse["dece"] = (key, (fig, panels))
    return _save(fig, path)


def rmse_rmv_diagram(
    path: str | os.PathLike,
    tables: Mapping[str, Mapping[str, Any]],
    *,
    ence: Mapping[str, float] | None = None,
    log: bool = False,
    title: str = "Regression reliability (RMSE vs RMV)",
) -> Path:
    """RMSE(b) against RMV(b) per coordinate with the identity line (Levi et al. 2019).

    ``tables`` maps a coordinate name (tx, ty, tw, th) to an ENCE per-bin
    table ``{"rmv": [B], "rmse": [B], "count": [B]}``. Perfect calibration:
    RMSE(b) = RMV(b) for every bin; ENCE = (1/B) sum_b |RMV(b) - RMSE(b)| /
    RMV(b) is shown per panel when given. ``log=True`` draws log-log axes
    (non-positive values are left out). One panel per coordinate, two columns.
    """
    names = list(tables)
    k = max(len(names), 1)
    rows = math.ceil(k / 2)
    cols = 1 if k == 1 else 2
    fig = agg_figure(4.2 * cols, 3.8 * rows)
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(k)]
    if not names:
        _no_data(axes[0])
    for ax, name in zip(axes, names):
        t = tables[name]
        rmv = _vec(t.get("rmv"), f"{name}.rmv")
        rmse = _vec(t.get("rmse"), f"{name}.rmse", len(rmv))
        cnt = _vec(t.get("count", np.ones(len(rmv))), f"{name}.count", len(rmv))
        ok = (cnt > 0) & np.isfinite(rmv) & np.isfinite(rmse)
        if log:
            ok &= (rmv > 0) & (rmse > 0)
        if ok.any():
            lo = float(min(rmv[ok].min(), rmse[ok].min()))
            hi = float(max(rmv[ok].max(), rmse[ok].max()))
            if log:
                lo, hi = lo / 1.2, hi * 1.2
            else:
                pad = 0.05 * (hi - lo) if hi > lo else 0.05 * max(abs(hi), 1e-3)
                lo, hi = min(0.0, lo - pad), hi + pad
            ax.plot([lo, hi], [lo, hi], ls="--", color="0.3", lw=1, label="identity")
            ax.plot(rmv[ok], rmse[ok], "o-", color="tab:blue", ms=4, label="bins")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            if log:
                ax.set_xscale("log")
                ax.set_yscale("log")
            ax.legend(loc="upper left", fontsize=7)
        else:
            _no_data(ax)
        e = None if ence is None else ence.get(name)
        ax.set_title(f"{name}: ENCE = {_fmt(e)} (B = {int(ok.sum())})", fontsize=9, y=1.0)
        ax.set_xlabel("RMV")
        ax.set_ylabel("RMSE")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def qce_coverage_diagram(
    path: str | os.PathLike,
    tau: Any,
    coverage: Mapping[str, Any],
    *,
    mqce: Mapping[str, float] | None = None,
    title: str = "Quantile coverage (QCE)",
) -> Path:
    """Observed coverage(tau) against tau, per coordinate and joint (Kueppers et al. 2022).

    coverage(tau) = mean 1(eps <= chi2_d.ppf(tau)) with NEES eps; perfect
    calibration lies on the identity; M-QCE = mean_tau |coverage(tau) - tau|
    is shown in the legend when given. ``tau`` is [L]; ``coverage`` maps a
    name (tx, ..., joint) to [L].
    """
    t = _vec(tau, "tau")
    fig = agg_figure(5.0, 4.6)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1], ls="--", color="0.3", lw=1, label="identity")
    drawn = False
    for name, cov in coverage.items():
        c = _vec(cov, f"coverage.{name}", len(t))
        if len(t) == 0 or not np.isfinite(c).any():
            continue
        m = None if mqce is None else mqce.get(name)
        style = "k-" if name == "joint" else "o-"
        ax.plot(t, c, style, ms=3, lw=1.5 if name == "joint" else 1, label=f"{name} (M-QCE {_fmt(m)})")
        drawn = True
    if not drawn:
        _no_data(ax)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("tau (nominal coverage)")
    ax.set_ylabel("observed coverage")
    ax.set_title(title, fontsize=10, y=1.0)
    ax.legend(loc="upper left", fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def retention_diagram(
    path: str | os.PathLike,
    curves: Mapping[str, Mapping[str, Any]],
    *,
    ylabel: str = "error on retained",
    title: str = "Retention curves",
) -> Path:
    """Retention curves: error on the retained fraction, most uncertain dropped first.

    ``curves`` maps a name to ``{"retained": [R] fractions in (0, 1],
    "error": [R]}`` and optionally ``"auc"`` (R-AUC, the area under the curve;
    Malinin et al. 2021, Lakara et al.) shown in the legend, and
    ``"oracle": [R]`` (the curve when dropping by the true error) drawn dashed.
    """
    fig = agg_figure(5.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    drawn = False
    for name, c in curves.items():
        r = _vec(c.get("retained"), f"{name}.retained")
        e = _vec(c.get("error"), f"{name}.error", len(r))
        if len(r) == 0:
            continue
        auc = c.get("auc")
        lbl = name if auc is None else f"{name} (R-AUC {_fmt(float(auc))})"
        line = ax.plot(r, e, "-", lw=1.2, label=lbl)[0]
        if c.get("oracle") is not None:
            o = _vec(c.get("oracle"), f"{name}.oracle", len(r))
            ax.plot(r, o, "--", lw=0.8, color=line.get_color())
        drawn = True
    if not drawn:
        _no_data(ax)
    ax.set_xlim(0, 1)
    ax.set_xlabel("retained fraction")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10, y=1.0)
    if drawn:
        ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)
