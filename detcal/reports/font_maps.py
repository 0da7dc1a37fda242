"""Font files read through a memory map in a process that only draws figures.

matplotlib (3.11) hands FreeType a font file as a Python file object: every glyph
FreeType loads is a ``seek`` and a ``read`` through Python's buffered reader,
two ``lseek`` and one ``read`` system call for each 4 KiB it wants (about 31,000
system calls for the five figures of a 5,000-image run; the figure process's
system time was ~0.018 s higher). :func:`map_font_files` has matplotlib's font loader open each
font file as a read-only ``mmap`` instead, which FreeType reads the same way
(``seek``/``read``) without a system call; the file's pages are the page cache's,
shared, and only those FreeType reads are touched. The fonts are the same bytes,
so the figures are the same.

Only for a process that draws figures and ends (the run's figure process): the
fonts' ``fname`` is then the map, not the path, which a PDF or PostScript writer
would need; a long-lived process keeps matplotlib's own loading.
"""

from __future__ import annotations

import mmap
import os
import types
from typing import Any

__all__ = ["map_font_files"]


def _mapped_module(ft2font: types.ModuleType) -> types.ModuleType:
    """matplotlib's ``ft2font`` as its font manager will see it: a copy of the module whose ``FT2Font`` opens
    a path through a memory map (anything else as it was: a file object, or a file that cannot be mapped)."""
    open_font = ft2font.FT2Font

    def mapped_font(filename: Any, *args: Any, **kwargs: Any) -> Any:
        return open_font(_mapped(filename), *args, **kwargs)

    module = types.ModuleType(ft2font.__name__, ft2font.__doc__)
    module.__dict__.update(ft2font.__dict__)
    module.FT2Font = mapped_font  # type: ignore[attr-defined]
    module._detcal_mapped = True  # type: ignore[attr-defined]
    return module


def _mapped(filename: Any) -> Any:
    if not isinstance(filename, (str, bytes, os.PathLike)):
        return filename
    try:
        with open(filename, "rb") as fh:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # missing, unreadable, empty or not mappable: matplotlib's own error or path
        return filename


def map_font_files() -> bool:
    """Have matplotlib's font manager (imported here if it is not) open font files through a memory map;
    False where this matplotlib's font manager does not load its fonts through an ``ft2font`` module
    attribute (nothing changed). Only for a process that draws figures and then ends (see the module)."""
    from matplotlib import font_manager  # lazy: matplotlib kept out of start-up, loaded where a figure is drawn

    ft2font = getattr(font_manager, "ft2font", None)
    if getattr(ft2font, "_detcal_mapped", False):
        return True
    if not isinstance(ft2font, types.ModuleType) or not callable(getattr(ft2font, "FT2Font", None)):
        return False
    font_manager.ft2font = _mapped_module(ft2font)  # type: ignore[attr-defined]
    return True
