"""COCO adapter: instances files (ground truth) and results files (detections).

Formats (https://cocodataset.org/#format-data and #format-results):

* instances: ``{"images": [{id, width, height, file_name}], "annotations":
  [{id, image_id, category_id, bbox: [x, y, w, h], iscrowd, ignore?}],
  "categories": [{id, name}]}``;
* results: ``[{image_id, category_id, bbox: [x, y, w, h], score}, ...]`` (or a
  dict with an ``"annotations"`` list), in file order, optionally with one or
  more uncertainty fields (docs/formats.md):

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
  all_scores     [C]      class distribution: one probability per category
                          of the ground truth, ascending id     (class_probs)
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

Every error is a :class:`detcal.core.errors.DetcalInputError` naming the file, the
record (index into the results list, or ``annotations[i]`` / ``images[i]``)
and the field.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.boxes import xywh_to_xyxy, xyxy_to_xywh
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth, Images
from detcal.utils.io import atomic_write

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
    "results_from_records",
    "results_from_bytes",
    "results_from_decoded",
    "results_from_columns",
]

RESULT_UNCERTAINTY_KEYS: tuple[str, ...] = (
    "bbox_std",
    "bbox_covar",
    "covars",
    "proposal",
    "delta_mean",
    "delta_std",
    "delta_logvar",
    "all_scores",
)
"""Optional uncertainty keys of a results record (module docstring)."""

# the sibling module, not its functions: they are looked up at each call (tests switch the fast path off there)
import detcal.data._fast_results as fast_results  # noqa: E402
from detcal.data._json import (  # noqa: E402  (strict column helpers, shared with the chunked reader)
    MAX_ABS,
    TOP as _TOP,
    check_bounded as _check_bounded,
    check_box as _check_box,
    check_covariance as _check_covariance,
    check_dicts as _check_dicts,
    check_mask as _check_mask,
    check_scale as _check_scale,
    check_unique as _check_unique,
    column as _column,
    flag_column as _flag_column,
    integer_column as _integer_column,
    numeric_column as _numeric_column,
    parse_json_bytes as _parse_json_bytes,
    require as _require,
    top_list as _top_list,
)


# --------------------------------------------------------------------------- instances
class _Fields:
    """The values of one key in every record of a list: parsed dicts, or the typed records of the
    fast decoder (absent keys ``UNSET``). Both give the loaders the same lists, so the same checks
    run on the same values whichever way the file was read."""

    def __init__(self, records: list, file: str, prefix: str, unset: Any = None) -> None:
        self.records, self.file, self.prefix, self.unset = records, file, prefix, unset

    def __len__(self) -> int:
        return len(self.records)

    def check_objects(self) -> None:
        if self.unset is None:  # typed records are objects by construction
            _check_dicts(self.records, file=self.file, prefix=self.prefix)

    def get(self, key: str, default: Any = None) -> list:
        """``record.get(key, default)`` for every record."""
        if self.unset is None:
            return [r.get(key, default) for r in self.records]
        values = list(map(attrgetter(key), self.records))
        return [default if v is self.unset else v for v in values] if self.unset in values else values

    def require(self, key: str) -> list:
        """The value of ``key`` in every record; error naming the first record lacking it (or null)."""
        if self.unset is None:
            return _require(self.records, key, file=self.file, prefix=self.prefix)
        values = self.get(key)
        if None in values:
            bad = values.index(None)
            raise DetcalInputError(
                f"missing required key {key!r} (or it is null)",
                file=self.file,
                record=f"{self.prefix}[{bad}]" if self.prefix else bad,
                field=key,
            )
        return values


def _load_images(records: _Fields, file: str, bools: bool = True) -> Images:
    records.check_objects()
    ids = _integer_column(records.require("id"), file=file, field="id", prefix="images", bools=bools)
    _check_unique(ids, file=file, field="id", prefix="images")
    size = {}
    for key in ("width", "height"):
        vals = [np.nan if v is None else v for v in records.get(key)]
        arr = _numeric_column(vals, (), file=file, field=key, prefix="images", bools=bools)
        _check_mask(
            ~np.isnan(arr) & ~(np.isfinite(arr) & (arr > 0)),
            arr,
            f"{key} must be a positive number",
            file=file,
            field=key,
            prefix="images",
        )
        _check_scale(np.nan_to_num(arr, nan=1.0), key, file=file, field=key, prefix="images")
        size[key] = arr
    names = [str(v or "") for v in records.get("file_name")]
    return Images(id=ids, width=size["width"], height=size["height"], file_name=names)


def _load_categories(records: _Fields, file: str, bools: bool = True) -> dict[int, str]:
    records.check_objects()
    ids = _integer_column(records.require("id"), file=file, field="id", prefix="categories", bools=bools)
    names = records.require("name")
    bad = next((i for i, n in enumerate(names) if not isinstance(n, str)), -1)
    if bad >= 0:
        raise DetcalInputError(
            f"expected a string, got {names[bad]!r}", file=file, record=f"categories[{bad}]", field="name"
        )
    _check_unique(ids, file=file, field="id", prefix="categories")
    return {int(i): n for i, n in zip(ids.tolist(), names)}


def _load_annotations(
    records: _Fields, file: str, images: Images, categories: dict[int, str], bools: bool = True
) -> GroundTruth:
    p = "annotations"
    records.check_objects()
    image_id = _integer_column(records.require("image_id"), file=file, field="image_id", prefix=p, bools=bools)
    category = _integer_column(records.require("category_id"), file=file, field="category_id", prefix=p, bools=bools)
    bbox = _numeric_column(
        records.require("bbox"), (4,), file=file, field="bbox", prefix=p, what="[x, y, w, h] (4 numbers)", bools=bools
    )
    ann_id = _integer_column(records.require("id"), file=file, field="id", prefix=p, bools=bools)
    iscrowd = _flag_column(records.get("iscrowd", 0), file=file, field="iscrowd", prefix=p)
    ignore = _flag_column(records.get("ignore", 0), file=file, field="ignore", prefix=p)
    area = None  # the COCO 'area' (mask area) when every annotation has a finite one: COCO AP's size ranges
    areas = records.get("area")
    if len(records) and all(type(v) in (int, float) for v in areas):
        area = np.array(areas, dtype=np.float64)
    return _ground_truth(file, images, categories, image_id, category, bbox, ann_id, iscrowd, ignore, area)


def _flags(values: np.ndarray, file: str, field: str) -> np.ndarray:
    """An int64 column of 0/1 -> bool (the located error of :func:`_flag_column` otherwise)."""
    if len(values) and not ((values == 0) | (values == 1)).all():
        return _flag_column(values.tolist(), file=file, field=field, prefix="annotations")
    return values.astype(bool)


def _annotations_from_columns(
    cols: fast_results.AnnotationColumns, file: str, images: Images, categories: dict[int, str]
) -> GroundTruth:
    """:func:`_load_annotations` on the columns of typed annotations (every type check passed in the decoder)."""

    iscrowd = _flags(cols.iscrowd, file, "iscrowd")
    ignore = _flags(cols.ignore, file, "ignore")
    area = cols.area if len(cols.id) else None
    return _ground_truth(
        file, images, categories, cols.image_id, cols.category_id, cols.bbox, cols.id, iscrowd, ignore, area
    )


def _ground_truth(
    file: str,
    images: Images,
    categories: dict[int, str],
    image_id: np.ndarray,
    category: np.ndarray,
    bbox: np.ndarray,
    ann_id: np.ndarray,
    iscrowd: np.ndarray,
    ignore: np.ndarray,
    area: np.ndarray | None,
) -> GroundTruth:
    """The value checks of the annotations' columns, in a fixed order, and their :class:`GroundTruth`."""
    p = "annotations"
    _check_box(bbox, file=file, field="bbox", prefix=p)
    _check_unique(ann_id, file=file, field="id", prefix=p)
    _check_mask(
        images.index_of(image_id) < 0,
        image_id,
        "unknown image id (not in 'images')",
        file=file,
        field="image_id",
        prefix=p,
    )
    known = np.fromiter(categories.keys(), dtype=np.int64, count=len(categories))
    _check_mask(
        ~np.isin(category, known),
        category,
        "unknown category id (not in 'categories')",
        file=file,
        field="category_id",
        prefix=p,
    )
    if area is not None and not (np.isfinite(area).all() and (area >= 0).all()):
        area = None
    box, wh = _corners(bbox)
    return GroundTruth(
        image_id=image_id, box=box, category=category, iscrowd=iscrowd, ignore=ignore, id=ann_id, wh=wh, area=area
    )


