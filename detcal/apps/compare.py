"""``detcal-compare``: several detectors on one ground truth, accuracy and calibration side by side.

    detcal-compare                                   # the four bundled COCO detectors
    detcal-compare baseline=ssd-resnet-50-v1 data.bundle=coco_mini79
    detcal-compare data=coco data.gt=instances.json '+results={a: a.json, b: b.json}'

One table (AP, ECE, D-ECE, MCE, NLL, Brier with bootstrap intervals), the
paired-bootstrap difference of each detector from the baseline (images
resampled jointly), per-class and per-size tables, overlaid and per-class
reliability diagrams (:mod:`detcal.pipeline.compare`).
"""

from __future__ import annotations

from typing import Any

from detcal.apps._hydra import AppContext, run_app
from detcal.apps.schema import CompareApp
from detcal.pipeline import compare as cmp
from detcal.pipeline.compare_data import load_runs
from detcal.reports import results_json
from detcal.reports.finish import finish_run

PROG = "detcal-compare"
CONFIG_NAME = "compare"
SCHEMA = CompareApp


def task(app: CompareApp, ctx: AppContext) -> dict[str, Any]:
    """Compare the detectors ``app`` names; write metrics.json, summary.md and the diagrams."""
    dataset, runs, gt_area = load_runs(app.data, app.detectors, app.results)
    c = cmp.compare(
        runs,
        dataset,
        baseline=app.baseline,
        iou=app.iou,
        matching=app.matching,
        n_boot=app.bootstrap.n,
        level=app.bootstrap.level,
        seed=app.bootstrap.seed,
        gt_area=gt_area,
        top_n_classes=app.top_n_classes,
        method=app.bootstrap.method,
        ap_n_boot=app.ap_bootstrap,
        binning=app.dece_binning,
    )
    out = ctx.run_dir
    files = ["metrics.json", "summary.md"]
    if app.output.plots:
        cmp.plot(c, out / "reliability_overlay.png")
        cmp.plot_per_class(
            c, {int(k): v for k, v in dataset.categories.items()}, path=out / "reliability_per_class.png"
        )
        files += ["reliability_overlay.png", "reliability_per_class.png"]
    text = cmp.markdown(c)
    body = {
        "detectors": list(runs),
        "table": c.table,
        "differences": c.diffs,
        "per_class": c.per_class,
        "per_size": c.per_size,
        "params": c.params,
    }
    files += ["report.html"] if app.report.enabled else []
    content = {**results_json.header(PROG, **ctx.header()), **body, "files": files}
    return finish_run(out, content, text, report=app.report.enabled, echo=app.output.print_summary).content


def main() -> None:
    """Console entry point (Hydra command line)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG)


if __name__ == "__main__":  # pragma: no cover
    main()
