"""Dataset adapters: COCO and KITTI files <-> the columnar records of :mod:`detcal.core.types`.

Box-format conversions (COCO ``[x, y, w, h]``, KITTI ``left top right
bottom``) happen here and nowhere else. numpy only: importing this package
never imports torch (pycocotools and PIL are imported lazily, when used).
"""

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