def _corners(bbox: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``xyxy`` boxes, ``[w, h]``) of ``bbox`` ``[R, 4]`` float64 as written: :func:`xywh_to_xyxy`'s sums
    (x + w, y + h), one column at a time (a ``[R, 2]`` view runs 2 values per inner loop)."""
    box, wh = np.empty_like(bbox), np.empty((len(bbox), 2), dtype=np.float64)
    for k in range(2):
        box[:, k] = bbox[:, k]
        np.add(bbox[:, k], bbox[:, k + 2], out=box[:, k + 2])
        wh[:, k] = bbox[:, k + 2]
    return box, wh


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
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DetcalInputError(f"cannot read file: {e.strerror or e}", file=file) from e
    body = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    fast = fast_results.decode_instances(body)
    if fast is not None:  # typed records holding only the fields detcal reads
        import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

        # images and categories are short lists: their values are checked for booleans one by one, which
        # gives what a search of the whole text for true/false would let through, without the search
        images = _load_images(_Fields(fast.images, file, "images", msgspec.UNSET), file)
        categories = _load_categories(_Fields(fast.categories, file, "categories", msgspec.UNSET), file)
        if fast.columns is not None:  # every annotation of the usual types: decoded straight into columns
            gt = _annotations_from_columns(fast.columns, file, images, categories)
        else:
            bools = b"true" in body or b"false" in body
            gt = _load_annotations(
                _Fields(fast.annotations, file, "annotations", msgspec.UNSET), file, images, categories, bools
            )
        return Dataset(images=images, gt=gt, categories=categories, source=file)
    parsed = _parse_json_bytes(data, file)
    doc, bools = parsed.doc, parsed.bools
    if not isinstance(doc, dict):
        raise DetcalInputError(
            f"expected a JSON object with 'images', 'annotations', 'categories', got {type(doc).__name__}",
            file=file,
            record=_TOP,
        )
    raw_images = _top_list(doc, "images", file=file)
    raw_annotations = _top_list(doc, "annotations", file=file)
    raw_categories = _top_list(doc, "categories", file=file)
    images = _load_images(_Fields(raw_images, file, "images"), file, bools)
    categories = _load_categories(_Fields(raw_categories, file, "categories"), file, bools)
    gt = _load_annotations(_Fields(raw_annotations, file, "annotations"), file, images, categories, bools)
    return Dataset(images=images, gt=gt, categories=categories, source=file)


# --------------------------------------------------------------------------- results
def _presence(records: list[dict], key: str, *, file: str) -> bool:
    """True when every record carries ``key``, False when none; error otherwise."""
    count = sum(key in r for r in records)
    if 0 < count < len(records):
        bad = next(i for i, r in enumerate(records) if key not in r)
        raise DetcalInputError(
            f"{key!r} is present in {count} of {len(records)} records: either all records carry it or none",
            file=file,
            record=bad,
            field=key,
        )
    return count > 0 and count == len(records)


def _positive_std(values: np.ndarray, *, file: str, field: str) -> None:
    _check_scale(values, "standard deviations", file=file, field=field)


def load_coco_results(path: PathLike, dataset: Dataset | None = None) -> Detections:
    """Load a COCO results file into :class:`Detections`, in file order.

    Each record needs ``image_id``, ``category_id``, ``bbox = [x, y, w, h]``
    (finite, w, h >= 0) and ``score`` (finite, in [0, 1]); the box becomes
    ``xyxy = [x, y, x + w, y + h]``. A dict with an ``annotations`` list is
    accepted too. Optional uncertainty (docs/formats.md, module table):
    ``bbox_std`` -> ``box_std`` (> 0), ``bbox_covar`` -> ``box_cov`` and
    ``covars`` -> ``corner_cov`` (symmetric PSD), and the delta record
    ``proposal`` ([x, y, w, h], w, h > 0) + ``delta_mean`` + one of
    ``delta_std`` (> 0) or ``delta_logvar`` (sigma = exp(0.5 * logvar), which
    must be finite and > 0). Either all records carry a given field or none.

    With ``dataset``, every ``image_id`` must be one of its images and every
    ``category_id`` one of its categories. Errors name file, record index and
    field (:class:`DetcalInputError`). The usual file is decoded straight into
    columns (:mod:`detcal.data._fast_results`); anything else is parsed whole.
    """
    file = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise DetcalInputError(f"cannot read file: {e.strerror or e}", file=file) from e
    return results_from_bytes(data, file, dataset)


def results_from_bytes(data: bytes, file: str, dataset: Dataset | None = None) -> Detections:
    """:class:`Detections` from the bytes of a results file (:func:`load_coco_results`)."""

    fast = fast_results.decode_results(data[3:] if data.startswith(b"\xef\xbb\xbf") else data)
    if fast is not None:
        return results_from_decoded(fast, file, dataset, own=True)
    parsed = _parse_json_bytes(data, file)
    doc = parsed.doc
    if isinstance(doc, dict):
        records = _top_list(doc, "annotations", file=file)
    elif isinstance(doc, list):
        records = doc
    else:
        raise DetcalInputError(
            f"expected a list of detection records, got {type(doc).__name__}", file=file, record=_TOP
        )
    return results_from_records(records, file, dataset, bools=parsed.bools)


def results_from_decoded(
    decoded: tuple[dict[str, np.ndarray], tuple[str, ...]],
    file: str,
    dataset: Dataset | None = None,
    *,
    own: bool = False,
) -> Detections:
    """:class:`Detections` from :func:`detcal.data._fast_results.decode_results` output (the same checks).

    ``own``: the columns are the caller's to give away; the boxes become corners in place (the same
    numbers, without a second box array)."""
    cols, optional = decoded
    present = {k: k in optional for k in RESULT_UNCERTAINTY_KEYS}
    return results_from_columns(
        lambda key, shape, what: cols[key], lambda key: cols[key], present, file, dataset, own=own
    )


def results_from_records(records: list, file: str, dataset: Dataset | None = None, *, bools: bool = True) -> Detections:
    """:class:`Detections` from parsed COCO results records (the checks of :func:`load_coco_results`).

    ``file`` names the source in errors; ``bools=False`` skips the search
    for JSON booleans (only when the text is known to hold none).
    """
    _check_dicts(records, file=file)
    required = {"image_id", "category_id", "bbox", "score"}

    def numbers(key: str, shape: tuple[int, ...] | None, what: str) -> np.ndarray:
        values = _require(records, key, file=file) if key in required else _column(records, key)
        if shape is None:  # a list of one length per record: the first record's gives it
            shape = (len(values[0]),) if values and isinstance(values[0], list) else (-1,)
        return _numeric_column(values, shape, file=file, field=key, what=what, bools=bools)

    def integers(key: str) -> np.ndarray:
        return _integer_column(_require(records, key, file=file), file=file, field=key, bools=bools)

    def presence() -> dict[str, bool]:
        first_keys = records[0].keys() if records else {}.keys()
        if all(map(first_keys.__eq__, map(dict.keys, records))):  # one C-level pass in the usual case
            return {k: bool(records) and k in first_keys for k in RESULT_UNCERTAINTY_KEYS}
        return {k: _presence(records, k, file=file) for k in RESULT_UNCERTAINTY_KEYS}

    return results_from_columns(numbers, integers, presence, file, dataset)


def _delta_columns(numbers: Any, present: Any, file: str) -> dict[str, np.ndarray]:
    """The delta-record columns (proposal as xyxy, delta mean, delta std) when the records carry them, else {}."""
    delta_keys = ("proposal", "delta_mean", "delta_std", "delta_logvar")
    if not any(present[k] for k in delta_keys):
        return {}
    for k in ("proposal", "delta_mean"):
        if not present[k]:
            raise DetcalInputError(f"a delta record needs {k!r} too", file=file, record=0, field=k)
    if present["delta_std"] == present["delta_logvar"]:
        raise DetcalInputError(
            "a delta record needs exactly one of 'delta_std' or 'delta_logvar'",
            file=file,
            record=0,
            field="delta_std" if not present["delta_std"] else "delta_logvar",
        )
    prop = numbers("proposal", (4,), "[x, y, w, h] (4 numbers)")
    _check_bounded(prop, "proposal coordinate", file=file, field="proposal")
    _check_mask(prop[:, 2:4] <= 0, prop, "proposal width and height must be > 0", file=file, field="proposal")
    _check_scale(prop[:, 2:4], "proposal width and height", file=file, field="proposal")
    mean = numbers("delta_mean", (4,), "4 numbers")
    _check_bounded(mean, "delta mean", file=file, field="delta_mean")
    if present["delta_std"]:
        std = numbers("delta_std", (4,), "4 numbers")
        _positive_std(std, file=file, field="delta_std")
    else:
        logvar = numbers("delta_logvar", (4,), "4 numbers")
        _check_mask(~np.isfinite(logvar), logvar, "non-finite log-variance", file=file, field="delta_logvar")
        with np.errstate(over="ignore", under="ignore"):
            std = np.exp(0.5 * logvar)
        _positive_std(std, file=file, field="delta_logvar")
    return {"proposal": xywh_to_xyxy(prop), "delta_mean": mean, "delta_std": std}


CHECK_ROWS: int = 1 << 14
"""Rows of the results' columns checked and turned to corners at a time (:func:`results_from_columns`):
the temporaries of a slice stay in the processor's cache instead of taking fresh pages for the file."""


