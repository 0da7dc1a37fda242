"""The figure process reads matplotlib's font files through a memory map (detcal.reports.font_maps): the
same PNG bytes, far fewer system calls, anything that is not a mappable path left to matplotlib."""

from __future__ import annotations

import io
import mmap
from pathlib import Path

import pytest
from support.figure_draws import FIGURES, draw

from detcal.reports.font_maps import map_font_files

_PRELUDE = """
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
"""
_DRAW = _PRELUDE + FIGURES


def _draw(tmp_path: Path, mode: str) -> dict[str, bytes]:
    return draw(tmp_path, _DRAW, mode)


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
