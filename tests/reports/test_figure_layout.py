"""The PNG figures placed by fixed margins (no layout engine) keep their texts inside and apart, and the
per-class figure drawn panel by panel into its PNG equals the grid of axes (issue 29, fourth pass)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")
from PIL import Image  # noqa: E402

from detcal.reports import plots  # noqa: E402
from detcal.reports.per_class import plot_per_class_reliability  # noqa: E402


def _texts(fig: Any) -> list[Any]:
    out = []
    for ax in fig.axes:
        out += [t for t in (ax.yaxis.label, ax.xaxis.label, ax.title) if t.get_text()]
        out += [t for t in ax.get_yticklabels() + ax.get_xticklabels() if t.get_text()]
        leg = ax.get_legend()
        out += [t for t in leg.get_texts()] if leg is not None else []
    return out + [t for t in fig.texts if t.get_text()]


def _drawn(fn: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    figs: list[Any] = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path: (figs.append(fig), save(fig, path))[1])
    fn()
    (fig,) = figs
    return fig


def _inside_and_apart(fig: Any) -> None:
    r = fig.canvas.get_renderer()
    box = fig.bbox
    texts = _texts(fig)
    extents = [(t.get_text(), t.get_window_extent(r)) for t in texts]
    for name, e in extents:
        assert e.x0 >= box.x0 - 0.5 and e.x1 <= box.x1 + 0.5 and e.y0 >= box.y0 - 0.5 and e.y1 <= box.y1 + 0.5, name
    labels = [(n, e) for (n, e), t in zip(extents, texts) if t in [a.yaxis.label for a in fig.axes]]
    for n, e in labels:  # no axis label runs into another text (e.g. the previous map's colour-bar label)
        for m, f in extents:
            if m != n and e.overlaps(f):
                assert not (e.x0 < f.x1 - 1 and f.x0 < e.x1 - 1 and e.y0 < f.y1 - 1 and f.y0 < e.y1 - 1), (n, m)


def test_dece_maps_keep_labels_inside_and_apart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gap = np.array([[0.1, np.nan, 0.3], [0.05, 0.2, 0.12]])
    count = np.array([[10, 0, 30], [5, 40, 8]])
    spec = {"signed_gap": gap, "gap": np.abs(gap), "count": count}
    maps = {"cx_cy": {**spec, "axes": ("cx", "cy")}, "w_h": {**spec, "axes": ("w", "h")}}
    fig = _drawn(lambda: plots.dece_heatmaps(tmp_path / "m.png", maps, sample_threshold=6, dece=0.2), monkeypatch)
    assert any(ax.get_legend() is not None for ax in fig.axes)  # the grey cells' legend under the maps
    assert fig.get_layout_engine() is None  # drawn once when saved
    _inside_and_apart(fig)


def test_reliability_diagram_log_counts_inside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = np.array([900000, 45000, 3000, 800, 90, 12, 0, 5, 40, 2500])
    conf = np.linspace(0.05, 0.95, 10)
    fig = _drawn(
        lambda: plots.reliability_diagram(tmp_path / "r.png", conf, conf * 0.9, count, ece=0.1, log_counts=True),
        monkeypatch,
    )
    assert fig.get_layout_engine() is None
    _inside_and_apart(fig)


@pytest.mark.parametrize("detectors, top_n", [(1, 9), (2, 5), (1, 1)])
def test_per_class_png_equals_the_grid_of_axes(tmp_path: Path, detectors: int, top_n: int) -> None:
    rng = np.random.default_rng(7)
    n = 4000
    cat = rng.choice([1, 2, 3, 4, 5, 6, 7], n)
    p = rng.random(n)
    y = (rng.random(n) < p).astype(float)
    samples = {f"detector {k}": (p ** (1 + k), y, cat) for k in range(detectors)}
    names = {1: "person", 2: "a rather long category name", 3: "car"}
    assert plot_per_class_reliability(samples, names, top_n=top_n, path=tmp_path / "fast.png") is None
    fig = plot_per_class_reliability(samples, names, top_n=top_n)
    assert len(fig.axes) == int(np.ceil(np.sqrt(min(top_n, 7)))) * int(
        np.ceil(min(top_n, 7) / np.ceil(np.sqrt(min(top_n, 7))))
    )
    plots.save_png(fig, tmp_path / "grid.png", dpi=110)
    fast = np.asarray(Image.open(tmp_path / "fast.png").convert("RGBA"))
    grid = np.asarray(Image.open(tmp_path / "grid.png").convert("RGBA"))
    assert fast.shape == grid.shape
    assert np.array_equal(fast, grid)  # the same pixels: panels, ticks, titles, legend, blank cells
    _inside_and_apart(fig)
