"""Küppers et al. 2020 protocol on the bundled records; D-ECE equal to netcal 1.4.0."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.data import bundled
from detcal.studies import kueppers2020 as k

netcal_metrics = pytest.importorskip("netcal.metrics")


@pytest.mark.parametrize("detector", bundled.DETECTORS)
def test_uncalibrated_dece_equals_netcal(detector):
    """Every IoU and feature set, on netcal's own matched flags, to 1e-9."""
    r = bundled.netcal_records(detector)
    s = k.detector_sample(detector, 0.6)
    for iou in k.IOUS:
        y = r.matched(iou).astype(np.float64)
        for fs in k.FEATURE_SETS:
            f = k.feature_columns(s["features"], fs)
            n_dim = 1 + (0 if f is None else f.shape[1])
            x = s["p"] if f is None else np.column_stack([s["p"], f])
            ref = netcal_metrics.ECE(bins=k.BINS_PER_DIM[n_dim], detection=True, sample_threshold=1).measure(x, y)
            assert k.set_dece(s["p"], y, f) == pytest.approx(float(ref), abs=1e-9)
    # the study's own labels are netcal's flags
    np.testing.assert_array_equal(k.detector_sample(detector, 0.75)["y"], r.matched_075)


def test_netcal_sample_threshold_8():
    r = bundled.netcal_records("rfcn-resnet-101")
    s = k.detector_sample("rfcn-resnet-101", 0.6)
    f = k.feature_columns(s["features"], "conf,cx,cy,w,h")
    ref = netcal_metrics.ECE(bins=3, detection=True, sample_threshold=8).measure(
        np.column_stack([s["p"], f]), r.matched_060.astype(float)
    )
    assert k.set_dece(s["p"], r.matched_060.astype(float), f, sample_threshold=8) == pytest.approx(float(ref), abs=1e-9)


def test_image_splits_are_seeded_and_70_30():
    ids = np.repeat(np.arange(100), 3)
    a, b = k.image_splits(ids, 3, 0.7, seed=1), k.image_splits(ids, 3, 0.7, seed=1)
    assert all((x == y).all() for x, y in zip(a, b))
    assert all(m.sum() == 70 and m.shape == (100,) for m in a)
    assert not (a[0] == a[1]).all()


def test_small_run_table_and_figure(tmp_path):
    res = k.run(
        detectors=["ssd-inception-v2"],
        ious=[0.75],
        feature_sets=["conf", "conf,cx,cy,w,h"],
        calibrators=["platt", "position_logistic", "histogram"],
        n_splits=2,
    )
    table = k.markdown_table(res)
    assert table.count("\n") == 1 + 4  # header rule + uncalibrated + 3 calibrators
    rows = {(r["features"], r["calibrator"]): r for r in res.rows}
    assert ("conf", "position_logistic") not in rows
    # calibration on held-out images lowers the 1-D D-ECE of an uncalibrated SSD
    assert rows[("conf", "platt")]["mean"] < rows[("conf", "uncalibrated")]["mean"]
    assert len(rows[("conf", "platt")]["values"]) == 2
    gain = k.position_gain(res)
    assert len(gain) == 1 and gain[0]["baseline"] == "platt"
    k.plot(res, tmp_path / "k.png")
    assert (tmp_path / "k.png").stat().st_size > 10_000


def test_interim_position_beta_reduces_to_beta_without_position_signal():
    """Features independent of y: the fitted feature terms stay near 0 and p' near beta calibration's."""
    from detcal.calibration import BetaCalibration

    rng = np.random.default_rng(3)
    p = rng.uniform(0.05, 0.95, 20000)
    y = (rng.uniform(size=p.size) < p**1.5).astype(float)
    f = rng.uniform(size=(p.size, 2))
    pb = k.InterimPositionBeta().fit(p, y, f)
    assert np.abs(pb.coef_[3:]).max() < 0.1
    ref = BetaCalibration().fit(p, y).transform(p)
    dev = np.abs(pb.transform(p, f) - ref)
    assert dev.mean() < 0.01 and dev.max() < 0.1  # log features amplify noise only at the image border
    # a real position effect is picked up: y depends on f only
    y2 = (rng.uniform(size=p.size) < np.where(f[:, 0] > 0.5, 0.8, 0.2)).astype(float)
    out = k.InterimPositionBeta().fit(p, y2, f).transform(p, f)
    assert out[f[:, 0] > 0.9].mean() > 0.7 and out[f[:, 0] < 0.1].mean() < 0.3
