"""Tests of detcal.metrics.confidence: hand-computed goldens and parity with netcal/scikit-learn."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import warnings

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics import (
    ConfidenceMetric,
    SparseCellsWarning,
    SuiteBinning,
    brier,
    confidence_metrics,
    dece,
    ece,
    ece_q,
    homogeneity,
    mce,
    nll,
    outliers,
    overconfidence,
    per_class,
    sharpness,
    suite,
    underconfidence,
)

pytestmark = pytest.mark.filterwarnings("ignore::detcal.metrics.confidence.SparseCellsWarning")

# Tiny example used throughout (5 confidence bins, floor edges):
#   p = 0.1  0.3  0.35  0.8  0.9  1.0
#   y = 0    1    0     1    1    0
# bin 0: {0.1}            N=1 prec 0    conf 0.1    gap 0.1
# bin 1: {0.3, 0.35}      N=2 prec 0.5  conf 0.325  gap 0.175
# bins 2, 3 empty
# bin 4: {0.8, 0.9, 1.0}  N=3 prec 2/3  conf 0.9    gap 0.9 - 2/3 = 0.2333...
#   (0.8 * 5 = 4.0 -> bin 4: left edge belongs to the bin; 1.0 -> last bin, closed)
P = np.array([0.1, 0.3, 0.35, 0.8, 0.9, 1.0])
Y = np.array([0, 1, 0, 1, 1, 0])
GAP4 = 0.9 - 2 / 3


def test_ece_golden():
    r = ece(P, Y, bins=5)
    # (1 * 0.1 + 2 * 0.175 + 3 * 0.23333) / 6 = (0.1 + 0.35 + 0.7) / 6 = 1.15 / 6
    assert r.value == pytest.approx(1.15 / 6, abs=1e-15)
    assert isinstance(r, MetricResult) and r.name == "ece" and r.variant == "drop"
    assert r.params["bins"] == [5] and r.params["n"] == 6 and r.params["sample_threshold"] == 1
    assert r.table["count"].tolist() == [1, 2, 0, 0, 3]
    assert np.isnan(r.table["precision"][2]) and np.isnan(r.table["gap"][3])  # empty bins
    np.testing.assert_allclose(r.table["gap"][[0, 1, 4]], [0.1, 0.175, GAP4], atol=1e-15)
    assert r.extra["cells"] == 5 and r.extra["occupied_cells"] == 3 and r.extra["kept_cells"] == 3


def test_ece_sample_threshold_policies():
    # threshold 2 keeps bins 1 and 4 (N = 2, 3), drops bin 0 (N = 1):
    # drop:   (2 * 0.175 + 3 * GAP4) / 5 = (0.35 + 0.7) / 5 = 0.21
    # netcal: (0.35 + 0.7) / 6 = 0.175
    d = ece(P, Y, bins=5, sample_threshold=2)
    n = ece(P, Y, bins=5, sample_threshold=2, policy="netcal")
    assert d.value == pytest.approx(0.21, abs=1e-15)
    assert n.value == pytest.approx(0.175, abs=1e-15)
    assert d.extra["dropped_fraction"] == pytest.approx(1 / 6) and n.extra["dropped_fraction"] == 0.0
    assert n.extra["sparse_fraction"] == pytest.approx(1 / 6) and n.params["edges"] == "netcal"
    assert d.extra["kept_cells"] == 2 and d.extra["n_kept"] == 5


def test_ece_q_golden():
    # (1 * 0.1^2 + 2 * 0.175^2 + 3 * GAP4^2) / 6 = (0.01 + 0.06125 + 3 * 0.054444) / 6, then sqrt
    expect = math.sqrt((0.01 + 2 * 0.175**2 + 3 * GAP4**2) / 6)
    r = ece_q(P, Y, q=2, bins=5)
    assert r.value == pytest.approx(expect, abs=1e-15) and r.params["q"] == 2.0
    # q = 1 is the ECE
    assert ece_q(P, Y, q=1, bins=5).value == pytest.approx(1.15 / 6, abs=1e-15)


def test_mce_golden():
    assert mce(P, Y, bins=5).value == pytest.approx(GAP4, abs=1e-15)
    # threshold 4: no bin has 4 samples -> NaN with a note
    r = mce(P, Y, bins=5, sample_threshold=4)
    assert np.isnan(r.value) and "sample_threshold" in r.extra["note"]
    # threshold 2 drops bin 0 only; bin 4 still holds the max
    assert mce(P, Y, bins=5, sample_threshold=2).value == pytest.approx(GAP4, abs=1e-15)


def test_single_bin():
    # one bin: |mean y - mean p| = |3/6 - 3.45/6| = 0.075
    assert ece(P, Y, bins=1).value == pytest.approx(0.075, abs=1e-15)
    assert mce(P, Y, bins=1).value == pytest.approx(0.075, abs=1e-15)


def test_cell_free_goldens():
    # NLL terms: -log 0.9, -log 0.3, -log 0.65, -log 0.8, -log 0.9, -log(1e-12) (p = 1, y = 0 clipped)
    terms = [-math.log(0.9), -math.log(0.3), -math.log(0.65), -math.log(0.8), -math.log(0.9), -math.log(1e-12)]
    assert nll(P, Y).value == pytest.approx(sum(terms) / 6, rel=1e-14)
    # Brier: (0.01 + 0.49 + 0.1225 + 0.04 + 0.01 + 1) / 6 = 1.6725 / 6
    assert brier(P, Y).value == pytest.approx(1.6725 / 6, abs=1e-15)
    # sharpness: E p^2 - (E p)^2 = 2.6725 / 6 - (3.45 / 6)^2
    assert sharpness(P).value == pytest.approx(2.6725 / 6 - (3.45 / 6) ** 2, abs=1e-15)
    # over-confidence: y = 0 -> p = 0.1, 0.35, 1.0 -> 1.45 / 3
    assert overconfidence(P, Y).value == pytest.approx(1.45 / 3, abs=1e-15)
    # under-confidence: y = 1 -> 1 - p = 0.7, 0.2, 0.1 -> 1.0 / 3
    assert underconfidence(P, Y).value == pytest.approx(1.0 / 3, abs=1e-15)


def test_nll_clip_both_ends():
    # p = 0 with y = 1 and p = 1 with y = 0 both cost -log(1e-12) = 27.631021115928547
    r = nll(np.array([0.0, 1.0]), np.array([1, 0]))
    assert r.value == pytest.approx(-math.log(1e-12), rel=1e-15)
    assert r.params["clip"] == 1e-12


def test_all_matched_and_none_matched():
    ones, zeros = np.ones(6, int), np.zeros(6, int)
    # all matched: every gap is 1 - conf(c) >= 0, so ECE = 1 - mean p = 1 - 0.575 = 0.425
    assert ece(P, ones, bins=5).value == pytest.approx(0.425, abs=1e-15)
    assert underconfidence(P, ones).value == pytest.approx(0.425, abs=1e-15)
    r = overconfidence(P, ones)
    assert np.isnan(r.value) and "all detections are matched" in r.extra["note"]
    # none matched: ECE = mean p = 0.575
    assert ece(P, zeros, bins=5).value == pytest.approx(0.575, abs=1e-15)
    assert overconfidence(P, zeros).value == pytest.approx(0.575, abs=1e-15)
    r = underconfidence(P, zeros)
    assert np.isnan(r.value) and "no detection is matched" in r.extra["note"]


@pytest.mark.parametrize("fn", [ece, ece_q, mce, nll, brier, overconfidence, underconfidence])
def test_empty_sample_is_nan_with_note(fn):
    r = fn(np.zeros(0), np.zeros(0, bool))
    assert np.isnan(r.value) and "empty" in r.extra["note"] and r.params["n"] == 0


def test_empty_sample_dece_and_sharpness():
    for r in (
        dece(np.zeros(0), np.zeros(0), np.zeros((0, 4))),
        homogeneity(np.zeros(0), np.zeros(0)),
        outliers(np.zeros(0), np.zeros(0)),
        sharpness(np.zeros(0)),
    ):
        assert np.isnan(r.value) and "empty" in r.extra["note"]


# D-ECE example on (p, cx), bins [2, 2] (floor), cells flattened (p bin, cx bin) in C order:
#  i   p    cx    y   cell
#  0  0.2  0.1    0   (0,0)
#  1  0.4  0.3    1   (0,0)
#  2  0.7  0.2    1   (1,0)
#  3  0.9  0.6    1   (1,1)
#  4  0.6  0.7    0   (1,1)
#  5  0.1  0.9    0   (0,1)
#  6  0.8  0.55   1   (1,1)
# (0,0): N=2 prec .5 conf .3 gap .2 | (0,1): N=1 prec 0 conf .1 gap .1
# (1,0): N=1 prec 1 conf .7 gap .3  | (1,1): N=3 prec 2/3 conf 2.3/3 gap .1
DP = np.array([0.2, 0.4, 0.7, 0.9, 0.6, 0.1, 0.8])
DX = np.array([[0.1], [0.3], [0.2], [0.6], [0.7], [0.9], [0.55]])
DY = np.array([0, 1, 1, 1, 0, 0, 1])


def test_dece_golden():
    # threshold 2: kept (0,0), (1,1): drop (2 * .2 + 3 * .1) / 5 = 0.14 ; netcal 0.7 / 7 = 0.1
    d = dece(DP, DY, DX, bins=[2, 2], sample_threshold=2)
    assert d.value == pytest.approx(0.14, abs=1e-15)
    assert d.extra["dropped_fraction"] == pytest.approx(2 / 7)
    assert d.extra["cells"] == 4 and d.extra["occupied_cells"] == 4 and d.extra["kept_cells"] == 2
    assert d.table["count"].tolist() == [2, 1, 1, 3]
    assert d.table["bin_index"].tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert dece(DP, DY, DX, bins=[2, 2], sample_threshold=2, policy="netcal").value == pytest.approx(0.1, abs=1e-15)
    # threshold 1: (0.4 + 0.1 + 0.3 + 0.3) / 7 = 1.1 / 7
    assert dece(DP, DY, DX, bins=2, sample_threshold=1).value == pytest.approx(1.1 / 7, abs=1e-15)
    # features=None: confidence only, 2 bins: bin 0 {.2,.4,.1} prec 1/3 conf 0.7/3 gap 0.1;
    # bin 1 {.7,.9,.6,.8} prec .75 conf .75 gap 0 -> (3 * 0.1) / 7
    assert dece(DP, DY, None, bins=2, sample_threshold=1).value == pytest.approx(0.3 / 7, abs=1e-15)


def test_homogeneity_and_outliers_golden():
    # kept gaps .2 (w 2/5) and .1 (w 3/5): mean .14; var .4 * .06^2 + .6 * .04^2 = .0024
    h = homogeneity(DP, DY, DX, bins=[2, 2], sample_threshold=2)
    assert h.value == pytest.approx(math.sqrt(0.0024), abs=1e-15)
    assert h.extra["mean_gap"] == pytest.approx(0.14, abs=1e-15)
    assert h.extra["homogeneity_rating"] == "fair"  # 0.049 in (0.02, 0.05]
    o = outliers(DP, DY, DX, bins=[2, 2], sample_threshold=2)
    # threshold .14 + 2 * .049 = .238 > every gap: no outlier
    assert o.value == 0.0 and o.extra["outlier_cells"] == 0 and o.extra["outlier_rating"] == "good"


def test_outlier_cell_golden():
    # bins 2, threshold 1. Cell 0: eight samples p = .25 with two matched -> prec .25 conf .25 gap 0.
    # Cell 1: one sample p = .75 unmatched -> gap .75.
    # weights 8/9, 1/9: mean = .75 / 9 = 1/12; var = 8/9 (1/12)^2 + 1/9 (2/3)^2 = 1/162 + 4/81 = 1/18
    # std = sqrt(1/18) = 0.2357; threshold 1/12 + 2 * 0.2357 = 0.5547 < .75 -> cell 1 is an outlier,
    # sample share 1/9 (> 0.05: poor); homogeneity 0.2357 (> 0.05: poor)
    p = np.array([0.25] * 8 + [0.75])
    y = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0])
    o = outliers(p, y, None, bins=2, sample_threshold=1)
    assert o.value == pytest.approx(1 / 9, abs=1e-15)
    assert o.extra["outlier_cells"] == 1 and o.extra["outlier_samples"] == 1
    assert o.extra["outlier_rating"] == "poor" and o.table["outlier"].tolist() == [False, True]
    h = homogeneity(p, y, None, bins=2, sample_threshold=1)
    assert h.value == pytest.approx(math.sqrt(1 / 18), abs=1e-15) and h.extra["homogeneity_rating"] == "poor"


def test_equal_gaps_are_not_outliers():
    # gaps |0 - 0.1| = 0.1 and |1 - 0.9| = 0.09999999999999998 in floats: equal up to rounding
    o = outliers(np.array([0.1, 0.9]), np.array([0, 1]), None, bins=2, sample_threshold=1)
    assert o.value == 0.0 and o.extra["outlier_cells"] == 0


def test_sparse_cells_warning():
    rng = np.random.default_rng(0)
    p, f = rng.random(100), rng.random((100, 4))
    y = rng.random(100) < p
    with pytest.warns(SparseCellsWarning):
        r = dece(p, y, f)  # 3125 cells > 100 / 10
    assert r.extra["sparse_warning"] is True
    with warnings.catch_warnings():
        warnings.simplefilter("error", SparseCellsWarning)
        r = ece(np.tile(p, 2), np.tile(y, 2))  # 15 cells <= 200 / 10: no warning
    assert r.extra["sparse_warning"] is False


# --- parity with netcal 1.4.0 and scikit-learn ---------------------------------


@pytest.fixture(scope="module")
def seeded():
    rng = np.random.default_rng(20240601)
    s = 20_000
    p = rng.random(s)
    y = (rng.random(s) < p**1.5).astype(np.int64)
    f = rng.uniform(0.01, 0.99, (s, 4))  # away from netcal's eps clipping
    return p, y, f


@pytest.fixture(scope="module")
def netcal_metrics():
    pytest.importorskip("netcal")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from netcal.metrics import ECE, MCE
    return ECE, MCE


def test_ece_parity_netcal(seeded, netcal_metrics):
    ECE, MCE = netcal_metrics
    p, y, _ = seeded
    ref = ECE(bins=15).measure(p, y)
    assert ece(p, y).value == pytest.approx(ref, abs=1e-9)
    assert ece(p, y, policy="netcal").value == pytest.approx(ref, abs=1e-9)
    assert mce(p, y).value == pytest.approx(MCE(bins=15).measure(p, y), abs=1e-9)


@pytest.mark.parametrize(
    "cols, bins, threshold",
    [
        ([0, 1, 2, 3], 5, 8),  # (conf, cx, cy, w, h), the default D-ECE
        ([0, 1, 2, 3], 5, 1),
        ([0, 1], [5, 3, 4], 3),  # (conf, cx, cy), per-feature bins
        ([2, 3], [10, 4, 4], 8),  # (conf, w, h)
        ([], 15, 8),  # confidence alone in detection mode
    ],
)
def test_dece_parity_netcal(seeded, netcal_metrics, cols, bins, threshold):
    ECE, _ = netcal_metrics
    p, y, f = seeded
    x = np.concatenate([p[:, None], f[:, cols]], axis=1)
    ref = ECE(bins=bins, detection=True, sample_threshold=threshold).measure(x, y)
    got = dece(p, y, f[:, cols] if cols else None, bins=bins, sample_threshold=threshold, policy="netcal")
    assert got.value == pytest.approx(ref, abs=1e-9)
    assert got.variant == "netcal"


def test_dece_parity_netcal_on_decimal_data(seeded, netcal_metrics):
    # 3-decimal scores and 2-decimal features hit bin edges; the netcal policy copies
    # netcal's edge rule and clipping, so it must still agree; the floor rule does not.
    # Precision alternates 0.05 / 0.95 between neighbouring confidence bins, so the gap changes
    # sign at every edge and moving an edge sample to the other bin changes the value (with
    # y ~ p^1.5 every cell is over-confident and D-ECE with threshold 1 would not depend on
    # which side of an edge a sample falls).
    ECE, _ = netcal_metrics
    p, _, f = seeded
    pr, fr = np.round(p, 3), np.round(f[:, :1], 2)
    prob = np.where(np.floor(pr * 10) % 2 == 0, 0.05, 0.95)
    y = (np.random.default_rng(7).random(len(p)) < prob).astype(np.int64)
    pr[:3] = [0.0, 1.0, 0.6]
    x = np.concatenate([pr[:, None], fr], axis=1)
    ref = ECE(bins=10, detection=True, sample_threshold=1).measure(x, y)
    assert dece(pr, y, fr, bins=10, sample_threshold=1, policy="netcal").value == pytest.approx(ref, abs=1e-9)
    assert abs(dece(pr, y, fr, bins=10, sample_threshold=1).value - ref) > 1e-6


def test_nll_brier_parity_sklearn(seeded):
    from sklearn.metrics import brier_score_loss, log_loss

    p, y, _ = seeded
    q = np.clip(p, 0.01, 0.99)  # sklearn clips with float eps, detcal with 1e-12: compare away from 0/1
    assert nll(q, y).value == pytest.approx(log_loss(y, q), rel=1e-12)
    assert brier(p, y).value == pytest.approx(brier_score_loss(y, p), rel=1e-12)
    assert sharpness(p).value == pytest.approx(np.var(p), rel=1e-12)
    assert overconfidence(p, y).value == pytest.approx(p[y == 0].mean(), rel=1e-12)
    assert underconfidence(p, y).value == pytest.approx((1 - p[y == 1]).mean(), rel=1e-12)


# --- per class and the suite ---------------------------------------------------


def test_per_class_golden():
    # class 1 = the tiny example (ECE, 5 bins, 1.15/6, n 6); class 2 = all matched, p = .5, .7:
    # .5 -> bin 2 (2.5) gap .5, .7 -> bin 3 (3.5) gap .3 -> ECE (.5 + .3) / 2 = .4, n 2
    p = np.concatenate([P, [0.5, 0.7]])
    y = np.concatenate([Y, [1, 1]])
    cat = np.array([1] * 6 + [2] * 2)
    r = per_class(ece, p, y, cat, bins=5)
    w = (6 * 1.15 / 6 + 2 * 0.4) / 8  # weighted by class sample count
    u = (1.15 / 6 + 0.4) / 2
    assert r.value == pytest.approx(w, abs=1e-15) and r.extra["weighted_mean"] == pytest.approx(w, abs=1e-15)
    assert r.extra["unweighted_mean"] == pytest.approx(u, abs=1e-15)
    assert r.table["category"].tolist() == [1, 2] and r.table["n"].tolist() == [6, 2]
    assert r.name == "ece_per_class" and r.params["bins"] == [5]
    assert per_class(ece, p, y, cat, bins=5, average="unweighted").value == pytest.approx(u, abs=1e-15)
    # a class with an undefined value is left out of both means
    r = per_class(overconfidence, p, y, cat)  # class 2 has no unmatched detection
    assert r.value == pytest.approx(1.45 / 3, abs=1e-15) and r.extra["n_classes_defined"] == 1


def test_per_class_with_features(seeded):
    p, y, f = seeded
    cat = (np.arange(len(p)) % 3).astype(np.int64)
    r = per_class(dece, p, y, cat, features=f[:, :2], bins=[4, 3, 3], sample_threshold=8)
    for k in range(3):
        m = cat == k
        assert r.table["value"][k] == dece(p[m], y[m], f[m, :2], bins=[4, 3, 3], sample_threshold=8).value


def test_suite_equals_individual_functions(seeded):
    p, y, f = seeded
    cat = (np.arange(len(p)) * 7 % 5).astype(np.int64)
    out = confidence_metrics(p, y, f, cat, suite(SuiteBinning(position=3)), n_boot=0)
    assert out["ece"].value == ece(p, y).value
    assert out["ece_q"].value == ece_q(p, y).value
    assert out["mce"].value == mce(p, y).value
    assert out["dece"].value == dece(p, y, f, bins=3).value
    assert out["homogeneity"].value == homogeneity(p, y, f, bins=3).value
    assert out["outliers"].value == outliers(p, y, f, bins=3).value
    assert out["nll"].value == nll(p, y).value
    assert out["brier"].value == brier(p, y).value
    assert out["sharpness"].value == sharpness(p).value
    assert out["overconfidence"].value == overconfidence(p, y).value
    assert out["underconfidence"].value == underconfidence(p, y).value
    # the vectorised per-class path equals the per-class loop, bit for bit
    ref = per_class(dece, p, y, cat, features=f, bins=3)
    assert np.isfinite(ref.value)
    np.testing.assert_array_equal(out["dece_per_class"].table["value"], ref.table["value"])
    assert out["dece_per_class"].value == ref.value
    ref = per_class(outliers, p, y, cat, features=f, bins=3)
    np.testing.assert_array_equal(out["outliers_per_class"].table["value"], ref.table["value"])
    ref = per_class(nll, p, y, cat)
    np.testing.assert_array_equal(out["nll_per_class"].table["value"], ref.table["value"])
    # netcal policy in the suite
    out_n = confidence_metrics(p, y, f, measures=suite(SuiteBinning(policy="netcal")), n_boot=0)
    assert out_n["dece"].value == dece(p, y, f, policy="netcal").value
    assert out_n["nll"].value == nll(p, y).value
    # without features the D-ECE is on confidence alone (5 bins)
    assert confidence_metrics(p, y, n_boot=0)["dece"].value == dece(p, y).value


def test_result_is_jsonable():
    d = dece(DP, DY, DX, bins=[2, 2], sample_threshold=2).to_dict()
    s = json.dumps(d)
    assert '"policy": "drop"' in s and d["extra"]["kept_cells"] == 2


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: ece([0.5, 1.5], [0, 1]), "p"),
        (lambda: ece([0.5, 0.5], [0, 3]), "y"),
        (lambda: dece([0.5], [1], [[0.5, 1.2]]), "features[:, 1]"),
        (lambda: dece([0.5], [1], [[0.5, 0.2]], bins=[5, 5]), "bins"),
        (lambda: dece([0.5], [1], policy="bogus"), "policy"),
        (lambda: mce([0.5], [1], sample_threshold=0), "sample_threshold"),
        (lambda: ece_q([0.5], [1], q=0.5), "q"),
        (lambda: ConfidenceMetric("nope"), "name"),
        (lambda: per_class(ece, [0.5], [1], [0.5]), "category"),
        (lambda: per_class(ece, [0.5], [1], [1], average="median"), "average"),
    ],
)
def test_validation(call, field):
    with pytest.raises(DetcalInputError) as err:
        call()
    assert err.value.field == field


def test_import_does_not_pull_torch():
    code = "import sys, detcal.metrics; assert 'torch' not in sys.modules; assert 'hydra' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_suite_emits_one_sparse_warning():
    rng = np.random.default_rng(4)
    p, f = rng.random(200), rng.random((200, 4))
    y = rng.random(200) < p
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = confidence_metrics(p, y, f, n_boot=0)
    sparse = [w for w in caught if issubclass(w.category, SparseCellsWarning)]
    assert len(sparse) == 1 and "dece" in str(sparse[0].message) and "'ece'" not in str(sparse[0].message)
    assert sparse[0].filename == __file__
    assert out["dece"].extra["sparse_warning"] and not out["ece"].extra["sparse_warning"]
