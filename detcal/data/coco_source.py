"""The COCO format: instances JSON + results JSON (read whole or in blocks, optionally one rank's
image shard), written back as ``detections.json`` (+ ``instances.json``).

Matching by default: pycocotools' ``evaluateImg`` rules (``exclusive``, IoU 0.5 and 0.75, 100
detections per image; docs/matching.md).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.data import coco_chunks  # the module: tests spy on iter_coco_results there
from detcal.data.coco import (
    load_coco_instances,
    load_coco_results,
    results_from_decoded,
    write_coco_instances,
    write_coco_results,
)
from detcal.data.formats import LoadedData, MatchDefaults, need_path
from detcal.data.json_blocks import BYTES_PER_RECORD_GUESS, ColumnStore
from detcal.utils.warn import note

__all__ = [
    "ADAPTER",
    "AUTO_CHUNK_ABOVE",
    "AUTO_CHUNK_BYTES",
    "WHOLE_FILE_ERRORS_UP_TO",
    "load_coco",
    "release_memory",
    "results_chunk_bytes",
    "shard_image_ids",
    "unknown_category_warning",
]

AUTO_CHUNK_ABOVE: int = 8 << 20
"""``data.chunk_bytes=null`` reads results files larger than this (8 MiB) in blocks of :data:`AUTO_CHUNK_BYTES`."""
AUTO_CHUNK_BYTES: int = 256 << 10
"""Block size of automatic chunked reading (256 KiB: each block is decoded in place, and the records
of a small block stay in the processor's cache while they become columns; on a 1.2M-detection file
0.80 s of CPU against 0.95 s with 4 MiB blocks and 1.0 s for a whole-file parse, with a few MB of
parsed records at a time)."""
WHOLE_FILE_ERRORS_UP_TO: int = 64 << 20
"""A results file of at most this size (64 MiB) read in automatic blocks reports a bad file with the
whole-file reader's error (its line and column in the file, its own wording), read again whole only
then; larger files report the block reader's (the block's first byte in the file)."""


def _unknown_image(dets: Detections, ds: Dataset, file: Path, offset: int = 0) -> None:
    """Unknown image ids are an error naming the record (``offset``: records before ``dets`` in the file)."""
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError(
            f"unknown image id {int(dets.image_id[bad])} (not in {ds.source or 'the ground truth'})",
            file=file,
            record=bad + offset,
            field="image_id",
        )


def _unknown_category_error(dets: Detections, ds: Dataset, file: Path, bad: int, record: int) -> DetcalInputError:
    where = ds.source or "the ground truth"
    return DetcalInputError(
        f"unknown category id {int(dets.category[bad])} (not in {where}); set "
        "data.unknown_category=drop to leave such detections out",
        file=file,
        record=record,
        field="category_id",
    )


def _known_categories(dets: Detections, ds: Dataset) -> np.ndarray:
    known = np.fromiter(ds.categories.keys(), dtype=np.int64, count=len(ds.categories))
    return np.isin(dets.category, known)


def _check_results(
    dets: Detections, ds: Dataset, file: Path, unknown_category: str
) -> tuple[Detections, dict[str, int]]:
    """Unknown image ids are an error (naming the record); unknown categories are dropped or an error."""
    _unknown_image(dets, ds, file)
    unknown = ~_known_categories(dets, ds)
    if unknown.any():
        if unknown_category == "error":
            bad = int(np.flatnonzero(unknown)[0])
            raise _unknown_category_error(dets, ds, file, bad, bad)
        return dets.select(~unknown), {"unknown_category": int(unknown.sum())}
    return dets, {}


def results_chunk_bytes(results: str | os.PathLike, chunk_bytes: int | None) -> int:
    """Block size for reading ``results`` (0: whole): ``chunk_bytes``, or with None blocks of
    :data:`AUTO_CHUNK_BYTES` for files larger than :data:`AUTO_CHUNK_ABOVE` and whole below."""
    if chunk_bytes is None:
        return AUTO_CHUNK_BYTES if os.path.getsize(results) > AUTO_CHUNK_ABOVE else 0
    return int(chunk_bytes)


_FIELDS = dataclasses.fields(Detections)


def _gathered(store: ColumnStore) -> Detections:
    """The :class:`Detections` of the chunks added to ``store`` (its columns are the chunks' fields)."""
    if not len(store):
        return Detections(np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))
    return Detections(**store.result())  # type: ignore[arg-type]


