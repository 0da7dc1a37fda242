"""Process-group helpers of data parallelism (``torch.distributed``): rank/world, initialisation from
the torchrun environment, gathering per-rank detections and summing per-bin statistics.

Imported by :mod:`detcal.training.predict` and :mod:`detcal.training.distributed`; imports neither.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from detcal.core.errors import DetcalInputError
from detcal.core.types import Detections, Images
from detcal.training.records import concat_detections

__all__ = [
    "DistInfo",
    "get_rank_world",
    "is_main_process",
    "init_distributed",
    "cleanup",
    "gather_detections",
    "all_reduce_sums",
]


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job: ``rank``, ``world_size``, ``local_rank`` and its ``device``."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def get_rank_world() -> tuple[int, int]:
    """(rank, world size); (0, 1) when ``torch.distributed`` is not initialised."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    return get_rank_world()[0] == 0


def init_distributed(backend: str | None = None, device: str | None = None) -> DistInfo:
    """Initialise the default process group from the torchrun environment (``RANK``,
    ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT``). Without that
    environment, a single process (rank 0 of 1) is returned and nothing is
    initialised. ``backend`` defaults to ``nccl`` with CUDA, else ``gloo``.
    """
    use_cuda = torch.cuda.is_available() if device is None else str(device).startswith("cuda")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    dev = torch.device(f"cuda:{local_rank}") if use_cuda else torch.device("cpu")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return DistInfo(0, 1, 0, dev)
    if use_cuda:
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend or ("nccl" if use_cuda else "gloo"))
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, dev)


def cleanup() -> None:
    """Destroy the default process group if one exists."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def gather_detections(dets: Detections, images: Images | None = None) -> Detections:
    """All ranks' delta-record detections, on every rank, in image order.

    Rows are ordered by the image's row in ``images`` (stable: per-rank order
    kept within an image); without ``images``, by rank. A single process returns
    ``dets`` unchanged.
    """
    _, world = get_rank_world()
    if world == 1:
        return dets
    parts: list[Any] = [None] * world
    dist.all_gather_object(parts, dets)
    out = concat_detections(parts)
    if images is not None and len(out):
        rows = images.index_of(out.image_id)
        if np.any(rows < 0):
            bad = int(np.flatnonzero(rows < 0)[0])
            raise DetcalInputError(
                f"detection of image id {int(out.image_id[bad])} not in the images", record=bad, field="image_id"
            )
        out = out.select(np.argsort(rows, kind="stable"))
    return out


def all_reduce_sums(stats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Element-wise sum over ranks of per-bin sufficient statistics (float64; counts stay exact below 2**53)."""
    _, world = get_rank_world()
    if world == 1:
        return {k: np.asarray(v, dtype=np.float64).copy() for k, v in stats.items()}
    out = {}
    for k, v in stats.items():
        t = torch.as_tensor(np.asarray(v, dtype=np.float64)).clone()
        dist.all_reduce(t)
        out[k] = t.numpy()
    return out
