"""The per-class figure's curves from one pass over the samples (detcal.reports.per_class.class_reliability_curves)
equal each class's own reliability_curve, bit for bit (issue 29)."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.reports.per_class import class_reliability_curves, reliability_curve


@pytest.mark.parametrize("bins", [15, 4])
def test_class_curves_equal_the_curve_of_each_class(bins: int) -> None:
    rng = np.random.default_rng(3)
    n = 5000
    cat = rng.choice(np.array([-7, 0, 3, 12, 10**12]), n)
    p = rng.random(n)
    p[:3] = [0.0, 1.0, 0.5]
    y = (rng.random(n) < p).astype(float)
    classes = np.array([12, -7, 10**12, 99])  # any order; 99 has no sample; 0 and 3 are left out
    got = class_reliability_curves(p, y, cat, classes, bins)
    assert len(got) == len(classes)
    for c, curve in zip(classes, got):
        want = reliability_curve(p[cat == c], y[cat == c], bins)
        assert sorted(curve) == sorted(want)
        for key in want:
            np.testing.assert_array_equal(curve[key], want[key], err_msg=f"{c} {key}")
            assert curve[key].dtype == want[key].dtype
    assert got[3]["n"].sum() == 0 and np.isnan(got[3]["conf"]).all()


def test_class_curves_of_no_class() -> None:
    assert class_reliability_curves([0.5], [1.0], [2], [], 15) == []
