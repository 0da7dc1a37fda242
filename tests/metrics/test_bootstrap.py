"""Tests of detcal.metrics.bootstrap: grouped resampling, fast == generic path, intervals."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.metrics import ConfidenceMetric, SuiteBinning, confidence_metrics, ece, suite
from detcal.metrics.bootstrap import (
    bootstrap_ci,
    bootstrap_many,
    bootstrap_values,
    percentile_interval,
    resample_rows,
    with_ci,
)

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    n_img = 150
    per = rng.integers(1, 12, n_img)  # detections per image
    img = np.repeat(rng.permutation(np.arange(1000, 1000 + n_img)), per)
    s = len(img)
    shuffle = rng.permutation(s)  # detections of one image are not contiguous in the input
    img = img[shuffle]
    p = rng.random(s)
    y = rng.random(s) < p**1.4
    f = rng.uniform(0.0, 1.0, (s, 4))
    return img, p, y, f


def test_resample_rows_golden():
    # groups (sorted order): 0 -> rows [0, 1], 1 -> [2], 2 -> [3, 4, 5]; order is a permutation
    order = np.array([5, 3, 0, 1, 2, 4])
    starts = np.array([0, 2, 3])
    counts = np.array([2, 1, 3])
    # picks 2, 0, 2: order[3:6], order[0:2], order[3:6] = [1, 2, 4], [5, 3], [1, 2, 4]
    assert resample_rows(np.array([2, 0, 2]), order, starts, counts).tolist() == [1, 2, 4, 5, 3, 1, 2, 4]


def test_images_are_resampled_together(data):
    img, p, _, _ = data
    sizes = {g: int(np.sum(img == g)) for g in np.unique(img)}

    def whole_images(ids: np.ndarray) -> float:
        # 1.0 iff every drawn image appears a multiple of its size (all its detections, k times)
        u, c = np.unique(ids, return_counts=True)
        return float(all(ci % sizes[g] == 0 for g, ci in zip(u, c)))

    v = bootstrap_values(whole_images, img, img, n_boot=30)
    assert v.tolist() == [1.0] * 30


def test_replicate_sizes_follow_the_draws(data):
    # Independent recomputation of the draws: rng.integers(0, I, size=(n_boot, I)) over the
    # sorted unique image ids; replicate size = sum of the drawn images' detection counts.
    img, p, _, _ = data
    uniq, counts = np.unique(img, return_counts=True)
    picks = np.random.default_rng(5).integers(0, len(uniq), size=(40, len(uniq)))
    expect = counts[picks].sum(axis=1).astype(float)
    v = bootstrap_values(lambda x: float(len(x)), img, p, n_boot=40, seed=5)
    np.testing.assert_array_equal(v, expect)


@pytest.mark.parametrize(
    "metric",
    [
        ConfidenceMetric("ece", 15),
        ConfidenceMetric("ece_q", 10, q=2.0),
        ConfidenceMetric("mce", 10, 3),
        ConfidenceMetric("dece", [4, 2, 2], 3, use_features=True),
        ConfidenceMetric("dece", 3, 2, "netcal", use_features=True),
        ConfidenceMetric("homogeneity", [4, 2, 2], 2, use_features=True),
        ConfidenceMetric("nll"),
        ConfidenceMetric("brier"),
        ConfidenceMetric("sharpness"),
        ConfidenceMetric("overconfidence"),
        ConfidenceMetric("underconfidence"),
    ],
)
def test_fast_path_equals_generic_path(data, metric):
    img, p, y, f = data
    feats = f[:, :2] if metric.use_features else None
    fast = bootstrap_values(metric, img, p, y, feats, n_boot=60, seed=3)
    slow = bootstrap_values(metric, img, p, y, feats, n_boot=60, seed=3, fast=False)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-14)
    assert np.isfinite(fast).all()
    assert bootstrap_ci(metric, img, p, y, feats, n_boot=60, seed=3) == pytest.approx(
        bootstrap_ci(metric, img, p, y, feats, n_boot=60, seed=3, fast=False), rel=1e-12, nan_ok=True
    )


def test_outliers_fast_equals_generic(data):
    img, p, y, f = data
    m = ConfidenceMetric("outliers", [3, 2], 2, use_features=True)
    fast = bootstrap_values(m, img, p, y, f[:, :1], n_boot=40, seed=1)
    slow = bootstrap_values(m, img, p, y, f[:, :1], n_boot=40, seed=1, fast=False)
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-14)


def test_mean_ci_matches_normal_theory():
    # One sample per image, x ~ N(0, 1), n = 2000: the percentile interval of the mean is close to
    # mean +- 1.96 / sqrt(n) (half-width 0.0438); the bootstrap Monte-Carlo error is a few percent.
    rng = np.random.default_rng(0)
    x = rng.normal(size=2000)
    lo, hi = bootstrap_ci(lambda v: float(v.mean()), np.arange(2000), x, n_boot=2000, seed=1)
    half = 1.959964 * x.std(ddof=1) / np.sqrt(2000)
    assert (hi - lo) / 2 == pytest.approx(half, rel=0.1)
    assert (lo + hi) / 2 == pytest.approx(x.mean(), abs=0.1 * half)


def test_clustered_ci_is_wider_than_iid():
    # 100 images, 20 detections each, y constant within an image: resampling images (the right
    # unit) must give a much wider interval than resampling detections independently.
    rng = np.random.default_rng(2)
    img = np.repeat(np.arange(100), 20)
    y = np.repeat(rng.random(100) < 0.5, 20).astype(float)
    mean = lambda v: float(v.mean())  # noqa: E731
    lo_g, hi_g = bootstrap_ci(mean, img, y, n_boot=400)
    lo_i, hi_i = bootstrap_ci(mean, np.arange(2000), y, n_boot=400)
    assert (hi_g - lo_g) > 3 * (hi_i - lo_i)


def test_seeded_and_deterministic(data):
    img, p, y, _ = data
    m = ConfidenceMetric("ece", 15)
    a = bootstrap_ci(m, img, p, y, n_boot=50, seed=9)
    assert a == bootstrap_ci(m, img, p, y, n_boot=50, seed=9)
    assert a != bootstrap_ci(m, img, p, y, n_boot=50, seed=10)


def test_percentile_interval_golden():
    # values 0..100: quantiles 0.025 and 0.975 with linear interpolation = 2.5 and 97.5
    assert percentile_interval(np.arange(101.0), 0.95) == pytest.approx((2.5, 97.5), abs=1e-12)
    # NaN replicates are left out
    assert percentile_interval(np.array([np.nan, 1.0, 3.0]), 0.5) == pytest.approx((1.5, 2.5), abs=1e-12)
    lo, hi = percentile_interval(np.array([np.nan]), 0.9)
    assert np.isnan(lo) and np.isnan(hi)


def test_with_ci(data):
    img, p, y, _ = data
    r = ece(p, y)
    rc = with_ci(r, ConfidenceMetric("ece", 15), img, p, y, n_boot=50, level=0.9, seed=4, method="percentile")
    assert rc.value == r.value and r.ci is None  # the original is untouched
    assert rc.ci == bootstrap_ci(
        ConfidenceMetric("ece", 15), img, p, y, n_boot=50, level=0.9, seed=4, method="percentile"
    )
    assert rc.ci[0] < r.value < rc.ci[1]
    assert rc.ci_level == 0.9
    assert rc.params["bootstrap"] == {"method": "percentile", "unit": "image", "n_boot": 50, "level": 0.9, "seed": 4}
    assert rc.extra["ci_undefined_replicates"] == 0
    # the generic path through the plain function gives the same interval
    gen = bootstrap_ci(lambda a, b: ece(a, b), img, p, y, n_boot=50, level=0.9, seed=4, method="percentile")
    assert gen == pytest.approx(rc.ci, rel=1e-12)


def test_suite_cis_equal_single_metric_cis(data):
    img, p, y, f = data
    cfg = suite(SuiteBinning(position=2, sample_threshold=2))
    out = confidence_metrics(p, y, f, measures=cfg, image_id=img, n_boot=80, seed=2)
    for name in ("ece", "nll", "dece"):
        m = cfg[name]
        ref = bootstrap_ci(m, img, p, y, f, n_boot=80, seed=2)  # BCa, the suite's default
        assert out[name].ci == pytest.approx(ref, rel=1e-12, nan_ok=True)
        assert out[name].ci_level == 0.95


def test_many_shares_draws(data):
    img, p, y, _ = data
    fns = {"ece": ConfidenceMetric("ece", 15), "mean_p": lambda a, b: float(np.mean(a))}
    many = bootstrap_many(fns, img, p, y, n_boot=25, seed=6)
    np.testing.assert_array_equal(many["ece"], bootstrap_values(fns["ece"], img, p, y, n_boot=25, seed=6))
    np.testing.assert_array_equal(many["mean_p"], bootstrap_values(fns["mean_p"], img, p, y, n_boot=25, seed=6))


def test_empty_sample():
    lo, hi = bootstrap_ci(ConfidenceMetric("ece"), np.zeros(0, int), np.zeros(0), np.zeros(0), n_boot=10)
    assert np.isnan(lo) and np.isnan(hi)


def test_validation(data):
    img, p, y, _ = data
    with pytest.raises(DetcalInputError) as err:
        bootstrap_ci(ConfidenceMetric("ece"), img, p, y, n_boot=0)
    assert err.value.field == "n_boot"
    with pytest.raises(DetcalInputError) as err:
        bootstrap_ci(ConfidenceMetric("ece"), img, p, y, level=1.5)
    assert err.value.field == "level"
    with pytest.raises(DetcalInputError) as err:
        bootstrap_ci(ConfidenceMetric("ece"), img[:-1], p, y)
    assert err.value.field == "arrays[0]"
