"""Data sources: a :class:`~detcal.pipeline.spec.DataSpec` in, a :class:`LoadedData` out.

COCO (instances + results JSON), KITTI (label_2 + results directories, devkit
rules) and the synthetic set share one path: :func:`load_data`. Loaders are
imported lazily; nothing here imports Hydra or torch.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from detcal.errors import DetcalInputError
from detcal.pipeline.spec import DataSpec
from detcal.types import Dataset, Detections, KittiRules

__all__ = ["LoadedData", "load_data", "load_coco", "read_image_ids", "subset_images"]


@dataclass
class LoadedData:
    """What a data source hands to the pipeline.

    ``dataset`` (images, GT, categories), ``detections`` [D], ``kitti`` the
    devkit rules for KITTI data (None otherwise), ``provenance`` (paths and
    parameters, written to metrics.json) and ``dropped`` (detections left out
    while loading, by cause).
    """

    dataset: Dataset
    detections: Detections
    kitti: KittiRules | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def format(self) -> str:
        """``coco`` or ``kitti``: the format the detections were read in."""
        p = self.provenance
        return str(p.get("format") if p.get("source") == "synthetic" else p.get("source", "coco"))


def _need(value: Any, key: str) -> Path:
    if value in (None, "", "???"):
        raise DetcalInputError(f"is required (give {key}=<path>)", field=key)
    p = Path(str(value)).expanduser()
    if not p.exists():
        raise DetcalInputError("does not exist", file=p, field=key)
    return p


def read_image_ids(spec: Any, key: str = "data.image_ids") -> list[Any]:
    """Image ids from a list, or from a text file with one id (or KITTI frame name) per line."""
    if isinstance(spec, (list, tuple)):
        return list(spec)
    p = _need(spec, key)
    out = []
    for n, line in enumerate(p.read_text(encoding="utf-8-sig").splitlines(), 1):
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
    dets = data.detections.select(np.isin(data.detections.image_id, ids))
    sub = Dataset(images=images, gt=gt, categories=dict(ds.categories), source=f"{ds.source} [{label}]")
    return LoadedData(sub, dets, data.kitti, {**data.provenance, "subset": label}, dict(data.dropped))


def _check_results(dets: Detections, ds: Dataset, file: Path, unknown_category: str) -> tuple[Detections, dict[str, int]]:
    """Unknown image ids are an error (naming the record); unknown categories are dropped or an error."""
    row = ds.images.index_of(dets.image_id)
    if (row < 0).any():
        bad = int(np.flatnonzero(row < 0)[0])
        raise DetcalInputError(f"unknown image id {int(dets.image_id[bad])} (not in {ds.source or 'the ground truth'})",
                               file=file, record=bad, field="image_id")
    known = np.fromiter(ds.categories.keys(), dtype=np.int64, count=len(ds.categories))
    unknown = ~np.isin(dets.category, known)
    if unknown.any():
        if unknown_category == "error":
            bad = int(np.flatnonzero(unknown)[0])
            where = ds.source or "the ground truth"
            raise DetcalInputError(f"unknown category id {int(dets.category[bad])} (not in {where}); set "
                                   "data.unknown_category=drop to leave such detections out",
                                   file=file, record=bad, field="category_id")
        return dets.select(~unknown), {"unknown_category": int(unknown.sum())}
    return dets, {}


def load_coco(gt: str | os.PathLike, results: str | os.PathLike, unknown_category: str = "drop") -> LoadedData:
    """COCO instances JSON + COCO results JSON."""
    from detcal.data.coco import load_coco_instances, load_coco_results

    g, r = _need(gt, "data.gt"), _need(results, "data.results")
    ds = load_coco_instances(g)
    dets = load_coco_results(r, dataset=None)
    dets, dropped = _check_results(dets, ds, r, unknown_category)
    return LoadedData(ds, dets, None, {"source": "coco", "gt": str(g.resolve()), "results": str(r.resolve())}, dropped)


def _load_kitti(spec: DataSpec, label_dir: Any, results_dir: Any, sizes: Any = None) -> LoadedData:
    from detcal.data.kitti import kitti_rules, load_kitti_labels, load_kitti_results

    labels = _need(label_dir, "data.label_dir")
    results = _need(results_dir, "data.results_dir")
    images = None if spec.image_dir is None else _need(spec.image_dir, "data.image_dir")
    sizes_p = None if sizes is None else _need(sizes, "data.sizes")
    if images is None and sizes_p is None:
        beside = labels.parent / "image_2"
        if beside.is_dir():
            images = beside
        else:
            raise DetcalInputError(f"KITTI needs image sizes: no image_2/ folder beside {labels}; give "
                                   f"data.image_dir=<image_2 folder> or data.sizes=<file of '<frame> <width> <height>'>",
                                   field="data.image_dir")
    ds = load_kitti_labels(labels, image_dir=images, sizes=sizes_p, difficulty=spec.difficulty)
    dets = load_kitti_results(results, dataset=ds)
    prov = {"source": "kitti", "label_dir": str(labels.resolve()), "results_dir": str(results.resolve()),
            "image_dir": None if images is None else str(images.resolve()),
            "sizes": None if sizes_p is None else str(sizes_p.resolve()), "difficulty": spec.difficulty}
    return LoadedData(ds, dets, kitti_rules(spec.difficulty), prov)


def _load_synthetic(spec: DataSpec, workdir: Path) -> LoadedData:
    from detcal.data.synthetic import write_synthetic

    out = Path(spec.out_dir).expanduser() if spec.out_dir else Path(workdir) / "synthetic"
    kwargs = dict(spec.detector_kwargs or {})
    paths = {k: Path(v) for k, v in dict(write_synthetic(out, n_images=int(spec.n_images), seed=int(spec.seed),
                                                         detector_kwargs=kwargs or None,
                                                         render=bool(spec.render))).items()}
    prov: dict[str, Any] = {"source": "synthetic", "format": spec.format, "n_images": int(spec.n_images),
                            "seed": int(spec.seed), "detector_kwargs": kwargs, "render": bool(spec.render),
                            "paths": {k: str(v) for k, v in paths.items()}}
    if spec.format == "coco":
        data = load_coco(paths["coco_instances"], paths["coco_results"], spec.unknown_category)
    else:
        data = _load_kitti(spec, paths["kitti_labels"], paths["kitti_results"], sizes=paths["kitti_sizes"])
    data.provenance = {**prov, "adapter": data.provenance}
    return data


def _load_bundled(spec: DataSpec) -> LoadedData:
    from detcal.data import bundled

    if spec.detector not in bundled.DETECTORS:
        from detcal.pipeline.spec import ConfigError

        raise ConfigError("data.detector", f"{spec.detector!r} is not one of {', '.join(bundled.DETECTORS)}")
    ds, dets = bundled.load(spec.bundle, spec.detector)
    prov = {"source": "bundled", "format": "coco", "bundle": spec.bundle, "detector": spec.detector,
            "provenance": "docs/real_detectors.md"}
    return LoadedData(ds, dets, None, prov)


def load_data(spec: DataSpec, workdir: str | os.PathLike = ".") -> LoadedData:
    """Load the data ``spec`` describes (``workdir``: where a synthetic set is generated by default)."""
    if spec.source == "coco":
        data = load_coco(spec.gt, spec.results, spec.unknown_category)
    elif spec.source == "bundled":
        data = _load_bundled(spec)
    elif spec.source == "kitti":
        data = _load_kitti(spec, spec.label_dir, spec.results_dir, spec.sizes)
    else:
        data = _load_synthetic(spec, Path(workdir))
    if spec.image_ids is not None:
        ids = _match_ids(read_image_ids(spec.image_ids), data.dataset, "data.image_ids")
        data = subset_images(data, ids, "image_ids")
        data.provenance["image_ids"] = {"source": spec.image_ids if isinstance(spec.image_ids, str) else "list",
                                        "n": int(len(ids))}
    return data
