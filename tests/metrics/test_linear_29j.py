"""Issue 29 (29j): the shared score order, the image lookup table of the post-processing split and the narrowed
codes of TIDE, against the plain computations they replace (same numbers, to the bit)."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.metrics.image_reliability import split_and_kept
from detcal.metrics.narrow_ints import narrow_codes
from detcal.metrics.score_order import descending_order


def _scores(n: int, seed: int) -> np.ndarray:
    return np.round(np.random.default_rng(seed).random(n), 2)  # many ties


def test_descending_order_is_the_stable_sort_and_is_reused() -> None:
    s = _scores(5000, 0)
    want = np.argsort(-s, kind="stable")
    first = descending_order(s)
    np.testing.assert_array_equal(first, want)
    assert descending_order(s) is first  # the same scores: the checked order is reused
    assert descending_order(s.reshape(-1)) is first  # a view of the same memory
    assert not first.flags.writeable


def test_descending_order_never_returns_a_stale_order() -> None:
    s = _scores(3000, 1)
    descending_order(s)
    s[:10] = s[:10][::-1] + 0.5  # the same memory, changed in place: the check fails and it sorts again
    np.testing.assert_array_equal(descending_order(s), np.argsort(-s, kind="stable"))
    t = _scores(3000, 2)  # other scores of the same length
    np.testing.assert_array_equal(descending_order(t), np.argsort(-t, kind="stable"))
    u = s.copy()
    u[5] = np.nan  # not finite: never reused (the check fails), the plain sort
    np.testing.assert_array_equal(descending_order(u), np.argsort(-u, kind="stable"))
    np.testing.assert_array_equal(descending_order(u), np.argsort(-u, kind="stable"))


@pytest.mark.parametrize("method,param", [("threshold", 0.3), ("topk", 3), ("nms", 0.5)])
def test_split_by_lookup_table_equals_the_binary_search(method: str, param: float) -> None:
    rng = np.random.default_rng(3)
    images = rng.permutation(np.arange(0, 400, 2))  # small distinct ids: the lookup table
    ids = rng.choice(images, 3000)
    s = _scores(3000, 4)
    xy = rng.random((3000, 2)) * 100
    box = np.column_stack([xy, xy + 5 + rng.random((3000, 2)) * 20])
    small = split_and_kept(ids, s, images, method, param, box)
    big = 10**12  # the same images with ids too large for a table: the binary search
    large = split_and_kept(ids + big, s, images + big, method, param, box)
    for a, b in zip(small, large):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(DetcalInputError, match="unknown image id 1"):
        split_and_kept(np.append(ids, 1), np.append(s, 0.5), images, method, param, np.vstack([box, box[:1]]))
    with pytest.raises(DetcalInputError, match="unknown image id 401"):
        split_and_kept(np.append(ids, 401), np.append(s, 0.5), images, method, param, np.vstack([box, box[:1]]))


def test_split_with_repeated_image_ids_takes_the_first_row() -> None:
    images = np.array([5, 3, 5, 9])  # not distinct: the binary search, the first row of each id
    pos, neg, kept = split_and_kept(np.array([5, 9, 3, 5]), np.array([0.9, 0.2, 0.6, 0.1]), images, "threshold", 0.3)
    np.testing.assert_allclose(pos, [0.9, 0.6, 0.0, 0.0])
    np.testing.assert_allclose(neg, [0.1, 0.0, 0.0, 0.2])
    np.testing.assert_array_equal(kept, [True, False, True, False])


@pytest.mark.parametrize("bound,dtype", [(1, np.int16), (2**15 - 1, np.int16), (2**15, np.int32), (2**31, np.int64)])
def test_narrow_codes_keep_their_values(bound: int, dtype: type) -> None:
    codes = np.array([-1, 0, bound - 1], np.int64)
    out = narrow_codes(codes, bound)  # the helper moved from detcal.metrics.tide to its own module
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, codes)
