"""The chunked, allocation-free passes (detcal.binning.kernels, detcal.metrics.regression._chunked) give
bit for bit the numbers of the one-shot numpy formulas, whatever the chunk size."""

from __future__ import annotations

import numpy as np
import pytest

import detcal.binning.cells as CS
import detcal.binning.kernels as BF
import detcal.metrics.regression._chunked as CH
from detcal.binning.edges import feature_bin_index
from detcal.core.errors import DetcalInputError
from detcal.metrics import confidence as C, regression as R
from detcal.metrics.confidence_suite import category_index

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")

LOG_2PI = float(np.log(2.0 * np.pi))


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of a few hundred samples, so that every pass runs over many chunks and leaves."""
    monkeypatch.setattr(CS, "CHUNK", 256)
    monkeypatch.setattr(CH, "LEAF", 300)
    for mod in ("qce", "sigma_bins", "scores"):
        monkeypatch.setattr(f"detcal.metrics.regression.{mod}.LEAF", 300)


def _hard_regression(n, seed=0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(n, 4))
    sigma = rng.uniform(0.2, 3.0, (n, 4))
    y = mu + rng.normal(size=(n, 4)) * sigma * rng.uniform(0.6, 1.5, (n, 4))
    return mu, sigma, y


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
def test_bin_index_into_equals_feature_bin_index(edges):
    rng = np.random.default_rng(3)
    ws = BF.Workspace(40000)
    for n_bins in (1, 2, 3, 5, 7, 10, 15, 20, 64, 100, 1000):
        grid = np.linspace(0.0, 1.0, n_bins + 1)
        k = np.arange(n_bins + 1) / n_bins
        v = np.concatenate(
            [
                rng.random(3000),
                grid,
                np.nextafter(grid, 2.0),
                np.nextafter(grid, -1.0),
                k,
                np.nextafter(k, 2.0),
                np.nextafter(k, -1.0),
                np.round(rng.random(3000), 3),
                [0.0, 1.0],
            ]
        )
        v = np.clip(v, 0.0, 1.0)
        strided = np.repeat(v, 2)[::2]  # a strided view, as a column of [S, F] features
        out = np.empty(len(v), dtype=np.int64)
        BF.bin_index_into(strided, n_bins, edges, out, ws)
        np.testing.assert_array_equal(out, feature_bin_index(v, n_bins, edges), err_msg=f"{edges} B={n_bins}")


def test_netcal_table_has_at_most_one_edge_per_cell():
    for n_bins in (1, 15, 100, 2048):
        scale, lo, nxt = BF._netcal_table(n_bins)
        u = np.arange(int(scale))
        assert np.all(nxt[u] > u / scale)  # the next edge lies beyond the cell's left end
        # and the one after it beyond the cell's right end
        after = np.append(np.linspace(0.0, 1.0, n_bins + 1), np.inf)[lo + 2]
        assert np.all(after >= (u + 1) / scale)


@pytest.mark.parametrize("n", [1, 7, 129, 8193, 70001, 300017])
def test_pairwise_sum_equals_numpy_sum(n):
    """numpy's pairwise order is reproduced leaf by leaf (this guards the numpy internals it relies on)."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n) * np.exp(5 * rng.standard_normal(n))
    b = np.abs(a)
    for leaf in (8, 100, 1000, 1 << 15):
        got = CH.pairwise_sum(n, lambda lo, hi: np.array([np.add.reduce(a[lo:hi]), np.add.reduce(b[lo:hi])]), leaf)
        assert got[0] == np.add.reduce(a) and got[1] == np.add.reduce(b)
        assert got[0] / n == np.mean(a)


def test_ordered_bincount_equals_one_shot_bincount():
    rng = np.random.default_rng(5)
    n, b = 10007, 7
    key = rng.integers(0, b, n)
    w = rng.standard_normal((2, n)) * np.exp(8 * rng.standard_normal((2, n)))
    for chunk in (1, 13, 1000, n):
        acc = CH.OrderedBincount(b, 2, chunk)
        for a in range(0, n, chunk):
            k = min(n, a + chunk) - a
            acc.key_buffer(k)[...] = key[a : a + k]
            for j in range(2):
                acc.weight_buffer(j, k)[...] = w[j, a : a + k]
            acc.add(k)
        for j in range(2):
            np.testing.assert_array_equal(acc.sums[j], np.bincount(key, weights=w[j], minlength=b))
        np.testing.assert_array_equal(acc.counts, np.bincount(key, minlength=b))


