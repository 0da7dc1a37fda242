"""``detcal-study``: published experiments reproduced on the bundled data.

    detcal-study study=kueppers2020                  # Küppers et al. 2020: D-ECE before/after, 4 detectors
    detcal-study study=kuzucu2024 detectors=[rfcn-resnet-101]
    detcal-study study=lakara_retention source=paper

Each writes metrics.json (the numbers), summary.md (the table) and its figure.
"""

from __future__ import annotations

from typing import Any

from detcal.apps._hydra import AppContext, run_app
from detcal.apps.schema import StudyApp
from detcal.reports import results_json
from detcal.reports.finish import finish_run
from detcal.studies.run import run_study

PROG = "detcal-study"
CONFIG_NAME = "study"
SCHEMA = StudyApp


def task(app: StudyApp, ctx: AppContext) -> dict[str, Any]:
    """Run ``app.study``; write its table, figure and numbers into the run directory."""
    body, text, files = run_study(app, ctx.run_dir)
    files = ["metrics.json", "summary.md", *files] + (["report.html"] if app.report.enabled else [])
    content = {**results_json.header(PROG, **ctx.header()), **body, "files": files}
    return finish_run(ctx.run_dir, content, text, report=app.report.enabled, echo=app.output.print_summary).content


def main() -> None:
    """Console entry point (Hydra command line)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG)


if __name__ == "__main__":  # pragma: no cover
    main()
