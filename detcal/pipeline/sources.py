"""Data sources: a data spec (:mod:`detcal.data.specs`, one class per source) in, a :class:`LoadedData` out.

Every file format is read by its adapter in the format registry
(:mod:`detcal.data.formats`: COCO, KITTI, YOLO, Pascal VOC, ...) from the fields of
its spec; the synthetic set and the bundled detections are the two sources that are
not files. One path for all: :func:`load_data`. Loaders are imported lazily; nothing
here imports Hydra or torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.config import ConfigError
from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset
from detcal.data.coco_source import (
    AUTO_CHUNK_ABOVE,
    AUTO_CHUNK_BYTES,
    load_coco,
    release_memory,
    results_chunk_bytes,
    shard_image_ids,
    unknown_category_warning,
)
from detcal.data.formats import LoadedData, get_format, need_path
from detcal.data.specs import BundledDataSpec, DataSpec, SyntheticDataSpec, data_fields

__all__ = [
    "LoadedData",
    "load_data",
    "load_coco",
    "need_path",
    "read_image_ids",
    "subset_images",
    "results_chunk_bytes",
    "release_memory",
    "shard_image_ids",
    "unknown_category_warning",
    "AUTO_CHUNK_ABOVE",
    "AUTO_CHUNK_BYTES",
]


def read_image_ids(spec: Any, key: str = "data.image_ids") -> list[Any]:
    """Image ids from a list, or from a text file with one id (or KITTI frame name) per line."""
    if isinstance(spec, (list, tuple)):
        return list(spec)
    p = need_path(spec, key)
    out = []
    for line in p.read_text(encoding="utf-8-sig").splitlines():
        s = line.strip()
        if s and not s.startswith("#"):
            out.append(s)
    return out


def _match_ids(ids: Sequence[Any], ds: Dataset, key: str) -> np.ndarray:
    """Dataset image ids for ``ids`` given as ints or as file stems / names (KITTI frames)."""
    by_name: dict[str, int] = {}
    for i, name in zip(ds.images.id.tolist(), ds.images.file_name):
        if name:
            by_name[Path(str(name)).stem] = int(i)
            by_name[str(name)] = int(i)
    known = set(ds.images.id.tolist())
    out = []
    for rec, v in enumerate(ids):
        s = str(v).strip()
        if s in by_name:
            out.append(by_name[s])
            continue
        try:
            iv = int(s)
        except ValueError:
            raise DetcalInputError(f"image {s!r} is not in the dataset", record=rec, field=key) from None
        if iv not in known:
            raise DetcalInputError(f"image id {iv} is not in the dataset", record=rec, field=key)
        out.append(iv)
    return np.asarray(out, dtype=np.int64)


def subset_images(data: LoadedData, image_ids: np.ndarray, label: str) -> LoadedData:
    """The images ``image_ids`` of ``data`` with their GT and detections (record order kept)."""
    ds = data.dataset
    ids = np.asarray(image_ids, dtype=np.int64)
    images = ds.images.select(np.isin(ds.images.id, ids))
    gt = ds.gt.select(np.isin(ds.gt.image_id, ids))
    keep = np.isin(data.detections.image_id, ids)
    dets = data.detections.select(keep)
    shard = None if data.shard is None else data.shard[keep]
    sub = Dataset(images=images, gt=gt, categories=dict(ds.categories), source=f"{ds.source} [{label}]")
    prov = {**data.provenance, "subset": label}
    return LoadedData(sub, dets, data.kitti, prov, dict(data.dropped), shard, data.protocol)


def _load_synthetic(spec: SyntheticDataSpec, workdir: Path) -> LoadedData:
    # lazy: the synthetic generator (~9 ms of imports) is read only by data=synthetic
    from detcal.data.synthetic import write_synthetic

    out = Path(spec.out_dir).expanduser() if spec.out_dir else Path(workdir) / "synthetic"
    kwargs = dict(spec.detector_kwargs or {})
    paths = {
        k: Path(v)
        for k, v in dict(
            write_synthetic(
                out,
                n_images=int(spec.n_images),
                seed=int(spec.seed),
                detector_kwargs=kwargs or None,
                render=bool(spec.render),
            )
        ).items()
    }
    prov: dict[str, Any] = {
        "source": "synthetic",
        "format": spec.format,
        "n_images": int(spec.n_images),
        "seed": int(spec.seed),
        "detector_kwargs": kwargs,
        "render": bool(spec.render),
        "paths": {k: str(v) for k, v in paths.items()},
    }
    fields = {**data_fields(spec), **{k: paths[v] for k, v in _SYNTHETIC_FILES[spec.format].items()}}
    data = get_format(spec.format).load(fields)
    data.provenance = {**prov, "adapter": data.provenance}
    return data


_SYNTHETIC_FILES: dict[str, dict[str, str]] = {
    "coco": {"gt": "coco_instances", "results": "coco_results"},
    "kitti": {"label_dir": "kitti_labels", "results_dir": "kitti_results", "sizes": "kitti_sizes"},
}
"""The ``data.*`` fields of each format :func:`detcal.data.synthetic.write_synthetic` writes -> its path keys."""


def _load_bundled(spec: BundledDataSpec) -> LoadedData:
    from detcal.data import bundled  # lazy: the bundled sets only (kept out of a run on the user's files)

    if spec.detector not in bundled.DETECTORS:
        raise ConfigError("data.detector", f"{spec.detector!r} is not one of {', '.join(bundled.DETECTORS)}")
    ds, dets = bundled.load(spec.bundle, spec.detector)
    prov = {
        "source": "bundled",
        "format": "coco",
        "bundle": spec.bundle,
        "detector": spec.detector,
        "provenance": "docs/real_detectors.md",
    }
    return LoadedData(ds, dets, None, prov)


def load_data(spec: DataSpec, workdir: str | os.PathLike = ".", shard: tuple[int, int] | None = None) -> LoadedData:
    """Load the data ``spec`` describes: a registered format by its adapter
    (:mod:`detcal.data.formats`), the bundled detections or a synthetic set (``workdir``: where a
    synthetic set is generated by default; ``shard`` (rank, world): only that rank's image shard
    of COCO results, see :func:`load_coco`)."""
    if isinstance(spec, BundledDataSpec):
        data = _load_bundled(spec)
    elif isinstance(spec, SyntheticDataSpec):
        data = _load_synthetic(spec, Path(workdir))
    else:
        data = get_format(spec.source).load(data_fields(spec), shard)
    if spec.image_ids is not None:
        ids = _match_ids(read_image_ids(spec.image_ids), data.dataset, "data.image_ids")
        data = subset_images(data, ids, "image_ids")
        data.provenance["image_ids"] = {
            "source": spec.image_ids if isinstance(spec.image_ids, str) else "list",
            "n": int(len(ids)),
        }
    return data
