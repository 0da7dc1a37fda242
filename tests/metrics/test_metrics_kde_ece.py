"""KDE detection calibration error (Popordanoska et al., WACV 2024): hand-worked figures, the bandwidth rule
written out with scipy's Beta density, consistency on a synthetic detector with a known calibration map,
and the detection-level variants."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import beta

from detcal.core.types import Detections, GroundTruth
from detcal.metrics.kde_ece import BANDWIDTH_GRID, detection_kde_ece, kde_ece, kde_ratio, loo_bandwidth


def _k(s, sj, b):
    return beta.pdf(s, sj / b + 1, (1 - sj) / b + 1)


def test_hand_worked_three_scores():
    s = np.array([0.2, 0.5, 0.9])
    y = np.array([0.0, 1.0, 1.0])
    b = 0.4
    # r_0 = (K(.2;.5) * 1 + K(.2;.9) * 1) / (K(.2;.5) + K(.2;.9)) = 1; r_1 = K(.5;.9) / (K(.5;.2) + K(.5;.9)); r_2 = K(.9;.5) / (K(.9;.2) + K(.9;.5))
    r1 = _k(0.5, 0.9, b) / (_k(0.5, 0.2, b) + _k(0.5, 0.9, b))
    r2 = _k(0.9, 0.5, b) / (_k(0.9, 0.2, b) + _k(0.9, 0.5, b))
    assert kde_ratio(s, y, b) == pytest.approx([1.0, r1, r2], rel=1e-10)
    want = (abs(1.0 - 0.2) + abs(r1 - 0.5) + abs(r2 - 0.9)) / 3
    assert kde_ece(s, y, bandwidth=b).value == pytest.approx(want, rel=1e-10)
    want2 = ((1.0 - 0.2) ** 2 + (r1 - 0.5) ** 2 + (r2 - 0.9) ** 2) / 3
    assert kde_ece(s, y, bandwidth=b, p=2).value == pytest.approx(want2, rel=1e-10)


def test_bandwidth_rule_written_out():
    rng = np.random.default_rng(0)
    s = rng.beta(2, 3, 60)
    n = len(s)
    best, best_l = None, -np.inf
    for b in BANDWIDTH_GRID:
        K = _k(s[:, None], s[None, :], b)
        np.fill_diagonal(K, 0.0)
        ll = np.sum(np.log(K.sum(axis=1) / ((n - 1) * b)))
        if ll > best_l:
            best, best_l = b, ll
    assert loo_bandwidth(s) == pytest.approx(best)
    assert list(np.round(BANDWIDTH_GRID, 6)) == [0.001, 0.003162, 0.01, 0.031623, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0]


def test_perfectly_calibrated_targets_and_bad_input():
    rng = np.random.default_rng(1)
    s = rng.uniform(0.05, 0.95, 1500)
    y = s.copy()  # E[Y | S] = S exactly (IoU-like targets equal to the score)
    assert kde_ece(s, y).value < 0.01
    with pytest.raises(Exception, match="outside"):
        kde_ece([0.5, 1.2], [1, 0])


def _synthetic(n, seed):
    """Scores uniform on (0, 1); a hit with probability s^2: the true error E|s^2 - s| = 1/2 - 1/3 = 1/6."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0, 1, n)
    return s, (rng.uniform(0, 1, n) < s**2).astype(float)


def test_consistency_on_a_known_calibration_map():
    true = 1 / 6
    errs = {}
    for n in (100, 1200):
        est = [kde_ece(*_synthetic(n, seed)).value for seed in range(4)]
        errs[n] = np.mean(np.abs(np.array(est) - true))
    # the mean absolute deviation from the true 1/6 shrinks with N (scripts/kde_consistency.py draws the curve)
    assert errs[1200] < 0.02
    assert errs[1200] < errs[100]


