"""Scale benchmark: ``detcal-evaluate`` on COCO results files of 1M, 3M and 10M
detections, wall time and peak RSS per size, each in a fresh process.

    python benchmarks/bench_scale.py                       # 1M, 3M, 10M (files cached under /tmp/detcal-bench-scale/)
    python benchmarks/bench_scale.py --sizes 1 3           # millions of detections
    python benchmarks/bench_scale.py --chunk-bytes 0       # data.chunk_bytes=0: load the results whole (no chunks)
    python benchmarks/bench_scale.py --with-accuracy       # also COCO AP/AR, LRP, LaECE

The files: :func:`detcal.data.synthetic.generate_coco_scale` with
``dets_per_image=100`` (75 detections per image on average, boxes rounded to
2 decimals, no uncertainty fields: about 100 bytes a record), generated in
blocks of 10,000 images (seed ``seed * 1000 + block``, image ids offset) and
written block by block, so the 10M file (about 1 GB) is never held in memory
as records. Cached under ``--cache`` between runs (delete the folder to
regenerate).

The command: ``python -m detcal.apps.evaluate`` (10 IoU thresholds
0.50:0.95, every confidence metric, metrics.json; plots, bootstrap and the
per-detection CSV off; accuracy and localisation off unless
``--with-accuracy``). Peak RSS is ``getrusage(RUSAGE_CHILDREN).ru_maxrss``
read after each run, in a fresh wrapper process per size, so it is the
command's own peak.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

BLOCK_IMAGES = 10_000
DETS_PER_IMAGE = 100  # U{50..100} per image: 75 on average

MEASURE = """
import resource, subprocess, sys, time
t0 = time.perf_counter()
rc = subprocess.run(sys.argv[1:]).returncode
dt = time.perf_counter() - t0
print(rc, dt, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _block(k: int, seed: int, offset: int):
    """Dataset and detections of image block ``k``, image ids offset by ``offset``."""
    import dataclasses

    from detcal.data.synthetic import generate_coco_scale

    ds, dets = generate_coco_scale(n_images=BLOCK_IMAGES, dets_per_image=DETS_PER_IMAGE, seed=seed * 1000 + k)
    dets = dataclasses.replace(
        dets, box=np.round(dets.box, 2), image_id=dets.image_id + offset, proposal=None, delta_mean=None, delta_std=None
    )
    return ds, dets


def make_files(root: Path, millions: float, seed: int) -> tuple[Path, Path, int]:
    """Instances + results files of about ``millions`` x 1e6 detections (cached in ``root``)."""
    from detcal.core.types import Dataset, GroundTruth, Images
    from detcal.data.coco import detections_to_coco_list, write_coco_instances

    tag = f"{millions:g}M_seed{seed}"
    gt_path, res_path, meta = root / f"instances_{tag}.json", root / f"results_{tag}.json", root / f"meta_{tag}.json"
    if gt_path.exists() and res_path.exists() and meta.exists():
        return gt_path, res_path, int(json.loads(meta.read_text())["detections"])
    root.mkdir(parents=True, exist_ok=True)
    target = int(millions * 1e6)
    images, gts, cats, n, k = [], [], None, 0, 0
    tmp = res_path.with_suffix(".part")
    with open(tmp, "wb") as fh:
        fh.write(b"[")
        while n < target:
            ds, dets = _block(k, seed, k * BLOCK_IMAGES)
            if n + len(dets) > target:  # the last block: whole images up to the target
                last = dets.image_id[target - n - 1]
                dets = dets.select(np.flatnonzero(dets.image_id <= last))
                keep_img = ds.images.id <= last - k * BLOCK_IMAGES
                ds = Dataset(
                    images=ds.images.select(keep_img),
                    gt=ds.gt.select(ds.gt.image_id <= last - k * BLOCK_IMAGES),
                    categories=ds.categories,
                )
            images.append((ds.images.id + k * BLOCK_IMAGES, ds.images.width, ds.images.height))
            g = ds.gt
            gts.append((g.image_id + k * BLOCK_IMAGES, g.box, g.category, g.iscrowd, g.ignore))
            cats = ds.categories
            text = json.dumps(detections_to_coco_list(dets), allow_nan=False).encode()
            fh.write((b"," if n else b"") + text[1:-1])
            n += len(dets)
            k += 1
            print(f"  generated {n:,} detections", file=sys.stderr, end="\r")
        fh.write(b"]\n")
    ids = np.concatenate([i[0] for i in images])
    dataset = Dataset(
        images=Images(
            id=ids, width=np.concatenate([i[1] for i in images]), height=np.concatenate([i[2] for i in images])
        ),
        gt=GroundTruth(*(np.concatenate([g[j] for g in gts]) for j in range(5))),
        categories=cats,
    )
    write_coco_instances(gt_path, dataset)
    os.replace(tmp, res_path)
    meta.write_text(json.dumps({"detections": n, "images": int(len(ids)), "gt": int(len(dataset.gt))}))
    print(file=sys.stderr)
    return gt_path, res_path, n


def run(gt: Path, res: Path, run_dir: Path, extra: list[str]) -> tuple[float, float, dict]:
    """(wall s, peak RSS MB, timing_s of metrics.json) of one ``detcal-evaluate`` in a fresh process."""
    thr = "[" + ",".join(f"{t:.2f}" for t in np.linspace(0.5, 0.95, 10)) + "]"
    cmd = [
        sys.executable,
        "-m",
        "detcal.apps.evaluate",
        "data=coco",
        f"data.gt={gt}",
        f"data.results={res}",
        f"matching.iou_thresholds={thr}",
        "bootstrap.n=0",
        "output.plots=false",
        "output.detections_csv=false",
        "output.print_summary=false",
        "output.progress=false",
        f"hydra.run.dir={run_dir}",
        *extra,
    ]
    out = subprocess.run([sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True)
    line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    parts = line.split()
    if len(parts) != 3 or parts[0] != "0":
        raise SystemExit(f"detcal-evaluate failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    timing = json.loads((run_dir / "metrics.json").read_text()).get("timing_s", {})
    return float(parts[1]), int(parts[2]) / 1024.0, timing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1, 3, 10], help="millions of detections")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/detcal-bench-scale"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk-bytes", type=int, default=None, help="data.chunk_bytes (default: the config's)")
    ap.add_argument("--with-accuracy", action="store_true", help="also COCO AP/AR, LRP, LaECE")
    ap.add_argument("--workers", type=int, default=1, help="parallel.workers")
    args = ap.parse_args()
    extra = [] if args.with_accuracy else ["accuracy.enabled=false", "localisation.enabled=false"]
    if args.chunk_bytes is not None:
        extra.append(f"data.chunk_bytes={args.chunk_bytes}")
    if args.workers > 1:
        extra.append(f"parallel.workers={args.workers}")
    rows = []
    for m in args.sizes:
        gt, res, n = make_files(args.cache, m, args.seed)
        run_dir = Path(tempfile.mkdtemp(prefix=f"run_{m:g}M-", dir=args.cache))  # a run directory holds one run
        try:
            wall, rss, timing = run(gt, res, run_dir, extra)
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)
        rows.append((n, res.stat().st_size / 1e6, wall, rss, timing))
        print(f"{n:>11,} detections {rows[-1][1]:8.0f} MB  {wall:8.1f} s  peak RSS {rss:8.0f} MB  {timing}", flush=True)
    print(f"\nload average: {os.getloadavg()}")
    print("| detections | results JSON | wall time | peak RSS |\n|---:|---:|---:|---:|")
    for n, mb, wall, rss, _ in rows:
        print(f"| {n:,} | {mb:.0f} MB | {wall:.1f} s | {rss:.0f} MB |")


if __name__ == "__main__":
    main()
