"""The eleventh speed pass of the confidence block and its intervals (issue 29, 29u5): each shortcut gives the
arrays of the plain computation it replaces, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from detcal.binning.cells import FLOAT_STATS, CellStats, cell_stats, sample_cells, sample_terms
from detcal.binning.kernels import (
    CHUNK,
    FX_BITS,
    Workspace,
    add_words,
    fx_words_into,
    select_bits,
    term_into,
    words_int64,
)
from detcal.metrics.confidence_compute import nan_to_zero, select

SPECIAL = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 5e-324, -1.5, 1.0, 2.0**60])


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint8).tobytes()


def _plain_words(p: np.ndarray, y: np.ndarray, key: np.ndarray, n_keys: int, name: str) -> np.ndarray:
    """The int64 words [K, 3] of one statistic summed per key sample by sample (np.add.at: no float sums)."""
    values = p if name == "sum_p" else sample_terms(p, y, (name,))[name]
    words = fx_words_into(values, FLOAT_STATS.get(name, 0), Workspace(len(values)))
    out = np.zeros((n_keys, 3), dtype=np.int64)
    for j, w in enumerate(words):
        np.add.at(out[:, j], key, w.astype(np.int64))
    return out


def test_add_words_sums_exactly_and_converts_once() -> None:
    rng = np.random.default_rng(0)
    acc = np.zeros((3, 7), dtype=np.float64)
    plain = np.zeros((7, 3), dtype=np.int64)
    for _ in range(5):  # chunks: every partial sum a whole number, far above 2**18, below 2**53
        key = rng.integers(0, 7, 5000)
        words = tuple(rng.integers(0, (1 << FX_BITS) + 1, 5000).astype(np.float64) for _ in range(3))
        add_words(acc, key, words)
        for j, w in enumerate(words):
            np.add.at(plain[:, j], key, w.astype(np.int64))
    got = words_int64(acc)
    assert got.dtype == np.int64 and got.flags.c_contiguous and got.shape == (7, 3)
    assert np.array_equal(got, plain)


@pytest.mark.parametrize(
    ("bins", "n_groups"),
    [(15, None), (15, 365), ((5, 5, 5), 300)],  # the whole key range; per class; the occupied keys only
)
def test_cell_stats_words_equal_sums_sample_by_sample(bins: Any, n_groups: int | None) -> None:
    rng = np.random.default_rng(1)
    n = 3 * CHUNK + 17  # several chunks
    p = rng.random(n)
    p[:6] = [0.0, 1.0, 1.0 - 1e-13, 1e-13, 0.5, -0.0]
    y = rng.random(n) < p
    feats = rng.random((n, len(bins) - 1)) if isinstance(bins, tuple) else None
    groups = rng.integers(0, n_groups, n) if n_groups else None
    st = cell_stats(p, y, feats, bins, groups=groups, n_groups=n_groups)
    n_cells = st.n_cells
    cells = sample_cells(p, feats, bins, "floor")[0]  # the cell of each sample, binned on its own
    key = cells if groups is None else groups * n_cells + cells
    size = n_cells * (n_groups or 1)
    lead = () if n_groups is None else (n_groups,)
    p_words = _plain_words(p, y, key + size * y, 2 * size, "sum_p")
    assert np.array_equal(st.fixed["sum_p0"], p_words[:size].reshape(lead + (n_cells, 3)))
    assert np.array_equal(st.fixed["sum_p1"], p_words[size:].reshape(lead + (n_cells, 3)))
    for name in ("sum_p2", "sum_se", "sum_nll"):
        assert np.array_equal(st.fixed[name], _plain_words(p, y, key, size, name).reshape(lead + (n_cells, 3))), name
    assert np.array_equal(st.count, np.bincount(key, minlength=size).reshape(lead + (n_cells,)))


def test_select_bits_is_the_masked_copy() -> None:
    rng = np.random.default_rng(2)
    a = np.concatenate([rng.standard_normal(997), SPECIAL])
    b = np.concatenate([rng.standard_normal(997), SPECIAL[::-1]])
    mask = rng.random(len(a)) < 0.5
    want = b.copy()
    np.copyto(want, a, where=mask)
    got = select_bits(mask, a.copy(), b.copy(), Workspace(len(a)))
    assert _bits(got) == _bits(want)


def _nll_plain(p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The NLL term with the matched branch put in by a masked copy (the formula term_into keeps)."""
    c = 1e-12
    low = (1.0 - p) < c
    out = np.where(low, 0.0, p)
    out = -np.log1p(-out)
    out[low] = -np.log(c)
    np.copyto(out, -np.log(np.maximum(p, c)), where=y)
    return out


