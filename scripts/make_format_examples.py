"""Write the bundled COCO val2017 example (79 images) as YOLO, Pascal VOC, LVIS and Open Images sets.

Usage::

    python scripts/make_format_examples.py [OUT_DIR]     # default: examples/

Writes ``OUT_DIR/mini79_yolo/`` (``labels/``, ``detections/``, ``data.yaml``,
``sizes.txt``) and ``OUT_DIR/mini79_voc/`` (``Annotations/``, ``results/``) from
``detcal.data.bundled``'s ``coco_mini79`` set and the R-FCN R-101 detections:
the same boxes and scores in each format. Boxes only: the crowd annotations are
left out (neither YOLO nor VOC has crowd regions) and a box's area is its
``w * h`` (not the COCO mask area), so that COCO, YOLO and VOC readings give the
same numbers (tests/data_formats/test_formats_examples.py checks it). Numbers are written
in their shortest exact form (Python's ``repr``).

``OUT_DIR/mini79_lvis/`` (``instances.json``, ``detections.json``) reads the same
set in LVIS's federated terms. COCO annotates every class exhaustively, so
each class without a box in an image is verified absent (``neg_category_ids``)
and a class with a crowd region there is not exhaustively annotated
(``not_exhaustive_category_ids``; the crowd boxes themselves are left out, as
LVIS has none). ``frequency`` counts the images of this set holding a box of
the class, on thresholds scaled to 79 images: ``r`` one image, ``c`` 2 to 9,
``f`` 10 or more (LVIS counts training images: fewer than 10, 10 to 99, 100+).

``OUT_DIR/mini79_openimages/`` (``instances.json``, ``detections.json``,
``hierarchy.json``) reads it in Open Images terms: a crowd region is a group-of
box (``is_group_of``), the classes with a box are the verified positive
image-level labels and every other class (a parent class too, when none of its
children has a box) a verified negative one; COCO's 12
supercategories become parent classes (ids 101, ...; ``person`` is its own
supercategory and stays a root) in an Open Images hierarchy JSON, and each
detection is also written for its parent class with the same score, as a
challenge submission does.

``OUT_DIR/mini79_openimages/csv/`` holds the same Open Images set as the official
CSV files: ``boxes.csv`` (the V7 box columns, coordinates relative to the image
size), ``labels.csv`` (image-level labels, Confidence 1 present, 0 absent),
``classes.csv`` (``LabelName,DisplayName``; the label names are made up,
``/m/detcal_<id>``), ``hierarchy.json`` over those label names, ``sizes.txt``
and ``detections.csv`` in the challenge submission layout (``ImageId,
PredictionString``). The ImageIDs are the COCO file stems, so the image ids
read back are COCO's.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

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


def _coco(detector: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The bundled COCO files, without the segmentation polygons (box evaluation keeps each ``area``)."""
    gt = json.loads(bundled.path("coco_mini79").read_text())
    gt["annotations"] = [{k: v for k, v in a.items() if k != "segmentation"} for a in gt["annotations"]]
    return gt, json.loads(bundled.path("coco_mini79", detector).read_text())


def _dump(path: Path, doc: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=True) + "\n")
    return str(path)


def _by_image(anns: list[dict[str, Any]], crowd: bool) -> dict[int, set[int]]:
    out: dict[int, set[int]] = {}
    for a in anns:  # per annotation: its image's classes
        if bool(a.get("iscrowd", 0)) == crowd:
            out.setdefault(a["image_id"], set()).add(a["category_id"])
    return out


def write_lvis(out: Path, detector: str = DETECTOR) -> dict[str, str]:
    """The LVIS-shaped copy (module docstring)."""
    gt, dets = _coco(detector)
    cats = [c["id"] for c in gt["categories"]]
    boxes, crowds = _by_image(gt["annotations"], False), _by_image(gt["annotations"], True)
    n_img = {c: sum(c in v for v in boxes.values()) for c in cats}
    images = []
    for im in gt["images"]:  # per image: the federated lists
        have = boxes.get(im["id"], set())
        nel = sorted(crowds.get(im["id"], set()) & have)
        images.append({**im, "neg_category_ids": sorted(set(cats) - have - crowds.get(im["id"], set())),
                       "not_exhaustive_category_ids": nel})  # fmt: skip
    freq = {c: "r" if n_img[c] <= 1 else ("c" if n_img[c] < 10 else "f") for c in cats}
    doc = {
        "images": images,
        "annotations": [a for a in gt["annotations"] if not a.get("iscrowd", 0)],
        "categories": [{**c, "frequency": freq[c["id"]]} for c in gt["categories"]],
    }
    return {"gt": _dump(out / "instances.json", doc), "results": _dump(out / "detections.json", dets)}


