"""The D-ECE map cells read off the D-ECE grid's cells are the integers binning anew gives."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.binning.cells import sample_cells
from detcal.pipeline.confidence_block import _map_cells_of


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
@pytest.mark.parametrize("dims", [[1, 2], [3, 4], [2, 4], [4, 1]])
def test_sub_grid_cells_equal_binning_anew(edges: str, dims: list[int]) -> None:
    rng = np.random.default_rng(0)
    s = 5000
    p, f = rng.random(s), rng.random((s, 4))
    f[:50] = np.round(f[:50] * 5) / 5  # values on the edges
    grid = (7, 5, 4, 3, 6)
    whole = sample_cells(p, f, grid, edges)[0]
    cols = [d - 1 for d in dims]
    want = sample_cells(p, f[:, cols], (grid[0], *(grid[d] for d in dims)), edges)[0]
    assert np.array_equal(_map_cells_of(whole, grid, dims), want)


def test_by_hand() -> None:
    # grid (2, 3, 4): cell = (c * 3 + a) * 4 + b; the (c, b) sub-grid cell is c * 4 + b
    cell = np.array([(1 * 3 + 2) * 4 + 3, (0 * 3 + 1) * 4 + 0])
    assert _map_cells_of(cell, (2, 3, 4), [2]).tolist() == [1 * 4 + 3, 0]
    assert _map_cells_of(cell, (2, 3, 4), [1]).tolist() == [1 * 3 + 2, 0 * 3 + 1]
