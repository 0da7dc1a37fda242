"""Synthetic scenes: objects, crowds, DontCare regions, truncation and occlusion."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from detcal.core.boxes import area
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, GroundTruth, Images
from detcal.data.kitti import kitti_difficulty
from detcal.data.synthetic._common import (
    ASPECT,
    DIMS_3D,
    DONTCARE_CATEGORY,
    KIND_CROWD,
    KIND_DONTCARE,
    KIND_OBJECT,
    KITTI_FOCAL,
    KITTI_IMAGE_HEIGHT,
    PLACEMENT_ROUNDS,
    STREAM_SCENES,
    SYNTHETIC_CATEGORIES,
    check,
    check_pair,
    draw_order_key,
    gather,
    intersection,
    padded_groups,
    stream_rng,
)
from detcal.data.synthetic.render import render_scene

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
    check(
        isinstance(n_images, (int, np.integer)) and n_images >= 0, f"expected an int >= 0, got {n_images!r}", "n_images"
    )
    try:
        w, h = (int(v) for v in image_size)
    except (TypeError, ValueError):
        raise DetcalInputError(f"expected (width, height), got {image_size!r}", field="image_size") from None
    check(w >= 16 and h >= 16, f"expected width and height >= 16 px, got {image_size!r}", "image_size")
    lo, hi = check_pair(objects_per_image, "objects_per_image", positive=False)
    check(
        lo >= 0 and lo == int(lo) and hi == int(hi),
        f"expected integers >= 0, got {objects_per_image!r}",
        "objects_per_image",
    )
    smin, smax = check_pair((min_size, max_size), "min_size/max_size")
    check(smin >= 4, f"min_size must be >= 4 px, got {min_size}", "min_size")
    check(
        smax <= min(w, h) - 2, f"max_size must be <= min(image_size) - 2 = {min(w, h) - 2}, got {max_size}", "max_size"
    )
    check(
        0.0 <= truncated_fraction <= 1.0,
        f"expected a fraction in [0, 1], got {truncated_fraction}",
        "truncated_fraction",
    )
    check(0.0 <= max_overlap <= 1.0, f"expected a value in [0, 1], got {max_overlap}", "max_overlap")
    check(dontcare_per_image >= 0, f"expected a rate >= 0, got {dontcare_per_image}", "dontcare_per_image")
    check(crowd_per_image >= 0, f"expected a rate >= 0, got {crowd_per_image}", "crowd_per_image")
    return {
        "n_images": int(n_images),
        "image_size": [w, h],
        "objects_per_image": [int(lo), int(hi)],
        "min_size": smin,
        "max_size": smax,
        "truncated_fraction": float(truncated_fraction),
        "max_overlap": float(max_overlap),
        "dontcare_per_image": float(dontcare_per_image),
        "crowd_per_image": float(crowd_per_image),
    }


def _object_sizes(
    rng: np.random.Generator, kind: np.ndarray, cat: np.ndarray, p: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """Full (unclipped) width and height [G] in pixels."""
    g = len(kind)
    W, H = p["image_size"]
    s = np.exp(rng.uniform(np.log(p["min_size"]), np.log(p["max_size"]), size=g))
    u = rng.random(g)
    lo = np.select([cat == 1, cat == 4, cat == 6], [ASPECT[1][0], ASPECT[4][0], ASPECT[6][0]], 1.0)
    hi = np.select([cat == 1, cat == 4, cat == 6], [ASPECT[1][1], ASPECT[4][1], ASPECT[6][1]], 1.0)
    ar = lo + u * (hi - lo)
    # crowd: a wide row of figures; DontCare: any aspect in [0.5, 3]
    ar = np.where(kind == KIND_CROWD, 1.5 + 1.5 * u, ar)
    ar = np.where(kind == KIND_DONTCARE, 0.5 + 2.5 * u, ar)
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
    b = gather(vis, pad, np.nan)
    inter = intersection(b[:, :, None, :], b[:, None, :, :])
    ar = area(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = inter / np.minimum(ar[:, :, None], ar[:, None, :])
    vmask = ok & gather(valid, pad, False)
    m = pad.shape[1]
    earlier = np.tril(np.ones((m, m), bool), k=-1)  # [j, i]: i < j
    bad = (np.nan_to_num(ratio, nan=0.0) > max_overlap) & earlier[None] & vmask[:, None, :] & vmask[:, :, None]
    out = np.zeros(len(vis), bool)
    out[pad[ok]] = bad.any(axis=2)[ok]
    return out


def _occlusion(vis: np.ndarray, image_row: np.ndarray, n_images: int, draw_rank: np.ndarray) -> np.ndarray:
    """Occluded share o [G] = min(1, sum over boxes drawn later of intersection / own area)."""
    pad = padded_groups(image_row, n_images)
    ok = pad >= 0
    b = gather(vis, pad, 0.0)
    inter = intersection(b[:, :, None, :], b[:, None, :, :])  # [N, j, i]
    r = gather(draw_rank, pad, -1)
    later = (r[:, None, :] > r[:, :, None]) & ok[:, None, :] & ok[:, :, None]
    share = np.where(later, inter, 0.0).sum(axis=2)
    ar = area(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(ar > 0, share / ar, 0.0)
    out = np.zeros(len(vis))
    out[pad[ok]] = np.minimum(frac[ok], 1.0)
    return out


def _place_without_overlap(
    rng: np.random.Generator,
    w: np.ndarray,
    h: np.ndarray,
    trunc: np.ndarray,
    edge: np.ndarray,
    image_row: np.ndarray,
    N: int,
    W: int,
    H: int,
    max_overlap: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full and visible boxes [G,4], re-drawing conflicting ones for a few rounds; valid [G] (False: dropped)."""
    g = len(w)
    full = _place(rng, w, h, trunc, edge, W, H)
    vis = _visible(full, W, H)
    valid = np.ones(g, bool)
    pad = padded_groups(image_row, N)
    active = pad  # rows of pad (images) that may hold a conflict: first all, then those that moved
    for _ in range(PLACEMENT_ROUNDS):
        bad = _conflicts(vis, active, valid, max_overlap) if g else np.zeros(0, bool)
        if not bad.any():
            break
        idx = np.flatnonzero(bad)
        full[idx] = _place(rng, w[idx], h[idx], trunc[idx], edge[idx], W, H)
        vis[idx] = _visible(full[idx], W, H)
        active = pad[np.unique(image_row[idx])]
    else:
        valid &= ~_conflicts(vis, active, valid, max_overlap)
    return full, vis, valid


