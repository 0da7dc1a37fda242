"""Fast paths for reading COCO files: typed decoding that builds only what detcal reads.

A results file is a list of up to millions of small records. Parsing it into
Python dicts (orjson, json) and then gathering each field costs more than
everything detcal does with the numbers afterwards. msgspec decodes the text
into typed, untracked records in one C pass (about 3x faster than orjson into
dicts), and the columns are gathered from those with C-level iteration.

The fast path only takes what it can read exactly as the general path does,
and declines everything else (``None``: the caller then parses with orjson and
reports any error with the file, record and field):

* the text is ASCII without escapes (``\\``): no UTF-8 or escaped-key questions;
* no covariance fields (``bbox_covar``, ``covars``);
* every record's keys are among the first record's (when the first record is a
  flat object; which fields to read is taken from it, with no search of the
  bytes), or the optional fields are found by searching the bytes;
* ids are JSON integers within int64, box and score are JSON numbers (no
  booleans, no null, no NaN tokens), ``bbox`` and the optional per-coordinate
  fields hold exactly 4 numbers; an optional field is in every record or in none;
* the top level is a non-empty list.

Everything the general path checks on the values (finite, w, h >= 0, score in
[0, 1], positive stds, known image and category ids) is checked on the columns
by the same code (:func:`detcal.data.coco.results_from_columns`).

Instances files (:func:`decode_instances`) spend most of their bytes on
segmentation polygons, which detcal does not read: the decoder keeps only the
fields detcal reads, as plain values (any JSON type, so the general loader's
checks see exactly what the whole parse would have given them; read per key by
:class:`detcal.data.coco._Fields`), and skips the rest without building it. It declines files that are not valid UTF-8, hold
escapes, or hold integer literals of 19 or more digits (where parsers differ
on what such a number becomes).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np
import orjson

__all__ = ["decode_results", "decode_instances", "DecodedInstances", "AnnotationColumns", "OPTIONAL_4"]

OPTIONAL_4: tuple[str, ...] = ("bbox_std", "proposal", "delta_mean", "delta_std", "delta_logvar")
"""Optional fields of 4 numbers the fast path reads."""
_DECLINE_KEYS: tuple[bytes, ...] = (b'"bbox_covar"', b'"covars"', b'"all_scores"')


_REQUIRED: tuple[str, ...] = ("image_id", "category_id", "bbox", "score")


@functools.cache
def _decoder(optional: tuple[str, ...], extra: tuple[str, ...] | None = None) -> Any:
    """Decoder of a list of records with the required fields and ``optional`` 4-number fields;
    with ``extra`` (the other keys of the first record, read as any JSON value), a record holding
    a key outside these is refused (the caller then declines), so no byte search is needed."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    four = tuple[float, float, float, float]
    fields: list[Any] = [("image_id", int), ("category_id", int), ("bbox", four), ("score", float)]
    fields += [(k, four | msgspec.UnsetType, msgspec.UNSET) for k in optional]
    fields += [(k, Any, msgspec.UNSET) for k in extra or ()]
    record = msgspec.defstruct("ResultRecord", fields, gc=False, forbid_unknown_fields=extra is not None)
    return msgspec.json.Decoder(list[record])  # type: ignore[valid-type]


def _first_record_keys(data: bytes | bytearray, end: int) -> tuple[str, ...] | None:
    """The keys of the first record of ``data[:end]`` when it is a flat object (its text has no inner ``{``), else None."""

    i = data.find(b"{", 0, end)
    j = data.find(b"}", i + 1, end) if i >= 0 else -1
    if j < 0 or data.find(b"{", i + 1, j) >= 0:
        return None
    try:
        first = orjson.loads(data[i : j + 1])
    except orjson.JSONDecodeError:
        return None
    return tuple(first) if isinstance(first, dict) else None


