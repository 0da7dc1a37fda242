"""The typed records through which the stages of detcal talk.

All records are *columnar*: one numpy array per field, flat over the whole
dataset (never a dict per box). Array shapes are written with these axis
letters (docs/metrics.md):

    N images, D detections, G ground-truth boxes, T IoU thresholds,
    K coordinates (4: tx, ty, tw, th), B bins, F features, L quantile levels.

Boxes are ``xyxy`` in absolute pixels, float64, continuous coordinates
(width = x2 - x1, no +1). COCO ``[x, y, w, h]`` and KITTI ``left top right
bottom`` are converted in the adapters (:mod:`detcal.data`) and nowhere else.

This module is numpy-only; it must never import torch.

Records
-------
Images
    ``id [N]`` int64, ``width [N]``, ``height [N]`` float64, ``file_name [N]``
    (list of str, may be empty strings).
GroundTruth
    ``image_id [G]`` int64, ``box [G,4]`` xyxy, ``category [G]`` int64,
    ``iscrowd [G]`` bool (COCO crowd: matched by intersection over detection
    area, absorbs any number of detections), ``ignore [G]`` bool (ignored for
    matching: a detection matched to it leaves the sample), ``id [G]`` int64
    (annotation id; COCO ``id`` or a running number),
    ``truncation [G]`` float64 (KITTI 0..1, NaN when unknown), ``occlusion [G]``
    int64 (KITTI 0..3, -1 unknown), ``difficulty [G]`` int64 (KITTI hardest
    level the box belongs to: 0 easy, 1 moderate, 2 hard, -1 none/unknown),
    and optional KITTI 3-D fields ``alpha [G]``, ``dimensions [G,3]`` (h, w, l),
    ``location [G,3]`` (x, y, z), ``rotation_y [G]`` kept for lossless
    round trips; optional ``wh [G,2]``: width and height exactly as the input
    gave them (COCO ``bbox`` w, h), from which matching takes box areas as
    pycocotools does (``w * h``, not ``(x2 - x1) * (y2 - y1)``).
Detections
    ``image_id [D]`` int64, ``box [D,4]`` xyxy, ``score [D]`` float64,
    ``category [D]`` int64, in the input order of the results file; optional
    uncertainty (docs/formats.md):

    * delta records: ``proposal [D,4]`` xyxy reference box P, ``delta_mean
      [D,K]`` and ``delta_std [D,K]`` (unweighted R-CNN deltas; a
      log-variance input is converted with std = exp(0.5 * logvar));
    * box records: ``box_std [D,4]`` pixel std of (cx, cy, w, h), or
      ``box_cov [D,4,4]`` covariance in (x, y, w, h) pixels (probdet
      ``bbox_covar``), or ``corner_cov [D,2,2,2]`` the 2x2 covariances of the
      top-left and bottom-right corners (PDQ ``covars``).

    Optional KITTI fields as for GroundTruth (``alpha``, ``dimensions``,
    ``location``, ``rotation_y``, ``truncation``, ``occlusion``), and
    ``wh [D,2]`` as for GroundTruth; optional ``class_probs [D,C]``: the
    detection's probability for every category of the ground-truth file, in
    ascending category-id order (COCO results key ``all_scores``), used by the
    exact multi-class Brier score of OCE (:mod:`detcal.metrics.oce`).
MatchResult
    ``iou_thresholds [T]``, ``matched [T,D]`` bool, ``ignored [T,D]`` bool,
    ``gt_index [T,D]`` int64 row into GroundTruth (-1 none), ``iou [D]``
    best IoU with a same-class (or any, class-agnostic) GT, ``considered [D]``
    bool (passed the score threshold and the max-detections-per-image cut;
    a detection not considered is neither matched nor ignored), and the
    parameters that made it.
MetricResult
    One number with its name, the variant, the parameters that produced it,
    optional per-bin table and optional bootstrap interval. Always the same
    type, whatever the flags.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError

COORDS: tuple[str, ...] = ("tx", "ty", "tw", "th")
"""Names of the K = 4 regression coordinates (R-CNN deltas)."""


def _f64(a: Any, shape_tail: tuple[int, ...] = ()) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.size == 0:
        arr = arr.reshape((0,) + shape_tail)
    return arr


def _i64(a: Any) -> np.ndarray:
    return np.asarray(a, dtype=np.int64).reshape(-1)


def _opt(a: Any, shape_tail: tuple[int, ...] = ()) -> np.ndarray | None:
    return None if a is None else _f64(a, shape_tail)


class _Columnar:
    """Shared helpers for columnar records: length, row selection, concat."""

    def __len__(self) -> int:  # pragma: no cover - overridden by dataclass field
        raise NotImplementedError

    def select(self, index: Any) -> Any:
        """Rows ``index`` (bool mask or integer array) of every per-row field."""
        n = len(self)
        kwargs = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] == n:
                kwargs[f.name] = v[index]
            elif isinstance(v, list) and len(v) == n:
                idx = np.arange(n)[index]
                kwargs[f.name] = [v[i] for i in idx]
            else:
                kwargs[f.name] = v
        return type(self)(**kwargs)


@dataclass
class Images(_Columnar):
    """Images of a dataset. ``id [N]``, ``width [N]``, ``height [N]``, ``file_name [N]``."""

    id: np.ndarray
    width: np.ndarray
    height: np.ndarray
    file_name: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.id = _i64(self.id)
        self.width = _f64(self.width).reshape(-1)
        self.height = _f64(self.height).reshape(-1)
        if not self.file_name:
            self.file_name = [""] * len(self.id)
        if not (len(self.width) == len(self.height) == len(self.id) == len(self.file_name)):
            raise ValueError("Images: id, width, height, file_name must have the same length N")

    def __len__(self) -> int:
        return len(self.id)

    def index_of(self, image_ids: np.ndarray) -> np.ndarray:
        """Row of each image id (vectorised); -1 for ids not in the set (the first row of a repeated id)."""
        image_ids = np.asarray(image_ids, dtype=np.int64)
        cached = self.__dict__.get("_id_rows")  # kept while ``id`` is the same array
        if cached is None or cached[0] is not self.id or cached[1] != len(self.id):
            cached = (self.id, len(self.id), *_id_lookup(self.id))
            self.__dict__["_id_rows"] = cached
        _, _, lo, table, order, sorted_ids = cached
        if table is not None:  # ids within a span of a few times their number: one gather
            pos = image_ids - lo
            inside = (pos >= 0) & (pos < len(table))
            if inside.all():
                return table[pos]
            return np.where(inside, table[np.where(inside, pos, 0)], -1)
        pos = np.searchsorted(sorted_ids, image_ids)
        pos_c = np.clip(pos, 0, max(len(sorted_ids) - 1, 0))
        ok = (
            (len(sorted_ids) > 0) & (sorted_ids[pos_c] == image_ids)
            if len(sorted_ids)
            else np.zeros(image_ids.shape, bool)
        )
        out = np.full(image_ids.shape, -1, dtype=np.int64)
        if len(sorted_ids):
            out[ok] = order[pos_c[ok]]
        return out


ID_TABLE_SPAN: int = 4
""":meth:`Images.index_of` looks ids up in a table when they span at most this many times their number
(plus 1,024): one gather per id instead of a binary search."""


def _id_lookup(ids: np.ndarray) -> tuple[int, np.ndarray | None, np.ndarray, np.ndarray]:
    """(lowest id, table of rows by ``id - lowest`` (-1: no image) or None, stable sort order, sorted ids)."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    if not len(ids):
        return 0, None, order, sorted_ids
    lo, hi = int(sorted_ids[0]), int(sorted_ids[-1])
    if hi - lo >= ID_TABLE_SPAN * len(ids) + 1024:
        return lo, None, order, sorted_ids
    table = np.full(hi - lo + 1, -1, dtype=np.int64)
    first = np.ones(len(ids), dtype=bool)  # a repeated id keeps its first row (as the stable search does)
    first[1:] = sorted_ids[1:] != sorted_ids[:-1]
    table[sorted_ids[first] - lo] = order[first]
    return lo, table, order, sorted_ids


