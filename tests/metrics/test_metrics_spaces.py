"""Tests of detcal.metrics.spaces: sample selection, delta targets by hand, propagation vs numeric Jacobians."""

from __future__ import annotations

import numpy as np
import pytest

from detcal.core.boxes import decode_deltas, encode_deltas, xywh_to_xyxy, xyxy_to_cxcywh
from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, GroundTruth, MatchResult
from detcal.metrics.spaces import RegressionSample, regression_sample

# GT 0: xyxy [1, 2, 13, 22] -> cx 7, cy 12, w 12, h 20 ; GT 1: [50, 50, 70, 90]
GT = GroundTruth(image_id=[1, 1], box=[[1, 2, 13, 22], [50, 50, 70, 90]], category=[1, 1])
# detection 0 matched to GT 0, 1 unmatched, 2 matched to GT 1, 3 ignored (crowd), 4 matched but not considered
BOXES = np.array([[1.5, 2.5, 12.0, 21.0], [100, 100, 110, 120], [51, 49, 69, 92], [0, 0, 5, 5], [1, 2, 13, 22]], float)
PROPOSALS = np.array([[0, 0, 10, 20], [100, 100, 110, 120], [48, 52, 72, 88], [0, 0, 5, 5], [0, 0, 10, 20]], float)


def _match(n: int = 5) -> MatchResult:
    matched = np.array([[True, False, True, True, True]])
    ignored = np.array([[False, False, False, True, False]])
    gt_index = np.array([[0, -1, 1, 0, 0]])
    considered = np.array([True, True, True, True, False])
    return MatchResult(
        iou_thresholds=np.array([0.5]),
        matched=matched[:, :n],
        ignored=ignored[:, :n],
        gt_index=gt_index[:, :n],
        iou=np.full(n, 0.8),
        considered=considered[:n],
    )


def _dets(**kw) -> Detections:
    return Detections(image_id=np.ones(5), box=BOXES, score=np.full(5, 0.9), category=np.ones(5), **kw)