def _fields_of(data: bytes | bytearray, end: int) -> tuple[tuple[str, ...], tuple[str, ...] | None] | None:
    """(optional 4-number fields, other keys or None) the decoder needs for ``data[:end]``, or None to decline.

    From the first record's keys when it is flat (records with other keys are then refused by the
    decoder); otherwise by searching the bytes for the optional keys."""
    keys = _first_record_keys(data, end)
    if keys is not None:
        if any(k in keys for k in ("bbox_covar", "covars", "all_scores")):
            return None
        optional = tuple(k for k in OPTIONAL_4 if k in keys)
        extra = tuple(k for k in keys if k not in _REQUIRED and k not in OPTIONAL_4)
        if not all(k.isidentifier() and not k.startswith("_") for k in extra):
            return None  # a key the decoder's record type cannot name ("x y", "__init__", "1a"): the general reader
        return optional, extra
    if any(data.find(k, 0, end) >= 0 for k in _DECLINE_KEYS):
        return None
    return tuple(k for k in OPTIONAL_4 if data.find(b'"' + k.encode() + b'"', 0, end) >= 0), None


def _plain_ascii(data: bytes | bytearray, end: int) -> bool:
    """``data[:end]`` is ASCII without a backslash (read in place: no copy of a block)."""
    if data.find(b"\\", 0, end) >= 0:
        return False
    if end == len(data):
        return data.isascii()
    return end == 0 or int(np.frombuffer(data, np.uint8, end).max()) < 128


def _four(values: Iterable[tuple[float, ...]], n: int) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(values), np.float64, 4 * n).reshape(n, 4)


def decode_results(
    data: bytes | bytearray, end: int | None = None
) -> tuple[dict[str, np.ndarray], tuple[str, ...]] | None:
    """Columns ``{image_id, category_id, bbox [n,4], score, <optional fields>}`` of a results file's
    bytes ``data[:end]`` (BOM removed; ``end`` None: all of it) and the optional fields present, or
    ``None`` when the fast path declines. A ``bytearray`` is decoded in place (no copy of the block)."""
    try:
        import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)
    except ImportError:  # pragma: no cover - msgspec is a dependency
        return None
    end = len(data) if end is None else end
    if not _plain_ascii(data, end):
        return None
    fields = _fields_of(data, end)
    if fields is None:
        return None
    optional, extra = fields
    try:
        with memoryview(data) as view, view[:end] as text:
            records = _decoder(optional, extra).decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    return _columns(records, optional, msgspec.UNSET)


def _columns(
    records: list, optional: tuple[str, ...], unset: Any
) -> tuple[dict[str, np.ndarray], tuple[str, ...]] | None:
    """The columns of the decoded records (C-level iteration, no per-record Python code), or None to decline."""
    n = len(records)
    if n == 0:
        return None
    try:
        cols = {k: np.fromiter(map(attrgetter(k), records), np.int64, n) for k in ("image_id", "category_id")}
    except OverflowError:  # an id beyond int64: the general path names it
        return None
    cols["bbox"] = _four(map(attrgetter("bbox"), records), n)
    cols["score"] = np.fromiter(map(attrgetter("score"), records), np.float64, n)
    present = []
    for k in optional:
        values = list(map(attrgetter(k), records))
        unset_count = values.count(unset)
        if unset_count == n:
            continue
        if unset_count:  # in some records only: the general path names the first without it
            return None
        cols[k] = _four(values, n)
        present.append(k)
    return cols, tuple(present)


_IMAGE_KEYS = ("id", "width", "height", "file_name")
_ANNOTATION_KEYS = ("id", "image_id", "category_id", "bbox", "iscrowd", "ignore", "area")
_CATEGORY_KEYS = ("id", "name")
_DIGITS = bytes.maketrans(bytes(range(256)), bytes(48 if 48 <= c <= 57 else 32 for c in range(256)))


def _long_digit_run(data: bytes, n: int = 19) -> bool:
    """True when ``data`` holds ``n`` or more consecutive decimal digits (C-speed: one translate, one search)."""
    return b"0" * n in data.translate(_DIGITS)


