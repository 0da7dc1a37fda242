"""detcal.pipeline.compare and detcal.reports.per_class on the bundled 79-image set."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.errors import DetcalInputError
from detcal.data import bundled
from detcal.metrics.accuracy import coco_ap
from detcal.metrics.confidence import ece
from detcal.pipeline import compare as C
from detcal.reports.per_class import most_frequent, per_class_table, reliability_curve

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(scope="module")
def mini():
    ds = bundled.load_dataset("coco_mini79")
    runs = {d: bundled.load_detections("coco_mini79", d) for d in bundled.DETECTORS}
    return ds, runs


def test_replicate_weights_of_ones_give_point_values(mini):
    ds, runs = mini
    s = C.calibration_sample(runs["rfcn-resnet-101"], ds, 0.5)
    rep = C.replicate_metrics(s, np.ones((1, len(ds.images))))
    point = C.point_metrics(s)
    for k in C.CAL_METRICS:
        assert rep[k][0] == pytest.approx(point[k], abs=1e-12), k


def test_replicate_equals_metrics_on_explicitly_resampled_rows(mini):
    """Weights W [R, I] = the metric on the rows of the drawn images, repeated as drawn."""
    ds, runs = mini
    s = C.calibration_sample(runs["ssd-resnet-50-v1"], ds, 0.5)
    W = C.image_weights(len(ds.images), 3, seed=7)
    rep = C.replicate_metrics(s, W)
    for r in range(3):
        rows = np.repeat(np.arange(len(s["p"])), W[r, s["image"]].astype(int))
        sub = {k: v[rows] for k, v in s.items()}
        point = C.point_metrics(sub)
        for k in C.CAL_METRICS:
            assert rep[k][r] == pytest.approx(point[k], abs=1e-12), (r, k)


def test_image_weights_draw_each_replicate_I_images():
    W = C.image_weights(50, 4, seed=1)
    assert W.shape == (4, 50) and (W.sum(1) == 50).all()
    np.testing.assert_array_equal(W, C.image_weights(50, 4, seed=1))


def test_compare_on_four_detectors(mini, tmp_path):
    ds, runs = mini
    area = bundled.gt_area("coco_mini79")
    c = C.compare(runs, ds, baseline="rfcn-resnet-101", n_boot=50, gt_area=area, top_n_classes=5)
    assert [r["detector"] for r in c.table] == list(bundled.DETECTORS)
    for r in c.table:
        acc = coco_ap(runs[r["detector"]], ds, gt_area=area)
        assert r["AP"] == acc["AP"].value and r["AP_small"] == acc["AP_small"].value
        for k in C.CAL_METRICS:
            lo, hi = r[f"{k}_ci"]
            assert lo <= hi and np.isfinite(lo)
        # the per-size rows split the calibration sample
        assert sum(x["n"] for x in c.per_size if x["detector"] == r["detector"]) == r["n"]
        rows = c.per_class[r["detector"]]
        assert len(rows) == 5 and all(a["n"] >= b["n"] for a, b in zip(rows, rows[1:]))
    # paired differences: baseline excluded, point difference = difference of points
    d = {(x["detector"], x["metric"]): x for x in c.diffs}
    assert ("rfcn-resnet-101", "ece") not in d
    t = {r["detector"]: r for r in c.table}
    assert d[("ssd-inception-v2", "brier")]["diff"] == pytest.approx(
        t["ssd-inception-v2"]["brier"] - t["rfcn-resnet-101"]["brier"]
    )
    md = C.markdown(c)
    assert "## Difference from rfcn-resnet-101" in md and "## Per class: ssd-resnet-50-v1" in md
    C.plot(c, tmp_path / "rel.png")
    C.plot_per_class(c, ds.categories, top_n=4, path=tmp_path / "cls.png")
    assert (tmp_path / "rel.png").stat().st_size > 5000 and (tmp_path / "cls.png").stat().st_size > 5000


def test_detector_against_itself_has_zero_paired_difference(mini):
    ds, runs = mini
    c = C.compare({"a": runs["ssd-inception-v2"], "b": runs["ssd-inception-v2"]}, ds, n_boot=30)
    for x in c.diffs:
        assert x["diff"] == 0
        if np.isfinite(x["ci"][0]):
            assert x["ci"] == (0.0, 0.0)


def test_compare_errors(mini):
    ds, runs = mini
    with pytest.raises(DetcalInputError, match="baseline"):
        C.compare(runs, ds, baseline="yolo", n_boot=5)
    with pytest.raises(DetcalInputError, match="matching"):
        C.compare(runs, ds, matching="hungarian", n_boot=5)
    with pytest.raises(DetcalInputError, match="no detectors"):
        C.compare({}, ds)


def test_netcal_matching_in_compare(mini):
    ds, runs = mini
    s = C.calibration_sample(runs["rfcn-resnet-101"], ds, 0.6, "netcal_example")
    assert len(s["p"]) == len(runs["rfcn-resnet-101"])  # nothing ignored, nothing dropped


def test_per_class_table_by_hand():
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.5])
    y = np.array([1, 0, 1, 1, 0])
    cat = np.array([3, 3, 3, 1, 1])
    rows = per_class_table(p, y, cat, {1: "a", 3: "b"}, bins=2)
    assert [r["category"] for r in rows] == [3, 1] and rows[0]["name"] == "b" and rows[0]["n"] == 3
    assert rows[0]["precision"] == pytest.approx(2 / 3) and rows[0]["mean_conf"] == pytest.approx(0.8)
    # class 3: all in bin [0.5, 1]: |2/3 - 0.8|; class 1: 0.5 and 0.6 both in the upper bin: |0.5 - 0.55|
    assert rows[0]["ece"] == pytest.approx(abs(2 / 3 - 0.8))
    assert rows[1]["ece"] == pytest.approx(0.05)
    assert rows[1]["brier"] == pytest.approx((0.4**2 + 0.5**2) / 2)
    np.testing.assert_array_equal(most_frequent([5, 5, 2, 2, 9], 2), [2, 5])
    with pytest.raises(DetcalInputError):
        per_class_table(p, y, cat[:3])


def test_reliability_curve_matches_ece():
    rng = np.random.default_rng(0)
    p = rng.uniform(size=500)
    y = (rng.uniform(size=500) < p**2).astype(float)
    c = reliability_curve(p, y, 10)
    ok = c["n"] > 0
    assert c["n"].sum() == 500
    assert np.sum(c["n"][ok] * np.abs(c["precision"][ok] - c["conf"][ok])) / 500 == pytest.approx(
        ece(p, y, 10).value, abs=1e-12
    )
