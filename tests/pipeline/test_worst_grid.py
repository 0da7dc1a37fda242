"""The worst-detections grid filled column by column (``sample_grid``) against the stacked copies it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.pipeline.report_data import sample_grid
from detcal.reports.html.worst import worst_detections


@pytest.mark.parametrize("cols", [[], [0], [2, 0], [0, 1, 2, 3], [3, 1]])
def test_sample_grid_equals_stacked_copy(cols: list[int]) -> None:
    rng = np.random.default_rng(3)
    feats = rng.random((500, 4))
    rows = np.sort(rng.choice(500, 321, replace=False))
    p = rng.random(500)[rows]
    want = np.column_stack([p, np.take(feats, rows, axis=0)[:, cols]])
    got = sample_grid(p, feats, rows, cols)
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("edges", ["floor", "netcal"])
def test_worst_detections_reads_the_grid_as_the_stack(edges: str) -> None:
    rng = np.random.default_rng(11)
    n = 400
    p, y, f = rng.random(n), rng.random(n) < 0.4, rng.random((n, 2))
    cols = {k: np.arange(n) for k in ("iou", "image_id", "category", "file_name", "width", "height")}
    ctx = {**cols, "p": p, "y": y, "features": f, "feature_names": ["confidence", "cx", "cy"],
           "class_name": [f"c{j}" for j in range(n)], "box": rng.random((n, 4)), "gt_box": [None] * n}  # fmt: skip
    plain = worst_detections(ctx, [4, 3, 3], 2, "drop", edges=edges)
    grid = np.column_stack([p, f])
    with_grid = worst_detections({**ctx, "grid": grid}, [4, 3, 3], 2, "drop", edges=edges)
    assert plain == with_grid
    assert plain["largest_contributions"]  # the tables are filled, so the comparison reads rows
