"""COCO adapter: instances files (ground truth) and results files (detections).

Formats (https://cocodataset.org/#format-data and #format-results):

* instances: ``{"images": [{id, width, height, file_name}], "annotations":
  [{id, image_id, category_id, bbox: [x, y, w, h], iscrowd, ignore?}],
  "categories": [{id, name}]}``;
* results: ``[{image_id, category_id, bbox: [x, y, w, h], score}, ...]`` (or a
  dict with an ``"annotations"`` list), in file order, optionally with one or
  more uncertainty fields (../shared/METRICS.md section 1):

  ============== ======== =====================================================
  key            shape    meaning (record field in :class:`Detections`)
  ============== ======== =====================================================
  bbox_std       [4]      pixel std of (cx, cy, w, h)                (box_std)
  bbox_covar     [4,4]    covariance in (x, y, w, h) pixels, probdet (box_cov)
  covars         [2,2,2]  2x2 covariances of the top-left and bottom-right
                          corners, PDQ; symmetric PSD              (corner_cov)
  proposal       [4]      reference box P as [x, y, w, h]           (proposal)
  delta_mean     [4]      unweighted R-CNN delta means mu          (delta_mean)
  delta_std      [4]      delta stds sigma                          (delta_std)
  delta_logvar   [4]      log sigma^2, read as sigma = exp(0.5 logvar)
  ============== ======== =====================================================

COCO ``[x, y, w, h]`` is converted to the internal ``xyxy`` here and nowhere
else (x2 = x + w). Written back, w = x2 - x; this is exact whenever the
subtraction is (Sterbenz: x2/2 <= x <= 2 x2, integer or dyadic pixels),
otherwise it may differ from the input by one unit in the last place. All
other floats round-trip exactly (``repr`` precision).

Parsing uses ``orjson`` when it is importable (faster on large results files)
and the standard :mod:`json` otherwise; both give the same records. The
records are turned into columns in one pass and validated with numpy masks;
only the error path walks them one by one to name the first bad record.

Every error is a :class:`detcal.errors.DetcalInputError` naming the file, the
record (index into the results list, or ``annotations[i]`` / ``images[i]``)
and the field.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from detcal.boxes import xywh_to_xyxy, xyxy_to_xywh
from detcal.errors import DetcalInputError
from detcal.types import Dataset, Detections, GroundTruth, Images
from detcal.utils.io import atomic_write

try:  # optional fast path, same results as json
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

PathLike = str | os.PathLike[str]

__all__ = [
    "load_coco_instances",
    "load_coco_results",
    "write_coco_instances",
    "write_coco_results",
    "dataset_to_coco_dict",
    "detections_to_coco_list",
    "to_pycocotools",
    "results_to_pycocotools",
]

RESULT_UNCERTAINTY_KEYS: tuple[str, ...] = (
    "bbox_std", "bbox_covar", "covars", "proposal", "delta_mean", "delta_std", "delta_logvar",
)
"""Optional uncertainty keys of a results record (module docstring)."""

_NUMERIC_KINDS = "iuf"
_TOP = "(top level)"
_SYM_RTOL = 1e-6
"""Relative tolerance of the symmetry test of a covariance (files round to ~6 digits)."""
_PSD_RTOL = 1e-9
"""A covariance is PSD when its smallest eigenvalue >= -_PSD_RTOL * max |entry|."""


# --------------------------------------------------------------------------- helpers
def _rec(prefix: str, i: int) -> str | int:
    return f"{prefix}[{i}]" if prefix else i


def _first_true(mask: np.ndarray) -> int:
    """Index of the first row of ``mask`` [R,...] holding a True; -1 if none."""
    m = np.asarray(mask, dtype=bool)
    if m.ndim > 1:
        m = m.reshape(m.shape[0], -1).any(axis=1) if m.size else np.zeros(m.shape[0], dtype=bool)
    hits = np.flatnonzero(m)
    return int(hits[0]) if len(hits) else -1


def _is_numeric(value: Any, shape: tuple[int, ...]) -> bool:
    try:
        a = np.asarray(value)
    except (ValueError, TypeError):
        return False
    return a.shape == shape and a.dtype.kind in _NUMERIC_KINDS


def _numeric_column(
    values: list, shape: tuple[int, ...], *, file: str, field: str, prefix: str = "", what: str = "a number"
) -> np.ndarray:
    """One JSON value per record -> float64 ``[R, *shape]``; numbers only (no bool, no str)."""
    n = len(values)
    if n == 0:
        return np.zeros((0,) + shape, dtype=np.float64)
    try:
        raw = np.asarray(values)
        ok = raw.dtype.kind in _NUMERIC_KINDS and raw.shape == (n,) + shape
    except (ValueError, TypeError):
        ok = False
    if not ok:
        bad = next((i for i, v in enumerate(values) if not _is_numeric(v, shape)), 0)
        raise DetcalInputError(f"expected {what}, got {values[bad]!r}", file=file, record=_rec(prefix, bad), field=field)
    return raw.astype(np.float64, copy=False)


def _integer_column(values: list, *, file: str, field: str, prefix: str = "") -> np.ndarray:
    """One JSON value per record -> int64 ``[R]``; floats accepted when integral."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    arr = _numeric_column(values, (), file=file, field=field, prefix=prefix, what="an integer")
    if np.asarray(values).dtype.kind in "iu":
        return np.asarray(values, dtype=np.int64)
    bad = _first_true(~np.isfinite(arr) | (arr != np.round(arr)))
    if bad >= 0:
        raise DetcalInputError(f"expected an integer, got {values[bad]!r}", file=file, record=_rec(prefix, bad), field=field)
    return arr.astype(np.int64)


