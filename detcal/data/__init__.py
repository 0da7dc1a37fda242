"""Dataset adapters: COCO and KITTI files <-> the columnar records of :mod:`detcal.core.types`.

Box-format conversions (COCO ``[x, y, w, h]``, KITTI ``left top right
bottom``) happen here and nowhere else. numpy only: importing this package
never imports torch (pycocotools and PIL are imported lazily, when used).

The package's names are read on first use (PEP 562 module ``__getattr__``):
``import detcal.data.specs`` (every command's start-up) then loads neither the
KITTI nor the class-map module (with PyYAML) that a COCO run never calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from detcal.utils.lazy_names import lazy_getattr

if TYPE_CHECKING:  # the names below are read on first use (``__getattr__``); type checkers see them here
    from detcal.data.classmap import ClassMap, load_class_map
    from detcal.data.coco import (
        dataset_to_coco_dict,
        detections_to_coco_list,
        load_coco_instances,
        load_coco_results,
        results_to_pycocotools,
        to_pycocotools,
        write_coco_instances,
        write_coco_results,
    )
    from detcal.data.coco_chunks import iter_coco_results
    from detcal.data.kitti import (
        kitti_difficulty,
        kitti_rules,
        load_kitti_labels,
        load_kitti_results,
        read_image_size,
        split_frames,
        write_kitti_labels,
        write_kitti_results,
    )

_LAZY_MODULES: dict[str, tuple[str, ...]] = {
    "detcal.data.classmap": ("ClassMap", "load_class_map"),
    "detcal.data.coco": (
        "dataset_to_coco_dict",
        "detections_to_coco_list",
        "load_coco_instances",
        "load_coco_results",
        "results_to_pycocotools",
        "to_pycocotools",
        "write_coco_instances",
        "write_coco_results",
    ),
    "detcal.data.coco_chunks": ("iter_coco_results",),
    "detcal.data.kitti": (
        "kitti_difficulty",
        "kitti_rules",
        "load_kitti_labels",
        "load_kitti_results",
        "read_image_size",
        "split_frames",
        "write_kitti_labels",
        "write_kitti_results",
    ),
}
_LAZY: dict[str, str] = {name: module for module, names in _LAZY_MODULES.items() for name in names}
"""Public names of the package and the modules they are read from on first use."""


__getattr__ = lazy_getattr(__name__, globals(), _LAZY)


__all__ = [
    "ClassMap",
    "load_class_map",
    "dataset_to_coco_dict",
    "detections_to_coco_list",
    "load_coco_instances",
    "load_coco_results",
    "results_to_pycocotools",
    "to_pycocotools",
    "write_coco_instances",
    "write_coco_results",
    "iter_coco_results",
    "kitti_difficulty",
    "kitti_rules",
    "load_kitti_labels",
    "load_kitti_results",
    "read_image_size",
    "split_frames",
    "write_kitti_labels",
    "write_kitti_results",
]
