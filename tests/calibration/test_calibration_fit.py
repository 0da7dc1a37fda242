"""Calibrators say when fitting failed; isotonic with subnormal gaps; histogram binning defaults.

Each test here fails on the code before fit reports existed (issue 9, item 5).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from detcal.calibration import (
    CONFIDENCE_CALIBRATORS,
    REGRESSION_CALIBRATORS,
    BetaCalibration,
    HistogramBinning,
    IsotonicCalibration,
    KuleshovIsotonic,
    PlattScaling,
    PositionLogistic,
    SigmaHistogramBinning,
    StdScalingSGD,
    TemperatureScaling,
)
from detcal.calibration.isotonic import interp_thresholds, pav
from detcal.calibration.report import CalibrationFitWarning
from detcal.core.errors import DetcalInputError


def _sig(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _ece(p: np.ndarray, y: np.ndarray, bins: int = 15) -> float:
    """Equal-width ECE written out (Guo 2017): sum_b |sum_b y - sum_b p| / N, last bin closed."""
    b = np.minimum((p * bins).astype(int), bins - 1)
    return float(np.abs(np.bincount(b, y, bins) - np.bincount(b, p, bins)).sum() / len(p))


def _fit_quietly(cal, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CalibrationFitWarning)
        return cal.fit(*args)


# --------------------------------------------------------------------------- temperature at its bound


def test_temperature_at_bound_is_reported_and_warned() -> None:
    # Scores that rank the wrong way round: P(y=1 | p) = 1 - p. The NLL keeps falling as T -> inf
    # (every score -> 0.5; T < 0 is not allowed), so L-BFGS-B stops on the artificial bound T = 1e4.
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, 4000)
    y = (rng.uniform(size=p.size) < 1.0 - p).astype(float)
    with pytest.warns(CalibrationFitWarning, match=r"temperature = 10000 stopped at its search bound"):
        cal = TemperatureScaling().fit(p, y)
    rep = cal.fit_report_
    assert rep["ok"] is False
    assert [d["parameter"] for d in rep["at_bound"]] == ["temperature"]
    assert rep["at_bound"][0]["bound"] == pytest.approx(1e4)
    assert cal.temperature_ == pytest.approx(1e4)
    # the squeeze the issue saw (0.4999-0.5007) is named in the notes
    assert any("squeezes" in n for n in rep["notes"])
    # recorded where the apps read it: describe()["fitted"] -> metrics.json, and JSON-ready
    assert json.loads(json.dumps(cal.describe()))["fitted"]["fit_report_"]["ok"] is False


@pytest.mark.parametrize("t0", [0.5, 2.0])
def test_temperature_interior_optimum_is_ok_and_silent(t0: float) -> None:
    rng = np.random.default_rng(1)
    z = rng.normal(0.0, 2.0, 20_000)
    y = (rng.uniform(size=z.size) < _sig(z)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationFitWarning)
        cal = TemperatureScaling().fit(_sig(t0 * z), y)
    assert cal.fit_report_["ok"] and cal.fit_report_["converged"]
    assert cal.fit_report_["at_bound"] == [] and cal.fit_report_["notes"] == []
    assert cal.temperature_ == pytest.approx(t0, rel=0.1)


def test_temperature_lower_bound_reported() -> None:
    # max_log_temperature = ln 2: the planted T = 0.25 lies below the box [1/2, 2]
    rng = np.random.default_rng(2)
    z = rng.normal(0.0, 1.0, 5000)
    y = (rng.uniform(size=z.size) < _sig(z)).astype(float)
    with pytest.warns(CalibrationFitWarning):
        cal = TemperatureScaling(max_log_temperature=float(np.log(2.0))).fit(_sig(0.25 * z), y)
    assert cal.fit_report_["at_bound"][0]["bound"] == pytest.approx(0.5)


# --------------------------------------------------------------------------- logistic fits


def test_platt_on_separable_data_is_not_converged() -> None:
    # every positive scores above every negative: the MLE slope is +inf
    with pytest.warns(CalibrationFitWarning, match="separate the labels"):
        cal = PlattScaling().fit([0.1, 0.2, 0.3, 0.7, 0.8, 0.9], [0, 0, 0, 1, 1, 1])
    assert cal.fit_report_["converged"] is False and cal.fit_report_["ok"] is False


def test_platt_and_position_logistic_ok_on_overlapping_labels() -> None:
    rng = np.random.default_rng(3)
    z = rng.normal(0.0, 1.5, 3000)
    f = rng.uniform(size=(3000, 4))
    y = (rng.uniform(size=z.size) < _sig(z)).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationFitWarning)
        platt = PlattScaling().fit(_sig(2 * z), y)
        pos = PositionLogistic().fit(_sig(2 * z), y, f)
    for cal in (platt, pos):
        assert cal.fit_report_["ok"] and cal.fit_report_["method"] == "Newton"
        assert cal.fit_report_["n_iter"] >= 1


def test_beta_model_constraint_is_reported_but_not_a_failure() -> None:
    # uninformative scores: the unconstrained optimum has a < 0; a >= 0 is the model's constraint
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, 2000)
    y = (rng.uniform(size=p.size) < 1 - p).astype(float)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationFitWarning)
        cal = BetaCalibration().fit(p, y)
    rep = cal.fit_report_
    assert rep["ok"] and rep["at_bound"] == []
    assert {d["parameter"] for d in rep["active_constraints"]} & {"a", "b"}


# --------------------------------------------------------------------------- regression calibrators


def test_std_scaling_sgd_not_converged_is_reported() -> None:
    rng = np.random.default_rng(4)
    mu = np.zeros(500)
    y = rng.normal(0.0, 3.0, 500)
    with pytest.warns(CalibrationFitWarning, match="max_steps=5 reached"):
        cal = StdScalingSGD(max_steps=5).fit(mu, np.ones(500), y)
    assert cal.fit_report_["converged"] is False and cal.fit_report_["n_iter"] == 5


def test_sigma_histogram_zero_rmse_bin_is_at_bound() -> None:
    # bin of the 5 smallest sigmas has zero residuals -> factor floored at 1e-12
    sigma = np.arange(1.0, 11.0)
    y = np.concatenate([np.zeros(5), [1.0, -2.0, 3.0, -1.0, 2.0]])
    with pytest.warns(CalibrationFitWarning, match="stopped at its search bound"):
        cal = SigmaHistogramBinning(bins=2).fit(np.zeros(10), sigma, y)
    assert cal.fit_report_["at_bound"][0]["parameter"] == "factor[coord 0][bin 0]"


@pytest.mark.parametrize("name", sorted(CONFIDENCE_CALIBRATORS) + sorted(REGRESSION_CALIBRATORS))
def test_every_calibrator_has_a_json_fit_report(name: str) -> None:
    rng = np.random.default_rng(5)
    if name in CONFIDENCE_CALIBRATORS:
        z = rng.normal(0, 1.5, 600)
        y = (rng.uniform(size=600) < _sig(z)).astype(float)
        cal = _fit_quietly(CONFIDENCE_CALIBRATORS[name](), _sig(1.7 * z), y, rng.uniform(size=(600, 4)))
    else:
        mu = rng.normal(size=(600, 2))
        cal = _fit_quietly(REGRESSION_CALIBRATORS[name](), mu, np.ones((600, 2)), mu + rng.normal(0, 2, (600, 2)))
    rep = json.loads(json.dumps(cal.fit_report_))
    assert set(rep) == {"ok", "converged", "method", "n_iter", "message", "at_bound", "active_constraints", "notes"}
    assert rep["ok"] is (rep["converged"] and not rep["at_bound"])


def test_refit_replaces_the_report() -> None:
    rng = np.random.default_rng(0)
    p = rng.uniform(0.01, 0.99, 2000)
    with pytest.warns(CalibrationFitWarning):
        cal = TemperatureScaling().fit(p, (rng.uniform(size=p.size) < 1 - p).astype(float))
    cal.fit(p, (rng.uniform(size=p.size) < p).astype(float))
    assert cal.fit_report_["ok"]


# --------------------------------------------------------------------------- isotonic


def test_isotonic_subnormal_gap_stays_finite() -> None:
    # the example: np.interp's slope (1 - 0) / (4.4e-314 - 4.1e-320) overflows to inf, and
    # 2.1e-319 came back as 1.0. The value lies 3.8e-6 of the way along that segment.
    cal = IsotonicCalibration().fit([0, 4.1e-320, 4.4e-314, 1], [0, 0, 1, 1])
    out = cal.transform([2.1e-319])
    t = (2.1e-319 - 4.1e-320) / (4.4e-314 - 4.1e-320)
    assert 3e-6 < t < 5e-6
    np.testing.assert_allclose(out, [t], rtol=1e-3)
    # thresholds themselves and the outside are exact
    np.testing.assert_array_equal(cal.transform([0.0, 4.1e-320, 4.4e-314, 1.0, 0.5]), [0, 0, 1, 1, 1])


def test_interp_thresholds_equals_numpy_on_normal_gaps() -> None:
    rng = np.random.default_rng(6)
    xt = np.sort(rng.uniform(size=50))
    yt = np.sort(rng.uniform(size=50))
    x = rng.uniform(-0.1, 1.1, 10_000)
    np.testing.assert_array_equal(interp_thresholds(x, xt, yt), np.interp(x, xt, yt))


def test_pav_is_scipy_isotonic_regression() -> None:
    from scipy.optimize import isotonic_regression

    rng = np.random.default_rng(7)
    y, w = rng.normal(size=300), rng.uniform(0.1, 2, 300)
    np.testing.assert_array_equal(pav(y, w), isotonic_regression(y, weights=w).x)


def test_kuleshov_cdf_finite_with_subnormal_thresholds() -> None:
    cal = KuleshovIsotonic().fit(np.zeros(4), np.ones(4), np.array([-1.0, -0.3, 0.2, 1.5]))
    g = cal.cdf(np.linspace(-5, 5, 11), np.zeros(11), np.ones(11))
    assert np.all(np.isfinite(g)) and np.all(np.diff(g) >= 0)


# --------------------------------------------------------------------------- histogram binning defaults


def _position_miscalibrated(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores over-confident by temperature 1.5 and a little more near the image border (features uniform)."""
    rng = np.random.default_rng(seed)
    f = rng.uniform(size=(n, 4))
    z = rng.normal(0.5, 1.2, n)
    border = np.abs(f[:, 0] - 0.5)
    y = (rng.uniform(size=n) < _sig(z - 0.6 * border)).astype(float)
    return _sig(1.5 * z), y, f


