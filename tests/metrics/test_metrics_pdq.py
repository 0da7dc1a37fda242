"""PDQ, the ``detcal_continuous`` variant (detcal's earlier definition): closed forms, a Gaussian box against numerical integration, assignment and conversions."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import multivariate_normal

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.metrics.pdq import (
    box_cov_to_corner_cov,
    box_std_to_corner_cov,
    bvn_cdf,
    corner_covariances,
    pair_qualities,
    pdq,
)

V = "detcal_continuous"


def _ds(gt_boxes, gt_cats, W=40, H=30, image_ids=None):
    ids = [1] if image_ids is None else image_ids
    n = len(gt_boxes)
    return Dataset(
        images=Images(id=sorted(set(ids)), width=np.full(len(set(ids)), W), height=np.full(len(set(ids)), H)),
        gt=GroundTruth(
            image_id=ids if image_ids is not None else [1] * n,
            box=np.array(gt_boxes, float).reshape(-1, 4),
            category=gt_cats,
        ),
        categories={1: "a", 2: "b"},
    )


def test_bvn_cdf_against_scipy():
    rng = np.random.default_rng(0)
    h, k = rng.normal(0, 1.5, 30), rng.normal(0, 1.5, 30)
    rho = rng.uniform(-0.9, 0.9, 30)
    ours = bvn_cdf(h, k, rho)
    for i in range(30):
        ref = multivariate_normal(mean=[0, 0], cov=[[1, rho[i]], [rho[i], 1]]).cdf([h[i], k[i]])
        assert ours[i] == pytest.approx(ref, abs=2e-6)


def test_deterministic_box_closed_forms():
    ds = _ds([[4, 5, 12, 13]], [1])
    exact = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[0.64], category=[1])
    r = pdq(ds, exact, variant=V)
    # the box covers exactly the GT pixels: spatial 1, pPDQ = sqrt(label)
    assert r.extra["avg_spatial"] == 1.0 and r.value == pytest.approx(0.8)
    assert (r.extra["TP"], r.extra["FP"], r.extra["FN"]) == (1, 0, 0)
    # shifted by half a pixel: 8 GT pixels (one column) at p = 0.5, 8 background pixels at p = 0.5, over 64 GT pixels
    half = Detections(image_id=[1], box=[[4.5, 5, 12.5, 13]], score=[1.0], category=[1])
    assert pdq(ds, half, variant=V).extra["avg_spatial"] == pytest.approx(np.exp(16 * np.log(0.5) / 64), rel=1e-9)
    # wrong class: label 0, so no TP: one FP and one FN
    wrong = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[0.9], category=[2])
    r = pdq(ds, wrong, variant=V)
    assert r.value == 0.0 and (r.extra["TP"], r.extra["FP"], r.extra["FN"]) == (0, 1, 1)


def _numeric_corner_cdf(mu, cov, xs, ys, upper):
    """P(corner <= (x, y)) (upper=False) or P(corner >= (x, y)) on a grid, by integrating the density on a fine grid."""
    step = 0.02
    sd = np.sqrt(np.diag(cov))
    gx = np.arange(np.floor(mu[0] - 9 * sd[0]), np.ceil(mu[0] + 9 * sd[0]) + step / 2, step)
    gy = np.arange(np.floor(mu[1] - 9 * sd[1]), np.ceil(mu[1] + 9 * sd[1]) + step / 2, step)
    cx, cy = 0.5 * (gx[1:] + gx[:-1]), 0.5 * (gy[1:] + gy[:-1])
    X, Y = np.meshgrid(cx, cy)
    inv = np.linalg.inv(cov)
    dx, dy = X - mu[0], Y - mu[1]
    dens = np.exp(-0.5 * (inv[0, 0] * dx * dx + 2 * inv[0, 1] * dx * dy + inv[1, 1] * dy * dy)) / (
        2 * np.pi * np.sqrt(np.linalg.det(cov))
    )
    mass = dens * step * step
    if upper:
        mass = mass[::-1, ::-1]
    cum = np.zeros((len(gy), len(gx)))
    cum[1:, 1:] = mass.cumsum(0).cumsum(1)
    if upper:  # cum[i, j] = mass with y >= gy[-1-i], x >= gx[-1-j]
        out = np.empty((len(ys), len(xs)))
        for a, y in enumerate(ys):
            for b, x in enumerate(xs):
                i = len(gy) - 1 - np.searchsorted(gy, y)
                j = len(gx) - 1 - np.searchsorted(gx, x)
                out[a, b] = (
                    cum[min(max(i, 0), len(gy) - 1), min(max(j, 0), len(gx) - 1)]
                    if y <= gy[-1] and x <= gx[-1]
                    else 0.0
                )
                if y < gy[0] and x < gx[0]:
                    out[a, b] = 1.0
                elif y < gy[0]:
                    out[a, b] = cum[-1, min(max(j, 0), len(gx) - 1)]
                elif x < gx[0]:
                    out[a, b] = cum[min(max(i, 0), len(gy) - 1), -1]
        return out
    ii = np.clip(np.searchsorted(gy, ys), 0, len(gy) - 1)
    jj = np.clip(np.searchsorted(gx, xs), 0, len(gx) - 1)
    out = cum[ii][:, jj]
    out[ys > gy[-1]] = cum[-1][jj]
    out[:, xs > gx[-1]] = cum[ii][:, -1:]
    out[np.ix_(ys > gy[-1], xs > gx[-1])] = 1.0
    return out


@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_single_gaussian_box_against_numerical_integration(rho):
    W, H = 24, 20
    gt_box = np.array([6.0, 5.0, 16.0, 13.0])
    mu = np.array([6.3, 4.6, 15.5, 13.4])
    c_tl = np.array([[1.2, rho * np.sqrt(1.2 * 0.8)], [rho * np.sqrt(1.2 * 0.8), 0.8]])
    c_br = np.array([[0.9, -rho * 0.9], [-rho * 0.9, 1.6]])
    score = 0.81
    cols, rows = np.arange(W, dtype=float), np.arange(H, dtype=float)
    p_tl = _numeric_corner_cdf(mu[:2], c_tl, cols + 1, rows + 1, upper=False)
    p_br = _numeric_corner_cdf(mu[2:], c_br, cols, rows, upper=True)
    p = p_tl * p_br
    p[p < 0.0027] = 0.0
    gmask = np.zeros((H, W), bool)
    gmask[5:13, 6:16] = True
    fg = np.log(p[gmask] + 1e-14).sum()
    bg = (np.log(1 - p[~gmask] + 1e-14) * (p[~gmask] > 0)).sum()
    spatial = np.exp((fg + bg) / gmask.sum())
    ds = _ds([gt_box], [1], W, H)
    dets = Detections(image_id=[1], box=[mu], score=[score], category=[1], corner_cov=np.stack([c_tl, c_br])[None])
    r = pdq(ds, dets, variant=V)
    assert r.extra["avg_spatial"] == pytest.approx(spatial, rel=2e-3)
    assert r.value == pytest.approx(np.sqrt(spatial * score), rel=1e-3)
    assert 0.05 < spatial < 0.95  # a non-trivial case


def test_optimal_assignment_and_counts():
    ds = _ds([[2, 2, 10, 10], [12, 2, 20, 10], [2, 15, 10, 25]], [1, 1, 2], W=30, H=30)
    dets = Detections(
        image_id=[1] * 4,
        box=[[3, 2, 11, 10], [11, 2, 19, 10], [2, 2, 10, 10], [25, 25, 29, 29]],
        score=[0.9, 0.7, 0.5, 0.6],
        category=[1, 1, 1, 2],
        corner_cov=np.broadcast_to(np.eye(2) * 0.5, (4, 2, 2, 2)).copy(),
    )
    q = pair_qualities(dets.box, dets.corner_cov, dets.score, dets.category, ds.gt.box, ds.gt.category, 30, 30)["ppdq"]
    best = max(sum(q[g, d] for g, d in zip(range(3), perm)) for perm in itertools.permutations(range(4), 3))
    r = pdq(ds, dets, variant=V)
    n_tp = r.extra["TP"]
    assert r.value * (n_tp + r.extra["FP"] + r.extra["FN"]) == pytest.approx(best)
    assert n_tp + r.extra["FP"] == 4 and n_tp + r.extra["FN"] == 3
    assert r.table["det_gt_index"][3] == -1  # the far box took nothing


def test_images_without_gt_or_dets_count():
    ds = _ds([[2, 2, 10, 10], [2, 2, 10, 10]], [1, 1], image_ids=[1, 2])
    dets = Detections(image_id=[1, 3], box=[[2, 2, 10, 10], [0, 0, 5, 5]], score=[1.0, 0.5], category=[1, 1])
    ds.images = Images(id=[1, 2, 3], width=[40, 40, 40], height=[30, 30, 30])
    r = pdq(ds, dets, variant=V)
    assert (r.extra["TP"], r.extra["FP"], r.extra["FN"]) == (1, 1, 1)
    assert r.value == pytest.approx(1 / 3)


def test_fixed_cov_and_conversions():
    ds = _ds([[4, 5, 12, 13]], [1])
    dets = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[1.0], category=[1])
    q1 = pdq(ds, dets, fixed_cov=1.0, variant=V).extra["avg_spatial"]
    q4 = pdq(ds, dets, fixed_cov=4.0, variant=V).extra["avg_spatial"]
    assert 0 < q4 < q1 < 1  # a perfectly placed box loses spatial quality with its variance
    S = np.arange(16, dtype=float).reshape(4, 4)
    S = S @ S.T + np.eye(4)
    cc = box_cov_to_corner_cov(S[None])[0]
    np.testing.assert_allclose(cc[0], S[:2, :2])
    np.testing.assert_allclose(cc[1], S[:2, :2] + S[:2, 2:] + S[2:, :2] + S[2:, 2:])
    bs = box_std_to_corner_cov(np.array([[1.0, 2.0, 4.0, 6.0]]))[0]
    np.testing.assert_allclose(bs[0], np.diag([1 + 4, 4 + 9]))
    np.testing.assert_allclose(bs[1], bs[0])
    d2 = Detections(image_id=[1], box=[[4, 5, 12, 13]], score=[1.0], category=[1], box_std=[[1.0, 2.0, 4.0, 6.0]])
    np.testing.assert_allclose(corner_covariances(d2)[0], bs)


def test_inclusive_variant_and_bad_input():
    ds = _ds([[4, 5, 12, 13]], [1])
    # in the reference's inclusive corners the box of GT pixels 4..11 x 5..12 is written [4, 5, 11, 12]
    incl = Detections(image_id=[1], box=[[4, 5, 11, 12]], score=[1.0], category=[1])
    assert pdq(ds, incl, inclusive=True, variant=V).value == 1.0
    assert pdq(ds, incl, variant=V).value < 1.0
    bad = Detections(
        image_id=[1],
        box=[[4, 5, 12, 13]],
        score=[1.0],
        category=[1],
        corner_cov=np.array([[[[1.0, 2.0], [2.0, 1.0]], [[1.0, 0], [0, 1.0]]]]),
    )
    with pytest.raises(DetcalInputError, match="positive semi-definite"):
        pdq(ds, bad, variant=V)
    with pytest.raises(DetcalInputError, match="fixed_cov"):
        pdq(ds, incl, fixed_cov=-1.0, variant=V)


def test_chunking_does_not_change_qualities():
    rng = np.random.default_rng(5)
    xy = rng.uniform(0, 60, (12, 2))
    wh = rng.uniform(2, 30, (12, 2))
    det_box = np.hstack([xy, xy + wh])
    cov = np.zeros((12, 2, 2, 2))
    v = rng.uniform(0.2, 6, (12, 2, 2))
    cov[..., 0, 0], cov[..., 1, 1] = v[..., 0], v[..., 1]
    cov[..., 0, 1] = cov[..., 1, 0] = 0.4 * np.sqrt(v[..., 0] * v[..., 1])
    gt_box = np.array([[5, 5, 30, 25], [40, 10, 70, 50], [0, 0, 3, 3]], float)
    args = (det_box, cov, rng.uniform(0, 1, 12), rng.integers(1, 3, 12), gt_box, np.array([1, 2, 1]), 80, 70)
    a = pair_qualities(*args, chunk=1)
    b = pair_qualities(*args, chunk=100)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-12, atol=1e-300)
