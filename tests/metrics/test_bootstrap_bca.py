"""BCa / bias-corrected bootstrap intervals over images, the jackknife, and the bootstrap bias."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from detcal.core.types import MetricResult
from detcal.metrics import ConfidenceMetric, SuiteBinning, confidence_metrics, ece, suite
from detcal.metrics.bootstrap import (
    bootstrap_ci,
    bootstrap_interval,
    bootstrap_many,
    bootstrap_values,
    interval,
    jackknife_blocks,
    jackknife_many,
    percentile_interval,
    suite_intervals,
    with_ci,
)

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")


def _bca_by_hand(values: np.ndarray, est: float, jack: np.ndarray, level: float) -> tuple[float, float]:
    """Efron & Tibshirani (1993) eqs. 14.9-14.15, written out with scipy.stats.norm."""
    b = len(values)
    z0 = stats.norm.ppf((np.sum(values < est) + 0.5 * np.sum(values == est)) / b)
    d = jack.mean() - jack
    a = np.sum(d**3) / (6.0 * np.sum(d**2) ** 1.5)
    out = []
    for alpha in ((1 - level) / 2, (1 + level) / 2):
        z = stats.norm.ppf(alpha)
        out.append(np.quantile(values, stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))))
    return out[0], out[1]


def test_interval_formula_by_hand() -> None:
    rng = np.random.default_rng(0)
    values = rng.gamma(2.0, 1.0, 999)
    jack = rng.normal(1.0, 0.1, 50) ** 3
    for level in (0.9, 0.95):
        res = interval(values, 1.7, level, "bca", jack)
        np.testing.assert_allclose(res["ci"], _bca_by_hand(values, 1.7, jack, level), rtol=1e-12)
        assert res["bias"] == pytest.approx(values.mean() - 1.7, rel=1e-12)
        # BC is BCa with a = 0: a constant jackknife has zero acceleration
        bc = interval(values, 1.7, level, "bc")
        np.testing.assert_allclose(bc["ci"], interval(values, 1.7, level, "bca", np.zeros(7))["ci"], rtol=1e-12)
        assert bc["acceleration"] is None and res["acceleration"] != 0.0
    assert interval(values, 1.7, 0.95, "percentile")["ci"] == percentile_interval(values, 0.95)
    # ties with the estimate count half: all replicates equal to it give z0 = 0
    assert interval(np.full(20, 3.0), 3.0, 0.9, "bc")["z0"] == 0.0


def test_bca_agrees_with_scipy_bootstrap() -> None:
    # one sample per image = scipy's iid resampling; a skewed statistic (variance of exponential data)
    # where BCa and percentile differ visibly. Both use the same formulas, not the same draws:
    # the end points agree to Monte-Carlo error.
    rng = np.random.default_rng(1)
    x = rng.exponential(1.0, 150)
    var = lambda v: float(np.var(v, ddof=1))  # noqa: E731
    ours = bootstrap_interval(var, np.arange(150), x, n_boot=8000, seed=2, level=0.9)
    ref = stats.bootstrap(
        (x,),
        lambda v, axis=-1: np.var(v, ddof=1, axis=axis),
        method="BCa",
        n_resamples=8000,
        confidence_level=0.9,
        random_state=3,
    ).confidence_interval
    width = ref.high - ref.low
    assert ours["ci"][0] == pytest.approx(ref.low, abs=0.06 * width)
    assert ours["ci"][1] == pytest.approx(ref.high, abs=0.06 * width)
    # acceleration is a property of the data alone: the leave-one-out jackknife, exactly
    d = np.array([np.var(np.delete(x, i), ddof=1) for i in range(150)])
    d = d.mean() - d
    assert ours["acceleration"] == pytest.approx(np.sum(d**3) / (6 * np.sum(d**2) ** 1.5), rel=1e-10)
    pct = bootstrap_interval(var, np.arange(150), x, n_boot=8000, seed=2, level=0.9, method="percentile")["ci"]
    assert ours["ci"][1] > pct[1] + 0.02 * width  # BCa moves up for a right-skewed statistic


def test_jackknife_leaves_one_image_out() -> None:
    img = np.array([5, 5, 7, 9, 9, 9])
    x = np.array([1.0, 3.0, 10.0, 2.0, 2.0, 5.0])
    jk = jackknife_many({"sum": lambda v: float(v.sum())}, img, x)["sum"]
    np.testing.assert_array_equal(jk, [23.0 - 4.0, 23.0 - 10.0, 23.0 - 9.0])


@pytest.mark.parametrize("name,bins", [("ece", 10), ("dece", [3, 2]), ("nll", 1), ("outliers", [3, 2])])
def test_jackknife_fast_equals_generic(name: str, bins) -> None:
    rng = np.random.default_rng(3)
    img = np.repeat(np.arange(60), rng.integers(1, 8, 60))
    p = rng.random(len(img))
    y = rng.random(len(img)) < p
    f = rng.random((len(img), 1))
    use_f = name in ("dece", "outliers")
    m = ConfidenceMetric(name, bins, 2, use_features=use_f) if name != "nll" else ConfidenceMetric("nll")
    args = (p, y, f) if use_f else (p, y)
    fast = jackknife_many({"m": m}, img, *args)["m"]
    slow = jackknife_many({"m": m}, img, *args, fast=False)["m"]
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=1e-15)
    # leave-one-image-out by hand for the first image
    keep = img != 0
    assert fast[0] == pytest.approx(float(m(*(a[keep] for a in args)).value), rel=1e-12)


def test_jackknife_blocks_deal_groups_evenly() -> None:
    b = jackknife_blocks(1003, 200, seed=4)
    counts = np.bincount(b)
    assert len(counts) == 200 and counts.min() >= 5 and counts.max() <= 6
    np.testing.assert_array_equal(jackknife_blocks(7, None), np.arange(7))


def _issue_case() -> tuple[np.ndarray, ...]:
    """A sparse D-ECE grid: duplicated images push sparse cells over the sample threshold,
    so every replicate exceeds the estimate (the issue's dece 0.0865 [0.1031, 0.1181])."""
    rng = np.random.default_rng(5)
    img = np.repeat(np.arange(1000), rng.integers(1, 5, 1000))
    p = rng.random(len(img))
    y = rng.random(len(img)) < p
    f = rng.random((len(img), 3))
    return img, p, y, f


def test_intervals_bound_their_estimate_or_say_why() -> None:
    img, p, y, f = _issue_case()
    cfg = suite(SuiteBinning(position=5, sample_threshold=8))
    res = confidence_metrics(p, y, f, measures=cfg, image_id=img, n_boot=0)
    out = suite_intervals(res, cfg, img, p, y, f, n_boot=300, seed=1)
    pct = suite_intervals(res, cfg, img, p, y, f, n_boot=300, seed=1, method="percentile")
    # the old percentile interval of D-ECE lies wholly above its estimate
    assert pct["dece"].ci[0] > pct["dece"].value
    for name, r in out.items():
        lo, hi = r.ci
        if np.isnan(lo):
            assert "dominates the spread" in r.extra["ci_note"], name
            assert r.extra["bootstrap_bias"] > 0
        else:
            assert lo <= r.value <= hi, (name, r.value, r.ci)
        assert r.params["bootstrap"]["method"] == "bca"
        assert r.extra["bias_corrected"] == pytest.approx(r.value - r.extra["bootstrap_bias"])
    assert np.isnan(out["dece"].ci[0])  # bias far beyond the spread: no interval, and the bias is reported
    assert not np.isnan(out["ece"].ci[0]) and out["ece"].extra["ci_acceleration"] is not None


def test_suite_intervals_equal_with_ci_per_metric() -> None:
    img, p, y, f = _issue_case()
    m = ConfidenceMetric("ece", 15)
    r = ece(p, y)
    one = with_ci(r, m, img, p, y, n_boot=200, seed=7)
    both = suite_intervals({"ece": r, "x": MetricResult("x", 1.0)}, {"ece": m}, img, p, y, n_boot=200, seed=7)
    assert both["ece"].ci == one.ci and both["x"].ci is None
    assert one.ci == bootstrap_ci(m, img, p, y, n_boot=200, seed=7)
    assert one.extra["bootstrap_bias"] == pytest.approx(
        np.mean(bootstrap_values(m, img, p, y, n_boot=200, seed=7)) - r.value, rel=1e-12
    )


def test_method_validation() -> None:
    from detcal.core.errors import DetcalInputError

    with pytest.raises(DetcalInputError, match="method"):
        bootstrap_ci(lambda v: float(v.mean()), np.arange(5), np.arange(5.0), method="student")
    with pytest.raises(DetcalInputError, match="jackknife"):
        interval(np.arange(10.0), 4.5, 0.9, "bca", None)


def _planted(seed: int, n_img: int, power: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images of 1-5 detections; p ~ U(0, 1), P(y = 1 | p) = p^power."""
    rng = np.random.default_rng(seed)
    img = np.repeat(np.arange(n_img), rng.integers(1, 6, n_img))
    p = rng.uniform(size=len(img))
    return img, p, (rng.uniform(size=len(img)) < p**power)


@pytest.mark.slow
def test_coverage_on_planted_truth() -> None:
    # Truth with 15 equal-width bins, P(y|p) = p^k and p uniform: the bin gap mean(p^k - p) has the
    # same sign everywhere, so ECE = int (p - p^k) dp = 1/2 - 1/(k+1); Brier = E[p^2 - 2 p^(k+1) + p^k]
    # = 1/3 - 2/(k+2) + 1/(k+1). 200 seeds: Monte-Carlo sd of a coverage near 0.95 is 0.015.
    fns = {"ece": ConfidenceMetric("ece", 15), "brier": ConfidenceMetric("brier")}
    results = {}
    for power, n_img in ((1.5, 400), (1.2, 400)):
        truth = {"ece": 0.5 - 1 / (power + 1), "brier": 1 / 3 - 2 / (power + 2) + 1 / (power + 1)}
        hits = {(n, m): 0 for n in fns for m in ("bca", "percentile")}
        for seed in range(200):
            img, p, y = _planted(seed, n_img, power)
            reps = bootstrap_many(fns, img, p, y, n_boot=1000, seed=10_000 + seed)
            jack = jackknife_many(fns, img, p, y)
            for n, fn in fns.items():
                est = float(fn(p, y).value)
                for m in ("bca", "percentile"):
                    lo, hi = interval(reps[n], est, 0.95, m, jack[n])["ci"]
                    hits[(n, m)] += bool(lo <= truth[n] <= hi)
        results[power] = {k: v / 200 for k, v in hits.items()}
    print(results)
    # well-separated from calibration (true ECE 0.10): BCa near nominal for ECE and Brier
    assert 0.91 <= results[1.5][("ece", "bca")] <= 0.99
    assert 0.91 <= results[1.5][("brier", "bca")] <= 0.99
    assert 0.91 <= results[1.2][("brier", "bca")] <= 0.99
    # nearer calibration (true ECE 0.045) the plug-in |gap| bias remains: BCa recovers much of the
    # coverage the percentile interval loses (measured 0.83 vs 0.53), but not all (docs/calibration.md)
    assert results[1.2][("ece", "bca")] >= results[1.2][("ece", "percentile")] + 0.15
