"""Data sources: a :class:`~detcal.pipeline.spec.DataSpec` in, a :class:`LoadedData` out.

COCO (instances + results JSON), KITTI (label_2 + results directories, devkit
rules) and the synthetic set share one path: :func:`load_data`. Loaders are
imported lazily; nothing here imports Hydra or torch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, KittiRules
from detcal.pipeline.spec import DataSpec

__all__ = [
    "LoadedData",
    "load_data",
    "load_coco",
    "read_image_ids",
    "subset_images",
    "results_chunk_bytes",
    "AUTO_CHUNK_ABOVE",
    "AUTO_CHUNK_BYTES",
]

AUTO_CHUNK_ABOVE: int = 64 << 20
"""``data.chunk_bytes=null`` reads results files larger than this (64 MiB) in blocks of :data:`AUTO_CHUNK_BYTES`."""
AUTO_CHUNK_BYTES: int = 4 << 20
"""Block size of automatic chunked reading (4 MiB: faster than 32 MiB blocks or a whole-file parse of
a 1M-detection file, 2.7 s against 3.8 s and 3.7 s, and a few MB of parsed records at a time)."""


@dataclass
class LoadedData:
    """What a data source hands to the pipeline.

    ``dataset`` (images, GT, categories), ``detections`` [D], ``kitti`` the
    devkit rules for KITTI data (None otherwise), ``provenance`` (paths and
    parameters, written to metrics.json) and ``dropped`` (detections left out
    while loading, by cause). ``shard``: under ``parallel.distributed`` with
    sharded reading, the input rows [D] (positions among the kept detections of
    the whole file) of this rank's detections; None when the detections are all.
    """

    dataset: Dataset
    detections: Detections
    kitti: KittiRules | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)
    shard: np.ndarray | None = None

    @property
    def format(self) -> str:
        """``coco`` or ``kitti``: the format the detections were read in."""
        p = self.provenance
        if p.get("source") in ("synthetic", "bundled"):  # generated or packaged: the format they carry
            return str(p.get("format") or "coco")
        return str(p.get("source", "coco"))


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
    return LoadedData(sub, dets, data.kitti, {**data.provenance, "subset": label}, dict(data.dropped), shard)


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


def _concat(chunks: list[Detections]) -> Detections:
    """The chunks as one Detections, field by field (each chunk's field is released once copied, so the
    peak is the result plus one field, not twice the result)."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(Detections)]
    cols = {n: [getattr(c, n) for c in chunks] for n in names}
    chunks.clear()
    out: dict[str, Any] = {}
    for n in names:
        parts = cols.pop(n)
        out[n] = None if parts[0] is None else np.concatenate(parts)
        del parts
    return Detections(**out)


def _read_chunked(
    r: Path, ds: Dataset, unknown_category: str, chunk_bytes: int, keep: np.ndarray | None
) -> tuple[Detections, dict[str, int], np.ndarray | None]:
    """The results file read in blocks, with :func:`_check_results`' checks and errors (same record
    indices and the same precedence: an unknown image id anywhere before an unknown category).
    ``keep``: sorted image ids to keep (a rank's shard); returns the kept detections, the dropped
    counts (of the whole file) and, with ``keep``, the kept detections' rows among all checked ones."""
    from detcal.data.coco_chunks import iter_coco_results

    chunks: list[Detections] = []
    rows: list[np.ndarray] = []
    seen = kept = n_unknown = 0
    first_bad: tuple[Detections, int, int] | None = None
    for chunk in iter_coco_results(r, None, chunk_bytes):
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
            chunks.append(chunk)
    if first_bad is not None and unknown_category == "error":
        raise _unknown_category_error(first_bad[0], ds, r, first_bad[1], first_bad[2])
    dets = (
        _concat(chunks)
        if chunks
        else Detections(np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64))
    )
    dropped = {"unknown_category": n_unknown} if n_unknown else {}
    release_memory()
    return dets, dropped, (np.concatenate(rows) if rows else np.array([], dtype=np.int64)) if keep is not None else None


