"""Coverage metrics of box intervals (detcal.metrics.regression.coverage), worked by hand.

The definitions are those of conformal-od's evaluation code (docs/metrics.md#coverage):
closed intervals, a box covered when all four coordinates are, COCO size
strata and IoU bands open below and closed above, MPIW, and the box stretch
sqrt(outer interval box area / predicted area). ``cods`` and ``puncc`` are not
used as references: puncc 0.9.3 pins numpy < 2 (it cannot be installed beside
detcal's numpy), and cods 0.2 computes other quantities (its stretch is an area
ratio with a +1 pixel convention and no square root; its coverage asks that the
outer conformal box contain the ground-truth box, one-sided per edge, combined
with confidence and class terms, per object).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.special import ndtri

import detcal
from detcal.metrics.regression.coverage import (
    box_stretch,
    coverage_metrics,
    edge_sample,
    gaussian_coverage,
    gaussian_interval,
    gaussian_width,
    interval_coverage,
)
from detcal.metrics.spaces import RegressionSample
from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, RegressionSpec


def test_coverage_width_and_strata_by_hand() -> None:
    y = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [2.0, 2.0, 2.0, 5.0]])
    lo = np.array([[0.0, -1.0, -1.0, -1.0], [0.5, 0.5, 0.5, 0.5], [1.0, 1.0, 1.0, 1.0]])
    hi = np.array([[1.0, 1.0, 1.0, 1.0], [0.9, 2.0, 2.0, 2.0], [3.0, 3.0, 3.0, 3.0]])
    # row 0: all covered (y = lo exactly counts); row 1: x missed; row 2: h missed
    cov_k, cov_box = interval_coverage(lo, hi, y)
    assert cov_k.tolist() == pytest.approx([2 / 3, 1.0, 1.0, 2 / 3])
    assert cov_box == pytest.approx(1 / 3)
    area = np.array([32.0**2, 32.0**2 + 1, 96.0**2 + 1])  # exactly 32^2 is small (upper end closed)
    iou = np.array([0.7, 0.9, 0.95])  # 0.7 is in the lowest band, 0.9 in the middle one
    side = np.full((3, 4), 2.0)
    res = coverage_metrics(lo, hi, y, ("a", "b", "c", "d"), level=0.9, source="hand", side=side, gt_area=area, iou=iou)
    box = res["coverage"]["box"]
    assert box.value == pytest.approx(1 / 3)
    assert box.extra["by_size"] == {
        "small": {"coverage": 1.0, "n": 1},
        "medium": {"coverage": 0.0, "n": 1},
        "large": {"coverage": 0.0, "n": 1},
    }
    assert [box.extra["by_iou"][k]["coverage"] for k in ("iou<=0.7", "0.7-0.9", "iou>0.9")] == [1.0, 0.0, 0.0]
    # widths: a: 1, 0.4, 2 -> 3.4/3; relative to a side of 2 -> half
    assert res["interval_width"]["a"].value == pytest.approx(3.4 / 3)
    assert res["interval_width"]["a"].extra["relative"] == pytest.approx(3.4 / 6)
    # an empty stratum is null with n = 0
    res2 = coverage_metrics(lo[:1], hi[:1], y[:1], "abcd", level=0.9, source="hand", gt_area=area[:1], iou=iou[:1])
    assert res2["coverage"]["box"].extra["by_size"]["large"] == {"coverage": None, "n": 0}


def test_box_stretch_by_hand() -> None:
    # predicted box 10 x 20 = 200; outer interval box x1 in [-1, 1], x2 in [9, 12], y1 [0, 0], y2 [18, 25]:
    # (12 - (-1)) * (25 - 0) = 325 -> sqrt(325 / 200)
    lo = np.array([[-1.0, 0.0, 9.0, 18.0]])
    hi = np.array([[1.0, 0.0, 12.0, 25.0]])
    assert box_stretch(lo, hi, np.array([200.0])) == pytest.approx(np.sqrt(325 / 200))
    # the predicted box itself (zero-width intervals) has stretch 1
    b = np.array([[0.0, 0.0, 10.0, 20.0]])
    assert box_stretch(b, b, np.array([200.0])) == pytest.approx(1.0)


def test_edge_sample_is_the_linear_map_with_its_covariance() -> None:
    rng = np.random.default_rng(0)
    mu = np.array([[50.0, 40.0, 20.0, 10.0]])
    sg = np.array([[1.0, 2.0, 4.0, 2.0]])
    s = RegressionSample(
        mu=mu, sigma=sg, y=mu + 1.0, rows=[0], image_id=[1], space="pixel", coords=("cx", "cy", "w", "h")
    )
    e = edge_sample(s)
    assert e.mu.tolist() == [[40.0, 35.0, 60.0, 45.0]]
    assert e.y.tolist() == [[40.5, 35.5, 61.5, 46.5]]  # y = mu + 1: x1 = 51 - 21/2, x2 = 51 + 21/2, ...
    # x1 = cx - w/2: var = 1 + 16/4 = 5; y2 = cy + h/2: var = 4 + 4/4 = 5; cov(x1, x2) = 1 - 4 = -3
    assert e.sigma[0].tolist() == pytest.approx([np.sqrt(5), np.sqrt(5), np.sqrt(5), np.sqrt(5)])
    assert e.cov is not None and e.cov[0, 0, 2] == pytest.approx(-3.0)
    # Monte Carlo check of the propagation
    draws = mu + sg * rng.standard_normal((200_000, 4))
    x1 = draws[:, 0] - draws[:, 2] / 2
    assert np.std(x1) == pytest.approx(np.sqrt(5), rel=0.01)


def test_gaussian_coverage_is_nominal_on_gaussian_data() -> None:
    rng = np.random.default_rng(1)
    sg = np.exp(rng.uniform(-2, 1, 100_000))
    y = sg * rng.standard_normal(100_000)
    r = gaussian_coverage(np.zeros_like(y), sg, y, level=0.9)
    assert abs(r.value - 0.9) < 4 * np.sqrt(0.09 / 100_000)
    lo, hi = gaussian_interval(0.0, 1.0, 0.9)
    assert hi - lo == pytest.approx(2 * ndtri(0.95))


def test_evaluate_writes_the_coverage_records(tmp_path: Path) -> None:
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    res = detcal.evaluate(DataSpec(n_images=30), spec=spec, workdir=tmp_path)
    reg = res.to_dict()["regression"]
    assert set(reg["coverage"]) == {"tx", "ty", "tw", "th", "box", "x1", "y1", "x2", "y2", "box_edges"}
    assert set(reg["interval_width"]) == {"tx", "ty", "tw", "th", "x1", "y1", "x2", "y2"}
    assert reg["interval_width"]["x1"]["extra"]["relative"] > 0
    n = reg["coverage"]["box"]["params"]["n"]
    assert sum(v["n"] for v in reg["coverage"]["box"]["extra"]["by_size"].values()) == n
    assert sum(v["n"] for v in reg["coverage"]["box"]["extra"]["by_iou"].values()) == n
    assert reg["box_stretch"]["box"]["value"] > 1.0
    # box coverage can never exceed the least-covered coordinate
    assert reg["coverage"]["box"]["value"] <= min(reg["coverage"][c]["value"] for c in ("tx", "ty", "tw", "th"))


def test_conformal_recalibration_reaches_nominal_coverage_in_the_pipeline(tmp_path: Path) -> None:
    from detcal.calibration.conformal import ConformalBoxIntervals
    from detcal.data.synthetic import write_synthetic

    p = write_synthetic(tmp_path, n_images=300, seed=4, render=False)
    ds = detcal.DataSpec(source="coco", gt=str(p["coco_instances"]), results=str(p["coco_results"]))
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0))
    for cal in ("conformal", ConformalBoxIntervals(groups="class", bonferroni=True)):
        r = detcal.calibrate(ds, spec, confidence=None, regression=cal).to_dict()
        after = r["evaluation"]["regression"]["after"]
        n = after["coverage"]["box"]["params"]["n"]
        if cal == "conformal":  # per coordinate: 0.9 within a binomial band of the evaluation sample
            for c in ("tx", "ty", "tw", "th"):
                assert abs(after["coverage"][c]["value"] - 0.9) < 4 * np.sqrt(0.09 / n) + 1 / n
        else:  # Bonferroni: the central 0.9 Gaussian interval is not the conformal one; the quantile is per class
            assert r["calibrators"]["regression"]["describe"]["fitted"]["alpha_coord_"] == [0.025] * 4
            # at coverage_level 0.975 the intervals measured are the conformal ones: the box is covered >= 0.9
            spec_b = EvaluationSpec(bootstrap=BootstrapSpec(n=0), regression=RegressionSpec(coverage_level=0.975))
            rb = detcal.calibrate(ds, spec_b, confidence=None, regression=cal).to_dict()
            box = rb["evaluation"]["regression"]["after"]["coverage"]["box"]["value"]
            assert box >= 0.9 - 4 * np.sqrt(0.09 / n)


def test_conformal_on_the_pixel_edges() -> None:
    from detcal.calibration.conformal import ConformalBoxIntervals

    rng = np.random.default_rng(8)

    def sample(n: int) -> RegressionSample:
        mu = np.column_stack([rng.uniform(50, 500, (n, 2)), rng.uniform(20, 200, (n, 2))])
        sg = mu[:, [2, 3, 2, 3]] * rng.uniform(0.02, 0.1, (n, 4))
        y = mu + 1.5 * sg * rng.standard_normal((n, 4))  # sigma 1.5 times too small
        return RegressionSample(mu=mu, sigma=sg, y=y, rows=np.arange(n), image_id=np.arange(n), space="pixel",
                                coords=("cx", "cy", "w", "h"))  # fmt: skip

    cal_e, val_e = edge_sample(sample(4000)), edge_sample(sample(4000))
    conf = ConformalBoxIntervals(bonferroni=True).fit(cal_e.mu, cal_e.sigma, cal_e.y)
    lo, hi = conf.interval(val_e.mu, val_e.sigma)
    cov_k, cov_box = interval_coverage(lo, hi, val_e.y)
    assert np.all(np.abs(cov_k - 0.975) < 0.01) and cov_box >= 0.9 - 0.02
    res = coverage_metrics(lo, hi, val_e.y, val_e.coords, level=0.9, source="conformal")
    assert res["coverage"]["box"].value == pytest.approx(cov_box)
    area = (val_e.mu[:, 2] - val_e.mu[:, 0]) * (val_e.mu[:, 3] - val_e.mu[:, 1])
    assert box_stretch(lo, hi, area) > 1.0


@pytest.mark.parametrize("bad", [float("nan"), -1.0, 0.0])
def test_gaussian_coverage_and_width_refuse_a_bad_sigma(bad: float) -> None:
    """A NaN, negative or zero sigma is named, as every box-uncertainty metric names it, not averaged in."""
    from detcal.core.errors import DetcalInputError

    mu, y = np.zeros(3), np.array([0.1, -0.2, 0.3])
    sigma = np.array([1.0, bad, 1.0])
    with pytest.raises(DetcalInputError, match="sigma"):
        gaussian_coverage(mu, sigma, y, level=0.9)
    with pytest.raises(DetcalInputError, match="sigma"):
        gaussian_width(mu, sigma, y, level=0.9)
