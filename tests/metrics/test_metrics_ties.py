"""One tie rule for every rank-based metric, and the degenerate LENCE (issue 13 items 1 and 3).

Reference implementations here are written independently of the code under
test: a full stable sort with each tie group replaced by its mean, then
plain slicing.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from detcal.binning.edges import equal_count_bins, equal_count_cuts, rank_segments
from detcal.core.errors import DetcalInputError
from detcal.metrics import regression as R


def _ref_segment_sums(u: np.ndarray, cuts: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Sort by u, replace each value by the mean over its tie group, sum every rank slice."""
    order = np.argsort(u, kind="stable")
    us, ws = u[order], w[order]
    _, inv, cnt = np.unique(us, return_inverse=True, return_counts=True)
    ws = (np.bincount(inv, weights=ws) / cnt)[inv]
    c = np.concatenate([[0], cuts, [len(u)]])
    return np.array([ws[a:b].sum() for a, b in zip(c[:-1], c[1:])])


def _ref_ence(sigma: np.ndarray, e: np.ndarray, bins: int) -> float:
    cuts = equal_count_cuts(len(sigma), bins)
    n = np.diff(np.concatenate([[0], cuts, [len(sigma)]]))
    rmv = np.sqrt(_ref_segment_sums(sigma, cuts, sigma**2) / n)
    rmse = np.sqrt(_ref_segment_sums(sigma, cuts, e**2) / n)
    ok = n > 0
    return float(np.mean(np.abs(rmv[ok] - rmse[ok]) / rmv[ok]))


# ----------------------------------------------------------------------------- rank segments


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 5), min_size=0, max_size=40),
    st.lists(st.integers(0, 40), min_size=0, max_size=8),
    st.integers(0, 2**31 - 1),
)
def test_rank_segments_match_sort_and_group_mean(vals, raw_cuts, seed):
    u = np.asarray(vals, dtype=np.float64)
    n = len(u)
    cuts = np.sort(np.minimum(np.asarray(raw_cuts, dtype=np.int64), n))
    w = np.random.default_rng(seed).normal(size=n)
    seg = rank_segments(u, cuts)
    np.testing.assert_allclose(seg.sums(w), _ref_segment_sums(u, cuts, w), atol=1e-12)
    np.testing.assert_array_equal(seg.count, np.diff(np.concatenate([[0], cuts, [n]])))
    np.testing.assert_allclose(seg.sums(np.ones(n)), seg.count, atol=1e-12)
    perm = np.random.default_rng(seed + 1).permutation(n)
    np.testing.assert_allclose(rank_segments(u[perm], cuts).sums(w[perm]), seg.sums(w), atol=1e-12)


def test_rank_segments_without_straddling_ties_is_the_stable_sort_split():
    rng = np.random.default_rng(0)
    s = rng.integers(0, 50, 1000).astype(float)  # many ties, but bins of 100 rarely cut inside one...
    s = np.repeat(np.arange(10.0), 100)[rng.permutation(1000)]  # ...here never: groups of 100 = bin size
    seg = rank_segments(s, equal_count_cuts(1000, 10))
    assert seg.groups == ()
    np.testing.assert_array_equal(seg.index, equal_count_bins(s, 10))
    np.testing.assert_array_equal(seg.lo_value, np.arange(10.0))
    np.testing.assert_array_equal(seg.hi_value, np.arange(10.0))


def test_rank_segments_rejects_bad_cuts():
    with pytest.raises(DetcalInputError, match="cuts"):
        rank_segments(np.arange(5.0), [3, 2])
    with pytest.raises(DetcalInputError, match="cuts"):
        rank_segments(np.arange(5.0), [6])


# ----------------------------------------------------------------------------- ENCE ties


def test_ence_tie_straddling_edge_by_hand():
    # sigma [1, 2, 2, 3], B = 2: ranks [0, 2) and [2, 4); the tie group {2, 2} holds ranks 1-2,
    # half in each bin, each member carrying the group mean e^2 = (0 + 4) / 2 = 2.
    # bin0: sum sigma^2 = 1 + 4 = 5, sum e^2 = 1 + 2 = 3; bin1: 4 + 9 = 13, 2 + 9 = 11
    sigma = np.array([1.0, 2.0, 2.0, 3.0])
    e = np.array([1.0, 0.0, 2.0, 3.0])
    want = 0.5 * ((np.sqrt(5) - np.sqrt(3)) / np.sqrt(5) + (np.sqrt(13) - np.sqrt(11)) / np.sqrt(13))
    for perm in ([0, 1, 2, 3], [3, 2, 1, 0], [0, 2, 1, 3]):
        r = R.ence(np.zeros(4), sigma[perm], e[perm], bins=2)
        assert r.value == pytest.approx(want, abs=1e-15)
        np.testing.assert_array_equal(r.table["count"], [2, 2])
        np.testing.assert_allclose(r.table["rmse"] ** 2, [1.5, 5.5])
        np.testing.assert_allclose(r.table["sigma_lo"], [1, 2])
        np.testing.assert_allclose(r.table["sigma_hi"], [2, 3])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ence_permutation_invariant_on_tied_sigmas(seed):
    rng = np.random.default_rng(seed)
    n = 997
    sigma = np.exp(np.clip(rng.normal(0, 3, n), -2, 2))  # clamped log-variances: two big tie groups
    e = rng.normal(size=n) * sigma * 1.3
    ref = _ref_ence(sigma, e, 10)
    values = [
        R.ence(np.zeros(n), sigma[p], e[p], bins=10).value
        for p in [np.arange(n), np.arange(n)[::-1]] + [rng.permutation(n) for _ in range(5)]
    ]
    np.testing.assert_allclose(values, ref, rtol=0, atol=1e-12)
    assert max(values) - min(values) <= 1e-12


