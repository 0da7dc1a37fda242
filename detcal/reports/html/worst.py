"""The detections that contribute most to the D-ECE (docs/metrics.md#worst-calibrated-detections).

With cells ``c`` of the D-ECE grid (equal-width bins over confidence and the
box features), ``N'`` the sample size of the D-ECE (``N_kept`` under the
``drop`` policy, ``N`` under ``netcal``) and ``g_c = conf(c) - prec(c)``,

    D-ECE = sum_kept N_c / N' |g_c| = sum_{i in kept cells} sign(g_c(i)) (p_i - y_i) / N'

so detection ``i`` contributes ``sign(g_c(i)) (p_i - y_i) / N'``: a confident
false positive in an over-confident cell adds most, a true positive there
takes away. The tables list the highest-confidence false positives, the
lowest-confidence true positives and the kept cells with the largest amount
``N_c |g_c| / N'``; ``share`` is a row's amount over the D-ECE (the page shows it in percent); everything is computed with numpy, no loop over detections.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from detcal.binning.edges import BinGrid, cell_index, cell_index_columns

__all__ = ["GridCells", "cell_contributions", "smallest", "worst_detections"]

DEFINITION = (
    "contribution_i = sign(conf(c) - prec(c)) * (p_i - y_i) / N' for detection i in kept D-ECE cell c "
    "(0 in a sparse cell); the contributions sum to the D-ECE"
)


class GridCells(NamedTuple):
    """The D-ECE cells of one confidence sample and their :func:`cell_contributions`, computed once and read
    by every table that bins the same sample on the same grid (the calibration split by error type and the
    worst-detections table). ``key``: (bins, edges, sample_threshold, policy, sample size) they were made with."""

    key: tuple[tuple[int, ...], str, int, str, int]
    cell: np.ndarray
    stats: dict[str, np.ndarray]


def cell_contributions(
    p: np.ndarray, y: np.ndarray, cell: np.ndarray, n_cells: int, sample_threshold: int, policy: str
) -> dict[str, np.ndarray]:
    """Per-cell statistics and per-sample contributions to the D-ECE.

    ``cell``: flat cell index of each sample. Returns ``count``, ``confidence``,
    ``precision``, ``gap`` (signed: conf - prec), ``kept`` per cell and
    ``contribution`` per sample (see the module docstring).
    """
    p = np.asarray(p, dtype=np.float64)
    yf = np.asarray(y, dtype=np.float64)
    count = np.bincount(cell, minlength=n_cells)
    sum_p = np.bincount(cell, weights=p, minlength=n_cells)
    sum_y = np.bincount(cell, weights=yf, minlength=n_cells)
    with np.errstate(invalid="ignore", divide="ignore"):
        conf = sum_p / count
        prec = sum_y / count
    gap = conf - prec
    kept = count >= max(int(sample_threshold), 1)
    n_prime = int(count[kept].sum()) if policy == "drop" else len(p)
    sign = np.where(kept, np.sign(np.nan_to_num(gap)), 0.0)
    contribution = sign[cell] * (p - yf) / max(n_prime, 1)
    return {
        "count": count,
        "confidence": conf,
        "precision": prec,
        "gap": gap,
        "kept": kept,
        "contribution": contribution,
        "n_prime": np.asarray(n_prime),
    }


def smallest(key: np.ndarray, top: int) -> np.ndarray:
    """Positions of the ``top`` smallest values of ``key``, ascending, ties in position order (NaN last): the
    first ``top`` of a stable argsort, found by a partition and a sort of the candidates only."""
    n = len(key)
    if top <= 0 or n == 0:
        return np.zeros(0, np.int64)
    if n > 2 * top:
        kth = np.partition(key, top - 1)[top - 1]
        if kth == kth:  # not NaN: every value up to it (ties included) is a candidate, nothing after it is
            cand = np.flatnonzero(key <= kth)
            return cand[np.argsort(key[cand], kind="stable")][:top]
    return np.argsort(key, kind="stable")[:top]


def _bin_ranges(multi: Sequence[int], bins: Sequence[int], names: Sequence[str]) -> dict[str, list[float]]:
    return {n: [k / b, (k + 1) / b] for n, k, b in zip(names, multi, bins)}


def _detection_rows(
    idx: np.ndarray, ctx: dict[str, Any], stats: dict[str, np.ndarray], cell: np.ndarray
) -> list[dict[str, Any]]:
    """One plain row per selected sample position ``idx``."""
    rows = []
    bins, names = ctx["bins"], ctx["feature_names"]
    multi = np.stack(np.unravel_index(cell[idx], tuple(bins)), axis=1) if len(idx) else np.zeros((0, len(bins)), int)
    for j, i in enumerate(idx.tolist()):
        c = int(cell[i])
        gt_box = ctx["gt_box"][i]
        rows.append(
            {
                "image_id": int(ctx["image_id"][i]),
                "file_name": str(ctx["file_name"][i]),
                "category": int(ctx["category"][i]),
                "class": str(ctx["class_name"][i]),
                "score": float(ctx["p"][i]),
                "iou": float(ctx["iou"][i]) if np.isfinite(ctx["iou"][i]) else None,
                "matched": bool(ctx["y"][i]),
                "cell": c,
                "cell_bins": {n: int(k) for n, k in zip(names, multi[j])},
                "cell_gap": float(stats["gap"][c]) if np.isfinite(stats["gap"][c]) else None,
                "cell_kept": bool(stats["kept"][c]),
                "contribution": float(stats["contribution"][i]),
                "share": _share(float(stats["contribution"][i]), ctx["dece"]),
                "box": [float(v) for v in ctx["box"][i]],
                "gt_box": None if gt_box is None else [float(v) for v in gt_box],
                "image_size": [float(ctx["width"][i]), float(ctx["height"][i])],
            }
        )
    return rows


def _share(amount: float, dece: float | None) -> float | None:
    """``amount`` as a fraction of the D-ECE (None when the D-ECE is 0 or undefined)."""
    return amount / dece if dece else None


def _cell_rows(stats: dict[str, np.ndarray], bins: Sequence[int], names: Sequence[str], top: int) -> list[dict]:
    n_prime = max(int(stats["n_prime"]), 1)
    share = np.where(stats["kept"], stats["count"] * np.abs(np.nan_to_num(stats["gap"])) / n_prime, -1.0)
    dece = float(share[stats["kept"]].sum()) if stats["kept"].any() else None
    order = np.argsort(-share, kind="stable")[:top]
    order = order[share[order] > 0]
    out = []
    for c in order.tolist():
        multi = [int(v) for v in np.unravel_index(c, tuple(bins))]
        out.append(
            {
                "cell": int(c),
                "cell_bins": dict(zip(names, multi)),
                "ranges": _bin_ranges(multi, bins, names),
                "count": int(stats["count"][c]),
                "confidence": float(stats["confidence"][c]),
                "precision": float(stats["precision"][c]),
                "gap": float(stats["gap"][c]),
                "contribution": float(share[c]),
                "share": _share(float(share[c]), dece),
            }
        )
    return out


def _cells(
    ctx: dict[str, Any],
    p: np.ndarray,
    y: np.ndarray,
    bins: Sequence[int],
    sample_threshold: int,
    policy: str,
    edges: str,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The sample's cells on the grid of ``ctx`` (``grid_columns``, or ``p`` and ``features``) and their statistics."""
    f = ctx.get("features")
    columns = ctx.get("grid_columns")
    if columns is None:
        grid = p[:, None] if f is None else np.column_stack([p, f])
        cell, n_cells = cell_index(grid, tuple(bins), edges)
    else:  # cell_index's own arithmetic on the columns it would cut from the stacked grid
        b = BinGrid.of(tuple(bins), len(columns))
        cell, n_cells = cell_index_columns([np.asarray(c, np.float64) for c in columns], b, edges), int(np.prod(b))
    return cell, cell_contributions(p, y, cell, n_cells, sample_threshold, policy)


