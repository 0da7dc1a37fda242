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
  Every rank reads the whole input: the split spreads time, not memory.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Sequence

import numpy as np

from detcal.types import MatchResult

__all__ = ["image_shards", "merge_matches", "map_in_processes", "parallel_match", "distributed_rank",
           "distributed_world", "gather_all"]

_STATE: dict[str, Any] = {}


def _call(item: Any) -> Any:
    return _STATE["fn"](item, *_STATE["args"])


def map_in_processes(fn: Callable[..., Any], items: Sequence[Any], args: tuple, workers: int) -> list[Any]:
    """``[fn(item, *args) for item in items]`` in ``workers`` forked processes, in order.

    ``args`` reach the workers through fork (no pickling of the large arrays); the results come back pickled."""
    import multiprocessing as mp

    if workers <= 1 or len(items) <= 1:
        return [fn(i, *args) for i in items]
    _STATE.update(fn=fn, args=args)
    try:
        with mp.get_context("fork").Pool(min(workers, len(items))) as pool:
            return pool.map(_call, list(items), chunksize=1)
    finally:
        _STATE.clear()


def image_shards(image_id: np.ndarray, n: int) -> list[np.ndarray]:
    """Detection rows of ``n`` shards of whole images (contiguous ranges of the sorted image ids)."""
    ids = np.unique(image_id)
    parts = np.array_split(ids, max(1, min(n, len(ids)))) if len(ids) else [ids]
    order = np.searchsorted(ids, image_id)
    bounds = np.cumsum([0] + [len(p) for p in parts])
    return [np.flatnonzero((order >= bounds[k]) & (order < bounds[k + 1])) for k in range(len(parts))]


def merge_matches(n: int, parts: Sequence[tuple[np.ndarray, MatchResult]]) -> MatchResult:
    """One :class:`MatchResult` over ``n`` detections from shard results (rows, result)."""
    parts = [p for p in parts if p is not None]
    first = parts[0][1]
    fields: dict[str, np.ndarray] = {}
    for name in ("matched", "ignored", "gt_index", "iou", "considered"):
        a = getattr(first, name)
        out = np.zeros(a.shape[:-1] + (n,), dtype=a.dtype)
        for rows, r in parts:
            out[..., rows] = getattr(r, name)
        fields[name] = out
    return dataclasses.replace(first, **fields)


def _match_shard(rows: np.ndarray, m: Any, dets: Any, data: Any, thresholds: Any) -> tuple[np.ndarray, MatchResult]:
    from detcal.pipeline.evaluation import run_match

    return rows, run_match(m, dets.select(rows), data, thresholds)


def parallel_match(m: Any, dets: Any, data: Any, thresholds: Any, workers: int, distributed: bool) -> MatchResult:
    """:func:`detcal.pipeline.evaluation.run_match` over image shards in processes or ranks; the same result."""
    if distributed:
        rank, world = distributed_rank(), distributed_world()
        shards = image_shards(dets.image_id, world)
        mine = _match_shard(shards[rank], m, dets, data, thresholds) if rank < len(shards) else None
        return merge_matches(len(dets), gather_all(mine))
    shards = image_shards(dets.image_id, workers)
    return merge_matches(len(dets), map_in_processes(_match_shard, shards, (m, dets, data, thresholds), workers))


def _dist() -> Any:
    import torch.distributed as dist

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
