"""Per-detection table: one row per input detection (input order), match outcome per
IoU threshold, and for evaluations the box and its relative features.

Columns: ``image_id,category,score,considered,iou`` then per threshold T
``matched@T,ignored@T,gt_id@T`` (``@kitti`` for the per-class KITTI row);
:func:`detections_csv` appends ``x1,y1,x2,y2,rel_cx,rel_cy,rel_w,rel_h,clipped``.

CSV: floats at round-trip precision, exactly Python's ``repr`` (``0.1``,
``1e-05``, ``1e+16``, ``nan``), integers in decimal, flags ``0``/``1``. The
rows are written in blocks of :data:`BLOCK_ROWS`; in each, the float columns
and the integer columns (flags as 0/1) are each read row by row and turned
into text by one C-level call (``orjson.dumps`` of the numpy block, whose
shortest round-trip digits equal ``repr`` for ``1e-4 <= |x| < 1e16`` and 0;
the few values outside that range, and non-finite ones, go through
``repr``), and the lines are assembled by one gather of the stretches of
consecutive cells of each kind, so there is no Python work per cell;
without orjson each cell goes through ``repr``/``str`` (same text). Parquet (through
pyarrow, :func:`write_detections_parquet`): the same columns, typed (int64,
float64, bool).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from detcal.core.types import Detections, MatchResult
from detcal.utils.io import atomic_write

try:  # fast column formatting; the fallback gives the same text
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]

__all__ = [
    "format_csv",
    "detections_csv",
    "detections_columns",
    "evaluation_columns",
    "matched_gt_ids",
    "columns_to_csv",
    "columns_to_csv_bytes",
    "iter_csv_bytes",
    "write_columns_csv",
    "write_detections_parquet",
]

FEATURES: tuple[str, ...] = ("cx", "cy", "w", "h")


def column_names(result: MatchResult, per_class: bool) -> list[str]:
    tags = ["kitti"] if per_class else [f"{t:g}" for t in result.iou_thresholds]
    names = ["image_id", "category", "score", "considered", "iou"]
    for tag in tags:
        names += [f"matched@{tag}", f"ignored@{tag}", f"gt_id@{tag}"]
    return names


def detections_columns(
    dets: Detections, result: MatchResult, gt_ids: np.ndarray, per_class: bool = False
) -> dict[str, np.ndarray]:
    """The match table as ordered columns: name -> int64, float64 or bool array [D]."""
    names = column_names(result, per_class)
    cols: list[np.ndarray] = [
        np.asarray(dets.image_id, dtype=np.int64),
        np.asarray(dets.category, dtype=np.int64),
        np.asarray(dets.score, dtype=np.float64),
        np.asarray(result.considered, dtype=bool),
        np.asarray(result.iou, dtype=np.float64),
    ]
    gt_ids = np.asarray(gt_ids, dtype=np.int64)
    for t in range(result.matched.shape[0]):
        cols += [
            np.asarray(result.matched[t], dtype=bool),
            np.asarray(result.ignored[t], dtype=bool),
            matched_gt_ids(result.gt_index[t], gt_ids),
        ]
    return dict(zip(names, cols))


def matched_gt_ids(gi: np.ndarray, gt_ids: np.ndarray) -> np.ndarray:
    """The id of each detection's matched ground truth (``gt_ids[gi]``), -1 where ``gi`` is negative (int64).

    When ``gi`` holds only -1 and valid rows (a matching's own output), one gather from ``gt_ids`` with a -1
    appended (read by index -1); otherwise rows below -1 become -1 and a row past the ground truths raises
    ``IndexError``, as a gather of ``max(gi, 0)`` does."""
    gi = np.asarray(gi)
    if not len(gi):
        return np.zeros(0, dtype=np.int64)
    if int(gi.min()) >= -1 and int(gi.max()) < len(gt_ids):
        return np.append(gt_ids, np.int64(-1))[gi]
    return np.where(gi >= 0, gt_ids[np.maximum(gi, 0)] if len(gt_ids) else -1, -1).astype(np.int64)


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
_COMMA, _NEWLINE = 44, 10


def _float_text(v: np.ndarray) -> list[str]:
    """``repr`` of every float of ``v`` [D] (list form of :func:`_column_chunks`; used by tests)."""
    buf, lens = _column_chunks(np.asarray(v, dtype=np.float64))
    text = buf.tobytes().decode("ascii")
    ends = np.cumsum(lens)
    return [text[e - n : e - 1] for e, n in zip(ends.tolist(), lens.tolist())]


def _column_cells(v: np.ndarray) -> np.ndarray:
    """The cells of a numeric column as ASCII bytes (uint8), each cell followed by one separator byte: a
    comma, except that the last cell's may be ``]`` (the end of orjson's list, read in place; the caller
    writes a comma or a newline there).

    Integers in decimal; floats as ``repr``. With orjson the digits come from
    one ``orjson.dumps`` of the column (equal to ``repr`` for ``1e-4 <= |x| <
    1e16`` and 0); the other cells (scientific notation, nan, inf) are
    spliced in from ``repr``, a Python step per such cell only.
    """
    n = len(v)
    if not n:
        return np.zeros(0, dtype=np.uint8)
    if v.dtype.kind in "iu":
        v = np.ascontiguousarray(v, dtype=np.int64)
        if _orjson is None:
            return np.frombuffer((",".join(map(str, v.tolist())) + ",").encode("ascii"), dtype=np.uint8)
        return np.frombuffer(_orjson.dumps(v, option=_orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)[1:]
    v = np.ascontiguousarray(v, dtype=np.float64)
    if _orjson is None:
        return np.frombuffer((",".join(map(repr, v.tolist())) + ",").encode("ascii"), dtype=np.uint8)
    text = _orjson.dumps(v, option=_orjson.OPT_SERIALIZE_NUMPY)
    a = np.abs(v)
    odd = np.flatnonzero(~((a >= 1e-4) & (a < 1e16)) & (v != 0))  # nan and inf fail the range too
    if not len(odd):
        return np.frombuffer(text, dtype=np.uint8)[1:]
    spliced = _splice(text[1:-1], n, odd, [repr(x).encode("ascii") for x in v[odd].tolist()])
    return np.frombuffer(spliced + b",", dtype=np.uint8)


def _column_chunks(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One column as ASCII bytes [B] (uint8) in which every cell is followed by a separator (a comma; the
    last cell's may be ``]``), and the length of each cell with its separator [n] (bool -> ``0``/``1``;
    integers in decimal; floats as ``repr``)."""
    n = len(v)
    if v.dtype == bool:
        buf = np.full(2 * n, _COMMA, dtype=np.uint8)
        buf[0::2] = v.view(np.uint8) + ord("0")
        return buf, np.full(n, 2, dtype=np.int64)
    buf = _column_cells(v)
    ends = np.flatnonzero(buf == _COMMA)
    if len(ends) < n:  # the last cell ends at orjson's "]"
        ends = np.append(ends, len(buf) - 1)
    return buf, np.diff(ends, prepend=-1)


