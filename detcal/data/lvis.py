"""The LVIS v1 format: COCO-style JSON with the federated annotation fields.

Ground truth (``data.gt``): a COCO instances file whose images carry
``neg_category_ids`` (categories verified absent from the image) and
``not_exhaustive_category_ids`` (categories present but not every instance
boxed), and whose categories carry ``frequency`` (``r`` rare, ``c`` common,
``f`` frequent: in fewer than 10, 10 to 99, 100 or more training images).
Detections (``data.results``): a COCO results file. The boxes are read by the
COCO reader; the federated fields into :class:`LvisRules`.

Matching by default: the LVIS rules (``lvis``, :mod:`detcal.matching.lvis`):
300 detections per image, detections of a category neither verified present
(a box in the image) nor verified absent ignored, unmatched detections of a
not-exhaustively-annotated category ignored; AP as ``lvis.LVISEval``
(:mod:`detcal.metrics.lvis_ap`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections
from detcal.data.coco_source import ADAPTER as COCO, load_coco
from detcal.data.formats import LoadedData, MatchDefaults, need_path

__all__ = ["ADAPTER", "FREQUENCIES", "LvisRules", "load_lvis", "read_lvis_rules"]

FREQUENCIES: tuple[str, ...] = ("r", "c", "f")
"""The LVIS frequency groups, in LVISEval's order (APr, APc, APf)."""


@dataclass
class LvisRules:
    """The federated annotation of an LVIS set: ``neg [P, 2]`` and ``not_exhaustive [Q, 2]`` (image id,
    category id) pairs, and ``frequency`` {category id: ``r`` | ``c`` | ``f``}."""

    neg: np.ndarray
    not_exhaustive: np.ndarray
    frequency: dict[int, str]

    def _key(self, image_id: np.ndarray, category: np.ndarray) -> np.ndarray:
        return np.asarray(image_id, np.int64) * (1 << 24) + np.asarray(category, np.int64)

    def is_negative(self, image_id: np.ndarray, category: np.ndarray) -> np.ndarray:
        """[D] whether each (image, category) pair is verified absent."""
        return np.isin(self._key(image_id, category), self._key(self.neg[:, 0], self.neg[:, 1]))

    def is_not_exhaustive(self, image_id: np.ndarray, category: np.ndarray) -> np.ndarray:
        """[D] whether each (image, category) pair is not exhaustively annotated."""
        ne = self.not_exhaustive
        return np.isin(self._key(image_id, category), self._key(ne[:, 0], ne[:, 1]))


def _pairs(images: list, key: str, file: Path, cats: set[int]) -> np.ndarray:
    rows: list[tuple[int, int]] = []
    for i, im in enumerate(images):  # per image: its list of category ids
        ids = im.get(key) if isinstance(im, dict) else None
        if not isinstance(ids, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in ids):
            raise DetcalInputError(
                f"expected a list of category ids, got {ids!r}", file=file, record=f"images[{i}]", field=key
            )
        unknown = [c for c in ids if c not in cats]
        if unknown:
            raise DetcalInputError(f"unknown category id {unknown[0]}", file=file, record=f"images[{i}]", field=key)
        rows.extend((int(im["id"]), c) for c in ids)
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def read_lvis_rules(path: Path) -> LvisRules:
    """The federated fields of an LVIS ground-truth file (a one-line error naming a bad record)."""
    try:
        doc = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as e:
        raise DetcalInputError(f"cannot read the LVIS fields: {e}", file=path) from None
    cats = doc.get("categories") if isinstance(doc, dict) else None
    images = doc.get("images") if isinstance(doc, dict) else None
    if not isinstance(cats, list) or not isinstance(images, list):
        raise DetcalInputError("expected 'images' and 'categories' lists", file=path)
    frequency: dict[int, str] = {}
    for i, c in enumerate(cats):  # per category: its frequency group
        f = c.get("frequency") if isinstance(c, dict) else None
        if f not in FREQUENCIES:
            raise DetcalInputError(
                f"'frequency' must be r, c or f, got {f!r}", file=path, record=f"categories[{i}]", field="frequency"
            )
        frequency[int(c["id"])] = str(f)
    ids = set(frequency)
    return LvisRules(
        _pairs(images, "neg_category_ids", path, ids),
        _pairs(images, "not_exhaustive_category_ids", path, ids),
        frequency,
    )


def load_lvis(gt: Any, results: Any, unknown_category: str = "drop", chunk_bytes: int | None = None) -> LoadedData:
    """LVIS ground truth and COCO-format results: the COCO reader's records plus the :class:`LvisRules`
    (in ``LoadedData.protocol``)."""
    g = need_path(gt, "data.gt")
    data = load_coco(g, results, unknown_category, chunk_bytes)
    data.protocol = read_lvis_rules(g)
    data.provenance["source"] = "lvis"
    return data


class LvisAdapter:
    """LVIS v1 ``data.gt`` (instances with the federated fields) + ``data.results`` (COCO results)."""

    name = "lvis"
    gt_field = "gt"
    results_field = "results"
    fields = ("gt", "results", "unknown_category", "chunk_bytes")
    matching = MatchDefaults(mode="lvis", iou=(0.5,), max_dets=300)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_lvis` (``shard`` is not used: the federated rules need the whole set)."""
        return load_lvis(
            fields["gt"], fields["results"], str(fields.get("unknown_category") or "drop"), fields.get("chunk_bytes")
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """``detections.json`` (COCO results; + ``instances.json`` without the federated fields when ``write_gt``)."""
        return COCO.write(out_dir, dets, dataset, write_gt)


ADAPTER = LvisAdapter()
