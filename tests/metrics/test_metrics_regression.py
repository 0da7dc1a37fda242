"""Tests of detcal.metrics.regression: hand-computed goldens, netcal 1.4.0 parity, mergeability."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from detcal.core.errors import DetcalInputError
from detcal.metrics import regression as R
from detcal.metrics.spaces import RegressionSample

Q = np.linspace(0.05, 0.95, 19)


def _data(n: int = 5000, d: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    mu = rng.normal(size=(n, d))
    s = rng.uniform(0.2, 3.0, size=(n, d))
    y = mu + rng.normal(size=(n, d)) * s * rng.uniform(0.6, 1.5, size=(n, d))
    return mu, s, y


# ----------------------------------------------------------------------------- goldens by hand


def test_ence_equal_count_golden():
    # sigma [1,1,2,2], e [1,1,1,3], B=2 -> bin0: RMV=1, RMSE=1 -> 0
    # bin1: RMV=2, RMSE=sqrt((1+9)/2)=sqrt5 -> |2-sqrt5|/2 ; ENCE = mean of both
    r = R.ence(np.zeros(4), [1, 1, 2, 2], [1, -1, 1, 3], bins=2)
    assert r.value == pytest.approx((np.sqrt(5) - 2) / 2 / 2, abs=1e-15)
    np.testing.assert_allclose(r.table["rmv"], [1, 2])
    np.testing.assert_allclose(r.table["rmse"], [1, np.sqrt(5)])
    np.testing.assert_array_equal(r.table["count"], [2, 2])
    assert r.variant == "equal_count" and r.params["bins"] == 2


def test_ence_equal_count_uneven_split():
    # S=5, B=2: first S mod B = 1 group is one larger -> sizes (3, 2) after sorting by sigma
    # sigma sorted [1,1,1,4,4]; e [1,1,1,2,6] -> bin0 0; bin1 RMV 4, RMSE sqrt((4+36)/2)=sqrt20
    r = R.ence(np.zeros(5), [4, 1, 1, 4, 1], [2, 1, -1, 6, 1], bins=2)
    np.testing.assert_array_equal(r.table["count"], [3, 2])
    assert r.value == pytest.approx(abs(4 - np.sqrt(20)) / 4 / 2, abs=1e-15)
    np.testing.assert_allclose(r.table["sigma_lo"], [1, 4])


def test_ence_equal_width_empty_bin_and_single_bin():
    # sigma [1,1,3], B=3 over [1,3]: edges 1, 5/3, 7/3, 3 -> bins {1,1}, {}, {3}
    # e [1,1,6]: bin0 RMV 1 RMSE 1 -> 0; bin2 RMV 3 RMSE 6 -> 1; mean over 2 non-empty bins = 0.5
    r = R.ence(np.zeros(3), [1, 1, 3], [1, 1, 6], bins=3, binning="equal_width")
    assert r.value == pytest.approx(0.5)
    np.testing.assert_array_equal(r.table["count"], [2, 0, 1])
    assert np.isnan(r.table["rmv"][1]) and r.extra["occupied_bins"] == 2
    # single bin: RMV = sqrt((1+1+9)/3), RMSE = sqrt((1+1+36)/3)
    r1 = R.ence(np.zeros(3), [1, 1, 3], [1, 1, 6], bins=1, binning="equal_width")
    rmv, rmse = np.sqrt(11 / 3), np.sqrt(38 / 3)
    assert r1.value == pytest.approx(abs(rmv - rmse) / rmv)


def test_cv_and_lence_golden():
    # sigma [1,2,3]: mean 2, sum (s-2)^2 = 2, /(T-1) = 1 -> Cv = 1/2
    cv = R.coefficient_of_variation(np.zeros(3), [1, 2, 3], np.zeros(3))
    assert cv.value == pytest.approx(0.5)
    # ENCE with B=1: RMV = sqrt(14/3), RMSE = 0 -> ENCE = 1; LENCE = ln|1 + 1/0.5| = ln 3
    lr = R.lence(np.zeros(3), [1, 2, 3], np.zeros(3), bins=1)
    assert lr.value == pytest.approx(np.log(3.0))
    assert lr.extra["ence"] == pytest.approx(1.0) and lr.extra["cv"] == pytest.approx(0.5)
    assert np.isnan(R.coefficient_of_variation([0.0], [1.0], [0.0]).value)


def test_uce_golden():
    # sigma [1,1,2] -> var [1,1,4]; B=2 over [1,4]: edges 1, 2.5, 4 -> {1,1}, {4}
    # e [0,2,1]: bin0 MSE 2, MV 1 -> |1| * 2/3 ; bin1 MSE 1, MV 4 -> 3 * 1/3 ; UCE = 2/3 + 1 = 5/3
    r = R.uce(np.zeros(3), [1, 1, 2], [0, 2, 1], bins=2)
    assert r.value == pytest.approx(5 / 3)
    # single bin: MSE 5/3, MV 2 -> 1/3
    assert R.uce(np.zeros(3), [1, 1, 2], [0, 2, 1], bins=1).value == pytest.approx(1 / 3)


def test_m_qce_golden():
    # z = e/sigma = [0.1, 0.5, 1, 2] -> eps [0.01, 0.25, 1, 4]
    # chi2_1.ppf(0.5) = 0.4549, chi2_1.ppf(0.9) = 2.7055 -> coverage 2/4, 3/4
    # M-QCE = (|0.5 - 0.5| + |0.75 - 0.9|) / 2 = 0.075
    r = R.m_qce(np.zeros(4), [1, 2, 1, 0.5], [0.1, 1.0, 1.0, 1.0], levels=[0.5, 0.9])
    assert r.value == pytest.approx(0.075)
    np.testing.assert_allclose(r.table["coverage"], [0.5, 0.75])


def test_c_qce_golden_policies_and_empty_bin():
    # bins over sigma, equal width over [1, 3], B=3: sigma 1 -> bin0, sigma 3 -> bin2, bin1 empty
    # bin0: 4 samples with eps [0.01, 0.25, 1, 4] -> coverage(0.5)=0.5
    # bin2: 1 sample with eps 0.01 -> coverage(0.5)=1
    sig = np.array([1, 1, 1, 1, 3.0])
    e = np.array([0.1, 0.5, 1.0, 2.0, 0.3])
    # threshold 1 (drop == netcal): 4/5 * |0.5-0.5| + 1/5 * |1-0.5| = 0.1
    r = R.c_qce(np.zeros(5), sig, e, levels=[0.5], bins=3)
    assert r.value == pytest.approx(0.1)
    np.testing.assert_array_equal(r.table["count"], [4, 0, 1])
    assert R.c_qce(np.zeros(5), sig, e, levels=[0.5], bins=3, policy="netcal").value == pytest.approx(0.1)
    # threshold 2: bin2 sparse. drop -> only bin0 (weight 4/4): 0 ; dropped fraction 1/5
    rd = R.c_qce(np.zeros(5), sig, e, levels=[0.5], bins=3, sample_threshold=2, policy="drop")
    assert rd.value == pytest.approx(0.0) and rd.extra["dropped_fraction"] == pytest.approx(0.2)
    # netcal -> bin2 coverage counted 0 with weight 1/5: 1/5 * |0 - 0.5| = 0.1
    rn = R.c_qce(np.zeros(5), sig, e, levels=[0.5], bins=3, sample_threshold=2, policy="netcal")
    assert rn.value == pytest.approx(0.1)
    # single bin: coverage(0.5) = 3/5 (eps 0.01, 0.25, 0.01 <= 0.455) -> |0.6 - 0.5| = 0.1
    assert R.c_qce(np.zeros(5), sig, e, levels=[0.5], bins=1).value == pytest.approx(0.1)


def test_nll_golden_and_joint():
    # (mu, sigma, y) = (0, 1, 0): 0.5 log 2pi ; (0, 2, 2): 0.5 log(8 pi) + 4/8
    r = R.gaussian_nll([0.0, 0.0], [1.0, 2.0], [0.0, 2.0])
    assert r.value == pytest.approx((0.5 * np.log(2 * np.pi) + 0.5 * np.log(8 * np.pi) + 0.5) / 2)
    mu, s, y = _data(50)
    jd = R.gaussian_nll_joint(mu, s, y)
    per = sum(R.gaussian_nll(mu[:, k], s[:, k], y[:, k]).value for k in range(4))
    assert jd.value == pytest.approx(per, rel=1e-12)
    rng = np.random.default_rng(3)
    a = rng.normal(size=(50, 4, 4))
    cov = a @ a.transpose(0, 2, 1) + np.eye(4)
    ref = -np.mean([stats.multivariate_normal(mu[i], cov[i]).logpdf(y[i]) for i in range(50)])
    assert R.gaussian_nll_joint(mu, s, y, cov=cov).value == pytest.approx(ref, rel=1e-12)


def test_picp_mpiw_golden():
    # |e|/sigma = [0.5, 1.5, 2.5, 3]; z_0.95 = 1.959964 -> 2 of 4 inside -> PICP 0.5
    r = R.picp(np.zeros(4), [1, 1, 1, 1], [0.5, -1.5, 2.5, 3.0], tau=0.95)
    assert r.value == pytest.approx(0.5)
    # tau 0.5: z = 0.6745 -> only 0.5 inside -> 0.25
    assert r.table["picp"][np.flatnonzero(np.isclose(r.table["tau"], 0.5))[0]] == pytest.approx(0.25)
    # MPIW = 2 * 1.959964 * mean sigma (mean sigma = 2)
    assert R.mpiw(np.zeros(2), [1, 3], [0, 0], tau=0.95).value == pytest.approx(2 * 1.959963984540054 * 2)


def test_pinball_golden():
    # mu 0, sigma 1, y 1. tau 0.5: q = 0, u = 1 -> 0.5 ; tau 0.9: q = 1.2815516, u = -0.2815516
    # -> max(0.9 u, -0.1 u) = 0.02815516 ; value = mean of both levels
    r = R.pinball_loss([0.0], [1.0], [1.0], levels=[0.5, 0.9])
    np.testing.assert_allclose(r.table["loss"], [0.5, 0.1 * (1.2815515655446004 - 1)], rtol=1e-12)
    assert r.value == pytest.approx((0.5 + 0.1 * 0.2815515655446004) / 2)


def test_crps_matches_numeric_integration():
    # CRPS(F, y) = int (F(x) - 1{x >= y})^2 dx (properscoring's definition), integrated with scipy.quad
    cases = [(0.0, 1.0, 0.3), (1.0, 2.0, -2.5), (-3.0, 0.5, -3.0)]
    ref = []
    for m, s, t in cases:
        lo = integrate.quad(lambda x: stats.norm.cdf(x, m, s) ** 2, -np.inf, t)[0]
        hi = integrate.quad(lambda x: (stats.norm.cdf(x, m, s) - 1) ** 2, t, np.inf)[0]
        ref.append(lo + hi)
    mu, s, y = map(np.array, zip(*cases))
    assert R.crps_gaussian(mu, s, y).value == pytest.approx(np.mean(ref), rel=1e-8)
    # known closed value: N(0,1), y = 0 -> 2 phi(0) - 1/sqrt(pi) = (sqrt2 - 1)/sqrt(pi)
    assert R.crps_gaussian([0.0], [1.0], [0.0]).value == pytest.approx((np.sqrt(2) - 1) / np.sqrt(np.pi))


def test_interval_calibration_error_golden():
    # z = [-1, 0, 1] -> p_t = Phi(z) = [0.1587, 0.5, 0.8413]; levels [0.25, 0.5, 0.75]
    # P_hat = [1/3, 2/3, 2/3] -> CE = (1/12)^2 + (1/6)^2 + (1/12)^2 = 1/24
    lv = [0.25, 0.5, 0.75]
    r = R.interval_calibration_error(np.zeros(3), np.ones(3), [-1.0, 0.0, 1.0], levels=lv)
    assert r.value == pytest.approx(1 / 24)
    assert R.interval_calibration_error(
        np.zeros(3), np.ones(3), [-1.0, 0.0, 1.0], levels=lv, reduction="mean"
    ).value == pytest.approx(1 / 72)
    # interval: |2 p_t - 1| = [0.6827, 0, 0.6827] -> P_hat = [1/3, 1/3, 1] -> (1/12)^2 + (1/6)^2 + (1/4)^2 = 7/72
    ri = R.interval_calibration_error(np.zeros(3), np.ones(3), [-1.0, 0.0, 1.0], levels=lv, kind="interval")
    assert ri.value == pytest.approx(7 / 72)
    assert r.params["m"] == 3


def test_rmse_rmv_and_mwse_and_llfu_golden():
    # e [1, 2], sigma [1, 1]: RMSE sqrt(2.5), RMV 1
    r = R.rmse_rmv_ratio(np.zeros(2), [1.0, 1.0], [1.0, 2.0], rejected=[0.0, 0.5])
    assert r.value == pytest.approx(np.sqrt(2.5))
    # e [1, 2], sigma [1, 2]: variance weights (1*1 + 4*4)/2 = 8.5 ; std weights (1*1 + 4*2)/2 = 4.5
    assert R.mwse(np.zeros(2), [1.0, 2.0], [1.0, 2.0]).value == pytest.approx(8.5)
    assert R.mwse(np.zeros(2), [1.0, 2.0], [1.0, 2.0], weight="std").value == pytest.approx(4.5)
    # R3 curve at rejected 0.5 keeps the least uncertain (e=1, sigma=1): ratio 1
    r3 = R.rmse_rmv_ratio(np.zeros(2), [1.0, 2.0], [1.0, 2.0], rejected=[0.0, 0.5])
    assert r3.table["ratio"][1] == pytest.approx(1.0)
    # LL-FU: sigma 1, e 1 -> 0.5 log 2pi + 0.5 ; sigma 0.1, e 0 -> max(0, 0.5 log(0.02 pi) < 0) = 0
    sc = R.ll_fu_scores([0.0, 0.0], [1.0, 0.1], [1.0, 0.0])
    np.testing.assert_allclose(sc, [0.5 * np.log(2 * np.pi) + 0.5, 0.0])


def test_retention_curve_golden():
    # e = sigma = [1,2,3,4], MAE on the retained least-uncertain samples:
    # rejected 0, .25, .5, .75 -> 2.5, 2, 1.5, 1; trapezoid over retained .25..1 = .25*(1.25+1.75+2.25)
    r = R.retention_curve(np.zeros(4), [1, 2, 3, 4], [1, 2, 3, 4], error="mae", rejected=[0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(r.table["error"], [2.5, 2, 1.5, 1])
    assert r.value == pytest.approx(1.3125)
    # RMSE at full retention: sqrt(30/4)
    r2 = R.retention_curve(np.zeros(4), [1, 2, 3, 4], [1, 2, 3, 4], rejected=[0, 0.5])
    assert r2.table["error"][0] == pytest.approx(np.sqrt(7.5))


def test_retention_curve_shifts_variant_matches_shifts_asserts():
    # The Shifts benchmark's own checks (Malinin et al. 2021, assessment asserts):
    # errors [2, 1], uncertainty [1, 0] -> mean of curve 2/3 ; errors 0..4, u [0,0,2,1,1] -> 0.8
    r = R.retention_curve(np.zeros(2), [1.0, 1.0], [2.0, 1.0], error="mae", uncertainty=[1.0, 0.0], variant="shifts")
    assert r.value == pytest.approx(2 / 3)
    r = R.retention_curve(
        np.zeros(5), np.ones(5), np.arange(5.0), error="mae", uncertainty=[0, 0, 2, 1, 1], variant="shifts"
    )
    assert r.value == pytest.approx(0.8)
    # constant uncertainty -> mean error / 2
    err = np.random.default_rng(1).random(10)
    r = R.retention_curve(np.zeros(10), np.ones(10), err, error="mae", variant="shifts")
    assert r.value == pytest.approx(err.mean() / 2)


def test_retention_ties_are_order_independent():
    rng = np.random.default_rng(2)
    s = rng.integers(1, 4, size=40).astype(float)
    e = rng.normal(size=40)
    perm = rng.permutation(40)
    a = R.retention_curve(np.zeros(40), s, e)
    b = R.retention_curve(np.zeros(40), s[perm], e[perm])
    np.testing.assert_allclose(a.table["error"], b.table["error"], rtol=1e-12)


def test_f1_retention_golden():
    # e [0.1, 0.2, 3, 0.3], sigma [1,2,3,4], threshold 1 on e^2 -> acceptable [1,1,0,1], TP_N = 3
    # k=0: F 0 ; k=1: P 1, R 1/3 -> 0.5 ; k=2: P 1, R 2/3 -> 0.8 ; k=3: P 2/3 R 2/3 -> 2/3 ; k=4: P 3/4 R 1 -> 6/7
    # x = k/5: AUC = 0.2 * (0.25 + 0.65 + (0.8 + 2/3)/2 + (2/3 + 6/7)/2) ; F1@95: k = int(0.95*5) = 4
    r = R.f1_retention(np.zeros(4), [1, 2, 3, 4], [0.1, 0.2, 3.0, 0.3], threshold=1.0)
    np.testing.assert_allclose(r.table["f1"], [0, 0.5, 0.8, 2 / 3, 6 / 7], atol=1e-9)
    assert r.value == pytest.approx(0.2 * (0.25 + 0.65 + (0.8 + 2 / 3) / 2 + (2 / 3 + 6 / 7) / 2), abs=1e-9)
    assert r.extra["f1_at_95"] == pytest.approx(6 / 7, abs=1e-9)


def test_f1_retention_matches_sklearn_based_shifts_recipe():
    # Independent recipe (Shifts): order by -u with sklearn-style cumulative sums, curve reversed,
    # (P, R) = (1, 0) appended, x = arange(N+1)/(N+1) reversed, area by sklearn.metrics.auc.
    from sklearn.metrics import auc

    rng = np.random.default_rng(5)
    n = 301
    s = rng.uniform(0.5, 2, n)
    e = rng.normal(size=n) * s
    acc = (e * e <= 1.0).astype(float)
    order = np.argsort(-s, kind="mergesort")[::-1]
    tps = np.cumsum(acc[order])
    fps = np.cumsum(1 - acc[order])
    prec = np.r_[(tps / (tps + fps))[::-1], 1.0]
    rec = np.r_[(tps / tps[-1])[::-1], 0.0]
    f = 2 * prec * rec / (prec + rec + 1e-10)
    ret = np.arange(n + 1) / (n + 1)
    r = R.f1_retention(np.zeros(n), s, e, threshold=1.0)
    assert r.value == pytest.approx(auc(ret[::-1], f), abs=1e-12)
    assert r.extra["f1_at_95"] == pytest.approx(f[::-1][int(0.95 * (n + 1))], abs=1e-12)


# ----------------------------------------------------------------------------- validation


def test_validation_names_sample_and_field():
    with pytest.raises(DetcalInputError) as ei:
        R.ence([0, 0, 0], [1, 0, 1], [0, 0, 0])
    assert ei.value.field == "sigma" and ei.value.record == "sample 1"
    with pytest.raises(DetcalInputError) as ei:
        R.gaussian_nll([0, np.nan], [1, 1], [0, 0])
    assert ei.value.field == "mu"
    with pytest.raises(DetcalInputError) as ei:
        R.uce([0, 0, 0], [1, 1, 1], [0, 0, -np.inf])
    assert ei.value.field == "y" and ei.value.record == "sample 2"
    with pytest.raises(DetcalInputError) as ei:
        R.uce([0, 0], [np.nan, 1], [0, 0])
    assert ei.value.field == "sigma" and ei.value.record == "sample 0"
    # huge but finite values are valid input (the fast finiteness check must fall back, not reject)
    assert np.isfinite(R.ence([1e308, 1e308], [1.0, 1.0], [1e308, 1e308], bins=1).value)
    with pytest.raises(DetcalInputError):
        R.m_qce([0.0], [1.0], [0.0], levels=[0.9, 0.5])
    with pytest.raises(DetcalInputError):
        R.c_qce([0.0], [1.0], [0.0], policy="bogus")
    bad = np.tile(np.eye(4), (3, 1, 1))
    bad[2] = -np.eye(4)
    with pytest.raises(DetcalInputError) as ei:
        R.gaussian_nll_joint(np.zeros((3, 4)), np.ones((3, 4)), np.zeros((3, 4)), cov=bad)
    assert ei.value.record == "sample 2"


def test_empty_sample_gives_nan():
    z = np.zeros(0)
    for fn in (R.ence, R.uce, R.m_qce, R.c_qce, R.gaussian_nll, R.crps_gaussian, R.picp, R.retention_curve, R.mwse):
        assert np.isnan(fn(z, z, z).value)


# ----------------------------------------------------------------------------- netcal 1.4.0 parity


@pytest.fixture(scope="module")
def netcal_reg():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from netcal.metrics import ENCE, NLL, QCE, UCE
    return ENCE, UCE, QCE, NLL


def test_parity_ence_uce_nll(netcal_reg):
    ENCE, UCE, _, NLL = netcal_reg
    mu, s, y = _data(20000, seed=11)
    ref_ence = ENCE(bins=10).measure((mu, s), y)
    ref_uce = UCE(bins=10).measure((mu, s), y)
    ref_nll = NLL().measure((mu, s), y)
    for k in range(4):
        assert R.ence(mu[:, k], s[:, k], y[:, k], binning="equal_width").value == pytest.approx(ref_ence[k], abs=1e-9)
        assert R.uce(mu[:, k], s[:, k], y[:, k]).value == pytest.approx(ref_uce[k], abs=1e-9)
        assert R.gaussian_nll(mu[:, k], s[:, k], y[:, k]).value == pytest.approx(ref_nll[k], abs=1e-9)
    # 7 bins (netcal with an int list per dimension)
    ref7 = ENCE(bins=7).measure((mu, s), y)
    assert R.ence(mu[:, 0], s[:, 0], y[:, 0], bins=7, binning="equal_width").value == pytest.approx(ref7[0], abs=1e-9)


def test_parity_qce(netcal_reg):
    _, _, QCE, _ = netcal_reg
    mu, s, y = _data(20000, seed=12)
    ref_m = QCE(marginal=True).measure((mu, s), y, q=Q)
    ref_c = QCE(bins=10, marginal=False).measure((mu, s), y, q=Q)
    # a high sample threshold makes sparse bins appear: netcal counts them with frequency 0
    ref_cs = QCE(bins=20, marginal=False, sample_threshold=1000).measure((mu, s), y, q=Q)
    for k in range(4):
        a = (mu[:, k], s[:, k], y[:, k])
        assert R.m_qce(*a, levels=Q).value == pytest.approx(ref_m[k], abs=1e-9)
        assert R.c_qce(*a, levels=Q, bins=10).value == pytest.approx(ref_c[k], abs=1e-9)
        rs = R.c_qce(*a, levels=Q, bins=20, sample_threshold=1000, policy="netcal")
        assert rs.value == pytest.approx(ref_cs[k], abs=1e-9)
        assert rs.extra["kept_bins"] < rs.extra["occupied_bins"]  # the sparse case is really exercised


def test_parity_joint_covariance(netcal_reg):
    _, _, QCE, NLL = netcal_reg
    mu, s, y = _data(8000, seed=13)
    rng = np.random.default_rng(14)
    a = rng.normal(size=(len(mu), 4, 4)) * 0.4
    cov = a @ a.transpose(0, 2, 1) + np.eye(4) * np.square(s)[:, :, None]
    assert R.gaussian_nll_joint(mu, s, y, cov=cov).value == pytest.approx(NLL().measure((mu, cov), y), abs=1e-9)
    assert R.m_qce_joint(mu, s, y, cov=cov, levels=Q).value == pytest.approx(
        QCE(marginal=True).measure((mu, cov), y, q=Q), abs=1e-9
    )
    assert R.c_qce_joint(mu, s, y, cov=cov, levels=Q).value == pytest.approx(
        QCE(bins=10, marginal=False).measure((mu, cov), y, q=Q), abs=1e-9
    )
    # diagonal: joint with sigma equals netcal with diag covariances
    dcov = np.einsum("sk,kl->skl", np.square(s), np.eye(4))
    assert R.m_qce_joint(mu, s, y, levels=Q).value == pytest.approx(
        QCE(marginal=True).measure((mu, dcov), y, q=Q), abs=1e-9
    )


# ----------------------------------------------------------------------------- mergeable statistics and memory


def test_chunked_statistics_merge_to_one_shot():
    mu, s, y = _data(3000, seed=21)
    m, sg, t = mu[:, 0], s[:, 0], y[:, 0]
    rng_s = (float(sg.min()), float(sg.max()))
    rng_v = (rng_s[0] ** 2, rng_s[1] ** 2)
    parts = np.array_split(np.arange(3000), 3)

    def merged(make):
        out = make(parts[0])
        for p in parts[1:]:
            out = out.merge(make(p))
        return out

    st = merged(lambda p: R.sigma_bin_stats(m[p], sg[p], t[p], binning="equal_width", range_=rng_s))
    one = R.ence(m, sg, t, binning="equal_width")
    assert R.ence_from_stats(st).value == pytest.approx(one.value, rel=1e-12)
    np.testing.assert_array_equal(st.count, one.table["count"])
    su = merged(lambda p: R.sigma_bin_stats(m[p], sg[p], t[p], binning="equal_width", over="variance", range_=rng_v))
    assert R.uce_from_stats(su).value == pytest.approx(R.uce(m, sg, t).value, rel=1e-12)
    eps = R.nees(m, sg, t)
    sc = merged(lambda p: R.coverage_stats(eps[p], sg[p], levels=Q, range_=rng_s))
    one_c = R.c_qce(m, sg, t, levels=Q)
    assert R.c_qce_from_stats(sc).value == pytest.approx(one_c.value, rel=1e-12)
    np.testing.assert_array_equal(sc.count, one_c.table["count"])
    with pytest.raises(DetcalInputError):
        R.sigma_bin_stats(m, sg, t).merge(R.sigma_bin_stats(m, sg, t))  # equal_count is one-shot only


def test_qce_memory_is_linear_not_s_by_l():
    n = 200_000
    rng = np.random.default_rng(0)
    m, s = rng.normal(size=n), rng.uniform(0.5, 2, n)
    t = m + rng.normal(size=n) * s
    tracemalloc.start()
    tracemalloc.reset_peak()
    R.c_qce(m, s, t, levels=Q)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # an [S, L] float matrix alone would be 19 * 8 * S bytes; we allow at most 6 S-float arrays
    assert peak < 6 * 8 * n


# ----------------------------------------------------------------------------- wrappers


def test_per_coordinate_and_suite():
    mu, s, y = _data(400, seed=31)
    smp = RegressionSample(mu=mu, sigma=s, y=y, rows=np.arange(400), image_id=np.arange(400) // 4)
    res = R.per_coordinate(R.ence, smp, bins=5)
    assert list(res) == ["tx", "ty", "tw", "th"]
    assert res["tw"].value == pytest.approx(R.ence(mu[:, 2], s[:, 2], y[:, 2], bins=5).value)
    assert res["tw"].params["coordinate"] == "tw" and res["tw"].params["space"] == "delta"
    suite = R.regression_metrics(smp, f1_threshold=1.0)
    for name, per in suite.items():
        for coord, r in per.items():
            assert np.isfinite(r.value), (name, coord)
    assert set(suite["nll"]) == {"tx", "ty", "tw", "th", "joint"}
    assert suite["nll"]["joint"].value == pytest.approx(sum(suite["nll"][c].value for c in smp.coords), rel=1e-12)