@functools.cache
def _instances_decoder(typed: bool) -> Any:
    """The instances decoder; ``typed``: annotations with the usual types only (ids JSON integers,
    ``bbox`` 4 numbers, ``iscrowd``/``ignore`` integers, ``area`` a number), which decode straight
    into columns; a file outside these is refused (the caller then decodes every value as it is)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    def record(name: str, keys: tuple[str, ...]) -> Any:
        return msgspec.defstruct(name, [(k, Any, msgspec.UNSET) for k in keys], gc=False)

    four = tuple[float, float, float, float]
    annotation = (
        msgspec.defstruct(
            "TypedAnnotation",
            [("id", int), ("image_id", int), ("category_id", int), ("bbox", four)]
            + [("iscrowd", int, 0), ("ignore", int, 0), ("area", float, math.nan)],  # NaN: no area (JSON has no NaN)
            gc=False,
        )
        if typed
        else record("Annotation", _ANNOTATION_KEYS)
    )
    fields: list[tuple[str, Any]] = [
        ("images", list[record("Image", _IMAGE_KEYS)]),  # type: ignore[misc]  # a struct type made at run time
        ("annotations", list[annotation]),  # type: ignore[valid-type]
        ("categories", list[record("Category", _CATEGORY_KEYS)]),  # type: ignore[misc]
    ]
    doc = msgspec.defstruct("Instances", fields)
    return msgspec.json.Decoder(doc)


class AnnotationColumns(NamedTuple):
    """The annotations of an instances file as arrays (every annotation of the usual types)."""

    id: np.ndarray
    image_id: np.ndarray
    category_id: np.ndarray
    iscrowd: np.ndarray
    ignore: np.ndarray
    bbox: np.ndarray
    """float64 ``[n, 4]``, as written (``[x, y, w, h]``)."""
    area: np.ndarray | None
    """float64, or None when some annotation has no ``area``."""


class DecodedInstances:
    """An instances file as the fast decoder read it: ``images``, ``annotations``, ``categories``
    (typed records holding only the keys detcal reads, absent keys ``msgspec.UNSET``) and, when
    every annotation has the usual types (ids JSON integers, ``bbox`` 4 numbers, ``iscrowd`` and
    ``ignore`` integers, ``area`` a number), ``columns``: the annotations as arrays (else None)."""

    def __init__(self, doc: Any, columns: AnnotationColumns | None) -> None:
        self.images, self.annotations, self.categories = doc.images, doc.annotations, doc.categories
        self.columns = columns


def _annotation_columns(records: list) -> AnnotationColumns | None:
    """The typed annotations as columns (C-level iteration), or None when an id is beyond int64."""
    n = len(records)
    try:
        ints = [
            np.fromiter(map(attrgetter(k), records), np.int64, n)
            for k in ("id", "image_id", "category_id", "iscrowd", "ignore")
        ]
    except OverflowError:
        return None
    bbox = _four(map(attrgetter("bbox"), records), n)
    areas = np.fromiter(map(attrgetter("area"), records), np.float64, n)
    area = None if np.isnan(areas).any() else areas  # NaN: the decoder's default (JSON numbers are never NaN)
    return AnnotationColumns(ints[0], ints[1], ints[2], ints[3], ints[4], bbox, area)


def decode_instances(data: bytes) -> DecodedInstances | None:
    """The records detcal reads of an instances file (:class:`DecodedInstances`), or ``None`` when the
    fast path declines."""
    try:
        import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)
    except ImportError:  # pragma: no cover - msgspec is a dependency
        return None
    if b"\\" in data or _long_digit_run(data):
        return None
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        doc = _instances_decoder(True).decode(data)
        columns = _annotation_columns(doc.annotations)
        if columns is not None:
            return DecodedInstances(doc, columns)
    except msgspec.ValidationError:  # an annotation outside the usual types: every value read as it is
        pass
    except (msgspec.DecodeError, RecursionError):
        return None
    try:
        return DecodedInstances(_instances_decoder(False).decode(data), None)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