def test_regression_metrics_on_strided_columns_are_the_one_shot_numbers(small_chunks):
    mu, sigma, y = _hard_regression(5003)
    for k in range(4):
        m, s, t = mu[:, k], sigma[:, k], y[:, k]
        mc, sc, tc = (np.ascontiguousarray(a) for a in (m, s, t))
        # NLL: the one-shot formula
        z = ((tc - mc) / sc) ** 2
        assert R.gaussian_nll(m, s, t).value == 0.5 * LOG_2PI + float(np.mean(np.log(sc))) + 0.5 * float(np.mean(z))
        # ENCE / UCE over equal-width bins: bincount sums in input order
        for over, fn in (("sigma", R.ence), ("variance", R.uce)):
            v = sc if over == "sigma" else sc * sc
            idx = np.clip(np.floor((v - v.min()) / (v.max() - v.min()) * 10).astype(np.int64), 0, 9)
            st = R.sigma_bin_stats(m, s, t, bins=10, binning="equal_width", over=over)
            np.testing.assert_array_equal(st.count, np.bincount(idx, minlength=10))
            np.testing.assert_array_equal(st.sum_var, np.bincount(idx, weights=sc * sc, minlength=10))
            np.testing.assert_array_equal(st.sum_sq_err, np.bincount(idx, weights=(tc - mc) ** 2, minlength=10))
            assert (
                fn(m, s, t, bins=10, binning="equal_width").value
                == fn(mc, sc, tc, bins=10, binning="equal_width").value
            )
        # QCE: coverage counts equal the one-shot coverage_stats of the NEES
        eps = (tc - mc) ** 2 / (sc * sc)
        ref_m = R.m_qce_from_stats(R.coverage_stats(eps, None))
        ref_c = R.c_qce_from_stats(R.coverage_stats(eps, sc, bins=10), policy="netcal")
        assert R.m_qce(m, s, t).value == ref_m.value
        got = R.c_qce(m, s, t, bins=10, policy="netcal")
        assert got.value == ref_c.value
        np.testing.assert_array_equal(got.table["count"], ref_c.table["count"])


def test_chunked_regression_passes_still_name_the_bad_sample(small_chunks):
    mu, sigma, y = _hard_regression(2000)
    m, s, t = mu[:, 1].copy(), sigma[:, 1].copy(), y[:, 1].copy()
    m[1234] = np.nan
    s_bad = s.copy()
    s_bad[777] = -1.0
    fns = (
        R.gaussian_nll,
        R.m_qce,
        lambda a, b, c: R.c_qce(a, b, c, bins=10),
        lambda a, b, c: R.ence(a, b, c, binning="equal_width"),
        R.uce,
    )
    for fn in fns:
        with pytest.raises(DetcalInputError) as ei:
            fn(m, s, t)
        assert ei.value.field == "mu" and "1234" in str(ei.value.record)
        with pytest.raises(DetcalInputError) as ei:
            fn(mu[:, 1], s_bad, y[:, 1])
        assert ei.value.field == "sigma" and "777" in str(ei.value.record)


