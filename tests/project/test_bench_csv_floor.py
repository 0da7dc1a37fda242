"""benchmarks/bench_vs_rust.py's CSV floor: detcal's detections.csv writer against polars' on the same columns.

The floor reads a run's detections.csv back (flags as bool, as detcal holds them), writes it again with
detcal's writer and with polars', and reports both times and how many lines differ. On a file detcal wrote,
detcal's copy is the same file byte for byte, and the lines that differ are exactly those holding a float that
``repr`` writes with an exponent (polars writes every float without one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.scripts import load_script

from detcal.reports.detections_csv import write_columns_csv


def test_the_floor_rewrites_the_run_file_and_counts_the_exponent_lines(tmp_path: Path) -> None:
    pytest.importorskip("polars")
    n = 500
    rng = np.random.default_rng(3)
    iou = rng.random(n)
    iou[[7, 300]] = [2.5e-05, 3e-07]  # written 2.5e-05 and 3e-07 by repr: two lines differ
    cols = {
        "image_id": rng.integers(1, 40, n),
        "category": rng.integers(1, 80, n),
        "score": rng.random(n).round(3),
        "considered": rng.random(n) < 0.9,
        "iou": iou,
        "matched@0.5": rng.random(n) < 0.5,
        "ignored@0.5": np.zeros(n, bool),
        "gt_id@0.5": rng.integers(-1, 900, n),
        "x1": (rng.random(n) * 600).round(2),
        "rel_w": rng.random(n),
        "clipped": rng.random(n) < 0.05,
        "tide_error": rng.integers(0, 6, n),
    }
    run_file = tmp_path / "detections.csv"
    write_columns_csv(run_file, cols)
    floor = load_script("benchmarks/bench_vs_rust.py").csv_floor(run_file, tmp_path)
    assert floor["equal to the run file"] is True
    assert floor["lines differing"] == 2
    for writer in ("detcal", "polars"):
        assert set(floor[writer]) == {"cpu", "wall"} and floor[writer]["wall"] > 0
