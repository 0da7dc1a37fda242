"""The fast paths of every binned metric equal their plain definitions in detcal.metrics.reference.

Random and adversarial inputs: ties, scores on bin edges (decimals k/B), 0 and 1, empty and sparse cells
under each policy and edge rule, single samples, all-equal sigma, tie groups straddling equal-count edges.
Agreement: 1e-12 relative (confidence metrics: per-cell sums are exact in both, so the cell means are the
same floats); box-uncertainty metrics also 1e-14 absolute, for differences that cancel (RMV(b) = RMSE(b)),
since their fast paths add floats in input order while the reference uses exactly rounded sums.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from detcal.metrics import confidence as C, reference as R, regression as G
from detcal.metrics.confidence_suite import dece_by_class

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(fast: float, ref: float, *, atol: float = 0.0) -> None:
    """Equal to 1e-12 relative (and ``atol``), NaN equal to NaN, inf to inf."""
    if math.isnan(ref) or math.isnan(fast):
        assert math.isnan(ref) and math.isnan(fast), (fast, ref)
        return
    assert fast == pytest.approx(ref, rel=1e-12, abs=atol), (fast, ref)


# ----------------------------------------------------------------------------- inputs


def _scores(seed: int, n: int, bins: int, kind: str) -> np.ndarray:
    """Scores in [0, 1]: continuous, on the bin edges k/B (and their decimal neighbours), or 0/1 heavy."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        return rng.random(n)
    if kind == "edges":
        k = rng.integers(0, bins + 1, n)
        return np.round(k / bins, 3)  # decimal edges such as 0.6 (not exactly 3/5 in binary)
    if kind == "ends":
        return rng.choice([0.0, 1.0, 0.5, rng.random()], n)
    return rng.choice(rng.random(3), n)  # few distinct values: ties, sparse cells


SCORE_KINDS = st.sampled_from(["uniform", "edges", "ends", "ties"])


def _confidence_sample(seed: int, n: int, bins: int, kind: str, n_feat: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed + 1)
    p = _scores(seed, n, bins, kind)
    y = rng.random(n) < p if kind == "uniform" else rng.random(n) < 0.5
    f = np.stack([_scores(seed + 2 + j, n, bins, kind) for j in range(n_feat)], axis=1) if n_feat else None
    return p, y, f


# ----------------------------------------------------------------------------- confidence metrics


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 60),
    bins=st.integers(1, 7),
    kind=SCORE_KINDS,
    threshold=st.integers(1, 6),
    policy=st.sampled_from(["drop", "netcal"]),
    edges=st.sampled_from([None, "floor", "guo", "netcal"]),
)
def test_ece_ece_q_mce_equal_reference(seed, n, bins, kind, threshold, policy, edges):
    p, y, _ = _confidence_sample(seed, n, bins, kind, 0)
    kw = dict(sample_threshold=threshold, policy=policy, edges=edges)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", C.SparseCellsWarning)
        _same(C.ece(p, y, bins, **kw).value, R.ece(p, y, bins, **kw))
        for q in (1.0, 2.0, 3.5):
            _same(C.ece_q(p, y, q, bins, **kw).value, R.ece_q(p, y, q, bins, **kw))
        _same(
            C.mce(p, y, bins, threshold, policy=policy, edges=edges).value,
            R.mce(p, y, bins, threshold, policy=policy, edges=edges),
        )


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 80),
    bins=st.integers(1, 4),
    kind=SCORE_KINDS,
    n_feat=st.integers(0, 3),
    threshold=st.integers(1, 10),
    policy=st.sampled_from(["drop", "netcal"]),
    edges=st.sampled_from([None, "floor", "guo", "netcal"]),
)
def test_dece_equals_reference(seed, n, bins, kind, n_feat, threshold, policy, edges):
    p, y, f = _confidence_sample(seed, n, bins, kind, n_feat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", C.SparseCellsWarning)
        fast = C.dece(p, y, f, bins, threshold, policy, edges=edges).value
    _same(fast, R.dece(p, y, f, bins, threshold, policy, edges=edges))


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(0, 80),
    bins=st.integers(1, 4),
    kind=SCORE_KINDS,
    n_feat=st.integers(0, 2),
    threshold=st.integers(1, 10),
    spread=st.sampled_from(["std", "variance"]),
)
def test_homogeneity_and_outliers_equal_reference(seed, n, bins, kind, n_feat, threshold, spread):
    p, y, f = _confidence_sample(seed, n, bins, kind, n_feat)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", C.SparseCellsWarning)
        h = C.homogeneity(p, y, f, bins, threshold, spread=spread).value
        o = C.outliers(p, y, f, bins, threshold).value
    _same(h, R.homogeneity(p, y, f, bins, threshold, spread=spread), atol=1e-15)
    _same(o, R.outliers(p, y, f, bins, threshold))


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 80),
    kind=SCORE_KINDS,
    n_classes=st.integers(1, 4),
    threshold=st.integers(1, 6),
    policy=st.sampled_from(["drop", "netcal"]),
    mode=st.sampled_from(["dimension", "weighted_mean"]),
)
def test_dece_by_class_equals_reference(seed, n, kind, n_classes, threshold, policy, mode):
    p, y, f = _confidence_sample(seed, n, 3, kind, 2)
    cat = np.random.default_rng(seed + 9).integers(0, n_classes, n) * 7  # sparse class ids
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", C.SparseCellsWarning)
        fast = dece_by_class(p, y, f, cat, 3, threshold, policy, mode=mode).value
    _same(fast, R.dece_by_class(p, y, f, cat, 3, threshold, policy, mode=mode))