def test_cell_stats_equal_under_any_chunking(monkeypatch):
    """Small chunks, the compact path over occupied keys, groups, int/bool y: the same integers."""
    rng = np.random.default_rng(11)
    n = 6007
    p = np.round(rng.beta(2, 2, n), 3)
    y = (rng.random(n) < p).astype(np.int64)
    f = rng.random((n, 4))
    g = rng.integers(0, 9, n)
    cases = [dict(bins=15, edges=e) for e in ("floor", "netcal", "guo")] + [
        dict(features=f, bins=5, edges="netcal", groups=g),
        dict(features=f[:, :2], bins=(4, 3, 2), groups=g),
    ]
    for kw in cases:
        ref = CS.cell_stats(p, y.astype(bool), **kw)
        with monkeypatch.context() as mp:
            mp.setattr(CS, "CHUNK", 97)
            mp.setattr(CS, "_COMPACT_KEYS", 16)
            got = CS.cell_stats(p, y, **kw)
        assert got.equals(ref), kw
        # and equal to the definition, written out here: the clipped NLL term of each sample in 54-bit
        # fixed point (three 18-bit words below 2**5), summed in one shot
        eps = np.finfo(np.float64).eps
        q = np.clip(p, eps, 1 - eps) if kw.get("edges") == "netcal" else p
        c = 1e-12
        low1 = (1.0 - q) < c
        nll = np.where(
            y.astype(bool), -np.log(np.maximum(q, c)), np.where(low1, -np.log(c), -np.log1p(-np.where(low1, 0.0, q)))
        )
        r = np.ldexp(nll, 18 - 5)
        w0 = np.floor(r)
        w1 = np.floor((r - w0) * 2.0**18)
        w2 = np.rint(((r - w0) * 2.0**18 - w1) * 2.0**18)
        total = np.rint([np.sum(w) for w in (w0, w1, w2)]).astype(np.int64)
        np.testing.assert_array_equal(got.fixed["sum_nll"].reshape(-1, 3).sum(axis=0), total)


def test_cell_stats_chunk_checks_name_the_first_bad_record(monkeypatch):
    monkeypatch.setattr(CS, "CHUNK", 64)
    p = np.full(1000, 0.5)
    y = np.zeros(1000, dtype=np.int64)
    p[900] = 1.5
    y[500] = 2
    with pytest.raises(DetcalInputError) as ei:
        CS.cell_stats(p, y)
    assert ei.value.field == "p" and ei.value.record == 900  # p is checked before y, as validate_sample does
    p[900] = 0.5
    with pytest.raises(DetcalInputError) as ei:
        C.ece(p, y)
    assert ei.value.field == "y" and ei.value.record == 500


def test_category_index_equals_unique():
    rng = np.random.default_rng(2)
    for cat in (
        rng.integers(1, 45, 1000),
        rng.integers(-3, 5, 100),
        np.array([10**12, 3, 3]),
        np.array([], dtype=np.int64),
        rng.integers(0, 3, 50).astype(np.int32),
    ):
        cats, idx = category_index(cat)
        ref_c, ref_i = np.unique(cat, return_inverse=True)
        np.testing.assert_array_equal(cats, ref_c)
        np.testing.assert_array_equal(idx, ref_i)
        assert cats.dtype == ref_c.dtype


def test_suite_with_shared_cells_gives_the_same_results():
    """Cells computed once over a superset of detections and indexed per call (as the pipeline does per IoU
    threshold) give every number of the plain call."""
    from detcal.metrics.confidence_suite import SuiteBinning, confidence_metrics, suite, suite_cells

    rng = np.random.default_rng(4)
    n = 4000
    p = np.round(rng.beta(2, 2, n), 3)
    f = rng.random((n, 4))
    cat = rng.integers(1, 6, n)
    for cfg in (
        suite(),
        suite(SuiteBinning(policy="netcal", position=(4, 3, 2, 2, 3))),
        suite(SuiteBinning(edges="guo")),
    ):
        shared = suite_cells(p, f, cfg)
        for _ in range(3):
            keep = np.flatnonzero(rng.random(n) < 0.9)
            y = rng.random(len(keep)) < p[keep]
            ref = confidence_metrics(p[keep], y, f[keep], cat[keep], cfg)
            got = confidence_metrics(p[keep], y, f[keep], cat[keep], cfg, cells={k: c[keep] for k, c in shared.items()})
            assert got.keys() == ref.keys()
            for name in ref:
                assert repr(got[name].to_dict()) == repr(ref[name].to_dict()), name


def test_cell_stats_rejects_bad_cells():
    p = np.full(10, 0.5)
    y = np.zeros(10, dtype=bool)
    with pytest.raises(DetcalInputError):
        CS.cell_stats(p, y, None, (5, 2), cells=np.full(10, 10))
    with pytest.raises(DetcalInputError):
        CS.cell_stats(p, y, None, (5, 2), cells=np.zeros(9, dtype=np.int64))
    st = CS.cell_stats(p, y, None, (5, 2), cells=np.full(10, 7))
    assert st.count.tolist() == [0] * 7 + [10, 0, 0]
