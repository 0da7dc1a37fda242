"""Where the ground truth and the detections come from: one spec per data source.

Every source (each format of the registry :mod:`detcal.data.formats`, the
seeded synthetic set, the bundled detections) has its own dataclass holding
exactly the ``data.*`` fields it reads, each declared once with its default
and a comment (docs/options.md lists them). The fields every source shares
(``image_ids``, ``image_dir`` and the input checks) live in :class:`DataSpec`.

``DataSpec(source="coco", gt=..., results=...)`` builds the spec of that
source (here a :class:`CocoDataSpec`); a field the source does not read is a
:class:`~detcal.core.config.ConfigError` naming it and the fields allowed. The
Hydra commands pick the class by the config group: ``data=kitti`` composes a
:class:`KittiDataSpec`, and ``data.gt=...`` on it is refused the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from detcal.core.config import ConfigError, check_choice, check_int, check_prob
from detcal.data.formats import FORMATS, get_format

__all__ = [
    "DATA_SPECS",
    "DataSpec",
    "CocoDataSpec",
    "KittiDataSpec",
    "YoloDataSpec",
    "VocDataSpec",
    "LvisDataSpec",
    "OpenImagesDataSpec",
    "SyntheticDataSpec",
    "BundledDataSpec",
    "data_spec_class",
    "foreign_field_message",
    "data_fields",
]

UNKNOWN_CATEGORY = ("drop", "error")
KITTI_DIFFICULTY = ("easy", "moderate", "hard")


@dataclass
class DataSpec:
    """The fields every data source shares; ``source`` names the source and with it the spec class
    (``DataSpec(source=...)`` builds that class, :data:`DATA_SPECS`).

    Input checks (docs/formats.md#input-checks): the run stops when more than
    ``max_unknown_category_share`` of the detections have a category the ground truth lacks, when
    more than ``max_outside_share`` of the boxes reach past their image (boxes in the other
    convention), or when the ground truth has no annotations (unless ``allow_empty_gt``); 1 (true)
    proceeds anyway."""

    source: str = "synthetic"  # coco | kitti | yolo | voc | lvis | openimages | synthetic | bundled (data=<name>)
    # keep only these images: a list, or a text file with one id (or image/frame name) per line
    image_ids: Any | None = None
    # the images: sizes where the labels lack them (kitti, yolo, Open Images CSV), thumbnails in report.html
    image_dir: str | None = None
    # stop when more detections than this share have unknown categories (1: proceed)
    max_unknown_category_share: float = 0.1
    max_outside_share: float = 0.2  # stop when more boxes than this share reach 5% past their image (1: proceed)
    allow_empty_gt: bool = False  # true: evaluate against a ground truth without annotations

    def __new__(cls, *args: Any, **kwargs: Any) -> DataSpec:
        """``DataSpec(source=..., **fields)`` is an instance of the source's class (Python then runs that
        class's ``__init__`` with the same arguments); a field it lacks is refused here, by name."""
        if cls is not DataSpec:
            return super().__new__(cls)
        source = kwargs.get("source", args[0] if args else "synthetic")
        target = data_spec_class(source)
        allowed = {f.name for f in dataclasses.fields(target)}
        for name in kwargs:
            if name not in allowed:
                raise ConfigError(f"data.{name}", foreign_field_message(name, target))
        return super().__new__(target)

    def __post_init__(self) -> None:
        own = _own_source(type(self))
        if self.source != own:
            raise ConfigError(
                "data.source", f"{self.source!r} is another source than this spec's ({own}): choose it with data=<name>"
            )
        check_prob("data.max_unknown_category_share", self.max_unknown_category_share)
        check_prob("data.max_outside_share", self.max_outside_share)


def foreign_field_message(name: str, spec: type[DataSpec]) -> str:
    """The message for a ``data.<name>`` the source of ``spec`` does not read."""
    source = _own_source(spec)
    allowed = ", ".join(f.name for f in dataclasses.fields(spec) if f.name != "source")
    owners = [s for s, cls in DATA_SPECS.items() if name in cls.__dataclass_fields__]
    where = f"; {name} is read by data={' | '.join(owners)}" if owners else ""
    return f"data={source} has no field {name!r} (its fields: {allowed}){where}"


@dataclass
class CocoDataSpec(DataSpec):
    """COCO instances JSON + COCO results JSON (docs/formats.md). ``chunk_bytes`` (docs/scale.md): the
    results file read in blocks of this many bytes into compact columns, never holding the whole list of
    records (0: read whole; null: blocks of 256 KiB for files over 8 MiB); the same detections."""

    source: str = "coco"
    gt: str | None = None  # instances_*.json (required)
    results: str | None = None  # detections: a COCO results JSON (required)
    unknown_category: str = "drop"  # detections of categories absent from the ground truth: drop (counted) | error
    # read the results in blocks of N bytes (bounded memory); 0: whole; null: 256 KiB blocks above 8 MiB
    chunk_bytes: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.unknown_category", self.unknown_category, UNKNOWN_CATEGORY)
        if self.chunk_bytes is not None:
            check_int("data.chunk_bytes", self.chunk_bytes, 0)


@dataclass
class LvisDataSpec(CocoDataSpec):
    """LVIS v1 (docs/formats.md): a COCO-style instances JSON with ``neg_category_ids``,
    ``not_exhaustive_category_ids`` and category frequency (``gt``, e.g. lvis_v1_val.json) + a COCO
    results JSON; the fields of :class:`CocoDataSpec`. Matched with LVISEval's rules (matching=lvis)."""

    source: str = "lvis"


@dataclass
class OpenImagesDataSpec(DataSpec):
    """Open Images V7 detection (docs/formats.md): a COCO-style instances JSON with ``is_group_of`` boxes
    and verified image-level labels + a COCO results JSON, or the official CSVs (``gt`` the boxes CSV;
    ``labels``, ``names``, ``sizes`` or ``image_dir``; ``results`` a challenge submission CSV or a box
    CSV with scores). Matched with the challenge's rules (matching=openimages)."""

    source: str = "openimages"
    gt: str | None = None  # instances JSON with the Open Images fields, or the boxes CSV (required)
    results: str | None = None  # results JSON, or a submission / box CSV with the CSV ground truth (required)
    hierarchy: str | None = None  # the class hierarchy JSON; null: each category's supercategory (JSON) / none (CSV)
    labels: str | None = None  # CSV ground truth: the image-level labels CSV (ImageID,Source,LabelName,Confidence)
    names: str | None = None  # CSV ground truth: the class descriptions CSV (LabelName,DisplayName) (required)
    sizes: str | None = None  # CSV ground truth: image sizes, lines '<ImageID> <width> <height>'
    unknown_category: str = "drop"  # detections of categories absent from the ground truth: drop (counted) | error

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.unknown_category", self.unknown_category, UNKNOWN_CATEGORY)


@dataclass
class KittiDataSpec(DataSpec):
    """KITTI 2D object labels + results directories (docs/formats.md); image sizes from ``image_dir``,
    ``sizes``, or the ``image_2`` folder beside ``label_dir``. Matched with the devkit's rules
    (matching=kitti: per-class IoU 0.7/0.5/0.5, difficulty rules)."""

    source: str = "kitti"
    label_dir: str | None = None  # label_2/ directory (required)
    results_dir: str | None = None  # one <frame>.txt per image with scores (required)
    sizes: str | None = None  # or a text file "<frame> <width> <height>" per line (default: image_2 beside label_2)
    difficulty: str = "moderate"  # easy | moderate | hard

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.difficulty", self.difficulty, KITTI_DIFFICULTY)


@dataclass
class YoloDataSpec(DataSpec):
    """YOLO text folders (docs/formats.md): one ``<image>.txt`` per image, normalised
    ``class cx cy w h`` (labels) and ``class cx cy w h score`` (detections); sizes from ``image_dir``
    (default: images/ beside the labels folder) or ``sizes``. Matched with COCO rules."""

    source: str = "yolo"
    label_dir: str | None = None  # labels/ folder (required)
    results_dir: str | None = None  # detections folder, e.g. runs/detect/predict/labels (required)
    names: str | None = None  # data.yaml with 'names:' (required)
    sizes: str | None = None  # or a text file "<image> <width> <height>" per line


@dataclass
class VocDataSpec(DataSpec):
    """Pascal VOC (docs/formats.md): ``Annotations/*.xml`` + the devkit's per-class result files
    ``comp4_det_<set>_<class>.txt``. Matched with the devkit's rule (matching=voc: IoU > 0.5, difficult
    boxes ignored)."""

    source: str = "voc"
    label_dir: str | None = None  # Annotations/ folder (required)
    results_dir: str | None = None  # folder of the per-class result files (required)
    names: str | None = None  # optional class order: a text file with one name per line, or a data.yaml
    unknown_category: str = "drop"  # result files of classes absent from the annotations: drop (counted) | error

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.unknown_category", self.unknown_category, UNKNOWN_CATEGORY)


@dataclass
class SyntheticDataSpec(DataSpec):
    """Synthetic scenes with a simulated detector and planted miscalibration, generated
    deterministically from ``seed`` into ``out_dir`` (by default ``<run dir>/synthetic``) and read back
    through the COCO or KITTI reader (``format``) like real data."""

    source: str = "synthetic"
    out_dir: str | None = None  # null: <run dir>/synthetic
    n_images: int = 2000  # enough samples to populate the 5^5 D-ECE grid
    seed: int = 0
    format: str = "coco"  # which written copy to evaluate: coco | kitti
    difficulty: str = "moderate"  # KITTI difficulty when format=kitti
    render: bool = False  # also write the PNG images (the evaluation does not need them)
    # to the simulated detector, e.g. {std_scale: [1, 1, 2, 0.5]}
    detector_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.format", self.format, ("coco", "kitti"))
        check_choice("data.difficulty", self.difficulty, KITTI_DIFFICULTY)
        check_int("data.n_images", self.n_images, 1)
        check_int("data.seed", self.seed, 0)


@dataclass
class BundledDataSpec(DataSpec):
    """Real detections shipped with detcal (docs/real_detectors.md): ``bundle`` coco_tfzoo (COCO val2017,
    5,000 images, four TF-zoo detectors at score >= 0.3) or coco_mini79 (79 images, official
    annotations), ``detector`` one of ``detcal.data.bundled.DETECTORS``."""

    source: str = "bundled"
    bundle: str = "coco_tfzoo"  # coco_tfzoo | coco_mini79
    detector: str = "rfcn-resnet-101"  # rfcn-resnet-101 | faster-rcnn-resnet-50 | ssd-inception-v2 | ssd-resnet-50-v1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("data.bundle", self.bundle, ("coco_tfzoo", "coco_mini79"))


DATA_SPECS: dict[str, type[DataSpec]] = {
    "coco": CocoDataSpec,
    "kitti": KittiDataSpec,
    "yolo": YoloDataSpec,
    "voc": VocDataSpec,
    "lvis": LvisDataSpec,
    "openimages": OpenImagesDataSpec,
    "synthetic": SyntheticDataSpec,
    "bundled": BundledDataSpec,
}
"""Source name -> its spec class: every format detcal ships in :data:`detcal.data.formats.FORMATS` (a
test keeps them equal), the synthetic set and the bundled detections. A format registered later (a
plugin's module) names its spec class as its adapter's ``spec``."""


def _own_source(spec: type[DataSpec]) -> str:
    """The source a spec class stands for: the default of its ``source`` field."""
    return str(spec.__dataclass_fields__["source"].default)


def data_spec_class(source: Any) -> type[DataSpec]:
    """The spec class of the data source ``source``: :data:`DATA_SPECS`, else the ``spec`` of the adapter
    registered as ``source`` in :data:`detcal.data.formats.FORMATS`."""
    if source in DATA_SPECS:
        return DATA_SPECS[source]
    if source in FORMATS:
        spec = getattr(get_format(source), "spec", None)
        if isinstance(spec, type) and issubclass(spec, DataSpec):
            return spec
        raise ConfigError("data.source", f"format {source!r} names no data spec (its adapter's 'spec')")
    known = [*DATA_SPECS, *(f for f in FORMATS if f not in DATA_SPECS)]
    raise ConfigError("data.source", f"{source!r} is not one of {', '.join(known)}")


def data_fields(spec: DataSpec) -> dict[str, Any]:
    """The ``data.*`` values of ``spec`` by name (what a format adapter reads)."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
