"""What report.html adds to a 5,000-image evaluate run (the bundled R-FCN results on COCO val2017).

    python benchmarks/bench_report.py                  # data=coco_tfzoo data.detector=rfcn-resnet-101
    python benchmarks/bench_report.py --repeat 9 --screenshot docs/figures/report_rfcn.png

The report costs two things, both measured here on the same evaluation:

* the worst-calibrated-detections block computed inside the evaluation (cells of
  the D-ECE grid, contributions, the rows the tables show), and
* rendering and writing report.html from the metrics.json content (inline SVG,
  the run's PNG diagrams embedded, input-file hashes).

It also times the whole command in fresh processes with ``report.enabled=true``
and ``false`` (median of ``--repeat`` runs each, alternating). With
``--screenshot PATH`` it renders the page in headless Chromium (the README
picture; needs playwright and /usr/lib/chromium/chromium).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _component_times(repeat: int, out: Path) -> tuple[float, float, int]:
    import detcal
    from detcal.pipeline.evaluation import as_loaded, match_data, relative_box_features
    from detcal.pipeline.report_data import worst_block
    from detcal.pipeline.spec import DataSpec, EvaluationSpec
    from detcal.reports.html import write_report

    spec = EvaluationSpec()
    data_spec = DataSpec(source="bundled", bundle="coco_tfzoo", detector="rfcn-resnet-101")
    res = detcal.evaluate(data_spec, spec=spec)
    content = res.write(out, plots=True, csv=False, report=False)
    data = as_loaded(data_spec)
    mr, _, _ = match_data(data, spec, reg_on=False)
    feats = relative_box_features(data, needed=False)[0]
    worst, render = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        worst_block(spec, data, mr, feats, res.record["confidence"])  # the typed blocks
        worst.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        p = write_report(out, content)
        render.append(time.perf_counter() - t0)
    return statistics.median(worst), statistics.median(render), p.stat().st_size


def _command(enabled: bool, run: Path) -> float:
    argv = [
        sys.executable,
        "-m",
        "detcal.apps.evaluate",
        "data=coco_tfzoo",
        "data.detector=rfcn-resnet-101",
        "output.progress=false",
        "output.detections_csv=false",
        f"report.enabled={str(enabled).lower()}",
        f"hydra.run.dir={run}",
    ]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    return time.perf_counter() - t0


def _screenshot(page: Path, path: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/lib/chromium/chromium", args=["--no-sandbox"])
        tab = browser.new_page(viewport={"width": 1280, "height": 860})
        tab.goto(page.as_uri())
        tab.screenshot(path=str(path))
        browser.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--screenshot", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "py"
        worst, render, size = _component_times(args.repeat, out)
        on, off = [], []
        for i in range(args.repeat):
            on.append(_command(True, Path(tmp) / f"on{i}"))
            off.append(_command(False, Path(tmp) / f"off{i}"))
        print("bundled R-FCN on COCO val2017 (5,000 images, 34,025 detections), bootstrap n=200, plots on")
        print(f"worst-calibrated detections block: {worst * 1000:.1f} ms (median of {args.repeat})")
        print(
            f"render + write report.html:        {render * 1000:.1f} ms (median of {args.repeat}; {size / 1e6:.2f} MB)"
        )
        print(f"report total:                      {(worst + render) * 1000:.1f} ms (target: under 1,000 ms)")
        print(
            f"whole command, report on / off:    {statistics.median(on):.2f} s / {statistics.median(off):.2f} s "
            f"(medians of {args.repeat} fresh processes; the difference is within run-to-run noise when it is "
            f"smaller than the spread {max(on + off) - min(on + off):.2f} s)"
        )
        if args.screenshot:
            _screenshot(Path(tmp) / "on0" / "report.html", args.screenshot)
            print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
    main()