@dataclass
class GroundTruth(_Columnar):
    """Ground-truth boxes, flat over the dataset. See the module docstring for shapes."""

    image_id: np.ndarray
    box: np.ndarray
    category: np.ndarray
    iscrowd: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    ignore: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    id: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    truncation: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    occlusion: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    difficulty: np.ndarray = None  # type: ignore[assignment]  # None on input; an array after __post_init__
    alpha: np.ndarray | None = None
    dimensions: np.ndarray | None = None
    location: np.ndarray | None = None
    rotation_y: np.ndarray | None = None
    wh: np.ndarray | None = None
    area: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.image_id = _i64(self.image_id)
        g = len(self.image_id)
        self.box = _f64(self.box, (4,)).reshape(g, 4)
        self.category = _i64(self.category)
        self.iscrowd = np.zeros(g, bool) if self.iscrowd is None else np.asarray(self.iscrowd, bool).reshape(-1)
        self.ignore = np.zeros(g, bool) if self.ignore is None else np.asarray(self.ignore, bool).reshape(-1)
        self.id = np.arange(1, g + 1, dtype=np.int64) if self.id is None else _i64(self.id)
        self.truncation = np.full(g, np.nan) if self.truncation is None else _f64(self.truncation).reshape(-1)
        self.occlusion = np.full(g, -1, np.int64) if self.occlusion is None else _i64(self.occlusion)
        self.difficulty = np.full(g, -1, np.int64) if self.difficulty is None else _i64(self.difficulty)
        self.alpha = _opt(self.alpha)
        self.dimensions = _opt(self.dimensions, (3,))
        self.location = _opt(self.location, (3,))
        self.rotation_y = _opt(self.rotation_y)
        self.wh = _opt(self.wh, (2,))
        self.area = _opt(self.area)
        for name in ("category", "iscrowd", "ignore", "id", "truncation", "occlusion", "difficulty"):
            if len(getattr(self, name)) != g:
                raise ValueError(f"GroundTruth: field {name} has length {len(getattr(self, name))}, expected G={g}")
        if self.wh is not None and self.wh.shape != (g, 2):
            raise ValueError(f"GroundTruth: field wh has shape {self.wh.shape}, expected ({g}, 2)")

    def __len__(self) -> int:
        return len(self.image_id)


