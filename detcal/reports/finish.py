"""The one end of every run: metrics.json, summary.md, report.html and the console text.

:func:`finish_run` serialises the run's results (:class:`detcal.core.results.Results`,
metrics.json schema ``detcal.metrics/3``), writes summary.md from them, prints the
short end text, waits for the figures drawn meanwhile, and writes report.html (which
embeds them) last. detcal-evaluate and detcal-calibrate (``Result.write``),
detcal-compare and detcal-study all end here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from detcal.core.results import Results
from detcal.reports import results_json
from detcal.reports.console import console_summary
from detcal.reports.html import write_report
from detcal.utils.io import write_text

__all__ = ["finish_run"]


def finish_run(
    run_dir: str | Path,
    content: Mapping[str, Any],
    summary: Callable[[Results], str] | str,
    *,
    report: bool = False,
    echo: bool = False,
    image_dir: str | Path | None = None,
    wait: Callable[[], None] | None = None,
) -> Results:
    """Write ``content`` (the run's metrics.json body with its header and ``files``) as the
    serialisation of its result blocks, then summary.md (``summary``: a function of the results,
    or the text to which the file list is added), the console text when ``echo``, and report.html
    when ``report`` (after ``wait()``, which finishes the figures it embeds). Returns the results
    as written."""
    out = Path(run_dir)
    # ``content`` is already the blocks' serialisation (``Result.to_dict`` writes the typed record); reading it
    # back once gives the blocks the renderers use, with the run's Python warnings that write_metrics adds
    written = results_json.write_metrics(out / "metrics.json", results_json.strict(dict(content)), plain=True)
    res = Results.from_json(written)
    res.content = written
    if callable(summary):
        text = summary(res)
    else:
        text = summary + f"\n\nFiles: {', '.join(str(f) for f in written.get('files') or [])}\n"
    write_text(out / "summary.md", text)
    if echo:  # the numbers first, while the figures are finished
        print(console_summary(res, out), flush=True)
    if wait is not None:
        wait()
    if report:  # embeds the figures: after them
        write_report(out, res, image_dir=image_dir)
    return res
