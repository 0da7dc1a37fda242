"""The end of a command that writes its own metrics.json body (compare, study): metrics.json, summary.md,
report.html, and the short console text."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["finish_run"]


def finish_run(
    run_dir: Path,
    prog: str,
    header: Mapping[str, Any],
    body: Mapping[str, Any],
    text: str,
    files: list[str],
    *,
    report: bool,
    echo: bool,
) -> dict[str, Any]:
    """Write ``body`` (with the provenance ``header``) and ``text``; the report when asked; print the end text."""
    from detcal.reports import results_json
    from detcal.utils.io import write_text

    files = ["metrics.json", "summary.md", *files] + (["report.html"] if report else [])
    content = results_json.write_metrics(
        run_dir / "metrics.json", {**results_json.header(prog, **header), **body, "files": files}
    )
    write_text(run_dir / "summary.md", text + f"\n\nFiles: {', '.join(files)}\n")
    if report:
        from detcal.reports.html import write_report

        write_report(run_dir, content)
    if echo:
        from detcal.reports.console import console_summary

        print(console_summary(content, run_dir))
    return content
