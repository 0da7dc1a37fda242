"""Text on the figures' Agg canvas with its shaping, its extents and its glyph images kept for reuse.

The figures of a run draw the same few dozen strings hundreds of times (tick labels, the cells of the
D-ECE maps, axis labels, the same labels in every per-class panel and again at the second IoU
threshold). matplotlib's Agg renderer (3.11) shapes every string anew at each draw (``FT2Font._layout``),
measures it anew for every new renderer, and renders every glyph anew (``FT2Font._render_glyph``), about
a fifth of the figures' drawing. :func:`text_caching_canvas` binds a figure to an Agg canvas whose
renderer keeps those results, in this process, keyed by everything they depend on:

- the shaping of string ``s`` (its glyphs and their offsets): by the font object, its size, the dpi,
  ``s``, the hinting flag and the text's font features and language. The renderer prepares the font
  the same way before every shaping (cleared, its size set), so the shaping is the same each time;
- the extent (width, height, descent) of ``s``: by the same, without features or language;
- for the drawing under way only (a later drawing may follow other rcParams): the font found for a
  font properties object, and its line metrics (ascent, descent, line gap: what ``Text._get_layout``
  reads from the font's tables for every text at every layout, through the renderer's
  ``_get_font_height_metrics`` where it has one);
- a glyph's image: by the font object, size, dpi, glyph, hinting flag, render mode, the text's
  transform matrix and the fractional part (in 1/64 pixel) of the pen position. FreeType renders a
  glyph moved by whole pixels into the same image, moved by as many pixels (the outline is translated,
  its box rounded to whole pixels, and rasterised relative to that box), so the image is kept with its
  offset relative to the pen's whole-pixel position and placed from there.

The pixels are those of matplotlib's own renderer: every glyph image is drawn at the same place and in
the same order (tests/reports/test_agg_text.py compares the PNG bytes of every figure of a run drawn both
ways). The internals this rests on are private to matplotlib: the caching renderer is used only on the
matplotlib releases it was compared on (``VERIFIED_MATPLOTLIB``) and where those internals are present;
elsewhere the canvas is matplotlib's own. The caches are bounded (cleared when full).
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Any

import numpy as np

__all__ = ["text_caching_canvas", "clear_text_caches"]

_LAYOUTS: dict[tuple[Any, ...], list[tuple[Any, int, float, float]]] = {}
_EXTENTS: dict[tuple[Any, ...], tuple[float, float, float]] = {}
_GLYPHS: dict[tuple[Any, ...], tuple[np.ndarray, int, int]] = {}
_MAX_ENTRIES = 10_000
"""Entries kept per cache (a glyph image and its key take a few hundred bytes: at most a few MB); a full
cache is emptied. A run's figures keep about 900 glyph images and 70 shapings."""

VERIFIED_MATPLOTLIB: tuple[tuple[int, int], ...] = ((3, 11),)
"""The matplotlib releases (major, minor) whose Agg internals the caching renderer was compared on, byte for
byte; any other release draws with matplotlib's own canvas."""


def clear_text_caches() -> None:
    """Forget every kept shaping, extent and glyph image."""
    _LAYOUTS.clear()
    _EXTENTS.clear()
    _GLYPHS.clear()


