"""A figure kept for the next IoU threshold (``reuse=``) gives the same PNG bytes as one drawn anew (issue 29):
reliability diagrams and D-ECE maps, with the layout kept or, where it differs, a new figure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detcal.reports import plots


def _rel(rng: np.random.Generator, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    conf = np.sort(rng.random(len(n)))
    prec = np.clip(conf + rng.normal(0, 0.2, len(n)), 0, 1)
    conf[n == 0] = prec[n == 0] = np.nan
    return conf, prec


def _maps(rng: np.random.Generator, shape: tuple[int, int], nan_cell: bool) -> dict[str, Any]:
    gap = rng.normal(0, 0.2, shape)
    cnt = rng.integers(5, 500, shape)
    if nan_cell:
        cnt[0, 1] = 1  # under the threshold: grey, with the legend
    return {
        "cx_cy": {"signed_gap": gap, "count": cnt, "axes": ("cx", "cy")},
        "w_h": {"signed_gap": -gap.T, "count": cnt.T, "axes": ("w", "h")},
    }


@pytest.mark.parametrize("log_counts", [False, True])
def test_reliability_redrawn_in_the_kept_figure_equals_a_new_one(tmp_path: Path, log_counts: bool) -> None:
    rng = np.random.default_rng(0)
    counts = [
        np.array([30, 0, 7, 1200, 90, 4, 0, 15]),
        np.array([3, 0, 70, 120000, 9, 40, 0, 1]),  # same occupied bins: kept figure (more digits)
        np.array([3, 5, 70, 12, 9, 40, 0, 1]),  # other occupied bins: a new figure
        np.array([3, 5, 70, 12, 9, 40, 0, 1]),
    ]
    reuse: dict[str, Any] = {}
    kept_fig = []
    for k, n in enumerate(counts):
        conf, prec = _rel(rng, n)
        kw = {"ece": 0.1 * k, "title": f"Reliability at iou={k}", "log_counts": log_counts}
        plots.reliability_diagram(tmp_path / f"new{k}.png", conf, prec, n, **kw)
        plots.reliability_diagram(tmp_path / f"kept{k}.png", conf, prec, n, reuse=reuse, **kw)
        kept_fig.append(reuse["reliability"][1]["fig"])
        assert (tmp_path / f"kept{k}.png").read_bytes() == (tmp_path / f"new{k}.png").read_bytes(), k
    assert kept_fig[0] is kept_fig[1] and kept_fig[1] is not kept_fig[2] and kept_fig[2] is kept_fig[3]


def test_dece_maps_redrawn_in_the_kept_figure_equal_new_ones(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    cases = [((5, 5), True), ((5, 5), True), ((5, 5), False), ((4, 5), False), ((4, 5), False), ((12, 12), False)]
    reuse: dict[str, Any] = {}
    figs = []
    for k, (shape, nan_cell) in enumerate(cases):
        maps = _maps(rng, shape, nan_cell)
        kw = {"sample_threshold": 2, "dece": 0.05 * k, "title": f"D-ECE maps at iou={k}"}
        plots.dece_heatmaps(tmp_path / f"new{k}.png", maps, **kw)
        plots.dece_heatmaps(tmp_path / f"kept{k}.png", maps, reuse=reuse, **kw)
        figs.append(reuse["dece"][1][0])
        assert (tmp_path / f"kept{k}.png").read_bytes() == (tmp_path / f"new{k}.png").read_bytes(), k
    # kept where the panels, grids and legends match; a new figure where the legend or the grid changes
    assert [figs[i] is figs[i - 1] for i in range(1, len(figs))] == [True, False, False, True, False]
