"""The intervals one grid at a time (issue 29, seventh pass): every new path equals the one it replaces, bit for bit.

* the product matrix built as the transpose of the image-by-cell CSR matrix (a CSC matrix) gives the same
  replicate sums as scipy's converted and transposed coordinate matrix, whatever the weights;
* the replicates from narrow integer draw counts, multiplied in column blocks of any width, equal those of
  the float count matrix in one product;
* the whole suite one grid at a time (draw counts first, each grid's jackknife from its pairs, the pairs
  released before its product) gives the replicates and jackknife values of the path that holds every grid;
* the measures of one grid sharing their left-out cells and spread give the values computed afresh;
* per-class values in blocks of classes equal the values of the whole [G, C] array.

Cases: one image, images with one detection, sparse and empty cells, the netcal policy, block widths of one
replicate and of a few, classes one per block.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from detcal.binning.cells import cell_stats
from detcal.metrics import bootstrap as bs, confidence_loo, confidence_suite, image_cells
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.confidence_suite import SuiteBinning, class_values, confidence_metrics, suite, suite_cells

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


def _data(seed: int, n_img: int, max_per: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    img = np.repeat(rng.permutation(n_img) * 3 + 1, rng.integers(1, max_per, n_img))
    img = img[rng.permutation(len(img))]  # an image's detections are not contiguous
    p = rng.beta(2.0, 2.0, len(img))
    y = rng.random(len(img)) < p**1.3
    f = rng.random((len(img), 4))
    f[: len(img) // 3, 1] = 0.05  # crowd one feature bin
    return img, p, y, f


SUITES = {
    "default": suite(),
    "netcal": suite(SuiteBinning(policy="netcal", position=3)),
    "sparse": {
        "dece": ConfidenceMetric("dece", [6, 3, 3, 2, 2], 3, use_features=True),
        "homogeneity": ConfidenceMetric("homogeneity", [6, 3, 3, 2, 2], 3, use_features=True),
        "outliers": ConfidenceMetric("outliers", [6, 3, 3, 2, 2], 2, use_features=True),
        "mce": ConfidenceMetric("mce", 40, 5),
        "ece": ConfidenceMetric("ece", 40, 5),
        "nll": ConfidenceMetric("nll"),
    },
}


def _held(fns: dict, img: np.ndarray, arrays: tuple, n_boot: int, seed: int) -> tuple[dict, dict]:
    """The path before: every grid held (image_cells), the float count matrix per draw block, one jackknife."""
    inv, n = bs._layout(img, arrays)
    grids = image_cells.image_cells(fns, list(fns), inv, n, arrays)
    reps = bs._replicates(fns, list(fns), grids, (inv, n), arrays, n_boot, seed)
    jack = bs._jackknife(fns, list(fns), grids, inv, n, arrays, None, 0)
    return reps, jack


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("suite_name", list(SUITES))
@pytest.mark.parametrize("x_elems", [image_cells.X_ELEMS, 1, 300])
def test_grid_by_grid_equals_every_grid_held(suite_name: str, x_elems: int, monkeypatch) -> None:
    # x_elems 1: one replicate per product; 300 with 100+ images: a few replicates per block, a short last one
    img, p, y, f = _data(3, 110, 9)
    fns = SUITES[suite_name]
    want_reps, want_jack = _held(fns, img, (p, y, f), 45, 4)
    monkeypatch.setattr(image_cells, "X_ELEMS", x_elems)
    inv, n = bs._layout(img, (p, y, f))
    reps, jack = bs._fast_suite(fns, list(fns), (inv, n), (p, y, f), None, 45, 4, "bca")
    _equal(reps, want_reps)
    _equal(jack, want_jack)
    assert all(np.isfinite(v).any() for v in reps.values())


def test_grid_by_grid_with_draw_blocks_and_one_image(monkeypatch) -> None:
    # several draw blocks (BLOCK_ELEMS small), and a sample of one image (every replicate draws it once)
    img, p, y, f = _data(5, 40, 6)
    fns = suite()
    monkeypatch.setattr(bs, "_BLOCK_ELEMS", 40 * 7)
    want = _held(fns, img, (p, y, f), 30, 1)
    inv, n = bs._layout(img, (p, y, f))
    got = bs._fast_suite(fns, list(fns), (inv, n), (p, y, f), None, 30, 1, "bca")
    _equal(got[0], want[0])
    _equal(got[1], want[1])
    one = np.full(len(p), 7)
    want = _held(fns, one, (p, y, f), 12, 2)
    got = bs._fast_suite(fns, list(fns), bs._layout(one, (p, y, f)), (p, y, f), None, 12, 2, "bc")
    _equal(got[0], want[0])
    assert got[1] == {}  # no jackknife without BCa


def test_suite_intervals_with_shared_cells_equal_the_held_path() -> None:
    img, p, y, f = _data(6, 90, 12)
    fns = suite()
    results = {n: m(p, y, f) for n, m in fns.items()}
    cells = suite_cells(p, f, fns)
    got = bs.suite_intervals(results, fns, img, p, y, f, n_boot=60, seed=3, cells=cells)
    reps, jack = _held(fns, img, (p, y, f), 60, 3)
    for name in fns:
        res = bs.interval(reps[name], float(results[name].value), 0.95, "bca", jack[name])
        np.testing.assert_array_equal(got[name].ci, res["ci"], err_msg=name)
        assert got[name].extra.get("ci_acceleration") == res["acceleration"], name
        assert got[name].extra["bootstrap_bias"] == res["bias"] or np.isnan(res["bias"]), name


def test_draw_counts_are_the_counted_draws() -> None:
    for n_groups, n_boot in ((7, 5), (300, 40), (1, 3)):
        blocks = bs.draw_counts(n_groups, n_boot, 9)
        got = np.concatenate(blocks).astype(np.int64)
        picks = np.concatenate(list(bs.draws(n_groups, n_boot, 9)))
        want = np.stack([np.bincount(row, minlength=n_groups) for row in picks])
        np.testing.assert_array_equal(got, want)
        assert (got.sum(axis=1) == n_groups).all()
        assert all(b.dtype.kind == "u" and b.dtype.itemsize == 1 for b in blocks)  # counts below 256: one byte


@pytest.mark.parametrize("rows_sorted", [True, False])
def test_product_matrix_equals_the_converted_coordinates(rows_sorted: bool) -> None:
    rng = np.random.default_rng(2)
    n_img, n_occ, k = 50, 13, 3
    pairs = np.unique(rng.integers(0, n_img * n_occ, 300))  # sorted by (image, cell), each once
    rows, col = pairs // n_occ, pairs % n_occ
    data = rng.random((len(pairs), k)) * 10
    data[::7] = 0.0  # explicit zeros stay explicit terms (adding +0.0 leaves a sum as it is)
    if not rows_sorted:  # pairs in another order: built the plain way
        order = rng.permutation(len(pairs))
        rows, col, data = rows[order], col[order], data[order]
    a = image_cells.product_matrix(rows, col, data, n_img, n_occ)
    b = image_cells.transposed_csr(rows, col, data, n_img, n_occ)
    assert a.shape == b.shape == (n_occ * k, n_img)
    for w in (rng.integers(0, 4, (n_img, 9)).astype(np.float64), rng.random((n_img, 9)) * 3.7):
        np.testing.assert_array_equal(np.asarray(a @ w), np.asarray(b @ w))
    np.testing.assert_array_equal(a.toarray(), b.toarray())


def test_product_matrix_of_one_image_and_empty() -> None:
    data = np.array([[1.5, 2.0], [0.25, 4.0]])
    a = image_cells.product_matrix(np.zeros(2, np.int64), np.array([0, 2]), data, 1, 3)
    np.testing.assert_array_equal(a.toarray(), [[1.5], [2.0], [0.0], [0.0], [0.25], [4.0]])
    empty = image_cells.product_matrix(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 2)), 4, 0)
    assert empty.shape == (0, 4) and empty.nnz == 0


def test_count_replicates_equal_replicate_values_on_float_counts(monkeypatch) -> None:
    img, p, y, f = _data(8, 70, 10)
    fns = suite()
    inv, n = bs._layout(img, (p, y, f))
    counts = bs.draw_counts(n, 25, 5)
    w = np.concatenate(counts).astype(np.float64)
    for g in image_cells.image_cells(fns, list(fns), inv, n, (p, y, f)):
        want = {m: np.full(25, np.nan) for m in g.members}
        image_cells.replicate_values(fns, [g], w, want, 0)
        for x_elems in (1, 3 * n, image_cells.X_ELEMS):
            monkeypatch.setattr(image_cells, "X_ELEMS", x_elems)
            got = {m: np.full(25, np.nan) for m in g.members}
            image_cells.count_replicates(fns, image_cells.matrix_only(g), counts, got)
            _equal(got, want)


def test_shared_left_out_cells_equal_fresh_ones(monkeypatch) -> None:
    img, p, y, f = _data(9, 80, 10)
    fns = SUITES["sparse"] | suite()
    inv, n = bs._layout(img, (p, y, f))
    grids = image_cells.image_cells(fns, list(fns), inv, n, (p, y, f))
    block = np.arange(n)
    shared = image_cells.leave_out_values(fns, grids, block, n)
    calls: list[int] = []
    real = confidence_loo.cell_loo

    def counted(*a: object) -> object:
        calls.append(1)
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(confidence_loo, "cell_loo", counted)
    monkeypatch.setattr(image_cells, "loo_shared", contextlib.nullcontext)  # never shared: every measure fresh
    fresh = image_cells.leave_out_values(fns, grids, block, n)
    _equal(shared, fresh)
    binned = [m for m in fns.values() if m.binned]
    assert len(calls) == len(binned)  # fresh: one per measure (shared: one per grid and sample threshold)


@pytest.mark.parametrize("block_cells", [1, 7 * 125, confidence_suite.CLASS_BLOCK_CELLS])
def test_class_values_in_blocks_equal_the_whole_array(block_cells: int, monkeypatch) -> None:
    rng = np.random.default_rng(4)
    s = 4000
    p, y, f = rng.random(s), rng.random(s) < 0.5, rng.random((s, 4))
    cat = rng.integers(0, 23, s)
    cat[:30] = 40  # a small class: most of its cells empty
    fns = suite(SuiteBinning(position=(5, 5, 5, 1, 1)))
    cats, idx = confidence_suite.category_index(cat)
    grouped, free_key = confidence_suite._suite_stats(fns, p, y, f, None, idx, len(cats))
    keys = {n: m.grid_key(None, None, f) if m.binned else free_key for n, m in fns.items()}
    monkeypatch.setattr(confidence_suite, "CLASS_BLOCK_CELLS", block_cells)
    got = class_values(fns, grouped, keys)
    for name, m in fns.items():
        st = grouped[keys[name]]
        want = m.values((st if m.binned else st.total()).sums())
        np.testing.assert_array_equal(got[name], want, err_msg=name)
    # and in the suite: the per-class entries of a run
    out = confidence_metrics(p, y, f, cat, fns, n_boot=0)
    np.testing.assert_array_equal(out["dece_per_class"].table["value"], got["dece"])


def test_class_values_without_classes() -> None:
    fns = {"ece": ConfidenceMetric("ece", 10), "nll": ConfidenceMetric("nll")}
    st = cell_stats(np.zeros(0), np.zeros(0, bool), None, 10, groups=np.zeros(0, np.int64), n_groups=0)
    free = ConfidenceMetric("nll").grid_key()
    keys = {"ece": ConfidenceMetric("ece", 10).grid_key(), "nll": free}
    got = class_values(fns, {keys["ece"]: st, free: st}, keys)
    assert got["ece"].shape == (0,) and got["nll"].shape == (0,)


@pytest.mark.parametrize("n_images", [80, 600])
def test_left_out_cells_are_shared_whatever_the_number_of_units(n_images: int, monkeypatch) -> None:
    """The grid's measures share one left-out computation per chunk, also past 256 units (the number of
    units is compared by value: Python makes a new int object for each larger one)."""
    img, p, y, f = _data(9, n_images, 4)
    fns = SUITES["sparse"] | suite()
    inv, n = bs._layout(img, (p, y, f))
    grids = image_cells.image_cells(fns, list(fns), inv, n, (p, y, f))
    calls: list[int] = []
    real = confidence_loo.cell_loo

    def counted(*a: object) -> object:
        calls.append(1)
        return real(*a)  # type: ignore[arg-type]

    monkeypatch.setattr(confidence_loo, "cell_loo", counted)
    image_cells.leave_out_values(fns, grids, np.arange(n), n)
    binned = [m for m in fns.values() if m.binned]
    thresholds = {(id(g), getattr(fns[m], "threshold", None)) for g in grids for m in g.members if fns[m].binned}
    assert len(calls) == len(thresholds) < len(binned)