def worst_detections(
    ctx: dict[str, Any],
    bins: Sequence[int],
    sample_threshold: int,
    policy: str,
    edges: str = "floor",
    top: int = 10,
    cells: GridCells | None = None,
) -> dict[str, Any]:
    """The worst-calibrated detections of one confidence sample.

    ``ctx``: arrays over the sample (``p``, ``y``, ``features`` [S, F] in [0, 1],
    ``iou``, ``image_id``, ``category``, ``class_name``, ``file_name``, ``box``,
    ``gt_box`` (list, None for a false positive), ``width``, ``height``) and
    ``feature_names`` (confidence first), and optionally ``grid_columns``, the grid's columns [S] each (the
    confidences, then the features; read instead of ``p`` and ``features`` stacked into an [S, 1 + F] copy);
    every column but ``p``, ``y`` and
    ``features`` is only indexed at the rows the tables show, so any object
    indexable by sample position will do. ``cells``: the sample's cells and statistics already computed on
    this grid (read when their ``key`` is this call's; no grid column is then read). Returns plain JSON-ready data.
    """

    p, y = np.asarray(ctx["p"], dtype=np.float64), np.asarray(ctx["y"], dtype=bool)
    key = (tuple(int(b) for b in bins), edges, int(sample_threshold), policy, len(p))
    if cells is not None and cells.key == key:
        cell, stats = cells.cell, cells.stats
    else:
        cell, stats = _cells(ctx, p, y, bins, sample_threshold, policy, edges)
    names = list(ctx["feature_names"])
    fp = np.flatnonzero(~y)
    tp = np.flatnonzero(y)
    fp = fp[smallest(-p[fp], top)]  # highest score first, input order on ties
    tp = tp[smallest(p[tp], top)]
    contrib = stats["contribution"]
    worst = smallest(-contrib, top)
    dece = float(contrib.sum()) if stats["kept"].any() else None
    sub = {**ctx, "p": p, "y": y, "bins": list(bins), "dece": dece}
    return {
        "definition": DEFINITION,
        "params": {
            "bins": [int(b) for b in bins],
            "features": names,
            "sample_threshold": int(sample_threshold),
            "policy": policy,
            "edges": edges,
            "top": int(top),
            "n": int(len(p)),
            "n_prime": int(stats["n_prime"]),
        },
        "dece_from_contributions": dece,
        "highest_confidence_false_positives": _detection_rows(fp, sub, stats, cell),
        "lowest_confidence_true_positives": _detection_rows(tp, sub, stats, cell),
        "largest_contributions": _detection_rows(worst, sub, stats, cell),
        "largest_gap_cells": _cell_rows(stats, bins, names, top),
    }