def test_confidence_hand_example():
    """The reference itself against a hand calculation: B = 2, cells [0, .5) and [.5, 1]."""
    p = np.array([0.2, 0.4, 0.5, 0.9])
    y = np.array([0, 1, 1, 1])
    # cell 0: N 2, prec .5, conf .3, gap .2; cell 1: N 2, prec 1, conf .7, gap .3
    assert R.ece(p, y, 2) == pytest.approx(0.5 * 0.2 + 0.5 * 0.3)
    assert R.ece_q(p, y, 2, 2) == pytest.approx(math.sqrt(0.5 * 0.04 + 0.5 * 0.09))
    assert R.mce(p, y, 2) == pytest.approx(0.3)
    assert R.homogeneity(p, y, None, 2, 1) == pytest.approx(0.05)  # mean .25, deviations +-.05
    # guo: 0.5 lands in (0, .5]: cell 0 = {.2, .4, .5} prec 2/3 conf 11/30; cell 1 = {.9} gap .1
    assert R.ece(p, y, 2, edges="guo") == pytest.approx(0.75 * abs(2 / 3 - 11 / 30) + 0.25 * 0.1)
    # threshold 3 under drop: no cell kept; under netcal: gap 0 everywhere
    assert math.isnan(R.ece(p, y, 2, sample_threshold=3))
    assert R.ece(p, y, 2, sample_threshold=3, policy="netcal") == 0.0


# ----------------------------------------------------------------------------- box-uncertainty metrics


def _regression_sample(seed: int, n: int, kind: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """mu, sigma > 0, y; kinds: continuous, tied sigma (clamped log-variances), all equal, calibrated e = sigma."""
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=n)
    if kind == "continuous":
        sigma = rng.lognormal(size=n)
    elif kind == "ties":
        sigma = np.exp(0.5 * np.clip(rng.normal(0, 4, n).round(), -3, 3))
    elif kind == "equal":
        sigma = np.full(n, 0.1)
    else:  # "calibrated": |e| = sigma exactly, RMV(b) = RMSE(b)
        sigma = rng.choice([0.5, 1.0, 2.0], n)
        return mu, sigma, mu + sigma * rng.choice([-1.0, 1.0], n)
    return mu, sigma, mu + sigma * rng.normal(size=n)


