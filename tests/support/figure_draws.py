"""Two small figures drawn in a fresh Python process, for tests that compare PNG bytes between two ways of
setting up matplotlib (tests/reports/test_plots_import.py, tests/reports/test_font_maps.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIGURES = """
out = Path(sys.argv[1])
n = np.array([5.0, 0, 40, 300, 7])
plots.reliability_diagram(out / "r.png", [0.1, np.nan, 0.5, 0.7, 0.9], [0.0, np.nan, 0.4, 0.8, 1.0], n, ece=0.1)
gap = np.array([[0.1, -0.2], [np.nan, 0.3]])
maps = {"cx_cy": {"signed_gap": gap, "count": np.array([[5, 5], [0, 9]]), "axes": ("cx", "cy")}}
plots.dece_heatmaps(out / "d.png", maps, sample_threshold=2, dece=0.2)
"""
"""Draws ``r.png`` (a reliability diagram) and ``d.png`` (a D-ECE map) into ``sys.argv[1]``; the script
before it imports ``sys``, ``Path``, numpy as ``np`` and ``detcal.reports.plots``."""


def draw(tmp_path: Path, script: str, mode: str) -> dict[str, bytes]:
    """Run ``script`` with arguments (a fresh folder under ``tmp_path`` named ``mode``, ``mode``); the files it
    wrote there, by name."""
    out = tmp_path / mode
    out.mkdir()
    subprocess.run([sys.executable, "-c", script, str(out), mode], check=True)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}
