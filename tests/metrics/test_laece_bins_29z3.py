"""LaECE's equal-width bins found without a binary search give the search's bins: at the edges, one float
either side of them, outside [0, 1] and on non-finite scores, for both closings and many bin counts."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.metrics.laece import bin_index


@pytest.mark.parametrize("bins", [1, 2, 3, 7, 10, 25, 30, 1000])
@pytest.mark.parametrize("closed", ["right", "left"])
def test_bin_index_is_the_search(bins: int, closed: str) -> None:
    rng = np.random.default_rng(bins)
    e = np.linspace(0.0, 1.0, bins + 1)
    score = np.concatenate(
        [
            e,
            np.nextafter(e, 2.0),
            np.nextafter(e, -1.0),
            rng.random(3000),
            np.round(rng.random(3000), 2),
            np.arange(0.0, 1.0 + 1e-9, 1.0 / (7 * bins)),
            [0.0, -0.0, 1.0, -1e-300, 1.0 + 2e-16, 5.0, -3.0, 1e300, -1e300],
        ]
    )
    side = "left" if closed == "right" else "right"
    want = np.clip(np.searchsorted(e, score, side=side) - 1, 0, bins - 1)
    np.testing.assert_array_equal(bin_index(score, bins, closed), want)
    with_nan = np.append(score, [np.nan, np.inf, -np.inf])
    want_nan = np.clip(np.searchsorted(e, with_nan, side=side) - 1, 0, bins - 1)
    np.testing.assert_array_equal(bin_index(with_nan, bins, closed), want_nan)