REG_KINDS = st.sampled_from(["continuous", "ties", "equal", "calibrated"])
REG_ATOL = 1e-14


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 90),
    kind=REG_KINDS,
    bins=st.integers(1, 12),
    binning=st.sampled_from(["equal_count", "equal_width"]),
)
def test_ence_lence_uce_equal_reference(seed, n, kind, bins, binning):
    mu, sigma, y = _regression_sample(seed, n, kind)
    _same(
        G.ence(mu, sigma, y, bins=bins, binning=binning).value,
        R.ence(mu, sigma, y, bins=bins, binning=binning),
        atol=REG_ATOL,
    )
    _same(
        G.uce(mu, sigma, y, bins=bins, binning=binning).value,
        R.uce(mu, sigma, y, bins=bins, binning=binning),
        atol=REG_ATOL,
    )
    fast_l = G.lence(mu, sigma, y, bins=bins, binning=binning).value
    ref_l = R.lence(mu, sigma, y, bins=bins, binning=binning)
    if math.isinf(ref_l):
        assert fast_l == ref_l
    else:
        _same(fast_l, ref_l, atol=1e-9)  # ln|ENCE + 1/C_v|: C_v ~ 1e-16 relative apart (np.std vs np.std)


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 90),
    kind=REG_KINDS,
    bins=st.integers(1, 12),
    binning=st.sampled_from(["equal_count", "equal_width"]),
    threshold=st.integers(1, 12),
    policy=st.sampled_from(["drop", "netcal"]),
)
def test_m_qce_and_c_qce_equal_reference(seed, n, kind, bins, binning, threshold, policy):
    mu, sigma, y = _regression_sample(seed, n, kind)
    _same(G.m_qce(mu, sigma, y).value, R.m_qce(mu, sigma, y))
    kw = dict(bins=bins, binning=binning, sample_threshold=threshold, policy=policy)
    _same(G.c_qce(mu, sigma, y, **kw).value, R.c_qce(mu, sigma, y, **kw), atol=REG_ATOL)


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 40),
    k=st.integers(1, 4),
    full=st.booleans(),
    binning=st.sampled_from(["equal_count", "equal_width"]),
    policy=st.sampled_from(["drop", "netcal"]),
)
def test_joint_qce_equals_reference(seed, n, k, full, binning, policy):
    rng = np.random.default_rng(seed)
    mu, y = rng.normal(size=(n, k)), rng.normal(size=(n, k))
    sigma = np.exp(rng.normal(size=(n, k)).round())  # ties in sigma_G
    cov = None
    if full:
        a = rng.normal(size=(n, k, k))
        cov = a @ np.swapaxes(a, 1, 2) + np.eye(k)[None] * 0.5
    eps, sigma_g = R.joint_nees(mu, sigma, y, cov)
    d = k
    _same(G.m_qce_joint(mu, sigma, y, cov=cov).value, R.qce_from_nees(eps, None, d, R.QUANTILE_LEVELS))
    fast = G.c_qce_joint(mu, sigma, y, cov=cov, bins=4, binning=binning, sample_threshold=3, policy=policy).value
    ref = R.qce_from_nees(
        eps, sigma_g, d, R.QUANTILE_LEVELS, bins=4, binning=binning, sample_threshold=3, policy=policy
    )
    _same(fast, ref, atol=REG_ATOL)


@SETTINGS
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 90),
    kind=REG_KINDS,
    m=st.integers(2, 120),
    reduction=st.sampled_from(["sum", "mean"]),
    interval_kind=st.sampled_from(["one_sided", "interval"]),
)
def test_interval_calibration_error_equals_reference(seed, n, kind, m, reduction, interval_kind):
    mu, sigma, y = _regression_sample(seed, n, kind)
    fast = G.interval_calibration_error(mu, sigma, y, m=m, reduction=reduction, kind=interval_kind).value
    _same(fast, R.interval_calibration_error(mu, sigma, y, m=m, reduction=reduction, kind=interval_kind))


def test_reference_ence_hand_example():
    """Two equal-count bins by hand; the tie group straddling the edge shares its mean e^2."""
    sigma = np.array([1.0, 1.0, 1.0, 2.0])
    e = np.array([0.0, 2.0, 1.0, 2.0])
    # sorted: sigma 1,1,1 | tied group e^2 mean (0 + 4 + 1)/3 = 5/3; bins of 2: [1, 1] and [1, 2]
    rmse0, rmse1 = math.sqrt(5 / 3), math.sqrt((5 / 3 + 4) / 2)
    rmv0, rmv1 = 1.0, math.sqrt((1 + 4) / 2)
    want = (abs(rmv0 - rmse0) / rmv0 + abs(rmv1 - rmse1) / rmv1) / 2
    assert R.ence(np.zeros(4), sigma, e, bins=2) == pytest.approx(want, rel=1e-15)
    assert G.ence(np.zeros(4), sigma, e, bins=2).value == pytest.approx(want, rel=1e-12)


