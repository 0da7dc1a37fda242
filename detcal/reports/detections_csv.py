"""Per-detection table: one row per input detection (input order), match outcome per
IoU threshold, and for evaluations the box and its relative features.

Columns: ``image_id,category,score,considered,iou`` then per threshold T
``matched@T,ignored@T,gt_id@T`` (``@kitti`` for the per-class KITTI row);
:func:`detections_csv` appends ``x1,y1,x2,y2,rel_cx,rel_cy,rel_w,rel_h,clipped``.

CSV: floats at round-trip precision, exactly Python's ``repr`` (``0.1``,
``1e-05``, ``1e+16``, ``nan``), integers in decimal, flags ``0``/``1``. Each
column is turned into text by one C-level call (``orjson.dumps`` of the
numpy column, whose shortest round-trip digits equal ``repr`` for
``1e-4 <= |x| < 1e16`` and 0; the few values outside that range, and
non-finite ones, go through ``repr``), so there is no Python work per cell;
without orjson every cell goes through ``repr``/``str``. Parquet (through
pyarrow, :func:`write_detections_parquet`): the same columns, typed (int64,
float64, bool).
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from detcal.types import Detections, MatchResult

try:  # fast column formatting; the fallback gives the same text
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None

__all__ = [
    "format_csv",
    "detections_csv",
    "detections_columns",
    "evaluation_columns",
    "columns_to_csv",
    "write_detections_parquet",
]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")


def _column_names(result: MatchResult, per_class: bool) -> list[str]:
    tags = ["kitti"] if per_class else [f"{t:g}" for t in result.iou_thresholds]
    names = ["image_id", "category", "score", "considered", "iou"]
    for tag in tags:
        names += [f"matched@{tag}", f"ignored@{tag}", f"gt_id@{tag}"]
    return names


def detections_columns(dets: Detections, result: MatchResult, gt_ids: np.ndarray, per_class: bool = False) -> dict[str, np.ndarray]:
    """The match table as ordered columns: name -> int64, float64 or bool array [D]."""
    names = _column_names(result, per_class)
    cols: list[np.ndarray] = [
        np.asarray(dets.image_id, dtype=np.int64),
        np.asarray(dets.category, dtype=np.int64),
        np.asarray(dets.score, dtype=np.float64),
        np.asarray(result.considered, dtype=bool),
        np.asarray(result.iou, dtype=np.float64),
    ]
    gt_ids = np.asarray(gt_ids, dtype=np.int64)
    for t in range(result.matched.shape[0]):
        gi = result.gt_index[t]
        ids = np.where(gi >= 0, gt_ids[np.maximum(gi, 0)] if len(gt_ids) else -1, -1).astype(np.int64)
        cols += [np.asarray(result.matched[t], dtype=bool), np.asarray(result.ignored[t], dtype=bool), ids]
    return dict(zip(names, cols))


def evaluation_columns(data: Any, mr: MatchResult, feats: np.ndarray, clipped: np.ndarray) -> dict[str, np.ndarray]:
    """The evaluation's table: :func:`detections_columns` plus ``x1..y2``, ``rel_*`` and ``clipped``."""
    dets = data.detections
    per_class = not bool(np.all(np.isfinite(mr.iou_thresholds)))
    cols = detections_columns(dets, mr, data.dataset.gt.id, per_class)
    box = np.asarray(dets.box, dtype=np.float64)
    feats = np.asarray(feats, dtype=np.float64).reshape(len(box), len(FEATURES))
    for j, name in enumerate(("x1", "y1", "x2", "y2")):
        cols[name] = box[:, j]
    for j, name in enumerate(FEATURES):
        cols[f"rel_{name}"] = feats[:, j]
    cols["clipped"] = np.asarray(clipped).astype(bool)
    return cols


# --------------------------------------------------------------------------- CSV text
def _float_text(v: np.ndarray) -> list[str]:
    """``repr`` of every float of ``v`` [D], computed column-wise."""
    v = np.ascontiguousarray(v, dtype=np.float64)
    if _orjson is None or len(v) == 0:
        return list(map(repr, v.tolist()))
    out = _orjson.dumps(v, option=_orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode("ascii").split(",")
    a = np.abs(v)
    odd = np.flatnonzero(~((a >= 1e-4) & (a < 1e16)) & (v != 0) | ~np.isfinite(v))
    for i, x in zip(odd.tolist(), v[odd].tolist()):  # sci-notation and non-finite values: few
        out[i] = repr(x)
    return out


def _int_text(v: np.ndarray) -> list[str]:
    v = np.ascontiguousarray(v, dtype=np.int64)
    if _orjson is None or len(v) == 0:
        return list(map(str, v.tolist()))
    return _orjson.dumps(v, option=_orjson.OPT_SERIALIZE_NUMPY)[1:-1].decode("ascii").split(",")


_ZERO_ONE = np.array(["0", "1"], dtype=object)


def _text(v: np.ndarray) -> list[str]:
    if v.dtype == bool:
        return _ZERO_ONE[v.astype(np.intp)].tolist()
    if v.dtype.kind in "iu":
        return _int_text(v)
    return _float_text(v)


def columns_to_csv(cols: dict[str, np.ndarray]) -> str:
    """CSV text of ordered columns: header, then one line per row, each ending in a newline."""
    header = ",".join(cols)
    texts = [_text(np.asarray(v)) for v in cols.values()]
    body = "\n".join(map(",".join, zip(*texts)))
    return header + "\n" + body + ("\n" if body else "")


def format_csv(dets: Detections, result: MatchResult, gt_ids: np.ndarray, per_class: bool = False) -> str:
    """The CSV text (header + one row per detection, input order); floats at round-trip precision."""
    return columns_to_csv(detections_columns(dets, result, gt_ids, per_class))


def detections_csv(data: Any, mr: MatchResult, feats: np.ndarray, clipped: np.ndarray) -> str:
    """The evaluation's detections.csv: :func:`format_csv` plus box and relative features."""
    return columns_to_csv(evaluation_columns(data, mr, feats, clipped))


# --------------------------------------------------------------------------- Parquet
def write_detections_parquet(path: str | os.PathLike, cols: dict[str, np.ndarray]) -> None:
    """Atomically write ordered columns (:func:`detections_columns` / :func:`evaluation_columns`) as Parquet.

    Column names and order as in the CSV; types int64, float64 and bool.
    Needs pyarrow (imported here, not at module import).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from detcal.utils.io import atomic_write

    table = pa.table({name: pa.array(np.asarray(v)) for name, v in cols.items()})
    with atomic_write(path, "wb") as fh:
        pq.write_table(table, fh)
