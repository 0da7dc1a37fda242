"""The figure process reads matplotlib's font files through a memory map (detcal.reports.font_maps): the
same PNG bytes, far fewer system calls, anything that is not a mappable path left to matplotlib."""

from __future__ import annotations

import io
import mmap
import subprocess
import sys
from pathlib import Path

import pytest

from detcal.reports.font_maps import map_font_files

_DRAW = """
import sys
from pathlib import Path
import numpy as np
from detcal.reports import plots
from detcal.reports.font_maps import map_font_files
plots.import_matplotlib_for_drawing()
if sys.argv[2] == "mapped":
    assert map_font_files() and map_font_files()  # a second call leaves the first in place
    import mmap
    from matplotlib import font_manager
    font = font_manager.get_font(font_manager.fontManager._find_fonts_by_props(font_manager.FontProperties()))
    assert isinstance(font.fname, mmap.mmap), font.fname
out = Path(sys.argv[1])
n = np.array([5.0, 0, 40, 300, 7])
plots.reliability_diagram(out / "r.png", [0.1, np.nan, 0.5, 0.7, 0.9], [0.0, np.nan, 0.4, 0.8, 1.0], n, ece=0.1)
gap = np.array([[0.1, -0.2], [np.nan, 0.3]])
maps = {"cx_cy": {"signed_gap": gap, "count": np.array([[5, 5], [0, 9]]), "axes": ("cx", "cy")}}
plots.dece_heatmaps(out / "d.png", maps, sample_threshold=2, dece=0.2)
"""


def _draw(tmp_path: Path, mode: str) -> dict[str, bytes]:
    out = tmp_path / mode
    out.mkdir()
    subprocess.run([sys.executable, "-c", _DRAW, str(out), mode], check=True)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_mapped_fonts_draw_the_same_bytes(tmp_path: Path) -> None:
    mapped, plain = _draw(tmp_path, "mapped"), _draw(tmp_path, "plain")
    assert sorted(mapped) == ["d.png", "r.png"]
    assert mapped == plain


def _glyphs(font: object) -> bytes:
    font.set_size(11, 100)  # type: ignore[attr-defined]
    font.set_text("Reliability, IoU 0.50: 0123456789", 0)  # type: ignore[attr-defined]
    font.draw_glyphs_to_bitmap()  # type: ignore[attr-defined]
    return bytes(font.get_image().tobytes())  # type: ignore[attr-defined]


def test_paths_are_mapped_other_sources_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib import font_manager, ft2font

    monkeypatch.setattr(font_manager, "ft2font", ft2font)  # restored after the test: this process lives on
    path = font_manager.findfont(font_manager.FontProperties(family="DejaVu Sans"))
    assert map_font_files()
    assert font_manager.ft2font is not ft2font and font_manager.ft2font.StyleFlags is ft2font.StyleFlags
    opened = font_manager.ft2font.FT2Font(path)
    assert isinstance(opened, ft2font.FT2Font) and isinstance(opened.fname, mmap.mmap)
    assert _glyphs(opened) == _glyphs(ft2font.FT2Font(path))
    stream = io.BytesIO(Path(path).read_bytes())  # a file object goes to FreeType as it is
    assert font_manager.ft2font.FT2Font(stream).fname is stream
    empty = tmp_path / "empty.ttf"  # cannot be mapped: matplotlib meets the path and raises its own error
    empty.write_bytes(b"")
    with pytest.raises((OSError, RuntimeError, ValueError)):
        font_manager.ft2font.FT2Font(str(empty))
    with pytest.raises(OSError):
        font_manager.ft2font.FT2Font(str(tmp_path / "missing.ttf"))