def _splice(text: bytes, n: int, cells: np.ndarray, new: list[bytes]) -> bytes:
    """Replace cells ``cells`` (sorted) of comma-separated ``text`` by ``new``."""
    buf = np.frombuffer(text, dtype=np.uint8)
    commas = np.flatnonzero(buf == _COMMA)
    starts = np.concatenate([[0], commas + 1])[cells].tolist()
    ends = np.concatenate([commas, [len(buf)]])[cells].tolist()
    pieces: list[bytes] = []
    prev = 0
    for a, b, piece in zip(starts, ends, new):
        pieces += [text[prev:a], piece]
        prev = b
    pieces.append(text[prev:])
    return b"".join(pieces)


BLOCK_ROWS = 2048
"""Rows per block of the CSV writer: small enough that a block's text and its int64 byte offsets stay in
the CPU caches (about 0.35 MB of text for detections.csv's 21 columns), large enough that the numpy calls
per block are few against the bytes they move."""


class _Scratch:
    """Named buffers reused from block to block (fresh pages cost a fault each), and the cell positions of the
    runs of a line for the block's shape (the same for every full block)."""

    def __init__(self) -> None:
        self._bufs: dict[str, np.ndarray] = {}
        self.bounds: dict[tuple[object, ...], tuple[np.ndarray, np.ndarray, list[int]]] = {}

    def get(self, name: str, size: int, dtype: type) -> np.ndarray:
        buf = self._bufs.get(name)
        if buf is None or len(buf) < size:
            buf = self._bufs[name] = np.empty(size + size // 4, dtype=dtype)
        return buf[:size]


def _streams(dtypes: list[np.dtype]) -> tuple[list[list[int]], list[tuple[int, int, int]]]:
    """The columns of each stream (0: floats, 1: integers and flags; each in column order) and the runs
    of a line: ``(stream, first, last)`` for each stretch of consecutive columns of one stream, in line
    order (``first``/``last``: positions within the stream's row)."""
    members: list[list[int]] = [[], []]
    runs: list[tuple[int, int, int]] = []
    for c, dt in enumerate(dtypes):
        s = 1 if dt.kind in "iub" else 0
        pos = len(members[s])
        if runs and runs[-1][0] == s:
            runs[-1] = (s, runs[-1][1], pos)
        else:
            runs.append((s, pos, pos))
        members[s].append(c)
    return members, runs


def _stream_text(
    values: list[np.ndarray], members: list[list[int]], scratch: _Scratch
) -> tuple[np.ndarray, np.ndarray]:
    """The text of the two streams, one after the other in one uint8 buffer: each stream is its columns'
    rows read row by row, every cell followed by a comma (a float64 or int64 block made row-major, the
    flags as integers 0 and 1, turned into text in one call of :func:`_column_cells`). Returns the buffer
    and the position of every comma: the float stream's cells row by row, then the integer stream's."""
    m = len(values[0])
    texts: list[np.ndarray] = []
    for s, dtype in enumerate((np.float64, np.int64)):
        rows = scratch.get(f"rows{s}", m * len(members[s]), dtype).reshape(m, len(members[s]))
        for j, c in enumerate(members[s]):
            rows[:, j] = values[c]
        texts.append(_column_cells(rows.ravel()))
    size = len(texts[0]) + len(texts[1])
    text = scratch.get("text", size, np.uint8)
    at = 0
    for t in texts:
        if len(t):
            text[at : at + len(t)] = t
            text[at + len(t) - 1] = _COMMA  # a stream's last separator may be orjson's "]"
            at += len(t)
    return text, np.flatnonzero(np.equal(text, _COMMA, out=scratch.get("comma", size, bool)))


def _run_cells(
    m: int, members: list[list[int]], runs: list[tuple[int, int, int]], scratch: _Scratch
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Where, among the commas of :func:`_stream_text`, each run of each line ends and where the cell before
    it ends ([m, runs] each: a run's bytes follow the comma ``before`` and end with the comma ``last``), and
    the runs whose ``before`` is the text's start on the first line (index -1, set by the caller).
    A line's first cell of a stream follows the previous line's last cell of that stream, which is the comma
    just before it in the stream's row-major order; so every run is one fixed offset from its line's first
    comma in its stream. Kept in ``scratch`` for the block's shape."""
    key = (m, tuple(runs), tuple(map(len, members)))
    found = scratch.bounds.get(key)
    if found is not None:
        return found
    widths = [len(g) for g in members]
    base = [0, m * widths[0]]
    row = np.arange(m, dtype=np.int64)
    before = np.empty((m, len(runs)), dtype=np.int64)
    last = np.empty((m, len(runs)), dtype=np.int64)
    for j, (s, a, b) in enumerate(runs):
        before[:, j] = base[s] + row * widths[s] + a - 1
        last[:, j] = base[s] + row * widths[s] + b
    start = [j for j, (s, a, _) in enumerate(runs) if a == 0 and base[s] == 0]
    scratch.bounds = {key: (before, last, start)}
    return before, last, start


def _block_array(values: list[np.ndarray], scratch: _Scratch | None = None) -> np.ndarray:
    """CSV lines of the rows of ``values`` (one array per column, the same length, at least one row), as
    uint8 in a buffer of ``scratch`` (valid until its next use).

    The floats and the integers (flags as 0/1) are each turned into text row by row
    (:func:`_stream_text`); a line is then a few runs, each a stretch of consecutive cells of one
    stream, copied by one gather whose byte offsets are a running sum of steps that are 1 inside a run
    and jump at each run's first byte. The last comma of each line becomes a newline."""
    scratch = _Scratch() if scratch is None else scratch
    m = len(values[0])
    members, runs = _streams([v.dtype for v in values])
    text, commas = _stream_text(values, members, scratch)
    at_before, at_last, start = _run_cells(m, members, runs, scratch)
    before = np.take(commas, at_before, mode="wrap")  # the comma before each run (index -1 fixed below)
    before[0, start] = -1
    last = np.take(commas, at_last)
    lengths = last - before
    dest_end = np.cumsum(lengths.ravel()).reshape(lengths.shape)
    size = int(dest_end[-1, -1])
    step = np.empty(before.size, dtype=np.int64)
    step[0] = before[0, 0] + 1
    step[1:] = before.ravel()[1:] + 1 - last.ravel()[:-1]
    offsets = scratch.get("offsets", size, np.int64)
    offsets.fill(1)
    offsets[(dest_end - lengths).ravel()] = step
    np.cumsum(offsets, out=offsets)
    out = np.take(text, offsets, out=scratch.get("lines", size, np.uint8), mode="wrap")  # offsets in range
    out[dest_end[:, -1] - 1] = _NEWLINE
    return out


def iter_csv_bytes(cols: dict[str, np.ndarray], block: int = BLOCK_ROWS) -> Iterator[bytes]:
    """CSV of ordered columns in pieces: the header line, then blocks of ``block`` rows.

    Rows are assembled without Python work per cell (:func:`_block_array`).
    Memory is bounded by the block, whatever the number of rows.
    """
    for piece in _iter_csv_arrays(cols, block):
        yield piece if isinstance(piece, bytes) else piece.tobytes()


def _iter_csv_arrays(cols: dict[str, np.ndarray], block: int = BLOCK_ROWS) -> Iterator[bytes | np.ndarray]:
    """:func:`iter_csv_bytes` with each block of lines as a uint8 array in a buffer reused from block to
    block (each valid until the next is asked for)."""
    yield (",".join(cols) + "\n").encode("ascii")
    values = [np.asarray(v) for v in cols.values()]
    n = len(values[0]) if values else 0
    scratch = _Scratch()
    for lo in range(0, n, block):
        yield _block_array([v[lo : lo + block] for v in values], scratch)


def columns_to_csv_bytes(cols: dict[str, np.ndarray]) -> bytes:
    """CSV bytes of ordered columns: header, then one line per row, each ending in a newline."""
    return b"".join(iter_csv_bytes(cols))


def write_columns_csv(path: str | os.PathLike, cols: dict[str, np.ndarray]) -> None:
    """Atomically write ordered columns as CSV, block by block (:func:`iter_csv_bytes`)."""

    with atomic_write(path, "wb") as fh:
        for piece in _iter_csv_arrays(cols):
            fh.write(piece)  # a block's lines, written before the next block is made


def columns_to_csv(cols: dict[str, np.ndarray]) -> str:
    """:func:`columns_to_csv_bytes` as text."""
    return columns_to_csv_bytes(cols).decode("ascii")


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
    import pyarrow as pa  # lazy: pyarrow is the [parquet] extra
    import pyarrow.parquet as pq  # lazy: pyarrow is the [parquet] extra

    table = pa.table({name: pa.array(np.asarray(v)) for name, v in cols.items()})
    with atomic_write(path, "wb") as fh:
        pq.write_table(table, fh)