def _checked_corners(bbox: np.ndarray, score: np.ndarray, file: str, own: bool) -> tuple[np.ndarray, np.ndarray]:
    """The value checks of ``bbox`` (finite, ``|v| <= MAX_ABS``, w, h >= 0) and ``score`` (finite, in [0, 1]),
    and (corner boxes, ``[w, h]``). One pass a slice at a time tests every condition (NaN fails every
    comparison); at the first slice that fails, the boxes turned so far are put back as written and the
    checks run one by one over the columns, in their fixed order, for the located error. ``own``: the
    boxes become corners in place, slice by slice (the same sums as :func:`xywh_to_xyxy`'s x + w, y + h)."""
    n = len(score)
    inplace = own and bbox.flags.c_contiguous and bbox.flags.writeable and bbox.dtype == np.float64
    wh = np.empty((n, 2), dtype=np.float64)
    for lo in range(0, n, CHECK_ROWS):
        b, s, out = bbox[lo : lo + CHECK_ROWS], score[lo : lo + CHECK_ROWS], wh[lo : lo + CHECK_ROWS]
        x, y, w, h = b[:, 0], b[:, 1], b[:, 2], b[:, 3]  # one column at a time: a [k, 2] view runs 2 values per loop
        if not (
            b.max() <= MAX_ABS  # |v| <= MAX_ABS as two bounds (no |b| temporary); NaN fails both
            and b.min() >= -MAX_ABS
            and w.min() >= 0
            and h.min() >= 0
            and s.min() >= 0
            and s.max() <= 1
        ):
            if inplace:
                bbox[:lo, 2:4] = wh[:lo]  # w, h as written: x + w - x is not always w
            _check_box(bbox, file=file, field="bbox")
            _check_mask(~np.isfinite(score), score, "score must be finite", file=file, field="score")
            _check_mask((score < 0) | (score > 1), score, "score must be in [0, 1]", file=file, field="score")
            inplace = False  # not reached when a check fails; the columns as they are, the whole-column way
            wh = bbox[:, 2:4].copy()
            break
        out[:, 0], out[:, 1] = w, h
        if inplace:
            w += x
            h += y
    return (bbox if inplace else xywh_to_xyxy(bbox)), wh