def test_nll_term_equals_the_masked_copy() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(5000)
    p[:8] = [0.0, 1.0, 1.0 - 1e-13, 1e-13, 1e-300, 1.0 - 2.0**-53, 2.0**-53, 0.5]
    y = rng.random(5000) < 0.5
    y[:8] = [True, False, True, False, True, False, True, False]
    got = term_into("sum_nll", p, y, Workspace(len(p))).copy()
    assert _bits(got) == _bits(_nll_plain(p, y))
    assert _bits(sample_terms(p, y, ("sum_nll",))["sum_nll"]) == _bits(got)


@pytest.mark.parametrize("other", [0.0, 1.0, np.nan, -np.inf, -0.0])
@pytest.mark.parametrize("layout", ["c", "transposed", "strided", "1d"])
def test_select_is_np_where(other: float, layout: str) -> None:
    rng = np.random.default_rng(4)
    base = np.concatenate([rng.standard_normal(52 * 40 - len(SPECIAL)), SPECIAL]).reshape(52, 40)
    x = {"c": base, "transposed": base.T, "strided": base[:, ::3], "1d": base.reshape(-1)[::2]}[layout]
    mask = rng.random(x.shape) < 0.6 if layout == "c" else (x > 0.1)  # mask in x's own order, or C order
    want = np.where(mask, x, other)
    got = select(mask, x, other)
    assert got.shape == want.shape and got.strides == want.strides and got.dtype == want.dtype
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize(
    ("mask", "x"),
    [
        (np.array([True, False]), np.array([1, 2])),  # integers
        (np.array([[True], [False]]), np.ones((2, 3))),  # broadcast
        (np.array([1, 0]), np.ones(2)),  # a mask that is not boolean
        (np.array(True), np.array(2.5)),  # 0-d
    ],
)
def test_select_falls_back_to_np_where(mask: np.ndarray, x: np.ndarray) -> None:
    want = np.where(mask, x, 0.0)
    got = select(mask, x)
    assert got.dtype == want.dtype and got.shape == want.shape and _bits(got) == _bits(want)


@pytest.mark.parametrize("with_inf", [False, True])
def test_nan_to_zero_is_nan_to_num(with_inf: bool) -> None:
    rng = np.random.default_rng(5)
    g = np.abs(rng.standard_normal((30, 17)))
    g[rng.random(g.shape) < 0.4] = np.nan
    g[0, 0] = -0.0
    if with_inf:
        g[1, 1], g[2, 2] = np.inf, -np.inf
    for arr in (g, g.T, g[:, ::2]):
        want = np.nan_to_num(arr)
        got = nan_to_zero(arr)
        assert got.strides == want.strides and _bits(got) == _bits(want)


@pytest.mark.parametrize("name", ["sum_p0", "sum_nll"])  # every scale of FLOAT_STATS
def test_fixed_point_value_is_the_ldexp_sum(name: str) -> None:
    log2_max = FLOAT_STATS[name]
    rng = np.random.default_rng(6)
    words = rng.integers(-(2**62), 2**62, (400, 3))
    words[:100] = rng.integers(0, 2**20, (100, 3))  # small sums
    words[100:110] = [[0, 0, 0], [1, 0, 0], [0, 0, 1], [2**53 + 1, 2**53 - 1, 1], [-1, -1, -1], *[[0, 0, 0]] * 5]
    w = words.astype(np.float64)
    want = (
        np.ldexp(w[:, 0], log2_max - FX_BITS)
        + np.ldexp(w[:, 1], log2_max - 2 * FX_BITS)
        + np.ldexp(w[:, 2], log2_max - 3 * FX_BITS)
    )
    zeros = np.zeros(len(words), dtype=np.int64)
    st = CellStats(bins=(len(words),), edges="floor", count=zeros, sum_y=zeros, fixed={name: words})
    assert _bits(getattr(st, name)) == _bits(want)
