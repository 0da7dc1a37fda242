"""report.html: the page a researcher opens after a run (docs/report.md).

:func:`write_report` renders the metrics.json content of any command
(evaluate, calibrate, compare, study, main job) into one self-contained HTML
file: headline numbers with intervals, findings sentences, reliability
diagram and D-ECE maps as inline SVG, the worst-calibrated detections (with
thumbnails when an image directory is given), per-class / per-size /
box-uncertainty tables, the command's own sections, every other number of
metrics.json in a generic table, and the provenance of the run.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detcal.core.results import Results
from detcal.utils.io import write_text

if TYPE_CHECKING:  # read on first use (``__getattr__``): type checkers see it here
    from detcal.reports.html.page import render_report

__all__ = ["render_report", "write_report", "REPORT_NAME"]

REPORT_NAME = "report.html"


def write_report(
    run_dir: str | Path, metrics: Results | Mapping[str, Any], *, image_dir: str | Path | None = None
) -> Path:
    """Write ``run_dir/report.html`` (atomically) from the run's results (or its metrics.json content,
    /3 or /2); returns its path."""

    # importing a helper module of this package (e.g. ``html.worst``, read by the diagnostics) does not pull
    # in the page writer (~20 ms of imports)
    from detcal.reports.html.page import render_report  # lazy: only when a report is written

    out = Path(run_dir) / REPORT_NAME
    write_text(out, render_report(metrics, run_dir, image_dir=image_dir))
    return out


def __getattr__(name: str) -> Any:
    """``render_report``, imported on first use (PEP 562; see :func:`write_report`)."""
    if name == "render_report":
        return importlib.import_module("detcal.reports.html.page").render_report
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
