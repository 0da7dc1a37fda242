"""Image chunks: the detections and ground truth of cache-sized blocks of whole images.

Every rule of :mod:`detcal.matching.engine` (``exclusive`` and ``max``, without KITTI rules) looks
at one image at a time: a detection's outcome depends on the detections and ground truth of its own
image only. A stage that works over the whole set can therefore run on blocks of whole images one
after the other and put each block's results back at its input rows, with the same values. What it
gains: the random-access gathers of one block read arrays that fit the processor's cache (a few MB),
where the same gathers over full-size columns (a 1.2M-row float64 column is 9.6 MB) miss it, and the
time would grow faster than the detections.

:func:`image_chunks` cuts the images, in ascending id order, into contiguous runs of about
``size`` detections (an image is never split; an image with more detections than ``size`` is a
chunk of its own) and returns, per chunk, the detection rows and the ground-truth rows of its
images, each ascending (so each chunk keeps the input order of its rows), as a slice when they
are one contiguous run (the usual case: a results file listed image by image). Ground truth of an
image without detections belongs to no chunk (it cannot change any detection's outcome).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from detcal.matching.blocks import factorize

__all__ = [
    "CHUNK_DETECTIONS",
    "ImageChunk",
    "image_chunks",
    "layout_chunk_size",
    "row_numbers",
    "rows_index",
    "rows_through",
]

CHUNK_DETECTIONS: int = 1 << 17
"""Detections per image chunk (about 131k): the per-pair and per-detection arrays of one chunk stay
within a few MB, measured fastest on the 5k and 20k benchmark sets (docs/scale.md). (Chunks of 65k
make the matcher a little faster and its working memory 14 MB smaller, but the lean run's peak, set
later by the diagnostics, rose by about 10 MB on the Objects365-shaped set: kept at 131k.)"""


def layout_chunk_size() -> int:
    """Detections per image chunk of COCO AP's matching layout (:func:`detcal.matching.engine.exclusive_layout`,
    :func:`detcal.matching.engine.layout_and_match`): half of :data:`CHUNK_DETECTIONS` (read at the call).
    Their chunks' layouts are held until joined, and each chunk's pairs are made for two box areas: the
    smaller chunk keeps one chunk's working arrays to a few MB, at the same speed (docs/scale.md)."""
    return max(1, CHUNK_DETECTIONS // 2)


class ImageChunk(NamedTuple):
    """One chunk: its detection rows and ground-truth rows (ascending; a slice when contiguous)."""

    det: slice | np.ndarray
    gt: slice | np.ndarray


def rows_index(rows: np.ndarray) -> slice | np.ndarray:
    """Sorted, distinct rows as a slice when they are one contiguous run (views instead of gathers)."""
    if len(rows) == 0:
        return slice(0, 0)
    if int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def row_numbers(index: slice | np.ndarray, n: int) -> np.ndarray:
    """The row numbers [k] an :class:`ImageChunk` index selects out of ``n`` rows (a slice's without
    building all ``n``)."""
    if isinstance(index, slice):
        return np.arange(*index.indices(n), dtype=np.int64)
    return index


def rows_through(index: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``index`` (positions into ``rows``, -1 none; any shape) as the rows themselves, -1 kept: a chunk's
    GT positions as rows of the whole ground truth, in one lookup (int64)."""
    lut = np.empty(len(rows) + 1, np.int64)
    lut[:-1] = rows
    lut[-1] = -1  # index -1 reads the last entry
    return lut[index]


def _rows_by_code(code: np.ndarray, n_chunks: int) -> list[slice | np.ndarray]:
    """Rows of each code 0..n_chunks-1 (``code`` -1: in none), ascending, as slices when contiguous."""
    n = len(code)
    if n and bool((code[1:] >= code[:-1]).all()):  # already grouped in code order: slices
        # the first row of each code (integer needles: a float needle would convert every code to float)
        bounds = np.searchsorted(code, np.arange(n_chunks + 1, dtype=code.dtype)).tolist()
        return [slice(bounds[k], bounds[k + 1]) for k in range(n_chunks)]
    order = np.argsort(code, kind="stable")  # ascending rows within each code
    counts = np.bincount(code + 1, minlength=n_chunks + 1)
    bounds = np.cumsum(counts).tolist()
    return [rows_index(order[bounds[k] : bounds[k + 1]]) for k in range(n_chunks)]


def image_chunks(det_image: np.ndarray, gt_image: np.ndarray, size: int | None = None) -> list[ImageChunk]:
    """Chunks of whole images of about ``size`` detections (None: :data:`CHUNK_DETECTIONS`, read at the call;
    see the module docstring); one chunk holding every row when the detections fit in one (or there are none)."""
    size = CHUNK_DETECTIONS if size is None else max(1, int(size))
    nd = len(det_image)
    if nd <= size:
        return [ImageChunk(slice(0, nd), slice(0, len(gt_image)))]
    code, n_img = factorize(np.concatenate([det_image, gt_image]))  # order-preserving image codes
    counts = np.bincount(code[:nd], minlength=n_img)
    chunk_of_image = (np.cumsum(counts) - counts) // size  # by the detections of the images before
    chunk_of_image[counts == 0] = -1  # no detections: its ground truth joins no chunk
    has = chunk_of_image >= 0
    dense = np.cumsum(np.diff(chunk_of_image[has], prepend=-1) > 0) - 1  # 0..n-1, skipping none
    chunk_of_image[has] = dense
    n_chunks = int(dense[-1]) + 1
    det_rows = _rows_by_code(chunk_of_image[code[:nd]], n_chunks)
    gt_rows = _rows_by_code(chunk_of_image[code[nd:]], n_chunks)
    return [ImageChunk(d, g) for d, g in zip(det_rows, gt_rows)]
