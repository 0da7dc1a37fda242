"""``detcal-levi-synthetic``: the synthetic regression experiment of Levi et al. 2019 (section 4.1).

    detcal-levi-synthetic
    detcal-levi-synthetic experiment=levi2019_synthetic levi.seed=1
    detcal-levi-synthetic levi.variance_training=joint levi.optimizer=sgd levi.lr=0.001 levi.steps=20000

The config (configs/levi_synthetic.yaml, schema
:class:`detcal.studies.levi_synthetic.LeviApp`) becomes a
:class:`~detcal.studies.levi_synthetic.LeviSpec`; the experiment is
:func:`detcal.studies.levi_synthetic.run_levi_synthetic`, written into the run
directory. torch is needed (the ``train`` extra); without it the command says so in one line.
"""

from __future__ import annotations

from typing import Any

from detcal.apps._hydra import AppContext, run_app
from detcal.studies.levi_synthetic import LeviApp, run_levi_synthetic

CONFIG_NAME = "levi_synthetic"
SCHEMA = LeviApp
PROG = "detcal-levi-synthetic"


def task(app: LeviApp, ctx: AppContext) -> dict[str, Any]:
    """Run the experiment of ``app.levi`` in ``ctx.run_dir``; return the metrics.json content."""
    return run_levi_synthetic(app.levi, ctx.run_dir, progress=app.progress, echo=app.print_summary)


def main() -> None:
    """Console entry point (Hydra command line: overrides, ``experiment=...``, ``hydra.run.dir=...``)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG)


if __name__ == "__main__":  # pragma: no cover
    main()
