"""Split conformal box intervals (detcal.calibration.conformal).

The coverage tests draw data whose distribution is known, so the coverage of
the conformal interval is known exactly: with n calibration scores and a new
exchangeable one (continuous, no ties), the new score's rank is uniform on
1..n+1, so ``P(covered) = m / (n + 1)`` with ``m = ceil((n+1)(1-alpha))``.
With n = 99 and alpha = 0.1 that is 90/100 = 0.9 exactly. Each test point
gets its own calibration set, so the covered counts are binomial; 50 seeds
are drawn at once as one [seeds, points, n, K] array.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import binom, t as student_t

from detcal.calibration import REGRESSION_CALIBRATORS, make_calibrator
from detcal.calibration.conformal import ConformalBoxIntervals, conformal_quantile, conformal_rank
from detcal.calibration.regression import StdScaling
from detcal.core.errors import DetcalInputError, NotFittedError

SEEDS, POINTS, N_CAL, K = 50, 200, 99, 4


def _band(n: int, p: float, level: float = 0.999) -> tuple[int, int]:
    lo, hi = binom.interval(level, n, p)
    return int(lo), int(hi)


def test_rank_and_quantile_by_hand() -> None:
    # n = 9 scores 1..9: m = ceil(10 * 0.9) = 9 -> 9; alpha 0.2: m = 8 -> 8; alpha 0.05: m = 10 > 9 -> inf
    s = np.arange(1.0, 10.0)[:, None]
    assert conformal_rank(9, 0.1) == 9 and conformal_rank(9, 0.2) == 8 and conformal_rank(99, 0.1) == 90
    assert conformal_quantile(s, 0.1)[0] == 9.0
    assert conformal_quantile(s, 0.2)[0] == 8.0
    assert np.isinf(conformal_quantile(s, 0.05)[0])
    # (n+1)(1-alpha) = 90 exactly (0.9 * 100 is 90.00000000000001 in floats): rank 90, not 91
    assert conformal_quantile(np.arange(1.0, 100.0)[:, None], 0.1)[0] == 90.0


def test_intervals_by_hand() -> None:
    mu = np.zeros((5, 1))
    sigma = np.array([[1.0], [2.0], [1.0], [4.0], [1.0]])
    y = np.array([[0.5], [-3.0], [0.1], [2.0], [-0.8]])
    # normalised scores 0.5, 1.5, 0.1, 0.5, 0.8; alpha 1/3: m = ceil(6 * 2/3) = 4 -> sorted[3] = 0.8
    cal = ConformalBoxIntervals(alpha=1 / 3).fit(mu, sigma, y)
    assert cal.quantile_[0] == pytest.approx(0.8)
    lo, hi = cal.interval(np.array([1.0]), np.array([2.0]))
    assert (lo[0], hi[0]) == pytest.approx((1.0 - 1.6, 1.0 + 1.6))
    # the Gaussian carrying it: its central 1 - alpha interval is the conformal one
    m2, s2 = cal.transform(np.array([1.0]), np.array([2.0]))
    assert m2[0] == 1.0 and s2[0] * ndtri(1 - 1 / 6) == pytest.approx(1.6)
    # absolute score: residuals 0.5, 3, 0.1, 2, 0.8 -> sorted[3] = 2; the same width for every box
    ab = ConformalBoxIntervals(alpha=1 / 3, score="absolute").fit(mu, sigma, y)
    assert ab.quantile_[0] == pytest.approx(2.0)
    lo, hi = ab.interval(np.zeros(2), np.array([1.0, 9.0]))
    assert np.allclose(hi - lo, 4.0)
    # no sigma at all: absolute residuals
    nos = ConformalBoxIntervals(alpha=1 / 3).fit(mu[:, 0], None, y[:, 0])
    assert nos.score_ == "absolute" and nos.quantile_[0] == pytest.approx(2.0)


def _draw(rng: np.random.Generator, shape: tuple[int, ...], heavy: bool) -> tuple[np.ndarray, np.ndarray]:
    """sigma log-uniform over a factor 20; y - mu = sigma * eps, eps normal (or Student t, 3 dof)."""
    sigma = np.exp(rng.uniform(np.log(0.1), np.log(2.0), size=shape))
    eps = rng.standard_t(3, size=shape) if heavy else rng.standard_normal(shape)
    return sigma, sigma * eps


@pytest.mark.parametrize("heavy", [False, True])
def test_nominal_coverage_over_50_seeds(heavy: bool) -> None:
    """Per coordinate coverage 0.9 exactly (binomial band per seed and overall), normal or heavy-tailed noise."""
    rng = np.random.default_rng(20240932 + heavy)
    s_cal, e_cal = _draw(rng, (SEEDS, POINTS, N_CAL, K), heavy)
    s_new, e_new = _draw(rng, (SEEDS, POINTS, K), heavy)
    q = conformal_quantile(np.abs(e_cal) / s_cal, 0.1, axis=2)  # [SEEDS, POINTS, K]
    covered = np.abs(e_new) <= q * s_new
    p = conformal_rank(N_CAL, 0.1) / (N_CAL + 1)
    assert p == 0.9
    lo, hi = _band(POINTS, p)
    per_seed = covered.sum(axis=1)  # [SEEDS, K]
    assert np.all((per_seed >= lo) & (per_seed <= hi)), per_seed.min()
    lo_all, hi_all = _band(SEEDS * POINTS, p)
    assert np.all((covered.sum(axis=(0, 1)) >= lo_all) & (covered.sum(axis=(0, 1)) <= hi_all))
    # Bonferroni: every coordinate at rank ceil(100 * 0.975) = 98 -> the box is covered with prob >= 0.9
    qb = conformal_quantile(np.abs(e_cal) / s_cal, 0.1 / K, axis=2)
    box = np.all(np.abs(e_new) <= qb * s_new, axis=-1).sum()
    assert box >= _band(SEEDS * POINTS, 0.9)[0]
    assert box == pytest.approx(SEEDS * POINTS * 0.98**K, rel=0.02)  # independent coordinates


def test_the_calibrator_matches_the_vectorised_quantile_and_std_scaling_does_not_cover_heavy_tails() -> None:
    rng = np.random.default_rng(7)
    s_cal, e_cal = _draw(rng, (4000, K), heavy=True)
    s_new, e_new = _draw(rng, (20000, K), heavy=True)
    mu_c, mu_n = rng.normal(size=(4000, K)), rng.normal(size=(20000, K))
    conf = make_calibrator("conformal").fit(mu_c, s_cal, mu_c + e_cal)
    assert np.allclose(conf.quantile_, conformal_quantile(np.abs(e_cal) / s_cal, 0.1), rtol=1e-12, atol=0)
    lo, hi = conf.interval(mu_n, s_new)
    cov_conf = ((mu_n + e_new >= lo) & (mu_n + e_new <= hi)).mean(axis=0)
    # given the fitted quantile q, coverage is P(|t_3| <= q) exactly: the test points are binomial around it,
    # and q itself is within a few standard errors sqrt(0.09 / 4000) of its nominal 0.9
    exact = 2.0 * student_t.cdf(conf.quantile_, 3) - 1.0
    assert np.all(np.abs(exact - 0.9) < 4 * np.sqrt(0.09 / 4000))
    assert np.all(np.abs(cov_conf - exact) < 4 * np.sqrt(exact * (1 - exact) / 20000))
    # the Gaussian of std scaling (sigma' = s sigma, s^2 = mean r^2 = 3 for t(3)) over-covers at 90 %
    m2, s2 = StdScaling().fit(mu_c, s_cal, mu_c + e_cal).transform(mu_n, s_new)
    cov_std = (np.abs(mu_n + e_new - m2) <= ndtri(0.95) * s2).mean(axis=0)
    assert np.all(cov_std > 0.915)  # P(|t_3| <= 1.645 sqrt(3)) = 0.935 with the population scale
    # the recalibrated Gaussian's central 90 % interval is the conformal interval
    m3, s3 = conf.transform(mu_n, s_new)
    assert np.allclose(m3 - ndtri(0.95) * s3, lo) and np.allclose(m3 + ndtri(0.95) * s3, hi)


def test_mondrian_covers_each_class_where_pooled_does_not() -> None:
    rng = np.random.default_rng(3)
    n = 6000
    cls = rng.integers(0, 2, size=n) * 5 + 1  # categories 1 and 6
    scale = np.where(cls == 1, 1.0, 3.0)[:, None]  # class 6's sigma is three times too small
    sigma = np.ones((n, K))
    e = scale * rng.standard_normal((n, K))
    half = n // 2
    pooled = ConformalBoxIntervals().fit(np.zeros((half, K)), sigma[:half], e[:half])
    mond = ConformalBoxIntervals(groups="class").fit(np.zeros((half, K)), sigma[:half], e[:half], groups=cls[:half])
    assert list(mond.group_ids_) == [1, 6]
    for cal in (pooled, mond):
        lo, hi = cal.interval(np.zeros((n - half, K)), sigma[half:], groups=cls[half:])
        cov = (e[half:] >= lo) & (e[half:] <= hi)
        by_class = [cov[cls[half:] == c].mean() for c in (1, 6)]
        if cal is mond:
            assert all(abs(b - 0.9) < 0.02 for b in by_class)
        else:
            assert by_class[0] > 0.99 and by_class[1] < 0.85  # pooled over-covers class 1, under-covers class 6
    # a class unseen at fit, and a class too small for a finite quantile, use the pooled quantile
    small = ConformalBoxIntervals(groups="class").fit(
        np.zeros((12, 1)), np.ones((12, 1)), rng.normal(size=(12, 1)), groups=np.array([1] * 11 + [2])
    )
    assert (
        list(small.fallback_groups_) == [2] and small.fit_report_["ok"] and "class 2" in small.fit_report_["notes"][0]
    )
    lo, hi = small.interval(np.zeros(2), np.ones(2), groups=np.array([2, 9]))
    assert np.allclose(hi, small.quantile_[0])


def test_errors_and_registry() -> None:
    assert REGRESSION_CALIBRATORS["conformal"] is ConformalBoxIntervals
    with pytest.raises(NotFittedError):
        ConformalBoxIntervals().interval(np.zeros(2), np.ones(2))
    with pytest.raises(DetcalInputError, match="alpha"):
        ConformalBoxIntervals(alpha=1.5).fit(np.zeros(3), np.ones(3), np.ones(3))
    with pytest.raises(DetcalInputError, match="groups"):
        ConformalBoxIntervals(groups="class").fit(np.zeros(3), np.ones(3), np.ones(3))
    with pytest.raises(DetcalInputError, match="sigma"):
        ConformalBoxIntervals().fit(np.zeros(3), np.array([1.0, 0.0, 1.0]), np.ones(3))
    # too few samples even pooled: the largest score, and the report says the guarantee is lost
    with pytest.warns(Warning):
        tiny = ConformalBoxIntervals().fit(np.zeros(3), np.ones(3), np.array([0.1, 0.5, 0.2]))
    assert tiny.quantile_[0] == 0.5 and "guarantee is lost" in tiny.fit_report_["message"]


def test_config_file_builds_it() -> None:
    from detcal.pipeline.registry import config_dir, make_calibrator as make_from_config

    assert (Path(config_dir()) / "calibrator" / "conformal.yaml").is_file()
    cal = make_from_config("conformal", alpha=0.2, bonferroni=True)
    assert isinstance(cal, ConformalBoxIntervals) and cal.alpha == 0.2 and cal.bonferroni
    cal.fit(np.zeros((50, 4)), np.ones((50, 4)), np.random.default_rng(0).normal(size=(50, 4)))
    assert np.allclose(cal.alpha_coord_, 0.05)
