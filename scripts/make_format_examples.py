"""Write the bundled COCO val2017 example (79 images) as YOLO and Pascal VOC sets.

Usage::

    python scripts/make_format_examples.py [OUT_DIR]     # default: examples/

Writes ``OUT_DIR/mini79_yolo/`` (``labels/``, ``detections/``, ``data.yaml``,
``sizes.txt``) and ``OUT_DIR/mini79_voc/`` (``Annotations/``, ``results/``) from
``detcal.data.bundled``'s ``coco_mini79`` set and the R-FCN R-101 detections:
the same boxes and scores in each format. Boxes only: the crowd annotations are
left out (neither YOLO nor VOC has crowd regions) and a box's area is its
``w * h`` (not the COCO mask area), so that COCO, YOLO and VOC readings give the
same numbers (tests/test_formats_examples.py checks it). Numbers are written
in their shortest exact form (Python's ``repr``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from detcal.core.types import Dataset, Detections, GroundTruth
from detcal.data import bundled
from detcal.data.formats import get_format

REPO = Path(__file__).resolve().parents[1]
DETECTOR = "rfcn-resnet-101"


def boxes_only(ds: Dataset) -> Dataset:
    """``ds`` without its crowd annotations, and with box areas (no COCO ``area``, no stored ``w h``)."""
    g = ds.gt.select(~ds.gt.iscrowd)
    gt = GroundTruth(image_id=g.image_id, box=g.box, category=g.category, id=g.id)
    return dataclasses.replace(ds, gt=gt)


def example_set(detector: str = DETECTOR) -> tuple[Dataset, Detections]:
    """The box-only 79-image set and ``detector``'s detections on it."""
    ds, dets = bundled.load("coco_mini79", detector)
    return boxes_only(ds), dataclasses.replace(dets, wh=None)


def write_examples(out: Path, detector: str = DETECTOR) -> dict[str, dict[str, str]]:
    """Write the YOLO and VOC copies under ``out``; their paths by format and role."""
    ds, dets = example_set(detector)
    written = {}
    for fmt in ("yolo", "voc"):
        folder = out / f"mini79_{fmt}"
        folder.mkdir(parents=True, exist_ok=True)
        written[fmt] = get_format(fmt).write(folder, dets, ds, True)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "examples"
    for fmt, paths in write_examples(target).items():
        print(fmt, paths)