def results_from_columns(
    numbers: Any, integers: Any, present: Any, file: str, dataset: Dataset | None, *, own: bool = False
) -> Detections:
    """The checks and conversions of a results file, on its columns.

    ``numbers(key, shape, what)`` -> float64 ``[R, *shape]`` and ``integers(key)``
    -> int64 ``[R]`` give a field's column (raising the located type error when
    the records' values are not numbers); ``present``: which optional fields
    the records carry (a dict, or a function computing it after the required
    fields are read, as the record path does). Checks run in a fixed order, so
    the first error reported does not depend on how the columns were read.
    ``own``: the ``bbox`` column may be changed: it becomes the corners in place.
    """
    image_id = integers("image_id")
    category = integers("category_id")
    bbox = numbers("bbox", (4,), "[x, y, w, h] (4 numbers)")
    score = numbers("score", (), "a number")
    box, wh = _checked_corners(bbox, score, file, own)
    present = present() if callable(present) else present
    n = len(score)
    kw: dict[str, np.ndarray] = {}
    if present["bbox_std"]:
        std = numbers("bbox_std", (4,), "4 numbers")
        _positive_std(std, file=file, field="bbox_std")
        kw["box_std"] = std
    if present["bbox_covar"]:
        cov = numbers("bbox_covar", (4, 4), "a 4x4 matrix")
        _check_covariance(cov, file=file, field="bbox_covar")
        kw["box_cov"] = cov
    if present["covars"]:
        cov = numbers("covars", (2, 2, 2), "two 2x2 matrices")
        _check_covariance(cov, file=file, field="covars")
        kw["corner_cov"] = cov
    if present.get("all_scores"):
        n_cls = len(dataset.categories) if dataset is not None else None
        what = "a list of class probabilities (one per category of the ground truth, ascending category id)"
        probs = numbers("all_scores", None if n_cls is None else (n_cls,), what)
        _check_mask(
            (~np.isfinite(probs) | (probs < 0) | (probs > 1)).any(axis=1),
            probs,
            "class probabilities must be in [0, 1]",
            file=file,
            field="all_scores",
        )
        kw["class_probs"] = probs
    if n:
        kw.update(_delta_columns(numbers, present, file))

    if dataset is not None:
        _check_mask(
            dataset.images.index_of(image_id) < 0,
            image_id,
            f"unknown image id (not in {dataset.source or 'the dataset'})",
            file=file,
            field="image_id",
        )
        known = np.fromiter(dataset.categories.keys(), dtype=np.int64, count=len(dataset.categories))
        _check_mask(
            ~np.isin(category, known),
            category,
            f"unknown category id (not in {dataset.source or 'the dataset'})",
            file=file,
            field="category_id",
        )
    return Detections(image_id=image_id, box=box, score=score, category=category, wh=wh, **kw)


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
    if dets.class_probs is not None:
        cols["all_scores"] = dets.class_probs.tolist()
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
    _check_mask(
        ~np.isfinite(dataset.gt.box),
        dataset.gt.box,
        "non-finite box",
        file=str(path),
        field="bbox",
        prefix="annotations",
    )
    _dump_json(path, dataset_to_coco_dict(dataset))


_WRITTEN_AS = {
    "box": "bbox",
    "score": "score",
    "box_std": "bbox_std",
    "box_cov": "bbox_covar",
    "corner_cov": "covars",
    "proposal": "proposal",
    "delta_mean": "delta_mean",
    "delta_std": "delta_std",
}


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
    from pycocotools.coco import COCO  # lazy: pycocotools kept out of start-up

    coco = COCO()
    coco.dataset = dataset_to_coco_dict(dataset)
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
    return coco


def results_to_pycocotools(coco_gt: Any, dets: Detections) -> Any:
    """``coco_gt.loadRes`` of ``dets`` (quietly); an empty result gives an empty ``COCO``.

    ``loadRes`` numbers the results 1..D in order and sets ``area = w * h``.
    """
    from pycocotools.coco import COCO  # lazy: pycocotools kept out of start-up

    records = detections_to_coco_list(dets)
    with contextlib.redirect_stdout(io.StringIO()):
        if records:
            return coco_gt.loadRes(records)
        res = COCO()
        res.dataset = {
            "images": copy.deepcopy(coco_gt.dataset["images"]),
            "annotations": [],
            "categories": copy.deepcopy(coco_gt.dataset["categories"]),
        }
        res.createIndex()
        return res
