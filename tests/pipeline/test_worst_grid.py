"""The worst-detections grid given as its columns (``sample_feature_columns``) against the stacked copies it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.pipeline.confidence_block import sample_feature_columns
from detcal.pipeline.spec import FEATURES, DeceBinningSpec, EvaluationSpec
from detcal.reports.html.worst import worst_detections


@pytest.mark.parametrize("cols", [[], [0], [2, 0], [0, 1, 2, 3], [3, 1]])
def test_sample_feature_columns_are_the_stacked_copy(cols: list[int]) -> None:
    rng = np.random.default_rng(3)
    feats = rng.random((500, 4))
    rows = np.sort(rng.choice(500, 321, replace=False))
    p = rng.random(500)[rows]
    want = np.column_stack([p, np.take(feats, rows, axis=0)[:, cols]])
    spec = EvaluationSpec(dece_binning=DeceBinningSpec(features=tuple(FEATURES[k] for k in cols), bins=5))
    got = [p] + (sample_feature_columns(spec, feats, rows) or [])
    assert len(got) == want.shape[1]
    for j, c in enumerate(got):
        assert c.dtype == want.dtype and c.shape == (len(rows),)
        np.testing.assert_array_equal(c, want[:, j])


@pytest.mark.parametrize("edges", ["floor", "netcal"])
@pytest.mark.parametrize("n_feat", [0, 2, 4])
def test_worst_detections_reads_the_columns_as_the_stack(edges: str, n_feat: int) -> None:
    rng = np.random.default_rng(11)
    n = 400
    p, y, f = rng.random(n), rng.random(n) < 0.4, rng.random((n, n_feat))
    cols = {k: np.arange(n) for k in ("iou", "image_id", "category", "file_name", "width", "height")}
    ctx = {**cols, "p": p, "y": y, "features": f if n_feat else None,
           "feature_names": ["confidence"] + [f"f{j}" for j in range(n_feat)],
           "class_name": [f"c{j}" for j in range(n)], "box": rng.random((n, 4)), "gt_box": [None] * n}  # fmt: skip
    bins = [4] + [3] * n_feat
    plain = worst_detections(ctx, bins, 2, "drop", edges=edges)
    columns = [p] + [f[:, j].copy() for j in range(n_feat)]
    given = worst_detections({**ctx, "features": None, "grid_columns": columns}, bins, 2, "drop", edges=edges)
    assert plain == given
    assert plain["largest_contributions"]  # the tables are filled, so the comparison reads rows
