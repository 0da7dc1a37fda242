"""The tenth speed pass of the confidence block and its intervals (issue 29, 29t5): each shortcut gives the
arrays, the numbers and the errors of the plain computation it replaces."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from detcal.binning.cells import cell_stats, dense_rank, sorted_rank, validate_sample
from detcal.core.errors import DetcalInputError
from detcal.metrics import bootstrap as bs, image_cells
from detcal.metrics.confidence_suite import suite


def _plain_validate(p: Any, y: Any, features: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The value-by-value checks of validate_sample (the path every failing sample still takes)."""
    p_arr = np.asarray(p, dtype=np.float64)
    bad = ~np.isfinite(p_arr) | (p_arr < 0.0) | (p_arr > 1.0)
    if bad.any():
        raise DetcalInputError("p", record=int(np.flatnonzero(bad)[0]), field="p")
    y_raw = np.asarray(y)
    if y_raw.dtype != np.bool_ and ((y_raw != 0) & (y_raw != 1)).any():
        raise DetcalInputError("y", record=int(np.flatnonzero((y_raw != 0) & (y_raw != 1))[0]), field="y")
    if features is None:
        return p_arr, y_raw.astype(bool), None
    f_arr = np.asarray(features, dtype=np.float64)
    f_arr = f_arr[:, None] if f_arr.ndim == 1 else f_arr
    return p_arr, y_raw.astype(bool), f_arr


@pytest.mark.parametrize("y_type", [bool, np.int8, np.int64, np.uint8])
@pytest.mark.parametrize("with_features", [False, True, "1d"])
def test_validate_sample_returns_the_checked_arrays(y_type: type, with_features: Any) -> None:
    rng = np.random.default_rng(3)
    p = rng.random(500)
    p[:4] = [0.0, 1.0, -0.0, 0.5]
    y = (rng.random(500) < p).astype(y_type)
    f = None if with_features is False else rng.random(500) if with_features == "1d" else rng.random((500, 3))
    got = validate_sample(p, y, f)
    want = _plain_validate(p, y, f)
    for g, w in zip(got, want):
        if w is None:
            assert g is None
            continue
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    assert got[1] is not y  # a bool copy, as before (the caller may hold y)
    assert np.signbit(got[0][2])  # -0.0 passes unchanged


@pytest.mark.parametrize(
    ("field", "value", "record"),
    [("p", np.nan, 7), ("p", np.inf, 3), ("p", -np.inf, 9), ("p", 1.0000001, 0), ("p", -1e-300, 12),
     ("y", 2, 5), ("y", -1, 8), ("features", np.nan, 4), ("features", 1.5, 11)],
)  # fmt: skip
def test_validate_sample_names_the_first_bad_record(field: str, value: float, record: int) -> None:
    rng = np.random.default_rng(4)
    p, y, f = rng.random(20), (rng.random(20) < 0.5).astype(np.int64), rng.random((20, 2))
    {"p": p, "y": y, "features": f[:, 1]}[field][record] = value
    with pytest.raises(DetcalInputError) as err:
        validate_sample(p, y, f)
    assert err.value.record == record
    assert err.value.field == (f"{field}[:, 1]" if field == "features" else field)


def test_groups_outside_their_range_are_named() -> None:
    p, y = np.linspace(0, 1, 30), np.zeros(30, dtype=bool)
    groups = np.zeros(30, dtype=np.int64)
    groups[17] = 3
    with pytest.raises(DetcalInputError) as err:
        cell_stats(p, y, None, 5, groups=groups, n_groups=3)
    assert err.value.record == 17 and err.value.field == "groups" and "group 3 outside [0, 3)" in str(err.value)
    groups[17], groups[21] = 2, -1
    with pytest.raises(DetcalInputError) as err:
        cell_stats(p, y, None, 5, groups=groups, n_groups=3)
    assert err.value.record == 21
    ok = cell_stats(p, y, None, 5, groups=np.where(groups < 0, 0, groups), n_groups=3)
    assert ok.count.shape == (3, 5) and ok.count.sum() == 30


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16])
def test_dense_rank_when_every_key_occurs(dtype: type) -> None:
    rng = np.random.default_rng(5)
    keys = np.concatenate([np.arange(40), rng.integers(0, 40, 300)]).astype(dtype)
    rng.shuffle(keys)
    uniq, inv = dense_rank(keys, 40)
    want_u, want_i = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(uniq, want_u)
    np.testing.assert_array_equal(inv, want_i.reshape(-1))
    assert inv.dtype == np.intp and uniq.dtype == np.intp
    inv[0] += 1  # a fresh array: the keys are not changed through it
    np.testing.assert_array_equal(np.unique(keys), np.arange(40))
    uniq2, inv2 = dense_rank(keys[keys != 7], 40)  # one key missing: the counted ranks
    np.testing.assert_array_equal(uniq2, np.setdiff1d(np.arange(40), [7]))
    np.testing.assert_array_equal(inv2, np.unique(keys[keys != 7], return_inverse=True)[1].reshape(-1))


def test_sorted_rank_with_irregular_repeats() -> None:
    rng = np.random.default_rng(6)
    keys = np.repeat(rng.integers(0, 10**9, 3000), rng.integers(1, 4, 3000))  # runs of one to three
    rng.shuffle(keys)
    uniq, inv = sorted_rank(keys)
    want_u, want_i = np.unique(keys, return_inverse=True)
    np.testing.assert_array_equal(uniq, want_u)
    np.testing.assert_array_equal(inv, want_i.reshape(-1))
    assert uniq.dtype == keys.dtype


@pytest.mark.parametrize(("n_groups", "n_boot"), [(1, 3), (7, 5), (300, 40), (20_000, 9)])
def test_draw_counts_group_major(n_groups: int, n_boot: int) -> None:
    blocks = bs.draw_counts(n_groups, n_boot, 11)
    picks = np.concatenate(list(bs.draws(n_groups, n_boot, 11)))
    want = np.stack([np.bincount(row, minlength=n_groups) for row in picks])
    np.testing.assert_array_equal(np.concatenate(blocks), want)
    for blk in blocks:
        assert blk.shape[1] == n_groups and blk.T.flags.c_contiguous


def test_count_product_one_block_equals_several(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(8)
    s = 900
    p, y, f = rng.random(s), rng.random(s) < 0.4, rng.random((s, 4))
    img = np.sort(rng.integers(0, 60, s))
    fns = suite()
    inv, n = bs._layout(img, (p, y, f))
    counts = bs.draw_counts(n, 12, 2)
    part = np.concatenate(counts)
    for g in image_cells.image_cells(fns, list(fns), inv, n, (p, y, f)):
        g = image_cells.matrix_only(g)
        one = image_cells.count_product(g, part)  # X_ELEMS // n >= 12: one block
        monkeypatch.setattr(image_cells, "X_ELEMS", 5 * n)  # blocks of five replicates
        several = image_cells.count_product(g, part)
        monkeypatch.undo()
        assert one.flags.c_contiguous and one.shape == several.shape
        np.testing.assert_array_equal(one.view(np.int64), several.view(np.int64))