def test_reference_qce_hand_example():
    """M-QCE at one level: tau = 0.5, chi2_1 median 0.45494, 3 of 4 covered -> |0.75 - 0.5|."""
    mu = np.zeros(4)
    sigma = np.ones(4)
    y = np.array([0.1, 0.2, 0.3, 2.0])
    assert R.m_qce(mu, sigma, y, levels=np.array([0.5])) == pytest.approx(0.25)
    assert G.m_qce(mu, sigma, y, levels=np.array([0.5])).value == pytest.approx(0.25)


@pytest.mark.parametrize("name", ["ece", "ece_q", "mce", "dece", "homogeneity", "outliers"])
def test_fast_confidence_paths_name_their_reference(name):
    assert f"reference.{name}" in (getattr(C, name).__doc__ or "")


@pytest.mark.parametrize(
    "name", ["ence", "lence", "uce", "m_qce", "c_qce", "m_qce_joint", "c_qce_joint", "interval_calibration_error"]
)
def test_fast_regression_paths_name_their_reference(name):
    assert "detcal.metrics.reference" in (getattr(G, name).__doc__ or "")


# ----------------------------------------------------------------------------- LaECE, LaACE, pooled D-ECE


@pytest.fixture(scope="module")
def outcomes():
    """Matched detections of a small synthetic set (TPs, FPs, several classes)."""
    from detcal.data.synthetic import generate_scenes, simulate_detector
    from detcal.metrics.lrp import detection_outcomes

    ds, _ = generate_scenes(25, seed=3, render=False)
    dets = simulate_detector(ds, seed=3, fp_per_image=3.0)
    return detection_outcomes(dets, ds.gt, 0.1)


def _outcome_sample(o, score):
    """(score, IoU target, class) of the detections LaECE reads: valid rows of a class with ground truth."""
    ci = o.class_index()
    rows = np.flatnonzero(o.valid & (ci >= 0))
    return score[rows], np.where(o.tp[rows], o.iou[rows], 0.0), ci[rows]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=SCORE_KINDS,
    bins=st.integers(1, 30),
    closed=st.sampled_from(["right", "left"]),
    variant=st.sampled_from(["kuzucu2024", "fiveai"]),
)
def test_laece_laace_dece_equal_reference(outcomes, seed, kind, bins, closed, variant):
    from detcal.metrics import laece as L

    score = _scores(seed, len(outcomes.score), bins, kind)
    s, t, c = _outcome_sample(outcomes, score)
    _same(
        L.laece_from_outcomes(outcomes, score, bins=bins, closed=closed, variant=variant).value,
        R.laece(s, t, c, bins=bins, closed=closed, variant=variant),
        atol=1e-15,
    )
    if variant == "kuzucu2024":  # fiveai's LaACE reads the crowd-matched detections too (a different sample)
        for b in (None, 1, bins):
            _same(L.laace_from_outcomes(outcomes, score, bins=b).value, R.laace(s, t, c, bins=b), atol=1e-15)
    y = outcomes.tp[np.flatnonzero(outcomes.valid & (outcomes.class_index() >= 0))]
    _same(
        L.dece_from_outcomes(outcomes, score, bins=bins, closed=closed).value,
        R.dece_pooled(s, y, bins=bins, closed=closed),
        atol=1e-15,
    )


def test_reference_laece_hand_example():
    """One class, B = 2 right-closed: 0.5 lands in [0, 0.5]; bins {0.2, 0.5} and {0.9}."""
    s = np.array([0.2, 0.5, 0.9])
    t = np.array([0.6, 0.0, 0.8])  # IoU targets (0: a false positive)
    want = 2 / 3 * abs(0.35 - 0.3) + 1 / 3 * abs(0.9 - 0.8)
    assert R.laece(s, t, np.zeros(3, int), bins=2) == pytest.approx(want)
    assert R.laace(s, t, np.zeros(3, int)) == pytest.approx((0.4 + 0.5 + 0.1) / 3)


@pytest.mark.parametrize("name", ["laece_from_outcomes", "laace_from_outcomes", "dece_from_outcomes"])
def test_fast_localisation_paths_name_their_reference(name):
    from detcal.metrics import laece as L

    assert "detcal.metrics.reference" in (getattr(L, name).__doc__ or "")
