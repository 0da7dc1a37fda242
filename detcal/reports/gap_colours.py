"""The one drawing convention of every D-ECE map, shared by the PNG (matplotlib) and the SVG of report.html.

- cell (i, j): feature ``axes[0]`` bin i across (left to right, 0 to 1), ``axes[1]`` bin j; for a
  position axis (``cy``) 0 is the top of the image, as in the image; otherwise 0 is at the bottom;
- colour: the signed gap conf - prec of the cell (``signed_gap``) on one diverging scale symmetric
  about 0, blue (under-confident) - white (0) - red (over-confident), its end ``vmax`` the largest
  ``|signed_gap|`` of the map, with a colour bar;
- label: the signed gap with two decimals in every cell (white on the darkest cells);
- empty cells (no kept cell: fewer than ``sample_threshold`` detections): grey, labelled "–", and
  explained in the legend.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DARK_TEXT_ABOVE", "EMPTY_GREY", "diverging_rgb", "y_down", "DIVERGING_STOPS", "COLOUR_LABEL", "EMPTY_LABEL"]

DIVERGING_STOPS: tuple[tuple[float, tuple[int, int, int]], ...] = (
    (0.0, (33, 102, 172)),
    (0.5, (255, 255, 255)),
    (1.0, (178, 24, 43)),
)
"""The diverging scale: position in [0, 1] (0: -vmax, 0.5: 0, 1: +vmax) -> RGB."""

DARK_TEXT_ABOVE = 0.6
"""A cell's label is white where ``|signed_gap| > DARK_TEXT_ABOVE * vmax`` (dark cell), black elsewhere."""

EMPTY_GREY = (200, 200, 200)
"""The colour of an empty cell."""

COLOUR_LABEL = "conf − prec (red over-confident, blue under-confident)"
EMPTY_LABEL = "grey: no cell with enough detections"


def diverging_rgb(v: float, vmax: float) -> tuple[int, int, int]:
    """RGB of the signed gap ``v`` on the scale [-vmax, vmax] (clipped)."""
    t = 0.5 if vmax <= 0 else 0.5 + 0.5 * max(-1.0, min(1.0, v / vmax))
    for (t0, c0), (t1, c1) in zip(DIVERGING_STOPS, DIVERGING_STOPS[1:]):
        if t <= t1:
            f = 0.0 if t1 == t0 else (t - t0) / (t1 - t0)
            return tuple(round(a + f * (b - a)) for a, b in zip(c0, c1))  # type: ignore[return-value]
    return DIVERGING_STOPS[-1][1]


def y_down(axes: Sequence[str]) -> bool:
    """True when the vertical axis is an image position (0 at the top)."""
    return len(axes) > 1 and axes[1] in ("cy", "y")
