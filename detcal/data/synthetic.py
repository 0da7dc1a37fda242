"""Synthetic scenes and a simulated detector with a KNOWN, planted miscalibration.

numpy and PIL only (never torch, never Hydra). Everything is seeded with
``np.random.default_rng`` and fully determined by the seed; the three random
streams are independent (``SeedSequence`` entropy ``[seed, stream, ...]``):
stream 0 draws the scene records, stream 1 the simulated detector, stream 2
(with the image id) the pixels of one image, so that any single image can be
rendered on its own (:func:`render_scene`) with the same pixels as
``generate_scenes(..., render=True)``.

Scenes (:func:`generate_scenes`)
    Images ``W x H`` (default 160 x 120) with a textured, noisy background and
    1..6 objects of the KITTI classes Car (id 1, a wide red body with a cabin,
    windows and two wheels), Pedestrian (id 4, a tall figure: head, blue torso,
    legs) and Cyclist (id 6, two green wheels with a yellow rider). Category
    ids and names are the fixed KITTI ones (``detcal.types.KITTI_CATEGORIES``)
    so the same records write to COCO and KITTI without any remapping.
    Geometric size ``s = sqrt(w h)`` is log-uniform in ``[min_size,
    max_size]``, the aspect ``w/h`` uniform per class (Car 1.6-2.4,
    Pedestrian 0.35-0.5, Cyclist 0.7-1.0). Overlap is limited: for any two
    boxes of an image ``inter / min(area_i, area_j) <= max_overlap``
    (rejection sampling, vectorised over all images; objects still in conflict
    after ``_PLACEMENT_ROUNDS`` rounds are dropped).

    KITTI fields, consistent with the pixels:

    * truncation: a fraction ``truncated_fraction`` of the objects straddles
      one image edge; truncation ``t`` (2 decimals, U[0.05, 0.5]) is the share
      of the object's extent along that axis (= of its area) outside the image,
      the box is the visible (clipped) part. Others lie >= 1 px inside: t = 0.
    * occlusion: objects are drawn far to near (KITTI depth ``z``, ties by row);
      occluded share ``o_j = min(1, sum_{i drawn after j} |b_i ^ b_j| / |b_j|)``;
      level 0 if o < 0.1, 1 if o < 0.5, else 2 (3 "unknown" is never used).
    * difficulty: :func:`detcal.data.kitti.kitti_difficulty` (devkit rules:
      0 easy if height > 40 px, occlusion <= 0, truncation <= 0.15; 1 moderate
      if height > 25, occ <= 1, trunc <= 0.30; 2 hard if height > 25, occ <= 2,
      trunc <= 0.50; else -1); -1 for DontCare and crowd boxes. ``ignore`` is
      False on every regular box: the KITTI reader sets it per evaluated level.
    * 3-D dummies: dimensions (h, w, l) = class mean * exp(N(0, 0.05^2)) m;
      pinhole camera with KITTI's focal 721.54 px scaled by H/375:
      ``z = f h_3d / h_px`` (full, unclipped pixel height),
      ``x = (cx - W/2) z / f``, ``y = (y2 - H/2) z / f``; rotation_y ~
      U(-pi, pi); ``alpha = wrap(rotation_y - atan2(x, z))``. All 2 decimals.
    * optional (off by default): ``dontcare_per_image`` DontCare regions
      (category 9, ignore=True, truncation NaN and the KITTI sentinels occ -1,
      alpha -10, dims -1, location -1000, rotation -10, as the KITTI reader
      gives them back; rendered as a noise patch) and
      ``crowd_per_image`` COCO crowd boxes (Pedestrian, iscrowd = ignore =
      True; rendered as a row of small figures; a COCO concept: the KITTI
      writer sees an ordinary Pedestrian row).

    GT boxes are rounded to 2 decimals (the KITTI label precision), so the
    records survive a KITTI round trip unchanged. Image ids are 1..N and file
    names ``<id:06d>.png``.

Simulated detector (:func:`simulate_detector`): see its docstring for the
planted miscalibration and its exact formulas.
"""
from __future__ import annotations

import inspect
import io
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from detcal.boxes import area, decode_deltas, encode_deltas, xyxy_to_cxcywh
from detcal.data.kitti import kitti_difficulty
from detcal.errors import DetcalInputError
from detcal.types import COORDS, Dataset, Detections, GroundTruth, Images
from detcal.utils.io import write_bytes, write_json, write_text

SYNTHETIC_CATEGORIES: dict[int, str] = {1: "Car", 4: "Pedestrian", 6: "Cyclist"}
"""Object classes of the synthetic scenes, with the fixed KITTI ids and names."""

DONTCARE_CATEGORY: int = 9
"""KITTI id of ``DontCare`` (``detcal.types.KITTI_CATEGORIES[9]``)."""

COCO_SCALE_CATEGORIES: dict[int, str] = {
    1: "person", 2: "bicycle", 3: "car", 4: "motorcycle", 6: "bus", 8: "truck", 18: "dog", 44: "bottle",
}
"""Categories of :func:`generate_coco_scale` (COCO ids, non-contiguous on purpose)."""

_ASPECT: dict[int, tuple[float, float]] = {1: (1.6, 2.4), 4: (0.35, 0.5), 6: (0.7, 1.0)}
_DIMS_3D: dict[int, tuple[float, float, float]] = {
    1: (1.53, 1.63, 3.88), 4: (1.76, 0.66, 0.84), 6: (1.74, 0.60, 1.76),
}
_KITTI_FOCAL = 721.5377
_KITTI_IMAGE_HEIGHT = 375.0
_PLACEMENT_ROUNDS = 30
_FP_ROUNDS = 30
_FP_MAX_IOU = 0.1
_B_MIN, _B_MAX = 1e-3, 1e3
_STREAM_SCENES, _STREAM_DETECTOR, _STREAM_PIXELS, _STREAM_COCO = 0, 1, 2, 3
_KIND_OBJECT, _KIND_CROWD, _KIND_DONTCARE = 0, 1, 2


# --------------------------------------------------------------------------- validation


def _check(cond: bool, message: str, field: str, record: Any = None) -> None:
    if not cond:
        raise DetcalInputError(message, record=record, field=field)


def _check_pair(value: Any, field: str, positive: bool = True) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise DetcalInputError(f"expected two numbers, got {value!r}", field=field) from None
    _check(a <= b, f"expected lower <= upper, got {value!r}", field)
    if positive:
        _check(a > 0, f"expected positive values, got {value!r}", field)
    return a, b


