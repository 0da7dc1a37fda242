"""The ninth speed pass of the confidence block and its intervals (issue 29, 29z4): every shortcut gives the
numbers, bit for bit, of the plain computation it replaces."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from detcal.binning.cells import (
    CHUNK,
    FLOAT_STATS,
    CellSums,
    cell_stats,
    pair_sums,
    sample_cells,
    sample_terms,
    sorted_rank,
)
from detcal.metrics import bootstrap as bs, image_cells
from detcal.metrics.confidence_loo import cell_loo, loo_homogeneity, loo_max_gap, loo_outliers, loo_sum_ratio
from detcal.metrics.confidence_suite import class_values, sub_grid_stats, suite


def _sample(s: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    p = rng.random(s)
    p[:20] = np.round(p[:20] * 5) / 5  # on the edges, 0 and 1 included
    p[20:25] = -0.0
    y = rng.random(s) < p
    f = rng.random((s, 4))
    img = np.sort(rng.integers(0, max(2, s // 40), s))
    return p, y, f, img


# -- pair sums -------------------------------------------------------------------------------------------


def _plain_pair_sums(inv: np.ndarray, p: np.ndarray, y: np.ndarray, n_pairs: int) -> dict[str, np.ndarray]:
    """The sums per pair as the pass before 29z4 made them: one bincount per statistic over all samples."""
    out = {k: np.bincount(inv, weights=v, minlength=n_pairs) for k, v in sample_terms(p, y).items()}
    out["sum_p"] = out["sum_p0"] + out["sum_p1"]
    out["count"] = np.bincount(inv, minlength=n_pairs).astype(np.float64)
    out["sum_y"] = np.bincount(inv, weights=y.astype(np.float64), minlength=n_pairs)
    return out


@pytest.mark.parametrize("bins", [15, (5, 5, 5, 5, 5), 1])
@pytest.mark.parametrize("y_kind", ["bool", "int"])
def test_pair_sums_equal_one_count_per_statistic(bins: Any, y_kind: str) -> None:
    p, y, f, img = _sample(6000)
    yy = y if y_kind == "bool" else y.astype(np.int64)
    feats = f if np.ndim(bins) else None
    rows, cols, sums, n_cells = pair_sums(img, p, yy, feats, bins)
    cell = sample_cells(p, feats, bins)[0]
    uniq, inv = np.unique(img * n_cells + cell, return_inverse=True)
    assert np.array_equal(rows, uniq // n_cells) and np.array_equal(cols, uniq % n_cells)
    want = _plain_pair_sums(inv.reshape(-1), p, y, len(uniq))
    for name in CellSums._fields:
        assert np.array_equal(getattr(sums, name), want[name]), name
        assert np.array_equal(np.signbit(getattr(sums, name)), np.signbit(want[name])), name


@pytest.mark.parametrize("fields", [("count", "sum_y"), ("count", "sum_y", "sum_p0"), ("sum_p1", "sum_nll")])
def test_pair_sums_of_some_fields(fields: tuple[str, ...]) -> None:
    p, y, f, img = _sample(3000, 1)
    _, _, all_sums, _ = pair_sums(img, p, y, f, 4)
    _, _, some, _ = pair_sums(img, p, y, f, 4, fields=fields)
    for name in CellSums._fields:
        got = getattr(some, name)
        if name in fields or name in ("count", "sum_y"):
            assert np.array_equal(got, getattr(all_sums, name)), name
        else:
            assert got is None, name


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
def test_one_cell_grid_is_the_group(edges: str) -> None:
    p, y, f, img = _sample(2000, 2)
    for feats, bins in ((None, 1), (f, (1, 1, 1, 1, 1))):
        rows, cols, sums, n_cells = pair_sums(img, p, y, feats, bins, edges=edges)
        assert n_cells == 1 and not cols.any() and np.array_equal(rows, np.unique(img))
        cell = sample_cells(p, feats, bins, edges)[0]
        assert not cell.any()  # binning would have put every sample in cell 0
        p_used = sample_cells(p, feats, bins, edges)[2]
        want = _plain_pair_sums(np.unique(img, return_inverse=True)[1].reshape(-1), p_used, y, len(rows))
        assert all(np.array_equal(getattr(sums, k), want[k]) for k in CellSums._fields)


# -- sorted_rank ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype,hi",
    [(np.int32, 62_500_000), (np.int64, 10**6), (np.uint16, 3000), (np.uint8, 200), (np.int64, 2**60), (np.int16, 50)],
)
def test_sorted_rank_is_unique(dtype: Any, hi: int) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 9, CHUNK + 7, 100_000):
        keys = rng.integers(0, hi, n, dtype=np.int64).astype(dtype)
        if dtype is np.int16:
            keys -= 25  # negative keys: the argsort path
        uniq, inv = sorted_rank(keys)
        want_u, want_i = np.unique(keys, return_inverse=True)
        assert uniq.dtype == want_u.dtype and inv.dtype == np.intp
        assert np.array_equal(uniq, want_u) and np.array_equal(inv, want_i.reshape(-1))


def test_sorted_rank_of_floats_and_empty() -> None:
    keys = np.array([0.5, -1.0, 0.5, 3.0])
    uniq, inv = sorted_rank(keys)
    assert uniq.tolist() == [-1.0, 0.5, 3.0] and inv.tolist() == [1, 0, 1, 2]
    uniq, inv = sorted_rank(np.zeros(0, dtype=np.int64))
    assert len(uniq) == 0 and len(inv) == 0


# -- the product matrix: one home ------------------------------------------------------------------------


def _grid(s: int = 4000, bins: Any = (5, 3, 3, 3, 3)) -> tuple[dict[str, Any], image_cells.GridCells]:
    p, y, f, img = _sample(s, 4)
    fns = dict(suite())
    names = ["dece", "homogeneity", "outliers"]
    inv, n_groups = bs._layout(img, (p, y, f))
    arrays = (p, y, f)
    key = fns["dece"].grid_key(*arrays)
    g = image_cells.grid_cells(fns, key, names, inv, n_groups, arrays, matrix=False)
    return fns, g


def test_with_matrix_and_matrix_from_build_one_matrix() -> None:
    _, g = _grid()
    assert g.pack  # the packed column of count and matched
    kept = image_cells.with_matrix(g)
    assert kept.rows is g.rows and kept.cols is g.cols and kept.sums is g.sums
    held = [g]
    bare = image_cells.matrix_from(held)
    assert held == [] and len(bare.rows) == 0 and bare.sums.count is None
    for a, b in ((kept.at, bare.at),):
        assert np.array_equal(a.indptr, b.indptr) and np.array_equal(a.indices, b.indices)
        assert np.array_equal(a.data, b.data)
    data = np.stack([g.sums.count * g.pack + g.sums.sum_y, g.sums.sum_p], axis=1)
    plain = image_cells.transposed_csr(g.rows, g.cols, data, g.n_groups, g.n_occ)
    x = np.random.default_rng(0).integers(0, 3, (g.n_groups, 5)).astype(np.float64)
    assert np.array_equal(kept.at @ x, plain @ x)


def test_matrix_from_pairs_not_by_image() -> None:
    _, g = _grid(1500)
    perm = np.random.default_rng(1).permutation(len(g.rows))
    sums = CellSums(*(None if v is None else v[perm] for v in g.sums))
    shuffled = image_cells.GridCells(
        g.members, g.fields, g.rows[perm], g.cols[perm], sums, g.n_occ, g.n_groups, None, g.matrix_fields, g.pack
    )
    x = np.random.default_rng(2).integers(0, 3, (g.n_groups, 4)).astype(np.float64)
    assert np.array_equal(image_cells.matrix_from([shuffled]).at @ x, image_cells.with_matrix(g).at @ x)


@pytest.mark.parametrize("k", [1, 2, 7])
def test_csc_indices_column_by_column(k: int) -> None:
    col = np.random.default_rng(5).integers(0, 400, 3000).astype(np.int32)
    got = image_cells.csc_indices(col, 100, 400, k)
    want = (col.astype(np.int64)[:, None] * k + np.arange(k)).reshape(-1)
    assert got.dtype == np.int32 and np.array_equal(got, want)


# -- draws shared across thresholds -----------------------------------------------------------------------


def test_shared_draw_counts_are_the_draw_counts() -> None:
    want = bs.draw_counts(300, 45, 7)
    assert [b.flags.writeable for b in bs.shared_draw_counts(300, 45, 7)] == [True] * len(want)  # no block open
    with bs.draws_shared():
        first = bs.shared_draw_counts(300, 45, 7)
        assert bs.shared_draw_counts(300, 45, 7) is first  # the same blocks handed out again
        assert all(np.array_equal(a, b) and not a.flags.writeable for a, b in zip(first, want))
        other = bs.shared_draw_counts(301, 45, 7)
        assert other is not first and [b.shape for b in other] == [(45, 301)]
        assert bs.shared_draw_counts(300, 45, 7) is not first  # the last arguments only are kept
    assert bs._DRAWS.items == []


# -- leave-one-out: shared weights --------------------------------------------------------------------------


def test_loo_measures_read_the_same_weights_as_alone() -> None:
    _, g = _grid(5000)
    total = CellSums(*(None if v is None else np.bincount(g.cols, weights=v, minlength=g.n_occ) for v in g.sums))
    args = (total, g.rows, g.cols, g.sums, g.n_groups, 4)
    shared = cell_loo(*args)
    together = [
        loo_sum_ratio(shared, 1.0, "drop", power=False),
        loo_sum_ratio(shared, 2.0, "drop", power=True),
        loo_homogeneity(shared, False),
        loo_outliers(shared),
        loo_sum_ratio(shared, 1.0, "netcal", power=False),
    ]
    alone = [
        loo_sum_ratio(cell_loo(*args), 1.0, "drop", power=False),
        loo_sum_ratio(cell_loo(*args), 2.0, "drop", power=True),
        loo_homogeneity(cell_loo(*args), False),
        loo_outliers(cell_loo(*args)),
        loo_sum_ratio(cell_loo(*args), 1.0, "netcal", power=False),
    ]
    for a, b in zip(together, alone):
        assert np.array_equal(a, b, equal_nan=True)
    # the plain denominator of before the pass
    w_t, w_l = np.where(shared.kept_t, shared.n_t, 0.0), np.where(shared.kept_l, shared.n_l, 0.0)
    den = w_t.sum() + np.bincount(shared.unit, weights=w_l - w_t[shared.col], minlength=shared.m)
    assert np.array_equal(shared.memo["weights_drop"][3], den)


def test_loo_max_gap_order_is_lexsorts() -> None:
    _, g = _grid(5000, 15)
    total = CellSums(*(None if v is None else np.bincount(g.cols, weights=v, minlength=g.n_occ) for v in g.sums))
    c = cell_loo(total, g.rows, g.cols, g.sums, g.n_groups, 1)
    key_t = np.where(c.kept_t, c.gap_t, -np.inf)
    order = np.argsort(-key_t, kind="stable")
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    r = rank[c.col]
    assert np.array_equal(np.lexsort((r, c.unit)), np.argsort(c.unit.astype(np.int64) * len(order) + r, kind="stable"))
    assert np.isfinite(loo_max_gap(c)).any()


# -- per-class values and the map statistics --------------------------------------------------------------


def test_sums_of_some_fields() -> None:
    p, y, f, _ = _sample(3000, 6)
    st = cell_stats(p, y, f, 3)
    full, some = st.sums(), st.sums(("count", "sum_p", "sum_nll"))
    for name in CellSums._fields:
        got = getattr(some, name)
        assert np.array_equal(got, getattr(full, name)) if name in ("count", "sum_p", "sum_nll") else got is None


def test_class_values_read_their_fields_only() -> None:
    p, y, f, img = _sample(8000, 7)
    cat = img % 7
    measures = suite()
    keys, grouped = {}, {}
    for name, m in measures.items():
        key = m.grid_key(None, None, f) if m.binned else "free"
        keys[name] = key
        if key not in grouped:  # every statistic: a measure reading a field it does not name would find it
            grouped[key] = m.stats(p, y, f if m.binned else None, groups=cat, n_groups=7, which=tuple(FLOAT_STATS))
    got = class_values(measures, grouped, keys)
    for name, m in measures.items():
        st = grouped[keys[name]]
        want = m.values((st if m.binned else st.total()).sums())
        assert np.array_equal(got[name], want, equal_nan=True), name


@pytest.mark.parametrize("edges", ["floor", "netcal", "guo"])
@pytest.mark.parametrize("dims", [[1, 2], [3, 4], [4, 1], [2]])
def test_sub_grid_stats_equal_the_sub_grid_binned(edges: str, dims: list[int]) -> None:
    p, y, f, _ = _sample(7000, 8)
    grid = (5, 4, 3, 2, 5)
    which = ("sum_p0", "sum_p1", "sum_nll")
    whole = cell_stats(p, y, f, grid, edges=edges, stats=which)
    cols = [d - 1 for d in dims]
    want = cell_stats(p, y, f[:, cols], (grid[0], *(grid[d] for d in dims)), edges=edges, stats=which[:2])
    got = sub_grid_stats(whole, dims, which[:2])
    assert got.equals(want) and tuple(got.bins) == tuple(want.bins)
    assert np.array_equal(got.sums().sum_p, want.sums().sum_p)
