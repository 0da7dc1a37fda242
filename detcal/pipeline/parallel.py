"""Spreading an evaluation over processes without changing a bit of it.

Two kinds of work are independent and are split: matching, which never looks
across images (the detections are split into image shards, matched apart and
put back in input order), and the confidence metrics of each IoU threshold
(each threshold is computed whole by one process). Every number is therefore
computed by the same code on the same arrays as in one process: the results
are bitwise equal.

* ``parallel.workers=N``: N processes on this machine (fork).
* ``parallel.distributed=true`` under ``torchrun``: the ranks of a
  torch.distributed group (gloo or nccl; the process group is started from
  the torchrun environment when it is not already). Each rank matches its
  image shard and evaluates its share of the thresholds; the pieces are
  gathered on every rank (``all_gather_object``); rank 0 writes the report.
  With COCO results each rank reads only its own shard (sharded reading,
  :func:`gather_shards`); other sources are read whole by every rank.
* ``parallel.shard_size``: in one process, matching runs over image shards of
  about that many detections one after the other (:func:`match_in_shards`),
  so the matcher's working memory is that of a shard, not of the whole set.

Sharded reading (docs/scale.md): rank r keeps the detections of the r-th of
``world`` contiguous ranges of the ground truth's sorted image ids (it scans
the results file in blocks and drops the other ranks' records; every image
lies on one rank), with their input rows; it matches them; then every rank
gathers every rank's (rows, detections, match) and puts them back in input
order, so all later stages run on the same arrays as in one process
(bitwise-equal numbers, bootstrap intervals included). What is gathered is the
compact columns (boxes, scores, categories, image ids, uncertainty fields;
matched/ignored flags per threshold, GT rows, IoU, considered), not binned
statistics: several metrics are not sums of fixed cells (adaptive and
equal-count binning, the sparse-cell policy, the image bootstrap, AP, the
box-uncertainty sample), so an integer all-reduce of cell counts could not
reproduce them exactly. The confidence metrics are still split by threshold
across the ranks.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from detcal.core.types import Detections, MatchResult
from detcal.matching.chunks import CHUNK_DETECTIONS, image_chunks, row_numbers, rows_through
from detcal.pipeline.matcher import run_match
from detcal.pipeline.sources import LoadedData, release_memory
from detcal.pipeline.spec import MatchingSpec

__all__ = [
    "image_shards",
    "merge_matches",
    "map_in_processes",
    "parallel_match",
    "distributed_rank",
    "distributed_world",
    "gather_all",
    "match_in_shards",
    "gather_shards",
]

from detcal.utils.processes import map_in_processes  # noqa: E402  (re-exported)


def image_shards(image_id: np.ndarray, n: int) -> list[np.ndarray]:
    """Detection rows of ``n`` shards of whole images (contiguous ranges of the sorted image ids)."""
    ids = np.unique(image_id)
    parts = np.array_split(ids, max(1, min(n, len(ids)))) if len(ids) else [ids]
    order = np.searchsorted(ids, image_id)
    bounds = np.cumsum([0] + [len(p) for p in parts])
    return [np.flatnonzero((order >= bounds[k]) & (order < bounds[k + 1])) for k in range(len(parts))]


_MATCH_FIELDS = ("matched", "ignored", "gt_index", "iou", "considered")


def _rows_index(rows: np.ndarray) -> slice | np.ndarray:
    """Sorted, distinct rows (an :func:`image_shards` shard) as a slice when they are one contiguous run, as
    they are when the results file lists the images in order: views to select and block copies to put back,
    instead of gathers and scatters over every matched column."""
    if len(rows) and int(rows[-1]) - int(rows[0]) + 1 == len(rows):
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


def _compact_gt_index(n_gt: int | None) -> Any:
    """int32 GT rows when the GT fits (half the memory of int64; the same values)."""
    return np.int32 if n_gt is not None and n_gt < 2**31 - 1 else None


def _empty_match(first: MatchResult, n: int, n_gt: int | None = None) -> dict[str, np.ndarray]:
    out = {}
    for name in _MATCH_FIELDS:
        a = getattr(first, name)
        dtype = (_compact_gt_index(n_gt) or a.dtype) if name == "gt_index" else a.dtype
        out[name] = np.zeros(a.shape[:-1] + (n,), dtype=dtype)
    return out


def merge_matches(
    n: int, parts: Sequence[tuple[np.ndarray, MatchResult] | None], n_gt: int | None = None
) -> MatchResult:
    """One :class:`MatchResult` over ``n`` detections from shard results (rows, result); with ``n_gt``
    (the GT count) the GT rows are kept as int32 when they fit."""
    done = [p for p in parts if p is not None]
    first = next((r for rows, r in done if len(rows)), done[0][1])
    fields = _empty_match(first, n, n_gt)
    for rows, r in done:
        at = _rows_index(rows)
        for name in _MATCH_FIELDS:
            fields[name][..., at] = getattr(r, name)
    return dataclasses.replace(first, **fields)  # type: ignore[arg-type]


def match_in_shards(
    m: MatchingSpec, dets: Detections, data: LoadedData, thresholds: Sequence[float] | None, shard_size: int
) -> MatchResult:
    """:func:`detcal.pipeline.matcher.run_match` over image shards of about ``shard_size`` detections
    (:func:`detcal.matching.chunks.image_chunks`: whole images, by detection count), one after the
    other, written into one result (GT rows as int32): the same values, with the matcher's working
    memory that of one shard. ``shard_size`` 0 or more than the detections: one call."""
    n = len(dets)
    if shard_size <= 0 or n <= shard_size:
        return run_match(m, dets, data, thresholds)
    fields: dict[str, np.ndarray] | None = None
    first: MatchResult | None = None
    if _own_gt_rules(m, data):  # the engine would cut a larger shard into its own chunks: cut those here
        shard_size = min(shard_size, CHUNK_DETECTIONS)
    for chunk in image_chunks(dets.image_id, data.dataset.gt.image_id, shard_size):
        r = _match_own_gt(m, dets.select(chunk.det), data, thresholds, chunk.gt)
        if fields is None:
            first, fields = r, _empty_match(r, n, len(data.dataset.gt))
        for name in _MATCH_FIELDS:
            fields[name][..., chunk.det] = getattr(r, name)
        del r
    assert first is not None and fields is not None
    release_memory()
    return dataclasses.replace(first, **fields)  # type: ignore[arg-type]


def _own_gt_rules(m: MatchingSpec, data: LoadedData) -> bool:
    """Whether the matching is the engine's (``exclusive``/``max``, no KITTI data, no protocol): per image."""
    return m.mode in ("exclusive", "max") and data.kitti is None and data.protocol is None


