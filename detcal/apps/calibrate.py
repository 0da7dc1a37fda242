"""``detcal-calibrate``: fit a confidence and a box-uncertainty calibrator on a
calibration part, apply them to a disjoint evaluation part, evaluate before/after.

    detcal-calibrate                                            # synthetic set, 50/50 image split
    detcal-calibrate calibrator=position_logistic
    detcal-calibrate calibrator@regression_calibrator=kuleshov_isotonic
    detcal-calibrate regression=conformal regression_calibrator.alpha=0.05  # short form (configs/regression/)
    detcal-calibrate '~calibrator@regression_calibrator'         # confidence only
    detcal-calibrate data=coco data.gt=cal.json data.results=cal_dets.json \\
        data@eval_data=coco eval_data.gt=val.json eval_data.results=val_dets.json

Calibrators are the files of configs/calibrator/ (one registry, ``_target_``);
``regression=NAME`` (configs/regression/) selects ``calibrator@regression_calibrator=NAME``.
"""

from __future__ import annotations

from typing import Any

from detcal.apps._hydra import AppContext, run_app
from detcal.apps.schema import CalibrateApp
from detcal.pipeline.calibration import calibrate
from detcal.pipeline.spec import ConfigError

PROG = "detcal-calibrate"
CONFIG_NAME = "calibrate"
SCHEMA = CalibrateApp


def task(app: CalibrateApp, ctx: AppContext) -> dict[str, Any]:
    """Run :func:`detcal.calibrate` as ``app`` describes; write the result into ``ctx.run_dir``."""
    _check_short_form(ctx.choices)
    conf = ctx.instantiate(app.calibrator, "calibrator")
    reg = ctx.instantiate(app.regression_calibrator, "regression_calibrator")
    names = {
        k: str(ctx.choices[g])
        for k, g in (("confidence", "calibrator"), ("regression", "calibrator@regression_calibrator"))
        if ctx.choices.get(g)
    }
    out = app.output
    result = calibrate(
        app.data,
        app.evaluation(),
        app.calibration,
        confidence=conf,
        regression=reg,
        eval_data=app.eval_data,
        workdir=ctx.run_dir,
        progress=out.progress,
        names=names,
    )
    image_dir = (app.eval_data or app.data).image_dir
    return result.write(
        ctx.run_dir,
        plots=out.plots,
        csv=out.detections_csv,
        echo=out.print_summary,
        header=ctx.header(),
        report=app.report.enabled,
        image_dir=image_dir,
    )


def _check_short_form(choices: Any) -> None:
    """``regression=NAME`` and a different ``calibrator@regression_calibrator`` (or its removal) contradict."""
    short, long = choices.get("regression"), choices.get("calibrator@regression_calibrator")
    if short is not None and short != long:
        raise ConfigError(
            "regression",
            f"regression={short} contradicts calibrator@regression_calibrator={long}: give one of the two",
        )


def main() -> None:
    """Console entry point (Hydra command line: overrides, ``-m``, ``--cfg job``, ``--help``)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG)


if __name__ == "__main__":  # pragma: no cover
    main()
