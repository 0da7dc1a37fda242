"""The figures' Agg canvas keeps text shaping, extents, line metrics and glyph images for reuse
(detcal.reports.agg_text, issue 29): every figure's PNG bytes equal those of matplotlib's own Agg canvas,
with the caches cold and warm, for plain, rotated, unantialiased, mathtext and sub-pixel-shifted texts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detcal.reports import agg_text, plots
from detcal.reports.per_class import plot_per_class_reliability


def _texts(path: Path) -> None:
    """One figure with the kinds of text the renderer handles differently."""
    fig = plots.agg_figure(4.0, 3.0)
    ax = fig.add_subplot(1, 1, 1)
    for k in range(40):  # one string at many sub-pixel places, some starting left of the canvas
        ax.text(-0.3 + k * 0.0317, 0.05 + k * 0.0213, "+0.29", fontsize=9, transform=ax.transAxes)
    ax.text(0.1, 0.9, "no antialiasing", antialiased=False, fontsize=8)
    ax.text(0.5, 0.5, "rotated 33°", rotation=33, fontsize=10)
    ax.text(0.2, 0.3, r"$\frac{a}{b} + \sqrt{x}$ mathtext", fontsize=11)  # glyphs and boxes (rules)
    ax.set_ylabel("vertical label")  # 90 degrees
    ax.set_title("two\nlines", fontsize=9)
    plots.save_png(fig, path)


def _draw_all(out: Path) -> dict[str, bytes]:
    out.mkdir()
    rng = np.random.default_rng(3)
    n = np.array([30, 0, 7, 1200, 90, 4, 0, 15])
    conf = np.sort(rng.random(8))
    prec = np.clip(conf + rng.normal(0, 0.2, 8), 0, 1)
    plots.reliability_diagram(out / "rel.png", conf, prec, n, ece=0.1234)
    plots.reliability_diagram(out / "rel_log.png", conf, prec, n, ece=0.1, log_counts=True)
    gap = rng.normal(0, 0.2, (5, 5))
    cnt = rng.integers(5, 500, (5, 5))
    cnt[0, 1] = 1
    maps = {
        "cx_cy": {"signed_gap": gap, "count": cnt, "axes": ("cx", "cy")},
        "w_h": {"signed_gap": -gap.T, "count": cnt.T, "axes": ("w", "h")},
    }
    plots.dece_heatmaps(out / "maps.png", maps, sample_threshold=2, dece=0.05)
    tables = {
        c: {"rmv": np.array([0.05, 0.1, 0.3]), "rmse": np.array([0.06, 0.12, 0.2]), "count": np.array([5, 9, 4])}
        for c in ("tx", "ty")
    }
    plots.rmse_rmv_diagram(out / "rmse_log.png", tables, ence={"tx": 0.2}, log=True)  # mathtext tick labels
    p = rng.random(600)
    y = rng.random(600) < p
    cat = rng.integers(1, 6, 600)
    plot_per_class_reliability({"det": (p, y, cat)}, {1: "person", 2: "a bicycle"}, top_n=4, path=out / "pc.png")
    _texts(out / "texts.png")
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    monkeypatch.setattr(plots, "text_caching_canvas", lambda fig: FigureCanvasAgg(fig))


def test_cached_text_draws_the_same_bytes_as_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    agg_text.clear_text_caches()
    cold = _draw_all(tmp_path / "cold")
    warm = _draw_all(tmp_path / "warm")  # every text now from the caches
    with monkeypatch.context() as m:
        _plain(m)
        plain = _draw_all(tmp_path / "plain")
    assert sorted(plain) == ["maps.png", "pc.png", "rel.png", "rel_log.png", "rmse_log.png", "texts.png"]
    for name in plain:
        assert cold[name] == plain[name], name
        assert warm[name] == plain[name], name


def _canvas_kind() -> Any:
    fig = plots.agg_figure(1.0, 1.0)
    return type(fig.canvas).__name__, fig


def test_the_caching_renderer_is_used_where_matplotlib_has_its_internals() -> None:
    from matplotlib.backends import backend_agg

    kind, fig = _canvas_kind()
    if agg_text._renderer_class(backend_agg) is None:  # another matplotlib: its own canvas, nothing kept
        assert kind == "FigureCanvasAgg"
        return
    assert kind == "TextCachingCanvasAgg"
    agg_text.clear_text_caches()
    fig.text(0.1, 0.5, "0.2 0.2 0.2")
    fig.canvas.draw()
    assert type(fig.canvas.get_renderer()).__name__ == "TextCachingRendererAgg"
    assert len(agg_text._LAYOUTS) == 1 and agg_text._GLYPHS  # one string shaped, its glyphs kept
    glyphs = len(agg_text._GLYPHS)
    fig.canvas.draw()  # the same text at the same place: nothing new
    assert len(agg_text._GLYPHS) == glyphs and len(agg_text._LAYOUTS) == 1


def test_a_full_cache_is_emptied(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(agg_text, "_MAX_ENTRIES", 2)
    cache: dict[tuple[Any, ...], Any] = {}
    for k in range(5):
        agg_text._keep(cache, (k,), k)
        assert len(cache) <= 2 and cache[(k,)] == k


def test_only_compared_matplotlib_releases_get_the_caching_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib
    from matplotlib.backends import backend_agg

    assert agg_text._release("3.11.2") == (3, 11)
    assert agg_text._release("3.11rc1") == (3, 11)
    assert agg_text._release("3.12.0.dev1+g1") == (3, 12)
    assert agg_text._release("x") is None and agg_text._release("3") is None and agg_text._release("3.rc") is None
    monkeypatch.setattr(matplotlib, "__version__", "3.99.0")  # a release nobody compared: matplotlib's canvas
    assert agg_text._renderer_class(backend_agg) is None
    monkeypatch.setattr(matplotlib, "__version__", "3.11.0")
    has_internals = hasattr(backend_agg.RendererAgg, "_draw_text_glyphs_and_boxes")
    assert (agg_text._renderer_class(backend_agg) is not None) == has_internals