def _match_own_gt(
    m: MatchingSpec,
    dets: Detections,
    data: LoadedData,
    thresholds: Sequence[float] | None,
    gt_rows: slice | np.ndarray | None = None,
) -> MatchResult:
    """:func:`run_match` of an image shard; under the engine's rules (``exclusive``/``max``, no KITTI data)
    against the ground truth of the shard's images only (``gt_rows``, or found here when None), its rows
    mapped back: every group of the engine is within an image, so the outcome is the same, and the
    ground-truth work of a shard is that of its images (not of the whole set, once per shard)."""
    if not _own_gt_rules(m, data):
        return run_match(m, dets, data, thresholds)
    gt = data.dataset.gt
    if gt_rows is None:
        gt_rows = np.flatnonzero(np.isin(gt.image_id, dets.image_id))
    g_rows = row_numbers(gt_rows, len(gt))
    own = dataclasses.replace(data, dataset=dataclasses.replace(data.dataset, gt=gt.select(gt_rows)))
    r = run_match(m, dets, own, thresholds)
    r.gt_index = rows_through(r.gt_index, g_rows)
    return r


def _scatter(
    n: int, rows: Sequence[np.ndarray], pieces: Sequence[Any], axis_last: bool, dtype: DTypeLike | None = None
) -> np.ndarray | None:
    """Pieces (one per rank, None for a rank without the column) put at their input ``rows``."""
    full = [p for r, p in zip(rows, pieces) if p is not None and len(r)]
    if not full:
        return None
    a = full[0]
    shape = a.shape[:-1] + (n,) if axis_last else (n,) + a.shape[1:]
    out = np.zeros(shape, dtype=dtype or a.dtype)
    for r, p in zip(rows, pieces):
        if p is not None and len(r):
            if axis_last:
                out[..., r] = p
            else:
                out[r] = p
    return out


