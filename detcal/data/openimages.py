"""The Open Images V7 detection format (COCO-style JSON with the Open Images fields).

Ground truth (``data.gt``): a COCO instances file whose annotations may carry
``is_group_of`` (a box around a group of five or more touching objects of the
class, the ``IsGroupOf`` column of the Open Images CSVs) and whose images
carry the verified image-level labels, ``pos_category_ids`` (verified
present) and ``neg_category_ids`` (verified absent). The class hierarchy comes
from ``data.hierarchy`` (the Open Images hierarchy JSON, ``{"LabelName": ...,
"Subcategory": [...]}``, label names matched to category names) or, without
it, from each category's ``supercategory`` where that names another category.
Detections (``data.results``): a COCO results file. Or the official CSVs
(a ``.csv`` ``data.gt``): :mod:`detcal.data.openimages_csv`.

Reading expands as the Open Images challenge's preprocessing does: every box
is copied to each ancestor class (unless an identical box of the ancestor is
already in the image), a positive image-level label to the ancestors and a
negative one to the descendants. Detections are not expanded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError
from detcal.core.types import Dataset, Detections, GroundTruth
from detcal.data.coco_source import ADAPTER as COCO, load_coco
from detcal.data.formats import LoadedData, MatchDefaults, need_path
from detcal.data.openimages_csv import read_openimages_csv

__all__ = ["ADAPTER", "OpenImagesRules", "expand_boxes", "load_openimages", "read_hierarchy", "with_rules"]


@dataclass
class OpenImagesRules:
    """The Open Images rules of a set: the evaluable (image id, category id) pairs [P, 2] (verified
    image-level labels, positive or negative, and the classes with a box, after expansion), ``group_of``
    [G] the group-of flag of each (expanded) ground-truth box, ``parent`` {category: parent}."""

    evaluable: np.ndarray
    group_of: np.ndarray
    parent: dict[int, int]

    def is_evaluable(self, image_id: np.ndarray, category: np.ndarray) -> np.ndarray:
        """[D] whether each (image, category) pair has a verified label or a box."""
        key = np.asarray(image_id, np.int64) * (1 << 24) + np.asarray(category, np.int64)
        return np.isin(key, self.evaluable[:, 0] * (1 << 24) + self.evaluable[:, 1])


def _tree_parents(node: Any, ids: dict[str, int], parent: int | None, out: dict[int, int], file: Path) -> None:
    if not isinstance(node, dict) or "LabelName" not in node:
        raise DetcalInputError("expected nodes {'LabelName': ..., 'Subcategory': [...]}", file=file, field="LabelName")
    me = ids.get(str(node["LabelName"]))
    if me is not None and parent is not None:
        out[me] = parent
    for child in node.get("Subcategory", []) or []:  # per child node
        _tree_parents(child, ids, me if me is not None else parent, out, file)


def read_hierarchy(path: Any, categories: dict[int, str]) -> dict[int, int]:
    """{category: parent category} from an Open Images hierarchy JSON (names not among ``categories``
    are skipped: their children hang on the nearest known ancestor)."""
    p = need_path(path, "data.hierarchy")
    try:
        tree = json.loads(p.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as e:
        raise DetcalInputError(f"cannot read the hierarchy: {e}", file=p) from None
    out: dict[int, int] = {}
    _tree_parents(tree, {n: c for c, n in categories.items()}, None, out, p)
    return out


def _ancestors(parent: dict[int, int], c: int) -> list[int]:
    out: list[int] = []
    while c in parent and parent[c] not in out:
        c = parent[c]
        out.append(c)
    return out


def expand_boxes(gt: GroundTruth, parent: dict[int, int], group_of: np.ndarray) -> tuple[GroundTruth, np.ndarray]:
    """``gt`` with each box copied to every ancestor class (a copy identical to a box already there, same
    image, class, coordinates and group-of flag, is not added) and the group-of flags [G'] of the result."""
    anc = {c: _ancestors(parent, c) for c in set(gt.category.tolist())}
    n_up = np.array([len(anc[c]) for c in gt.category.tolist()], dtype=np.int64)
    rows = np.concatenate([np.arange(len(gt)), np.repeat(np.arange(len(gt)), n_up)])
    up = [a for c in gt.category.tolist() for a in anc[c]]
    cats = np.concatenate([gt.category, np.array(up, dtype=np.int64)])
    key = np.column_stack([gt.image_id[rows], cats, gt.box[rows], group_of[rows]])
    _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
    idx = np.arange(len(rows))
    keep = (idx < len(gt)) | (first[inverse.reshape(-1)] == idx)
    rows, cats = rows[keep], cats[keep]
    ids = np.concatenate([gt.id, int(gt.id.max(initial=0)) + np.arange(1, len(rows) - len(gt) + 1)])
    out = GroundTruth(
        image_id=gt.image_id[rows],
        box=gt.box[rows],
        category=cats,
        ignore=gt.ignore[rows],
        id=ids,
        area=None if gt.area is None else gt.area[rows],
        wh=None if gt.wh is None else gt.wh[rows],
    )
    return out, group_of[rows]


def _labels(images: list, key: str, file: Path, cats: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i, im in enumerate(images):  # per image: its verified labels
        ids = im.get(key, []) if isinstance(im, dict) else None
        if not isinstance(ids, list) or any(c not in cats for c in ids):
            raise DetcalInputError(
                f"expected a list of known category ids, got {ids!r}", file=file, record=f"images[{i}]", field=key
            )
        out.extend((int(im["id"]), int(c)) for c in ids)
    return out


def _descendants(parent: dict[int, int], c: int) -> list[int]:
    return [k for k in parent if c in _ancestors(parent, k)]


def load_openimages(
    gt: Any,
    results: Any,
    hierarchy: Any = None,
    unknown_category: str = "drop",
    csv: Mapping[str, Any] | None = None,
) -> LoadedData:
    """Open Images ground truth and COCO-format results, expanded (module docstring); the
    :class:`OpenImagesRules` (evaluable pairs, group-of flags of the expanded boxes) in ``LoadedData.protocol``.
    A ``.csv`` ground truth is read as the official CSVs (:mod:`detcal.data.openimages_csv`; ``csv`` holds
    ``labels``, ``names``, ``sizes``, ``image_dir``)."""
    g = need_path(gt, "data.gt")
    if g.suffix.lower() == ".csv":
        got = read_openimages_csv(g, results, unknown_category, **dict(csv or {}))
        parent = {} if hierarchy in (None, "") else read_hierarchy(hierarchy, got.label_names)
        with_rules(got.data, parent, got.group_of, got.pos, got.neg)
        got.data.provenance["hierarchy"] = None if hierarchy in (None, "") else str(hierarchy)
        return got.data
    data = load_coco(g, results, unknown_category, None)
    doc = json.loads(g.read_bytes())
    ds = data.dataset
    cats = {int(c["id"]): c for c in doc["categories"]}
    if hierarchy is not None:
        parent = read_hierarchy(hierarchy, ds.categories)
    else:
        by_name = {str(c.get("name")): i for i, c in cats.items()}
        parent = {i: by_name[str(c["supercategory"])] for i, c in cats.items() if c.get("supercategory") in by_name}
        parent = {k: v for k, v in parent.items() if k != v}
    group_by_id = {int(a["id"]): bool(a.get("is_group_of", False)) for a in doc["annotations"]}
    flags = np.array([group_by_id[int(i)] for i in ds.gt.id.tolist()], dtype=bool)
    known = set(ds.categories)
    pos = _labels(doc["images"], "pos_category_ids", g, known)
    neg = _labels(doc["images"], "neg_category_ids", g, known)
    with_rules(data, parent, flags, pos, neg)
    data.provenance.update(source="openimages", hierarchy=None if hierarchy is None else str(hierarchy))
    return data


def with_rules(
    data: LoadedData, parent: dict[int, int], flags: np.ndarray, pos: list[tuple[int, int]], neg: list[tuple[int, int]]
) -> None:
    """Expand ``data``'s boxes (group-of ``flags`` [G]) and the verified labels ``pos`` / ``neg`` ((image,
    category) pairs) over the hierarchy ``parent``, and set ``data.protocol`` to the :class:`OpenImagesRules`."""
    ds = data.dataset
    expanded, flags = expand_boxes(ds.gt, parent, flags)
    pairs = {(i, a) for i, c in pos for a in [c, *_ancestors(parent, c)]}
    pairs |= {(i, d) for i, c in neg for d in [c, *_descendants(parent, c)]}
    pairs |= set(zip(expanded.image_id.tolist(), expanded.category.tolist()))
    data.dataset = Dataset(ds.images, expanded, ds.categories, ds.source)
    data.protocol = OpenImagesRules(np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2), flags, parent)


class OpenImagesAdapter:
    """Open Images ``data.gt`` (COCO-style with group-of boxes and image-level labels) + ``data.results``."""

    name = "openimages"
    gt_field = "gt"
    results_field = "results"
    fields = ("gt", "results", "hierarchy", "unknown_category", "labels", "names", "sizes", "image_dir")
    matching = MatchDefaults(mode="openimages", iou=(0.5,), max_dets=None)

    def load(self, fields: Mapping[str, Any], shard: tuple[int, int] | None = None) -> LoadedData:
        """:func:`load_openimages` (``shard`` is not used)."""
        csv = {k: fields.get(k) for k in ("labels", "names", "sizes", "image_dir")}
        return load_openimages(
            fields["gt"], fields["results"], fields.get("hierarchy"), str(fields.get("unknown_category") or "drop"), csv
        )

    def write(self, out_dir: Path, dets: Detections, dataset: Dataset, write_gt: bool) -> dict[str, str]:
        """``detections.json`` (COCO results; + ``instances.json``, expanded, without the Open Images fields)."""
        return COCO.write(out_dir, dets, dataset, write_gt)


ADAPTER = OpenImagesAdapter()