def _numeric_jacobian(f, x0: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central finite differences of f: R^n -> R^m at x0 -> [m, n]."""
    cols = []
    for j in range(len(x0)):
        d = np.zeros_like(x0)
        d[j] = h
        cols.append((f(x0 + d) - f(x0 - d)) / (2 * h))
    return np.stack(cols, axis=1)


def test_delta_records_targets_by_hand():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(5, 4)) * 0.1
    std = rng.uniform(0.05, 0.3, size=(5, 4))
    smp = regression_sample(_dets(proposal=PROPOSALS, delta_mean=mean, delta_std=std), GT, _match())
    # true positives: rows 0 and 2 (row 3 ignored, row 4 not considered, row 1 unmatched)
    np.testing.assert_array_equal(smp.rows, [0, 2])
    assert smp.space == "delta" and smp.coords == ("tx", "ty", "tw", "th") and smp.cov is None
    # row 0: P = [0,0,10,20] -> cx 5, cy 10, w 10, h 20 ; G0 -> cx 7, cy 12, w 12, h 20
    # tx = (7-5)/10 = 0.2, ty = (12-10)/20 = 0.1, tw = log(12/10), th = log(20/20) = 0
    np.testing.assert_allclose(smp.y[0], [0.2, 0.1, np.log(1.2), 0.0], atol=1e-15)
    # row 2: P = [48,52,72,88] -> cx 60, cy 70, w 24, h 36 ; G1 -> cx 60, cy 70, w 20, h 40
    np.testing.assert_allclose(smp.y[1], [0.0, 0.0, np.log(20 / 24), np.log(40 / 36)], atol=1e-15)
    np.testing.assert_array_equal(smp.mu, mean[[0, 2]])
    np.testing.assert_array_equal(smp.sigma, std[[0, 2]])
    np.testing.assert_array_equal(smp.image_id, [1, 1])
    assert smp.notes["uncertainty_kind"] == "delta" and smp.notes["n_true_positives"] == 2


def test_box_std_first_order_propagation():
    bstd = np.tile([2.0, 3.0, 4.0, 5.0], (5, 1))
    smp = regression_sample(_dets(box_std=bstd), GT, _match())
    b = xyxy_to_cxcywh(BOXES[[0, 2]])
    # sigma_t = (s_cx/Bw, s_cy/Bh, s_w/Bw, s_h/Bh); row 0 B: w 10.5, h 18.5
    np.testing.assert_allclose(smp.sigma[0], [2 / 10.5, 3 / 18.5, 4 / 10.5, 5 / 18.5])
    np.testing.assert_allclose(smp.sigma[1], [2 / b[1, 2], 3 / b[1, 3], 4 / b[1, 2], 5 / b[1, 3]])
    np.testing.assert_array_equal(smp.mu, 0.0)
    np.testing.assert_allclose(smp.y, encode_deltas(BOXES[[0, 2]], GT.box[[0, 1]]))


def _random_spd(rng, n, k):
    a = rng.normal(size=(n, k, k))
    return a @ a.transpose(0, 2, 1) + np.eye(k) * 0.5


def test_box_cov_matches_numeric_jacobian():
    rng = np.random.default_rng(1)
    cov_xywh = _random_spd(rng, 5, 4)
    smp = regression_sample(_dets(box_cov=cov_xywh), GT, _match())
    for i, row in enumerate(smp.rows):
        b = BOXES[row]
        xywh0 = np.r_[b[:2], b[2:] - b[:2]]
        # deltas of a perturbed box g (in x, y, w, h) w.r.t. the predicted box B, at g = B
        jac = _numeric_jacobian(lambda g: encode_deltas(b, xywh_to_xyxy(g)), xywh0)
        ref = jac @ cov_xywh[row] @ jac.T
        np.testing.assert_allclose(smp.cov[i], ref, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(smp.sigma[i], np.sqrt(np.diag(ref)), rtol=1e-6)
    # pixel space: Jacobian of (x, y, w, h) -> (cx, cy, w, h)
    px = regression_sample(_dets(box_cov=cov_xywh), GT, _match(), space="pixel")
    row = px.rows[1]
    b = BOXES[row]
    jac = _numeric_jacobian(lambda g: xyxy_to_cxcywh(xywh_to_xyxy(g)), np.r_[b[:2], b[2:] - b[:2]])
    np.testing.assert_allclose(px.cov[1], jac @ cov_xywh[row] @ jac.T, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(px.mu[1], xyxy_to_cxcywh(b))
    np.testing.assert_allclose(px.y[1], xyxy_to_cxcywh(GT.box[1]))
    assert px.coords == ("cx", "cy", "w", "h")


def test_corner_cov_matches_numeric_jacobian():
    rng = np.random.default_rng(2)
    corner = np.stack([_random_spd(rng, 5, 2), _random_spd(rng, 5, 2)], axis=1)  # [D, 2, 2, 2]
    smp = regression_sample(_dets(corner_cov=corner), GT, _match())
    for i, row in enumerate(smp.rows):
        b = BOXES[row]
        full = np.zeros((4, 4))
        full[:2, :2], full[2:, 2:] = corner[row, 0], corner[row, 1]  # independent corners
        jac = _numeric_jacobian(lambda g: encode_deltas(b, g), b.copy())  # perturb (x1, y1, x2, y2)
        ref = jac @ full @ jac.T
        np.testing.assert_allclose(smp.cov[i], ref, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(smp.sigma[i], np.sqrt(np.diag(ref)), rtol=1e-6)


def test_delta_records_box_and_pixel_spaces():
    rng = np.random.default_rng(3)
    mean = rng.normal(size=(5, 4)) * 0.1
    std = rng.uniform(0.05, 0.3, size=(5, 4))
    boxes = decode_deltas(PROPOSALS, mean)  # final box B = decode(P, mu)
    dets = Detections(
        image_id=np.ones(5),
        box=boxes,
        score=np.ones(5),
        category=np.ones(5),
        proposal=PROPOSALS,
        delta_mean=mean,
        delta_std=std,
    )
    d = regression_sample(dets, GT, _match(), space="delta")
    b = regression_sample(dets, GT, _match(), space="box")
    # with B = decode(P, mu) the normalised residuals e/sigma agree in both spaces
    np.testing.assert_allclose(b.residual / b.sigma, d.residual / d.sigma, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(b.mu, 0.0)
    # pixel space: numeric Jacobian of decode(P, t) -> (cx, cy, w, h) at t = mu, diagonal delta covariance
    px = regression_sample(dets, GT, _match(), space="pixel")
    for i, row in enumerate(px.rows):
        jac = _numeric_jacobian(lambda t: xyxy_to_cxcywh(decode_deltas(PROPOSALS[row], t)), mean[row])
        ref = jac @ np.diag(std[row] ** 2) @ jac.T
        np.testing.assert_allclose(px.sigma[i], np.sqrt(np.diag(ref)), rtol=1e-6)
        np.testing.assert_allclose(px.mu[i], xyxy_to_cxcywh(boxes[row]), rtol=1e-12)


def test_validation_names_row_and_field():
    std = np.full((5, 4), 0.1)
    std[2, 1] = 0.0
    with pytest.raises(DetcalInputError) as ei:
        regression_sample(_dets(proposal=PROPOSALS, delta_mean=np.zeros((5, 4)), delta_std=std), GT, _match())
    assert ei.value.field == "delta_std" and ei.value.record == "detection row 2"
    bstd = np.ones((5, 4))
    bstd[0, 3] = np.nan
    with pytest.raises(DetcalInputError) as ei:
        regression_sample(_dets(box_std=bstd), GT, _match())
    assert ei.value.field == "box_std" and ei.value.record == "detection row 0"
    cov = np.tile(np.eye(4), (5, 1, 1))
    cov[2, 0, 1] = cov[2, 1, 0] = 5.0  # symmetric but indefinite
    with pytest.raises(DetcalInputError) as ei:
        regression_sample(_dets(box_cov=cov), GT, _match())
    assert ei.value.field == "box_cov" and ei.value.record == "detection row 2"
    with pytest.raises(DetcalInputError):
        regression_sample(_dets(), GT, _match())  # no uncertainty at all
    with pytest.raises(DetcalInputError):
        regression_sample(_dets(box_std=np.ones((5, 4))), GT, _match(), space="bogus")
    with pytest.raises(KeyError):
        regression_sample(_dets(box_std=np.ones((5, 4))), GT, _match(), iou_threshold=0.75)


def test_sample_select_and_empty():
    smp = regression_sample(_dets(box_std=np.ones((5, 4))), GT, _match())
    sub = smp.select(np.array([False, True]))
    assert isinstance(sub, RegressionSample) and len(sub) == 1 and sub.rows[0] == 2
    m = _match()
    m.matched[:] = False
    empty = regression_sample(_dets(box_std=np.ones((5, 4))), GT, m)
    assert len(empty) == 0 and empty.mu.shape == (0, 4)