def gather_shards(data: LoadedData, mr: MatchResult) -> MatchResult:
    """Sharded reading: every rank's (input rows, detections, match) gathered on every rank and put back
    in input order, one column at a time (so the transient copies are those of one column). ``data``
    gets the whole detections (``data.shard`` None); returns the whole match (GT rows as int32)."""
    rows = gather_all(data.shard)
    n = int(sum(len(r) for r in rows))
    dets = data.detections
    cols: dict[str, Any] = {}
    for f in dataclasses.fields(Detections):
        mine = getattr(dets, f.name)
        cols[f.name] = _scatter(n, rows, gather_all(mine if len(dets) else None), axis_last=False)
    fields: dict[str, Any] = {}
    for name in _MATCH_FIELDS:
        mine = getattr(mr, name)
        dtype = _compact_gt_index(len(data.dataset.gt)) if name == "gt_index" else None
        fields[name] = _scatter(n, rows, gather_all(mine if len(dets) else None), axis_last=True, dtype=dtype)
    if n == 0:  # no rank holds a detection: the (empty) local arrays
        cols = {f.name: getattr(dets, f.name) for f in dataclasses.fields(Detections)}
        fields = {name: getattr(mr, name) for name in _MATCH_FIELDS}
    data.detections = Detections(**cols)
    data.shard = None
    return dataclasses.replace(mr, **fields)


def _match_shard(
    rows: np.ndarray,
    m: MatchingSpec,
    dets: Detections,
    data: LoadedData,
    thresholds: Sequence[float] | None,
    shard_size: int = 0,
) -> tuple[np.ndarray, MatchResult]:
    return rows, match_in_shards(m, dets.select(_rows_index(rows)), data, thresholds, shard_size)


def parallel_match(
    m: MatchingSpec,
    dets: Detections,
    data: LoadedData,
    thresholds: Sequence[float] | None,
    workers: int,
    distributed: bool,
    shard_size: int = 0,
) -> MatchResult:
    """:func:`detcal.pipeline.matcher.run_match` over image shards in processes or ranks (each
    in pieces of ``shard_size`` detections, :func:`match_in_shards`); the same result."""
    if distributed:
        rank, world = distributed_rank(), distributed_world()
        shards = image_shards(dets.image_id, world)
        mine = _match_shard(shards[rank], m, dets, data, thresholds, shard_size) if rank < len(shards) else None
        return merge_matches(len(dets), gather_all(mine))
    shards = image_shards(dets.image_id, workers)
    args = (m, dets, data, thresholds, shard_size)
    return merge_matches(len(dets), map_in_processes(_match_shard, shards, args, workers))


def _dist() -> Any:
    import torch.distributed as dist  # lazy: torch is optional (the [train] extra)

    if not dist.is_initialized():
        backend = os.environ.get("DETCAL_DIST_BACKEND", "gloo")
        dist.init_process_group(backend=backend)
    return dist


def distributed_rank() -> int:
    """This process's rank (starting the process group from the torchrun environment if needed)."""
    return int(_dist().get_rank())


def distributed_world() -> int:
    return int(_dist().get_world_size())


def gather_all(obj: Any) -> list[Any]:
    """``obj`` of every rank, in rank order, on every rank."""
    dist = _dist()
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out