def _dummies_3d(
    rng: np.random.Generator,
    kind: np.ndarray,
    cat: np.ndarray,
    full: np.ndarray,
    classes: np.ndarray,
    W: int,
    H: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """KITTI's 3-D fields (dimensions, location, rotation_y, alpha) of a pinhole camera with KITTI's focal
    length scaled to this image height; DontCare rows get the devkit's placeholders."""
    g = len(kind)
    f = KITTI_FOCAL * H / KITTI_IMAGE_HEIGHT
    base = np.array([DIMS_3D.get(int(c), DIMS_3D[4]) for c in classes], dtype=np.float64)
    dims = base[np.searchsorted(classes, np.where(kind == KIND_DONTCARE, 4, cat))]
    dims = np.round(dims * np.exp(rng.normal(0.0, 0.05, size=(g, 3))), 2)
    h_full = full[:, 3] - full[:, 1]
    z = np.round(f * dims[:, 0] / h_full, 2)
    x = np.round(((full[:, 0] + full[:, 2]) / 2 - W / 2) * z / f, 2)
    y = np.round((full[:, 3] - H / 2) * z / f, 2)
    rot = np.round(rng.uniform(-np.pi, np.pi, size=g), 2)
    alpha = np.round(np.angle(np.exp(1j * (rot - np.arctan2(x, z)))), 2)
    loc = np.stack([x, y, z], axis=1)
    dc = kind == KIND_DONTCARE
    dims[dc], loc[dc], rot[dc], alpha[dc] = -1.0, -1000.0, -10.0, -10.0
    return dims, loc, rot, alpha


def _kitti_fields(
    cat: np.ndarray,
    iscrowd: np.ndarray,
    dc: np.ndarray,
    loc: np.ndarray,
    vis: np.ndarray,
    trunc: np.ndarray,
    image_row: np.ndarray,
    N: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Truncation, occlusion level (from the drawing order) and KITTI difficulty [G] (DontCare, crowd: -1)."""
    g = len(cat)
    rank_kind, neg_depth = draw_order_key(cat, iscrowd, loc, vis)
    order = np.lexsort((np.arange(g), neg_depth, rank_kind, image_row))
    draw_rank = np.empty(g, np.int64)
    draw_rank[order] = np.arange(g)
    occ_share = _occlusion(vis, image_row, N, draw_rank)
    occ = np.where(occ_share < 0.1, 0, np.where(occ_share < 0.5, 1, 2)).astype(np.int64)
    occ[dc] = -1
    truncation = np.where(dc, np.nan, trunc)
    difficulty = kitti_difficulty(vis, truncation, occ)
    difficulty[dc | iscrowd] = -1
    return truncation, occ, difficulty


def _draw_objects(
    rng: np.random.Generator, p: dict[str, Any], classes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kind, image row, category, size (w, h), truncation and truncated edge [G] of every record.

    Per image: DontCare regions and crowds first, then objects (their order is the row order).
    """
    N = p["n_images"]
    lo, hi = p["objects_per_image"]
    n_obj = rng.integers(lo, hi + 1, size=N)
    n_dc = rng.poisson(p["dontcare_per_image"], size=N)
    n_crowd = rng.poisson(p["crowd_per_image"], size=N)
    per_image = np.stack([n_dc, n_crowd, n_obj], axis=1).reshape(-1)
    kind = np.repeat(np.tile([KIND_DONTCARE, KIND_CROWD, KIND_OBJECT], N), per_image)
    image_row = np.repeat(np.repeat(np.arange(N), 3), per_image)
    g = len(kind)
    cat = classes[rng.integers(0, len(classes), size=g)]
    cat = np.where(kind == KIND_CROWD, 4, np.where(kind == KIND_DONTCARE, DONTCARE_CATEGORY, cat))
    w, h = _object_sizes(rng, kind, cat, p)
    truncated = (rng.random(g) < p["truncated_fraction"]) & (kind == KIND_OBJECT)
    trunc = np.where(truncated, np.round(rng.uniform(0.05, 0.5, size=g), 2), 0.0)
    edge = rng.integers(0, 4, size=g)
    return kind, image_row, cat, w, h, trunc, edge


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
    p = _scene_params(
        n_images,
        image_size,
        objects_per_image,
        min_size,
        max_size,
        truncated_fraction,
        max_overlap,
        dontcare_per_image,
        crowd_per_image,
    )
    W, H = p["image_size"]
    N = p["n_images"]
    rng = stream_rng(seed, STREAM_SCENES)
    classes = np.array(sorted(SYNTHETIC_CATEGORIES), dtype=np.int64)
    kind, image_row, cat, w, h, trunc, edge = _draw_objects(rng, p, classes)
    full, vis, valid = _place_without_overlap(rng, w, h, trunc, edge, image_row, N, W, H, p["max_overlap"])
    keep = np.flatnonzero(valid)
    kind, image_row, cat, full, vis, trunc = kind[keep], image_row[keep], cat[keep], full[keep], vis[keep], trunc[keep]
    g = len(keep)
    dims, loc, rot, alpha = _dummies_3d(rng, kind, cat, full, classes, W, H)
    dc = kind == KIND_DONTCARE

    iscrowd = kind == KIND_CROWD
    truncation, occ, difficulty = _kitti_fields(cat, iscrowd, dc, loc, vis, trunc, image_row, N)

    ids = np.arange(1, N + 1, dtype=np.int64)
    images = Images(
        id=ids, width=np.full(N, float(W)), height=np.full(N, float(H)), file_name=[f"{i:06d}.png" for i in ids]
    )
    gt = GroundTruth(
        image_id=ids[image_row],
        box=vis,
        category=cat,
        iscrowd=iscrowd,
        ignore=iscrowd | dc,
        id=np.arange(1, g + 1, dtype=np.int64),
        truncation=truncation,
        occlusion=occ,
        difficulty=difficulty,
        alpha=alpha,
        dimensions=dims,
        location=loc,
        rotation_y=rot,
    )
    categories = dict(SYNTHETIC_CATEGORIES)
    if p["dontcare_per_image"] > 0:
        categories[DONTCARE_CATEGORY] = "DontCare"
    dataset = Dataset(images=images, gt=gt, categories=categories, source=f"synthetic(seed={int(seed)})")
    if not render:
        return dataset, None
    imgs = [render_scene(dataset, i, seed) for i in range(N)]
    return dataset, imgs
