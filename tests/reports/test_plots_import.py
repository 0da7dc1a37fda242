"""The forked figure writer imports matplotlib without its artists' ``set()`` property lists
(detcal.reports.plots.import_matplotlib_for_drawing): the same PNG bytes, ``kwdoc`` restored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_DRAW = """
import sys
from pathlib import Path
import numpy as np
from detcal.reports import plots
if sys.argv[2] == "lean":
    plots.import_matplotlib_for_drawing()
    import matplotlib.artist, matplotlib.lines
    assert matplotlib.artist.kwdoc.__name__ == "kwdoc"  # restored after the import
    assert "antialiased" in matplotlib.artist.kwdoc(matplotlib.lines.Line2D)
    assert "antialiased" not in (matplotlib.lines.Line2D.set.__doc__ or "")  # the list was not built
else:
    import matplotlib.lines
    assert "antialiased" in matplotlib.lines.Line2D.set.__doc__
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


def test_lean_import_draws_the_same_bytes(tmp_path: Path) -> None:
    lean, full = _draw(tmp_path, "lean"), _draw(tmp_path, "full")
    assert sorted(lean) == ["d.png", "r.png"]
    assert lean == full


def test_lean_import_does_nothing_once_matplotlib_is_loaded() -> None:
    import matplotlib.artist

    from detcal.reports.plots import import_matplotlib_for_drawing

    kwdoc = matplotlib.artist.kwdoc
    import_matplotlib_for_drawing()
    assert matplotlib.artist.kwdoc is kwdoc
