"""``detcal-main``: the R-FCN regression-calibration study of Levi et al. 2019 in one run directory.

    detcal-main                                      # experiment=smoke: synthetic, tiny R-FCN, CPU
    detcal-main experiment=levi2019_kitti            # COCO -> KITTI, R-101, GPU
    detcal-main hydra.run.dir=outputs/main/run1      # rerun in the same dir: unchanged stages are reused
    detcal-main trainer=ddp trainer.nproc=4          # stages 1-2 under torchrun
    detcal-main experiment=levi2019_kitti dry_run.enabled=true   # checks paths, classes, sizes, one step: a minute

The config (configs/main.yaml, schema :class:`detcal.training.spec.MainApp`)
becomes a :class:`~detcal.training.spec.MainJobSpec`; the calibrators named in
``calibration.methods`` come from the one registry (configs/calibrator); the
pipeline is :func:`detcal.training.job.run_main_job`. torch is needed (the
``train`` extra); without it the command says so in one line.
"""

from __future__ import annotations

from typing import Any

from detcal.apps._hydra import AppContext, run_app
from detcal.training.dry_run import run_dry_run
from detcal.training.job import make_calibrators, run_main_job
from detcal.training.spec import MainApp
from detcal.training.torch_check import require_torch

CONFIG_NAME = "main"
SCHEMA = MainApp
PROG = "detcal-main"


def task(app: MainApp, ctx: AppContext) -> dict[str, Any]:
    """Run the main job of ``app`` in ``ctx.run_dir``; return the Table 1 JSON."""
    require_torch(PROG)
    spec = app.job()
    if spec.dry_run.enabled:
        return run_dry_run(spec, ctx.run_dir)
    calibrators = make_calibrators(spec.calibration.methods)
    return run_main_job(
        spec,
        ctx.run_dir,
        calibrators=calibrators,
        progress=spec.progress,
        header=ctx.header(),
        report_html=app.report.enabled,
    )


def main() -> None:
    """Console entry point (Hydra command line: overrides, ``experiment=...``, ``hydra.run.dir=...``)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG, resumable=True)  # a rerun in its directory resumes its stages


if __name__ == "__main__":  # pragma: no cover
    main()
