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
on what such a number becomes). The ``annotations`` list is first kept as
its text (``msgspec.Raw``) and decoded a block of records at a time
(:func:`_annotation_blocks`, cut as the chunked results reader cuts,
:mod:`detcal.data.json_blocks`): each block's records become columns while
they are in the processor's cache and are freed before the next, instead
of every record of the file at once (at 20,000 images, 140k annotations:
0.20 -> 0.15 s of CPU and 30 MB less at the load's peak). A file whose
annotations the blocks do not take (another type, an id beyond int64, no
cut that decodes) is decoded whole, as before. In the usual layout the
list's text is found by a search of the bytes and the rest of the file
decoded with a placeholder in its place (:func:`_spliced_decode`), so the
list is scanned once, by the blocks, instead of once more to find its end.
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

from detcal.data.json_blocks import BYTES_PER_RECORD_GUESS, ColumnStore, ListBlock, MemoryReader, last_cuts

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


def _long_digit_run(data: bytes, n: int = 19, step: int = 1 << 16) -> bool:
    """True when ``data`` holds ``n`` or more consecutive decimal digits (C-speed: one translate and one search
    per slice of ``step`` bytes, the slices overlapping by ``n - 1`` so no run is cut; the translated text of
    a slice stays in the processor's cache instead of taking fresh pages for the file)."""
    run = b"0" * n
    with memoryview(data) as view:
        return any(run in view[lo : lo + step + n - 1].tobytes().translate(_DIGITS) for lo in range(0, len(data), step))


@functools.cache
def _typed_annotation() -> Any:
    """The record type of an annotation of the usual types: ids JSON integers, ``bbox`` 4 numbers,
    ``iscrowd``/``ignore`` integers, ``area`` a number (other keys skipped without being built)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    four = tuple[float, float, float, float]
    return msgspec.defstruct(
        "TypedAnnotation",
        [("id", int), ("image_id", int), ("category_id", int), ("bbox", four)]
        + [("iscrowd", int, 0), ("ignore", int, 0), ("area", float, math.nan)],  # NaN: no area (JSON has no NaN)
        gc=False,
    )


@functools.cache
def _instances_decoder(typed: bool | None) -> Any:
    """The instances decoder; ``typed``: annotations of the usual types only (:func:`_typed_annotation`),
    which decode straight into columns; a file outside these is refused (the caller then decodes every
    value as it is); ``None``: the annotations kept as their JSON text (``msgspec.Raw``), decoded block by
    block after (:func:`_annotation_blocks`)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    def record(name: str, keys: tuple[str, ...]) -> Any:
        return msgspec.defstruct(name, [(k, Any, msgspec.UNSET) for k in keys], gc=False)

    annotations: Any = msgspec.Raw
    if typed is not None:
        annotations = list[_typed_annotation() if typed else record("Annotation", _ANNOTATION_KEYS)]  # type: ignore[misc]
    fields: list[tuple[str, Any]] = [
        ("images", list[record("Image", _IMAGE_KEYS)]),  # type: ignore[misc]  # a struct type made at run time
        ("annotations", annotations),
        ("categories", list[record("Category", _CATEGORY_KEYS)]),  # type: ignore[misc]
    ]
    doc = msgspec.defstruct("Instances", fields)
    return msgspec.json.Decoder(doc)


@functools.cache
def _annotations_decoder() -> Any:
    """Decoder of a list of :func:`_typed_annotation` records (a block of the ``annotations`` list)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    return msgspec.json.Decoder(list[_typed_annotation()])  # type: ignore[misc]


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
    ``ignore`` integers, ``area`` a number), ``columns``: the annotations as arrays (else None;
    ``annotations`` is then empty: the records became the columns block by block)."""

    def __init__(self, images: list, annotations: list, categories: list, columns: AnnotationColumns | None) -> None:
        self.images, self.annotations, self.categories = images, annotations, categories
        self.columns = columns


def _annotation_arrays(records: list) -> dict[str, np.ndarray] | None:
    """The typed annotations as the arrays of :class:`AnnotationColumns` (C-level iteration; ``area`` NaN
    where a record has none), or None when an id is beyond int64."""
    n = len(records)
    try:
        cols = {
            k: np.fromiter(map(attrgetter(k), records), np.int64, n)
            for k in ("id", "image_id", "category_id", "iscrowd", "ignore")
        }
    except OverflowError:
        return None
    cols["bbox"] = _four(map(attrgetter("bbox"), records), n)
    cols["area"] = np.fromiter(map(attrgetter("area"), records), np.float64, n)
    return cols


def _annotation_columns(cols: dict[str, np.ndarray]) -> AnnotationColumns:
    area = cols.pop("area")
    return AnnotationColumns(**cols, area=None if np.isnan(area).any() else area)  # NaN: no area (JSON has none)


ANNOTATION_BLOCK_BYTES: int = 256 << 10
"""Bytes of the ``annotations`` list decoded at a time (:func:`_annotation_blocks`): the records of a
block become columns while they are in the processor's cache, and are freed before the next."""

_MAX_GROWTH = 4
"""Times a block of annotations is read further when none of its cuts decodes, before the whole file is
decoded instead."""


def _annotation_blocks(raw: Any) -> AnnotationColumns | None:
    """The annotations of the JSON list ``raw`` (its text) as columns, decoded a block of records at a time
    with the records of :func:`_typed_annotation`: the columns of a whole decode, or None (the caller then
    decodes the whole file) when a record is not of the usual types, an id is beyond int64, or a block
    finds no cut that decodes (a cut inside a value leaves a bracket or a string open: it cannot decode)."""
    reader = MemoryReader(raw)
    block = ListBlock.of_list(reader, ANNOTATION_BLOCK_BYTES)
    if block is None:
        return None
    store, grown = ColumnStore(len(reader.view) // BYTES_PER_RECORD_GUESS), 0
    while True:
        block.top_up()
        cut = _decoded_cut(block)
        if cut is None:
            return None
        records, comma = cut
        if records is None:  # no record ends in the block yet, or no cut decodes: read further (the latter a few times)
            grown += comma == 0
            if grown > _MAX_GROWTH:
                return None
            block.read()
            continue
        cols = _annotation_arrays(records)
        del records
        if cols is None:
            return None
        store.add(cols)
        if block.eof:
            return _annotation_columns(store.result())  # type: ignore[arg-type]  # no column is None
        block.drop(comma - 1)
        grown = 0


def _decoded_cut(block: ListBlock) -> tuple[list | None, int] | None:
    """(the records of ``block`` before its last cut that decodes, the comma of that cut), ``(None, 0)`` when
    no cut decodes, ``(None, -1)`` when the block holds no cut, or None when a record is not of the usual
    types (or, at the end of the list, when the rest does not decode). At the end of the list, the rest
    (ending with its ``]``) is the one cut."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    buf = block.buf
    cuts = [block.fill - 1] if block.eof else [buf.index(b",", c, block.fill) for c in last_cuts(buf, block.fill)]
    if not cuts:
        return None, -1
    for comma in cuts:
        end, buf[comma] = buf[comma], 93  # "]"
        try:
            with memoryview(buf) as view:
                return _annotations_decoder().decode(view[: comma + 1]), comma
        except msgspec.DecodeError:
            if block.eof:
                return None
        except (msgspec.ValidationError, RecursionError):
            return None  # a record of other types: every annotation is read as it is
        finally:
            buf[comma] = end
    return None, 0


_PLACEHOLDER = b'"\\\\"'
"""A JSON string holding one backslash: put where the annotations list was, it marks that place alone (the
fast path reads no text with a backslash)."""

_WS = b" \t\r\n"


def _annotations_span(data: bytes) -> tuple[int, int] | None:
    """A guess of the top-level ``annotations`` list's text ``data[start:end]`` (from its ``[`` to its ``]``),
    from a search of the bytes: the value of the first ``"annotations"`` key with a list value, ending at
    the last ``]`` before the last ``"categories"`` key with only a comma between, or, when that key comes
    before the list, at the last ``]`` of the file with only the closing ``}`` after it. None when the text
    is not of that form. Only a guess: :func:`_spliced_decode` checks it."""
    key = data.find(b'"annotations"')
    if key < 0:
        return None
    rest = data[key + 13 : key + 64].lstrip(_WS)
    if not rest.startswith(b":") or not rest[1:].lstrip(_WS).startswith(b"["):
        return None
    start = data.index(b"[", key + 13)
    categories = data.rfind(b'"categories"')
    stop, between = (categories, b",") if categories > start else (len(data), b"}")
    end = data.rfind(b"]", start, stop)
    if end < 0 or data[end + 1 : stop].strip(_WS) != between:
        return None
    return start, end + 1


def _ends_with_annotations(data: bytes, start: int, end: int) -> bool:
    """Whether the records just before the ``]`` at ``data[end - 1]`` decode as annotations of the usual
    types (a cheap look at the end of a guessed list before the whole list is decoded): the last few cuts
    above ``start`` are tried in turn, True at the first that decodes; with no cut above ``start``, the
    whole guess is decoded. False when none decodes (the caller then leaves the file to the usual decode)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    tried = False
    for cut in last_cuts(data, end - 1):  # type: ignore[arg-type]  # bytes have the rfind and indexing it reads
        if cut <= start:
            break
        tried, comma = True, data.index(b",", cut, end)
        try:
            _annotations_decoder().decode(b"[" + data[comma + 1 : end])
            return True
        except msgspec.ValidationError:
            return False
        except msgspec.DecodeError:
            continue  # a cut inside a value: the one before
    if tried:
        return False
    try:
        _annotations_decoder().decode(data[start:end])
        return True
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return False


