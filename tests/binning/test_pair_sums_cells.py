"""pair_sums with the cells given, and the counting rank of dense keys: the same arrays as the binned, sorted path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from detcal.binning.cells import dense_rank, pair_sums, sample_cells
from detcal.metrics.confidence_suite import confidence_metrics, suite, suite_cells


@pytest.mark.parametrize("n_keys", [50, 10**6])  # dense (counting) and sparse (sorting) ranges
def test_dense_rank_equals_unique(n_keys: int) -> None:
    keys = np.random.default_rng(0).integers(0, n_keys, 400)
    uniq, inv = dense_rank(keys, n_keys)
    want, want_inv = np.unique(keys, return_inverse=True)
    assert np.array_equal(uniq, want) and np.array_equal(inv, want_inv.reshape(-1))
    assert np.array_equal(uniq[inv], keys)


def test_dense_rank_by_hand() -> None:
    uniq, inv = dense_rank(np.array([7, 2, 7, 0]), 8)
    assert uniq.tolist() == [0, 2, 7] and inv.tolist() == [2, 1, 2, 0]
    uniq, inv = dense_rank(np.array([5, 5]), -1)  # unknown range: sorted
    assert uniq.tolist() == [5] and inv.tolist() == [0, 0]


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
def test_pair_sums_with_given_cells_is_bitwise_the_binned_path(edges: str) -> None:
    rng = np.random.default_rng(1)
    s = 3000
    p, y, f = rng.random(s), rng.random(s) < 0.4, rng.random((s, 2))
    group = rng.integers(0, 40, s)
    bins = (6, 3, 2)
    cell = sample_cells(p, f, bins, edges)[0]
    a = pair_sums(group, p, y, f, bins, edges=edges)
    b = pair_sums(group, p, y, None, bins, edges=edges, cells=cell)
    for x, z in zip(a[:2], b[:2]):
        assert np.array_equal(x, z)
    assert a[3] == b[3] == 36
    for x, z in zip(a[2], b[2]):
        assert (x is None and z is None) or np.array_equal(x, z)


def test_suite_intervals_with_shared_cells_equal_without() -> None:
    """confidence_metrics with the suite's cells given: the same replicates and intervals as binning anew."""
    rng = np.random.default_rng(2)
    s = 1500
    p, y, f = rng.random(s), rng.random(s) < 0.5, rng.random((s, 4))
    image = rng.integers(0, 60, s)
    measures = suite()
    cells = suite_cells(p, f, measures)
    kw = {"n_boot": 30, "seed": 3}
    a = confidence_metrics(p, y, f, None, measures, image, **kw)
    b = confidence_metrics(p, y, f, None, measures, image, cells=cells, **kw)
    assert a.keys() == b.keys()
    assert any(r.ci is not None for r in a.values())  # the intervals were computed
    for k in a:
        assert json.dumps(a[k].to_dict(), sort_keys=True, default=str) == json.dumps(
            b[k].to_dict(), sort_keys=True, default=str
        )