def _read_chunked(
    r: Path, ds: Dataset, unknown_category: str, chunk_bytes: int, keep: np.ndarray | None
) -> tuple[Detections, dict[str, int], np.ndarray | None]:
    """The results file read in blocks, with :func:`_check_results`' checks and errors (same record
    indices and the same precedence: an unknown image id anywhere before an unknown category).
    ``keep``: sorted image ids to keep (a rank's shard); returns the kept detections, the dropped
    counts (of the whole file) and, with ``keep``, the kept detections' rows among all checked ones."""

    # the usual file, read whole (a rank's shard keeps only its own detections, block by block, below):
    # every block decoded into the file's columns, checked once
    decoded = coco_chunks.read_result_columns(r, chunk_bytes) if keep is None else None
    if decoded is not None:
        try:
            return _checked_columns(decoded, r, ds, unknown_category)
        except DetcalInputError:
            pass  # a bad record: read again block by block below, for the block reader's own error
        finally:
            del decoded
    gather = ColumnStore(os.path.getsize(r) // BYTES_PER_RECORD_GUESS)
    rows: list[np.ndarray] = []
    seen = kept = n_unknown = 0
    first_bad: tuple[Detections, int, int] | None = None
    for chunk in coco_chunks.iter_coco_results(r, None, chunk_bytes):
        _unknown_image(chunk, ds, r, seen)
        ok = _known_categories(chunk, ds)
        if not ok.all():
            if first_bad is None:
                bad = int(np.flatnonzero(~ok)[0])
                first_bad = (chunk.select(np.array([bad])), 0, seen + bad)
            n_unknown += int((~ok).sum())
            chunk = chunk.select(ok)
        if keep is not None:
            pos = np.searchsorted(keep, chunk.image_id)
            mine = (pos < len(keep)) & (keep[np.minimum(pos, len(keep) - 1)] == chunk.image_id)
            rows.append(kept + np.flatnonzero(mine))
            kept += len(chunk)
            chunk = chunk.select(mine)
        seen += len(ok)
        if len(chunk):
            gather.add({f.name: getattr(chunk, f.name) for f in _FIELDS})
    if first_bad is not None and unknown_category == "error":
        raise _unknown_category_error(first_bad[0], ds, r, first_bad[1], first_bad[2])
    dets = _gathered(gather)
    dropped = {"unknown_category": n_unknown} if n_unknown else {}
    release_memory()
    return dets, dropped, (np.concatenate(rows) if rows else np.array([], dtype=np.int64)) if keep is not None else None


def _checked_columns(
    decoded: tuple[dict[str, np.ndarray], tuple[str, ...]],
    r: Path,
    ds: Dataset,
    unknown_category: str,
) -> tuple[Detections, dict[str, int], None]:
    """:func:`_read_chunked`'s result (no shard) from the whole file's decoded columns: the value checks, the
    unknown image ids and categories checked once over all the records (any error is raised; the caller
    then reads block by block for the error the block reader gives)."""
    dets = results_from_decoded(decoded, str(r), None, own=True)
    decoded[0].clear()  # the columns as written: only the checked ones are kept
    ok = _known_rows(dets, ds, r)
    n_unknown = len(ok) - int(np.count_nonzero(ok))
    if n_unknown:
        if unknown_category == "error":
            bad = int(np.flatnonzero(~ok)[0])
            raise _unknown_category_error(dets, ds, r, bad, bad)
        dets = dets.select(ok)
    release_memory()
    return dets, ({"unknown_category": n_unknown} if n_unknown else {}), None


def _known_rows(dets: Detections, ds: Dataset, r: Path, step: int = 1 << 16) -> np.ndarray:
    """:func:`_unknown_image` (the same error) and :func:`_known_categories` a slice of rows at a time
    (the temporaries of a slice, not of the file)."""
    known = np.fromiter(ds.categories.keys(), dtype=np.int64, count=len(ds.categories))
    ok = np.empty(len(dets), dtype=bool)
    for lo in range(0, len(dets), step):
        image_id = dets.image_id[lo : lo + step]
        missing = ds.images.index_of(image_id) < 0
        if missing.any():
            bad = int(np.flatnonzero(missing)[0])
            raise DetcalInputError(
                f"unknown image id {int(image_id[bad])} (not in {ds.source or 'the ground truth'})",
                file=r,
                record=lo + bad,
                field="image_id",
            )
        ok[lo : lo + step] = np.isin(dets.category[lo : lo + step], known)
    return ok


def release_memory() -> None:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere). The
    parsed records of the blocks leave freed memory that glibc keeps otherwise (about 40% of the
    detections' size)."""

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # pragma: no cover - not glibc
            pass


def shard_image_ids(ds: Dataset, rank: int, world: int) -> np.ndarray:
    """The sorted image ids of rank ``rank``'s shard: ``world`` contiguous ranges of the ground truth's
    sorted image ids (every image's detections land on one rank)."""
    ids = np.unique(ds.images.id)
    return np.array_split(ids, world)[rank] if world > 0 else ids


def load_coco(
    gt: str | os.PathLike,
    results: str | os.PathLike,
    unknown_category: str = "drop",
    chunk_bytes: int | None = None,
    shard: tuple[int, int] | None = None,
) -> LoadedData:
    """COCO instances JSON + COCO results JSON.

    ``chunk_bytes`` (docs/scale.md): read the results in blocks of that many bytes into compact
    columns (0: whole; None: blocks of 256 KiB for files over 8 MiB). ``shard`` (rank, world): keep
    only the detections of that rank's image shard (:func:`shard_image_ids`; read in blocks), with
    ``LoadedData.shard`` their input rows. The detections (and errors) are those of the whole-file
    load."""

    g, r = need_path(gt, "data.gt"), need_path(results, "data.results")
    ds = load_coco_instances(g)
    block = results_chunk_bytes(r, chunk_bytes)
    rows = None
    if shard is not None:
        keep = shard_image_ids(ds, *shard)
        dets, dropped, rows = _read_chunked(r, ds, unknown_category, block or AUTO_CHUNK_BYTES, keep)
    elif block > 0:
        try:
            dets, dropped, _ = _read_chunked(r, ds, unknown_category, block, None)
        except DetcalInputError:
            if chunk_bytes is None and os.path.getsize(r) <= WHOLE_FILE_ERRORS_UP_TO:
                _check_results(load_coco_results(r, dataset=None), ds, r, unknown_category)  # its error, if any
            raise
    else:
        dets = load_coco_results(r, dataset=None)
        dets, dropped = _check_results(dets, ds, r, unknown_category)
    prov = {"source": "coco", "gt": str(g.resolve()), "results": str(r.resolve())}
    if dropped.get("unknown_category"):
        msg = unknown_category_warning(r, dropped["unknown_category"])
        logging.getLogger("detcal").warning("%s", msg)
        note(msg)  # metrics.json 'warnings' of whichever command loaded it
    return LoadedData(ds, dets, None, prov, dropped, rows)


def unknown_category_warning(results: str | os.PathLike, n: int) -> str:
    """The one-line warning for detections of a category the ground truth does not have."""
    return (
        f"{results}: left out {n} detection{'s' if n != 1 else ''} whose category is not in the ground truth "
        f"(data.unknown_category=drop; =error stops at the first)"
    )


class CocoAdapter:
    """COCO instances JSON (``data.gt``) + COCO results JSON (``data.results``)."""

    name = "coco"
    gt_field = "gt"
    results_field = "results"
    fields = ("gt", "results", "unknown_category", "chunk_bytes")
    matching = MatchDefaults(mode="exclusive", iou=(0.5,), max_dets=100)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_coco` of ``fields['gt']`` and ``fields['results']``."""
        return load_coco(
            fields["gt"],
            fields["results"],
            str(fields.get("unknown_category") or "drop"),
            fields.get("chunk_bytes"),
            shard,
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """``detections.json`` (+ ``instances.json`` when ``write_gt``)."""

        write_coco_results(out_dir / "detections.json", dets)
        paths = {"results": str(out_dir / "detections.json")}
        if write_gt:
            write_coco_instances(out_dir / "instances.json", dataset)
            paths["gt"] = str(out_dir / "instances.json")
        return paths


ADAPTER = CocoAdapter()
