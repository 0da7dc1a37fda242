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

PROG = "detcal-study"
CONFIG_NAME = "study"
SCHEMA = StudyApp


def task(app: StudyApp, ctx: AppContext) -> dict[str, Any]:
    """Run ``app.study``; write its table, figure and numbers into the run directory."""
    from detcal.studies.run import run_study
    from detcal.reports import results_json
    from detcal.utils.io import write_text

    body, text, files = run_study(app, ctx.run_dir)
    content = results_json.write_metrics(ctx.run_dir / "metrics.json",
                                         {**results_json.header(PROG, **ctx.header()), **body,
                                          "files": ["metrics.json", "summary.md", *files]})
    write_text(ctx.run_dir / "summary.md", text)
    if app.output.print_summary:
        print(text)
    return content


def main() -> None:
    """Console entry point (Hydra command line)."""
    run_app(CONFIG_NAME, SCHEMA, task, PROG)


if __name__ == "__main__":  # pragma: no cover
    main()
