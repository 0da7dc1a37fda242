"""Benchmark of the streaming evaluator (detcal.DetectionCalibration) in a training loop's shape,
against torchmetrics' MeanAveragePrecision on the same stream and detcal.evaluate on the same files,
all measured in this run.

    python benchmarks/bench_streaming.py                   # 5,000 images x 100 detections (COCO-val scale)
    python benchmarks/bench_streaming.py --images 1000     # quicker
    python benchmarks/bench_streaming.py --no-map          # without torchmetrics' MAP compute (minutes at 5,000)

Prints (and writes as JSON with --json):

* update: seconds per image of ``update`` on batches of 8 images (torch float32 tensors, as a model
  emits them, and numpy float64), beside ``MeanAveragePrecision.update`` on the same batches;
* compute: ``DetectionCalibration.compute()`` at N images against ``detcal.evaluate`` on the
  COCO files (load + the same evaluation), and ``MeanAveragePrecision.compute()`` on the same stream;
* memory: the bytes per detection kept, and the peak heap (tracemalloc, numpy buffers included) and
  peak RSS of a fresh process that streams + computes against one that evaluates the files.

The set is detcal's synthetic COCO-scale generator (80 categories, about 7 GT per image), filled up
to exactly 100 detections per image; the spec is the default one with ``--bootstrap``
resamples (default 0: the bootstrap costs the same in both paths and would dominate). The memory
children stream numpy float32 arrays (the state torch float32 tensors give, without torch's own
few hundred MB of RSS); peak RSS is VmHWM of each fresh process.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np


def _records(images: int, seed: int = 0):
    """The synthetic COCO-scale set with exactly 100 detections per image: the generator's 50 to 100,
    then copies of them (box moved by 0.5 px per round, score halved per round) up to 100."""
    from detcal.core.types import Detections
    from detcal.data.synthetic import generate_coco_scale

    ds, d = generate_coco_scale(n_images=images, dets_per_image=100, seed=seed)
    order = np.argsort(d.image_id, kind="stable")
    ids, start, count = np.unique(d.image_id[order], return_index=True, return_counts=True)
    k = np.tile(np.arange(100), len(ids))
    c, s0 = np.repeat(count, 100), np.repeat(start, 100)
    rows = order[s0 + k % c]
    rnd = (k // c).astype(np.float64)
    box = np.round(d.box[rows] + 0.5 * rnd[:, None], 2)
    return ds, Detections(image_id=d.image_id[rows], box=box, score=d.score[rows] * 0.5**rnd, category=d.category[rows])


def _spec(bootstrap: int):
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec

    return EvaluationSpec(bootstrap=BootstrapSpec(n=bootstrap))


def _files(root: Path, ds, dets) -> tuple[Path, Path]:
    from detcal.data.coco import write_coco_instances, write_coco_results

    gt, res = root / "instances.json", root / "results.json"
    write_coco_instances(gt, ds)
    write_coco_results(res, dets)
    return gt, res


def _torch_batches(ds, dets, batch: int):
    """The stream as a model and loader give it: float32 box/score tensors, int64 labels, per image."""
    import torch

    from detcal.integrations.evaluator import from_records

    for preds, targets in from_records(ds, dets, batch=batch, box_format="xywh"):
        tp = [
            {
                "boxes": torch.as_tensor(p["boxes"], dtype=torch.float32),
                "scores": torch.as_tensor(p["scores"], dtype=torch.float32),
                "labels": torch.as_tensor(p["labels"]),
            }
            for p in preds
        ]
        tt = [
            {
                "boxes": torch.as_tensor(t["boxes"]),
                "labels": torch.as_tensor(t["labels"]),
                "image_id": t["image_id"],
                "iscrowd": torch.as_tensor(t["iscrowd"]),
                "width": t["width"],
                "height": t["height"],
            }
            for t in targets
        ]
        yield tp, tt


def bench_update(ds, dets, spec, with_map: bool) -> dict:
    """Seconds per image of update (batches of 8), detcal (torch float32 / numpy float64) and torchmetrics MAP."""
    from detcal.integrations.evaluator import DetectionCalibration, from_records

    stream = list(_torch_batches(ds, dets, 8))
    n = len(ds.images)
    out: dict = {}
    m = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
    t0 = time.perf_counter()
    for p, t in stream:
        m.update(p, t)
    out["detcal_update_torch_s_per_image"] = (time.perf_counter() - t0) / n
    out["state_bytes_per_detection_float32"] = m.state_bytes()["per_detection"]
    out["state_mb_float32"] = m.state_bytes()["total"] / 2**20
    np_stream = list(from_records(ds, dets, batch=8, box_format="xywh"))
    m64 = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
    t0 = time.perf_counter()
    for p, t in np_stream:
        m64.update(p, t)
    out["detcal_update_numpy_s_per_image"] = (time.perf_counter() - t0) / n
    out["state_bytes_per_detection_float64"] = m64.state_bytes()["per_detection"]
    res = m64.compute()  # the float64 stream: the files' values, so the same numbers as detcal.evaluate
    out["detcal_ece"] = res.headline["ece"]["value"]
    out["detcal_ap"] = res.to_dict()["accuracy"]["AP"]["value"]
    if with_map:
        from torchmetrics.detection import MeanAveragePrecision

        mp = MeanAveragePrecision(box_format="xywh")
        t0 = time.perf_counter()
        for p, t in stream:
            mp.update(p, [{k: t_[k] for k in ("boxes", "labels", "iscrowd")} for t_ in t])
        out["map_update_s_per_image"] = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        out["map"] = float(mp.compute()["map"])
        out["map_compute_s"] = time.perf_counter() - t0
    return out


def bench_compute(m, gt: Path, res: Path, spec, repeats: int) -> dict:
    """compute() (its records + detcal.evaluate on them) against detcal.evaluate on the files, alternated
    ``repeats`` times, the fastest of each (the machine is shared: the minimum is the least disturbed)."""
    import detcal

    comp, files = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        m._cached = None
        m.compute()
        comp.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        detcal.evaluate(str(gt), str(res), spec=spec)
        files.append(time.perf_counter() - t0)
    return {
        "detcal_compute_s": min(comp),
        "evaluate_files_s_min": min(files),
        "compute_runs_s": comp,
        "evaluate_runs_s": files,
    }


def bench_offline(gt: Path, res: Path, spec) -> dict:
    import detcal

    t0 = time.perf_counter()
    r = detcal.evaluate(str(gt), str(res), spec=spec)
    return {
        "evaluate_files_s": time.perf_counter() - t0,
        "evaluate_ece": r.headline["ece"]["value"],
        "evaluate_ap": r.to_dict()["accuracy"]["AP"]["value"],
    }


def child(kind: str, images: int, root: Path, bootstrap: int) -> None:
    """One fresh process: peak heap above the start (the source records excluded for the stream) and RSS."""
    spec = _spec(bootstrap)
    import detcal.pipeline.evaluation  # noqa: F401  (imports before measuring)

    if kind == "stream":  # numpy float32 batches: the state of torch float32 tensors, without torch's own RSS
        from detcal.integrations.evaluator import DetectionCalibration, from_records

        ds, dets = _records(images)
        tracemalloc.start()
        m = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
        for preds, targets in from_records(ds, dets, batch=8, box_format="xywh"):
            m.update(
                [
                    {**p, "boxes": p["boxes"].astype(np.float32), "scores": p["scores"].astype(np.float32)}
                    for p in preds
                ],
                targets,
            )
        m.compute()
    else:
        tracemalloc.start()
        bench_offline(root / "instances.json", root / "results.json", spec)
    peak = tracemalloc.get_traced_memory()[1]
    hwm = [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("VmHWM")]
    rss = float(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peak_heap_mb": peak / 2**20, "max_rss_mb": rss}))


def _child_run(kind: str, images: int, root: Path, bootstrap: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        kind,
        "--images",
        str(images),
        "--dir",
        str(root),
        "--bootstrap",
        str(bootstrap),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _warm_up(spec) -> None:
    """Both paths once on a small set, so that neither timing pays the first imports."""
    ds, dets = _records(40, seed=1)
    with tempfile.TemporaryDirectory() as tmp:
        bench_offline(*_files(Path(tmp), ds, dets), spec)
        bench_update(ds, dets, spec, with_map=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--bootstrap", type=int, default=0)
    ap.add_argument("--no-map", action="store_true", help="skip torchmetrics' MeanAveragePrecision")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=3, help="alternated compute / evaluate runs (fastest kept)")
    ap.add_argument("--child", choices=("stream", "offline"), default=None)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    if a.child:
        return child(a.child, a.images, a.dir, a.bootstrap)
    spec = _spec(a.bootstrap)
    _warm_up(spec)
    ds, dets = _records(a.images)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gt, res = _files(root, ds, dets)
        out = {"images": a.images, "detections": len(dets), "bootstrap": a.bootstrap}
        out.update(bench_update(ds, dets, spec, not a.no_map))
        out.update(bench_offline(gt, res, spec))
        from detcal.integrations.evaluator import DetectionCalibration, from_records

        m = DetectionCalibration(spec, box_format="xywh", categories=ds.categories)
        for p, t in from_records(ds, dets, batch=8, box_format="xywh"):
            m.update(p, t)
        out.update(bench_compute(m, gt, res, spec, a.repeats))
        for kind in ("stream", "offline"):
            out.update({f"{kind}_{k}": v for k, v in _child_run(kind, a.images, root, a.bootstrap).items()})
    _report(out)
    if a.json:
        a.json.write_text(json.dumps(out, indent=2))


def _report(o: dict) -> None:
    ms = 1e3
    print(f"{o['images']} images, {o['detections']} detections, bootstrap n={o['bootstrap']}")
    print(
        f"update, batches of 8: detcal {o['detcal_update_torch_s_per_image'] * ms:.3f} ms/image (torch float32), "
        f"{o['detcal_update_numpy_s_per_image'] * ms:.3f} ms/image (numpy float64)",
        end="",
    )
    if "map_update_s_per_image" in o:
        print(
            f"; torchmetrics MAP {o['map_update_s_per_image'] * ms:.3f} ms/image "
            f"(ratio {o['map_update_s_per_image'] / o['detcal_update_torch_s_per_image']:.1f}x)"
        )
    else:
        print()
    print(
        f"compute: detcal {o['detcal_compute_s']:.2f} s; detcal.evaluate on the files {o['evaluate_files_s_min']:.2f} s "
        f"(evaluate / compute {o['evaluate_files_s_min'] / o['detcal_compute_s']:.2f}x, fastest of {len(o['compute_runs_s'])}; "
        f"medians {np.median(o['compute_runs_s']):.2f} s and {np.median(o['evaluate_runs_s']):.2f} s)",
        end="",
    )
    print(f"; torchmetrics MAP compute {o['map_compute_s']:.2f} s" if "map_compute_s" in o else "")
    print(
        f"same ECE and AP as detcal.evaluate: {o['detcal_ece'] == o['evaluate_ece']} ({o['detcal_ece']!r}), "
        f"{o['detcal_ap'] == o['evaluate_ap']} ({o['detcal_ap']!r})",
        end="",
    )
    print(f"; torchmetrics MAP {o['map']!r}" if "map" in o else "")
    print(
        f"state: {o['state_mb_float32']:.1f} MB in all; {o['state_bytes_per_detection_float32']:.0f} B/detection (float32 input), "
        f"{o['state_bytes_per_detection_float64']:.0f} B/detection (float64 input)"
    )
    print(
        f"peak heap: stream+compute {o['stream_peak_heap_mb']:.0f} MB, evaluate files {o['offline_peak_heap_mb']:.0f} MB; "
        f"peak RSS {o['stream_max_rss_mb']:.0f} MB vs {o['offline_max_rss_mb']:.0f} MB"
    )


if __name__ == "__main__":
    main()
