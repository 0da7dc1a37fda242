"""Paired bootstrap over images for the difference of a metric between two result sets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from detcal.calibration import TemperatureScaling
from detcal.core.errors import DetcalInputError
from detcal.metrics import ConfidenceMetric, SuiteBinning, suite
from detcal.metrics.bootstrap import bootstrap_ci, percentile_interval
from detcal.metrics.paired import confidence_changes, paired_bootstrap, paired_bootstrap_many

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


def _mean(v: np.ndarray) -> float:
    return float(np.mean(v)) if len(v) else float("nan")


def test_two_result_sets_on_different_images_by_hand() -> None:
    # A has images 1, 2, 3; B has 2, 3, 4: four images resampled, each draw feeds both sides.
    ga, xa = np.array([1, 1, 2, 3]), np.array([1.0, 3.0, 5.0, 7.0])
    gb, xb = np.array([2, 3, 3, 4]), np.array([2.0, 4.0, 6.0, 10.0])
    res = paired_bootstrap(_mean, ga, (xa,), gb, (xb,), n_boot=50, seed=3, method="percentile", level=0.8)
    assert res.a == 4.0 and res.b == 5.5 and res.difference == 1.5 and res.n_images == 4
    # by hand: the same draw stream over the 4 union images (one block: 50 draws of 4 indices)
    picks = np.random.default_rng(3).integers(0, 4, size=(50, 4))
    union = np.array([1, 2, 3, 4])
    d = []
    for row in picks:
        ids = union[row]
        sa = np.concatenate([xa[ga == i] for i in ids])
        sb = np.concatenate([xb[gb == i] for i in ids])
        d.append(_mean(sb) - _mean(sa))
    d = np.array(d)
    assert res.undefined_replicates == int(np.sum(~np.isfinite(d)))  # a draw of only image 4 leaves A empty
    assert res.ci == pytest.approx(percentile_interval(d, 0.8), rel=1e-12)
    assert res.bias == pytest.approx(np.nanmean(d) - 1.5, rel=1e-12)


@pytest.mark.parametrize(
    "metric",
    [ConfidenceMetric("ece", 10), ConfidenceMetric("dece", [3, 2], 2, use_features=True), ConfidenceMetric("brier")],
)
def test_fast_path_equals_generic_path(metric) -> None:
    rng = np.random.default_rng(1)
    img = np.repeat(np.arange(80), rng.integers(1, 6, 80))
    p = rng.random(len(img))
    y = rng.random(len(img)) < p**1.3
    f = rng.random((len(img), 1))
    q = np.clip(p**1.3 + rng.normal(0, 0.02, len(p)), 0, 1)
    fast = paired_bootstrap(metric, img, (p, y, f), None, (q, y, f), n_boot=60, seed=2)
    slow = paired_bootstrap(metric, img, (p, y, f), None, (q, y, f), n_boot=60, seed=2, fast=False)
    assert fast.difference == pytest.approx(slow.difference, rel=1e-12)
    assert fast.ci == pytest.approx(slow.ci, rel=1e-10, nan_ok=True)
    assert fast.acceleration == pytest.approx(slow.acceleration, rel=1e-8, nan_ok=True)


def test_identical_sets_give_a_zero_interval() -> None:
    rng = np.random.default_rng(2)
    img = np.repeat(np.arange(50), 3)
    p = rng.random(150)
    y = rng.random(150) < p
    res = paired_bootstrap(ConfidenceMetric("ece", 10), img, (p, y), None, (p, y), n_boot=100)
    assert res.difference == 0.0 and res.ci == (0.0, 0.0) and res.bias == 0.0


def test_paired_interval_is_narrower_than_the_separate_ones() -> None:
    # a strong image effect shared by both sets: separate intervals are wide, the difference is tight
    rng = np.random.default_rng(4)
    n_img = 300
    img = np.repeat(np.arange(n_img), 4)
    effect = np.repeat(rng.normal(0, 3, n_img), 4)
    xa = effect + rng.normal(0, 0.3, len(img))
    xb = xa + 0.2 + rng.normal(0, 0.1, len(img))
    res = paired_bootstrap(_mean, img, (xa,), None, (xb,), n_boot=400, seed=5)
    lo_a, hi_a = bootstrap_ci(_mean, img, xa, n_boot=400, seed=5)
    assert res.excludes_zero() and res.ci[0] <= res.difference <= res.ci[1]
    assert (res.ci[1] - res.ci[0]) < 0.1 * (hi_a - lo_a)
    assert res.difference == pytest.approx(0.2, abs=0.03)


def test_confidence_changes_after_temperature_scaling() -> None:
    # over-confident scores (temperature 2.5): calibration on other images lowers ECE and NLL, and
    # the paired intervals of the change exclude 0.
    def make(seed: int, n_img: int) -> tuple[np.ndarray, ...]:
        rng = np.random.default_rng(seed)
        img = np.repeat(np.arange(n_img), rng.integers(1, 6, n_img))
        z = rng.normal(0.3, 1.2, len(img))
        y = rng.random(len(img)) < 1 / (1 + np.exp(-z))
        return img, 1 / (1 + np.exp(-2.5 * z)), y, rng.random((len(img), 2))

    _, p_c, y_c, _ = make(6, 600)
    img, p, y, f = make(7, 600)
    q = TemperatureScaling().fit(p_c, y_c).transform(p)
    cfg = suite(SuiteBinning(position=3, sample_threshold=8))
    ch = confidence_changes(p, q, y, f, img, cfg, n_boot=300, seed=1)
    assert set(ch) == set(cfg)
    for name in ("ece", "nll", "brier"):
        assert ch[name].difference < 0 and ch[name].ci[1] < 0, (name, ch[name])
    doc = json.loads(json.dumps(ch["ece"].to_dict()))
    assert doc["bootstrap"]["paired"] is True and doc["bootstrap"]["method"] == "bca"
    assert doc["excludes_zero"] is True
    # without features the position metrics are left out
    assert "dece" not in confidence_changes(p, q, y, None, img, cfg, names=["ece", "dece"], n_boot=300, seed=1)


def test_two_detectors_on_the_same_ground_truth() -> None:
    rng = np.random.default_rng(8)
    img_a = np.repeat(np.arange(200), rng.integers(1, 4, 200))
    img_b = np.repeat(np.arange(200), rng.integers(1, 4, 200))
    p_a, p_b = rng.random(len(img_a)), rng.random(len(img_b))
    y_a = rng.random(len(img_a)) < p_a**2  # A over-confident
    y_b = rng.random(len(img_b)) < p_b  # B calibrated
    ch = confidence_changes(p_a, p_b, y_a, None, img_a, suite(), y_b=y_b, image_id_b=img_b, names=["ece"], n_boot=300)
    assert ch["ece"].difference < 0 and ch["ece"].excludes_zero()


def test_validation() -> None:
    x = np.arange(4.0)
    with pytest.raises(DetcalInputError, match="arrays_b"):
        paired_bootstrap_many({"m": _mean}, np.arange(4), (x,))
    with pytest.raises(DetcalInputError) as err:
        paired_bootstrap(_mean, np.arange(4), (x,), None, (x[:3],))
    assert err.value.field == "arrays_b[0]"
    with pytest.raises(DetcalInputError, match="image_id"):
        confidence_changes(x / 4, x / 4, x > 1)
    with pytest.raises(DetcalInputError, match="unknown"):
        confidence_changes(x / 4, x / 4, x > 1, None, np.arange(4), names=["nope"])
