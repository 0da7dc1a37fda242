"""Shared constants, validation and grouping helpers of the synthetic generator."""

from __future__ import annotations

from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import COORDS

SYNTHETIC_CATEGORIES: dict[int, str] = {1: "Car", 4: "Pedestrian", 6: "Cyclist"}
"""Object classes of the synthetic scenes, with the fixed KITTI ids and names."""

DONTCARE_CATEGORY: int = 9
"""KITTI id of ``DontCare`` (``detcal.core.types.KITTI_CATEGORIES[9]``)."""

COCO_SCALE_CATEGORIES: dict[int, str] = {
    1: "person",
    2: "bicycle",
    3: "car",
    4: "motorcycle",
    6: "bus",
    8: "truck",
    18: "dog",
    44: "bottle",
}
"""Categories of :func:`generate_coco_scale` (COCO ids, non-contiguous on purpose)."""

ASPECT: dict[int, tuple[float, float]] = {1: (1.6, 2.4), 4: (0.35, 0.5), 6: (0.7, 1.0)}
DIMS_3D: dict[int, tuple[float, float, float]] = {
    1: (1.53, 1.63, 3.88),
    4: (1.76, 0.66, 0.84),
    6: (1.74, 0.60, 1.76),
}
KITTI_FOCAL = 721.5377
KITTI_IMAGE_HEIGHT = 375.0
PLACEMENT_ROUNDS = 30
FP_ROUNDS = 30
FP_MAX_IOU = 0.1
B_MIN, B_MAX = 1e-3, 1e3
STREAM_SCENES, STREAM_DETECTOR, STREAM_PIXELS, STREAM_COCO = 0, 1, 2, 3
KIND_OBJECT, KIND_CROWD, KIND_DONTCARE = 0, 1, 2


# --------------------------------------------------------------------------- validation


def check(cond: bool, message: str, field: str, record: Any = None) -> None:
    if not cond:
        raise DetcalInputError(message, record=record, field=field)


def check_pair(value: Any, field: str, positive: bool = True) -> tuple[float, float]:
    try:
        a, b = (float(v) for v in value)
    except (TypeError, ValueError):
        raise DetcalInputError(f"expected two numbers, got {value!r}", field=field) from None
    check(a <= b, f"expected lower <= upper, got {value!r}", field)
    if positive:
        check(a > 0, f"expected positive values, got {value!r}", field)
    return a, b


def check_vec4(value: Any, field: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    check(arr.shape == (4,), f"expected 4 values (one per coordinate {COORDS}), got {value!r}", field)
    check(
        bool(np.all(np.isfinite(arr)) and np.all(arr > 0)), f"expected 4 finite positive values, got {value!r}", field
    )
    return arr


def stream_rng(seed: int, stream: int, *extra: int) -> np.random.Generator:
    check(
        isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed >= 0,
        f"expected an int >= 0, got {seed!r}",
        "seed",
    )
    return np.random.default_rng([int(seed), stream, *[int(e) for e in extra]])


# --------------------------------------------------------------------------- grouping helpers


def padded_groups(group: np.ndarray, n_groups: int) -> np.ndarray:
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


def gather(arr: np.ndarray, pad: np.ndarray, fill: Any) -> np.ndarray:
    """``arr[pad]`` with ``fill`` where ``pad == -1`` (works for an empty ``arr``)."""
    ext = np.concatenate([arr, np.full((1,) + arr.shape[1:], fill, dtype=arr.dtype)])
    return ext[pad]


def intersection(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise (broadcast) intersection area of xyxy boxes ``a`` [...,4] and ``b`` [...,4]."""
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    return np.clip(iw, 0, None) * np.clip(ih, 0, None)


def draw_order_key(
    category: np.ndarray, iscrowd: np.ndarray, location: np.ndarray | None, box: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(kind rank, -depth): DontCare first, then crowds, then objects far to near."""
    rank = np.where(category == DONTCARE_CATEGORY, 0, np.where(iscrowd, 1, 2))
    if location is not None:
        depth = location[:, 2]
    else:  # records without 3-D fields: taller = nearer
        depth = -(box[:, 3] - box[:, 1])
    return rank, -depth
