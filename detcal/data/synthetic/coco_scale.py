"""COCO-val-scale ground truth and detections for tests and benchmarks."""

from __future__ import annotations

import numpy as np

from detcal.core.boxes import decode_deltas, encode_deltas
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.data.synthetic._common import COCO_SCALE_CATEGORIES, STREAM_COCO, check, stream_rng
from detcal.data.synthetic.detector import records_around

# --------------------------------------------------------------------------- COCO-scale benchmark data


def _coco_gt(
    rng: np.random.Generator,
    wh_img: np.ndarray,
    cats: np.ndarray,
    crowd_fraction: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """GT image row, category, box [G,4] and crowd flag [G] (see :func:`generate_coco_scale`)."""
    N = len(wh_img)
    n_gt = 1 + rng.poisson(6.0, size=N)
    g_img = np.repeat(np.arange(N), n_gt)
    G = len(g_img)
    probs = np.full(len(cats), 0.6 / (len(cats) - 1))
    probs[0] = 0.4
    g_cat = cats[rng.choice(len(cats), size=G, p=probs)]
    Wg, Hg = wh_img[g_img, 0], wh_img[g_img, 1]
    s = np.exp(rng.uniform(np.log(8.0), np.log(0.6 * np.minimum(Wg, Hg))))
    ar = np.exp(rng.uniform(np.log(1 / 3), np.log(3.0), size=G))
    crowd = rng.random(G) < crowd_fraction
    s = np.where(crowd, 2.5 * s, s)
    w, h = np.minimum(s * np.sqrt(ar), Wg), np.minimum(s / np.sqrt(ar), Hg)
    x1, y1 = rng.random(G) * (Wg - w), rng.random(G) * (Hg - h)
    g_box = np.round(np.stack([x1, y1, x1 + w, y1 + h], axis=1), 2)
    return g_img, g_cat, g_box, crowd


def _background_and_crowd_boxes(
    rng: np.random.Generator,
    wh_det: np.ndarray,
    cb: np.ndarray,
    in_crowd: np.ndarray,
) -> np.ndarray:
    """Boxes [D,4] anywhere in the image (background), or inside the crowd box ``cb`` where ``in_crowd``."""
    D = len(wh_det)
    Wd, Hd = wh_det[:, 0], wh_det[:, 1]
    bs = np.exp(rng.uniform(np.log(8.0), np.log(0.5 * np.minimum(Wd, Hd))))
    bar = np.exp(rng.uniform(np.log(1 / 3), np.log(3.0), size=D))
    bw_, bh_ = np.minimum(bs * np.sqrt(bar), Wd), np.minimum(bs / np.sqrt(bar), Hd)
    bx, by = rng.random(D) * (Wd - bw_), rng.random(D) * (Hd - bh_)
    box = np.stack([bx, by, bx + bw_, by + bh_], axis=1)
    frac = rng.uniform(0.15, 0.5, size=(D, 2))
    cw, ch = (cb[:, 2] - cb[:, 0]) * frac[:, 0], (cb[:, 3] - cb[:, 1]) * frac[:, 1]
    cx0 = cb[:, 0] + rng.random(D) * (cb[:, 2] - cb[:, 0] - cw)
    cy0 = cb[:, 1] + rng.random(D) * (cb[:, 3] - cb[:, 1] - ch)
    return np.where(in_crowd[:, None], np.stack([cx0, cy0, cx0 + cw, cy0 + ch], axis=1), box)


def _pick_gt(
    rng: np.random.Generator, mask: np.ndarray, g_img: np.ndarray, d_img: np.ndarray, N: int
) -> tuple[np.ndarray, np.ndarray]:
    """A random GT row of each detection's image among ``mask`` rows (-1 when none), and whether there is one."""
    D = len(d_img)
    rows = np.flatnonzero(mask)
    cnt = np.bincount(g_img[rows], minlength=N)
    start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
    k = cnt[d_img]
    r = start[d_img] + np.floor(rng.random(D) * np.maximum(k, 1)).astype(np.int64)
    return np.where(k > 0, rows[np.minimum(r, max(len(rows) - 1, 0))] if len(rows) else -1, -1), k > 0


def generate_coco_scale(
    n_images: int = 5000,
    dets_per_image: int = 60,
    seed: int = 0,
    crowd_fraction: float = 0.01,
    score_decimals: int = 3,
) -> tuple[Dataset, Detections]:
    """COCO-val-scale records (no pixels) for benchmarks and pycocotools parity tests.

    Images: sizes from {640x480, 480x640, 640x427, 500x375, 640x640}; GT per
    image 1 + Poisson(6) over :data:`COCO_SCALE_CATEGORIES` (person 40%, the
    rest uniform); sqrt area ~ LogU[8, 0.6 min(W, H)], aspect ~ LogU[1/3, 3];
    a ``crowd_fraction`` of GTs are crowd (iscrowd = ignore = True) and 2.5x
    larger. Detections per image ~ U{dets/2 .. min(100, 3 dets/2)} (mean ~
    ``dets_per_image``; at most 100 so pycocotools' maxDets=100 keeps all):
    55% around a random regular GT of the image (``delta`` records as
    :func:`simulate_detector` with sigma ~ 0.02..0.4 per detection: many
    overlapping duplicates with IoU from ~0.3 to ~1, 90% with the GT's class),
    5% inside a crowd box of the image (if any), the rest anywhere.
    Scores ``Beta(5, 2) * exp(-2 sigma_mean)`` around GTs, ``Beta(1, 4)``
    otherwise, rounded to ``score_decimals`` (ties). Rows grouped by image in
    random order within an image.
    """
    check(
        isinstance(n_images, (int, np.integer)) and n_images >= 0, f"expected an int >= 0, got {n_images!r}", "n_images"
    )
    check(
        isinstance(dets_per_image, (int, np.integer)) and 1 <= dets_per_image <= 100,
        f"expected an int in 1..100, got {dets_per_image!r}",
        "dets_per_image",
    )
    check(0.0 <= crowd_fraction <= 1.0, f"expected a fraction in [0, 1], got {crowd_fraction}", "crowd_fraction")
    check(
        isinstance(score_decimals, (int, np.integer)) and 0 <= score_decimals <= 15,
        f"expected an int in 0..15, got {score_decimals!r}",
        "score_decimals",
    )
    rng = stream_rng(seed, STREAM_COCO)
    N = int(n_images)
    sizes = np.array([[640, 480], [480, 640], [640, 427], [500, 375], [640, 640]], dtype=np.float64)
    wh_img = sizes[rng.integers(0, len(sizes), size=N)]
    cats = np.array(sorted(COCO_SCALE_CATEGORIES), dtype=np.int64)
    g_img, g_cat, g_box, crowd = _coco_gt(rng, wh_img, cats, crowd_fraction)
    ids = np.arange(1, N + 1, dtype=np.int64)
    images = Images(id=ids, width=wh_img[:, 0], height=wh_img[:, 1], file_name=[f"{i:012d}.jpg" for i in ids])
    gt = GroundTruth(image_id=ids[g_img], box=g_box, category=g_cat, iscrowd=crowd, ignore=crowd)
    dataset = Dataset(
        images=images, gt=gt, categories=dict(COCO_SCALE_CATEGORIES), source=f"coco_scale(seed={int(seed)})"
    )

    n_det = rng.integers(dets_per_image // 2, min(100, 3 * dets_per_image // 2) + 1, size=N)
    d_img = np.repeat(np.arange(N), n_det)
    D = len(d_img)
    kind_u = rng.random(D)

    reg_gt, has_reg = _pick_gt(rng, ~crowd, g_img, d_img, N)
    crowd_gt, has_crowd = _pick_gt(rng, crowd, g_img, d_img, N)
    around = (kind_u < 0.55) & has_reg
    in_crowd = (kind_u >= 0.55) & (kind_u < 0.60) & has_crowd
    box = _background_and_crowd_boxes(rng, wh_img[d_img], g_box[np.maximum(crowd_gt, 0)], in_crowd)
    # around GTs: delta records with widely varying sigma -> duplicates over a range of IoUs
    level = np.exp(rng.uniform(np.log(0.02), np.log(0.4), size=D))
    target = g_box[np.maximum(reg_gt, 0)]
    prop, mu, sig, dbox = records_around(
        rng, target, level[:, None] * np.array([1.0, 1.0, 1.5, 1.5]), (0.7, 1.4), np.array([0.1, 0.1, 0.1, 0.1])
    )
    box = np.where(around[:, None], dbox, box)
    bprop = decode_deltas(box, rng.normal(size=(D, 4)) * 0.1)
    proposal = np.where(around[:, None], prop, bprop)
    mean = np.where(around[:, None], mu, encode_deltas(bprop, box))
    std = np.where(around[:, None], sig, 0.1 * np.exp(rng.uniform(np.log(0.5), np.log(2.0), size=(D, 4))))
    rand_cat = cats[rng.integers(0, len(cats), size=D)]
    keep_cat = rng.random(D) < 0.9
    category = np.where(around & keep_cat, g_cat[np.maximum(reg_gt, 0)], np.where(in_crowd, 1, rand_cat))
    score = np.where(around, rng.beta(5.0, 2.0, size=D) * np.exp(-2.0 * level), rng.beta(1.0, 4.0, size=D))
    score = np.round(score, int(score_decimals))
    order = np.lexsort((rng.random(D), d_img))
    dets = Detections(
        image_id=ids[d_img[order]],
        box=box[order],
        score=score[order],
        category=category[order],
        proposal=proposal[order],
        delta_mean=mean[order],
        delta_std=std[order],
    )
    return dataset, dets
