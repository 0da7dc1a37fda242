"""The top rows of the worst-detections tables by a partition: the head of a stable sort, ties and NaN included."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.reports.html.worst import smallest


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top", [0, 1, 3, 10, 500])
def test_smallest_is_the_head_of_a_stable_sort(seed: int, top: int) -> None:
    rng = np.random.default_rng(seed)
    key = np.round(rng.normal(size=int(rng.integers(0, 200))), 1)  # many ties
    if seed % 2 and len(key):
        key[rng.integers(0, len(key), 5)] = np.nan
    if seed == 4:
        key[:] = 0.0
        key[::3] = -0.0  # equal to 0.0: ties kept in position order
    got = smallest(key, top)
    assert np.array_equal(got, np.lexsort((np.arange(len(key)), key))[:top])
    assert got.dtype.kind == "i"


def test_smallest_when_most_values_are_nan() -> None:
    key = np.full(50, np.nan)
    key[[7, 30]] = [2.0, 1.0]
    assert smallest(key, 5).tolist() == [30, 7, 0, 1, 2]
