"""COCO segmentations as pixel masks, and the per-class score vectors of results files.

Read only where a measure needs them (PDQ with segmentation ground truth,
its label quality from a full class distribution): the columnar
:class:`~detcal.types.GroundTruth` keeps boxes only.

Rasterisation follows the COCO API (``pycocotools`` ``annToMask``: polygons
through ``rleFrPoly``, several polygons of one object united, crowd regions
given as uncompressed or compressed run-length encodings), written here with
numpy so that pycocotools stays a test-only reference:

* every polygon vertex is scaled by 5 and rounded (``int(5 v + 0.5)``);
* each edge is walked one upsampled step at a time along its longer axis,
  the other coordinate rounded the same way;
* wherever the walk changes column, a boundary point is kept if the column,
  brought back to the image (``(u + 0.5) / 5 - 0.5``), is a whole pixel
  column inside the image; its row is ``ceil`` of the lower of the two rows,
  brought back the same way and clipped to ``[0, H]``;
* pixels are toggled on at each boundary point in column-major order
  (a pixel is inside when an odd number of boundary points precede or equal it).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset

__all__ = [
    "polygon_mask",
    "rle_mask",
    "segmentation_mask",
    "segmentation_crop",
    "load_segmentations",
    "load_class_scores",
    "mask_rows",
]

_SCALE = 5.0


def _c_int(a: np.ndarray) -> np.ndarray:
    """C's ``(int)`` cast: truncation toward zero."""
    return np.trunc(a).astype(np.int64)


def polygon_mask(xy: Any, h: int, w: int) -> np.ndarray:
    """``[h, w]`` bool mask of one polygon ``[x0, y0, x1, y1, ...]`` as COCO rasterises it (module docstring)."""
    return _toggle(_polygon_toggles(xy, h, w), h, w)


def _polygon_toggles(xy: Any, h: int, w: int) -> np.ndarray:
    """Column-major positions ``x h + y`` where the polygon's mask switches (module docstring)."""
    p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    x = _c_int(_SCALE * p[:, 0] + 0.5)
    y = _c_int(_SCALE * p[:, 1] + 0.5)
    x = np.append(x, x[:1])
    y = np.append(y, y[:1])
    xs, xe, ys, ye = x[:-1], x[1:], y[:-1], y[1:]
    dx, dy = np.abs(xe - xs), np.abs(ys - ye)
    along_x = dx >= dy
    flip = (along_x & (xs > xe)) | (~along_x & (ys > ye))
    xs, xe = np.where(flip, xe, xs), np.where(flip, xs, xe)
    ys, ye = np.where(flip, ye, ys), np.where(flip, ys, ye)
    steps = np.where(along_x, dx, dy)
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(along_x, (ye - ys) / np.where(dx == 0, 1, dx), (xe - xs) / np.where(dy == 0, 1, dy))
    n = steps + 1
    edge = np.repeat(np.arange(len(n)), n)
    d = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    t = np.where(flip[edge], steps[edge] - d, d)
    ax = along_x[edge]
    u = np.where(ax, t + xs[edge], _c_int(xs[edge] + s[edge] * t + 0.5))
    v = np.where(ax, _c_int(ys[edge] + s[edge] * t + 0.5), t + ys[edge])
    change = np.flatnonzero(u[1:] != u[:-1]) + 1
    uj, uk, vj, vk = u[change], u[change - 1], v[change], v[change - 1]
    xd = np.where(uj < uk, uj, uj - 1).astype(np.float64)
    xd = (xd + 0.5) / _SCALE - 0.5
    keep = (np.floor(xd) == xd) & (xd >= 0) & (xd <= w - 1)
    yd = np.minimum(vj, vk).astype(np.float64)
    yd = (yd + 0.5) / _SCALE - 0.5
    yd = np.ceil(np.clip(yd, 0, h))
    return xd[keep].astype(np.int64) * h + yd[keep].astype(np.int64)


def _toggle_crop(pos: np.ndarray, h: int, c0: int, c1: int) -> np.ndarray:
    """``[h, c1 - c0]`` mask of columns ``c0 .. c1 - 1`` from toggle positions (all of them at or after column c0)."""
    flips = np.bincount(pos - c0 * h, minlength=(c1 - c0) * h + 1)[: (c1 - c0) * h]
    return (np.cumsum(flips) % 2 == 1).reshape(c1 - c0, h).T


