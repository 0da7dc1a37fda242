"""One drawing convention for the D-ECE maps (detcal.reports.gap_colours): the signed gap by hand, its
colour scale, and the SVG of report.html and the PNG drawn the same way (orientation, colour bar, labels,
empty cells explained)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from detcal.reports.gap_colours import DIVERGING_STOPS, EMPTY_LABEL, diverging_rgb
from detcal.reports.gap_maps import marginal_gap_map
from detcal.reports.html.svg import heatmap_svg


def test_signed_gap_by_hand() -> None:
    # grid (confidence 2 bins) x (f1 2 bins) x (f2 1 bin); C order: conf slowest
    count = np.array([4, 2, 6, 0], float)  # (c0,f0), (c0,f1), (c1,f0), (c1,f1)
    conf = np.array([0.2, 0.3, 0.8, np.nan])
    prec = np.array([0.5, 0.1, 0.6, np.nan])
    m = marginal_gap_map(count, conf, prec, (2, 2, 1), keep_axes=(1, 2))
    # f0: cells (c0: N 4, conf-prec -0.3), (c1: N 6, +0.2): signed (4*-0.3 + 6*0.2)/10 = 0; |gap| (1.2+1.2)/10
    assert m["signed_gap"][0, 0] == pytest.approx(0.0, abs=1e-15)
    assert m["gap"][0, 0] == pytest.approx(0.24)
    # f1: one kept cell (c0: N 2, +0.2); the other is empty
    assert m["signed_gap"][1, 0] == pytest.approx(0.2) and m["gap"][1, 0] == pytest.approx(0.2)
    assert np.all(np.abs(m["signed_gap"]) <= m["gap"] + 1e-15)


def test_diverging_scale_ends_and_centre() -> None:
    assert diverging_rgb(0.0, 0.3) == DIVERGING_STOPS[1][1] == (255, 255, 255)
    assert diverging_rgb(0.3, 0.3) == DIVERGING_STOPS[2][1] and diverging_rgb(9.0, 0.3) == DIVERGING_STOPS[2][1]
    assert diverging_rgb(-0.3, 0.3) == DIVERGING_STOPS[0][1]
    r, g, b = diverging_rgb(0.1, 0.3)
    assert r > b and g < 255  # over-confident: towards red


def _cells(svg: str) -> list[tuple[float, float, str]]:
    return [
        (float(x), float(y), t)
        for x, y, t in re.findall(
            r'<text x="([\d.]+)" y="([\d.]+)" class="cellt"(?: fill="#fff")? text-anchor="middle">([^<]*)<', svg
        )
    ]


def test_svg_map_orientation_colour_bar_and_empty_cells() -> None:
    grid = [[0.1, -0.05], [None, 0.2]]  # [i][j]: cx bin i, cy bin j
    counts = [[10, 12], [0, 30]]
    svg = heatmap_svg(grid, counts, ["cx", "cy"], "map")
    cells = {t: (x, y) for x, y, t in _cells(svg)}
    assert set(cells) == {"+0.10", "−0.05", "–", "+0.20"}
    assert cells["+0.10"][1] < cells["−0.05"][1]  # cy = 0 at the top, as in the image
    assert cells["+0.10"][0] < cells["+0.20"][0]  # cx = 0 at the left
    assert 'fill="#fff" text-anchor="middle">+0.20<' in svg  # white on the darkest cell
    assert "(0 = top)" in svg and EMPTY_LABEL in svg and 'class="empty"' in svg
    assert ">+0.20<" in svg and ">-0.20<" in svg  # the colour bar spans ±max|gap|
    assert f"rgb{diverging_rgb(0.2, 0.2)}".replace(" ", "") in svg.replace(" ", "")
    wh = heatmap_svg(grid, counts, ["w", "h"], "map")
    cells = {t: (x, y) for x, y, t in _cells(wh)}
    assert cells["+0.10"][1] > cells["−0.05"][1]  # h = 0 at the bottom


def test_png_map_in_the_same_convention(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from detcal.reports.plots import dece_heatmaps

    gap = np.array([[0.1, 0.05], [np.nan, 0.2]])
    signed = np.array([[0.1, -0.05], [np.nan, 0.2]])
    count = np.array([[10, 12], [0, 30]])
    out = dece_heatmaps(
        tmp_path / "m.png",
        {"cx_cy": {"gap": gap, "signed_gap": signed, "count": count, "axes": ("cx", "cy")}},
        sample_threshold=1,
    )
    from PIL import Image

    im = np.asarray(Image.open(out).convert("RGB"))
    colours = {tuple(int(c) for c in px) for px in im.reshape(-1, 3)[::7]}
    assert diverging_rgb(0.2, 0.2) in colours or any(
        max(abs(a - b) for a, b in zip(c, diverging_rgb(0.2, 0.2))) <= 2 for c in colours
    )  # the largest over-confident cell in the scale's red end, as in the SVG
