"""Chunked reading of very large COCO results files, in bounded memory.

:func:`iter_coco_results` reads a results file (a JSON list of detection
records) a block of bytes at a time and yields :class:`Detections` chunks in
file order; concatenated, the chunks equal :func:`load_coco_results` of the
whole file, with the same checks and the same errors (record indices count
from the start of the file). Memory is bounded by the block size, not by the
file: at most two blocks of bytes plus the parsed records of one block (a
130 MB file of 300k records peaked at 143 MB RSS with 8 MiB blocks and 409 MB
with 32 MiB blocks, against 774 MB when loaded whole).

How a block is cut: the reader looks for the last ``}`` followed by a comma
(JSON whitespace allowed in between) and parses the records before it. A cut
inside a string or a nested value cannot parse (the string or the bracket
would be left open), so a cut that parses is a cut between two top-level
records; otherwise the previous ``}`` is tried, and after a few tries more
bytes are read. The block is parsed where it lies: the file is read into one
reused buffer that starts with ``[``, the comma of the cut is turned into
``]`` while msgspec decodes ``buffer[:comma + 1]`` straight into columns
(:func:`detcal.data._fast_results.decode_results`) and put back after, and
the bytes past the cut move to the front for the next block; no copy of a
block is made. A block the fast decoder declines is parsed by orjson (json's
without orjson) into records. The buffer, the cuts and the column store are
:mod:`detcal.data.json_blocks`'s (shared with the instances decoder).

Only the list form is streamed; a file whose top level is a dict (with an
``annotations`` list) is read whole and then cut into chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.data._fast_results import decode_results
from detcal.data._json import TOP, parse_json_bytes
from detcal.data.coco import RESULT_UNCERTAINTY_KEYS, load_coco_results, results_from_decoded, results_from_records
from detcal.data.json_blocks import BYTES_PER_RECORD_GUESS, ColumnStore, ListBlock, last_cuts

PathLike = str | os.PathLike[str]

__all__ = ["iter_coco_results", "read_result_columns", "DEFAULT_CHUNK_BYTES"]

DEFAULT_CHUNK_BYTES: int = 32 << 20
"""Bytes read per block (32 MiB: about 80,000 plain records)."""


def _uncertainty_of(dets: Detections) -> tuple[bool, ...]:
    return tuple(
        getattr(dets, k) is not None
        for k in ("box_std", "box_cov", "corner_cov", "proposal", "delta_mean", "delta_std")
    )


def iter_coco_results(
    path: PathLike, dataset: Dataset | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES
) -> Iterator[Detections]:
    """Yield the detections of a COCO results file in chunks, in file order.

    Same records, checks and errors as :func:`detcal.data.coco.load_coco_results`
    (the uncertainty fields must be the same in every chunk, as in every
    record); empty chunks are not yielded. ``chunk_bytes`` bounds the bytes
    parsed at once.
    """
    if chunk_bytes < 1:
        raise DetcalInputError(f"chunk_bytes must be positive, got {chunk_bytes}", field="chunk_bytes")
    file = str(path)
    try:
        fh = open(path, "rb")
    except OSError as e:
        raise DetcalInputError(f"cannot read file: {e.strerror or e}", file=file) from e
    with fh:
        block = ListBlock.of_list(fh, chunk_bytes)
        if block is None:
            fh.close()
            yield from _whole_file(path, dataset, chunk_bytes)
            return
        yield from _blocks(block, file, dataset)


def _blocks(block: ListBlock, file: str, dataset: Dataset | None) -> Iterator[Detections]:
    seen = 0  # records yielded so far
    kind: tuple[bool, ...] | None = None
    while True:
        block.top_up()
        if block.eof:
            records = decode_results(block.buf, block.fill) or _parse(bytes(block.buf[: block.fill]), file, block.base)
            used = block.fill - 1
        else:
            records, used = _cut_and_parse(block.buf, block.fill, file, block.base)
            if records is None:  # no valid cut in this block: read more
                block.read()
                continue
        bools = not isinstance(records, tuple) and (  # decoded columns hold no booleans
            block.buf.find(b"true", 1, used + 1) >= 0 or block.buf.find(b"false", 1, used + 1) >= 0
        )  # no copy of the block
        dets = _to_detections(records, file, dataset, seen, bools)
        del records
        if len(dets):
            k = _uncertainty_of(dets)
            if kind is not None and k != kind:
                raise DetcalInputError(
                    "the uncertainty fields change from one record to another: either all records carry a field or none",
                    file=file,
                    record=seen,
                    field=", ".join(RESULT_UNCERTAINTY_KEYS),
                )
            kind = k
            yield dets
        seen += len(dets)  # every record becomes one detection here
        if block.eof:
            return
        block.drop(used)


def _cut_and_parse(buf: bytearray, fill: int, file: str, base: int) -> tuple[Any, int]:
    """Parse the records of ``buf[1:fill]`` before its last top-level ``},``: (records or decoded
    columns, index of that comma less one: the bytes used) or (None, 0). The comma is turned into
    ``]`` while the block is read and put back after. The usual block is decoded straight into
    columns (the fast path of :func:`detcal.data.coco.load_coco_results`); a block it declines is
    parsed into records."""
    for end in last_cuts(buf, fill):
        comma = buf.index(b",", end, fill)
        buf[comma] = 93  # "]"
        try:
            records = decode_results(buf, comma + 1)
            if records is None:
                records = _parse(bytes(buf[: comma + 1]), file, base, quiet=True)  # type: ignore[assignment]
        finally:
            buf[comma] = 44  # ","
        if records is not None:
            return records, comma - 1
    return None, 0


def _parse(text: bytes, file: str, base: int, quiet: bool = False) -> list | None:
    try:
        doc = parse_json_bytes(text, file).doc
    except DetcalInputError as e:
        if quiet:
            return None
        raise DetcalInputError(f"{e.message} (in the block starting at byte {base})", file=file, record=e.record) from e
    if not isinstance(doc, list):  # pragma: no cover - the text is a list by construction
        raise DetcalInputError("expected a list of detection records", file=file, record=TOP)
    return doc


def read_result_columns(path: PathLike, chunk_bytes: int) -> tuple[dict[str, np.ndarray], tuple[str, ...]] | None:
    """Every record of a results file decoded block by block straight into columns, with no value checks:
    ``({image_id, category_id, bbox [n, 4] as written, score, <optional fields>}, optional fields)``, the
    form of :func:`detcal.data._fast_results.decode_results` for the whole file.

    ``None`` unless the file is a non-empty top-level list that the fast decoder takes block by block,
    every block with the same optional fields; the caller then reads it with :func:`iter_coco_results`,
    whose errors name the record. Blocks are cut and read in place as there (the same ``chunk_bytes``)."""
    try:
        fh = open(path, "rb")
    except OSError:
        return None  # the block reader reports it
    with fh:
        block = ListBlock.of_list(fh, chunk_bytes)
        if block is None:
            return None
        store = ColumnStore(os.path.getsize(path) // BYTES_PER_RECORD_GUESS)
        kind: tuple[str, ...] | None = None
        while True:
            block.top_up()
            if block.eof:
                decoded, used = decode_results(block.buf, block.fill), block.fill - 1
            else:
                decoded, used = _cut_and_decode(block.buf, block.fill)
                if used < 0:  # no record ends in this block yet: read more
                    block.read()
                    continue
            if decoded is None or (kind is not None and decoded[1] != kind):
                return None
            kind = decoded[1]
            store.add(decoded[0])
            del decoded
            if block.eof:
                return store.result(), kind  # type: ignore[return-value]  # no column of a decoded block is None
            block.drop(used)


def _cut_and_decode(buf: bytearray, fill: int) -> tuple[Any, int]:
    """:func:`_cut_and_parse` with the fast decoder only: (decoded columns, bytes used), (None, 0) when no
    cut decodes, or (None, -1) when the block holds no cut."""
    cuts = last_cuts(buf, fill)
    if not cuts:
        return None, -1
    for end in cuts:
        comma = buf.index(b",", end, fill)
        buf[comma] = 93  # "]"
        try:
            decoded = decode_results(buf, comma + 1)
        finally:
            buf[comma] = 44  # ","
        if decoded is not None:
            return decoded, comma - 1
    return None, 0


def _to_detections(records: Any, file: str, dataset: Dataset | None, offset: int, bools: bool) -> Detections:
    try:
        if isinstance(records, tuple):  # decoded columns
            return results_from_decoded(records, file, dataset, own=True)
        return results_from_records(records, file, dataset, bools=bools)
    except DetcalInputError as e:
        if isinstance(e.record, int):
            raise DetcalInputError(e.message, file=file, record=e.record + offset, field=e.field) from e
        raise


def _whole_file(path: PathLike, dataset: Dataset | None, chunk_bytes: int) -> Iterator[Detections]:
    dets = load_coco_results(path, dataset)
    step = max(chunk_bytes // 400, 1)  # about 400 bytes per record
    for lo in range(0, len(dets), step):
        yield dets.select(np.arange(lo, min(lo + step, len(dets))))