def test_histogram_default_does_not_worsen_heldout_ece_with_features() -> None:
    # ~5000 calibration samples over the 5^5 grid of (p, cx, cy, w, h): with one sample per cell
    # allowed (the old default) the held-out ECE rose; the default now lowers it.
    p_c, y_c, f_c = _position_miscalibrated(5000, 10)
    p_e, y_e, f_e = _position_miscalibrated(5000, 11)
    before = _ece(p_e, y_e)
    cal = HistogramBinning().fit(p_c, y_c, f_c)
    after = _ece(cal.transform(p_e, f_e), y_e)
    assert after < before
    assert cal.min_bin_samples_ == 1 and cal.min_cell_samples_ == 30
    with pytest.warns(CalibrationFitWarning, match="hold .* calibration samples on average"):
        sparse = HistogramBinning(min_samples=1).fit(p_c, y_c, f_c)
    assert _ece(sparse.transform(p_e, f_e), y_e) > after


def test_histogram_min_samples_validation() -> None:
    for bad in ("many", 0, 1.5):
        with pytest.raises(DetcalInputError, match="min_samples"):
            HistogramBinning(min_samples=bad).fit([0.2, 0.8], [0, 1])


def test_histogram_default_on_default_synthetic_calibration_run(tmp_path) -> None:
    # the run: detcal-calibrate calibrator=histogram on the default synthetic set
    # (ECE 0.040 -> 0.086 with one sample per grid cell allowed).
    import detcal
    from detcal.pipeline.calibration import calibrate
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec

    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    res = calibrate(detcal.DataSpec(), spec, confidence=HistogramBinning(), regression=None, workdir=str(tmp_path))
    ev = res.record["evaluation"]["confidence"]
    assert ev["after"]["ece"].value < ev["before"]["ece"].value
    assert ev["after"]["dece"].value < ev["before"]["dece"].value
    assert res.record["calibrators"]["confidence"]["fit_report"]["ok"]


def test_temperature_at_bound_reaches_the_calibrate_record(tmp_path) -> None:
    # scores turned upside down (1 - p): the detector ranks its matches last, temperature scaling runs
    # to T = 1e4; detcal.calibrate must record it (metrics.json: calibrators.confidence.fit_report).
    import dataclasses

    import detcal
    from detcal.pipeline.calibration import calibrate
    from detcal.pipeline.evaluation import as_loaded
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec

    data = as_loaded(detcal.DataSpec(n_images=300), workdir=str(tmp_path))
    dets = dataclasses.replace(data.detections, score=1.0 - data.detections.score)
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    with pytest.warns(CalibrationFitWarning, match="temperature"):
        res = calibrate(
            (data.dataset, dets), spec, confidence="temperature", regression=None, workdir=str(tmp_path / "run")
        )
    rep = res.record["calibrators"]["confidence"]["fit_report"]
    assert rep["ok"] is False and rep["at_bound"][0]["parameter"] == "temperature"
    assert json.loads(json.dumps(rep)) == rep
