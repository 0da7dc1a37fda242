"""What the diagnostics block (TIDE, calibration by error type, confusion, label errors, operating points) adds
to the default 5,000-image evaluate run, and the screenshot of the report's diagnosis section.

    python benchmarks/bench_diagnostics.py                    # 5,000 synthetic images, 60 detections each
    python benchmarks/bench_diagnostics.py --repeat 3 --screenshot docs/figures/report_diagnosis.png

The run is benchmarks/bench_evaluate.py's: a fresh ``python -m detcal.apps.evaluate`` process on COCO files
written by the synthetic generator (10 IoU thresholds, bootstrap, plots and the CSV off), timed with the
diagnostics on (the default) and off (``diagnostics.tide=false diagnostics.confusion=false
diagnostics.operating_points=false``), alternating, median of ``--repeat``: the CPU time of the
process (user + system; steadier than wall time on a shared machine, and the evaluation runs in one thread).
The block's own cost is the CPU time of :func:`~detcal.pipeline.diagnostics_block.diagnostics_block` on the same files, in
this process. With ``--screenshot PATH`` the diagnosis section of the bundled
R-FCN run (coco_tfzoo, 5,000 images) is rendered in headless Chromium (needs playwright and
/usr/lib/chromium/chromium).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

OFF = ["diagnostics.tide=false", "diagnostics.confusion=false", "diagnostics.operating_points=false"]


def _files(root: Path, images: int, per_image: int) -> tuple[Path, Path, int]:
    import dataclasses

    from detcal.data.coco import write_coco_instances, write_coco_results
    from detcal.data.synthetic import generate_coco_scale

    ds, dets = generate_coco_scale(n_images=images, dets_per_image=per_image, seed=0)
    dets = dataclasses.replace(dets, box=np.round(dets.box, 2), proposal=None, delta_mean=None, delta_std=None)
    gt, res = root / "instances.json", root / "results.json"
    write_coco_instances(gt, ds)
    write_coco_results(res, dets)
    return gt, res, len(dets)


def _run(gt: Path, res: Path, run: Path, extra: list[str]) -> tuple[float, dict]:
    thr = "[" + ",".join(f"{t:.2f}" for t in np.linspace(0.5, 0.95, 10)) + "]"
    argv = [sys.executable, "-m", "detcal.apps.evaluate", "data=coco", f"data.gt={gt}", f"data.results={res}",
            f"matching.iou_thresholds={thr}", "bootstrap.n=0", "output.plots=false", "output.detections_csv=false",
            "output.print_summary=false", "output.progress=false", "report.enabled=false",
            f"hydra.run.dir={run}", *extra]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads((run / "metrics.json").read_text()).get("timing_s", {})


def _block_cpu(gt: Path, res: Path, repeat: int) -> list[float]:
    """CPU seconds of the diagnostics block alone, on the same files and thresholds, in this process."""
    from detcal.pipeline.accuracy_block import localisation_block
    from detcal.pipeline.confidence_block import confidence_blocks
    from detcal.pipeline.diagnostics_block import diagnostics_block
    from detcal.pipeline.evaluation import as_loaded, match_data, relative_box_features
    from detcal.pipeline.progress import Progress
    from detcal.pipeline.spec import BootstrapSpec, EvaluationSpec, MatchingSpec

    thr = [float(t) for t in np.linspace(0.5, 0.95, 10)]
    spec = EvaluationSpec(bootstrap=BootstrapSpec(n=0), matching=MatchingSpec(iou_thresholds=thr))
    data = as_loaded(str(gt), str(res))
    mr, _, extra = match_data(data, spec, False)
    feats = relative_box_features(data, False)[0]
    conf, _ = confidence_blocks(spec, data, mr, feats, Progress(False, "bench"), extra, None)
    loc = localisation_block(spec, data)
    out = []
    for _ in range(repeat):
        t0 = time.process_time()
        diagnostics_block(spec, data, mr, feats, conf, loc)
        out.append(time.process_time() - t0)
    return out


def _screenshot(path: Path) -> None:
    from playwright.sync_api import sync_playwright

    import detcal
    from detcal.pipeline.spec import BootstrapSpec, DataSpec, EvaluationSpec

    with tempfile.TemporaryDirectory() as tmp:
        res = detcal.evaluate(
            DataSpec(source="bundled", bundle="coco_tfzoo", detector="rfcn-resnet-101"),
            spec=EvaluationSpec(bootstrap=BootstrapSpec(n=0)),
        )
        res.write(tmp, plots=False, csv=False, report=True)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/lib/chromium/chromium", args=["--no-sandbox"])
            tab = browser.new_page(viewport={"width": 1280, "height": 900})
            tab.goto((Path(tmp) / "report.html").as_uri())
            top = tab.evaluate("() => document.getElementById('diagnosis').getBoundingClientRect().top + scrollY")
            end = tab.evaluate(
                "() => { const d = document.getElementById('diagnosis'); let e = d.nextElementSibling;"
                " while (e && e.tagName !== 'H2') { if (e.tagName === 'H3' && e.textContent.startsWith('Operating'))"
                " break; e = e.nextElementSibling; } return e.getBoundingClientRect().top + scrollY }"
            )
            tab.screenshot(
                path=str(path), full_page=True, clip={"x": 0, "y": top - 8, "width": 1280, "height": end - top}
            )
            browser.close()


def _bench(images: int, per_image: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gt, res, n = _files(root, images, per_image)
        on, off = [], []
        for i in range(repeat):
            on.append(_run(gt, res, root / f"on{i}", [])[0])
            off.append(_run(gt, res, root / f"off{i}", OFF)[0])
        block = _block_cpu(gt, res, repeat)
    m_on, m_off, m_block = statistics.median(on), statistics.median(off), statistics.median(block)
    print(f"{images} images, {n} detections, 10 IoU thresholds, bootstrap off (median of {repeat})")
    print(
        f"  whole command CPU, diagnostics on / off: {m_on:.2f} s / {m_off:.2f} s  ({100 * (m_on / m_off - 1):+.1f}%)"
    )
    print(
        f"  ... fastest of each:                  {min(on):.2f} s / {min(off):.2f} s  ({100 * (min(on) / min(off) - 1):+.1f}%)"
    )
    print(f"  diagnostics block CPU (in process):   {m_block:.2f} s  ({100 * m_block / m_off:.1f}% of the command off)")
    print(f"  ... fastest:                          {min(block):.2f} s  ({100 * min(block) / min(off):.1f}%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--dets-per-image", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=3, help="0: only the screenshot")
    ap.add_argument("--screenshot", type=Path, default=None)
    args = ap.parse_args()
    if args.repeat > 0:
        _bench(args.images, args.dets_per_image, args.repeat)
    if args.screenshot:
        _screenshot(args.screenshot)
        print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
    main()
