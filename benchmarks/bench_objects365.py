"""Objects365-shaped benchmark: ``detcal-evaluate`` on a generated COCO-format set of 365 categories.

    python benchmarks/bench_objects365.py                    # 20,000 images, about 1.5M detections
    python benchmarks/bench_objects365.py --images 80000     # Objects365 val's size, about 6M detections
    python benchmarks/bench_objects365.py --with-accuracy    # also COCO AP/AR over the 365 classes

Objects365 is a COCO-format set (365 categories, Objects365 v2 val: 80,000
images). The generator is :func:`detcal.data.synthetic.generate_coco_scale`'s
(boxes, duplicates, crowd boxes, scores), run in blocks of 10,000 images and
written block by block as benchmarks/bench_scale.py does, with its K = 8 classes
spread over 365: the boxes of class ``c`` in image ``i`` (and the detections
labelled ``c`` there) become class ``1 + (c_index + K * h(i, c)) mod 365``
with ``h`` a fixed hash in 0..ceil(365 / K) - 1, so every one of the 365
classes has boxes and a detection keeps its relation to the boxes of its
image (person, 40% of the generator's boxes, becomes 46 frequent classes). The evaluation is
the large-set path of docs/scale.md (the results file read in blocks of
4 MiB, detections matched in shards): ``detcal-evaluate data=coco`` with 10
IoU thresholds, every confidence metric, plots, bootstrap and the
per-detection CSV off. Prints the wall time and the peak RSS (a fresh process).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

N_CATEGORIES = 365


def _bench_scale() -> Any:
    spec = importlib.util.spec_from_file_location("bench_scale", Path(__file__).with_name("bench_scale.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def spread(image_id: np.ndarray, category: np.ndarray, index: dict[int, int]) -> np.ndarray:
    """The 365-class id of each (image, generated class id) pair (the module docstring's rule; ``index``:
    generated class id -> 0..K-1)."""
    k = len(index)
    c = np.vectorize(index.__getitem__, otypes=[np.int64])(category) if len(category) else np.zeros(0, np.int64)
    h = (image_id * 2654435761 + c * 40503) % 2**32 % -(-N_CATEGORIES // k)
    return 1 + (c + k * h) % N_CATEGORIES


def make_files(root: Path, n_images: int, seed: int) -> tuple[Path, Path, int]:
    """Instances and results files of ``n_images`` images (cached in ``root``)."""
    from detcal.core.types import Dataset, GroundTruth, Images
    from detcal.data.coco import detections_to_coco_list, write_coco_instances

    bs = _bench_scale()
    tag = f"o365_{n_images}_seed{seed}"
    gt_path, res_path, meta = root / f"instances_{tag}.json", root / f"results_{tag}.json", root / f"meta_{tag}.json"
    if gt_path.exists() and res_path.exists() and meta.exists():
        return gt_path, res_path, int(json.loads(meta.read_text())["detections"])
    root.mkdir(parents=True, exist_ok=True)
    images, gts, n = [], [], 0
    tmp = res_path.with_suffix(".part")
    with open(tmp, "wb") as fh:
        fh.write(b"[")
        for k in range(-(-n_images // bs.BLOCK_IMAGES)):  # one block of 10,000 images at a time
            ds, dets = bs._block(k, seed, k * bs.BLOCK_IMAGES)
            index = {c: i for i, c in enumerate(sorted(ds.categories))}
            last = min(n_images - k * bs.BLOCK_IMAGES, bs.BLOCK_IMAGES)
            ds_img = ds.images.select(ds.images.id <= last)
            g = ds.gt.select(ds.gt.image_id <= last)
            dets = dets.select(np.flatnonzero(dets.image_id <= last + k * bs.BLOCK_IMAGES))
            dets = dataclasses.replace(dets, category=spread(dets.image_id, dets.category, index))
            off = k * bs.BLOCK_IMAGES
            images.append((ds_img.id + off, ds_img.width, ds_img.height))
            gts.append((g.image_id + off, g.box, spread(g.image_id + off, g.category, index), g.iscrowd, g.ignore))
            text = json.dumps(detections_to_coco_list(dets), allow_nan=False).encode()
            fh.write((b"," if n else b"") + text[1:-1])
            n += len(dets)
            print(f"  generated {n:,} detections", file=sys.stderr, end="\r")
        fh.write(b"]\n")
    dataset = Dataset(
        images=Images(*(np.concatenate([i[j] for i in images]) for j in range(3))),
        gt=GroundTruth(*(np.concatenate([g[j] for g in gts]) for j in range(5))),
        categories={c: f"object{c}" for c in range(1, N_CATEGORIES + 1)},
    )
    write_coco_instances(gt_path, dataset)
    os.replace(tmp, res_path)
    meta.write_text(json.dumps({"detections": n, "images": len(dataset.images), "gt": len(dataset.gt)}))
    print(file=sys.stderr)
    return gt_path, res_path, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=20_000)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/detcal-bench-objects365"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--with-accuracy", action="store_true", help="also COCO AP/AR, LRP, LaECE")
    args = ap.parse_args()
    gt, res, n = make_files(args.cache, args.images, args.seed)
    cats = {a["category_id"] for a in json.loads(gt.read_text())["annotations"]}
    extra = [] if args.with_accuracy else ["accuracy.enabled=false", "localisation.enabled=false"]
    wall, rss, timing = _bench_scale().run(gt, res, args.cache / f"run_{args.images}", extra)
    print("| images | categories with boxes | detections | results JSON | wall time | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(
        f"| {args.images:,} | {len(cats)} | {n:,} | {res.stat().st_size / 1e6:.0f} MB | {wall:.1f} s | {rss:.0f} MB |"
    )
    print(f"timing_s: {timing}; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