def _scene():
    # two images; class 1 has two objects, class 2 one; class 3 only has a detection (an FP)
    gt = GroundTruth(image_id=[1, 1, 2], box=[[0, 0, 10, 10], [20, 20, 30, 30], [0, 0, 10, 10]], category=[1, 1, 2])
    dets = Detections(
        image_id=[1, 1, 1, 2, 2, 2],
        box=[[0, 0, 10, 8], [20, 20, 30, 30], [50, 50, 60, 60], [0, 0, 10, 10], [40, 40, 50, 50], [0, 0, 9, 10]],
        score=[0.9, 0.8, 0.3, 0.7, 0.4, 0.6],
        category=[1, 1, 1, 2, 2, 3],
    )
    return dets, gt


def test_detection_level_binary_and_iou_links():
    dets, gt = _scene()
    b = detection_kde_ece(dets, gt, iou_thresholds=[0.5], variant="popordanoska2024")
    # class 1: scores .9 .8 .3 with hits 1 1 0; class 2: .7 .4 with 1 0; class 3: .6 with 0 (a single score: no estimate)
    e1 = kde_ece([0.9, 0.8, 0.3], [1, 1, 0]).value
    e2 = kde_ece([0.7, 0.4], [1, 0]).value
    assert b.value == pytest.approx(np.mean([e1, e2]))
    iou = detection_kde_ece(dets, gt, link="iou", variant="popordanoska2024")
    e1i = kde_ece([0.9, 0.8, 0.3], [0.8, 1.0, 0.0]).value
    assert iou.value == pytest.approx(np.mean([e1i, e2]))
    # the code's IoU link: class 1 of image 1 has two objects, so the third detection (score .3) keeps 0 anyway;
    # in image 2 class 3 has no object: its detection gets 0 (it is unmatched anyway). Class 3's single
    # detection has an error in the code, |1[y > 0] - s| = |0 - 0.6| (its leave-one-out ratio is 1[y > 0]),
    # where the definition has no estimate (the figures of tests/data/kde_reference confirm the code's rule)
    code = detection_kde_ece(dets, gt, link="iou", variant="popordanoska2024_code")
    assert code.value == pytest.approx(np.mean([e1i, e2, 0.6]))


def test_code_variant_truncates_ious_past_the_object_count():
    # one object; the best-scored detection misses it, the second (score .5, IoU .9) takes it
    gt = GroundTruth(image_id=[1], box=[[0, 0, 10, 10]], category=[1])
    dets = Detections(
        image_id=[1, 1, 1],
        box=[[30, 30, 40, 40], [0, 0, 10, 9], [60, 60, 70, 70]],
        score=[0.95, 0.5, 0.2],
        category=[1, 1, 1],
    )
    d = detection_kde_ece(dets, gt, link="iou", variant="popordanoska2024")
    c = detection_kde_ece(dets, gt, link="iou", variant="popordanoska2024_code")
    assert d.value == pytest.approx(kde_ece([0.95, 0.5, 0.2], [0.0, 0.9, 0.0]).value)
    # the code reads IoUs for the first G = 1 detections (by score) only: the match at rank 1 gets 0
    assert c.value == pytest.approx(kde_ece([0.95, 0.5, 0.2], [0.0, 0.0, 0.0]).value)
    # a class with an object but no detection: error 0 in the code's average, left out by the definition
    gt2 = GroundTruth(image_id=[1, 1], box=[[0, 0, 10, 10], [50, 50, 60, 60]], category=[1, 2])
    d2 = detection_kde_ece(dets, gt2, iou_thresholds=[0.5], variant="popordanoska2024")
    c2 = detection_kde_ece(dets, gt2, iou_thresholds=[0.5], variant="popordanoska2024_code")
    assert c2.value == pytest.approx(d2.value / 2)


def test_through_the_pipeline():
    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec, LocalisationSpec

    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), localisation=LocalisationSpec(kde_ece=True))
    res = detcal.evaluate(DataSpec(source="bundled", bundle="coco_mini79", detector="ssd-inception-v2"), spec=spec)
    loc = res.to_dict()["localisation"]
    assert loc["kde_ece"]["variant"] == "popordanoska2024_code" and 0 < loc["kde_ece"]["value"] < 1
    assert loc["kde_ece"]["params"]["link"] == "binary" and len(loc["kde_ece"]["params"]["iou_thresholds"]) == 10
    assert loc["kde_ece_iou"]["params"]["iou_thresholds"] == [0.5]