def _flag_column(values: list, *, file: str, field: str, prefix: str = "") -> np.ndarray:
    """0/1 or true/false per record -> bool ``[R]``."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    try:
        raw = np.asarray(values)
        ok = raw.dtype.kind in "biu" and raw.ndim == 1 and bool(np.isin(raw, (0, 1)).all())
    except (ValueError, TypeError):
        ok = False
    if not ok:
        bad = next(
            (i for i, v in enumerate(values) if not (isinstance(v, (bool, int)) and v in (0, 1))), 0
        )
        raise DetcalInputError(f"expected 0/1 or true/false, got {values[bad]!r}", file=file, record=_rec(prefix, bad), field=field)
    return raw.astype(bool)


def _require(records: list[dict], key: str, *, file: str, prefix: str = "") -> list:
    """The value of ``key`` in every record; error naming the first record lacking it (or null)."""
    values = [r.get(key) for r in records]
    if None in values:
        bad = next(i for i, v in enumerate(values) if v is None)
        raise DetcalInputError(f"missing required key {key!r} (or it is null)", file=file, record=_rec(prefix, bad), field=key)
    return values


def _check_dicts(records: list, *, file: str, prefix: str = "") -> None:
    if not all(type(r) is dict for r in records):
        bad = next(i for i, r in enumerate(records) if type(r) is not dict)
        raise DetcalInputError(f"expected a JSON object, got {type(records[bad]).__name__}", file=file, record=_rec(prefix, bad))


def _check_unique(ids: np.ndarray, *, file: str, field: str, prefix: str = "") -> None:
    """Error naming the first record whose id repeats an earlier one."""
    if len(ids) < 2:
        return
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    dup = order[1:][s[1:] == s[:-1]]
    if len(dup):
        bad = int(dup.min())
        raise DetcalInputError(f"duplicate id {int(ids[bad])}", file=file, record=_rec(prefix, bad), field=field)


def _check_mask(bad_mask: np.ndarray, values: np.ndarray, message: str, *, file: str, field: str, prefix: str = "") -> None:
    bad = _first_true(bad_mask)
    if bad >= 0:
        raise DetcalInputError(f"{message}, got {np.asarray(values[bad]).tolist()!r}", file=file, record=_rec(prefix, bad), field=field)


def _check_box(xywh: np.ndarray, *, file: str, field: str, prefix: str = "") -> None:
    """Finite ``[x, y, w, h]`` with w, h >= 0."""
    _check_mask(~np.isfinite(xywh), xywh, "non-finite box coordinate", file=file, field=field, prefix=prefix)
    _check_mask(xywh[:, 2:4] < 0, xywh, "negative box width or height", file=file, field=field, prefix=prefix)


def _check_covariance(cov: np.ndarray, *, file: str, field: str) -> None:
    """``cov [D, ..., m, m]``: finite, symmetric (rtol 1e-6) and positive semi-definite.

    PSD test: smallest eigenvalue of the symmetric part >= -1e-9 * max |entry|
    (numpy ``eigvalsh``, vectorised over records).
    """
    _check_mask(~np.isfinite(cov), cov, "non-finite covariance entry", file=file, field=field)
    scale = np.abs(cov).max(axis=(-1, -2), keepdims=True)
    asym = np.abs(cov - np.swapaxes(cov, -1, -2)) > _SYM_RTOL * scale
    _check_mask(asym, cov, "covariance is not symmetric", file=file, field=field)
    eig_min = np.linalg.eigvalsh(0.5 * (cov + np.swapaxes(cov, -1, -2)))[..., 0]
    _check_mask(eig_min < -_PSD_RTOL * scale[..., 0, 0], cov, "covariance is not positive semi-definite", file=file, field=field)


def _parse_json(path: PathLike) -> Any:
    """Parse a JSON file (orjson when importable, else json) with located syntax errors."""
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DetcalInputError(f"cannot read file: {e.strerror or e}", file=file) from e
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except ValueError:
            pass  # not strict JSON (NaN tokens, bad UTF-8, a syntax error): json says precisely what and where
    try:
        return json.loads(data)
    except RecursionError as e:
        raise DetcalInputError("not JSON detcal can read: nested too deeply", file=file) from e
    except UnicodeDecodeError as e:
        raise DetcalInputError("not JSON: the file is not UTF-8 text", file=file, record=f"byte {e.start}") from e
    except ValueError as e:  # json.JSONDecodeError and orjson.JSONDecodeError are ValueErrors
        line, col = getattr(e, "lineno", "?"), getattr(e, "colno", "?")
        msg = getattr(e, "msg", str(e))
        raise DetcalInputError(f"not JSON: {msg}", file=file, record=f"line {line}, column {col}") from e


def _top_list(doc: dict, key: str, *, file: str) -> list:
    if key not in doc:
        raise DetcalInputError(f"missing top-level key {key!r}", file=file, record=_TOP, field=key)
    value = doc[key]
    if not isinstance(value, list):
        raise DetcalInputError(f"expected a list, got {type(value).__name__}", file=file, record=_TOP, field=key)
    return value


# --------------------------------------------------------------------------- instances
def _load_images(records: list, file: str) -> Images:
    _check_dicts(records, file=file, prefix="images")
    ids = _integer_column(_require(records, "id", file=file, prefix="images"), file=file, field="id", prefix="images")
    _check_unique(ids, file=file, field="id", prefix="images")
    size = {}
    for key in ("width", "height"):
        vals = [np.nan if r.get(key) is None else r[key] for r in records]
        arr = _numeric_column(vals, (), file=file, field=key, prefix="images")
        _check_mask(~np.isnan(arr) & ~(np.isfinite(arr) & (arr > 0)), arr, f"{key} must be a positive number", file=file, field=key, prefix="images")
        size[key] = arr
    names = [str(r.get("file_name") or "") for r in records]
    return Images(id=ids, width=size["width"], height=size["height"], file_name=names)


def _load_categories(records: list, file: str) -> dict[int, str]:
    _check_dicts(records, file=file, prefix="categories")
    ids = _integer_column(_require(records, "id", file=file, prefix="categories"), file=file, field="id", prefix="categories")
    names = _require(records, "name", file=file, prefix="categories")
    bad = next((i for i, n in enumerate(names) if not isinstance(n, str)), -1)
    if bad >= 0:
        raise DetcalInputError(f"expected a string, got {names[bad]!r}", file=file, record=f"categories[{bad}]", field="name")
    _check_unique(ids, file=file, field="id", prefix="categories")
    return {int(i): n for i, n in zip(ids.tolist(), names)}


def _load_annotations(records: list, file: str, images: Images, categories: dict[int, str]) -> GroundTruth:
    p = "annotations"
    _check_dicts(records, file=file, prefix=p)
    image_id = _integer_column(_require(records, "image_id", file=file, prefix=p), file=file, field="image_id", prefix=p)
    category = _integer_column(_require(records, "category_id", file=file, prefix=p), file=file, field="category_id", prefix=p)
    bbox = _numeric_column(_require(records, "bbox", file=file, prefix=p), (4,), file=file, field="bbox", prefix=p, what="[x, y, w, h] (4 numbers)")
    ann_id = _integer_column(_require(records, "id", file=file, prefix=p), file=file, field="id", prefix=p)
    iscrowd = _flag_column([r.get("iscrowd", 0) for r in records], file=file, field="iscrowd", prefix=p)
    ignore = _flag_column([r.get("ignore", 0) for r in records], file=file, field="ignore", prefix=p)
    _check_box(bbox, file=file, field="bbox", prefix=p)
    _check_unique(ann_id, file=file, field="id", prefix=p)
    _check_mask(images.index_of(image_id) < 0, image_id, "unknown image id (not in 'images')", file=file, field="image_id", prefix=p)
    known = np.fromiter(categories.keys(), dtype=np.int64, count=len(categories))
    _check_mask(~np.isin(category, known), category, "unknown category id (not in 'categories')", file=file, field="category_id", prefix=p)
    return GroundTruth(image_id=image_id, box=xywh_to_xyxy(bbox), category=category, iscrowd=iscrowd, ignore=ignore, id=ann_id,
                       wh=bbox[:, 2:4].copy())


def load_coco_instances(path: PathLike) -> Dataset:
    """Load a COCO instances (ground-truth) JSON file into a columnar :class:`Dataset`.

    Boxes: ``xyxy = [x, y, x + w, y + h]`` from COCO ``bbox = [x, y, w, h]``
    (COCO data format, Lin et al. 2014; the same boxes ``pycocotools.COCO.loadAnns``
    returns). ``GroundTruth.ignore`` is the annotation's ``ignore`` flag when
    present (else False), ``iscrowd`` its ``iscrowd`` (default 0), ``id`` its
    ``id``. Image ``width``/``height`` missing or null are NaN (relative box
    features are then unavailable).

    Validated before anything is built: the file is JSON; the top level has
    ``images``, ``annotations``, ``categories`` lists; each annotation has
    ``id``, ``image_id``, ``category_id`` and a finite ``bbox`` of 4 numbers
    with w, h >= 0; image, category and annotation ids are unique; every
    annotation names a known image and category.

    The records are parsed once with json (no second pass through
    pycocotools); :func:`to_pycocotools` builds the matching ``COCO`` object
    in memory when one is needed.
    """
    file = str(path)
    doc = _parse_json(path)
    if not isinstance(doc, dict):
        raise DetcalInputError(
            f"expected a JSON object with 'images', 'annotations', 'categories', got {type(doc).__name__}", file=file, record=_TOP
        )
    raw_images = _top_list(doc, "images", file=file)
    raw_annotations = _top_list(doc, "annotations", file=file)
    raw_categories = _top_list(doc, "categories", file=file)
    images = _load_images(raw_images, file)
    categories = _load_categories(raw_categories, file)
    gt = _load_annotations(raw_annotations, file, images, categories)
    return Dataset(images=images, gt=gt, categories=categories, source=file)


# --------------------------------------------------------------------------- results
def _presence(records: list[dict], key: str, *, file: str) -> bool:
    """True when every record carries ``key``, False when none; error otherwise."""
    count = sum(key in r for r in records)
    if 0 < count < len(records):
        bad = next(i for i, r in enumerate(records) if key not in r)
        raise DetcalInputError(
            f"{key!r} is present in {count} of {len(records)} records: either all records carry it or none",
            file=file, record=bad, field=key,
        )
    return count > 0 and count == len(records)


def _positive_std(values: np.ndarray, *, file: str, field: str) -> None:
    _check_mask(~np.isfinite(values) | ~(values > 0), values, "standard deviations must be finite and > 0", file=file, field=field)


def load_coco_results(path: PathLike, dataset: Dataset | None = None) -> Detections:
    """Load a COCO results file into :class:`Detections`, in file order.

    Each record needs ``image_id``, ``category_id``, ``bbox = [x, y, w, h]``
    (finite, w, h >= 0) and ``score`` (finite, in [0, 1]); the box becomes
    ``xyxy = [x, y, x + w, y + h]``. A dict with an ``annotations`` list is
    accepted too. Optional uncertainty (METRICS.md section 1, module table):
    ``bbox_std`` -> ``box_std`` (> 0), ``bbox_covar`` -> ``box_cov`` and
    ``covars`` -> ``corner_cov`` (symmetric PSD), and the delta record
    ``proposal`` ([x, y, w, h], w, h > 0) + ``delta_mean`` + one of
    ``delta_std`` (> 0) or ``delta_logvar`` (sigma = exp(0.5 * logvar), which
    must be finite and > 0). Either all records carry a given field or none.

    With ``dataset``, every ``image_id`` must be one of its images and every
    ``category_id`` one of its categories. Errors name file, record index and
    field (:class:`DetcalInputError`).
    """
    file = str(path)
    doc = _parse_json(path)
    if isinstance(doc, dict):
        records = _top_list(doc, "annotations", file=file)
    elif isinstance(doc, list):
        records = doc
    else:
        raise DetcalInputError(f"expected a list of detection records, got {type(doc).__name__}", file=file, record=_TOP)
    _check_dicts(records, file=file)

    image_id = _integer_column(_require(records, "image_id", file=file), file=file, field="image_id")
    category = _integer_column(_require(records, "category_id", file=file), file=file, field="category_id")
    bbox = _numeric_column(_require(records, "bbox", file=file), (4,), file=file, field="bbox", what="[x, y, w, h] (4 numbers)")
    score = _numeric_column(_require(records, "score", file=file), (), file=file, field="score")
    _check_box(bbox, file=file, field="bbox")
    _check_mask(~np.isfinite(score), score, "score must be finite", file=file, field="score")
    _check_mask((score < 0) | (score > 1), score, "score must be in [0, 1]", file=file, field="score")

    first_keys = records[0].keys() if records else {}.keys()
    if all(r.keys() == first_keys for r in records):  # one pass in the usual case
        present = {k: bool(records) and k in first_keys for k in RESULT_UNCERTAINTY_KEYS}
    else:
        present = {k: _presence(records, k, file=file) for k in RESULT_UNCERTAINTY_KEYS}
    kw: dict[str, np.ndarray] = {}
    if present["bbox_std"]:
        std = _numeric_column([r["bbox_std"] for r in records], (4,), file=file, field="bbox_std", what="4 numbers")
        _positive_std(std, file=file, field="bbox_std")
        kw["box_std"] = std
    if present["bbox_covar"]:
        cov = _numeric_column([r["bbox_covar"] for r in records], (4, 4), file=file, field="bbox_covar", what="a 4x4 matrix")
        _check_covariance(cov, file=file, field="bbox_covar")
        kw["box_cov"] = cov
    if present["covars"]:
        cov = _numeric_column([r["covars"] for r in records], (2, 2, 2), file=file, field="covars", what="two 2x2 matrices")
        _check_covariance(cov, file=file, field="covars")
        kw["corner_cov"] = cov
    delta_keys = ("proposal", "delta_mean", "delta_std", "delta_logvar")
    if any(present[k] for k in delta_keys) and len(records):
        for k in ("proposal", "delta_mean"):
            if not present[k]:
                raise DetcalInputError(f"a delta record needs {k!r} too", file=file, record=0, field=k)
        if present["delta_std"] == present["delta_logvar"]:
            raise DetcalInputError(
                "a delta record needs exactly one of 'delta_std' or 'delta_logvar'", file=file, record=0,
                field="delta_std" if not present["delta_std"] else "delta_logvar",
            )
        prop = _numeric_column([r["proposal"] for r in records], (4,), file=file, field="proposal", what="[x, y, w, h] (4 numbers)")
        _check_mask(~np.isfinite(prop), prop, "non-finite proposal coordinate", file=file, field="proposal")
        _check_mask(prop[:, 2:4] <= 0, prop, "proposal width and height must be > 0", file=file, field="proposal")
        mean = _numeric_column([r["delta_mean"] for r in records], (4,), file=file, field="delta_mean", what="4 numbers")
        _check_mask(~np.isfinite(mean), mean, "non-finite delta mean", file=file, field="delta_mean")
        if present["delta_std"]:
            std = _numeric_column([r["delta_std"] for r in records], (4,), file=file, field="delta_std", what="4 numbers")
            _positive_std(std, file=file, field="delta_std")
        else:
            logvar = _numeric_column([r["delta_logvar"] for r in records], (4,), file=file, field="delta_logvar", what="4 numbers")
            _check_mask(~np.isfinite(logvar), logvar, "non-finite log-variance", file=file, field="delta_logvar")
            with np.errstate(over="ignore", under="ignore"):
                std = np.exp(0.5 * logvar)
            _positive_std(std, file=file, field="delta_logvar")
        kw.update(proposal=xywh_to_xyxy(prop), delta_mean=mean, delta_std=std)

    if dataset is not None:
        _check_mask(dataset.images.index_of(image_id) < 0, image_id, f"unknown image id (not in {dataset.source or 'the dataset'})", file=file, field="image_id")
        known = np.fromiter(dataset.categories.keys(), dtype=np.int64, count=len(dataset.categories))
        _check_mask(~np.isin(category, known), category, f"unknown category id (not in {dataset.source or 'the dataset'})", file=file, field="category_id")
    return Detections(image_id=image_id, box=xywh_to_xyxy(bbox), score=score, category=category, wh=bbox[:, 2:4].copy(), **kw)


# --------------------------------------------------------------------------- writers
def _plain_number(x: float) -> float | int | None:
    """Integral floats as int (COCO image sizes), NaN as None."""
    if x != x:
        return None
    return int(x) if float(x).is_integer() else x


def dataset_to_coco_dict(dataset: Dataset) -> dict[str, Any]:
    """The COCO instances dict of ``dataset`` (inverse of :func:`load_coco_instances`).

    ``bbox = [x1, y1, x2 - x1, y2 - y1]``, ``area = w * h`` (box area; the
    original segmentation area is not kept), ``iscrowd`` 0/1, ``ignore`` 0/1
    written only when some box is ignored. Images keep id, width, height
    (integral sizes as ints, unknown sizes left out) and file_name.
    KITTI-only fields (truncation, 3-D) are not part of the COCO format.
    """
    im = dataset.images
    images = []
    for i, w, h, name in zip(im.id.tolist(), im.width.tolist(), im.height.tolist(), im.file_name):
        rec: dict[str, Any] = {"id": i}
        if w == w:
            rec["width"] = _plain_number(w)
        if h == h:
            rec["height"] = _plain_number(h)
        rec["file_name"] = name
        images.append(rec)
    gt = dataset.gt
    xywh = xyxy_to_xywh(gt.box)
    cols: dict[str, list] = {
        "id": gt.id.tolist(),
        "image_id": gt.image_id.tolist(),
        "category_id": gt.category.tolist(),
        "bbox": xywh.tolist(),
        "area": (xywh[:, 2] * xywh[:, 3]).tolist(),
        "iscrowd": gt.iscrowd.astype(np.int64).tolist(),
    }
    if gt.ignore.any():
        cols["ignore"] = gt.ignore.astype(np.int64).tolist()
    keys = list(cols)
    annotations = [dict(zip(keys, row)) for row in zip(*cols.values())]
    categories = [{"id": int(k), "name": v} for k, v in sorted(dataset.categories.items())]
    return {"images": images, "annotations": annotations, "categories": categories}


def detections_to_coco_list(dets: Detections) -> list[dict[str, Any]]:
    """The COCO results list of ``dets`` (inverse of :func:`load_coco_results`).

    ``bbox = [x1, y1, x2 - x1, y2 - y1]``; uncertainty fields present on
    ``dets`` are written back: ``box_std`` -> ``bbox_std``, ``box_cov`` ->
    ``bbox_covar``, ``corner_cov`` -> ``covars``, ``proposal`` ([x, y, w, h]),
    ``delta_mean``, ``delta_std`` (a log-variance input comes back as std).
    """
    cols: dict[str, list] = {
        "image_id": dets.image_id.tolist(),
        "category_id": dets.category.tolist(),
        "bbox": xyxy_to_xywh(dets.box).tolist(),
        "score": dets.score.tolist(),
    }
    if dets.box_std is not None:
        cols["bbox_std"] = dets.box_std.tolist()
    if dets.box_cov is not None:
        cols["bbox_covar"] = dets.box_cov.tolist()
    if dets.corner_cov is not None:
        cols["covars"] = dets.corner_cov.tolist()
    if dets.proposal is not None:
        cols["proposal"] = xyxy_to_xywh(dets.proposal).tolist()
    if dets.delta_mean is not None:
        cols["delta_mean"] = dets.delta_mean.tolist()
    if dets.delta_std is not None:
        cols["delta_std"] = dets.delta_std.tolist()
    keys = list(cols)
    return [dict(zip(keys, row)) for row in zip(*cols.values())]


def _dump_json(path: PathLike, obj: Any) -> None:
    # json.dumps runs the C encoder; json.dump to a file would use the pure-Python one (~10x slower)
    text = json.dumps(obj, allow_nan=False)
    with atomic_write(path, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.write("\n")


def write_coco_instances(path: PathLike, dataset: Dataset) -> None:
    """Atomically write ``dataset`` as a COCO instances JSON file (:func:`dataset_to_coco_dict`)."""
    _check_mask(~np.isfinite(dataset.gt.box), dataset.gt.box, "non-finite box", file=str(path), field="bbox", prefix="annotations")
    _dump_json(path, dataset_to_coco_dict(dataset))


_WRITTEN_AS = {"box": "bbox", "score": "score", "box_std": "bbox_std", "box_cov": "bbox_covar", "corner_cov": "covars",
               "proposal": "proposal", "delta_mean": "delta_mean", "delta_std": "delta_std"}


def write_coco_results(path: PathLike, dets: Detections) -> None:
    """Atomically write ``dets`` as a COCO results JSON list (:func:`detections_to_coco_list`).

    Floats are written at ``repr`` precision, so they read back exactly
    (boxes: see the module docstring). Non-finite values are refused (strict
    JSON has no NaN), naming the record and the field.
    """
    file = str(path)
    for attr, key in _WRITTEN_AS.items():
        values = getattr(dets, attr)
        if values is not None:
            _check_mask(~np.isfinite(values), values, "non-finite value", file=file, field=key)
    _dump_json(path, detections_to_coco_list(dets))


# --------------------------------------------------------------------------- pycocotools
def to_pycocotools(dataset: Dataset) -> Any:
    """An in-memory ``pycocotools.coco.COCO`` built from ``dataset`` (quietly)."""
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = dataset_to_coco_dict(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def results_to_pycocotools(coco_gt: Any, dets: Detections) -> Any:
    """``coco_gt.loadRes`` of ``dets`` (quietly); an empty result gives an empty ``COCO``.

    ``loadRes`` numbers the results 1..D in order and sets ``area = w * h``.
    """
    from pycocotools.coco import COCO

    records = detections_to_coco_list(dets)
    with contextlib.redirect_stdout(io.StringIO()):
        if records:
            return coco_gt.loadRes(records)
        res = COCO()
        res.dataset = {"images": copy.deepcopy(coco_gt.dataset["images"]), "annotations": [],
                       "categories": copy.deepcopy(coco_gt.dataset["categories"])}
        res.createIndex()
        return res