def write_openimages(out: Path, detector: str = DETECTOR) -> dict[str, str]:
    """The Open Images-shaped copy (module docstring)."""
    gt, dets = _coco(detector)
    supers = sorted({c["supercategory"] for c in gt["categories"]} - {c["name"] for c in gt["categories"]})
    parent_id = {name: 101 + k for k, name in enumerate(supers)}
    parent_of = {c["id"]: parent_id[c["supercategory"]] for c in gt["categories"] if c["supercategory"] in parent_id}
    cats = [{"id": c["id"], "name": c["name"]} for c in gt["categories"]]
    cats += [{"id": i, "name": n} for n, i in parent_id.items()]
    boxes = _by_image(gt["annotations"], False)
    for i, cs in _by_image(gt["annotations"], True).items():
        boxes.setdefault(i, set()).update(cs)
    every = {c["id"] for c in cats}
    images = []
    for im in gt["images"]:  # per image: every class verified, present (with its parent) or absent
        pos = boxes.get(im["id"], set())
        up_pos = pos | {parent_of[c] for c in pos if c in parent_of}
        images.append({**im, "pos_category_ids": sorted(pos), "neg_category_ids": sorted(every - up_pos)})
    anns = [{**a, "is_group_of": bool(a.get("iscrowd", 0)), "iscrowd": 0} for a in gt["annotations"]]
    up = [{**d, "category_id": parent_of[d["category_id"]]} for d in dets if d["category_id"] in parent_of]
    tree = {
        "LabelName": "entity",
        "Subcategory": [{"LabelName": c["name"]} for c in gt["categories"] if c["id"] not in parent_of]
        + [
            {
                "LabelName": n,
                "Subcategory": [{"LabelName": c["name"]} for c in gt["categories"] if parent_of.get(c["id"]) == i],
            }
            for n, i in parent_id.items()
        ],
    }
    return {
        "gt": _dump(out / "instances.json", {"images": images, "annotations": anns, "categories": cats}),
        "results": _dump(out / "detections.json", dets + up),
        "hierarchy": _dump(out / "hierarchy.json", tree),
    }


def _mid(cat: int) -> str:
    return f"/m/detcal_{cat}"


def _csv(path: Path, header: list[str], rows: list[list[Any]]) -> str:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
    return str(path)


def _relabel(node: dict[str, Any], mid: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {"LabelName": mid.get(node["LabelName"], node["LabelName"])}
    if "Subcategory" in node:
        out["Subcategory"] = [_relabel(c, mid) for c in node["Subcategory"]]
    return out


def write_openimages_csv(src: dict[str, str], out: Path) -> dict[str, str]:
    """The Open Images JSON example ``src`` (``gt``, ``results``, ``hierarchy``) as the official CSVs."""
    gt = json.loads(Path(src["gt"]).read_text())
    out.mkdir(parents=True, exist_ok=True)
    images = {im["id"]: im for im in gt["images"]}
    stem = {i: Path(im["file_name"]).stem for i, im in images.items()}
    boxes = []
    for a in gt["annotations"]:  # per box: relative coordinates, V7 column order
        im = images[a["image_id"]]
        x, y, w, h = a["bbox"]
        W, H = im["width"], im["height"]
        rel = [repr(x / W), repr((x + w) / W), repr(y / H), repr((y + h) / H)]
        boxes.append([stem[im["id"]], "detcal", _mid(a["category_id"]), 1, *rel, 0, 0, int(a["is_group_of"]), 0, 0])
    labels = [
        [stem[im["id"]], "verification", _mid(c), conf]
        for im in gt["images"]
        for key, conf in (("pos_category_ids", 1), ("neg_category_ids", 0))
        for c in im[key]
    ]
    preds: dict[int, list[str]] = {}
    for d in json.loads(Path(src["results"]).read_text()):  # per detection, grouped by image in file order
        W, H = images[d["image_id"]]["width"], images[d["image_id"]]["height"]
        x, y, w, h = d["bbox"]
        rel = [x / W, y / H, (x + w) / W, (y + h) / H]
        preds.setdefault(d["image_id"], []).append(" ".join([_mid(d["category_id"]), *map(repr, [d["score"], *rel])]))
    mid = {c["name"]: _mid(c["id"]) for c in gt["categories"]}
    tree = _relabel(json.loads(Path(src["hierarchy"]).read_text()), mid)
    (out / "sizes.txt").write_text("".join(f"{stem[i]} {im['width']} {im['height']}\n" for i, im in images.items()))
    head = (
        "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf,IsDepiction,IsInside"
    )
    return {
        "gt": _csv(out / "boxes.csv", head.split(","), boxes),
        "labels": _csv(out / "labels.csv", ["ImageID", "Source", "LabelName", "Confidence"], labels),
        "names": _csv(
            out / "classes.csv", ["LabelName", "DisplayName"], [[mid[c["name"]], c["name"]] for c in gt["categories"]]
        ),
        "hierarchy": _dump(out / "hierarchy.json", tree),
        "sizes": str(out / "sizes.txt"),
        "results": _csv(
            out / "detections.csv", ["ImageId", "PredictionString"], [[stem[i], " ".join(p)] for i, p in preds.items()]
        ),
    }


def write_examples(out: Path, detector: str = DETECTOR) -> dict[str, dict[str, str]]:
    """Write the YOLO, VOC, LVIS and Open Images copies under ``out``; their paths by format and role."""
    ds, dets = example_set(detector)
    written = {}
    for fmt in ("yolo", "voc"):
        folder = out / f"mini79_{fmt}"
        folder.mkdir(parents=True, exist_ok=True)
        written[fmt] = get_format(fmt).write(folder, dets, ds, True)
    written["lvis"] = write_lvis(out / "mini79_lvis", detector)
    written["openimages"] = write_openimages(out / "mini79_openimages", detector)
    written["openimages_csv"] = write_openimages_csv(written["openimages"], out / "mini79_openimages" / "csv")
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "examples"
    for fmt, paths in write_examples(target).items():
        print(fmt, paths)
