"""End-to-end benchmark: the whole ``detcal-evaluate`` command against the mAP
run users already do (pycocotools load + evaluate + accumulate + summarize),
timed in the same run on the same files.

    python benchmarks/bench_evaluate.py                      # COCO-val scale: 5,000 images, ~300k detections
    python benchmarks/bench_evaluate.py --images 20000       # ~1.2M detections
    python benchmarks/bench_evaluate.py --uncertainty        # results also carry box uncertainty (delta records)

detcal: a fresh process running ``python -m detcal.apps.evaluate`` (interpreter
start, imports, Hydra, load, match at the 10 COCO thresholds 0.50:0.95, every
confidence metric, box-uncertainty metrics when present, metrics.json and
summary.md; plots, bootstrap and the per-detection CSV off; once in one
process, once with ``parallel.workers=N``, and once with COCO AP/AR, LRP and
LaECE added, which are on by default). pycocotools: a
fresh process running COCO(), loadRes, evaluate, accumulate, summarize.
Prints both wall times and the ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PYCOCO = """
import sys, contextlib, io
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1]); dt = gt.loadRes(sys.argv[2])
    E = COCOeval(gt, dt, "bbox"); E.evaluate(); E.accumulate(); E.summarize()
print(E.stats[0])
"""


def make_files(root: Path, images: int, dets_per_image: int, uncertainty: bool, seed: int) -> tuple[Path, Path, int]:
    from detcal.data.coco import write_coco_instances, write_coco_results
    from detcal.data.synthetic import generate_coco_scale

    ds, dets = generate_coco_scale(n_images=images, dets_per_image=dets_per_image, seed=seed)
    box = np.round(dets.box, 2)  # as results files usually carry them
    dets = dataclasses.replace(dets, box=box)
    if not uncertainty:
        dets = dataclasses.replace(dets, proposal=None, delta_mean=None, delta_std=None)
    gt, res = root / "instances.json", root / "results.json"
    write_coco_instances(gt, ds)
    write_coco_results(res, dets)
    return gt, res, len(dets)


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode:
        raise SystemExit(f"{cmd[:4]} failed:\n{proc.stderr[-3000:]}")
    return dt, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--dets-per-image", type=int, default=60)
    ap.add_argument("--uncertainty", action="store_true", help="results carry delta records (box uncertainty)")
    ap.add_argument("--repeat", type=int, default=1, help="best of N runs of each")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2, help="also time parallel.workers=N (0: skip)")
    ap.add_argument(
        "--files",
        type=Path,
        default=None,
        help="keep the generated files in this folder and reuse them on the next run",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gt, res = (args.files or root) / "instances.json", (args.files or root) / "results.json"
        if args.files is not None and gt.exists() and res.exists():
            from detcal.data.coco import load_coco_results

            n = len(load_coco_results(res))
        else:
            if args.files is not None:
                args.files.mkdir(parents=True, exist_ok=True)
            gt, res, n = make_files(args.files or root, args.images, args.dets_per_image, args.uncertainty, args.seed)
        size = res.stat().st_size / 1e6
        thr = "[" + ",".join(f"{t:.2f}" for t in np.linspace(0.5, 0.95, 10)) + "]"
        detcal_cmd = [
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
        ]
        coco_cmd = [sys.executable, "-c", PYCOCO, str(gt), str(res)]
        no_acc = detcal_cmd + ["accuracy.enabled=false", "localisation.enabled=false"]
        runs = itertools.count()
        last_run: list[Path] = []

        def detcal(cmd: list[str]) -> float:
            """Wall seconds of one run of ``cmd`` in a run directory of its own (a run directory holds one run)."""
            last_run[:] = [root / f"run{next(runs)}"]
            return timed(cmd + [f"hydra.run.dir={last_run[0]}"], root)[0]

        def stages() -> dict:
            return json.loads((last_run[0] / "metrics.json").read_text()).get("timing_s", {})

        par = [f"parallel.workers={args.workers}"]
        t_cal = min(detcal(no_acc) for _ in range(args.repeat))
        timing_cal = stages()
        t_par = min(detcal(no_acc + par) for _ in range(args.repeat)) if args.workers > 1 else None
        t_det = min(detcal(detcal_cmd) for _ in range(args.repeat))
        timing = stages()
        t_det_par = min(detcal(detcal_cmd + par) for _ in range(args.repeat)) if args.workers > 1 else None
        t_coco = min(timed(coco_cmd, root)[0] for _ in range(args.repeat))
    print(
        f"{args.images} images, {n} detections ({size:.0f} MB results JSON), 10 IoU thresholds, "
        f"uncertainty={'yes' if args.uncertainty else 'no'}"
    )
    print(f"  detcal-evaluate, calibration only           {t_cal:8.2f} s   stages: {timing_cal}")
    if t_par is not None:
        print(f"  ... with parallel.workers={args.workers}                 {t_par:8.2f} s")
    print(f"  detcal-evaluate, + COCO AP/AR, LRP, LaECE   {t_det:8.2f} s   stages: {timing}")
    if t_det_par is not None:
        print(f"  ... with parallel.workers={args.workers}                 {t_det_par:8.2f} s")
    print(f"  pycocotools load+evaluate+accumulate+summ.  {t_coco:8.2f} s")
    print(f"  ratio pycocotools / detcal (calibration)    {t_coco / t_cal:8.1f}x")
    if t_par is not None:
        print(f"  ratio pycocotools / detcal ({args.workers} workers)      {t_coco / t_par:8.1f}x")
    print(f"  ratio pycocotools / detcal (with AP)        {t_coco / t_det:8.1f}x")
    if t_det_par is not None:
        print(f"  ratio pycocotools / detcal (AP, {args.workers} workers)  {t_coco / t_det_par:8.1f}x")


if __name__ == "__main__":
    main()
