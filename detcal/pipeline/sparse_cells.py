"""One line for the sparse-cell warning of a run, with its numbers and a grid that fits.

The binned metrics warn when a grid has more cells than samples/10
(:data:`detcal.metrics.confidence.SPARSE_RATIO`). An evaluation at two IoU
thresholds, or a job that evaluates several times (before and after each
calibrator), used to repeat that warning once per metric group and threshold,
and even for metrics that were then not computed (no image sizes). Here the
warnings of one evaluation become one line built from the computed results:
which metrics, how many cells for how many detections at which thresholds, the
share of detections in cells under ``sample_threshold`` and the largest
``dece_binning.bins`` whose grid fits; :func:`log_once` logs it once per
command (the numbers themselves are unchanged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from detcal.core.results import ConfidenceBlock
from detcal.metrics.confidence import SPARSE_RATIO
from detcal.utils.warn import collected, note

__all__ = ["SPARSE_MARK", "sparse_cells_line", "fitting_bins", "log_once"]

SPARSE_MARK = f"more cells than samples/{SPARSE_RATIO}"
"""Text of the metrics' own sparse-cell warnings (replaced by :func:`sparse_cells_line`)."""

log = logging.getLogger("detcal")
_PREFIX = f"sparse cells ({SPARSE_MARK}): "


def fitting_bins(n: int, n_dims: int) -> int:
    """The largest number of bins per dimension whose grid (``bins ** n_dims`` cells) has at most
    ``n / SPARSE_RATIO`` cells (at least 1)."""
    b = 1
    while (b + 1) ** n_dims <= n / SPARSE_RATIO:
        b += 1
    return b


def _sparse_nodes(conf: Mapping[str, Any]) -> dict[tuple[int, int, int], dict[str, Any]]:
    """(cells, samples, dims) -> {"names", "labels", "sparse", "threshold", "bins"} over the computed
    class-agnostic results that carry the sparse flag."""
    groups: dict[tuple[int, int, int], dict[str, Any]] = {}
    for label, blk in conf.items():
        if not isinstance(blk, ConfidenceBlock):
            continue
        for name, node in blk.metrics().items():
            if name.endswith("_per_class"):
                continue
            extra, params = node.extra, node.params
            if not extra.get("sparse_warning") or not params.get("n"):
                continue
            key = (int(extra.get("cells", 0)), int(params["n"]), int(params.get("n_features", 1)))
            g = groups.setdefault(key, {"names": [], "labels": [], "sparse": 0, "threshold": None, "bins": None})
            if name not in g["names"]:
                g["names"].append(name)
            if label not in g["labels"]:
                g["labels"].append(label)
            g["sparse"] = max(g["sparse"], int(extra.get("sparse_samples", 0)))
            g["threshold"] = params.get("sample_threshold", g["threshold"])
            g["bins"] = params.get("bins", g["bins"])
    return groups


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def sparse_cells_line(conf: Mapping[str, Any]) -> str | None:
    """The run's sparse-cell warning in one line (None when no computed metric has sparse cells)."""
    groups = _sparse_nodes(conf)
    if not groups:
        return None
    parts = []
    for (cells, n, dims), g in groups.items():
        text = f"{_and(g['names'])} at {_and(g['labels'])}: {cells:,} cells for {n:,} detections"
        if g["threshold"] is not None:
            text += f", {g['sparse']:,} ({100.0 * g['sparse'] / n:.0f}%) in cells under {g['threshold']} detections"
        bins = g["bins"]
        if dims > 1 and isinstance(bins, list) and len(set(bins)) == 1:
            b = fitting_bins(n, dims)
            text += f" (dece_binning.bins={b}: {b**dims:,} cells would fit)"
        parts.append(text)
    return _PREFIX + "; ".join(parts)


def log_once(text: str) -> None:
    """Log the sparse-cell line ``text`` once per command: a job that evaluates several times (the main
    job: val and recal) logs the first evaluation's line only (each evaluation's metrics.json keeps its
    own); outside a command, every time."""
    if any(w.startswith(_PREFIX) for w in collected()):
        return
    note(text)
    log.warning("%s", text)
