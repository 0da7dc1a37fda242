"""Rendering of synthetic scenes to RGB images."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from detcal.core.types import Dataset
from detcal.data.synthetic._common import DONTCARE_CATEGORY, STREAM_PIXELS, check, draw_order_key, stream_rng

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
    draw.polygon(
        [(cx, y1 + 0.18 * h), (cx - 0.25 * w, y2 - 1.3 * r), (cx + 0.25 * w, y2 - 1.3 * r)],
        fill=_colour((240, 210, 30), jit),
    )
    rh = min(0.1 * h, 0.2 * w)
    draw.ellipse([cx - rh, y1, cx + rh, y1 + 2 * rh], fill=_colour((240, 185, 120), 0.3 * jit))


def _draw_crowd(draw: Any, b: np.ndarray, jit: np.ndarray) -> None:
    x1, y1, x2, y2 = b
    w, h = x2 - x1, y2 - y1
    n = max(2, int(w / max(0.45 * h, 1.0)))
    step = w / n
    for k in range(n):
        _draw_pedestrian(
            draw, np.array([x1 + k * step, y1 + 0.1 * h * (k % 2), x1 + (k + 1) * step, y2]), jit * (-1) ** k
        )


_DRAWERS = {1: _draw_car, 4: _draw_pedestrian, 6: _draw_cyclist}


def render_scene(dataset: Dataset, image_index: int, seed: int = 0) -> np.ndarray:
    """Pixels uint8 ``[H, W, 3]`` of row ``image_index`` of ``dataset.images``.

    Deterministic in ``(seed, image id)`` (random stream 2), independent of the
    other images: equal to ``generate_scenes(..., seed=seed, render=True)[1][i]``.
    Background: per-image colour with a vertical gradient, ~6 low-contrast
    rectangles and N(0, 6^2) noise; then DontCare noise patches, crowds and
    objects far to near (order of :func:`draw_order_key`), each with a colour
    jitter N(0, 18^2); finally N(0, 4^2) sensor noise. Truncated objects are
    drawn at their full extent (recovered from ``truncation``) and clipped by
    the image frame. Needs the records as generated (or a KITTI round trip,
    which keeps ``location``); with no ``location`` taller boxes are drawn later.
    """
    from PIL import Image, ImageDraw  # lazy: Pillow only when images are drawn or read

    n = len(dataset.images)
    check(0 <= int(image_index) < n, f"image_index {image_index} outside 0..{n - 1}", "image_index")
    img_id = int(dataset.images.id[image_index])
    W = int(round(float(dataset.images.width[image_index])))
    H = int(round(float(dataset.images.height[image_index])))
    gt = dataset.gt
    rows = np.flatnonzero(gt.image_id == img_id)
    rng = stream_rng(seed, STREAM_PIXELS, img_id)

    base = rng.uniform(70, 170, size=3)
    grad = 0.85 + 0.3 * (np.arange(H, dtype=np.float64) / max(H - 1, 1))
    canvas = base[None, None, :] * grad[:, None, None] * np.ones((1, W, 1))
    for _ in range(6):
        rx, ry = rng.uniform(0, W), rng.uniform(0, H)
        rw, rh = rng.uniform(5, W / 2), rng.uniform(3, H / 3)
        delta = rng.uniform(-20, 20)
        canvas[int(ry) : int(ry + rh), int(rx) : int(rx + rw)] += delta
    canvas += rng.normal(0.0, 6.0, size=(H, W, 3))

    loc = None if gt.location is None else gt.location[rows]
    rank_kind, neg_depth = draw_order_key(gt.category[rows], gt.iscrowd[rows], loc, gt.box[rows])
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
