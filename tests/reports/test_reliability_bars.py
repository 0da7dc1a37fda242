"""The reliability diagram's precision and gap bars are added without updating the data limits of their
axes, whose view is set to [0, 1] by hand (detcal.reports.plots, issue 29): the same PNG bytes as bars
added the ordinary way, the histogram below still autoscaled."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest

from detcal.reports import plots


def _draw(out: Path) -> dict[str, bytes]:
    out.mkdir()
    rng = np.random.default_rng(5)
    for k, (n, log) in enumerate(
        [
            (np.array([30, 0, 7, 1200, 90, 4, 0, 15]), False),
            (np.array([3, 5, 70, 120000, 9, 40, 2, 1]), True),
            (np.array([1, 0, 0, 0, 0, 0, 0, 900]), False),
        ]
    ):
        conf = np.sort(rng.random(len(n)))
        prec = np.clip(conf + rng.normal(0, 0.3, len(n)), 0, 1)  # gaps above and below the diagonal
        conf[n == 0] = prec[n == 0] = np.nan
        plots.reliability_diagram(out / f"r{k}.png", conf, prec, n, ece=0.1, log_counts=log)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_bars_without_data_limits_draw_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    quick = _draw(tmp_path / "quick")
    with monkeypatch.context() as m:
        m.setattr(plots, "_bars_without_data_limits", lambda ax: contextlib.nullcontext())
        ordinary = _draw(tmp_path / "ordinary")
    assert sorted(quick) == ["r0.png", "r1.png", "r2.png"]
    assert quick == ordinary


def test_the_axes_data_limits_are_restored_after_the_bars() -> None:
    fig = plots.agg_figure(2.0, 2.0)
    ax = fig.add_subplot(1, 1, 1)
    with plots._bars_without_data_limits(ax):
        ax.bar([0.0, 0.5], [0.3, 0.9], width=0.5, align="edge")
    assert "_update_patch_limits" not in vars(ax)  # matplotlib's own method again
    before = ax.dataLim.frozen()
    ax.bar([2.0], [5.0], width=1.0, align="edge")
    assert ax.dataLim.ymax == 5.0 and ax.dataLim.xmax == 3.0 and not np.array_equal(before, ax.dataLim)
