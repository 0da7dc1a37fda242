"""Synthetic scenes and the simulated detector: determinism, record consistency, the planted truth.

Golden values are closed forms of the planted model (written next to each
check), never numbers read off the code under test. Matching in these tests is
a few lines of numpy here (same-class max IoU with detcal.core.boxes.pairwise_iou),
not another module's matcher.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest
from PIL import Image

from detcal.core.boxes import encode_deltas, pairwise_iou, xyxy_to_cxcywh
from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_CATEGORIES, KITTI_DIFFICULTY, Dataset, Detections
from detcal.data import synthetic as S


# --------------------------------------------------------------------------- helpers
def _max_iou_same_class(ds: Dataset, dets: Detections) -> tuple[np.ndarray, np.ndarray]:
    """Per detection: best IoU with a regular (non-crowd, non-ignored) GT of its class, and that GT row."""
    best = np.zeros(len(dets))
    row = np.full(len(dets), -1)
    gt = ds.gt
    regular = ~gt.iscrowd & ~gt.ignore
    for img in np.unique(dets.image_id):
        di = np.flatnonzero(dets.image_id == img)
        gi = np.flatnonzero((gt.image_id == img) & regular)
        if len(gi) == 0:
            continue
        iou = pairwise_iou(dets.box[di], gt.box[gi])
        iou[dets.category[di][:, None] != gt.category[gi][None, :]] = 0.0
        best[di] = iou.max(axis=1)
        row[di] = gi[iou.argmax(axis=1)]
    return best, row


def _border_mask(ds: Dataset, dets: Detections, width: float) -> np.ndarray:
    c = xyxy_to_cxcywh(dets.box)
    r = ds.images.index_of(dets.image_id)
    rx, ry = c[:, 0] / ds.images.width[r], c[:, 1] / ds.images.height[r]
    return (rx < width) | (rx > 1 - width) | (ry < width) | (ry > 1 - width)


def _binned_gap(p: np.ndarray, y: np.ndarray, target: np.ndarray, bins: int = 10) -> float:
    """sum_b N_b/N |mean(y)_b - mean(target)_b| over equal-width score bins (ECE when target = p)."""
    b = np.minimum((p * bins).astype(int), bins - 1)
    s_y = np.bincount(b, weights=y.astype(float), minlength=bins)
    s_t = np.bincount(b, weights=target, minlength=bins)
    return float(np.abs(s_y - s_t).sum() / len(p))


@pytest.fixture(scope="module")
def big_scene() -> Dataset:
    ds, _ = S.generate_scenes(2500, seed=11, render=False)
    return ds


# --------------------------------------------------------------------------- scenes
def test_categories_are_the_kitti_ids_and_names():
    for k, v in S.SYNTHETIC_CATEGORIES.items():
        assert KITTI_CATEGORIES[k] == v
    assert set(S.SYNTHETIC_CATEGORIES.values()) == {"Car", "Pedestrian", "Cyclist"}
    assert KITTI_CATEGORIES[S.DONTCARE_CATEGORY] == "DontCare"


def test_scenes_deterministic_by_seed_and_seed_sensitive():
    a, ia = S.generate_scenes(6, seed=5, dontcare_per_image=0.5, crowd_per_image=0.5)
    b, ib = S.generate_scenes(6, seed=5, dontcare_per_image=0.5, crowd_per_image=0.5)
    c, ic = S.generate_scenes(6, seed=6, dontcare_per_image=0.5, crowd_per_image=0.5)
    for f in (
        "image_id",
        "box",
        "category",
        "iscrowd",
        "ignore",
        "truncation",
        "occlusion",
        "difficulty",
        "alpha",
        "dimensions",
        "location",
        "rotation_y",
    ):
        np.testing.assert_array_equal(getattr(a.gt, f), getattr(b.gt, f), err_msg=f)
    assert all(np.array_equal(x, y) for x, y in zip(ia, ib))
    assert len(a.gt) != len(c.gt) or not np.array_equal(a.gt.box, c.gt.box)
    assert not any(np.array_equal(x, y) for x, y in zip(ia, ic))


def test_render_scene_gives_the_render_true_pixels():
    ds, imgs = S.generate_scenes(8, seed=2, dontcare_per_image=0.5, crowd_per_image=0.5)
    lazy, none = S.generate_scenes(8, seed=2, render=False, dontcare_per_image=0.5, crowd_per_image=0.5)
    assert none is None
    np.testing.assert_array_equal(lazy.gt.box, ds.gt.box)
    for i in (7, 0, 3):  # any order: each image has its own random stream
        px = S.render_scene(lazy, i, seed=2)
        assert px.dtype == np.uint8 and px.shape == (120, 160, 3)
        np.testing.assert_array_equal(px, imgs[i])
    assert not np.array_equal(S.render_scene(lazy, 0, seed=3), imgs[0])  # the seed drives the pixels


def test_scene_geometry_and_kitti_fields(big_scene):
    ds = big_scene
    gt = ds.gt
    W, H = 160.0, 120.0
    b = gt.box
    assert np.all(b[:, 0] >= 0) and np.all(b[:, 2] <= W) and np.all(b[:, 1] >= 0) and np.all(b[:, 3] <= H)
    assert np.all(b[:, 2] > b[:, 0]) and np.all(b[:, 3] > b[:, 1])
    np.testing.assert_array_equal(b, np.round(b, 2))  # KITTI precision: lossless round trip
    counts = np.bincount(ds.images.index_of(gt.image_id), minlength=len(ds.images))
    assert counts.min() >= 0 and counts.max() <= 6 and counts.mean() > 3.0  # U{1..6} has mean 3.5, few drops
    assert set(np.unique(gt.category)) == {1, 4, 6}
    # aspect per class: Car wide, Pedestrian tall (full box for untruncated objects)
    wh = b[:, 2:] - b[:, :2]
    full = gt.truncation == 0
    ar = wh[:, 0] / wh[:, 1]
    assert np.all(ar[full & (gt.category == 1)] > 1.55) and np.all(ar[full & (gt.category == 4)] < 0.52)
    # truncation: ~10% of objects, 2 decimals in [0.05, 0.5], and exactly those touch the image edge
    t = gt.truncation
    assert 0.07 < (t > 0).mean() < 0.13
    np.testing.assert_array_equal(t, np.round(t, 2))
    assert np.all((t == 0) | ((t >= 0.05) & (t <= 0.5)))
    touches = (b[:, 0] == 0) | (b[:, 1] == 0) | (b[:, 2] == W) | (b[:, 3] == H)
    np.testing.assert_array_equal(touches, t > 0)
    # limited overlap: |bi ^ bj| / min(|bi|, |bj|) <= 0.35 within every image (first 300 images, by loops)
    for img in ds.images.id[:300]:
        rows = np.flatnonzero(gt.image_id == img)
        for i in rows:
            for j in rows[rows > i]:
                iw = min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0])
                ih = min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1])
                inter = max(iw, 0) * max(ih, 0)
                assert inter / min(wh[i].prod(), wh[j].prod()) <= 0.35 + 1e-9
    # difficulty, straight from the devkit rules (height > min, occ <= max, trunc <= max; easiest wins)
    h = wh[:, 1]
    expect = np.full(len(gt), -1)
    for name in ("hard", "moderate", "easy"):
        r = KITTI_DIFFICULTY[name]
        ok = (h > r["min_height"]) & (gt.occlusion <= r["max_occlusion"]) & (t <= r["max_truncation"])
        expect[ok] = r["level"]
    np.testing.assert_array_equal(gt.difficulty, expect)
    assert set(np.unique(gt.difficulty)) == {-1, 0, 1, 2}
    assert set(np.unique(gt.occlusion)) <= {0, 1, 2} and (gt.occlusion > 0).sum() > 50
    # 3-D dummies: pinhole z = f h3d / h_px with f = 721.5377 * 120 / 375 for untruncated boxes, up to
    # the 2-decimal rounding of the box (|dh| <= 0.01 px on h >= 8 px: 0.13%) and of z
    f = 721.5377 * H / 375.0
    np.testing.assert_allclose(gt.location[full, 2], f * gt.dimensions[full, 0] / h[full], rtol=2e-3, atol=0.006)
    assert np.all(np.abs(gt.alpha) <= np.pi + 0.01) and np.all(np.abs(gt.rotation_y) <= np.pi + 0.01)


def test_occlusion_levels_follow_draw_order():
    ds, _ = S.generate_scenes(300, seed=4, render=False, max_overlap=0.6)
    gt = ds.gt
    b = gt.box
    n_checked = 0
    for img in ds.images.id:
        rows = np.flatnonzero(gt.image_id == img)
        z = gt.location[rows, 2]
        for k, j in enumerate(rows):
            # objects drawn after j: nearer (smaller z), or equal z and a later row
            later = [i for m, i in enumerate(rows) if (z[m] < z[k]) or (z[m] == z[k] and m > k)]
            share = 0.0
            for i in later:
                iw = min(b[i, 2], b[j, 2]) - max(b[i, 0], b[j, 0])
                ih = min(b[i, 3], b[j, 3]) - max(b[i, 1], b[j, 1])
                share += max(iw, 0) * max(ih, 0)
            o = min(1.0, share / ((b[j, 2] - b[j, 0]) * (b[j, 3] - b[j, 1])))
            assert gt.occlusion[j] == (0 if o < 0.1 else 1 if o < 0.5 else 2)
            n_checked += o >= 0.1
    assert n_checked > 20


def test_pixels_show_the_class_colours():
    ds, imgs = S.generate_scenes(60, seed=8)
    gt = ds.gt
    means = {1: [], 4: [], 6: []}
    for r in np.flatnonzero((gt.occlusion == 0) & (gt.truncation == 0)):
        img = imgs[int(ds.images.index_of(gt.image_id[r : r + 1])[0])].astype(float)
        x1, y1, x2, y2 = gt.box[r]
        h = y2 - y1
        if gt.category[r] == 1:  # car body band: red
            patch = img[int(y1 + 0.5 * h) : int(y1 + 0.7 * h), int(x1 + 2) : int(x2 - 2)]
        elif gt.category[r] == 4:  # pedestrian torso: blue
            patch = img[int(y1 + 0.35 * h) : int(y1 + 0.5 * h), int((x1 + x2) / 2 - 1) : int((x1 + x2) / 2 + 1)]
        else:  # cyclist rider: yellow
            patch = img[int(y1 + 0.45 * h) : int(y1 + 0.55 * h), int((x1 + x2) / 2 - 1) : int((x1 + x2) / 2 + 1)]
        if patch.size:
            means[int(gt.category[r])].append(patch.reshape(-1, 3).mean(axis=0))
    car, ped, cyc = (np.mean(means[k], axis=0) for k in (1, 4, 6))
    assert car[0] > car[1] + 80 and car[0] > car[2] + 80
    assert ped[2] > ped[0] + 80 and ped[2] > ped[1] + 60
    assert cyc[0] > cyc[2] + 80 and cyc[1] > cyc[2] + 80


def test_empty_and_degenerate_inputs():
    ds, imgs = S.generate_scenes(0)
    assert len(ds.images) == 0 and imgs == [] and len(S.simulate_detector(ds)) == 0
    ds, imgs = S.generate_scenes(3, objects_per_image=(0, 0))
    assert len(ds.gt) == 0 and len(imgs) == 3
    dets = S.simulate_detector(ds, fp_per_image=3.0)
    assert len(dets) > 0 and np.all(dets.box[:, 2] > dets.box[:, 0])


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"n_images": -1}, "n_images"),
        ({"image_size": (8, 8)}, "image_size"),
        ({"objects_per_image": (3, 1)}, "objects_per_image"),
        ({"max_size": 500}, "max_size"),
        ({"truncated_fraction": 1.5}, "truncated_fraction"),
        ({"seed": -1}, "seed"),
    ],
)
def test_scene_input_errors_name_the_field(kwargs, field):
    args = {"n_images": 2, **kwargs}
    with pytest.raises(DetcalInputError) as e:
        S.generate_scenes(render=False, **args)
    assert e.value.field == field


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"border_overconfidence": 1.0}, "border_overconfidence"),
        ({"border_width": 0.7}, "border_width"),
        ({"std_scale": (1, 1, 1)}, "std_scale"),
        ({"std_scale": (1, 1, 0, 1)}, "std_scale"),
        ({"uncertainty": "cov"}, "uncertainty"),
        ({"score_decimals": -1}, "score_decimals"),
        ({"recall": 2.0}, "recall"),
    ],
)
def test_detector_input_errors_name_the_field(kwargs, field):
    ds, _ = S.generate_scenes(2, render=False)
    with pytest.raises(DetcalInputError) as e:
        S.simulate_detector(ds, **kwargs)
    assert e.value.field == field
    with pytest.raises(DetcalInputError):
        S.simulate_detector("not a dataset")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- simulated detector
def test_detector_deterministic_by_seed():
    ds, _ = S.generate_scenes(50, seed=1, render=False)
    a, b, c = S.simulate_detector(ds, seed=3), S.simulate_detector(ds, seed=3), S.simulate_detector(ds, seed=4)
    for f in ("image_id", "box", "score", "category", "proposal", "delta_mean", "delta_std"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f), err_msg=f)
    assert len(a) != len(c) or not np.array_equal(a.score, c.score)
    # grouped by image, 3-decimal scores, box = decode(proposal, delta_mean)
    assert np.all(np.diff(a.image_id) >= 0)
    np.testing.assert_array_equal(a.score, np.round(a.score, 3))
    np.testing.assert_allclose(encode_deltas(a.proposal, a.box), a.delta_mean, atol=1e-9)


def test_planted_confidence_calibrated_away_from_border_overconfident_near_it(big_scene):
    ds = big_scene
    dets = S.simulate_detector(ds, seed=0, border_overconfidence=0.5, border_width=0.15)
    best, _ = _max_iou_same_class(ds, dets)
    # TPs are boxes around a GT (IoU >= 0.5 w.h.p.), FPs overlap no GT (IoU < 0.1): nothing in between
    around = best >= 0.1
    assert around.sum() > 5000 and (~around).sum() > 2500
    assert (best[around] >= 0.5).mean() >= 0.99
    y = best >= 0.5
    s = dets.score
    border = _border_mask(ds, dets, 0.15)
    assert 0.2 < border.mean() < 0.6
    c, bd = ~border, border
    # away from the border P(TP | score) = score: ECE (10 bins) is only sampling noise
    # (~ sqrt(0.25 / 600) per bin ~ 0.02 at worst; weighted it averages lower)
    assert _binned_gap(s[c], y[c], s[c]) < 0.03
    # near it score = q ** 0.5, so precision = q = score ** 2: the gap to score^2 is small ...
    assert _binned_gap(s[bd], y[bd], s[bd] ** 2) < 0.03
    # ... and the over-confidence is E[sqrt(q) - q] > 0 (q ~ Beta with mean ~ 0.6: at least 0.1)
    assert (s[bd] - y[bd]).mean() > 0.1
    assert _binned_gap(s[bd], y[bd], s[bd]) > 0.1


def test_border_overconfidence_zero_is_calibrated_everywhere(big_scene):
    ds = big_scene
    dets = S.simulate_detector(ds, seed=1, border_overconfidence=0.0)
    best, _ = _max_iou_same_class(ds, dets)
    y = best >= 0.5
    border = _border_mask(ds, dets, 0.15)
    for m in (border, ~border):
        assert _binned_gap(dets.score[m], y[m], dets.score[m]) < 0.03
        assert abs((dets.score[m] - y[m]).mean()) < 0.02


def _dece(features: np.ndarray, y: np.ndarray, bins: int = 5, threshold: int = 8) -> float:
    """D-ECE (Kueppers 2020, docs/metrics.md, 'drop' policy): sum_c N_c |prec_c - conf_c| / sum_c N_c over
    cells with N_c >= threshold of the equal-width grid; features[:, 0] is the confidence."""
    idx = np.minimum((features * bins).astype(int), bins - 1)
    cell = np.ravel_multi_index(idx.T, (bins,) * features.shape[1])
    n = np.bincount(cell)
    gap = np.abs(np.bincount(cell, weights=y.astype(float)) - np.bincount(cell, weights=features[:, 0]))
    keep = n >= threshold
    return float(gap[keep].sum() / n[keep].sum())


def test_calibrated_part_is_calibrated_given_position_and_size():
    # D-ECE over (score, cx, cy, size) against its sampling floor: the same D-ECE of an oracle label
    # y' ~ Bernoulli(score). The per-group Beta parameter (position x size groups) is what makes the
    # detector calibrated given the box, not only on average: one global group must do visibly worse.
    ds, _ = S.generate_scenes(4000, seed=21, render=False)
    grouped = S.simulate_detector(ds, seed=1, border_overconfidence=0.0)
    single = S.simulate_detector(ds, seed=1, border_overconfidence=0.0, position_bins=1, size_bins=1)
    out = []
    for dets in (grouped, single):
        best, _ = _max_iou_same_class(ds, dets)
        c = xyxy_to_cxcywh(dets.box)
        f = np.stack([dets.score, c[:, 0] / 160, c[:, 1] / 120, 2 * np.sqrt(c[:, 2] * c[:, 3] / (160 * 120))], axis=1)
        f = np.clip(f, 0, 1)
        oracle = np.random.default_rng(0).random(len(dets)) < dets.score
        out.append((_dece(f, best >= 0.5), _dece(f, oracle)))
    (g, g_floor), (s, s_floor) = out
    assert g < g_floor + 0.006
    assert s > g + 0.008 and s > s_floor + 0.008


def test_planted_std_scale_and_heteroscedasticity(big_scene):
    ds = big_scene
    dets = S.simulate_detector(ds, seed=2, std_scale=(1.0, 1.0, 2.0, 0.5))
    best, row = _max_iou_same_class(ds, dets)
    tp = best >= 0.1  # every planted TP (FPs have IoU < 0.1), so no conditioning on the error size
    y = encode_deltas(dets.proposal[tp], ds.gt.box[row[tp]])
    e = y - dets.delta_mean[tp]
    ratio = np.sqrt(np.mean(e**2 / dets.delta_std[tp] ** 2, axis=0))
    # sigma_rep = sigma_true * scale  =>  sqrt(E[e^2 / sigma_rep^2]) = 1 / scale = (1, 1, 0.5, 2);
    # relative standard error 1 / sqrt(2 n) ~ 1% with n > 5000
    np.testing.assert_allclose(ratio, [1.0, 1.0, 0.5, 2.0], rtol=0.04)
    # C_v of log-uniform factors on [0.5, 1.5]: clearly heteroscedastic
    sd = dets.delta_std[tp]
    cv = sd.std(axis=0, ddof=1) / sd.mean(axis=0)
    assert np.all(cv > 0.2)


def test_box_std_is_the_first_order_propagation_of_the_delta_std():
    ds, _ = S.generate_scenes(200, seed=3, render=False)
    d = S.simulate_detector(ds, seed=5, uncertainty="delta", std_scale=(1.0, 2.0, 1.0, 0.5))
    b = S.simulate_detector(ds, seed=5, uncertainty="box_std", std_scale=(1.0, 2.0, 1.0, 0.5))
    n = S.simulate_detector(ds, seed=5, uncertainty="none")
    assert b.uncertainty_kind == "box_std" and n.uncertainty_kind is None and d.uncertainty_kind == "delta"
    np.testing.assert_array_equal(d.box, b.box)
    pw, ph = d.proposal[:, 2] - d.proposal[:, 0], d.proposal[:, 3] - d.proposal[:, 1]
    bw, bh = d.box[:, 2] - d.box[:, 0], d.box[:, 3] - d.box[:, 1]
    # cx = Px + tx Pw -> s_cx = s_tx Pw;  w = Pw exp(tw) -> s_w = Bw s_tw (same for y, h)
    np.testing.assert_allclose(b.box_std, d.delta_std * np.stack([pw, ph, bw, bh], axis=1), rtol=1e-12)
    # docs/formats.md: box records use P := B, mu = 0, sigma_t = (s_cx/Bw, s_cy/Bh, s_w/Bw, s_h/Bh);
    # the normalised residual e / sigma is then the same as with the delta records
    best, row = _max_iou_same_class(ds, d)
    tp = best >= 0.1
    g = ds.gt.box[row[tp]]
    z_delta = (encode_deltas(d.proposal[tp], g) - d.delta_mean[tp]) / d.delta_std[tp]
    sig_box = b.box_std[tp] / np.stack([bw, bh, bw, bh], axis=1)[tp]
    z_box = encode_deltas(b.box[tp], g) / sig_box
    np.testing.assert_allclose(z_box, z_delta, rtol=1e-6, atol=1e-9)


def test_false_positives_avoid_crowd_and_dontcare_regions():
    ds, _ = S.generate_scenes(400, seed=9, render=False, dontcare_per_image=1.0, crowd_per_image=0.5)
    assert ds.gt.iscrowd.sum() > 50 and (ds.gt.category == 9).sum() > 100
    dets = S.simulate_detector(ds, seed=0, fp_per_image=3.0)
    assert not np.isin(dets.category, [9]).any()
    gt = ds.gt
    lo = 0
    for img in np.unique(dets.image_id):
        di = np.flatnonzero(dets.image_id == img)
        gi = np.flatnonzero(gt.image_id == img)
        iou = pairwise_iou(dets.box[di], gt.box[gi], crowd=gt.iscrowd[gi])
        m = iou.max(axis=1)
        lo += int(((m >= 0.1) & (m < 0.5)).sum())
        # a detection overlapping an ignored region at all must be a planted TP of a regular GT
        ign = gt.ignore[gi]
        if ign.any():
            reg = iou[:, ~ign].max(axis=1) if (~ign).any() else np.zeros(len(di))
            assert np.all((iou[:, ign].max(axis=1) < 0.1) | (reg >= 0.1))
    assert lo <= 0.01 * len(dets)


def test_duplicates_are_extra_boxes_around_detected_gts(big_scene):
    ds = big_scene
    base = S.simulate_detector(ds, seed=0, fp_per_image=0.0)
    dup = S.simulate_detector(ds, seed=0, fp_per_image=0.0, duplicate_rate=1.0)
    # Poisson(1) extra per detected GT: about as many again
    assert 1.8 < len(dup) / len(base) < 2.2
    best, _ = _max_iou_same_class(ds, dup)
    assert (best >= 0.5).mean() > 0.98


# --------------------------------------------------------------------------- COCO scale
def test_coco_scale_has_realistic_structure():
    ds, dets = S.generate_coco_scale(n_images=5000, dets_per_image=60, seed=0)
    assert 250_000 < len(dets) < 350_000
    per_image = np.bincount(dets.image_id)
    assert per_image.max() <= 100
    assert len(np.unique(dets.category)) >= 6 and len(np.unique(ds.gt.category)) >= 6
    assert 0.005 < ds.gt.iscrowd.mean() < 0.015
    np.testing.assert_array_equal(ds.gt.ignore, ds.gt.iscrowd)
    np.testing.assert_array_equal(dets.score, np.round(dets.score, 3))
    key = np.stack([dets.image_id, dets.category, np.round(dets.score * 1000)], axis=1)
    assert len(key) - len(np.unique(key, axis=0)) > 500  # score ties within (image, class)
    assert dets.uncertainty_kind == "delta"
    a, b = S.generate_coco_scale(n_images=20, seed=1), S.generate_coco_scale(n_images=20, seed=1)
    np.testing.assert_array_equal(a[1].box, b[1].box)


def test_coco_scale_exercises_exclusive_matching_in_pycocotools():
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from detcal.core.boxes import xyxy_to_xywh

    ds, dets = S.generate_coco_scale(n_images=150, dets_per_image=60, seed=3)
    gt = ds.gt
    xywh = xyxy_to_xywh(gt.box)
    coco = COCO()
    coco.dataset = {
        "images": [
            {"id": int(i), "width": int(w), "height": int(h)}
            for i, w, h in zip(ds.images.id, ds.images.width, ds.images.height)
        ],
        "annotations": [
            {
                "id": int(k),
                "image_id": int(i),
                "category_id": int(c),
                "bbox": list(map(float, bb)),
                "area": float(bb[2] * bb[3]),
                "iscrowd": int(cr),
            }
            for k, i, c, bb, cr in zip(gt.id, gt.image_id, gt.category, xywh, gt.iscrowd)
        ],
        "categories": [{"id": k, "name": v} for k, v in ds.categories.items()],
    }
    res = [
        {"image_id": int(i), "category_id": int(c), "bbox": list(map(float, bb)), "score": float(s)}
        for i, c, bb, s in zip(dets.image_id, dets.category, xyxy_to_xywh(dets.box), dets.score)
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        cdt = coco.loadRes(res)
        E = COCOeval(coco, cdt, "bbox")
        E.params.iouThrs = np.array([0.5])
        E.params.areaRng = [E.params.areaRng[0]]
        E.params.areaRngLbl = ["all"]
        E.params.maxDets = [100]
        E.evaluate()
    matched = ignored = 0
    dt_ids = []
    for e in E.evalImgs:
        if e is None:
            continue
        matched += int((e["dtMatches"][0] > 0).sum())
        ignored += int(e["dtIgnore"][0].astype(bool).sum())
        dt_ids.extend(e["dtIds"])
    assert len(dt_ids) == len(dets)  # <= 100 per image: nothing cut by maxDets
    best, _ = _max_iou_same_class(ds, dets)
    n_max = int((best >= 0.5).sum())
    # duplicates: many more detections overlap a same-class GT at 0.5 than exclusive matching can match
    assert n_max > 1.5 * matched and matched > 500
    assert ignored > 20  # detections absorbed by crowd boxes


# --------------------------------------------------------------------------- writer
def test_write_synthetic_writes_parsable_files(tmp_path):
    pytest.importorskip("detcal.data.coco")
    pytest.importorskip("detcal.data.kitti")
    from detcal.data.kitti import load_kitti_labels

    kw = {"std_scale": [1.0, 1.0, 2.0, 0.5], "border_overconfidence": 0.3}
    paths = S.write_synthetic(
        tmp_path / "syn", n_images=12, seed=4, detector_kwargs=kw, scene_kwargs={"dontcare_per_image": 0.5}
    )
    root = tmp_path / "syn"
    for role in ("images", "coco_instances", "coco_results", "kitti_labels", "kitti_results", "kitti_sizes", "meta"):
        assert paths[role].exists(), role
    pngs = sorted((root / "images").glob("*.png"))
    assert [p.name for p in pngs] == [f"{i:06d}.png" for i in range(1, 13)]
    ds, _ = S.generate_scenes(12, seed=4, render=False, dontcare_per_image=0.5)
    np.testing.assert_array_equal(np.asarray(Image.open(pngs[3])), S.render_scene(ds, 3, seed=4))
    inst = json.loads(paths["coco_instances"].read_text())
    assert len(inst["images"]) == 12 and len(inst["annotations"]) == len(ds.gt)
    assert {c["id"]: c["name"] for c in inst["categories"]} == {1: "Car", 4: "Pedestrian", 6: "Cyclist", 9: "DontCare"}
    res = json.loads(paths["coco_results"].read_text())
    assert len(res) > 12 and {"image_id", "category_id", "bbox", "score", "proposal", "delta_mean", "delta_std"} <= set(
        res[0]
    )
    labels = sorted(paths["kitti_labels"].glob("*.txt"))
    assert len(labels) == 12
    rows = [ln.split() for p in labels for ln in p.read_text().splitlines()]
    assert len(rows) == len(ds.gt) and all(len(r) == 15 for r in rows)
    rrows = [ln.split() for p in paths["kitti_results"].glob("*.txt") for ln in p.read_text().splitlines()]
    assert len(rrows) == len(res) and all(len(r) == 16 for r in rrows)
    sizes = paths["kitti_sizes"].read_text().split("\n")
    assert sizes[0] == "000001 160 120" and len([s for s in sizes if s]) == 12
    meta = json.loads(paths["meta"].read_text())
    assert meta["seed"] == 4 and meta["detector_params"]["std_scale"] == [1.0, 1.0, 2.0, 0.5]
    assert meta["detector_params"]["border_overconfidence"] == 0.3
    assert meta["planted"]["std_scaling_target"] == [1.0, 1.0, 0.5, 2.0]
    assert meta["scene_params"]["dontcare_per_image"] == 0.5 and meta["counts"]["n_detections"] == len(res)
    # the KITTI files read back to exactly the generated records
    back = load_kitti_labels(paths["kitti_labels"], sizes=paths["kitti_sizes"])
    for f in (
        "image_id",
        "box",
        "category",
        "truncation",
        "occlusion",
        "difficulty",
        "alpha",
        "dimensions",
        "location",
        "rotation_y",
    ):
        np.testing.assert_array_equal(getattr(back.gt, f), getattr(ds.gt, f), err_msg=f)
    # the COCO results carry the simulated detector's records (same seed, same parameters)
    from detcal.data.coco import load_coco_results

    dets = S.simulate_detector(ds, seed=4, **kw)
    got = load_coco_results(paths["coco_results"])
    np.testing.assert_array_equal(got.score, dets.score)
    np.testing.assert_array_equal(got.category, dets.category)
    np.testing.assert_array_equal(got.delta_std, dets.delta_std)
    np.testing.assert_allclose(got.proposal, dets.proposal, rtol=0, atol=1e-9)
    with pytest.raises(DetcalInputError):
        S.write_synthetic(tmp_path / "bad", n_images=2, detector_kwargs={"nope": 1}, render=False)
