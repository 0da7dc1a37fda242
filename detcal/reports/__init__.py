"""Reports: Markdown/CSV tables, PNG calibration diagrams, sweep gathering.

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