@dataclass
class Detections(_Columnar):
    """Detections in results-file order. See the module docstring for shapes."""

    image_id: np.ndarray
    box: np.ndarray
    score: np.ndarray
    category: np.ndarray
    proposal: np.ndarray | None = None
    delta_mean: np.ndarray | None = None
    delta_std: np.ndarray | None = None
    box_std: np.ndarray | None = None
    box_cov: np.ndarray | None = None
    corner_cov: np.ndarray | None = None
    truncation: np.ndarray | None = None
    occlusion: np.ndarray | None = None
    alpha: np.ndarray | None = None
    dimensions: np.ndarray | None = None
    location: np.ndarray | None = None
    rotation_y: np.ndarray | None = None
    wh: np.ndarray | None = None
    class_probs: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.image_id = _i64(self.image_id)
        d = len(self.image_id)
        self.box = _f64(self.box, (4,)).reshape(d, 4)
        self.score = _f64(self.score).reshape(-1)
        self.category = _i64(self.category)
        self.proposal = _opt(self.proposal, (4,))
        self.delta_mean = _opt(self.delta_mean, (4,))
        self.delta_std = _opt(self.delta_std, (4,))
        self.box_std = _opt(self.box_std, (4,))
        self.box_cov = _opt(self.box_cov, (4, 4))
        self.corner_cov = _opt(self.corner_cov, (2, 2, 2))
        self.truncation = _opt(self.truncation)
        self.occlusion = None if self.occlusion is None else _i64(self.occlusion)
        self.alpha = _opt(self.alpha)
        self.dimensions = _opt(self.dimensions, (3,))
        self.location = _opt(self.location, (3,))
        self.rotation_y = _opt(self.rotation_y)
        for name in ("score", "category"):
            if len(getattr(self, name)) != d:
                raise ValueError(f"Detections: field {name} has length {len(getattr(self, name))}, expected D={d}")
        self.wh = _opt(self.wh, (2,))
        if self.class_probs is not None:
            self.class_probs = np.asarray(self.class_probs, dtype=np.float64)
            if self.class_probs.ndim != 2:
                raise ValueError(f"Detections: field class_probs must be [D, C], got shape {self.class_probs.shape}")
        for name in ("proposal", "delta_mean", "delta_std", "box_std", "box_cov", "corner_cov", "wh", "class_probs"):
            v = getattr(self, name)
            if v is not None and v.shape[0] != d:
                raise ValueError(f"Detections: field {name} has {v.shape[0]} rows, expected D={d}")

    def __len__(self) -> int:
        return len(self.image_id)

    @property
    def uncertainty_kind(self) -> str | None:
        """``"delta"``, ``"box_std"``, ``"box_cov"``, ``"corner_cov"`` or ``None``."""
        if self.delta_mean is not None and self.delta_std is not None and self.proposal is not None:
            return "delta"
        for name in ("box_std", "box_cov", "corner_cov"):
            if getattr(self, name) is not None:
                return name
        return None