def _check_vec4(value: Any, field: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    _check(arr.shape == (4,), f"expected 4 values (one per coordinate {COORDS}), got {value!r}", field)
    _check(bool(np.all(np.isfinite(arr)) and np.all(arr > 0)), f"expected 4 finite positive values, got {value!r}", field)
    return arr


def _rng(seed: int, stream: int, *extra: int) -> np.random.Generator:
    _check(isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0,
           f"expected an int >= 0, got {seed!r}", "seed")
    return np.random.default_rng([int(seed), stream, *[int(e) for e in extra]])


# --------------------------------------------------------------------------- grouping helpers


def _padded_groups(group: np.ndarray, n_groups: int) -> np.ndarray:
    """Rows of each group as a padded matrix ``[n_groups, M]`` (-1 pads), rows in input order."""
    group = np.asarray(group, dtype=np.int64)
    counts = np.bincount(group, minlength=n_groups)
    m = int(counts.max()) if len(counts) and len(group) else 0
    order = np.argsort(group, kind="stable")
    starts = np.cumsum(counts) - counts
    slot = np.arange(len(group)) - np.repeat(starts, counts)
    pad = np.full((n_groups, max(m, 1)), -1, dtype=np.int64)
    pad[group[order], slot] = order
    return pad


def _gather(arr: np.ndarray, pad: np.ndarray, fill: Any) -> np.ndarray:
    """``arr[pad]`` with ``fill`` where ``pad == -1`` (works for an empty ``arr``)."""
    ext = np.concatenate([arr, np.full((1,) + arr.shape[1:], fill, dtype=arr.dtype)])
    return ext[pad]


def _intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise (broadcast) intersection area of xyxy boxes ``a`` [...,4] and ``b`` [...,4]."""
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    return np.clip(iw, 0, None) * np.clip(ih, 0, None)


# --------------------------------------------------------------------------- scenes


def _scene_params(
    n_images: int,
    image_size: Sequence[int],
    objects_per_image: Sequence[int],
    min_size: float,
    max_size: float,
    truncated_fraction: float,
    max_overlap: float,
    dontcare_per_image: float,
    crowd_per_image: float,
) -> dict[str, Any]:
    _check(isinstance(n_images, (int, np.integer)) and n_images >= 0, f"expected an int >= 0, got {n_images!r}", "n_images")
    try:
        w, h = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise DetcalInputError(f"expected (width, height), got {image_size!r}", field="image_size") from None
    _check(w >= 16 and h >= 16, f"expected width and height >= 16 px, got {image_size!r}", "image_size")
    lo, hi = _check_pair(objects_per_image, "objects_per_image", positive=False)
    _check(lo >= 0 and lo == int(lo) and hi == int(hi), f"expected integers >= 0, got {objects_per_image!r}", "objects_per_image")
    smin, smax = _check_pair((min_size, max_size), "min_size/max_size")
    _check(smin >= 4, f"min_size must be >= 4 px, got {min_size}", "min_size")
    _check(smax <= min(w, h) - 2, f"max_size must be <= min(image_size) - 2 = {min(w, h) - 2}, got {max_size}", "max_size")
    _check(0.0 <= truncated_fraction <= 1.0, f"expected a fraction in [0, 1], got {truncated_fraction}", "truncated_fraction")
    _check(0.0 <= max_overlap <= 1.0, f"expected a value in [0, 1], got {max_overlap}", "max_overlap")
    _check(dontcare_per_image >= 0, f"expected a rate >= 0, got {dontcare_per_image}", "dontcare_per_image")
    _check(crowd_per_image >= 0, f"expected a rate >= 0, got {crowd_per_image}", "crowd_per_image")
    return {
        "n_images": int(n_images), "image_size": [w, h], "objects_per_image": [int(lo), int(hi)],
        "min_size": smin, "max_size": smax, "truncated_fraction": float(truncated_fraction),
        "max_overlap": float(max_overlap), "dontcare_per_image": float(dontcare_per_image),
        "crowd_per_image": float(crowd_per_image),
    }


def _object_sizes(rng: np.random.Generator, kind: np.ndarray, cat: np.ndarray, p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Full (unclipped) width and height [G] in pixels."""
    g = len(kind)
    W, H = p["image_size"]
    s = np.exp(rng.uniform(np.log(p["min_size"]), np.log(p["max_size"]), size=g))
    u = rng.random(g)
    lo = np.select([cat == 1, cat == 4, cat == 6], [_ASPECT[1][0], _ASPECT[4][0], _ASPECT[6][0]], 1.0)
    hi = np.select([cat == 1, cat == 4, cat == 6], [_ASPECT[1][1], _ASPECT[4][1], _ASPECT[6][1]], 1.0)
    ar = lo + u * (hi - lo)
    # crowd: a wide row of figures; DontCare: any aspect in [0.5, 3]
    ar = np.where(kind == _KIND_CROWD, 1.5 + 1.5 * u, ar)
    ar = np.where(kind == _KIND_DONTCARE, 0.5 + 2.5 * u, ar)
    w, h = s * np.sqrt(ar), s / np.sqrt(ar)
    fit = np.minimum(1.0, np.minimum((W - 2.0) / w, (H - 2.0) / h))
    return w * fit, h * fit


def _place(
    rng: np.random.Generator, w: np.ndarray, h: np.ndarray, trunc: np.ndarray, edge: np.ndarray, W: int, H: int
) -> np.ndarray:
    """Full boxes [n,4]: inside ``[1, W-1] x [1, H-1]``, or straddling ``edge`` by the share ``trunc``."""
    n = len(w)
    ux, uy = rng.random(n), rng.random(n)
    x1 = 1.0 + ux * (W - 2.0 - w)
    y1 = 1.0 + uy * (H - 2.0 - h)
    x1 = np.where((trunc > 0) & (edge == 0), -trunc * w, x1)
    x1 = np.where((trunc > 0) & (edge == 1), W - (1.0 - trunc) * w, x1)
    y1 = np.where((trunc > 0) & (edge == 2), -trunc * h, y1)
    y1 = np.where((trunc > 0) & (edge == 3), H - (1.0 - trunc) * h, y1)
    return np.stack([x1, y1, x1 + w, y1 + h], axis=-1)


def _visible(full: np.ndarray, W: float, H: float) -> np.ndarray:
    lim = np.array([W, H, W, H], dtype=np.float64)
    return np.round(np.clip(full, 0.0, lim), 2)


def _conflicts(vis: np.ndarray, pad: np.ndarray, valid: np.ndarray, max_overlap: float) -> np.ndarray:
    """Rows [G] bool: overlaps an earlier valid row of its image by more than ``max_overlap``.

    Overlap = ``|b_i ^ b_j| / min(|b_i|, |b_j|)`` over the padded per-image matrix [N, M, M].
    """
    ok = pad >= 0
    b = _gather(vis, pad, np.nan)
    inter = _intersection(b[:, :, None, :], b[:, None, :, :])
    ar = area(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = inter / np.minimum(ar[:, :, None], ar[:, None, :])
    vmask = ok & _gather(valid, pad, False)
    m = pad.shape[1]
    earlier = np.tril(np.ones((m, m), bool), k=-1)  # [j, i]: i < j
    bad = (np.nan_to_num(ratio, nan=0.0) > max_overlap) & earlier[None] & vmask[:, None, :] & vmask[:, :, None]
    out = np.zeros(len(vis), bool)
    out[pad[ok]] = bad.any(axis=2)[ok]
    return out


def _draw_order_key(category: np.ndarray, iscrowd: np.ndarray, location: np.ndarray | None, box: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(kind rank, -depth): DontCare first, then crowds, then objects far to near."""
    rank = np.where(category == DONTCARE_CATEGORY, 0, np.where(iscrowd, 1, 2))
    if location is not None:
        depth = location[:, 2]
    else:  # records without 3-D fields: taller = nearer
        depth = -(box[:, 3] - box[:, 1])
    return rank, -depth


def _occlusion(vis: np.ndarray, image_row: np.ndarray, n_images: int, draw_rank: np.ndarray) -> np.ndarray:
    """Occluded share o [G] = min(1, sum over boxes drawn later of intersection / own area)."""
    pad = _padded_groups(image_row, n_images)
    ok = pad >= 0
    b = _gather(vis, pad, 0.0)
    inter = _intersection(b[:, :, None, :], b[:, None, :, :])  # [N, j, i]
    r = _gather(draw_rank, pad, -1)
    later = (r[:, None, :] > r[:, :, None]) & ok[:, None, :] & ok[:, :, None]
    share = np.where(later, inter, 0.0).sum(axis=2)
    ar = area(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(ar > 0, share / ar, 0.0)
    out = np.zeros(len(vis))
    out[pad[ok]] = np.minimum(frac[ok], 1.0)
    return out


def generate_scenes(
    n_images: int,
    seed: int = 0,
    image_size: tuple[int, int] = (160, 120),
    objects_per_image: tuple[int, int] = (1, 6),
    min_size: float = 12,
    max_size: float = 60,
    render: bool = True,
    *,
    truncated_fraction: float = 0.1,
    max_overlap: float = 0.35,
    dontcare_per_image: float = 0.0,
    crowd_per_image: float = 0.0,
) -> tuple[Dataset, list[np.ndarray] | None]:
    """Seeded synthetic scenes: ground-truth records and (optionally) the rendered images.

    Records are drawn for all images at once (no per-object Python loop):
    objects per image ~ U{lo..hi}; category uniform over
    :data:`SYNTHETIC_CATEGORIES`; ``s = sqrt(w h)`` ~ LogU[min_size, max_size];
    aspect per class; positions uniform; a ``truncated_fraction`` straddles an
    edge; DontCare regions ~ Poisson(``dontcare_per_image``) and crowd boxes ~
    Poisson(``crowd_per_image``) per image (both off by default). Overlap
    ``|b_i ^ b_j| / min(|b_i|, |b_j|) <= max_overlap`` by rejection. The KITTI
    fields (truncation, occlusion, difficulty, 3-D dummies) follow the module
    docstring.

    Returns ``(dataset, images)``: images are uint8 ``[H, W, 3]`` arrays equal to
    ``render_scene(dataset, i, seed)`` for row ``i``, or ``None`` when
    ``render=False`` (records only: 10K scenes need not sit in memory).
    """
    p = _scene_params(n_images, image_size, objects_per_image, min_size, max_size, truncated_fraction,
                      max_overlap, dontcare_per_image, crowd_per_image)
    W, H = p["image_size"]
    N = p["n_images"]
    rng = _rng(seed, _STREAM_SCENES)
    lo, hi = p["objects_per_image"]
    n_obj = rng.integers(lo, hi + 1, size=N)
    n_dc = rng.poisson(p["dontcare_per_image"], size=N)
    n_crowd = rng.poisson(p["crowd_per_image"], size=N)
    # per image: crowds and DontCare first, then objects (order = row order)
    per_image = np.stack([n_dc, n_crowd, n_obj], axis=1).reshape(-1)
    kind = np.repeat(np.tile([_KIND_DONTCARE, _KIND_CROWD, _KIND_OBJECT], N), per_image)
    image_row = np.repeat(np.repeat(np.arange(N), 3), per_image)
    g = len(kind)
    classes = np.array(sorted(SYNTHETIC_CATEGORIES), dtype=np.int64)
    cat = classes[rng.integers(0, len(classes), size=g)]
    cat = np.where(kind == _KIND_CROWD, 4, np.where(kind == _KIND_DONTCARE, DONTCARE_CATEGORY, cat))
    w, h = _object_sizes(rng, kind, cat, p)
    truncated = (rng.random(g) < p["truncated_fraction"]) & (kind == _KIND_OBJECT)
    trunc = np.where(truncated, np.round(rng.uniform(0.05, 0.5, size=g), 2), 0.0)
    edge = rng.integers(0, 4, size=g)

    full = _place(rng, w, h, trunc, edge, W, H)
    vis = _visible(full, W, H)
    valid = np.ones(g, bool)
    pad = _padded_groups(image_row, N)
    active = pad  # rows of pad (images) that may hold a conflict: first all, then those that moved
    for _ in range(_PLACEMENT_ROUNDS):
        bad = _conflicts(vis, active, valid, p["max_overlap"]) if g else np.zeros(0, bool)
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        full[idx] = _place(rng, w[idx], h[idx], trunc[idx], edge[idx], W, H)
        vis[idx] = _visible(full[idx], W, H)
        active = pad[np.unique(image_row[idx])]
    else:
        valid &= ~_conflicts(vis, active, valid, p["max_overlap"])
    keep = np.flatnonzero(valid)
    kind, image_row, cat, full, vis, trunc = kind[keep], image_row[keep], cat[keep], full[keep], vis[keep], trunc[keep]
    g = len(keep)

    # 3-D dummies (pinhole camera with KITTI's focal length scaled to this image height)
    f = _KITTI_FOCAL * H / _KITTI_IMAGE_HEIGHT
    base = np.array([_DIMS_3D.get(int(c), _DIMS_3D[4]) for c in classes], dtype=np.float64)
    dims = base[np.searchsorted(classes, np.where(kind == _KIND_DONTCARE, 4, cat))]
    dims = np.round(dims * np.exp(rng.normal(0.0, 0.05, size=(g, 3))), 2)
    h_full = full[:, 3] - full[:, 1]
    z = np.round(f * dims[:, 0] / h_full, 2)
    x = np.round(((full[:, 0] + full[:, 2]) / 2 - W / 2) * z / f, 2)
    y = np.round((full[:, 3] - H / 2) * z / f, 2)
    rot = np.round(rng.uniform(-np.pi, np.pi, size=g), 2)
    alpha = np.round(np.angle(np.exp(1j * (rot - np.arctan2(x, z)))), 2)
    loc = np.stack([x, y, z], axis=1)
    dc = kind == _KIND_DONTCARE
    dims[dc], loc[dc], rot[dc], alpha[dc] = -1.0, -1000.0, -10.0, -10.0

    iscrowd = kind == _KIND_CROWD
    rank_kind, neg_depth = _draw_order_key(cat, iscrowd, loc, vis)
    order = np.lexsort((np.arange(g), neg_depth, rank_kind, image_row))
    draw_rank = np.empty(g, np.int64)
    draw_rank[order] = np.arange(g)
    occ_share = _occlusion(vis, image_row, N, draw_rank)
    occ = np.where(occ_share < 0.1, 0, np.where(occ_share < 0.5, 1, 2)).astype(np.int64)
    occ[dc] = -1
    truncation = np.where(dc, np.nan, trunc)
    difficulty = kitti_difficulty(vis, truncation, occ)
    difficulty[dc | iscrowd] = -1

    ids = np.arange(1, N + 1, dtype=np.int64)
    images = Images(id=ids, width=np.full(N, float(W)), height=np.full(N, float(H)),
                    file_name=[f"{i:06d}.png" for i in ids])
    gt = GroundTruth(
        image_id=ids[image_row], box=vis, category=cat, iscrowd=iscrowd, ignore=iscrowd | dc,
        id=np.arange(1, g + 1, dtype=np.int64), truncation=truncation, occlusion=occ, difficulty=difficulty,
        alpha=alpha, dimensions=dims, location=loc, rotation_y=rot,
    )
    categories = dict(SYNTHETIC_CATEGORIES)
    if p["dontcare_per_image"] > 0:
        categories[DONTCARE_CATEGORY] = "DontCare"
    dataset = Dataset(images=images, gt=gt, categories=categories, source=f"synthetic(seed={int(seed)})")
    imgs = [render_scene(dataset, i, seed) for i in range(N)] if render else None
    return dataset, imgs


# --------------------------------------------------------------------------- rendering


def _full_extent(box: np.ndarray, trunc: float, W: float, H: float) -> np.ndarray:
    """Undo the clipping of a truncated box: the share ``trunc`` of its extent lies beyond the edge it touches."""
    x1, y1, x2, y2 = (float(v) for v in box)
    if not (trunc > 0 and trunc < 1):
        return np.array([x1, y1, x2, y2])
    if x1 <= 0.0:
        x1 = x2 - (x2 - x1) / (1.0 - trunc)
    elif x2 >= W:
        x2 = x1 + (x2 - x1) / (1.0 - trunc)
    elif y1 <= 0.0:
        y1 = y2 - (y2 - y1) / (1.0 - trunc)
    elif y2 >= H:
        y2 = y1 + (y2 - y1) / (1.0 - trunc)
    return np.array([x1, y1, x2, y2])


def _colour(base: Sequence[float], jitter: np.ndarray, scale: float = 1.0) -> tuple[int, int, int]:
    c = np.clip(np.asarray(base, dtype=np.float64) * scale + jitter, 0, 255)
    return (int(c[0]), int(c[1]), int(c[2]))


def _draw_car(draw: Any, b: np.ndarray, jit: np.ndarray) -> None:
    x1, y1, x2, y2 = b
    w, h = x2 - x1, y2 - y1
    body = _colour((205, 35, 35), jit)
    draw.rectangle([x1 + 0.2 * w, y1, x1 + 0.75 * w, y1 + 0.45 * h], fill=_colour((205, 35, 35), jit, 0.7))
    draw.rectangle([x1 + 0.27 * w, y1 + 0.08 * h, x1 + 0.68 * w, y1 + 0.38 * h], fill=(175, 220, 240))
    draw.rectangle([x1, y1 + 0.35 * h, x2, y1 + 0.8 * h], fill=body)
    r = 0.2 * h
    for cx in (x1 + 0.22 * w, x2 - 0.22 * w):
        draw.ellipse([cx - r, y2 - 2 * r, cx + r, y2], fill=(20, 20, 20))
        draw.ellipse([cx - 0.4 * r, y2 - 1.4 * r, cx + 0.4 * r, y2 - 0.6 * r], fill=(150, 150, 150))


def _draw_pedestrian(draw: Any, b: np.ndarray, jit: np.ndarray) -> None:
    x1, y1, x2, y2 = b
    w, h = x2 - x1, y2 - y1
    cx = 0.5 * (x1 + x2)
    r = min(0.11 * h, 0.45 * w)
    draw.rectangle([cx - 0.3 * w, y1 + 0.58 * h, cx - 0.05 * w, y2], fill=(40, 40, 60))
    draw.rectangle([cx + 0.05 * w, y1 + 0.58 * h, cx + 0.3 * w, y2], fill=(40, 40, 60))
    draw.ellipse([x1 + 0.1 * w, y1 + 2 * r, x2 - 0.1 * w, y1 + 0.65 * h], fill=_colour((40, 70, 215), jit))
    draw.ellipse([cx - r, y1, cx + r, y1 + 2 * r], fill=_colour((230, 190, 150), 0.3 * jit))


def _draw_cyclist(draw: Any, b: np.ndarray, jit: np.ndarray) -> None:
    x1, y1, x2, y2 = b
    w, h = x2 - x1, y2 - y1
    cx = 0.5 * (x1 + x2)
    r = min(0.25 * w, 0.3 * h)
    green = _colour((25, 170, 60), jit)
    lw = max(1, int(round(r / 4)))
    draw.line([(x1 + r, y2 - r), (cx, y2 - 1.6 * r), (x2 - r, y2 - r)], fill=green, width=lw)
    draw.ellipse([x1, y2 - 2 * r, x1 + 2 * r, y2], outline=green, width=lw)
    draw.ellipse([x2 - 2 * r, y2 - 2 * r, x2, y2], outline=green, width=lw)
    draw.polygon([(cx, y1 + 0.18 * h), (cx - 0.25 * w, y2 - 1.3 * r), (cx + 0.25 * w, y2 - 1.3 * r)],
                 fill=_colour((240, 210, 30), jit))
    rh = min(0.1 * h, 0.2 * w)
    draw.ellipse([cx - rh, y1, cx + rh, y1 + 2 * rh], fill=_colour((240, 185, 120), 0.3 * jit))


def _draw_crowd(draw: Any, b: np.ndarray, jit: np.ndarray) -> None:
    x1, y1, x2, y2 = b
    w, h = x2 - x1, y2 - y1
    n = max(2, int(w / max(0.45 * h, 1.0)))
    step = w / n
    for k in range(n):
        _draw_pedestrian(draw, np.array([x1 + k * step, y1 + 0.1 * h * (k % 2), x1 + (k + 1) * step, y2]), jit * (-1) ** k)


_DRAWERS = {1: _draw_car, 4: _draw_pedestrian, 6: _draw_cyclist}


def render_scene(dataset: Dataset, image_index: int, seed: int = 0) -> np.ndarray:
    """Pixels uint8 ``[H, W, 3]`` of row ``image_index`` of ``dataset.images``.

    Deterministic in ``(seed, image id)`` (random stream 2), independent of the
    other images: equal to ``generate_scenes(..., seed=seed, render=True)[1][i]``.
    Background: per-image colour with a vertical gradient, ~6 low-contrast
    rectangles and N(0, 6^2) noise; then DontCare noise patches, crowds and
    objects far to near (order of :func:`_draw_order_key`), each with a colour
    jitter N(0, 18^2); finally N(0, 4^2) sensor noise. Truncated objects are
    drawn at their full extent (recovered from ``truncation``) and clipped by
    the image frame. Needs the records as generated (or a KITTI round trip,
    which keeps ``location``); with no ``location`` taller boxes are drawn later.
    """
    from PIL import Image, ImageDraw

    n = len(dataset.images)
    _check(0 <= int(image_index) < n, f"image_index {image_index} outside 0..{n - 1}", "image_index")
    img_id = int(dataset.images.id[image_index])
    W = int(round(float(dataset.images.width[image_index])))
    H = int(round(float(dataset.images.height[image_index])))
    gt = dataset.gt
    rows = np.flatnonzero(gt.image_id == img_id)
    rng = _rng(seed, _STREAM_PIXELS, img_id)

    base = rng.uniform(70, 170, size=3)
    grad = 0.85 + 0.3 * (np.arange(H, dtype=np.float64) / max(H - 1, 1))
    canvas = base[None, None, :] * grad[:, None, None] * np.ones((1, W, 1))
    for _ in range(6):
        rx, ry = rng.uniform(0, W), rng.uniform(0, H)
        rw, rh = rng.uniform(5, W / 2), rng.uniform(3, H / 3)
        delta = rng.uniform(-20, 20)
        canvas[int(ry):int(ry + rh), int(rx):int(rx + rw)] += delta
    canvas += rng.normal(0.0, 6.0, size=(H, W, 3))

    loc = None if gt.location is None else gt.location[rows]
    rank_kind, neg_depth = _draw_order_key(gt.category[rows], gt.iscrowd[rows], loc, gt.box[rows])
    order = rows[np.lexsort((np.arange(len(rows)), neg_depth, rank_kind))]
    dontcare = [r for r in order if gt.category[r] == DONTCARE_CATEGORY]
    for r in dontcare:
        x1, y1, x2, y2 = gt.box[r]
        xa, ya, xb, yb = int(math.floor(x1)), int(math.floor(y1)), int(math.ceil(x2)), int(math.ceil(y2))
        patch = rng.uniform(40, 215, size=(max(yb - ya, 0), max(xb - xa, 0), 3))
        canvas[ya:yb, xa:xb] = patch[: canvas[ya:yb, xa:xb].shape[0], : canvas[ya:yb, xa:xb].shape[1]]
    pil = Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8), mode="RGB")
    draw = ImageDraw.Draw(pil)
    trunc = gt.truncation
    for r in order:
        c = int(gt.category[r])
        if c == DONTCARE_CATEGORY:
            continue
        jit = rng.normal(0.0, 18.0, size=3)
        t = float(trunc[r]) if np.isfinite(trunc[r]) else 0.0
        b = _full_extent(gt.box[r], t, W, H)
        if gt.iscrowd[r]:
            _draw_crowd(draw, b, jit)
        else:
            _DRAWERS.get(c, _draw_pedestrian)(draw, b, jit)
    out = np.asarray(pil, dtype=np.float64) + rng.normal(0.0, 4.0, size=(H, W, 3))
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


render_image = render_scene
"""Alias of :func:`render_scene` (the name used by the lazy torch dataset)."""


# --------------------------------------------------------------------------- simulated detector


def _around(
    rng: np.random.Generator, target: np.ndarray, true_std: np.ndarray, std_range: tuple[float, float],
    proposal_jitter: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Delta records around target boxes [n,4]: (proposal, mu, sigma_true, box), all [n,4].

    ``P = decode(target, j)``, ``j ~ N(0, diag(proposal_jitter^2))``;
    ``sigma = true_std * exp(U[log lo, log hi])`` per detection and coordinate;
    ``y = encode(P, target)``; ``mu = y - e``, ``e ~ N(0, sigma^2)``; ``box = decode(P, mu)``.
    """
    n = len(target)
    proposal = decode_deltas(target, rng.normal(size=(n, 4)) * proposal_jitter)
    sigma = true_std * np.exp(rng.uniform(np.log(std_range[0]), np.log(std_range[1]), size=(n, 4)))
    y = encode_deltas(proposal, target)
    mu = y - rng.normal(size=(n, 4)) * sigma
    return proposal, mu, sigma, decode_deltas(proposal, mu)


def _image_rows(dataset: Dataset) -> np.ndarray:
    return dataset.gt_image_rows()


def _fp_boxes(
    rng: np.random.Generator, dataset: Dataset, gt_rows_img: np.ndarray, n_fp_img: np.ndarray,
    pool: np.ndarray, classes: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """False-positive boxes with the GT laws of shape and position, overlapping no GT.

    Each FP takes once the relative size and class of a random regular GT (any
    image); each round it takes the relative centre of another random regular GT,
    jittered by N(0, (0.1 w)^2) and kept inside the image, until its IoU with
    every GT of its image is < 0.1 (crowd: intersection over detection area).
    Keeping the shape across rounds keeps the FP size law equal to the GT law
    (redrawing it would favour small boxes). Returns (image row [F], box [F,4],
    category [F], number dropped after the last round)."""
    imgs = dataset.images
    W, H = imgs.width, imgs.height
    fp_img = np.repeat(np.arange(len(imgs)), n_fp_img)
    F = len(fp_img)
    gt = dataset.gt
    pad = _padded_groups(gt_rows_img, len(imgs))
    ok_pad = pad >= 0
    gt_box_pad = _gather(gt.box, pad, np.nan)
    crowd_pad = ok_pad & _gather(gt.iscrowd, pad, False)
    if len(pool):
        src_img = gt_rows_img[pool]
        rel_pool = xyxy_to_cxcywh(gt.box[pool] / np.stack([W[src_img], H[src_img]] * 2, axis=1))
        pick = rng.integers(0, len(pool), size=F)
        wh = rel_pool[pick, 2:]
        cat = gt.category[pool[pick]]
    else:
        wh = rng.uniform(0.1, 0.4, size=(F, 2))
        cat = classes[rng.integers(0, len(classes), size=F)]
    scale = np.stack([W[fp_img], H[fp_img]] * 2, axis=1)

    box = np.zeros((F, 4))
    todo = np.arange(F)
    for _ in range(_FP_ROUNDS):
        if len(todo) == 0:
            break
        k = len(todo)
        centre = rel_pool[rng.integers(0, len(pool), size=k), :2] if len(pool) else rng.random((k, 2))
        half = wh[todo] / 2
        centre = np.clip(centre + rng.normal(size=(k, 2)) * 0.1 * wh[todo], half, 1.0 - half)
        box[todo] = np.concatenate([centre - half, centre + half], axis=1) * scale[todo]
        g = gt_box_pad[fp_img[todo]]  # [k, M, 4]
        inter = _intersection(box[todo][:, None, :], g)
        a_det = area(box[todo])[:, None]
        union = np.where(crowd_pad[fp_img[todo]], a_det, a_det + area(g) - inter)
        with np.errstate(invalid="ignore", divide="ignore"):
            iou = np.where(union > 0, inter / union, 0.0)
        bad = (np.nan_to_num(iou, nan=0.0) >= _FP_MAX_IOU).any(axis=1) | (area(box[todo]) <= 0)
        todo = todo[bad]
    keep = np.ones(F, bool)
    keep[todo] = False
    return fp_img[keep], box[keep], cat[keep], int(len(todo))


def _auto_bins(n_det: int, n_classes: int, position_bins: int | None, size_bins: int | None,
               max_position: int = 5, max_size: int = 3, min_per_group: float = 40.0) -> tuple[int, int]:
    """Bins of the score groups: the given ones, else the most (<= 5, <= 3) with >= 40 detections per group."""
    p = max_position if position_bins is None else int(position_bins)
    s = max_size if size_bins is None else int(size_bins)
    while n_det < min_per_group * 2 * n_classes * p * p * s:
        if position_bins is None and p > 1:
            p -= 1
        elif size_bins is None and s > 1:
            s -= 1
        else:
            break
    return p, s


def _score_groups(
    border: np.ndarray, category: np.ndarray, classes: np.ndarray, rx: np.ndarray, ry: np.ndarray,
    rel_area: np.ndarray, position_bins: int, size_bins: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Group [D] of each detection: (border?, class, cx bin, cy bin, size bin), raveled.

    Position bins: equal width over [0, 1] of cx/W and cy/H (clipped); size bins:
    equal count over ``sqrt(w h / (W H))`` of all detections (edges returned)."""
    cls_idx = np.searchsorted(classes, category).clip(0, len(classes) - 1)
    gx = np.clip(np.floor(np.clip(rx, 0, 1) * position_bins), 0, position_bins - 1).astype(np.int64)
    gy = np.clip(np.floor(np.clip(ry, 0, 1) * position_bins), 0, position_bins - 1).astype(np.int64)
    size = np.sqrt(np.clip(rel_area, 0, None))
    edges = np.quantile(size, np.linspace(0, 1, size_bins + 1)[1:-1]) if len(size) else np.zeros(max(size_bins - 1, 0))
    gs = np.searchsorted(edges, size, side="right").astype(np.int64)
    shape = (2, len(classes), position_bins, position_bins, size_bins)
    group = np.ravel_multi_index((border.astype(np.int64), cls_idx, gx, gy, gs), shape) if len(border) else np.zeros(0, np.int64)
    info = {"n_groups": int(np.prod(shape)), "shape": list(shape), "size_edges": edges.tolist()}
    return group, info


def _detector_params(**kw: Any) -> dict[str, Any]:
    """Validate and normalise the keyword arguments of :func:`simulate_detector`."""
    _check(0.0 <= kw["border_overconfidence"] < 1.0, f"expected a value in [0, 1), got {kw['border_overconfidence']}", "border_overconfidence")
    _check(0.0 <= kw["border_width"] <= 0.5, f"expected a relative width in [0, 0.5], got {kw['border_width']}", "border_width")
    std_scale = _check_vec4(kw["std_scale"], "std_scale")
    true_std = _check_vec4(kw["true_delta_std"], "true_delta_std")
    jitter = np.asarray(kw["proposal_jitter"], dtype=np.float64).reshape(-1)
    _check(jitter.shape == (4,) and bool(np.all(jitter >= 0)), f"expected 4 values >= 0, got {kw['proposal_jitter']!r}", "proposal_jitter")
    lo, hi = _check_pair(kw["std_range"], "std_range")
    _check(kw["fp_per_image"] >= 0, f"expected a rate >= 0, got {kw['fp_per_image']}", "fp_per_image")
    _check(0.0 <= kw["recall"] <= 1.0, f"expected a probability, got {kw['recall']}", "recall")
    _check(kw["score_concentration"] > 0, f"expected a value > 0, got {kw['score_concentration']}", "score_concentration")
    for name in ("position_bins", "size_bins"):
        v = kw[name]
        _check(v is None or (isinstance(v, (int, np.integer)) and 1 <= v <= 20), f"expected None or an int in 1..20, got {v!r}", name)
    _check(kw["duplicate_rate"] >= 0, f"expected a rate >= 0, got {kw['duplicate_rate']}", "duplicate_rate")
    sd = kw["score_decimals"]
    _check(sd is None or (isinstance(sd, (int, np.integer)) and 0 <= sd <= 15), f"expected None or an int in 0..15, got {sd!r}", "score_decimals")
    _check(kw["uncertainty"] in ("delta", "box_std", "none"), f"expected 'delta', 'box_std' or 'none', got {kw['uncertainty']!r}", "uncertainty")
    out = dict(kw)
    out.update(std_scale=std_scale.tolist(), true_delta_std=true_std.tolist(), proposal_jitter=jitter.tolist(),
               std_range=[lo, hi], categories=None if kw["categories"] is None else [int(c) for c in kw["categories"]])
    return out


def _simulate(dataset: Dataset, seed: int, p: dict[str, Any]) -> tuple[Detections, dict[str, Any]]:
    _check(isinstance(dataset, Dataset), f"expected a detcal.types.Dataset, got {type(dataset).__name__}", "dataset")
    gt = dataset.gt
    imgs = dataset.images
    img_rows = _image_rows(dataset)
    rng = _rng(seed, _STREAM_DETECTOR)
    names = dataset.categories
    if p["categories"] is None:
        classes = np.array(sorted(c for c, n in names.items() if n != "DontCare"), dtype=np.int64)
    else:
        classes = np.array(sorted(p["categories"]), dtype=np.int64)
    if len(classes) == 0:
        classes = np.array(sorted(set(gt.category.tolist()) - {DONTCARE_CATEGORY}) or [1], dtype=np.int64)
    wh = gt.box[:, 2:] - gt.box[:, :2]
    eligible = ~gt.ignore & ~gt.iscrowd & np.isin(gt.category, classes) & np.all(wh > 0, axis=1)
    detected = eligible & (rng.random(len(gt)) < p["recall"])
    tp_gt = np.flatnonzero(detected)
    n_dup = rng.poisson(p["duplicate_rate"], size=len(tp_gt))
    src = np.concatenate([tp_gt, np.repeat(tp_gt, n_dup)])
    true_std, jitter = np.asarray(p["true_delta_std"]), np.asarray(p["proposal_jitter"])
    prop_t, mu_t, sig_t, box_t = _around(rng, gt.box[src], true_std, tuple(p["std_range"]), jitter)

    n_fp_img = rng.poisson(p["fp_per_image"], size=len(imgs))
    fp_img, fp_box, fp_cat, fp_dropped = _fp_boxes(rng, dataset, img_rows, n_fp_img, np.flatnonzero(eligible), classes)
    prop_f = decode_deltas(fp_box, rng.normal(size=(len(fp_box), 4)) * jitter)
    mu_f = encode_deltas(prop_f, fp_box)
    sig_f = true_std * np.exp(rng.uniform(np.log(p["std_range"][0]), np.log(p["std_range"][1]), size=(len(fp_box), 4)))

    row = np.concatenate([img_rows[src], fp_img])
    proposal = np.concatenate([prop_t, prop_f])
    mu = np.concatenate([mu_t, mu_f])
    sigma = np.concatenate([sig_t, sig_f])
    box = np.concatenate([box_t, decode_deltas(prop_f, mu_f)])
    category = np.concatenate([gt.category[src], fp_cat])
    planted_tp = np.concatenate([np.ones(len(tp_gt), bool), np.zeros(len(src) - len(tp_gt) + len(fp_box), bool)])

    c = xyxy_to_cxcywh(box)
    rx, ry = c[:, 0] / imgs.width[row], c[:, 1] / imgs.height[row]
    bw = p["border_width"]
    border = (rx < bw) | (rx > 1 - bw) | (ry < bw) | (ry > 1 - bw)

    # latent precision q: Beta(a+1, b_g) for planted TPs, Beta(a, b_g+1) for FPs, b_g = a n_fp / n_tp per group
    a = float(p["score_concentration"])
    pos_bins, size_bins = _auto_bins(len(row), len(classes), p["position_bins"], p["size_bins"])
    group, group_info = _score_groups(border, category, classes, rx, ry, c[:, 2] * c[:, 3] / (imgs.width[row] * imgs.height[row]),
                                      pos_bins, size_bins)
    n_groups = int(group_info["n_groups"])
    n_tp_g = np.bincount(group[planted_tp], minlength=n_groups).astype(np.float64)
    n_fp_g = np.bincount(group[~planted_tp], minlength=n_groups).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):  # n_tp = 0: all FP, b = B_MAX gives q ~ 0
        b_g = np.clip(np.where(n_tp_g > 0, a * n_fp_g / n_tp_g, _B_MAX), _B_MIN, _B_MAX)
    b = b_g[group]
    q = rng.beta(np.where(planted_tp, a + 1.0, a), np.where(planted_tp, b, b + 1.0))
    score = np.where(border, q ** (1.0 - p["border_overconfidence"]), q)
    if p["score_decimals"] is not None:
        score = np.round(score, int(p["score_decimals"]))

    order = np.lexsort((rng.random(len(row)), row))
    kw: dict[str, Any] = {}
    sig_rep = sigma * np.asarray(p["std_scale"])
    if p["uncertainty"] == "delta":
        kw = {"proposal": proposal[order], "delta_mean": mu[order], "delta_std": sig_rep[order]}
    elif p["uncertainty"] == "box_std":
        pw, ph = proposal[:, 2] - proposal[:, 0], proposal[:, 3] - proposal[:, 1]
        bw_, bh_ = box[:, 2] - box[:, 0], box[:, 3] - box[:, 1]
        box_std = sig_rep * np.stack([pw, ph, bw_, bh_], axis=1)
        kw = {"box_std": box_std[order]}
    dets = Detections(image_id=imgs.id[row[order]], box=box[order], score=score[order], category=category[order], **kw)
    info = {
        "n_detections": int(len(row)), "n_planted_tp": int(len(tp_gt)), "n_duplicates": int(len(src) - len(tp_gt)),
        "n_false_positives": int(len(fp_box)), "n_fp_dropped": fp_dropped,
        "n_eligible_gt": int(eligible.sum()), "border_share": float(border.mean()) if len(border) else float("nan"),
        "classes": classes.tolist(),
        "score_groups": {**group_info, "occupied": int(np.count_nonzero(n_tp_g + n_fp_g)),
                         "occupied_without_tp": int(np.count_nonzero((n_tp_g == 0) & (n_fp_g > 0))),
                         "b_median_per_detection": float(np.median(b)) if len(b) else float("nan")},
        "planted_tp": planted_tp[order], "latent_q": q[order], "true_std": sigma[order], "border": border[order],
    }
    return dets, info


def simulate_detector(
    dataset: Dataset,
    seed: int = 0,
    *,
    border_overconfidence: float = 0.5,
    border_width: float = 0.15,
    std_scale: Sequence[float] = (1.0, 1.0, 1.0, 1.0),
    true_delta_std: Sequence[float] = (0.05, 0.05, 0.08, 0.08),
    fp_per_image: float = 2.0,
    score_decimals: int | None = 3,
    uncertainty: str = "delta",
    recall: float = 0.9,
    score_concentration: float = 2.0,
    std_range: tuple[float, float] = (0.5, 1.5),
    proposal_jitter: Sequence[float] = (0.1, 0.1, 0.1, 0.1),
    duplicate_rate: float = 0.0,
    categories: Sequence[int] | None = None,
    position_bins: int | None = None,
    size_bins: int | None = None,
) -> Detections:
    """Simulated detections on ``dataset`` with a KNOWN, planted miscalibration.

    Detections (random stream 1 of ``seed``; vectorised over the dataset):

    * Planted true positives: each regular GT (not ignored, not crowd, of a
      detected class: ``categories`` or all but DontCare) is detected once with
      probability ``recall``. Proposal ``P = decode(GT, j)``, ``j ~ N(0,
      diag(proposal_jitter^2))``; true per-coordinate std
      ``sigma_k = true_delta_std[k] * exp(U[log std_range])`` (heteroscedastic,
      independent per detection and coordinate, so C_v > 0); target
      ``y = encode(P, GT)``; mean ``mu = y - e``, ``e ~ N(0, sigma^2)``; box
      ``B = decode(P, mu)``. With the defaults >= 99% reach IoU >= 0.5 with
      their GT (tested).
    * False positives: Poisson(``fp_per_image``) per image; the relative size
      and class of a random regular GT of any image (so TPs and FPs share the
      size law), placed at the relative centre of another random regular GT,
      jittered by N(0, (0.1 w)^2) and kept inside the image, re-placed until
      IoU < 0.1 with every GT of the image (crowd: intersection over detection
      area); dropped after 30 rounds (counted). Same proposal/sigma recipe,
      ``mu = encode(P, B)``.
    * Duplicates (off by default): Poisson(``duplicate_rate``) more boxes per
      detected GT, drawn like TPs but counted as false positives in the score
      model, so the planted calibration holds under ``exclusive`` matching only
      when they score below the TP (not guaranteed) and never under ``max``
      matching; keep 0 for the planted truth.

    Confidence (planted truth). Every detection has a latent precision
    ``q ~ Beta(a, b_g)`` and is a true positive with probability ``q``; it is
    generated in the equivalent order: outcome first, then
    ``q | TP ~ Beta(a + 1, b_g)``, ``q | FP ~ Beta(a, b_g + 1)`` with
    ``a = score_concentration`` and ``b_g = a * n_FP,g / n_TP,g`` from the
    realised counts of its group g, so that by Bayes ``P(TP | q, g) = q``
    exactly (``n_TP,g / a = n_FP,g / b_g``). Groups: (near the border?, class,
    cx/W bin, cy/H bin, size bin) with ``position_bins`` equal-width bins per
    axis and ``size_bins`` equal-count bins of ``sqrt(w h / (W H))`` (``None``:
    the most bins up to 5 and 3 that keep >= 40 detections per group on
    average, reducing position bins first); FPs
    avoid GTs, so their spatial law differs from the TPs' and a single group
    would leave position-dependent miscalibration (D-ECE above the sampling
    floor); with 5 x 5 x 3 groups D-ECE of the calibrated part is at the
    floor of a resampled oracle. A group without TPs gets ``b = 1e3`` (q ~ 0),
    b is clipped to [1e-3, 1e3]. Tiny groups make q sharper (it then knows the
    group's realised precision); use fewer bins for small sets.
    Reported score, with ``bo = border_overconfidence`` and the predicted box
    centre ``(cx/W, cy/H)``::

        score = q                    if both in [border_width, 1 - border_width]
        score = q ** (1 - bo)        otherwise (near the border: over-confident,
                                     score >= q, precision = score ** (1 / (1 - bo)))

    then rounded to ``score_decimals`` (ties, as in real results files).

    Regression (planted truth): reported std ``s_k = sigma_k * std_scale[k]``,
    so ``sqrt(mean(e_k^2 / s_k^2)) = 1 / std_scale[k]``; ``std_scale = 1`` is
    calibrated, and std scaling (METRICS.md 5) must learn ``1/std_scale``.
    ``uncertainty``: ``"delta"`` gives ``proposal``, ``delta_mean = mu``,
    ``delta_std = s``; ``"box_std"`` gives the first-order pixel stds
    ``(s_tx Pw, s_ty Ph, s_tw Bw, s_th Bh)`` of (cx, cy, w, h), which the
    box-record evaluation (P := B, mu = 0) maps back to exactly the same
    normalised residuals; ``"none"`` gives none.

    Rows are grouped by image (ascending row of ``dataset.images``) in a random
    order within each image. The parameters and realised counts are saved by
    :func:`write_synthetic` (``meta.json``).
    """
    params = _detector_params(**_bound_kwargs(simulate_detector, locals(), skip=("dataset", "seed")))
    dets, _ = _simulate(dataset, int(seed), params)
    return dets


def _bound_kwargs(fn: Any, values: dict[str, Any], skip: tuple[str, ...]) -> dict[str, Any]:
    return {k: values[k] for k in inspect.signature(fn).parameters if k not in skip}


def detector_defaults() -> dict[str, Any]:
    """The default keyword arguments of :func:`simulate_detector` (recorded in ``meta.json``)."""
    sig = inspect.signature(simulate_detector)
    return {k: v.default for k, v in sig.parameters.items() if v.kind is inspect.Parameter.KEYWORD_ONLY}


# --------------------------------------------------------------------------- COCO-scale benchmark data


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
    _check(isinstance(n_images, (int, np.integer)) and n_images >= 0, f"expected an int >= 0, got {n_images!r}", "n_images")
    _check(isinstance(dets_per_image, (int, np.integer)) and 1 <= dets_per_image <= 100, f"expected an int in 1..100, got {dets_per_image!r}", "dets_per_image")
    _check(0.0 <= crowd_fraction <= 1.0, f"expected a fraction in [0, 1], got {crowd_fraction}", "crowd_fraction")
    _check(isinstance(score_decimals, (int, np.integer)) and 0 <= score_decimals <= 15, f"expected an int in 0..15, got {score_decimals!r}", "score_decimals")
    rng = _rng(seed, _STREAM_COCO)
    N = int(n_images)
    sizes = np.array([[640, 480], [480, 640], [640, 427], [500, 375], [640, 640]], dtype=np.float64)
    wh_img = sizes[rng.integers(0, len(sizes), size=N)]
    n_gt = 1 + rng.poisson(6.0, size=N)
    g_img = np.repeat(np.arange(N), n_gt)
    G = len(g_img)
    cats = np.array(sorted(COCO_SCALE_CATEGORIES), dtype=np.int64)
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
    ids = np.arange(1, N + 1, dtype=np.int64)
    images = Images(id=ids, width=wh_img[:, 0], height=wh_img[:, 1], file_name=[f"{i:012d}.jpg" for i in ids])
    gt = GroundTruth(image_id=ids[g_img], box=g_box, category=g_cat, iscrowd=crowd, ignore=crowd)
    dataset = Dataset(images=images, gt=gt, categories=dict(COCO_SCALE_CATEGORIES), source=f"coco_scale(seed={int(seed)})")

    n_det = rng.integers(dets_per_image // 2, min(100, 3 * dets_per_image // 2) + 1, size=N)
    d_img = np.repeat(np.arange(N), n_det)
    D = len(d_img)
    kind_u = rng.random(D)

    def pick(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A random GT row of each detection's image among ``mask`` rows (-1 when none)."""
        rows = np.flatnonzero(mask)
        cnt = np.bincount(g_img[rows], minlength=N)
        start = np.concatenate([[0], np.cumsum(cnt)[:-1]])
        k = cnt[d_img]
        r = start[d_img] + np.floor(rng.random(D) * np.maximum(k, 1)).astype(np.int64)
        return np.where(k > 0, rows[np.minimum(r, max(len(rows) - 1, 0))] if len(rows) else -1, -1), k > 0

    reg_gt, has_reg = pick(~crowd)
    crowd_gt, has_crowd = pick(crowd)
    around = (kind_u < 0.55) & has_reg
    in_crowd = (kind_u >= 0.55) & (kind_u < 0.60) & has_crowd
    Wd, Hd = wh_img[d_img, 0], wh_img[d_img, 1]
    # background boxes, and boxes inside crowd regions
    bs = np.exp(rng.uniform(np.log(8.0), np.log(0.5 * np.minimum(Wd, Hd))))
    bar = np.exp(rng.uniform(np.log(1 / 3), np.log(3.0), size=D))
    bw_, bh_ = np.minimum(bs * np.sqrt(bar), Wd), np.minimum(bs / np.sqrt(bar), Hd)
    bx, by = rng.random(D) * (Wd - bw_), rng.random(D) * (Hd - bh_)
    box = np.stack([bx, by, bx + bw_, by + bh_], axis=1)
    cb = g_box[np.maximum(crowd_gt, 0)]
    frac = rng.uniform(0.15, 0.5, size=(D, 2))
    cw, ch = (cb[:, 2] - cb[:, 0]) * frac[:, 0], (cb[:, 3] - cb[:, 1]) * frac[:, 1]
    cx0 = cb[:, 0] + rng.random(D) * (cb[:, 2] - cb[:, 0] - cw)
    cy0 = cb[:, 1] + rng.random(D) * (cb[:, 3] - cb[:, 1] - ch)
    box = np.where(in_crowd[:, None], np.stack([cx0, cy0, cx0 + cw, cy0 + ch], axis=1), box)
    # around GTs: delta records with widely varying sigma -> duplicates over a range of IoUs
    level = np.exp(rng.uniform(np.log(0.02), np.log(0.4), size=D))
    target = g_box[np.maximum(reg_gt, 0)]
    prop, mu, sig, dbox = _around(rng, target, level[:, None] * np.array([1.0, 1.0, 1.5, 1.5]), (0.7, 1.4),
                                  np.array([0.1, 0.1, 0.1, 0.1]))
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
    dets = Detections(image_id=ids[d_img[order]], box=box[order], score=score[order], category=category[order],
                      proposal=proposal[order], delta_mean=mean[order], delta_std=std[order])
    return dataset, dets


# --------------------------------------------------------------------------- writer


def _png_bytes(img: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img, mode="RGB").save(buf, format="PNG")
    return buf.getvalue()


def write_synthetic(
    out_dir: str | Path,
    n_images: int = 200,
    seed: int = 0,
    detector_kwargs: dict[str, Any] | None = None,
    image_size: tuple[int, int] = (160, 120),
    render: bool = True,
    scene_kwargs: dict[str, Any] | None = None,
    kitti_images: bool = False,
) -> dict[str, Path]:
    """Write a seeded synthetic benchmark; ``out_dir`` is replaced whole (see :func:`_write_into`),
    so no file of an earlier, larger set survives beside the new one. Returns the paths by role."""
    from detcal.utils.fresh_dir import fresh_dir

    final = Path(out_dir)
    with fresh_dir(final) as tmp:
        paths = _write_into(tmp, n_images, seed, detector_kwargs, image_size, render, scene_kwargs, kitti_images)
    return {k: final / v.relative_to(tmp) if v != tmp else final for k, v in paths.items()}


def _write_into(
    out_dir: str | Path,
    n_images: int = 200,
    seed: int = 0,
    detector_kwargs: dict[str, Any] | None = None,
    image_size: tuple[int, int] = (160, 120),
    render: bool = True,
    scene_kwargs: dict[str, Any] | None = None,
    kitti_images: bool = False,
) -> dict[str, Path]:
    """Write a seeded synthetic benchmark under ``out_dir`` (atomic writes).

    Layout: ``images/<id:06d>.png`` (when ``render``), ``annotations/
    instances.json`` (COCO), ``kitti/label_2/<id:06d>.txt``, ``kitti/sizes.txt``
    (lines ``<frame> <W> <H>``, so the PNGs need not be duplicated; with
    ``kitti_images`` they are also copied to ``kitti/image_2``),
    ``results/detections.json`` (COCO results with the uncertainty fields),
    ``kitti/results/<id:06d>.txt`` and ``meta.json`` (seed, every generator and
    planted-miscalibration parameter, realised counts). ``scene_kwargs`` go to
    :func:`generate_scenes`, ``detector_kwargs`` to :func:`simulate_detector`
    (same ``seed``; independent random streams). Returns the paths by role.
    """
    from detcal.data.coco import write_coco_instances, write_coco_results
    from detcal.data.kitti import write_kitti_labels, write_kitti_results
    from detcal.types import KITTI_CATEGORIES

    out = Path(out_dir)
    scene_kwargs = dict(scene_kwargs or {})
    scene_sig = inspect.signature(generate_scenes).parameters
    for k in scene_kwargs:
        _check(k in scene_sig and k not in ("n_images", "seed", "image_size", "render"), f"unknown scene argument {k!r}", "scene_kwargs")
    det_defaults = detector_defaults()
    detector_kwargs = dict(detector_kwargs or {})
    for k in detector_kwargs:
        _check(k in det_defaults, f"unknown detector argument {k!r}; known: {sorted(det_defaults)}", "detector_kwargs")
    dataset, _ = generate_scenes(n_images, seed, image_size, render=False, **scene_kwargs)
    det_params = _detector_params(**{**det_defaults, **detector_kwargs})
    dets, info = _simulate(dataset, int(seed), det_params)

    paths: dict[str, Path] = {"root": out}
    if render:
        paths["images"] = out / "images"
        for i, img_id in enumerate(dataset.images.id):
            data = _png_bytes(render_scene(dataset, i, seed))
            write_bytes(out / "images" / f"{int(img_id):06d}.png", data)
            if kitti_images:
                write_bytes(out / "kitti" / "image_2" / f"{int(img_id):06d}.png", data)
        if kitti_images:
            paths["kitti_images"] = out / "kitti" / "image_2"
    paths["coco_instances"] = out / "annotations" / "instances.json"
    write_coco_instances(paths["coco_instances"], dataset)
    paths["coco_results"] = out / "results" / "detections.json"
    write_coco_results(paths["coco_results"], dets)
    paths["kitti_labels"] = out / "kitti" / "label_2"
    write_kitti_labels(paths["kitti_labels"], dataset)
    paths["kitti_results"] = out / "kitti" / "results"
    write_kitti_results(paths["kitti_results"], dets, categories=KITTI_CATEGORIES, dataset=dataset)
    paths["kitti_sizes"] = out / "kitti" / "sizes.txt"
    lines = [f"{int(i):06d} {int(w)} {int(h)}" for i, w, h in zip(dataset.images.id, dataset.images.width, dataset.images.height)]
    write_text(paths["kitti_sizes"], "\n".join(lines) + ("\n" if lines else ""))

    scene_params = {k: v.default for k, v in scene_sig.items()
                    if v.default is not inspect.Parameter.empty and k not in ("seed", "render")}
    scene_params.update(scene_kwargs)
    scene_params.update(n_images=int(n_images), image_size=[int(v) for v in image_size], render=bool(render))
    public_info = {k: v for k, v in info.items() if not isinstance(v, np.ndarray)}
    paths["meta"] = out / "meta.json"
    write_json(paths["meta"], {
        "generator": "detcal.data.synthetic",
        "seed": int(seed),
        "random_streams": {"scenes": [int(seed), _STREAM_SCENES], "detector": [int(seed), _STREAM_DETECTOR],
                           "pixels": [int(seed), _STREAM_PIXELS, "<image id>"]},
        "scene_params": scene_params,
        "detector_params": det_params,
        "planted": {
            "confidence": "score = q away from the border; q ** (1 - border_overconfidence) when the box centre "
                          "is within border_width (relative) of an image edge; P(TP | q) = q",
            "regression": "reported std = true std * std_scale[k]; std scaling should learn 1 / std_scale[k]",
            "std_scaling_target": [1.0 / s for s in det_params["std_scale"]],
        },
        "counts": {"images": len(dataset.images), "gt": len(dataset.gt),
                   "gt_per_category": {dataset.categories.get(int(c), str(int(c))): int((dataset.gt.category == c).sum())
                                       for c in np.unique(dataset.gt.category)},
                   **public_info},
        "categories": {str(k): v for k, v in dataset.categories.items()},
        "files": {k: str(v.relative_to(out)) if v != out else "." for k, v in paths.items()},
    })
    return paths
