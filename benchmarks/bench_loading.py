"""Benchmark: loading COCO instances + results files, and writing the per-detection table.

Generates a seeded COCO-val-scale set with :func:`detcal.data.synthetic.generate_coco_scale`
(default 5,000 images, ~60 detections per image, ~300k detections carrying
delta records), writes ``instances.json`` and ``results.json`` to a temporary
directory and times, in the same process (best of ``--repeat``):

* ``json.load`` of both files (the parse alone, stdlib);
* pycocotools ``COCO(instances)`` + ``loadRes(results)``;
* detcal ``load_coco_instances`` + ``load_coco_results`` (parse + columns + checks);
* detcal ``iter_coco_results`` (chunked reader, bounded memory), when present;
* with ``--csv``: ``match`` at 10 IoU thresholds, then the per-detection CSV
  (``detections_columns`` + CSV bytes) and Parquet (pyarrow) of the result.

Usage::

    python benchmarks/bench_loading.py --images 5000 --dets-per-image 60 --repeat 3 --csv
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import tempfile
import time
from pathlib import Path


def _best(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--dets-per-image", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--csv", action="store_true", help="also time matching and the per-detection CSV/Parquet")
    ap.add_argument("--no-pycocotools", action="store_true")
    args = ap.parse_args()

    from detcal.data.coco import load_coco_instances, load_coco_results, write_coco_instances, write_coco_results
    from detcal.data.synthetic import generate_coco_scale

    ds, dets = generate_coco_scale(args.images, args.dets_per_image, seed=args.seed)
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as d:
        gt_path, res_path = Path(d) / "instances.json", Path(d) / "results.json"
        write_coco_instances(gt_path, ds)
        write_coco_results(res_path, dets)
        mb = res_path.stat().st_size / 1e6
        print(f"{len(ds.images)} images, {len(ds.gt)} GT, {len(dets)} detections; results.json {mb:.1f} MB")

        def stdlib_json():
            with open(gt_path) as f:
                a = json.load(f)
            with open(res_path) as f:
                b = json.load(f)
            return a, b

        rows.append(("json.load (both files)", _best(stdlib_json, args.repeat)[0]))
        if not args.no_pycocotools:
            from pycocotools.coco import COCO

            def pycoco():
                with contextlib.redirect_stdout(io.StringIO()):
                    gt = COCO(str(gt_path))
                    return gt.loadRes(str(res_path))

            rows.append(("pycocotools COCO() + loadRes", _best(pycoco, args.repeat)[0]))

        def detcal_load():
            g = load_coco_instances(gt_path)
            return g, load_coco_results(res_path, g)

        t_detcal, (g, r) = _best(detcal_load, args.repeat)
        rows.append(("detcal load_coco_instances + load_coco_results", t_detcal))
        try:
            from detcal.data.coco_chunks import iter_coco_results
        except ImportError:
            iter_coco_results = None
        if iter_coco_results is not None:

            def chunked():
                return sum(len(c) for c in iter_coco_results(res_path, g))

            t, n = _best(chunked, args.repeat)
            assert n == len(r)
            rows.append(("detcal iter_coco_results (32 MiB blocks)", t))

        if args.csv:
            from detcal.matching import match

            thresholds = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
            t, mr = _best(lambda: match(r, g.gt, thresholds, images=g.images), 1)
            rows.append(("match at 10 IoU thresholds", t))
            try:
                from detcal.reports.detections_csv import (
                    columns_to_csv_bytes,
                    detections_columns,
                    write_detections_parquet,
                )
            except ImportError:  # an older detcal: the per-cell writer
                from detcal.reports.detections_csv import format_csv

                rows.append(
                    ("per-detection CSV (format_csv)", _best(lambda: format_csv(r, mr, g.gt.id), args.repeat)[0])
                )
            else:
                cols = detections_columns(r, mr, g.gt.id)
                t, text = _best(lambda: columns_to_csv_bytes(detections_columns(r, mr, g.gt.id)), args.repeat)
                rows.append((f"per-detection CSV ({len(text) / 1e6:.0f} MB)", t))
                try:
                    import pyarrow  # noqa: F401
                except ImportError:
                    pass
                else:
                    out = Path(d) / "d.parquet"
                    t, _ = _best(lambda: write_detections_parquet(out, cols), args.repeat)
                    rows.append((f"per-detection Parquet ({out.stat().st_size / 1e6:.0f} MB)", t))

    width = max(len(k) for k, _ in rows)
    ref = dict(rows).get("pycocotools COCO() + loadRes")
    for k, v in rows:
        ratio = f"  ({ref / v:5.1f}x pycocotools loading)" if ref and "detcal" in k else ""
        print(f"{k:<{width}}  {v:7.3f} s{ratio}")
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