def release_memory() -> None:
    """Hand the heap's free pages back to the system (glibc ``malloc_trim``; nothing elsewhere). The
    parsed records of the blocks leave freed memory that glibc keeps otherwise (about 40% of the
    detections' size)."""
    import ctypes
    import sys

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
    columns (0: whole; None: blocks of 4 MiB for files over 64 MiB). ``shard`` (rank, world): keep
    only the detections of that rank's image shard (:func:`shard_image_ids`; read in blocks), with
    ``LoadedData.shard`` their input rows. The detections (and errors) are those of the whole-file
    load."""
    from detcal.data.coco import load_coco_instances, load_coco_results

    g, r = _need(gt, "data.gt"), _need(results, "data.results")
    ds = load_coco_instances(g)
    block = results_chunk_bytes(r, chunk_bytes)
    rows = None
    if shard is not None:
        keep = shard_image_ids(ds, *shard)
        dets, dropped, rows = _read_chunked(r, ds, unknown_category, block or AUTO_CHUNK_BYTES, keep)
    elif block > 0:
        dets, dropped, _ = _read_chunked(r, ds, unknown_category, block, None)
    else:
        dets = load_coco_results(r, dataset=None)
        dets, dropped = _check_results(dets, ds, r, unknown_category)
    prov = {"source": "coco", "gt": str(g.resolve()), "results": str(r.resolve())}
    if dropped.get("unknown_category"):
        from detcal.utils.warn import note

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
            raise DetcalInputError(
                f"KITTI needs image sizes: no image_2/ folder beside {labels}; give "
                f"data.image_dir=<image_2 folder> or data.sizes=<file of '<frame> <width> <height>'>",
                field="data.image_dir",
            )
    ds = load_kitti_labels(labels, image_dir=images, sizes=sizes_p, difficulty=spec.difficulty)
    dets = load_kitti_results(results, dataset=ds)
    prov = {
        "source": "kitti",
        "label_dir": str(labels.resolve()),
        "results_dir": str(results.resolve()),
        "image_dir": None if images is None else str(images.resolve()),
        "sizes": None if sizes_p is None else str(sizes_p.resolve()),
        "difficulty": spec.difficulty,
    }
    return LoadedData(ds, dets, kitti_rules(spec.difficulty), prov)


def _load_synthetic(spec: DataSpec, workdir: Path) -> LoadedData:
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
    prov = {
        "source": "bundled",
        "format": "coco",
        "bundle": spec.bundle,
        "detector": spec.detector,
        "provenance": "docs/real_detectors.md",
    }
    return LoadedData(ds, dets, None, prov)


def load_data(spec: DataSpec, workdir: str | os.PathLike = ".", shard: tuple[int, int] | None = None) -> LoadedData:
    """Load the data ``spec`` describes (``workdir``: where a synthetic set is generated by default;
    ``shard`` (rank, world): only that rank's image shard of COCO results, see :func:`load_coco`)."""
    if spec.source == "coco":
        assert spec.gt is not None and spec.results is not None
        data = load_coco(spec.gt, spec.results, spec.unknown_category, spec.chunk_bytes, shard)
    elif spec.source == "bundled":
        data = _load_bundled(spec)
    elif spec.source == "kitti":
        data = _load_kitti(spec, spec.label_dir, spec.results_dir, spec.sizes)
    else:
        data = _load_synthetic(spec, Path(workdir))
    if spec.image_ids is not None:
        ids = _match_ids(read_image_ids(spec.image_ids), data.dataset, "data.image_ids")
        data = subset_images(data, ids, "image_ids")
        data.provenance["image_ids"] = {
            "source": spec.image_ids if isinstance(spec.image_ids, str) else "list",
            "n": int(len(ids)),
        }
    return data