def segmentation_crop(segm: Any, h: int, w: int) -> tuple[np.ndarray, int]:
    """The mask of a COCO ``segmentation`` on the columns it touches: ``([h, n] bool, first column)``.

    Same pixels as :func:`segmentation_mask`, without drawing the whole image for a small object."""
    if isinstance(segm, list):
        toggles = [t for t in (_polygon_toggles(p, h, w) for p in segm) if len(t)]
        if not toggles:
            return np.zeros((h, 0), bool), 0
        c0 = min(int(t.min()) // h for t in toggles)
        c1 = max((int(t.max()) - 1) // h for t in toggles) + 1
        out = np.zeros((h, max(c1 - c0, 0)), bool)
        for t in toggles:  # the polygons of one object, united
            out |= _toggle_crop(t, h, c0, c1)
        return out, c0
    m = segmentation_mask(segm, h, w)
    cols = np.flatnonzero(m.any(axis=0))
    if len(cols) == 0:
        return np.zeros((h, 0), bool), 0
    return m[:, cols[0] : cols[-1] + 1], int(cols[0])


def _toggle(pos: np.ndarray, h: int, w: int) -> np.ndarray:
    flips = np.bincount(pos, minlength=h * w + 1)[: h * w]
    return (np.cumsum(flips) % 2 == 1).reshape(w, h).T


def _decode_counts(s: str) -> list[int]:
    """COCO's compressed RLE string -> run lengths (6-bit groups, sign-extended, deltas from two runs back)."""
    counts: list[int] = []
    i = 0
    data = s.encode("ascii")
    while i < len(data):
        x, k, more = 0, 0, True
        while more:
            c = data[i] - 48
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            i += 1
            k += 1
            if not more and (c & 0x10):
                x |= -1 << (5 * k)
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def rle_mask(counts: Any, h: int, w: int) -> np.ndarray:
    """``[h, w]`` bool mask of a COCO run-length encoding (list of runs, or the compressed string)."""
    runs = np.asarray(_decode_counts(counts) if isinstance(counts, str) else counts, dtype=np.int64)
    vals = np.arange(len(runs)) % 2 == 1
    flat = np.repeat(vals, runs)
    if len(flat) != h * w:
        raise ValueError(f"run lengths add up to {len(flat)}, expected {h} x {w} = {h * w}")
    return flat.reshape(w, h).T


def segmentation_mask(segm: Any, h: int, w: int) -> np.ndarray:
    """``[h, w]`` bool mask of a COCO ``segmentation`` (polygon list, or an RLE dict)."""
    if isinstance(segm, list):
        out = np.zeros((h, w), bool)
        for poly in segm:  # the polygons of one object (a handful)
            out |= polygon_mask(poly, h, w)
        return out
    if isinstance(segm, dict) and "counts" in segm:
        return rle_mask(segm["counts"], h, w)
    raise ValueError(f"unsupported segmentation {type(segm).__name__}: expected polygons or an RLE dict")


def load_segmentations(path: str | Path, dataset: Dataset) -> list[Any]:
    """The ``segmentation`` of every ground-truth row of ``dataset`` (aligned by annotation id), from the COCO file ``path``.

    A row whose annotation has no segmentation gets ``None``."""
    file = str(path)
    try:
        doc = json.loads(_read(path))
    except (OSError, ValueError) as e:
        raise DetcalInputError(f"cannot read the segmentations: {e}", file=file) from e
    by_id = {a.get("id"): a.get("segmentation") for a in doc.get("annotations", [])}
    out = []
    for row, aid in enumerate(dataset.gt.id.tolist()):
        if aid not in by_id:
            raise DetcalInputError(
                f"annotation id {aid} is not in the file", file=file, record=f"ground-truth row {row}", field="id"
            )
        out.append(by_id[aid])
    return out


def _read(path: str | Path) -> bytes:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def load_class_scores(path: str | Path, n: int | None = None) -> np.ndarray | None:
    """``[D, C]`` class distributions of a COCO results file (``all_scores``, or ``label_probs``), in file order.

    ``None`` when no record carries one. Every record must then carry one of the same length."""
    file = str(path)
    try:
        recs = json.loads(_read(path))
    except (OSError, ValueError) as e:
        raise DetcalInputError(f"cannot read the results: {e}", file=file) from e
    key = next((k for k in ("all_scores", "label_probs") if recs and k in recs[0]), None)
    if key is None:
        return None
    try:
        out = np.array([r[key] for r in recs], dtype=np.float64)
    except (KeyError, ValueError, TypeError) as e:
        raise DetcalInputError(
            f"every record needs a '{key}' list of the same length ({e})", file=file, field=key
        ) from e
    if out.ndim != 2 or (n is not None and len(out) != n):
        raise DetcalInputError(f"'{key}' must be one list per record ({n} records)", file=file, field=key)
    bad = ~np.isfinite(out) | (out < 0) | (out > 1)
    if bad.any():
        i = int(np.argwhere(bad)[0, 0])
        raise DetcalInputError(
            f"class probability outside [0, 1]: {out[i].tolist()[:5]}...", file=file, record=i, field=key
        )
    return out


def mask_rows(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The horizontal runs of a bool mask: row, first column, one past the last column (each [m])."""
    m = np.zeros((mask.shape[0], mask.shape[1] + 2), np.int8)
    m[:, 1:-1] = mask
    d = np.diff(m, axis=1)
    r0, c0 = np.nonzero(d == 1)
    r1, c1 = np.nonzero(d == -1)
    return r0, c0, c1