@dataclass
class Dataset:
    """A ground-truth dataset: images, boxes and the category names.

    ``categories`` maps category id -> name. ``source`` names the file or
    directory it was read from (for error messages and result provenance).
    """

    images: Images
    gt: GroundTruth
    categories: dict[int, str]
    source: str = ""

    def gt_image_rows(self) -> np.ndarray:
        """Row into ``images`` of each ground-truth box [G]; an unknown image id is an input error."""
        rows = self.images.index_of(self.gt.image_id)
        bad = np.flatnonzero(rows < 0)
        if len(bad):
            raise DetcalInputError(
                f"ground truth refers to image id {int(self.gt.image_id[bad[0]])} not in the images",
                file=self.source or None,
                record=int(bad[0]),
                field="image_id",
            )
        return rows

    def category_id(self, name: str) -> int:
        for k, v in self.categories.items():
            if v == name:
                return k
        raise KeyError(f"unknown category name {name!r}; known: {sorted(self.categories.values())}")


@dataclass
class MatchResult:
    """Per-detection matching outcome, in the input order of the detections.

    ``matched [T,D]``, ``ignored [T,D]``, ``gt_index [T,D]`` (row into
    GroundTruth, -1 none), ``iou [D]`` (best IoU with a same-class GT, or any
    GT when class-agnostic; crowd GTs count with intersection over detection
    area), ``considered [D]``, ``iou_thresholds [T]``; plus the parameters.
    """

    iou_thresholds: np.ndarray
    matched: np.ndarray
    ignored: np.ndarray
    gt_index: np.ndarray
    iou: np.ndarray
    considered: np.ndarray
    mode: str = "exclusive"
    class_agnostic: bool = False
    score_threshold: float = 0.0
    max_dets: int | None = 100
    params: dict[str, Any] = field(default_factory=dict)

    def threshold_index(self, t: float) -> int:
        """Index of IoU threshold ``t`` in ``iou_thresholds`` (exact up to 1e-9)."""
        hits = np.flatnonzero(np.abs(self.iou_thresholds - t) < 1e-9)
        if len(hits) == 0:
            raise KeyError(f"IoU threshold {t} was not matched; available: {self.iou_thresholds.tolist()}")
        return int(hits[0])

    def sample(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Confidence-calibration sample at IoU ``t``: (row indices [S], y [S])."""
        i = self.threshold_index(t)
        keep = self.considered & ~self.ignored[i]
        rows = np.flatnonzero(keep)
        return rows, self.matched[i, rows]

    def describe(self) -> dict[str, Any]:
        """The parameters that produced this result (for result provenance)."""
        return {
            "iou_thresholds": [float(t) for t in self.iou_thresholds],
            "mode": self.mode,
            "class_agnostic": bool(self.class_agnostic),
            "score_threshold": float(self.score_threshold),
            "max_dets": None if self.max_dets is None else int(self.max_dets),
            **self.params,
        }


@dataclass(frozen=True)
class Skipped:
    """What was not computed, and why: the one way detcal writes "not computed".

    In Python it stands where a result block would be (``RegressionBlock | Skipped``) or
    in :attr:`MetricResult.skipped` beside an undefined value. In metrics.json
    (``detcal.metrics/3``) a skipped block is ``{"skipped": "<reason>"}``; a number
    that cannot be computed is ``null`` and the object holding it has a ``"skipped"``
    map from that key to its reason (``{"value": null, "skipped": {"value": "..."}}``).
    """

    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"skipped": self.reason}


@dataclass
class MetricResult:
    """One metric value with its provenance.

    ``value`` is a float (NaN when undefined, e.g. an empty sample).
    ``variant`` names the definition variant (e.g. ``"drop"`` vs ``"netcal"``
    sparse policy, ``"equal_count"`` binning). ``params`` holds every
    parameter that produced it. ``table`` holds optional per-bin arrays
    (e.g. ``{"rmv": [B], "rmse": [B], "count": [B]}``). ``ci`` is an optional
    (low, high) bootstrap interval with ``ci_level``. ``extra`` holds
    secondary numbers (e.g. the dropped sample fraction).
    """

    name: str
    value: float
    variant: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    table: dict[str, np.ndarray] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    ci: tuple[float, float] | None = None
    ci_level: float | None = None
    skipped: Skipped | None = None

    def why_undefined(self) -> Skipped | None:
        """Why ``value`` is NaN: :attr:`skipped`, else the metric's ``extra["note"]``; None when defined."""
        if self.skipped is not None:
            return self.skipped
        v = float(self.value)
        if v == v:  # defined (or infinite: the writer names that itself)
            return None
        note = self.extra.get("note")
        return Skipped(str(note)) if note else None

    def to_dict(self) -> dict[str, Any]:
        """Plain Python; an undefined value's reason (a NaN with ``extra["note"]``) is the ``"skipped"`` map."""
        why = self.why_undefined()
        extra = self.extra
        if why is not None and self.skipped is None:  # the note moves to the one place for reasons
            extra = {k: v for k, v in extra.items() if k != "note"}
        out = _plain_python(
            {
                "name": self.name,
                "value": float(self.value),
                "variant": self.variant,
                "params": self.params,
                "table": self.table,
                "extra": extra,
                "ci": None if self.ci is None else list(self.ci),
                "ci_level": self.ci_level,
            }
        )
        if why is not None:
            out["skipped"] = {"value": why.reason}
        return out


KITTI_TYPES: tuple[str, ...] = (
    "Car",
    "Van",
    "Truck",
    "Pedestrian",
    "Person_sitting",
    "Cyclist",
    "Tram",
    "Misc",
    "DontCare",
)
"""The 9 KITTI label types; their category ids are 1..9 in this order."""

KITTI_CATEGORIES: dict[int, str] = {i + 1: name for i, name in enumerate(KITTI_TYPES)}
"""KITTI category id -> type name (fixed across detcal)."""

KITTI_DIFFICULTY: dict[str, dict[str, float]] = {
    "easy": {"level": 0, "min_height": 40.0, "max_occlusion": 0, "max_truncation": 0.15},
    "moderate": {"level": 1, "min_height": 25.0, "max_occlusion": 1, "max_truncation": 0.30},
    "hard": {"level": 2, "min_height": 25.0, "max_occlusion": 2, "max_truncation": 0.50},
}
"""KITTI devkit difficulty levels (docs/matching.md)."""


@dataclass
class KittiRules:
    """KITTI devkit matching rules, handed to the matcher.

    ``difficulty`` is the evaluated level; GT outside it already carries
    ``ignore=True`` (set by the adapter). Detections lower than ``min_height``
    pixels are ignored. ``neighbours`` maps an evaluated category id to the
    GT category ids that are ignored for it (Van for Car, Person_sitting for
    Pedestrian): a detection matched to such a GT is ignored. An unmatched
    detection whose intersection with a ``dontcare_category`` box over its own
    area exceeds the threshold is ignored. ``strict``: overlap test is ``>``.
    ``class_thresholds``: the devkit's per-class IoU thresholds (Car 0.7,
    Pedestrian/Cyclist 0.5).
    """

    difficulty: str = "moderate"
    min_height: float = 25.0
    neighbours: dict[int, tuple[int, ...]] = field(default_factory=lambda: {1: (2,), 4: (5,)})
    dontcare_category: int | None = 9
    strict: bool = True
    class_thresholds: dict[int, float] = field(default_factory=lambda: {1: 0.7, 4: 0.5, 6: 0.5})


def _plain_python(obj: Any) -> Any:
    """Plain Python containers from numpy (arrays to lists, scalars to Python numbers, keys to str),
    the same values as a JSON round trip gives, without the text."""
    if isinstance(obj, dict):
        return {str(k): _plain_python(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain_python(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist() if obj.dtype.kind in "biuf" else [_plain_python(v) for v in obj.tolist()]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, os.PathLike):
        return str(obj)
    return obj
