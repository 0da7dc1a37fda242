"""``detcal-evaluate``: confidence and box-uncertainty calibration of one detector.

    detcal-evaluate                                           # bundled synthetic set
    detcal-evaluate data=coco data.gt=instances.json data.results=dets.json
    detcal-evaluate -m matching.iou_thresholds='[0.5]','[0.75]'
    detcal-evaluate dece_binning=netcal sigma_binning=equal_width

The config (configs/evaluate.yaml, schema :class:`detcal.apps.schema.EvaluateApp`)
becomes an :class:`~detcal.pipeline.spec.EvaluationSpec`; the evaluation is
:func:`detcal.evaluate`; the result is written into the run directory.
"""

from __future__ import annotations

from typing import Any

from detcal.apps._context import AppContext, is_secondary_rank
from detcal.apps._replay import replay
from detcal.utils import collector

_collecting = collector.pause()  # imports of objects that live as long as the process (detcal.utils.collector)
try:
    from detcal.apps.schema import EvaluateApp
    from detcal.pipeline.evaluation import evaluate
finally:
    collector.resume(_collecting, freeze=True)

PROG = "detcal-evaluate"
CONFIG_NAME = "evaluate"
SCHEMA = EvaluateApp


def task(app: EvaluateApp, ctx: AppContext) -> dict[str, Any]:
    """Evaluate ``app.data`` with ``app``'s evaluation spec; write the result into ``ctx.run_dir``.

    With figures, their process is forked first (:func:`detcal.utils.background.prestart`): it imports
    matplotlib on the second core while the evaluation runs, and stays as small as the start-up was; the
    figures are sent to it as soon as the confidence and box-uncertainty blocks are computed
    (:class:`detcal.pipeline.result.EarlyFigures`), and drawn there while the other measures run."""
    out = app.output
    worker = early = None
    if out.plots and not is_secondary_rank():
        # numpy.ma before the fork: matplotlib imports it in the figure process, and numpy's quantile and
        # unique import it here (the intervals); imported once for both instead of twice (~8 ms of CPU)
        import numpy.ma  # noqa: F401  # lazy: only a run with figures forks; a lean run never needs it

        from detcal.reports.plots import import_matplotlib_for_drawing  # lazy: as above (figures only)
        from detcal.utils.background import prestart  # lazy: as above

        worker = prestart(import_matplotlib_for_drawing)
        if worker is not None:
            from pathlib import Path  # lazy: as above

            from detcal.pipeline.result import EarlyFigures  # lazy: as above

            early = EarlyFigures(Path(ctx.run_dir), worker)
    try:
        result = evaluate(app.data, spec=app.evaluation(), workdir=ctx.run_dir, progress=out.progress, figures=early)
        result.detections_format = out.detections_format
        result.figure_worker = worker
        if is_secondary_rank():
            return result.to_dict()  # rank 0 writes the report
        return result.write(
            ctx.run_dir,
            plots=out.plots,
            csv=out.detections_csv,
            echo=out.print_summary,
            header=ctx.header(),
            report=app.report.enabled,
            image_dir=app.data.image_dir,
        )
    except BaseException:
        if early is not None:  # figures drawn for a run that failed: waited for and removed
            early.abandon()
        raise
    finally:
        if worker is not None:  # an error before the figures: the waiting process ends
            worker.close()


def main() -> None:
    """Console entry point (Hydra command line: overrides, ``-m``, ``--cfg job``, ``--help``). A plain command
    line run before is replayed from its run record without importing Hydra (:mod:`detcal.apps._replay`)."""
    if replay(CONFIG_NAME, task, PROG):
        return
    from detcal.apps._hydra import run_app  # lazy: Hydra and OmegaConf only when the run is not replayed

    run_app(CONFIG_NAME, SCHEMA, task, PROG, record=True)


if __name__ == "__main__":  # pragma: no cover
    main()
