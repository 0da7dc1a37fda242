"""Build the compact bundled real-detector data of detcal.data.bundled.

Usage::

    python scripts/build_bundled.py SOURCE_DIR

``SOURCE_DIR`` holds ``coco_val2017_tfzoo/`` (``gt.json.gz``,
``dt_<detector>.json.gz`` and ``netcal_records_v1.1/<detector>-iou-0.60.npz``)
and ``coco_val2017_mini79/`` (``gt.json``, ``dt_<detector>.json``); see
docs/real_detectors.md for where these come from.

Writes ``detcal/data/bundled/coco_tfzoo.npz`` (one compressed npz: images,
categories, ground truth and the four detectors, boxes as the records'
float32 relative [ymin, xmin, ymax, xmax], lossless) and
``detcal/data/bundled/coco_mini79/*.json.gz`` (the 79-image files, gzipped,
byte-for-byte otherwise).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import numpy as np

DETECTORS = ("faster-rcnn-resnet-50", "rfcn-resnet-101", "ssd-inception-v2", "ssd-resnet-50-v1")
OUT = Path(__file__).resolve().parents[1] / "detcal" / "data" / "bundled"


def _cat(objs, dtype, width=None):
    parts = [np.asarray(o, dtype=np.float64 if dtype is np.float32 else dtype) for o in objs]
    if width:
        parts = [p.reshape(-1, width) for p in parts]
    out = np.concatenate(parts)
    if dtype is np.float32:
        f32 = out.astype(np.float32)
        assert (f32.astype(np.float64) == out).all(), "float32 storage would lose bits"
        return f32
    return out


def build_tfzoo(src: Path) -> None:
    gt_doc = json.loads(gzip.open(src / "gt.json.gz").read())
    by_name = {im["file_name"]: im for im in gt_doc["images"]}
    arrays: dict[str, np.ndarray] = {}
    ref_names = None
    for det in DETECTORS:
        rec = np.load(src / "netcal_records_v1.1" / f"{det}-iou-0.60.npz", allow_pickle=True)
        names = rec["filenames"]
        if ref_names is None:
            ref_names = names
            ims = [by_name[str(n)] for n in names]
            arrays["image_id"] = np.array([im["id"] for im in ims], np.int64)
            arrays["image_width"] = np.array([im["width"] for im in ims], np.int32)
            arrays["image_height"] = np.array([im["height"] for im in ims], np.int32)
            arrays["image_file_name"] = np.asarray(names).astype(str)
            n_gt = np.array([len(c) for c in rec["gt_classes"]])
            arrays["gt_image"] = np.repeat(np.arange(len(names), dtype=np.int16), n_gt)
            arrays["gt_category"] = _cat(rec["gt_classes"], np.int64).astype(np.uint8)
            arrays["gt_box_rel"] = _cat(rec["gt_boxes"], np.float32, 4)
            cats = sorted(gt_doc["categories"], key=lambda c: c["id"])
            arrays["category_id"] = np.array([c["id"] for c in cats], np.int64)
            arrays["category_name"] = np.array([c["name"] for c in cats]).astype(str)
        else:
            assert (names == ref_names).all()
        n_det = np.array([len(c) for c in rec["classes"]])
        score = _cat(rec["scores"], np.float32)
        dt = json.loads(gzip.open(src / f"dt_{det}.json.gz").read())
        assert len(dt) == len(score)
        assert np.allclose([d["score"] for d in dt], score, atol=1e-6)
        m060 = _cat(rec["matched"], np.int64).astype(bool)
        assert (np.array([d["netcal_matched_iou060"] for d in dt], bool) == m060).all()
        arrays[f"{det}/image"] = np.repeat(np.arange(len(names), dtype=np.int16), n_det)
        arrays[f"{det}/category"] = _cat(rec["classes"], np.int64).astype(np.uint8)
        arrays[f"{det}/score"] = score
        arrays[f"{det}/box_rel"] = _cat(rec["pred_boxes"], np.float32, 4)
        arrays[f"{det}/netcal_matched_060"] = m060
        arrays[f"{det}/netcal_matched_075"] = np.array([d["netcal_matched_iou075"] for d in dt], bool)
    np.savez_compressed(OUT / "coco_tfzoo.npz", **arrays)


def build_mini79(src: Path) -> None:
    out = OUT / "coco_mini79"
    out.mkdir(exist_ok=True)
    for f in sorted(src.glob("*.json")):
        with open(f, "rb") as fi, gzip.GzipFile(out / (f.name + ".gz"), "wb", mtime=0) as fo:
            shutil.copyfileobj(fi, fo)


if __name__ == "__main__":
    root = Path(sys.argv[1])
    build_tfzoo(root / "coco_val2017_tfzoo")
    build_mini79(root / "coco_val2017_mini79")
