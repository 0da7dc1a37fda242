"""What ``detcal-match`` writes: the per-detection CSV and its JSON sidecar."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detcal.core.types import Dataset, Detections, MatchResult
from detcal.reports.detections_csv import column_names, format_csv
from detcal.utils.io import atomic_write, write_json

__all__ = ["write_match_outputs", "match_summary"]


def write_match_outputs(
    out: str | Path,
    ds: Dataset,
    dets: Detections,
    result: MatchResult,
    per_class: bool,
    inputs: dict[str, Any],
    seconds: dict[str, float],
) -> dict[str, Any]:
    """Write ``out`` (one CSV row per detection) and ``<out>.json`` (every parameter, the inputs and
    the counts) atomically; return the counts."""
    out = Path(out)
    text = format_csv(dets, result, ds.gt.id, per_class)
    with atomic_write(out, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)
    counts = {
        "detections": len(dets),
        "considered": int(result.considered.sum()),
        "matched": result.matched.sum(axis=1).tolist(),
        "ignored": result.ignored.sum(axis=1).tolist(),
        "ground_truth": len(ds.gt),
    }
    write_json(
        out.with_name(out.name + ".json"),
        {
            **inputs,
            "columns": column_names(result, per_class),
            "match": result.describe(),
            "counts": counts,
            "seconds": seconds,
        },
    )
    return counts


def match_summary(counts: dict[str, Any], result: MatchResult, per_class: bool) -> str:
    """One line: detections, considered, matched and ignored per threshold."""
    tags = ["kitti"] if per_class else [f"{t:g}" for t in result.iou_thresholds]
    per = ", ".join(
        f"@{tag}: {m} matched, {i} ignored" for tag, m, i in zip(tags, counts["matched"], counts["ignored"])
    )
    return (
        f"{counts['detections']} detections ({counts['considered']} considered) vs {counts['ground_truth']} GT; {per}"
    )
