"""detcal.metrics.normal: the normal CDF and quantile of the BCa interval, the same doubles as scipy.special.

The BCa interval reads them instead of scipy.special (whose import costs about 0.05 s of CPU after
scipy.sparse); the intervals must not move by one bit, so every value is compared as a
bit pattern with scipy on random points over the whole range and on each branch boundary of the rational
approximations.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from detcal.metrics import bootstrap
from detcal.metrics.normal import ndtr, ndtri

REPO = Path(__file__).resolve().parents[2]


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))


def _edges(points: list[float]) -> np.ndarray:
    """Each point with its neighbouring doubles on both sides, and its negation."""
    p = np.array(points, dtype=np.float64)
    near = np.concatenate([p, np.nextafter(p, -np.inf), np.nextafter(p, np.inf)])
    return np.concatenate([near, -near])


def test_ndtr_equals_scipy_bit_for_bit() -> None:
    rng = np.random.default_rng(29)
    x = np.concatenate(
        [
            rng.normal(0.0, 3.0, 60_000),
            rng.uniform(-40.0, 40.0, 30_000),
            rng.normal(0.0, 0.4, 30_000),
            # erf/erfc switch at |x|/sqrt2 = 1, the erfc fits switch at 8, underflow near 37.5
            _edges([0.0, np.sqrt(2.0), 8.0 * np.sqrt(2.0), 37.519379347, 38.6, 1e-300, 5e-324]),
            np.array([np.inf, -np.inf, np.nan]),
        ]
    )
    assert _same(ndtr(x), special.ndtr(x)).all()


def test_ndtri_equals_scipy_bit_for_bit() -> None:
    rng = np.random.default_rng(30)
    e2, e32 = np.exp(-2.0), np.exp(-32.0)
    p = np.concatenate(
        [
            rng.uniform(0.0, 1.0, 60_000),
            10.0 ** rng.uniform(-300.0, 0.0, 30_000),
            1.0 - 10.0 ** rng.uniform(-16.0, 0.0, 20_000),
            # the central fit ends at exp(-2) from either side, the two tail fits meet at exp(-32)
            np.abs(_edges([e2, 1.0 - e2, e32, 0.5, 0.025, 0.975, 1e-320, 5e-324])),
            np.array([0.0, 1.0, np.nextafter(1.0, 0.0), -0.5, 1.5, np.nan, np.inf]),
        ]
    )
    assert _same(ndtri(p), special.ndtri(p)).all()


def test_shapes_and_types_follow_the_ufuncs() -> None:
    for f, g in ((ndtr, special.ndtr), (ndtri, special.ndtri)):
        for x in (0.3, np.float64(0.3), np.array(0.3), np.array([0.025, 0.975]), np.full((2, 3), 0.7), []):
            got, want = f(x), g(x)
            assert type(got) is type(want)
            assert np.shape(got) == np.shape(want)
            assert np.asarray(got).dtype == np.asarray(want).dtype


def test_bca_intervals_import_no_scipy_special() -> None:
    """A BCa interval over a confidence suite (the default run's intervals) leaves scipy.special unimported."""
    code = (
        "import sys, numpy as np; "
        "from detcal.metrics.bootstrap import interval; "
        "rng = np.random.default_rng(0); v = rng.normal(0.1, 0.02, 200); jk = rng.normal(0.1, 0.001, 50); "
        "out = interval(v, 0.1, 0.95, 'bca', jackknife=jk); "
        "assert out['ci'][0] < 0.1 < out['ci'][1], out; "
        "print('scipy.special' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_bca_interval_equals_the_scipy_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The interval, z0 and the adjusted levels are the ones scipy.special's functions give."""
    rng = np.random.default_rng(31)
    cases = [(rng.normal(0.1, s, 200), 0.1 + d, rng.normal(0.1, s / 10, 80)) for s in (0.01, 0.05) for d in (0, 0.004)]
    ours = [bootstrap.interval(v, est, 0.95, m, jackknife=jk) for v, est, jk in cases for m in ("bca", "bc")]
    monkeypatch.setattr(bootstrap, "ndtr", special.ndtr)
    monkeypatch.setattr(bootstrap, "ndtri", special.ndtri)
    theirs = [bootstrap.interval(v, est, 0.95, m, jackknife=jk) for v, est, jk in cases for m in ("bca", "bc")]
    assert ours == theirs
    assert all(o.get("ci") is not None for o in ours)
