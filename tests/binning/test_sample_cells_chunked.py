"""Cells in cache-sized chunks and the min/max check of the suite's inputs (issue 29, seventh pass): the same
integers and the same errors as the whole-array binning and :func:`validate_sample`."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.binning import cells as CS
from detcal.binning.edges import EPS, cell_index_columns
from detcal.core.errors import DetcalInputError


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
@pytest.mark.parametrize("chunk", [CS.CHUNK, 97, 1])
def test_sample_cells_in_chunks_equal_the_whole_columns(edges: str, chunk: int, monkeypatch) -> None:
    rng = np.random.default_rng(7)
    s = 1500
    p, f = rng.random(s), rng.random((s, 3))
    p[:40] = np.round(p[:40] * 6) / 6  # values on the edges, 0 and 1
    f[40:80] = np.round(f[40:80] * 4) / 4
    p[80], f[81, 2] = 1.0, 0.0
    bins = (6, 4, 1, 5)
    p_used = np.clip(p, EPS, 1.0 - EPS) if edges == "netcal" else p
    want = cell_index_columns([p_used, f[:, 0], f[:, 1], f[:, 2]], bins, edges)
    monkeypatch.setattr(CS, "CHUNK", chunk)
    got, b, used = CS.sample_cells(p, f, bins, edges)
    assert got.dtype == np.int64 and b == bins
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(used, p_used)
    conf_only = CS.sample_cells(p, None, 9, edges)[0]
    np.testing.assert_array_equal(conf_only, cell_index_columns([p_used], (9,), edges))
    assert len(CS.sample_cells(p[:0], f[:0], bins, edges)[0]) == 0


def test_checked_p_features_are_validate_sample() -> None:
    rng = np.random.default_rng(1)
    p, f = rng.random(50), rng.random((50, 2))
    got = CS.checked_p_features(p, f)
    want = CS.validate_sample(p, np.zeros(50, bool), f)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[2])
    assert CS.checked_p_features(list(p))[1] is None
    for bad_p, bad_f, field in ((1.5, None, "p"), (np.nan, None, "p"), (None, np.nan, "features[:, 1]")):
        q, g = p.copy(), f.copy()
        if bad_p is not None:
            q[17] = bad_p
        if bad_f is not None:
            g[23, 1] = bad_f
        with pytest.raises(DetcalInputError) as got_err:
            CS.checked_p_features(q, g)
        with pytest.raises(DetcalInputError) as want_err:
            CS.validate_sample(q, np.zeros(50, bool), g)
        assert str(got_err.value) == str(want_err.value) and got_err.value.field == field