def _keep(cache: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> None:
    if len(cache) >= _MAX_ENTRIES:
        cache.clear()
    cache[key] = value


def text_caching_canvas(fig: Any) -> Any:
    """Bind ``fig`` to an Agg canvas whose renderer reuses text shaping, extents and glyph images (matplotlib's
    own Agg canvas where its renderer lacks the internals used here); returns the canvas."""
    return _canvas_class()(fig)


@functools.cache
def _canvas_class() -> Any:
    from matplotlib.backends import backend_agg  # lazy: matplotlib kept out of start-up, loaded where drawn

    renderer_class = _renderer_class(backend_agg)
    if renderer_class is None:
        return backend_agg.FigureCanvasAgg

    class TextCachingCanvasAgg(backend_agg.FigureCanvasAgg):  # type: ignore[misc]
        """matplotlib's Agg canvas, its renderer reusing text work (:mod:`detcal.reports.agg_text`)."""

        def get_renderer(self) -> Any:
            renderer = super().get_renderer()
            if type(renderer) is backend_agg.RendererAgg:
                renderer.__class__ = renderer_class
            if isinstance(renderer, renderer_class):
                renderer.start_drawing(self.figure)
            return renderer

    return TextCachingCanvasAgg


def _renderer_class(backend_agg: Any) -> Any:
    """The caching renderer class (matplotlib's ``RendererAgg`` with the methods below), or None where
    matplotlib's Agg renderer lacks what it rests on."""
    import matplotlib  # lazy: as above
    from matplotlib import ft2font  # lazy: as above

    if _release(getattr(matplotlib, "__version__", "")) not in VERIFIED_MATPLOTLIB:
        return None
    base = getattr(backend_agg, "RendererAgg", None)
    needed = ("_draw_text_glyphs_and_boxes", "_prepare_font", "draw_text", "get_text_width_height_descent")
    font_needs = ("_layout", "_render_glyph", "_set_transform", "set_text", "get_width_height", "get_descent")
    if (
        base is None
        or not all(hasattr(base, n) for n in needed)
        or not all(hasattr(getattr(ft2font, "FT2Font", None), n) for n in font_needs)
        or not hasattr(ft2font, "RenderMode")
        or not hasattr(backend_agg, "get_hinting_flag")
    ):
        return None
    namespace = {
        "__doc__": "matplotlib's Agg renderer; the shaping, extents and glyph images of plain text kept (module "
        "caches), and the fonts and line metrics of the drawing under way (:mod:`detcal.reports.agg_text`).",
        "__module__": __name__,
        "_text_base": base,
        "_hinting": staticmethod(backend_agg.get_hinting_flag),
        "_render_modes": (ft2font.RenderMode.NORMAL, ft2font.RenderMode.MONO),
        "start_drawing": _start_drawing,
        "_font_for": _font_for,
        "draw_text": _draw_text,
        "get_text_width_height_descent": _text_extent,
        "_draw_text_glyphs_and_boxes": _draw_glyphs,
    }
    if not hasattr(base, "_get_font_height_metrics"):  # a matplotlib whose Agg renderer has its own: kept
        namespace["_get_font_height_metrics"] = _font_height_metrics
    return type("TextCachingRendererAgg", (base,), namespace)


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``3.11.2`` or ``3.11.0rc1``; None if it has no such head."""
    parts = version.split(".")
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    minor = "".join(itertools.takewhile(str.isdigit, parts[1]))
    return (int(parts[0]), int(minor)) if minor else None


# The methods of the caching renderer class (``self``: a TextCachingRendererAgg; ``self._text_base``:
# matplotlib's RendererAgg, whose own methods serve what is not kept).


def _start_drawing(self: Any, figure: Any) -> None:
    """Called by the canvas whenever it hands the renderer out (a drawing starts): the figure whose texts it
    lays out, and no fonts or line metrics kept from an earlier drawing (rcParams may have changed)."""
    self.detcal_figure = figure
    self.detcal_line_metrics = {}
    self.detcal_fonts = {}


def _font_for(self: Any, prop: Any) -> tuple[Any, bool]:
    """The font matplotlib draws ``prop`` with, found once per font properties and drawing, and whether it
    was prepared now (``_prepare_font``: cleared, its size set)."""
    fonts = getattr(self, "detcal_fonts", None)
    font = None if fonts is None else fonts.get(prop)
    if font is not None:
        return font, False
    font = self._prepare_font(prop)
    if fonts is not None:
        fonts[prop.copy()] = font
    return font, True


def _font_height_metrics(self: Any, prop: Any) -> Any:
    """The line metrics matplotlib's ``Text._get_layout`` computes for every text at every layout (the font
    found for ``prop``, two of its tables read), once per font properties and drawing, computed as it does."""
    figure = getattr(self, "detcal_figure", None)
    cache = getattr(self, "detcal_line_metrics", None)
    if figure is None or cache is None:
        return None, None, None
    dpi = figure.dpi  # the canvas's figure: the root figure of every text it draws
    found = cache.get((prop, dpi))
    if found is None:
        found = _line_metrics(prop, dpi)
        cache[prop.copy(), dpi] = found
    return found


def _draw_text(
    self: Any, gc: Any, x: Any, y: Any, s: Any, prop: Any, angle: Any, ismath: Any = False, mtext: Any = None
) -> Any:
    """``RendererAgg.draw_text`` with the shaping of plain text kept."""
    if ismath:
        return self._text_base.draw_text(self, gc, x, y, s, prop, angle, ismath, mtext)
    font, prepared = self._font_for(prop)
    flags = self._hinting()
    features = mtext.get_fontfeatures() if mtext is not None else None
    language = mtext.get_language() if mtext is not None else None
    size = prop.get_size_in_points()
    key = (font, size, self.dpi, s, flags, features, language)
    items = _LAYOUTS.get(key)
    if items is None:
        if not prepared:
            font = self._prepare_font(prop)  # shaped from the state matplotlib shapes from
        found = font._layout(s, flags=flags, features=features, language=language)
        items = [(i.ft_object, i.glyph_index, i.x, i.y) for i in found]
        _keep(_LAYOUTS, key, items)
    glyphs = ((f, size, g, 0, 1, dx, dy) for f, g, dx, dy in items)
    self._draw_text_glyphs_and_boxes(gc, x, y, angle, glyphs, [])
    return None


def _text_extent(self: Any, s: Any, prop: Any, ismath: Any) -> Any:
    """``RendererAgg.get_text_width_height_descent`` with the extents of plain text kept."""
    if ismath is not False:
        return self._text_base.get_text_width_height_descent(self, s, prop, ismath)
    font, _ = self._font_for(prop)
    key = (font, prop.get_size_in_points(), self.dpi, s, self._hinting())
    found = _EXTENTS.get(key)
    if found is None:
        found = self._text_base.get_text_width_height_descent(self, s, prop, ismath)
        _keep(_EXTENTS, key, found)
    return found


def _draw_glyphs(self: Any, gc: Any, x: Any, y: Any, angle: Any, glyphs: Any, boxes: Any) -> None:
    """``RendererAgg._draw_text_glyphs_and_boxes`` with the glyph images kept: each glyph drawn at the pen
    position matplotlib computes (in 1/64 pixel; y downwards here, upwards in FreeType), from its kept image
    where one was rendered at the same fraction of a pixel; the boxes (mathtext rules) by matplotlib."""
    cos = math.cos(math.radians(angle))
    sin = math.sin(math.radians(angle))
    flags = self._hinting()
    normal, mono = self._render_modes
    mode = normal if gc.get_antialiased() else mono
    height = self.height
    matrices: dict[tuple[Any, Any], tuple[np.ndarray, tuple[int, ...]]] = {}
    for font, size, glyph_index, slant, extend, dx, dy in glyphs:
        m = matrices.get((slant, extend))
        if m is None:
            arr = (
                (0x10000 * np.array([[cos, -sin], [sin, cos]]) @ [[extend, extend * slant], [0, 1]]).round().astype(int)
            )
            m = matrices[slant, extend] = (arr, tuple(arr.ravel().tolist()))
        px = round(0x40 * (x + dx * cos - dy * sin))
        py = round(0x40 * (height - y + dx * sin + dy * cos))
        key = (font, size, self.dpi, glyph_index, flags, mode, m[1], px & 63, py & 63)
        kept = _GLYPHS.get(key)
        if kept is None:
            font.set_size(size, self.dpi)
            font._set_transform(m[0], [px, py])
            bitmap = font._render_glyph(glyph_index, flags, mode)
            buffer = bitmap.buffer if mode == normal else bitmap.buffer * 0xFF
            kept = (buffer, bitmap.left - (px >> 6), bitmap.top - (py >> 6))
            _keep(_GLYPHS, key, kept)
        buffer, left, top = kept
        # draw_text_image's y is downwards and names the image's bottom side
        self._renderer.draw_text_image(
            buffer, left + (px >> 6), int(height) - (top + (py >> 6)) + buffer.shape[0], 0, gc
        )
    if len(boxes):
        self._text_base._draw_text_glyphs_and_boxes(self, gc, x, y, angle, (), boxes)


def _line_metrics(prop: Any, dpi: float) -> tuple[Any, Any, Any]:
    """(ascent, descent, line gap) of the font matplotlib finds for ``prop`` at ``dpi``, as matplotlib's
    ``Text._get_layout`` computes them from the font's OS/2 or hhea table, in the same order of operations;
    (None, None, None) where the font has neither (matplotlib then measures)."""
    from matplotlib.font_manager import fontManager, get_font  # lazy: as above

    font: Any = get_font(fontManager._find_fonts_by_props(prop))
    possible = (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"), ("hhea", "lineGap", "ascent", "descent"))
    for table_name, gap_key, ascent_key, descent_key in possible:
        table = font.get_sfnt_table(table_name)
        if table is None:
            continue
        fontsize = prop.get_size_in_points()
        units_per_em = font.get_sfnt_table("head")["unitsPerEm"]
        scale = 1 / units_per_em * fontsize * dpi / 72
        return table[ascent_key] * scale, -table[descent_key] * scale, table[gap_key] * scale
    return None, None, None
