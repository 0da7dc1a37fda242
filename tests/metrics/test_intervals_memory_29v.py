"""The intervals' memory (issue 29, 29v): every new path equals the one it replaces, bit for bit.

* the replicate product on scipy's ``_sparsetools`` kernels loaded alone (no ``scipy.sparse`` import) equals
  ``scipy.sparse.csc_matrix @ x`` on random matrices (empty images, an empty matrix, one weight column,
  int32 and int64 indices), and a kernel file that is missing, broken or takes other arguments falls back to
  ``scipy.sparse`` with the same numbers;
* the measures evaluated on chunks of replicates (never one alone) give the values of the whole group, and a
  group of one replicate stays one (numpy sums a single row in another order);
* the jackknife chunk by chunk of units gives the values of one pass over every unit;
* int32 draws are the int64 draws; pair sums from narrow cells are those from int64 cells.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from detcal.binning.cells import pair_sums
from detcal.metrics import bootstrap as bs, image_cells, sparse_product
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.confidence_suite import SuiteBinning, suite

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")

REPO = Path(__file__).resolve().parents[2]


def _csc(rng: np.random.Generator, m: int, n: int, density: float, idx: type) -> tuple[np.ndarray, ...]:
    """CSC arrays of an ``m x n`` matrix: every third column (image) empty, rows increasing in a column."""
    dense = np.where(rng.random((m, n)) < density, rng.random((m, n)) * 50.0 - 10.0, 0.0)
    dense[:, ::3] = 0.0
    ref = sp.csc_matrix(dense)
    return ref.indptr.astype(idx), ref.indices.astype(idx), ref.data, dense


@pytest.mark.parametrize("idx", [np.int32, np.int64])
@pytest.mark.parametrize(("m", "n"), [(40, 30), (7, 1), (1, 12), (0, 5), (5, 0)])
def test_kernel_product_equals_scipy_sparse(idx: type, m: int, n: int) -> None:
    assert sparse_product.kernels() is not None  # the kernels load in this environment
    rng = np.random.default_rng(m * 100 + n)
    indptr, indices, data, dense = _csc(rng, m, n, 0.3, idx)
    a = sparse_product.csc_product(indptr, indices, data, (m, n))
    b = sp.csc_matrix((data, indices, indptr), shape=(m, n))
    assert isinstance(a, sparse_product.CscProduct) and a.nnz == b.nnz
    np.testing.assert_array_equal(a.toarray(), dense)
    for x in (
        rng.integers(0, 5, (n, 9)).astype(np.float64),  # draw counts
        rng.random((n, 4)) * 3.7,  # any weights: products that round
        rng.random((n, 1)),  # one column: the vector kernel, as scipy
        rng.random(n),
    ):
        got, want = a @ x, np.asarray(b @ x)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="dimension mismatch"):
        a @ np.zeros((n + 1, 2))


def test_product_matrix_same_numbers_with_and_without_the_kernels(monkeypatch) -> None:
    rng = np.random.default_rng(5)
    n_img, n_occ, k = 60, 11, 3
    pairs = np.unique(rng.integers(0, (n_img - 10) * n_occ, 250))  # the last 10 images have no pair
    rows, col = pairs // n_occ, pairs % n_occ
    data = rng.random((len(pairs), k)) * 7.0
    w = rng.integers(0, 3, (n_img, 13)).astype(np.float64)
    fast = image_cells.product_matrix(rows, col, data, n_img, n_occ)
    assert isinstance(fast, sparse_product.CscProduct)
    monkeypatch.setattr(sparse_product, "kernels", lambda: None)
    slow = image_cells.product_matrix(rows, col, data, n_img, n_occ)
    assert sp.issparse(slow)
    np.testing.assert_array_equal(fast @ w, np.asarray(slow @ w))
    np.testing.assert_array_equal(fast @ w, np.asarray(image_cells.transposed_csr(rows, col, data, n_img, n_occ) @ w))


def test_kernels_that_cannot_be_used_fall_back(tmp_path: Path) -> None:
    assert sparse_product.load_kernels(None) is None
    assert sparse_product.load_kernels(tmp_path / "missing.so") is None
    broken = tmp_path / "_sparsetools.so"
    broken.write_bytes(b"not a shared object")
    assert sparse_product.load_kernels(broken) is None

    def other_signature(*args: object) -> None:
        raise TypeError("csc_matvecs() takes other arguments")

    def wrong_numbers(*args: object) -> None:  # accepts the call, computes nothing
        return None

    assert not sparse_product.kernels_work(SimpleNamespace())  # no such functions
    assert not sparse_product.kernels_work(SimpleNamespace(csc_matvecs=other_signature, csc_matvec=other_signature))
    assert not sparse_product.kernels_work(SimpleNamespace(csc_matvecs=wrong_numbers, csc_matvec=wrong_numbers))
    path = sparse_product.sparsetools_path()
    assert path is not None and sparse_product.load_kernels(path) is not None


def test_intervals_run_without_importing_scipy_sparse() -> None:
    code = (
        "import sys, numpy as np; "
        "from detcal.metrics import bootstrap as bs; from detcal.metrics.confidence_suite import suite; "
        "rng = np.random.default_rng(0); img = rng.integers(0, 30, 400); p = rng.random(400); "
        "y = rng.random(400) < p; f = rng.random((400, 4)); fns = suite(); "
        "res = {n: m(p, y, f) for n, m in fns.items()}; "
        "out = bs.suite_intervals(res, fns, img, p, y, f, n_boot=20, method='percentile'); "
        "assert all(np.isfinite(out[n].ci[0]) for n in ('ece', 'mce', 'nll')); "
        "print(sorted(m for m in sys.modules if m.startswith('scipy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['scipy.sparse._sparsetools']", out.stdout


def _data(seed: int, n_img: int, max_per: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    img = np.repeat(rng.permutation(n_img) * 2 + 3, rng.integers(1, max_per, n_img))
    img = img[rng.permutation(len(img))]
    p = rng.beta(2.0, 2.0, len(img))
    y = rng.random(len(img)) < p**1.2
    f = rng.random((len(img), 4))
    f[: len(img) // 4, 2] = 0.9  # crowd one feature bin
    return img, p, y, f


SUITES = {
    "default": suite(),
    "netcal": suite(SuiteBinning(policy="netcal", position=3)),
    "sparse": {
        "dece": ConfidenceMetric("dece", [6, 3, 3, 2, 2], 3, use_features=True),
        "homogeneity": ConfidenceMetric("homogeneity", [6, 3, 3, 2, 2], 3, use_features=True),
        "outliers": ConfidenceMetric("outliers", [6, 3, 3, 2, 2], 2, use_features=True),
        "ece": ConfidenceMetric("ece", 40, 5),
        "mce": ConfidenceMetric("mce", 40, 5),
        "nll": ConfidenceMetric("nll"),
    },
}


def _equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("suite_name", list(SUITES))
def test_small_value_chunks_and_unit_chunks_give_the_same_numbers(suite_name: str, monkeypatch) -> None:
    img, p, y, f = _data(11, 90, 10)
    fns = SUITES[suite_name]
    inv, n = bs._layout(img, (p, y, f))
    want = bs._fast_suite(fns, list(fns), (inv, n), (p, y, f), None, 41, 2, "bca")  # one chunk each
    assert image_cells.value_chunks(41, 1) == [(0, 41)]
    # value_elems 1: chunks of two replicates and a last one of three; x_elems 3n: a few replicates per
    # product pass; product_elems large: several chunks multiplied in one product (product_runs)
    for value_elems, loo_pairs, kernels, x_elems, product_elems in (
        (1, 1, True, 3 * n, image_cells.PRODUCT_ELEMS),
        (100, 7, False, image_cells.X_ELEMS, image_cells.PRODUCT_ELEMS),
        (1, 60, True, 7 * n, 10**9),
        (2000, 1 << 16, True, 5 * n, 10**9),
    ):
        monkeypatch.setattr(image_cells, "VALUE_ELEMS", value_elems)
        monkeypatch.setattr(image_cells, "LOO_PAIRS", loo_pairs)
        monkeypatch.setattr(image_cells, "X_ELEMS", x_elems)
        monkeypatch.setattr(image_cells, "PRODUCT_ELEMS", product_elems)
        if not kernels:
            monkeypatch.setattr(sparse_product, "kernels", lambda: None)
        got = bs._fast_suite(fns, list(fns), (inv, n), (p, y, f), None, 41, 2, "bca")
        _equal(got[0], want[0])
        _equal(got[1], want[1])
        monkeypatch.undo()


def test_value_chunks_never_leave_one_replicate_alone() -> None:
    for b in range(0, 40):
        for n_occ in (1, 3, 500, 10**6):
            chunks = image_cells.value_chunks(b, n_occ)
            assert [c0 for c0, _ in chunks] == [0, *(c1 for _, c1 in chunks[:-1])][: len(chunks)]
            assert (chunks[-1][1] if chunks else 0) == b
            assert all(c1 - c0 >= 2 for c0, c1 in chunks) or (b == 1 and chunks == [(0, 1)])


def test_product_runs_group_whole_chunks() -> None:
    chunks = image_cells.value_chunks(41, 1 << 15)  # chunks of two, the last of three
    for width in (1, 2, 3, 5, 8, 41, 100):
        runs = image_cells.product_runs(chunks, width)
        assert [c for run in runs for c in run] == chunks
        assert all(len(run) == 1 or run[-1][1] - run[0][0] <= width for run in runs)
    assert image_cells.product_runs(chunks, 100) == [chunks]
    assert image_cells.product_runs([], 5) == []


def test_one_replicate_summed_alone_can_differ_so_groups_of_one_stay_one() -> None:
    """Why a chunk of one replicate is never cut from a larger group: its sums over cells run in another
    order (numpy sums one contiguous row pairwise) and can change in the last bit; chunks of two or more
    do not."""
    rng = np.random.default_rng(1)
    n_occ, k, b = 3125, 2, 40
    product = rng.random((n_occ * k, b))

    def cell_sums(prod: np.ndarray) -> np.ndarray:
        return prod.T.reshape(prod.shape[1], n_occ, k)[..., 1].sum(axis=-1)

    whole = cell_sums(product)
    pairs = np.concatenate([cell_sums(np.ascontiguousarray(product[:, i : i + 2])) for i in range(0, b, 2)])
    np.testing.assert_array_equal(pairs, whole)
    ones = np.concatenate([cell_sums(np.ascontiguousarray(product[:, i : i + 1])) for i in range(b)])
    assert not np.array_equal(ones, whole)  # the reason for value_chunks' rule


def test_unit_chunks_cover_every_unit() -> None:
    unit = np.array([0, 0, 0, 2, 2, 5, 5, 5, 5, 6])
    for loo_pairs in (1, 2, 3, 100):
        old = image_cells.LOO_PAIRS
        image_cells.LOO_PAIRS = loo_pairs
        try:
            chunks = image_cells.unit_chunks(unit, 8)
        finally:
            image_cells.LOO_PAIRS = old
        assert chunks[0][0] == 0 and chunks[-1][1] == 8 and chunks[-1][3] == len(unit)
        for (u0, u1, lo, hi), nxt in zip(chunks, chunks[1:] + [(8, 8, len(unit), len(unit))]):
            assert u1 == nxt[0] and hi == nxt[2] and u0 < u1
            assert np.all((unit[lo:hi] >= u0) & (unit[lo:hi] < u1))


def test_int32_draws_are_the_int64_draws() -> None:
    for n_groups, n_boot, seed in ((1, 4, 0), (7, 30, 3), (5000, 3, 1), (70001, 2, 9)):
        wide = np.concatenate(list(bs.draws(n_groups, n_boot, seed)))
        narrow = np.concatenate(list(bs.draws(n_groups, n_boot, seed, narrow=True)))
        assert narrow.dtype == np.int32 and wide.dtype == np.int64
        np.testing.assert_array_equal(narrow, wide)


def test_pair_sums_of_narrow_cells_equal_those_of_int64_cells() -> None:
    img, p, y, f = _data(4, 50, 8)
    inv, _ = bs._layout(img, (p, y, f))
    cells = np.random.default_rng(3).integers(0, 3125, len(p))
    want = pair_sums(inv, p, y, None, [5, 5, 5, 5, 5], cells=cells)
    for dtype in (np.uint16, np.uint32, np.int32):
        got = pair_sums(inv, p, y, None, [5, 5, 5, 5, 5], cells=cells.astype(dtype))
        for a, b in zip(got[:2], want[:2]):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(got[2], want[2]):
            np.testing.assert_array_equal(a, b)
        assert got[3] == want[3]
