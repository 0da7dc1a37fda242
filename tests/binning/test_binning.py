"""Tests of detcal.binning.edges: edge rules, equal-count/width bins, mergeable CellStats."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from detcal.binning.cells import CellStats, cell_stats, pair_sums
from detcal.binning.edges import cell_index, equal_count_bins, equal_width_bins, feature_bin_index, normalise_bins
from detcal.core.errors import DetcalInputError

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


# --- core API (unchanged signatures) -----------------------------------------


def test_normalise_bins():
    assert normalise_bins(5, 3) == (5, 5, 5)
    assert normalise_bins([5, 3], 2) == (5, 3)
    with pytest.raises(ValueError):
        normalise_bins([5, 3], 3)
    with pytest.raises(ValueError):
        normalise_bins(0, 1)


def test_feature_bin_index_floor_rule_half_open_last_closed():
    # B = 5, edges 0, .2, .4, .6, .8, 1: half-open [a, b), last closed.
    # 0 -> 0; 0.2 -> floor(1.0) = 1 (left edge belongs to the bin on its right);
    # 0.1999 -> 0; 0.6 -> floor(3.0) = 3; 0.999 -> 4; 1.0 -> floor(5) = 5 clipped to 4.
    v = np.array([0.0, 0.2, 0.1999, 0.6, 0.999, 1.0])
    assert feature_bin_index(v, 5).tolist() == [0, 1, 0, 3, 4, 4]


def test_feature_bin_index_netcal_rule():
    # netcal: clip to [eps, 1-eps], searchsorted(linspace(0, 1, 6), side="right") - 1.
    # linspace(0, 1, 6)[3] = 0.6000000000000001 > 0.6, so 0.6 falls in bin 2 ([0.4, 0.6)).
    # 0.0 -> eps -> bin 0; 1.0 -> 1 - eps -> bin 4; 0.2 == edge[1] exactly -> bin 1.
    v = np.array([0.0, 0.2, 0.6, 1.0])
    assert feature_bin_index(v, 5, "netcal").tolist() == [0, 1, 2, 4]
    with pytest.raises(ValueError):
        feature_bin_index(v, 5, "bogus")


def test_netcal_rule_equals_histogramdd_on_decimal_data():
    # Independent reference: np.histogramdd with netcal's edges on the clipped data.
    rng = np.random.default_rng(3)
    x = np.round(rng.random((4000, 3)), 2)
    x[:5] = [0.0, 1.0, 0.6]
    eps = np.finfo(np.float64).eps
    bins = (5, 10, 20)
    ref, _ = np.histogramdd(np.clip(x, eps, 1 - eps), bins=[np.linspace(0, 1, b + 1) for b in bins])
    cell, n = cell_index(x, bins, edges="netcal")
    assert n == 1000
    np.testing.assert_array_equal(np.bincount(cell, minlength=n), ref.ravel().astype(np.int64))
    # and the floor rule does differ on such data (this test can fail)
    cell_f, _ = cell_index(x, bins)
    assert (cell_f != cell).any()


def test_cell_index_c_order():
    # bins (2, 3): cell = b0 * 3 + b1. (0.7, 0.5): b0 = 1, b1 = floor(1.5) = 1 -> 4.
    cell, n = cell_index(np.array([[0.7, 0.5], [0.1, 1.0], [0.0, 0.0]]), [2, 3])
    assert n == 6
    assert cell.tolist() == [4, 2, 0]


def test_equal_count_bins():
    # 7 values, 3 bins: sizes 3, 2, 2 (first 7 mod 3 = 1 group one larger), by sorted sigma.
    s = np.array([5.0, 1.0, 7.0, 2.0, 6.0, 3.0, 4.0])
    # ranks: 1.0->0, 2.0->1, 3.0->2 | 4.0->3, 5.0->4 | 6.0->5, 7.0->6
    assert equal_count_bins(s, 3).tolist() == [1, 0, 2, 0, 2, 0, 1]


def test_equal_width_bins():
    # [lo, hi] = [1, 5], 4 bins of width 1: 1 -> 0, 2 -> 1, 4.99 -> 3, 5 -> 3 (last closed)
    assert equal_width_bins(np.array([1.0, 2.0, 4.99, 5.0]), 4).tolist() == [0, 1, 3, 3]
    assert equal_width_bins(np.array([2.0, 2.0]), 4).tolist() == [0, 0]
    assert equal_width_bins(np.array([]), 4).tolist() == []


# --- CellStats ---------------------------------------------------------------


def test_cell_stats_golden():
    # p = [0.1, 0.3, 0.35, 0.8, 1.0], y = [0, 1, 0, 1, 0], 5 bins (floor):
    # cells 0 (0.1), 1 (0.3, 0.35), 4 (0.8 -> floor(4.0) = 4, 1.0 -> last closed).
    p = np.array([0.1, 0.3, 0.35, 0.8, 1.0])
    y = np.array([0, 1, 0, 1, 0])
    s = cell_stats(p, y, None, 5)
    assert s.bins == (5,)
    assert s.count.tolist() == [1, 2, 0, 0, 2]
    assert s.sum_y.tolist() == [0, 1, 0, 0, 1]
    np.testing.assert_allclose(s.sum_p, [0.1, 0.65, 0, 0, 1.8], rtol=0, atol=1e-15)
    np.testing.assert_allclose(s.sum_p0, [0.1, 0.35, 0, 0, 1.0], rtol=0, atol=1e-15)
    np.testing.assert_allclose(s.sum_p1, [0.0, 0.3, 0, 0, 0.8], rtol=0, atol=1e-15)
    # sum p^2 cell 4: 0.64 + 1 = 1.64; sum (p - y)^2 cell 1: 0.49 + 0.1225 = 0.6125
    np.testing.assert_allclose(s.sum_p2[4], 1.64, atol=1e-15)
    np.testing.assert_allclose(s.sum_se[1], 0.6125, atol=1e-15)
    # NLL cell 4: -log(0.8) - log(1e-12) (p = 1 with y = 0, 1 - p clipped to 1e-12)
    np.testing.assert_allclose(s.sum_nll[4], -math.log(0.8) - math.log(1e-12), rtol=1e-14)
    t = s.total()
    assert t.count.tolist() == [5] and t.bins == (1,)


def test_fixed_point_accuracy_vs_fsum():
    rng = np.random.default_rng(0)
    p = rng.random(100_000) ** 3
    s = cell_stats(p, np.zeros(len(p), bool), None, 1)
    # each value is rounded to a multiple of 2**-54: error <= n * 2**-55 plus final rounding
    assert abs(s.sum_p[0] - math.fsum(p)) <= len(p) * 2.0**-55 + 1e-12


def _split_stats(p, y, f, bins, cuts):
    parts = []
    edges = [0, *sorted(cuts), len(p)]
    for a, b in zip(edges[:-1], edges[1:]):
        parts.append(cell_stats(p[a:b], y[a:b], None if f is None else f[a:b], bins))
    return CellStats.merge(parts)


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    n=st.integers(0, 60),
    bins=st.sampled_from([1, 3, 5, [4, 2], [2, 3, 2]]),
)
def test_chunked_merge_is_bitwise_equal(data, n, bins):
    nf = 1 if np.ndim(bins) == 0 else len(bins)
    unit = st.floats(0.0, 1.0, allow_nan=False, allow_subnormal=True)
    p = data.draw(hnp.arrays(np.float64, n, elements=unit))
    y = data.draw(hnp.arrays(np.bool_, n))
    f = None if nf == 1 else data.draw(hnp.arrays(np.float64, (n, nf - 1), elements=unit))
    cuts = data.draw(st.lists(st.integers(0, n), max_size=4))
    one = cell_stats(p, y, f, bins)
    merged = _split_stats(p, y, f, bins, cuts)
    assert one.equals(merged)
    for name in ("sum_p", "sum_p0", "sum_p1", "sum_p2", "sum_se", "sum_nll"):
        np.testing.assert_array_equal(getattr(one, name), getattr(merged, name))
    # ... so every metric computed from them is equal too
    from detcal.metrics.confidence import ConfidenceMetric

    for name in ("dece", "nll", "sharpness"):
        m = ConfidenceMetric(name, bins, 2, use_features=True)
        a, b = m.result(one).value, m.result(merged).value
        assert a == b or (np.isnan(a) and np.isnan(b))
    # order-free as well: a permutation gives the same bits
    perm = data.draw(st.permutations(list(range(n))))
    perm = np.asarray(perm, dtype=np.int64)
    assert one.equals(cell_stats(p[perm], y[perm], None if f is None else f[perm], bins))


def test_merge_rejects_incompatible():
    a = cell_stats([0.5], [1], None, 5)
    with pytest.raises(ValueError):
        _ = a + cell_stats([0.5], [1], None, 4)
    with pytest.raises(ValueError):
        CellStats.merge([])


def test_grouped_stats():
    rng = np.random.default_rng(1)
    p = rng.random(500)
    y = rng.random(500) < p
    f = rng.random((500, 2))
    g = rng.integers(0, 4, 500)
    gs = cell_stats(p, y, f, [3, 2, 2], groups=g, n_groups=5)
    assert gs.count.shape == (5, 12)
    assert gs.count[4].sum() == 0  # group 4 is empty
    assert gs.sum_groups().equals(cell_stats(p, y, f, [3, 2, 2]))
    k = 2
    sub = cell_stats(p[g == k], y[g == k], f[g == k], [3, 2, 2])
    np.testing.assert_array_equal(gs.count[k], sub.count)
    np.testing.assert_array_equal(gs.fixed["sum_nll"][k], sub.fixed["sum_nll"])


def test_pair_sums_add_up_to_cell_stats():
    rng = np.random.default_rng(2)
    p = rng.random(300)
    y = rng.random(300) < 0.5
    img = rng.integers(0, 20, 300)
    rows, cols, sums, n_cells = pair_sums(img, p, y, None, 6)
    assert n_cells == 6
    assert len(np.unique(rows * 6 + cols)) == len(rows)  # one entry per (image, cell)
    s = cell_stats(p, y, None, 6)
    np.testing.assert_array_equal(np.bincount(cols, weights=sums.count, minlength=6), s.count)
    np.testing.assert_allclose(np.bincount(cols, weights=sums.sum_p, minlength=6), s.sum_p, rtol=1e-13)
    np.testing.assert_allclose(np.bincount(cols, weights=sums.sum_nll, minlength=6), s.sum_nll, rtol=1e-13)


def test_cell_stats_empty():
    s = cell_stats(np.zeros(0), np.zeros(0, bool), np.zeros((0, 4)), 5)
    assert s.count.shape == (3125,) and s.n == 0


@pytest.mark.parametrize(
    "kwargs, field, record",
    [
        (dict(p=[0.2, 1.5], y=[0, 1]), "p", 1),
        (dict(p=[0.2, np.nan], y=[0, 1]), "p", 1),
        (dict(p=[0.2, 0.5], y=[0, 2]), "y", 1),
        (dict(p=[0.2, 0.5], y=[0]), "y", None),
        (dict(p=[0.2, 0.5], y=[0, 1], features=[[0.1], [1.2]]), "features[:, 0]", 1),
        (dict(p=[0.2, 0.5], y=[0, 1], features=[[0.1, 0.2]]), "features", None),
        (dict(p=[0.2, 0.5], y=[0, 1], features=[[0.1], [0.2]], bins=[5]), "bins", None),
        (dict(p=[0.2, 0.5], y=[0, 1], edges="bogus"), "edges", None),
        (dict(p=[0.2, 0.5], y=[0, 1], groups=[0, -1], n_groups=2), "groups", 1),
    ],
)
def test_cell_stats_validation(kwargs, field, record):
    with pytest.raises(DetcalInputError) as err:
        cell_stats(**kwargs)
    assert err.value.field == field
    assert err.value.record == record


def test_netcal_edge_rule_equals_binary_search_on_edges_and_neighbours():
    """The fast netcal edge rule (guess + correction) equals netcal's searchsorted binning exactly,
    including values on the linspace edges and one ulp either side of them."""
    from detcal.binning.edges import feature_bin_index

    rng = np.random.default_rng(1)
    eps = np.finfo(np.float64).eps
    for n_bins in (1, 2, 3, 5, 7, 10, 15, 20, 100):
        grid = np.linspace(0.0, 1.0, n_bins + 1)
        v = np.concatenate(
            [
                rng.random(20000),
                grid,
                np.nextafter(grid, 2.0),
                np.nextafter(grid, -1.0),
                np.round(rng.random(5000), 3),
                [0.0, 1.0],
            ]
        )
        v = np.clip(v, 0.0, 1.0)
        ref = np.clip(np.searchsorted(grid, np.clip(v, eps, 1 - eps), side="right") - 1, 0, n_bins - 1)
        np.testing.assert_array_equal(feature_bin_index(v, n_bins, "netcal"), ref)
