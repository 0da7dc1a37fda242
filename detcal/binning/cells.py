"""Mergeable sufficient statistics per cell, in exact fixed point, numpy only.

Torchmetrics style:
``cell_stats`` is the ``_update`` stage (per-cell sums of one chunk of
samples), ``+`` merges chunks, and the metrics in :mod:`detcal.metrics`
are the ``_compute`` stage. Integer counts are int64; the float sums are
accumulated in exact fixed point (three int64 words of 18 bits, resolution
``2**-54`` of the value range, i.e. ``5.6e-17`` for a probability), so that
merging is integer addition: associative, order-free and bitwise identical to
the one-shot computation, whatever the chunking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from detcal.binning.edges import EDGE_RULES, EPS, BinGrid
from detcal.binning.kernels import (  # noqa: F401  (NLL_CLIP is re-exported)
    CHUNK,
    FX_BITS,
    NLL_CLIP,
    Workspace,
    add_words,
    cell_index_into,
    chunk_ok,
    chunks,
    fx_words_into,
    quick_arrays,
    term_into,
    words_int64,
)
from detcal.core.errors import DetcalInputError
from detcal.utils import memory  # the module: tests stand in for available_bytes there

_FX_BITS = FX_BITS
_FX_MASK = (1 << _FX_BITS) - 1
_FX_TOTAL = 3 * _FX_BITS  # 54 bits: finer than the 53-bit float64 mantissa
_MAX_SAMPLES = 1 << 34  # per-call bincount partial sums of 18-bit words stay exact below 2**53

FLOAT_STATS: dict[str, int] = {
    "sum_p0": 0,  # sum of p over unmatched samples (y = 0); value range [0, 1] -> log2 max 0
    "sum_p1": 0,  # sum of p over matched samples (y = 1)
    "sum_p2": 0,  # sum of p^2
    "sum_se": 0,  # sum of (p - y)^2 (Brier)
    "sum_nll": 5,  # sum of -[y log p + (1-y) log(1-p)], p clipped; <= -log(1e-12) = 27.6 < 2**5
}
"""Float statistics of :class:`CellStats` and log2 of their per-sample maximum."""


def _fx_value(words: np.ndarray, log2_max: int) -> np.ndarray:
    """Float value [...] of summed fixed-point words [...,3] (deterministic: fixed order).

    Each word is scaled by multiplying with its power of two (``2**(log2_max - 18 k)``, a normal float for every
    statistic of :data:`FLOAT_STATS`): the product of a float and a normal power of two whose result stays normal
    is exact, so it is ``np.ldexp`` of the word, bit for bit, in about half the time."""
    w = np.asarray(words, dtype=np.float64)
    return (
        w[..., 0] * (2.0 ** (log2_max - _FX_BITS))
        + w[..., 1] * (2.0 ** (log2_max - 2 * _FX_BITS))
        + w[..., 2] * (2.0 ** (log2_max - 3 * _FX_BITS))
    )


class CellSums(NamedTuple):
    """Float per-cell sums [..., C] (weighted or plain): what every metric is computed from.

    ``count`` N_c, ``sum_y`` (matched), ``sum_p`` = ``sum_p0 + sum_p1``,
    ``sum_p0``/``sum_p1`` sum of p over unmatched/matched samples,
    ``sum_p2`` sum of p^2, ``sum_se`` sum of (p - y)^2, ``sum_nll`` sum of the
    clipped log-loss. Bootstrap replicates are CellSums with float counts.
    A float statistic that was not requested from :func:`cell_stats` is
    ``None`` (any use of it then fails loudly).
    """

    count: np.ndarray  # type: ignore[assignment]  # shadows tuple.count, as intended
    sum_y: np.ndarray
    sum_p: np.ndarray
    sum_p0: np.ndarray
    sum_p1: np.ndarray
    sum_p2: np.ndarray
    sum_se: np.ndarray
    sum_nll: np.ndarray

    def total(self) -> CellSums:
        """Sums over the cell axis, keeping it with length 1: [..., 1]."""
        return CellSums(*(None if a is None else np.sum(a, axis=-1, keepdims=True) for a in self))


@dataclass(frozen=True, eq=False)
class CellStats:
    """Mergeable sufficient statistics of binary-confidence calibration per cell.

    Shapes: ``count [..., C]`` and ``sum_y [..., C]`` int64; ``fixed[name]
    [..., C, 3]`` int64 fixed-point words of each float statistic of
    :data:`FLOAT_STATS`; the leading axes (e.g. one per class) are optional.
    ``bins`` are the per-feature bin counts (C = prod(bins); feature 0 is the
    confidence), ``edges`` the edge rule. Merge by ``a + b`` (exact integer
    addition). The float sums are the properties ``sum_p``, ``sum_p0``,
    ``sum_p1``, ``sum_p2``, ``sum_se``, ``sum_nll``; :meth:`sums` gives all.
    """

    bins: tuple[int, ...]
    edges: str
    count: np.ndarray
    sum_y: np.ndarray
    fixed: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def n_cells(self) -> int:
        return int(np.prod(self.bins))

    @property
    def n(self) -> np.ndarray:
        """Samples N [...] (int64)."""
        return self.count.sum(axis=-1)

    def _value(self, name: str) -> np.ndarray:
        if name not in self.fixed:
            raise KeyError(f"statistic {name!r} was not computed (cell_stats(..., stats=...) had {sorted(self.fixed)})")
        return _fx_value(self.fixed[name], FLOAT_STATS[name])

    @property
    def sum_p(self) -> np.ndarray:
        if "sum_p0" not in self.fixed or "sum_p1" not in self.fixed:
            raise KeyError("sum_p needs the statistics sum_p0 and sum_p1")
        return _fx_value(self.fixed["sum_p0"] + self.fixed["sum_p1"], 0)

    @property
    def sum_p0(self) -> np.ndarray:
        return self._value("sum_p0")

    @property
    def sum_p1(self) -> np.ndarray:
        return self._value("sum_p1")

    @property
    def sum_p2(self) -> np.ndarray:
        return self._value("sum_p2")

    @property
    def sum_se(self) -> np.ndarray:
        return self._value("sum_se")

    @property
    def sum_nll(self) -> np.ndarray:
        return self._value("sum_nll")

    def sums(self, fields: Sequence[str] | None = None) -> CellSums:
        """Float view [..., C] of the statistics (``None`` for those not computed, and for the fields not in
        ``fields`` when given: a caller that reads only some of them, e.g. the fields a measure's values read,
        converts only those; each the same array either way)."""
        have = self.fixed.keys()
        wanted = set(CellSums._fields if fields is None else fields)

        def get(name: str) -> Any:  # statistics not computed (or not wanted) are None
            return self._value(name) if name in have and name in wanted else None

        sum_p: Any = self.sum_p if {"sum_p0", "sum_p1"} <= have and "sum_p" in wanted else None
        count: Any = self.count.astype(np.float64) if "count" in wanted else None
        sum_y: Any = self.sum_y.astype(np.float64) if "sum_y" in wanted else None
        return CellSums(
            count,
            sum_y,
            sum_p,
            get("sum_p0"),
            get("sum_p1"),
            get("sum_p2"),
            get("sum_se"),
            get("sum_nll"),
        )

    def total(self) -> CellStats:
        """Exact sums over the cells: a one-cell CellStats [..., 1] (for the cell-free metrics)."""
        return CellStats(
            bins=(1,),
            edges=self.edges,
            count=self.count.sum(axis=-1, keepdims=True),
            sum_y=self.sum_y.sum(axis=-1, keepdims=True),
            fixed={k: v.sum(axis=-2, keepdims=True) for k, v in self.fixed.items()},
        )

    def sum_groups(self) -> CellStats:
        """Exact sums over the leading group axis 0: [G, ..., C] -> [..., C]."""
        return CellStats(
            bins=self.bins,
            edges=self.edges,
            count=self.count.sum(axis=0),
            sum_y=self.sum_y.sum(axis=0),
            fixed={k: v.sum(axis=0) for k, v in self.fixed.items()},
        )

    def take_groups(self, member: np.ndarray) -> CellStats:
        """The groups ``member`` (a mask or indices) of the leading group axis: [G, ..., C] -> [g, ..., C]."""
        return CellStats(
            bins=self.bins,
            edges=self.edges,
            count=self.count[member],
            sum_y=self.sum_y[member],
            fixed={k: v[member] for k, v in self.fixed.items()},
        )

    def group_slice(self, start: int, stop: int) -> CellStats:
        """Groups ``start:stop`` of the leading group axis: [G, ..., C] -> [stop - start, ..., C] (views)."""
        return CellStats(
            bins=self.bins,
            edges=self.edges,
            count=self.count[start:stop],
            sum_y=self.sum_y[start:stop],
            fixed={k: v[start:stop] for k, v in self.fixed.items()},
        )

    def __add__(self, other: CellStats) -> CellStats:
        if not isinstance(other, CellStats):
            return NotImplemented
        if (
            self.bins != other.bins
            or self.edges != other.edges
            or self.count.shape != other.count.shape
            or self.fixed.keys() != other.fixed.keys()
        ):
            raise ValueError(
                f"cannot merge CellStats with bins {self.bins}/{other.bins}, edges {self.edges}/{other.edges}, "
                f"shapes {self.count.shape}/{other.count.shape}, statistics {sorted(self.fixed)}/{sorted(other.fixed)}"
            )
        return CellStats(
            bins=self.bins,
            edges=self.edges,
            count=self.count + other.count,
            sum_y=self.sum_y + other.sum_y,
            fixed={k: self.fixed[k] + other.fixed[k] for k in self.fixed},
        )

    @classmethod
    def merge(cls, parts: Sequence[CellStats]) -> CellStats:
        """Sum of a non-empty sequence of compatible CellStats."""
        if len(parts) == 0:
            raise ValueError("CellStats.merge needs at least one part")
        out = parts[0]
        for part in parts[1:]:
            out = out + part
        return out

    def equals(self, other: CellStats) -> bool:
        """Bitwise equality of every statistic (and the same grid)."""
        return (
            self.bins == other.bins
            and self.edges == other.edges
            and np.array_equal(self.count, other.count)
            and np.array_equal(self.sum_y, other.sum_y)
            and self.fixed.keys() == other.fixed.keys()
            and all(np.array_equal(self.fixed[k], other.fixed[k]) for k in self.fixed)
        )


def _bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def validate_sample(
    p: Any, y: Any, features: Any = None, *, file: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Checked ``p [S]`` float64 in [0, 1], ``y [S]`` bool, ``features [S,F]`` float64 in [0, 1] (or None).

    Raises :class:`DetcalInputError` naming the first bad record and the field. Arrays of the right shapes and
    types are checked by their smallest and largest values first (:func:`detcal.binning.kernels.chunk_ok`: NaN
    fails both comparisons); only a failing sample is checked value by value (the same arrays and errors).
    """
    quick = quick_arrays(p, y, features)
    if quick is not None and chunk_ok(*quick):
        return quick[0], quick[1].astype(bool), quick[2]
    p_arr = np.asarray(p, dtype=np.float64)
    if p_arr.ndim != 1:
        raise DetcalInputError(f"confidence must be 1-D [S], got shape {p_arr.shape}", file=file, field="p")
    bad = ~np.isfinite(p_arr) | (p_arr < 0.0) | (p_arr > 1.0)
    if bad.any():
        i = _bad(bad)
        raise DetcalInputError(
            f"confidence must be finite and in [0, 1], got {p_arr[i]!r}", file=file, record=i, field="p"
        )
    y_raw = np.asarray(y)
    if y_raw.shape != p_arr.shape:
        raise DetcalInputError(f"y has shape {y_raw.shape}, expected {p_arr.shape} like p", file=file, field="y")
    if y_raw.dtype != np.bool_:
        if y_raw.size and not np.issubdtype(y_raw.dtype, np.number):
            raise DetcalInputError(f"y must be bool or 0/1, got dtype {y_raw.dtype}", file=file, field="y")
        bad = (y_raw != 0) & (y_raw != 1)
        if bad.any():
            i = _bad(bad)
            raise DetcalInputError(f"y must be 0 or 1 (matched flag), got {y_raw[i]!r}", file=file, record=i, field="y")
    y_arr = y_raw.astype(bool)
    if features is None:
        return p_arr, y_arr, None
    f_arr = np.asarray(features, dtype=np.float64)
    if f_arr.ndim == 1:
        f_arr = f_arr[:, None]
    if f_arr.ndim != 2 or f_arr.shape[0] != p_arr.shape[0]:
        raise DetcalInputError(
            f"features must be [S,F] with S={p_arr.shape[0]}, got shape {f_arr.shape}", file=file, field="features"
        )
    bad = ~np.isfinite(f_arr) | (f_arr < 0.0) | (f_arr > 1.0)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise DetcalInputError(
            f"relative box feature {j} must be finite and in [0, 1] (clip with detcal.core.boxes.relative_features), "
            f"got {f_arr[i, j]!r}",
            file=file,
            record=int(i),
            field=f"features[:, {j}]",
        )
    return p_arr, y_arr, f_arr


