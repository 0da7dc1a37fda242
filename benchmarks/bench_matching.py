"""Benchmark: detcal exact matching against pycocotools COCOeval at COCO-val scale.

Generates a seeded synthetic COCO-like set (default 5,000 images, ~7 GT per
image over 80 categories, ~1% crowd, ~60 detections per image clustered
around the GTs, 3-decimal scores so that score ties occur, 2-decimal boxes),
writes ``instances.json`` and ``results.json`` to a temporary directory and
measures, in the same process:

* detcal: JSON loading (``load_coco_instances`` + ``load_coco_results``) and
  ``match(..., iou_thresholds=(0.5,))`` (exclusive, max_dets 100);
* pycocotools: ``COCO(instances)`` + ``loadRes(results)`` and ``evaluate()``
  restricted to ``iouThrs=[0.5]``, ``areaRng=[all]``, ``maxDets=[100]``;

then prints a table with both ratios (pycocotools evaluate / detcal match,
and end-to-end including loading) and the parity of detcal against
pycocotools ``evalImgs`` (``dtMatches``/``dtIgnore``; must be 100 %).

Usage::

    python benchmarks/bench_matching.py --images 5000 --dets-per-image 60 --seed 0
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def make_coco(
    n_images: int,
    dets_per_image: float,
    seed: int,
    n_cats: int = 80,
    gt_per_image: float = 7.0,
    crowd_frac: float = 0.01,
) -> tuple[dict, list[dict]]:
    """Seeded synthetic COCO instances dict and results list (see the module docstring)."""
    rng = np.random.default_rng(seed)
    cat_ids = np.sort(rng.choice(np.arange(1, 91), n_cats, replace=False))
    width = rng.choice([640.0, 480.0, 500.0], n_images)
    height = rng.choice([480.0, 427.0, 375.0], n_images)
    ng = rng.poisson(gt_per_image, n_images)
    G = int(ng.sum())
    g_img = np.repeat(np.arange(n_images), ng)
    img_cats = cat_ids[rng.integers(0, n_cats, (n_images, 4))]  # a few categories per image
    g_cat = img_cats[g_img, rng.integers(0, 4, G)]
    W, H = width[g_img], height[g_img]
    w = np.round(W * rng.uniform(0.02, 0.6, G), 2)
    h = np.round(H * rng.uniform(0.02, 0.6, G), 2)
    x = np.round(rng.uniform(0, 1, G) * (W - w), 2)
    y = np.round(rng.uniform(0, 1, G) * (H - h), 2)
    crowd = rng.random(G) < crowd_frac
    nd = rng.poisson(dets_per_image, n_images)
    D = int(nd.sum())
    d_img = np.repeat(np.arange(n_images), nd)
    gstart = np.cumsum(ng) - ng
    has_gt = ng[d_img] > 0
    anchor = np.minimum(gstart[d_img] + (rng.random(D) * np.maximum(ng[d_img], 1)).astype(np.int64), max(G - 1, 0))
    near = has_gt & (rng.random(D) < 0.75)
    s = rng.uniform(0.03, 0.4, D)
    Wd, Hd = width[d_img], height[d_img]
    dw = np.where(near, w[anchor] * np.exp(rng.normal(0, 1, D) * s), Wd * rng.uniform(0.02, 0.5, D))
    dh = np.where(near, h[anchor] * np.exp(rng.normal(0, 1, D) * s), Hd * rng.uniform(0.02, 0.5, D))
    dx = np.where(near, x[anchor] + rng.normal(0, 1, D) * s * w[anchor], rng.uniform(0, 1, D) * (Wd - dw))
    dy = np.where(near, y[anchor] + rng.normal(0, 1, D) * s * h[anchor], rng.uniform(0, 1, D) * (Hd - dh))
    dcat = np.where(near & (rng.random(D) < 0.85), g_cat[anchor], img_cats[d_img, rng.integers(0, 4, D)])
    dx, dy = np.round(dx, 2), np.round(dy, 2)
    dw, dh = np.round(np.maximum(dw, 1.0), 2), np.round(np.maximum(dh, 1.0), 2)
    score = np.round(np.clip(rng.beta(2, 2, D) + 0.3 * near, 0.001, 1.0), 3)
    images = [
        {"id": int(i + 1), "width": float(width[i]), "height": float(height[i]), "file_name": f"{i + 1:012d}.jpg"}
        for i in range(n_images)
    ]
    gb = np.stack([x, y, w, h], 1).tolist()
    anns = [
        {
            "id": i + 1,
            "image_id": int(g_img[i]) + 1,
            "category_id": int(g_cat[i]),
            "bbox": gb[i],
            "area": gb[i][2] * gb[i][3],
            "iscrowd": int(crowd[i]),
        }
        for i in range(G)
    ]
    gt = {"images": images, "annotations": anns, "categories": [{"id": int(c), "name": f"cat{c}"} for c in cat_ids]}
    db = np.stack([dx, dy, dw, dh], 1).tolist()
    res = [
        {"image_id": int(d_img[i]) + 1, "category_id": int(dcat[i]), "bbox": db[i], "score": float(score[i])}
        for i in range(D)
    ]
    return gt, res


def _timed(fn, repeat: int = 1):
    """Run ``fn`` ``repeat`` times: (last output, best wall seconds, all wall seconds, best CPU seconds)."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return out, min(walls), walls, min(cpus)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--dets-per-image", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="detcal match repetitions (best time reported)")
    args = ap.parse_args(argv)

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from detcal.data.coco import load_coco_instances, load_coco_results
    from detcal.matching import match

    gt_dict, res_list = make_coco(args.images, args.dets_per_image, args.seed)
    with tempfile.TemporaryDirectory(prefix="detcal_bench_") as tmp:
        gt_path, res_path = Path(tmp) / "instances.json", Path(tmp) / "results.json"
        gt_path.write_text(json.dumps(gt_dict))
        res_path.write_text(json.dumps(res_list))
        del gt_dict, res_list

        ds, t_load_gt, _, _ = _timed(lambda: load_coco_instances(gt_path))
        dets, t_load_res, _, _ = _timed(lambda: load_coco_results(res_path, ds))
        result, t_match, all_match, c_match = _timed(lambda: match(dets, ds.gt, (0.5,), max_dets=100), args.repeat)

        quiet = contextlib.redirect_stdout(io.StringIO())
        with quiet:
            coco_gt, t_coco_gt, _, _ = _timed(lambda: COCO(str(gt_path)))
            coco_dt, t_coco_res, _, _ = _timed(lambda: coco_gt.loadRes(str(res_path)))
            E = COCOeval(coco_gt, coco_dt, "bbox")
            E.params.iouThrs = np.array([0.5])
            E.params.areaRng = [[0.0, 1e10]]
            E.params.areaRngLbl = ["all"]
            E.params.maxDets = [100]
            _, t_eval, _, c_eval = _timed(E.evaluate)

    D = len(dets)
    ref_match = np.zeros(D, np.int64)
    ref_ign = np.zeros(D, bool)
    ref_seen = np.zeros(D, bool)
    for e in E.evalImgs:
        if e is None or len(e["dtIds"]) == 0:
            continue
        rows = np.asarray(e["dtIds"], np.int64) - 1  # loadRes numbers results 1..n in file order
        ref_match[rows] = e["dtMatches"][0]
        ref_ign[rows] = e["dtIgnore"][0].astype(bool)
        ref_seen[rows] = True
    gi = result.gt_index[0]
    ours = np.where(gi >= 0, ds.gt.id[np.maximum(gi, 0)], 0)
    agree = (ours == ref_match) & (result.ignored[0] == ref_ign) & (result.considered == ref_seen)

    ours_e2e = t_load_gt + t_load_res + t_match
    ref_e2e = t_coco_gt + t_coco_res + t_eval
    print(
        f"data: {args.images} images, {len(ds.gt)} GT ({int(ds.gt.iscrowd.sum())} crowd), {D} detections, seed {args.seed}"
    )
    print(f"{'stage':<34}{'detcal [s]':>12}{'pycocotools [s]':>17}{'ratio':>9}")
    print(f"{'load GT json':<34}{t_load_gt:>12.3f}{t_coco_gt:>17.3f}{t_coco_gt / t_load_gt:>9.1f}")
    print(f"{'load results json':<34}{t_load_res:>12.3f}{t_coco_res:>17.3f}{t_coco_res / t_load_res:>9.1f}")
    print(f"{'match @0.5 / evaluate() @0.5':<34}{t_match:>12.3f}{t_eval:>17.3f}{t_eval / t_match:>9.1f}")
    print(f"{'end to end':<34}{ours_e2e:>12.3f}{ref_e2e:>17.3f}{ref_e2e / ours_e2e:>9.1f}")
    print(
        f"detcal match wall times: {', '.join(f'{t:.3f}' for t in all_match)} (first {all_match[0]:.3f}, "
        f"median {statistics.median(all_match):.3f}); ratio with the first call {t_eval / all_match[0]:.1f}"
    )
    print(
        f"CPU time (process_time): detcal match {c_match:.3f} s, pycocotools evaluate {c_eval:.3f} s, ratio {c_eval / c_match:.1f}"
    )
    print(
        f"parity vs evalImgs dtMatches/dtIgnore @0.5: {agree.mean() * 100:.4f} % of {D} detections "
        f"({int((~agree).sum())} differ); TP {int(result.matched[0].sum())}, ignored {int(result.ignored[0].sum())}"
    )
    return 0 if agree.all() else 1


if __name__ == "__main__":
    sys.exit(main())
