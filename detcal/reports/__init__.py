"""Reports: everything that renders a run's results (:class:`detcal.core.results.Results`): metrics.json
(:mod:`.results_json`, which also reads /3 and /2 files back), summary.md (:mod:`.summary_md`),
report.html (:mod:`.html`), the console text (:mod:`.console`), Markdown/CSV tables, PNG calibration
diagrams and sweep gathering; :func:`detcal.reports.finish.finish_run` ends every run.

``tables`` and ``gather`` are numpy-free of plotting; ``plots`` imports
matplotlib lazily (Agg canvas) inside each function, so importing
:mod:`detcal.reports` stays cheap.
"""

from detcal.reports.tables import (
    comparison_csv,
    comparison_table,
    flatten_metrics,
    format_value,
    metrics_table,
    write_table,
)

__all__ = ["comparison_csv", "comparison_table", "flatten_metrics", "format_value", "metrics_table", "write_table"]