def checked_p_features(p: Any, features: Any = None) -> tuple[np.ndarray, np.ndarray | None]:
    """``p [S]`` and ``features [S,F]`` as :func:`validate_sample` returns them, checked by their smallest and
    largest values (NaN fails both comparisons); only a failing sample goes through :func:`validate_sample`,
    which raises naming the first bad record (the same arrays and the same errors, without a mask per value)."""
    y = np.zeros(np.shape(p), dtype=bool)
    quick = quick_arrays(p, y, features)
    if quick is not None and chunk_ok(quick[0], quick[1], quick[2]):
        return quick[0], quick[2]
    p_arr, _, f_arr = validate_sample(p, y, features)
    return p_arr, f_arr


def sample_terms(p: np.ndarray, y: np.ndarray, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Per-sample values [S] of each float statistic of :data:`FLOAT_STATS` (or only ``names``).

    NLL term ``-[y log p + (1-y) log(1-p)]`` with p clipped to
    ``[1e-12, 1 - 1e-12]``, applied as ``max(p, 1e-12)`` and ``max(1 - p,
    1e-12)`` so that both ends clip to exactly ``-log(1e-12)`` (the float
    ``1 - 1e-12`` is not exact); squared error ``(p - y)^2``.
    """
    wanted = FLOAT_STATS.keys() if names is None else names
    out: dict[str, np.ndarray] = {}
    for name in wanted:
        if name == "sum_p0":
            out[name] = np.where(y, 0.0, p)
        elif name == "sum_p1":
            out[name] = np.where(y, p, 0.0)
        elif name in ("sum_p2", "sum_se", "sum_nll"):  # one implementation with the chunked pass, fresh buffers
            pa = np.asarray(p, dtype=np.float64)
            out[name] = term_into(name, pa, np.asarray(y).astype(bool), Workspace(len(pa)))
        else:
            raise DetcalInputError(f"unknown statistic {name!r}; known: {sorted(FLOAT_STATS)}", field="stats")
    return out


def _grid_bins(bins: int | Sequence[int], n_features: int, edges: str) -> BinGrid:
    """Checked edge rule and the grid (confidence first): ``bins`` as given when it is already a
    :class:`~detcal.binning.edges.BinGrid` of that size, else normalised by :meth:`BinGrid.of`."""
    if edges not in EDGE_RULES:
        raise DetcalInputError(f"edges must be one of {EDGE_RULES}, got {edges!r}", field="edges")
    try:
        return BinGrid.of(bins, n_features)
    except (ValueError, TypeError) as exc:
        raise DetcalInputError(
            f"{exc} (bins is an int or one count per feature, confidence first)", field="bins"
        ) from None


def sample_cells(
    p: np.ndarray, features: np.ndarray | None, bins: int | Sequence[int], edges: str = "floor"
) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    """Cell [S] of each sample over (p, features...), the bin tuple, and the p actually used.

    Under ``edges="netcal"`` the confidence is clipped to [eps, 1 - eps]
    (netcal clips the values it averages too); otherwise p is returned as is.
    """
    b = _grid_bins(bins, 1 + (0 if features is None else features.shape[1]), edges)
    p_used = np.clip(p, EPS, 1.0 - EPS) if edges == "netcal" else p
    return cell_index_chunked(p_used, features, b, edges), b, p_used


def cell_index_chunked(
    p_used: np.ndarray, features: np.ndarray | None, bins: tuple[int, ...], edges: str
) -> np.ndarray:
    """:func:`detcal.binning.edges.cell_index_columns` over (``p_used``, the columns of ``features``) in
    cache-sized chunks (:func:`detcal.binning.kernels.cell_index_into`, the same bins under every edge rule:
    tested): the per-feature temporaries of one chunk instead of several full-length arrays per feature.
    ``p_used`` is the confidence as binned (already clipped under netcal's rule)."""
    n = len(p_used)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out
    ws = Workspace(min(CHUNK, n))
    for a in chunks(n, CHUNK):
        fc = None if features is None else features[a : a + CHUNK]
        cell_index_into(p_used[a : a + CHUNK], fc, bins, edges, out[a : a + CHUNK], ws, p_clipped=edges == "netcal")
    return out


_COMPACT_KEYS = CHUNK
"""Above this many keys (2 x groups x cells) :func:`cell_stats` sums over the occupied keys of a chunk."""


def grid_bytes(size: int, n_stats: int) -> int:
    """Bytes :func:`cell_stats` allocates for ``size`` cells (x groups): the count and the fixed-point sums
    per (cell, y) (int64, three words a sum), and the key slots of a large grid."""
    return 2 * size * 8 * (2 + 3 * n_stats)


def _check_grid_memory(size: int, bins: Any, n_cells: int, n_stats: int) -> None:
    """Refuse a grid whose arrays would not fit in the memory available, before allocating any of them."""

    need, have = grid_bytes(size, n_stats), memory.available_bytes()
    if need > have:
        shape = " x ".join(str(int(v)) for v in np.atleast_1d(bins))
        groups = f" for each of {size // max(n_cells, 1):,} groups (classes)" if size > n_cells else ""
        raise DetcalInputError(
            f"a grid of {shape} = {n_cells:,} cells{groups} needs about {memory.gib(need)} of memory, more than the "
            f"{memory.gib(have)} available: use fewer bins (dece_binning.bins) or fewer features",
            field="bins",
        )


def cell_stats(
    p: Any,
    y: Any,
    features: Any = None,
    bins: int | Sequence[int] = 15,
    *,
    edges: str = "floor",
    groups: Any = None,
    n_groups: int | None = None,
    stats: Sequence[str] | None = None,
    cells: Any = None,
) -> CellStats:
    """The ``_update`` stage: per-cell sufficient statistics of one chunk of samples.

    Cells: equal-width bins over (p, features[:, 0], ...) in [0, 1], bins int
    or per-feature (confidence first), product grid (docs/metrics.md); the
    cell of a sample is that of :func:`detcal.metrics.reference.cells` and its
    exact sums give the cell means of :func:`detcal.metrics.reference.cell_gaps`.
    Per cell c: ``N_c``, ``sum y``, ``sum p`` (over y = 0 and y = 1), ``sum p^2``,
    ``sum (p - y)^2``, ``sum NLL``. With ``groups [S]`` in ``[0, n_groups)``
    (e.g. class index), the result has a leading axis: ``[n_groups, C]``.

    ``stats`` restricts the float statistics to those named (default all of
    :data:`FLOAT_STATS`): a metric computes only the sums it reads, e.g. ECE
    needs ``("sum_p0", "sum_p1")``.

    ``cell_stats(a) + cell_stats(b)`` is bitwise equal to ``cell_stats(a ++ b)``;
    the samples are processed in cache-sized chunks in that way (one pass,
    range checks per chunk; :func:`validate_sample` names the first bad record).

    ``cells [S]``: the cell of each sample on this grid, already computed (by
    :func:`sample_cells` with the same ``bins`` and ``edges``, e.g. once for
    detections shared by several IoU thresholds, then indexed): the binning is
    skipped; ``bins`` then gives the whole grid (confidence first) and
    ``features`` may be None.
    """
    quick = quick_arrays(p, y, features)
    validated = quick is None
    p_arr, y_arr, f_arr = validate_sample(p, y, features) if quick is None else quick
    n = len(p_arr)
    if n >= _MAX_SAMPLES:
        raise DetcalInputError(f"at most {_MAX_SAMPLES - 1} samples per cell_stats call; merge chunks", field="p")
    c_arr, b = _given_cells(cells, p_arr, f_arr, bins, edges)
    n_cells = int(np.prod(b))
    g, lead = _given_groups(groups, n_groups, p_arr)
    size = int(np.prod(lead, dtype=np.int64)) * n_cells
    shape = lead + (n_cells,)
    wanted, split, rest = _wanted_stats(stats)
    _check_grid_memory(size, b, n_cells, len(rest) + int(split))
    # every statistic is summed per key2 = 2 * key + y (the y halves of sum_p2, sum_se and sum_nll are
    # added at the end, exactly); with a large key range (e.g. classes x D-ECE cells) the keys of every
    # sample are made first and the sums run over the occupied keys only (:func:`_compact_sums`)
    names = (["sum_p"] if split else []) + rest
    compact = 2 * size > _COMPACT_KEYS
    count2 = np.zeros(0 if compact else 2 * size, dtype=np.int64)
    acc2 = {} if compact else {name: np.zeros((3, 2 * size), dtype=np.float64) for name in names}  # add_words
    keys = np.empty(n, dtype=np.int64) if compact else None
    # chunks stay cache-sized unless a per-chunk pass over the occupied keys would dominate
    step = max(CHUNK, size // 2)
    ws = Workspace(min(step, n))
    for a in chunks(n, step):
        pc, yc = p_arr[a : a + step], y_arr[a : a + step]
        fc = None if f_arr is None else f_arr[a : a + step]
        if not validated and not chunk_ok(pc, yc, fc):
            p_arr, y_arr, f_arr = validate_sample(p, y, features)  # raises, naming the first bad record
            validated = True
            pc, yc, fc = p_arr[a : a + step], y_arr[a : a + step], None if f_arr is None else f_arr[a : a + step]
        m = len(pc)
        cc, gc = None if c_arr is None else c_arr[a : a + step], None if g is None else g[a : a + step]
        p_used, key2 = _chunk_keys(pc, yc, fc, cc, gc, b, n_cells, edges, ws, size)
        if keys is not None:
            keys[a : a + m] = key2
            continue
        count2 += np.bincount(key2, minlength=2 * size)
        add_chunk(acc2, key2, p_used, yc, ws)
    if keys is not None:
        count2, acc2 = _compact_sums(keys, p_arr, y_arr, edges, size, names, step, ws)
    else:
        acc2 = {name: words_int64(acc2.pop(name)) for name in names}  # one at a time (the dict comprehension
        # pops each float accumulator before the next is converted)
    del keys, ws  # released before the statistics are assembled (peak memory)
    return _assemble(count2, acc2, shape, wanted, b, edges)


def _compact_sums(
    keys: np.ndarray,
    p_arr: np.ndarray,
    y_arr: np.ndarray,
    edges: str,
    size: int,
    names: list[str],
    step: int,
    ws: Workspace,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The count ``[2 size]`` and the fixed-point sums ``[2 size, 3]`` of ``names`` per key2 (``keys [S]``,
    every sample's key2, overwritten) over the occupied keys only.

    The samples are counted per key once; each key is replaced by its index among the occupied keys, the
    sums of every chunk are added into arrays over the occupied keys (contiguous: no scatter per chunk) and
    placed at their keys at the end. The sums are integers, so the same integers as adding chunk by chunk
    over the whole key range, in any order.
    """
    count2 = np.bincount(keys, minlength=2 * size)
    occ = np.flatnonzero(count2 != 0)  # the same positions; a boolean mask is scanned about 4x faster
    slot = np.zeros(2 * size, dtype=np.int64)
    slot[occ] = np.arange(len(occ))
    np.take(slot, keys, out=keys)
    del slot
    part = {name: np.zeros((3, len(occ)), dtype=np.float64) for name in names}  # exact word sums (add_words)
    for a in chunks(len(keys), step):
        pc, yc = p_arr[a : a + step], y_arr[a : a + step]
        m = len(pc)
        p_used = np.clip(pc, EPS, 1.0 - EPS, out=ws.get("p_used", np.float64, m)) if edges == "netcal" else pc
        add_chunk(part, keys[a : a + m], p_used, yc, ws)
    acc2: dict[str, np.ndarray] = {}
    for name in names:
        words = part.pop(name)
        acc2[name] = np.zeros((2 * size, 3), dtype=np.int64)
        for j in range(3):  # word by word: a contiguous source (a [P, 3] gather from the transpose is slower)
            acc2[name][:, j][occ] = words[j]  # whole numbers below 2**53: converted exactly
        del words
    return count2, acc2


def add_chunk(acc: dict[str, np.ndarray], key: np.ndarray, p_used: np.ndarray, y: np.ndarray, ws: Workspace) -> None:
    """Add one chunk's fixed-point sums into ``acc`` (statistic -> ``[3, K]`` float64 word sums, exact whole
    numbers: :func:`detcal.binning.kernels.add_words`; ``"sum_p"`` the confidence itself): ``key [m]`` the key of each sample (its row of ``acc``), ``p_used`` the confidence as
    averaged (clipped under netcal's rule), ``y`` the matched flags (bool or 0/1, read by the other
    statistics' terms only). The one per-chunk accumulation of :func:`cell_stats`, over the whole key range
    or over the occupied keys (:func:`_compact_sums`)."""
    m = len(p_used)
    terms_only_p = all(name == "sum_p" for name in acc)
    yb = y if (terms_only_p or y.dtype == np.bool_) else np.not_equal(y, 0, out=ws.get("y_bool", np.bool_, m))
    for name, words in acc.items():
        values = p_used if name == "sum_p" else term_into(name, p_used, yb, ws)
        add_words(words, key, fx_words_into(values, FLOAT_STATS.get(name, 0), ws))


def _wanted_stats(stats: Sequence[str] | None) -> tuple[tuple[str, ...], bool, list[str]]:
    """The checked statistics to compute, whether sum_p is split by y, and the others."""
    wanted = tuple(FLOAT_STATS) if stats is None else tuple(stats)
    unknown = [name for name in wanted if name not in FLOAT_STATS]
    if unknown:
        raise DetcalInputError(f"unknown statistic {unknown[0]!r}; known: {sorted(FLOAT_STATS)}", field="stats")
    return (
        wanted,
        "sum_p0" in wanted or "sum_p1" in wanted,
        [name for name in wanted if name not in ("sum_p0", "sum_p1")],
    )


def _chunk_keys(
    pc: np.ndarray,
    yc: np.ndarray,
    fc: np.ndarray | None,
    cc: np.ndarray | None,
    gc: np.ndarray | None,
    b: tuple[int, ...],
    n_cells: int,
    edges: str,
    ws: Workspace,
    size: int,
) -> tuple[np.ndarray, np.ndarray]:
    """One chunk's p as averaged (clipped under netcal's rule) and key2 = y * size + (group * C + cell) [m]
    (``size``: groups x cells).

    One pass over key2 gives N_c, sum y and the split of every sum by y (the y = 0 keys first, then the
    y = 1 keys: each half is one contiguous block of the sums).
    """
    m = len(pc)
    p_used = np.clip(pc, EPS, 1.0 - EPS, out=ws.get("p_used", np.float64, m)) if edges == "netcal" else pc
    if cc is None:
        key = cell_index_into(p_used, fc, b, edges, ws.get("key", np.int64, m), ws, p_clipped=edges == "netcal")
    else:
        key = ws.get("key", np.int64, m)
        np.copyto(key, cc, casting="unsafe")
    if gc is not None:
        gk = ws.get("group", np.int64, m)
        np.multiply(gc, n_cells, out=gk, casting="unsafe")
        key += gk
    yk = ws.get("y_key", np.int64, m)
    np.multiply(yc, size, out=yk, casting="unsafe")
    key2 = np.add(key, yk, out=key)
    return p_used, key2


def _given_cells(
    cells: Any,
    p_arr: np.ndarray,
    f_arr: np.ndarray | None,
    bins: int | Sequence[int],
    edges: str,
) -> tuple[np.ndarray | None, tuple[int, ...]]:
    """The checked ``cells [S]`` argument of :func:`cell_stats` (or None) and the grid's bins."""
    c_arr = None
    if cells is not None:
        c_arr = np.asarray(cells)
        if c_arr.shape != p_arr.shape or (c_arr.size and not np.issubdtype(c_arr.dtype, np.integer)):
            raise DetcalInputError(
                f"cells must be an integer array [S] like p, got {c_arr.dtype} {c_arr.shape}", field="cells"
            )
        n_feat = len(bins) - 1 if np.ndim(bins) else 0 if f_arr is None else f_arr.shape[1]  # type: ignore[arg-type]
    else:
        n_feat = 0 if f_arr is None else f_arr.shape[1]
    b = _grid_bins(bins, 1 + n_feat, edges)
    n_cells = int(np.prod(b))
    if c_arr is not None and c_arr.size and (int(c_arr.min()) < 0 or int(c_arr.max()) >= n_cells):
        raise DetcalInputError(f"cells must lie in [0, {n_cells})", field="cells")
    return c_arr, b


def _given_groups(groups: Any, n_groups: int | None, p_arr: np.ndarray) -> tuple[np.ndarray | None, tuple[int, ...]]:
    """The checked ``groups [S]`` argument of :func:`cell_stats` (or None) and the leading axis it adds."""
    if groups is None:
        return None, ()
    g = np.asarray(groups)
    if g.shape != p_arr.shape or (g.size and not np.issubdtype(g.dtype, np.integer)):
        raise DetcalInputError(f"groups must be an integer array [S], got {g.dtype} {g.shape}", field="groups")
    if n_groups is None:
        n_groups = int(g.max()) + 1 if g.size else 0
    if g.size and (int(g.min()) < 0 or int(g.max()) >= n_groups):  # by the extremes; the mask only to name one
        bad = (g < 0) | (g >= n_groups)
        i = _bad(bad)
        raise DetcalInputError(f"group {g[i]} outside [0, {n_groups})", record=i, field="groups")
    return g, (int(n_groups),)


def _assemble(
    count2: np.ndarray,
    acc2: dict[str, np.ndarray],
    shape: tuple[int, ...],
    wanted: tuple[str, ...],
    b: tuple[int, ...],
    edges: str,
) -> CellStats:
    """:class:`CellStats` from the sums per key2 = y * size + key (the y halves joined, sum_p split by y):
    each y half is a contiguous block, taken as it is (no copy) or added to the other."""
    size = len(count2) // 2
    count = (count2[:size] + count2[size:]).reshape(shape)
    sum_y = count2[size:].reshape(shape)
    fixed: dict[str, np.ndarray] = {}
    # each accumulator is released from ``acc2`` as soon as its statistics are taken (with many groups x cells
    # they are the largest arrays of the run: never all held twice)
    if "sum_p" in acc2:
        words = acc2.pop("sum_p")
        for name, half in (("sum_p0", words[:size]), ("sum_p1", words[size:])):
            if name in wanted:
                fixed[name] = half.reshape(shape + (3,))
        del words
    for name in wanted:
        if name not in ("sum_p0", "sum_p1"):
            words = acc2.pop(name)
            fixed[name] = (words[:size] + words[size:]).reshape(shape + (3,))
            del words
    return CellStats(bins=b, edges=edges, count=count, sum_y=sum_y, fixed=fixed)


def dense_rank(keys: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of integer ``keys [S]`` in ``[0, n_keys)``: the distinct
    keys in increasing order and the index of each key among them, by counting when the range is dense
    (no sort), else by sorting (``n_keys <= 0``: the range is unknown). The same arrays either way."""
    if len(keys) and 0 < n_keys <= 4 * len(keys) + 1024:
        seen = np.bincount(keys, minlength=n_keys) > 0
        if seen.all():  # every key of the range occurs (e.g. the image index alone): each key is its own rank
            return np.arange(n_keys), keys.astype(np.intp)
        rank = np.cumsum(seen) - 1
        return np.flatnonzero(seen), rank[keys]
    return sorted_rank(np.asarray(keys))


def sorted_rank(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of a 1-D array by one sort, each temporary released once read
    (the distinct keys in increasing order, of the keys' type, and the intp index of each key among them:
    the arrays ``np.unique`` gives, which holds the sorted keys, the order and two intp arrays at once).

    Non-negative integer keys whose largest value and sample index fit together in 62 bits are sorted as one
    int64 ``key << b | index`` (``b`` the bits of the largest index): a sort of values (numpy's vectorised
    sort) instead of an argsort, the order read back from the low bits, the keys from the high bits (the same
    distinct keys and the same index of each)."""
    if keys.ndim != 1 or len(keys) == 0:
        uniq, inv = np.unique(keys, return_inverse=True)
        return uniq, inv.reshape(-1)
    shift = int(len(keys) - 1).bit_length()
    packed = keys.dtype.kind in "iu" and int(keys.min()) >= 0 and int(keys.max()).bit_length() + shift <= 62
    if packed:
        ordered = keys.astype(np.int64)
        ordered <<= shift
        for lo in range(0, len(keys), CHUNK):  # the index in blocks (no [S] temporary beside the packed keys)
            ordered[lo : lo + CHUNK] |= np.arange(lo, min(lo + CHUNK, len(keys)), dtype=np.int64)
        ordered.sort()
        order: np.ndarray = np.empty(len(keys), dtype=np.int32 if len(keys) < 2**31 else np.int64)
        np.bitwise_and(ordered, (1 << shift) - 1, out=order, casting="unsafe")
        ordered >>= shift
    else:
        order = np.argsort(keys)
        ordered = keys[order]
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    # the first of each run by its position (a boolean mask as irregular as this one compresses slowly)
    uniq = np.take(ordered, np.flatnonzero(first)).astype(keys.dtype, copy=False)
    del ordered
    rank = np.cumsum(first, dtype=np.int32 if len(keys) < 2**31 else np.intp)
    rank -= 1
    del first
    inv = np.empty(len(keys), dtype=np.intp)
    inv[order] = rank
    return uniq, inv


def pair_sums(
    group_index: np.ndarray,
    p: Any,
    y: Any,
    features: Any = None,
    bins: int | Sequence[int] = 15,
    *,
    edges: str = "floor",
    fields: Sequence[str] | None = None,
    cells: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, CellSums, int]:
    """Float sums per occupied (group, cell) pair, for the bootstrap over images.

    Returns ``(pair_group [P], pair_cell [P], sums [P], n_cells)``, pairs
    sorted by (group, cell); ``group_index [S]`` in ``[0, n_groups)``.
    ``fields``: the :class:`CellSums` fields to compute (default all; the
    others are ``None``); ``count`` and ``sum_y`` are always given, and
    ``sum_p`` is always ``sum_p0 + sum_p1`` summed per pair (the same
    numbers whichever fields are asked for).

    ``cells [S]``: the cell of each sample on this grid, already computed (as for
    :func:`cell_stats`): the binning is skipped, ``bins`` gives the whole grid and
    ``features`` may be None (the same numbers).
    """
    p_arr, y_arr, f_arr = validate_sample(p, y, None if cells is not None else features)
    cell: np.ndarray | None = None
    b: tuple[int, ...]
    if cells is None:
        b = _grid_bins(bins, 1 + (0 if f_arr is None else f_arr.shape[1]), edges)
        if int(np.prod(b)) > 1:
            cell, b, p_used = sample_cells(p_arr, f_arr, b, edges)
        else:  # one cell: every sample's cell is 0 (the key is the group), no binning
            p_used = np.clip(p_arr, EPS, 1.0 - EPS) if edges == "netcal" else p_arr
    else:
        cells_in, b = _given_cells(cells, p_arr, None, bins, edges)
        c_arr = np.asarray(cells_in)
        cell = c_arr if c_arr.dtype.kind == "u" and c_arr.itemsize < 8 else np.asarray(c_arr, dtype=np.int64)
        p_used = np.clip(p_arr, EPS, 1.0 - EPS) if edges == "netcal" else p_arr
    n_cells = int(np.prod(b))
    g = np.asarray(group_index)
    g = g if g.dtype.kind in "iu" and g.itemsize < 8 or g.dtype == np.int64 else g.astype(np.int64)
    dense = len(g) > 0 and int(g.min()) >= 0
    top = (int(g.max()) + 1) * n_cells if len(g) else 0
    key = g.astype(np.int32 if dense and top < 2**31 else np.int64)  # the same keys, in half the memory
    if cell is not None:
        key *= n_cells
        key += cell  # in place (narrow unsigned cells widen exactly): one [S] integer array, not three
    del cell
    uniq, inv = dense_rank(key, top if dense else -1)
    del key  # the per-sample keys are not read again (the pairs' index is ``inv``)
    n_pairs = len(uniq)
    asked = set(CellSums._fields if fields is None else fields)
    terms = _pair_terms(inv, n_pairs, p_used, y_arr, asked)
    del inv
    chosen: dict[str, Any] = {  # the asked fields only
        f: terms.pop(f, None) if f in asked or f in ("count", "sum_y") else None for f in CellSums._fields
    }
    del terms
    sums = CellSums(**chosen)
    return uniq // n_cells, uniq % n_cells, sums, n_cells


def _pair_terms(
    inv: np.ndarray, n_pairs: int, p_used: np.ndarray, y_arr: np.ndarray, asked: set[str]
) -> dict[str, np.ndarray]:
    """The sums per pair (``inv [S]`` the intp pair of each sample, overwritten and restored: no second [S]
    index is made) of :func:`pair_sums`: ``count``, ``sum_y`` and the asked float statistics (``sum_p`` is
    ``sum_p0 + sum_p1``).

    The count, the matched count and the sums of p over unmatched and matched samples come from two counts
    over ``2 * pair + y`` (one unweighted, one weighted by p): each pair's sum of p over its unmatched samples is
    added in sample order, as the sum of ``where(y, 0, p)`` over all its samples is (the zeros added there
    change no bit: the partial sums are never negative), and the counts are whole numbers (exact in float64).
    The other statistics' per-sample terms are made one at a time (each [S] array released before the next).
    """
    want = asked | ({"sum_p0", "sum_p1"} if "sum_p" in asked else set())
    inv *= 2  # 2 * pair + y, in place
    np.add(inv, y_arr, out=inv, casting="unsafe")
    n2 = np.bincount(inv, minlength=2 * n_pairs)
    terms: dict[str, np.ndarray] = {
        "count": (n2[0::2] + n2[1::2]).astype(np.float64),
        "sum_y": n2[1::2].astype(np.float64),
    }
    del n2
    if want & {"sum_p0", "sum_p1"}:
        split = np.bincount(inv, weights=p_used, minlength=2 * n_pairs)
        if "sum_p" in want:
            terms["sum_p"] = split[0::2] + split[1::2]
        terms.update({k: np.ascontiguousarray(split[j::2]) for j, k in enumerate(("sum_p0", "sum_p1")) if k in asked})
        del split
    np.right_shift(inv, 1, out=inv)  # the pair of each sample again
    for k in FLOAT_STATS:
        if k in want and k not in ("sum_p0", "sum_p1"):
            terms[k] = np.bincount(inv, weights=sample_terms(p_used, y_arr, (k,))[k], minlength=n_pairs)
    return terms
