"""Sanity checks on loaded input: mistakes that would otherwise give plausible-looking numbers.

Three mistakes load without a single malformed record and end in numbers that
mean nothing (docs/formats.md#input-checks):

- **the other box convention**: boxes written ``[x1, y1, x2, y2]`` where COCO
  expects ``[x, y, width, height]`` reach far past the image's right and
  bottom edges. When more than ``data.max_outside_share`` of the detections
  reach past an edge by more than :data:`OUTSIDE_TOLERANCE` of the image's
  side, the run stops; from :data:`OUTSIDE_WARN_SHARE` up it warns;
- **an empty ground truth** (no box at all): every detection is a false
  positive and AP is undefined; the run stops unless ``data.allow_empty_gt``;
- **detections of categories the ground truth lacks**: they are left out
  (pycocotools ignores them); when more than
  ``data.max_unknown_category_share`` of them are, the run stops (a wrong
  category mapping, or results of another dataset), below it warns.

Each stop is a :class:`DetcalInputError` of one line naming the file, what is
wrong and the option that proceeds anyway; each warning is one log line, kept
for metrics.json ``warnings`` (and so for the console summary).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import DataSpec
from detcal.utils.warn import note

__all__ = ["check_input", "outside_share", "OUTSIDE_TOLERANCE", "OUTSIDE_WARN_SHARE"]

log = logging.getLogger("detcal")

OUTSIDE_TOLERANCE = 0.05
"""A box counts as reaching outside when an edge lies past the image by more than this share of its side."""

OUTSIDE_WARN_SHARE = 0.01
"""From this share of detections reaching outside, a warning (below ``data.max_outside_share``)."""


def _where(data: LoadedData, *keys: str) -> Any:
    """The first of ``keys`` the input's provenance names (an adapter's too), else the dataset's source."""
    p = data.provenance
    for k in keys:
        v = p.get(k) or (p.get("adapter") or {}).get(k)
        if v:
            return v
    return data.dataset.source or None


OUTSIDE_ROWS: int = 1 << 16
"""Detections looked at a slice at a time by :func:`outside_share` (the temporaries of a slice, not of the file)."""


def _edge_limits(width: np.ndarray, height: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per image, then one row more for an unknown image (row -1): ``[left, top, right, bottom]`` limits
    past which a box edge reaches outside (``-tol * w``, ``-tol * h``, ``(1 + tol) * w``, ``(1 + tol) * h``),
    limits no box passes (-inf, -inf, inf, inf) for an image without a known positive size; and whether
    each has a known size."""
    tol = OUTSIDE_TOLERANCE
    lim = np.empty((len(width) + 1, 4), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lim[:-1] = np.stack([-tol * width, -tol * height, (1 + tol) * width, (1 + tol) * height], axis=1)
    sized = np.append(np.isfinite(width) & np.isfinite(height) & (width > 0) & (height > 0), False)
    lim[~sized] = (-np.inf, -np.inf, np.inf, np.inf)
    return lim, sized


def outside_share(data: LoadedData) -> tuple[int, int]:
    """(detections whose box reaches past the image by more than :data:`OUTSIDE_TOLERANCE` of its side,
    detections on images with a known size)."""
    ds, dets = data.dataset, data.detections
    if len(dets) == 0:
        return 0, 0
    lim, sized = _edge_limits(ds.images.width, ds.images.height)
    n_out = n_sized = 0
    for lo in range(0, len(dets), OUTSIDE_ROWS):
        row = ds.images.index_of(dets.image_id[lo : lo + OUTSIDE_ROWS])  # -1 (unknown): the last, unsized row
        edge, box = lim.take(row, axis=0), dets.box[lo : lo + OUTSIDE_ROWS]
        out = (box[:, 0] < edge[:, 0]) | (box[:, 1] < edge[:, 1]) | (box[:, 2] > edge[:, 2]) | (box[:, 3] > edge[:, 3])
        n_out += int(np.count_nonzero(out))
        n_sized += int(np.count_nonzero(sized[row]))
    return n_out, n_sized


def _pct(n: int, total: int) -> str:
    return f"{n} of {total} detections ({100.0 * n / max(total, 1):.0f}%)"


def _check_gt(data: LoadedData, spec: DataSpec) -> None:
    if len(data.dataset.gt) == 0 and not spec.allow_empty_gt:
        raise DetcalInputError(
            f"the ground truth has no annotations on its {len(data.dataset.images)} images: every detection "
            "would be a false positive and AP undefined; check the ground-truth file, or set "
            "data.allow_empty_gt=true to proceed",
            file=_where(data, "gt", "label_dir"),
        )


def _check_unknown(data: LoadedData, spec: DataSpec) -> str | None:
    n = int(data.dropped.get("unknown_category", 0))
    if n == 0 or data.shard is not None:  # a shard's dropped count is the whole file's
        return None
    total = n + len(data.detections)
    if n > spec.max_unknown_category_share * total:
        raise DetcalInputError(
            f"{_pct(n, total)} have a category id the ground truth lacks (more than "
            f"data.max_unknown_category_share={spec.max_unknown_category_share:g}): a wrong category mapping or "
            "results of another dataset? Fix the ids, or set data.max_unknown_category_share=1 to proceed "
            "(they are left out)",
            file=_where(data, "results", "results_dir"),
            field="category_id",
        )
    return None  # the warning is the loader's (sources.unknown_category_warning), already logged


def _check_boxes(data: LoadedData, spec: DataSpec) -> str | None:
    if data.shard is not None:  # one rank sees one shard: every rank must decide alike, so the whole load decides
        return None
    n, total = outside_share(data)
    if total == 0 or n < OUTSIDE_WARN_SHARE * total:
        return None
    what = f"{_pct(n, total)} reach past the image by more than {OUTSIDE_TOLERANCE:.0%} of its side"
    if n > spec.max_outside_share * total:
        raise DetcalInputError(
            f"{what} (more than data.max_outside_share={spec.max_outside_share:g}), as boxes written "
            "[x1, y1, x2, y2] where COCO expects [x, y, width, height] do; write the boxes in the format's "
            "convention (docs/formats.md), or set data.max_outside_share=1 to proceed",
            file=_where(data, "results", "results_dir"),
            field="bbox",
        )
    return (
        f"{_where(data, 'results', 'results_dir')}: {what} (is the box convention right? docs/formats.md#input-checks)"
    )


def check_input(data: LoadedData, spec: DataSpec | None = None) -> list[str]:
    """Stop on the three silent mistakes of the module docstring (thresholds from ``spec``, defaults when
    None); return the warnings below the thresholds (each logged once and kept for metrics.json)."""
    spec = spec or DataSpec()
    _check_gt(data, spec)
    warns = [w for w in (_check_unknown(data, spec), _check_boxes(data, spec)) if w]
    for w in warns:
        log.warning("%s", w)
        note(w)
    return warns