def test_ence_twelve_samples_reversed():
    # 12 samples whose tied sigmas straddle the edges of 5 equal-count bins (sizes 3,3,2,2,2)
    sigma = np.array([0.5, 0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0])
    e = np.array([0.1, 0.9, -0.4, 0.7, 1.5, -0.2, 0.8, 2.5, -1.0, 3.1, 0.3, 2.0])
    fwd = R.ence(np.zeros(12), sigma, e, bins=5).value
    rev = R.ence(np.zeros(12), sigma[::-1], e[::-1], bins=5).value
    assert fwd == pytest.approx(rev, abs=1e-14)  # equal up to the summation order of floats
    assert fwd == pytest.approx(_ref_ence(sigma, e, 5), abs=1e-14)


def test_c_qce_equal_count_permutation_invariant():
    rng = np.random.default_rng(4)
    n = 500
    sigma = rng.integers(1, 5, n).astype(float)
    e = rng.normal(size=n) * sigma * 1.2
    a = R.c_qce(np.zeros(n), sigma, e, bins=7, binning="equal_count")
    b = R.c_qce(np.zeros(n), sigma[::-1], e[::-1], bins=7, binning="equal_count")
    assert a.value == pytest.approx(b.value, abs=1e-14)
    np.testing.assert_array_equal(a.table["count"], np.diff(np.concatenate([[0], equal_count_cuts(n, 7), [n]])))


@pytest.mark.parametrize(
    "fn",
    [
        lambda m, s, y: R.rmse_rmv_ratio(m, s, y).table["ratio"],
        lambda m, s, y: R.mwse(m, s, y).table["mwse"],
        lambda m, s, y: R.retention_curve(m, s, y, uncertainty=R.ll_fu_scores(m, s, y)).table["error"],
        lambda m, s, y: R.retention_curve(m, s, y).table["error"],
        lambda m, s, y: R.f1_retention(m, s, y, threshold=1.0).table["f1"],
    ],
    ids=["rmse_rmv", "mwse", "ll_fu_retention", "r_auc", "f1"],
)
def test_retention_curves_permutation_invariant(fn):
    rng = np.random.default_rng(7)
    n = 301
    sigma = np.round(rng.uniform(0.5, 2.0, n), 1)  # 16 distinct values: ties everywhere
    mu = np.zeros(n)
    y = rng.normal(size=n) * sigma
    a = fn(mu, sigma, y)
    b = fn(mu[::-1], sigma[::-1], y[::-1])
    p = rng.permutation(n)
    c = fn(mu[p], sigma[p], y[p])
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a, c, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- LENCE degenerate case


@pytest.mark.parametrize("const", [0.1, 0.125, 0.3, 1.0, 7.7, 1e-3])
def test_lence_equal_sigma_is_infinite(const):
    y = np.random.default_rng(0).normal(size=1000)
    cv = R.coefficient_of_variation(np.zeros(1000), np.full(1000, const), y)
    assert cv.value == 0.0
    r = R.lence(np.zeros(1000), np.full(1000, const), y)
    assert r.value == float("inf")
    assert r.extra["cv"] == 0.0 and "C_v = 0" in r.extra["reason"]


def test_lence_by_hand_and_paper_table():
    # sigma [1, 2, 3, 4], e = [1, 2, 3, 8], B = 2 (equal count: {1,2}, {3,4})
    sigma = np.array([1.0, 2.0, 3.0, 4.0])
    e = np.array([1.0, 2.0, 3.0, 8.0])
    rmv = np.sqrt([2.5, 12.5])
    rmse = np.sqrt([2.5, 36.5])
    ence = np.mean(np.abs(rmv - rmse) / rmv)
    cv = np.sqrt(np.sum((sigma - 2.5) ** 2) / 3) / 2.5
    r = R.lence(np.zeros(4), sigma, e, bins=2)
    assert r.value == pytest.approx(np.log(ence + 1 / cv), abs=1e-14)
    assert r.extra["ence"] == pytest.approx(ence, abs=1e-15)
    assert r.extra["cv"] == pytest.approx(cv, abs=1e-15)
    # natural log, as Lakara et al.'s Table 1 (single model: ENCE 3.551, C_v 0.550, LENCE 1.6804)
    assert np.log(3.551 + 1 / 0.550) == pytest.approx(1.6804, abs=5e-4)