def _spliced_decode(data: bytes) -> DecodedInstances | None:
    """The usual file read with its annotations' text scanned once: the rest of the file, with
    :data:`_PLACEHOLDER` where the ``annotations`` list was (:func:`_annotations_span`), decoded whole, and
    the list decoded block by block (:func:`_annotation_blocks`). Both decode, and the placeholder is
    what the rest gives for its top-level ``annotations``, only when the guess is the list itself: a
    parse of the file reaches the list in the state the rest's parse reaches the placeholder, and leaves
    a complete list in the state it leaves the placeholder. So the result is that of decoding the file
    with the list kept as its text and then block by block; None otherwise (the caller then does that)."""
    import msgspec  # lazy: msgspec kept out of start-up (only the fast JSON readers need it)

    span = _annotations_span(data)
    if span is None or not _ends_with_annotations(data, *span):
        return None
    start, end = span
    with memoryview(data) as view:
        rest = b"".join((view[:start], _PLACEHOLDER, view[end:]))  # one copy of the rest (no slices copied first)
        try:
            head = _instances_decoder(None).decode(rest)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return None
        del rest
        if not isinstance(head.annotations, msgspec.Raw) or bytes(head.annotations) != _PLACEHOLDER:
            return None
        with view[start:end] as text:
            try:
                columns = _annotation_blocks(text)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                return None
    return None if columns is None else DecodedInstances(head.images, [], head.categories, columns)


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
    spliced = _spliced_decode(data)
    if spliced is not None:
        return spliced
    try:  # the usual file: the annotations decoded block by block into columns
        head = _instances_decoder(None).decode(data)
        columns = _annotation_blocks(head.annotations)
        if columns is not None:
            return DecodedInstances(head.images, [], head.categories, columns)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        pass  # decided by the whole decode below
    try:
        doc = _instances_decoder(True).decode(data)
        arrays = _annotation_arrays(doc.annotations)
        if arrays is not None:
            return DecodedInstances(doc.images, doc.annotations, doc.categories, _annotation_columns(arrays))
    except msgspec.ValidationError:  # an annotation outside the usual types: every value read as it is
        pass
    except (msgspec.DecodeError, RecursionError):
        return None
    try:
        doc = _instances_decoder(False).decode(data)
        return DecodedInstances(doc.images, doc.annotations, doc.categories, None)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
