"""Versioned COCO <-> KITTI class maps.

The map lives in a YAML file (default ``configs/classmap/coco_kitti_v1.yaml``)
with ``version``, ``coco_ids`` (standard COCO ids of the names used),
``coco_to_kitti`` and ``kitti_to_coco`` (``null`` = unmapped), and a comment
per choice. Both directions are explicit because the map is not a
bijection; where both directions map a pair they must agree.

Remapping drops boxes of unmapped classes and renumbers the rest: to the fixed
KITTI ids (:data:`detcal.core.types.KITTI_CATEGORIES`) or to the standard COCO ids
of ``coco_ids``. PyYAML is used directly (never Hydra).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml

from detcal.core.errors import DetcalInputError
from detcal.core.types import KITTI_CATEGORIES, KITTI_TYPES, Dataset, Detections

PathLike = str | os.PathLike[str]
Direction = Literal["coco_to_kitti", "kitti_to_coco"]

__all__ = ["ClassMap", "load_class_map", "DEFAULT_CLASS_MAP"]

DEFAULT_CLASS_MAP: Path = Path(__file__).resolve().parents[2] / "configs" / "classmap" / "coco_kitti_v1.yaml"
"""The class map shipped with detcal (repository ``configs/classmap``)."""

SUPPORTED_VERSIONS: tuple[int, ...] = (1,)
_DIRECTIONS: tuple[str, ...] = ("coco_to_kitti", "kitti_to_coco")


@dataclass(frozen=True)
class ClassMap:
    """A COCO <-> KITTI class map (see the module docstring)."""

    version: int
    name: str
    coco_ids: dict[str, int]
    coco_to_kitti_map: dict[str, str | None]
    kitti_to_coco_map: dict[str, str | None]
    source: str = ""

    def coco_to_kitti(self, name: str) -> str | None:
        """KITTI type of COCO category ``name``; None when unmapped (or not in the map)."""
        return self.coco_to_kitti_map.get(name)

    def kitti_to_coco(self, name: str) -> str | None:
        """COCO category of KITTI type ``name`` (case-insensitive); None when unmapped."""
        canonical = {t.lower(): t for t in KITTI_TYPES}.get(str(name).lower())
        if canonical is None:
            raise DetcalInputError(
                f"unknown KITTI type {name!r}; expected one of {', '.join(KITTI_TYPES)}",
                file=self.source or None,
                field="kitti_to_coco",
            )
        return self.kitti_to_coco_map.get(canonical)

    def target_categories(self, direction: Direction) -> dict[int, str]:
        """Category id -> name after remapping in ``direction``.

        ``coco_to_kitti``: all of :data:`KITTI_CATEGORIES` (fixed ids);
        ``kitti_to_coco``: the COCO names that some KITTI type maps to, with
        their standard COCO ids.
        """
        _check_direction(direction)
        if direction == "coco_to_kitti":
            return dict(KITTI_CATEGORIES)
        names = {c for c in self.kitti_to_coco_map.values() if c is not None}
        return {self.coco_ids[c]: c for c in sorted(names, key=lambda c: self.coco_ids[c])}

    def _name_map(self, direction: Direction) -> Any:
        return self.coco_to_kitti if direction == "coco_to_kitti" else self.kitti_to_coco

    def category_lut(self, src_categories: Mapping[int, str], direction: Direction) -> dict[int, int | None]:
        """Source category id -> target id (None when unmapped)."""
        _check_direction(direction)
        name_of = self._name_map(direction)
        target = {v: k for k, v in self.target_categories(direction).items()}
        out: dict[int, int | None] = {}
        for cid, cname in src_categories.items():
            mapped = name_of(cname)
            out[int(cid)] = None if mapped is None else target[mapped]
        return out

    def _remap_ids(
        self, category: np.ndarray, src_categories: Mapping[int, str], direction: Direction, what: str
    ) -> np.ndarray:
        """Target id per row of ``category`` [R] (-1 unmapped); error for ids missing from ``src_categories``."""
        lut = self.category_lut(src_categories, direction)
        src = np.array(sorted(lut), dtype=np.int64)
        dst = np.array([-1 if lut[k] is None else lut[k] for k in src.tolist()], dtype=np.int64)
        if len(category) == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.minimum(np.searchsorted(src, category), max(len(src) - 1, 0))
        known = (src[pos] == category) if len(src) else np.zeros(len(category), bool)
        if not known.all():
            bad = int(np.flatnonzero(~known)[0])
            raise DetcalInputError(
                f"category id {int(category[bad])} is not in the source categories",
                record=bad,
                field=f"{what}.category",
            )
        return dst[pos]

    def remap_dataset(self, dataset: Dataset, direction: Direction) -> Dataset:
        """``dataset`` with GT of unmapped classes dropped and categories renumbered.

        Images are kept (also those left without boxes); ``categories`` becomes
        :meth:`target_categories`.
        """
        new = self._remap_ids(dataset.gt.category, dataset.categories, direction, "gt")
        keep = new >= 0
        gt = dataset.gt.select(keep)
        gt = dataclasses.replace(gt, category=new[keep])
        return Dataset(
            images=dataset.images, gt=gt, categories=self.target_categories(direction), source=dataset.source
        )

    def remap_detections(self, dets: Detections, src_categories: Mapping[int, str], direction: Direction) -> Detections:
        """``dets`` (categories named by ``src_categories``) with unmapped classes dropped and ids renumbered.

        Row order is kept among the remaining detections.
        """
        new = self._remap_ids(dets.category, src_categories, direction, "detections")
        keep = new >= 0
        out = dets.select(keep)
        return dataclasses.replace(out, category=new[keep])


def _check_direction(direction: str) -> None:
    if direction not in _DIRECTIONS:
        raise DetcalInputError(
            f"unknown direction {direction!r}; expected one of {', '.join(_DIRECTIONS)}", field="direction"
        )


def _section(doc: dict, key: str, file: str) -> dict:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise DetcalInputError(f"expected a mapping under {key!r}", file=file, record="(top level)", field=key)
    return value


def load_class_map(path: PathLike | None = None) -> ClassMap:
    """Load and validate a class-map YAML file (default :data:`DEFAULT_CLASS_MAP`).

    Checks: ``version`` is supported; ``coco_to_kitti`` values are KITTI types
    or null; ``kitti_to_coco`` has every KITTI type as a key, with values that
    are COCO names listed in ``coco_ids`` or null; every COCO name mapped to a
    KITTI type has an id; and the two directions agree: ``kitti_to_coco[k] =
    c`` requires ``coco_to_kitti[c] = k``.
    """
    p = Path(DEFAULT_CLASS_MAP if path is None else path)
    file = str(p)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise DetcalInputError(f"cannot read class map: {e.strerror or e}", file=file) from e
    except yaml.YAMLError as e:
        raise DetcalInputError(f"not valid YAML: {e}", file=file) from e
    if not isinstance(doc, dict):
        raise DetcalInputError("expected a YAML mapping", file=file, record="(top level)")
    version = doc.get("version")
    if version not in SUPPORTED_VERSIONS:
        raise DetcalInputError(
            f"unsupported class-map version {version!r}; supported: {SUPPORTED_VERSIONS}",
            file=file,
            record="(top level)",
            field="version",
        )
    coco_ids_raw = _section(doc, "coco_ids", file)
    c2k = _section(doc, "coco_to_kitti", file)
    k2c = _section(doc, "kitti_to_coco", file)
    coco_ids: dict[str, int] = {}
    for name, cid in coco_ids_raw.items():
        if not isinstance(cid, int) or isinstance(cid, bool):
            raise DetcalInputError(
                f"expected an integer COCO id, got {cid!r}", file=file, record="coco_ids", field=str(name)
            )
        coco_ids[str(name)] = cid
    for name, kitti in c2k.items():
        if kitti is not None and kitti not in KITTI_TYPES:
            raise DetcalInputError(
                f"{kitti!r} is not a KITTI type ({', '.join(KITTI_TYPES)})",
                file=file,
                record="coco_to_kitti",
                field=str(name),
            )
        if kitti is not None and name not in coco_ids:
            raise DetcalInputError(
                "mapped COCO name has no entry in coco_ids", file=file, record="coco_to_kitti", field=str(name)
            )
    for kitti in KITTI_TYPES:
        if kitti not in k2c:
            raise DetcalInputError(
                "every KITTI type needs an entry (null for unmapped)", file=file, record="kitti_to_coco", field=kitti
            )
    for kitti, coco in k2c.items():
        if kitti not in KITTI_TYPES:
            raise DetcalInputError(
                f"{kitti!r} is not a KITTI type", file=file, record="kitti_to_coco", field=str(kitti)
            )
        if coco is None:
            continue
        if coco not in coco_ids:
            raise DetcalInputError(
                f"COCO name {coco!r} has no entry in coco_ids", file=file, record="kitti_to_coco", field=kitti
            )
        if c2k.get(coco) != kitti:
            raise DetcalInputError(
                f"directions disagree: kitti_to_coco maps {kitti} -> {coco} but coco_to_kitti maps {coco} -> {c2k.get(coco)!r}",
                file=file,
                record="kitti_to_coco",
                field=kitti,
            )
    return ClassMap(
        version=int(version),
        name=str(doc.get("name", p.stem)),
        coco_ids=coco_ids,
        coco_to_kitti_map={str(k): v for k, v in c2k.items()},
        kitti_to_coco_map={str(k): v for k, v in k2c.items()},
        source=file,
    )
