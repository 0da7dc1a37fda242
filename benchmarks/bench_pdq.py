"""Benchmark: PDQ (variant pdq_evaluation) on the bundled 79-image set and the bundled 5,000-image set.

Prints, for each case, detcal's wall time (best of ``--repeats``) and its PDQ / TP / FP / FN:

* 79 images, the PDQ reference test set of tests/data/pdq_reference (SSD Inception v2 detections with
  per-corner covariances, or as uniform boxes), with segmentation-mask or box ground truth;
* 5,000 images (coco_tfzoo, box ground truth: the bundle has no masks), every detection given the same
  corner covariance ``--fixed-cov`` px^2, with 1 and ``--workers`` processes.

When the reference implementation is importable (``--reference-dir`` a checkout of
david2611/pdq_evaluation, with its requirements installed; it is not a dependency of detcal), the
79-image cases are also run through it, in this process, by its COCO path (its converter, its COCO
ground-truth reader, its box-detection reader, ``PDQ(filter_gts=False, segment_mode=False,
greedy_mode=False).score``), and the time ratio reference / detcal is printed.

    python benchmarks/bench_pdq.py [--reference-dir ~/src/pdq_evaluation] [--workers 2] [--skip-5k]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from detcal.data import bundled  # noqa: E402
from detcal.data.coco import load_coco_instances, load_coco_results  # noqa: E402
from detcal.data.coco_masks import load_class_scores, load_segmentations  # noqa: E402
from detcal.metrics.pdq import pdq  # noqa: E402

REF_DATA = ROOT / "tests" / "data" / "pdq_reference"


def _best(fn, repeats: int):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def _reference(ref_dir: str, gt_file: Path, det_file: Path, bbox_gt: bool):
    """PDQ by the reference implementation's COCO path; returns (seconds, PDQ, TP, FP, FN)."""
    sys.path.insert(0, ref_dir)
    import pdq as ref_pdq  # the reference's modules
    import read_files

    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        rvc = Path(tmp) / "dets_rvc.json"
        read_files.convert_coco_det_to_rvc_det(str(det_file), str(gt_file), str(rvc))
        gts, classes = read_files.read_COCO_gt(str(gt_file), ret_classes=True, bbox_gt=bbox_gt)
        dets = read_files.read_pbox_json(str(rvc), classes)
        ev = ref_pdq.PDQ(filter_gts=False, segment_mode=False, greedy_mode=False)
        value = ev.score(list(zip(gts, dets)))
        tp, fp, fn = ev.get_assignment_counts()
    return time.perf_counter() - t, float(value), tp, fp, fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reference-dir", default=None, help="a checkout of david2611/pdq_evaluation (optional)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--fixed-cov", type=float, default=25.0, help="px^2 on each corner for the 5,000-image set")
    ap.add_argument("--skip-5k", action="store_true")
    args = ap.parse_args()

    gt_file = bundled.path("coco_mini79")
    ds = load_coco_instances(gt_file)
    t_seg, segs = _best(lambda: load_segmentations(gt_file, ds), 1)
    print(f"79 images: ground-truth masks rasterised in {t_seg:.2f} s (624 objects)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("pbox", "bbox"):
            f = Path(tmp) / f"dt_{kind}_coco.json"
            f.write_bytes(gzip.decompress((REF_DATA / f"dt_{kind}_coco.json.gz").read_bytes()))
            d = load_coco_results(f, ds)
            cs = load_class_scores(f, len(d))
            for mask in ("segmentation", "box"):
                sec, r = _best(lambda: pdq(ds, d, gt_mask=mask, segmentations=segs, class_scores=cs), args.repeats)
                row = {
                    "set": "79 images",
                    "detections": kind,
                    "gt": mask,
                    "detcal_s": round(sec, 2),
                    "PDQ": round(r.value, 6),
                    "TP/FP/FN": f"{r.extra['TP']}/{r.extra['FP']}/{r.extra['FN']}",
                }
                if args.reference_dir:
                    rs, rv, tp, fp, fn = _reference(args.reference_dir, gt_file, f, mask == "box")
                    row.update(
                        reference_s=round(rs, 2),
                        reference_PDQ=round(rv, 6),
                        ratio=round(rs / sec, 1),
                        reference_counts=f"{tp}/{fp}/{fn}",
                    )
                rows.append(row)
                print(json.dumps(row))
    if not args.skip_5k:
        ds5, d5 = bundled.load("coco_tfzoo", "ssd-inception-v2")
        for w in sorted({1, args.workers}):
            sec, r = _best(lambda: pdq(ds5, d5, fixed_cov=args.fixed_cov, workers=w), args.repeats)
            row = {
                "set": "5,000 images",
                "detections": f"ssd-inception-v2 ({len(d5)}), fixed_cov={args.fixed_cov}",
                "gt": "box",
                "workers": w,
                "detcal_s": round(sec, 2),
                "PDQ": round(r.value, 6),
                "TP/FP/FN": f"{r.extra['TP']}/{r.extra['FP']}/{r.extra['FN']}",
            }
            rows.append(row)
            print(json.dumps(row))
    print()
    keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(str(r.get(k, "")) for k in keys) + " |")


if __name__ == "__main__":
    main()
