"""The format registry: one adapter per dataset format, found by name.

An adapter (:class:`FormatAdapter`) reads a format's ground truth and detections
into the records of :mod:`detcal.core.types` (a :class:`LoadedData`), writes
detections (and optionally the ground truth) back in that format, and names the
format's default matching rules. :data:`FORMATS` maps each format name to the
module holding its ``ADAPTER``; a new format is one module in ``detcal/data/``
and one line here (plus ``configs/data/<name>.yaml`` and
``configs/matching/<name>.yaml`` for the Hydra commands, checked by the tests).
The ``data.*`` fields a format reads are its spec class
(:data:`detcal.data.specs.DATA_SPECS` for the formats detcal ships, the adapter's
``spec`` for one registered later): ``DataSpec(source=<name>, ...)`` builds it.
Adapters are imported when first asked for, so importing this module imports
no format's readers.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, KittiRules

__all__ = ["FORMATS", "FormatAdapter", "LoadedData", "MatchDefaults", "format_names", "get_format", "need_path"]

FORMATS: dict[str, str] = {
    "coco": "detcal.data.coco_source",
    "kitti": "detcal.data.kitti_source",
    "yolo": "detcal.data.yolo",
    "voc": "detcal.data.voc",
    "lvis": "detcal.data.lvis",
    "openimages": "detcal.data.openimages",
}
"""Format name -> module whose ``ADAPTER`` reads and writes it (docs/formats.md)."""


@dataclass
class LoadedData:
    """What a format adapter hands to the pipeline.

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
    protocol: Any = None
    """The rules of a protocol beyond the boxes (LVIS: :class:`detcal.data.lvis.LvisRules`); None otherwise."""

    @property
    def format(self) -> str:
        """The registry name of the format the detections were read in (``coco``, ``kitti``, ``yolo``, ``voc``)."""
        p = self.provenance
        if p.get("source") in ("synthetic", "bundled"):  # generated or packaged: the format they carry
            return str(p.get("format") or "coco")
        return str(p.get("source", "coco"))


@dataclass(frozen=True)
class MatchDefaults:
    """A format's default matching rules (``detcal-match`` and ``configs/matching/<format>.yaml``):
    ``mode`` (docs/matching.md), ``iou`` the thresholds (or ``"kitti"``), ``max_dets`` (None: no cap)."""

    mode: str
    iou: tuple[float, ...] | str
    max_dets: int | None


class FormatAdapter(Protocol):
    """One dataset format: read into the core records, write back, its default matching.

    ``fields``: the ``data.*`` keys it reads (``gt_field`` and ``results_field`` are what
    ``detcal-match --gt/--results`` fill); ``writes``: the roles :meth:`write` returns paths for.
    """

    name: str
    gt_field: str
    results_field: str
    fields: tuple[str, ...]
    matching: MatchDefaults

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """The ground truth and detections the ``data.*`` values ``fields`` point at."""
        ...

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """Write ``dets`` (and the ground truth when ``write_gt``) under ``out_dir``; the paths by role."""
        ...


def format_names() -> tuple[str, ...]:
    """The registered format names, in registry order."""
    return tuple(FORMATS)


def get_format(name: str) -> FormatAdapter:
    """The adapter registered as ``name`` (imported on first use)."""
    if name not in FORMATS:
        raise DetcalInputError(f"unknown data format {name!r}; choose one of {', '.join(FORMATS)}", field="format")
    adapter: FormatAdapter = importlib.import_module(FORMATS[name]).ADAPTER
    return adapter


def need_path(value: Any, key: str) -> Path:
    """``value`` as an existing path, or a one-line error naming the ``data.*`` key."""
    if value in (None, "", "???"):
        raise DetcalInputError(f"is required (give {key}=<path>)", field=key)
    p = Path(str(value)).expanduser()
    if not p.exists():
        raise DetcalInputError("does not exist", file=p, field=key)
    return p
