"""``detcal-gather``: one comparison table from a Hydra sweep (multirun) directory.

Usage::

    detcal-gather multirun/2025-01-01/12-00-00 [--out table.md] [--csv table.csv]
                  [--metrics 'headline/*' 'regression/ence/*']

Reads one sweep: ``<multirun_dir>`` itself when it is a sweep directory
(Hydra's ``multirun.yaml`` in it), else the most recent sweep below it (said
on stderr). Walks the sweep for every ``metrics.json`` a detcal command
wrote, reads the run's overrides from ``.hydra/overrides.yaml`` next to it,
and writes one table: rows = runs labelled by their overrides (overrides
shared by every run, and cosmetic ones such as ``output.progress=false``,
are left out of the labels; a metrics.json that cannot be read is skipped
with a warning), columns = the
chosen metrics. Default columns: every key of the runs' ``headline`` section
(stable across sweeps, e.g. ``ece``, ``dece``, ``ence_tx``); ``--metrics``
takes ``fnmatch`` patterns over :func:`detcal.reports.tables.flatten_metrics`
keys instead. Writes Markdown (printed as well) and CSV; by default
``<multirun_dir>/comparison.md`` and ``comparison.csv``.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from detcal.core.errors import DetcalInputError
from detcal.reports.results_json import read_results
from detcal.reports.tables import comparison_csv, comparison_table, iter_metrics

log = logging.getLogger("detcal.gather")

__all__ = ["RunRecord", "GatherResult", "sweep_dir", "find_runs", "gather"]


@dataclass
class RunRecord:
    """One run of a sweep: its directory, overrides and metrics.json content."""

    run_dir: Path
    overrides: list[str]
    metrics: dict[str, Any]


@dataclass
class GatherResult:
    """The comparison: row labels -> {column -> metric node}, the columns, and both renderings."""

    rows: dict[str, dict[str, Any]]
    columns: list[str]
    markdown: str
    csv: str


def _natural_key(p: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p))]


def _read_overrides(run_dir: Path) -> list[str]:
    f = run_dir / ".hydra" / "overrides.yaml"
    if not f.is_file():
        return []

    try:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise DetcalInputError(f"not valid YAML: {exc}", file=f) from exc
    if data is None:
        return []
    if not isinstance(data, list):
        raise DetcalInputError("expected a YAML list of override strings", file=f)
    return [str(x) for x in data]


COSMETIC = ("output.", "progress", "print_summary", "plots", "hydra.", "+hydra.")
"""Override prefixes that change no number (left out of the row labels)."""


def sweep_dir(multirun_dir: str | os.PathLike) -> Path:
    """The one sweep to read: ``multirun_dir`` if it is one, else the most recent sweep below it."""
    root = Path(multirun_dir)
    if not root.is_dir():
        raise DetcalInputError("is not a directory", file=root)
    if (root / "multirun.yaml").is_file():
        return root
    sweeps = sorted((f.parent for f in root.rglob("multirun.yaml")), key=lambda p: (p.stat().st_mtime, str(p)))
    if not sweeps:
        return root
    if len(sweeps) > 1:
        log.warning(
            "%d sweeps under %s; reading the most recent, %s (give a sweep directory to choose)",
            len(sweeps),
            root,
            sweeps[-1],
        )
    return sweeps[-1]


def find_runs(multirun_dir: str | os.PathLike) -> list[RunRecord]:
    """Every run below ``multirun_dir`` that holds a readable ``metrics.json``, in natural path order."""
    root = Path(multirun_dir)
    if not root.is_dir():
        raise DetcalInputError("is not a directory", file=root)
    runs = []
    for f in sorted(root.rglob("metrics.json"), key=_natural_key):
        try:  # schema /3 or /2 (read into /3), or a metrics.json of another command, as far as it goes
            metrics = read_results(f, lenient=True).content
        except DetcalInputError as exc:
            log.warning("skipping %s: %s", f, exc)
            continue
        runs.append(RunRecord(f.parent, _read_overrides(f.parent), metrics))
    return runs


def _labels(runs: Sequence[RunRecord], root: Path) -> list[str]:
    common = set.intersection(*(set(r.overrides) for r in runs)) if runs else set()
    labels = []
    for r in runs:
        ovr = [o for o in r.overrides if not o.lstrip("~+").startswith(COSMETIC)]
        own = [o for o in ovr if o not in common] or ovr
        rel = str(r.run_dir.relative_to(root)) if r.run_dir != root else "."
        labels.append(", ".join(own) if own else rel)
    if len(set(labels)) < len(labels):  # disambiguate by directory
        labels = [
            f"{lab} ({r.run_dir.relative_to(root) if r.run_dir != root else '.'})" for lab, r in zip(labels, runs)
        ]
    return labels


def gather(multirun_dir: str | os.PathLike, metrics: Sequence[str] | None = None) -> GatherResult:
    """Collect the runs under ``multirun_dir`` into one comparison table.

    ``metrics``: ``fnmatch`` patterns over flattened metric keys; ``None``
    uses the keys of each run's ``headline`` section (first-seen order).
    """
    root = sweep_dir(multirun_dir)
    runs = find_runs(root)
    if not runs:
        raise DetcalInputError("holds no metrics.json (is it a detcal-evaluate sweep directory?)", file=root)
    nodes: list[dict[str, Any]] = []
    for r in runs:
        if metrics is None:
            nodes.append({k: n for k, n in iter_metrics(r.metrics.get("headline", {}))})
        else:
            nodes.append({k: n for k, n in iter_metrics(r.metrics)})
    columns: list[str] = []
    for n in nodes:
        for k in n:
            if k in columns:
                continue
            if metrics is None or any(fnmatch.fnmatchcase(k, p) for p in metrics):
                columns.append(k)
    rows = {lab: {c: n[c] for c in columns if c in n} for lab, n in zip(_labels(runs, root), nodes)}
    return GatherResult(rows, columns, comparison_table(rows, columns), comparison_csv(rows, columns))
