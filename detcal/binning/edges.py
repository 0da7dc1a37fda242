"""Binning of confidence cells and of sigma (docs/metrics.md), numpy only.

Two families:

* Equal-width multivariate cells over features in [0, 1] (confidence and the
  relative box features cx, cy, w, h): per-feature bin counts, half-open bins
  ``[a, b)`` with the last one closed, cells = product grid, flattened in C
  order (feature 0 slowest).
* Bins over sigma: ``equal_count`` (Levi et al.: sort by sigma, split into B
  consecutive groups of equal size, the first ``S mod B`` groups one larger)
  and ``equal_width`` over ``[min sigma, max sigma]`` (netcal).

Edge rules for the equal-width cells (``edges``):

* ``"floor"`` (default): bin ``floor(v * B)`` computed in floating point,
  ``1.0`` in the last bin. A decimal score such as ``0.6`` lands in
  ``[0.6, 0.8)`` for ``B = 5``, as a reader expects.
* ``"netcal"``: netcal 1.4.0 exactly: every feature (confidence included) is
  first clipped to ``[eps, 1 - eps]`` (``eps`` of float64) and binned against
  ``np.linspace(0, 1, B + 1)`` with ``searchsorted(side="right")``
  (``np.histogramdd``). The two rules differ only for values lying on an edge
  up to rounding (e.g. ``0.6`` with ``B = 5``: ``linspace`` gives the edge
  ``0.6000000000000001``, so netcal puts ``0.6`` in ``[0.4, 0.6)``).
* ``"guo"``: Guo et al. 2017's intervals ``((m-1)/B, m/B]``, open on the
  left: bin ``ceil(v * B) - 1`` in floating point, ``0`` in the first bin.
  ``0.6`` with ``B = 5`` lands in ``(0.4, 0.6]``.

The exact fixed-point per-cell statistics (:class:`CellStats`,
:func:`cell_stats`) live in :mod:`detcal.binning.cells`, the fixed-point
kernels in :mod:`detcal.binning.kernels`; both build on this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError

EDGE_RULES: tuple[str, ...] = ("floor", "netcal", "guo")
"""Edge rules of the equal-width cells over [0, 1] (see the module docstring)."""

EPS: float = float(np.finfo(np.float64).eps)
"""Machine epsilon of float64: netcal's rule clips every value to ``[EPS, 1 - EPS]``."""


class BinGrid(tuple[int, ...]):
    """Per-dimension bin counts of an equal-width cell grid (confidence first), normalised once.

    The one place a ``bins`` value (an int broadcast over the dimensions, or one
    count per dimension) is checked and normalised: :meth:`of`. A grid built
    from a configuration (e.g. :meth:`detcal.pipeline.spec.DeceBinningSpec.grid`)
    is passed down as it is; every function taking ``bins`` accepts it and
    :meth:`of` returns it unchanged. A tuple, so it reads as one everywhere
    (``len``, ``np.prod``, ``list``).
    """

    __slots__ = ()

    @classmethod
    def of(cls, bins: int | Sequence[int], n_dims: int) -> BinGrid:
        """``bins`` as a grid of ``n_dims`` dimensions (an int is broadcast); a grid of that size is returned as is.

        Raises ``ValueError`` on a count below 1 or a sequence of another length.
        """
        if isinstance(bins, BinGrid) and len(bins) == n_dims:
            return bins
        if np.ndim(bins) == 0:
            b = (int(bins),) * n_dims  # type: ignore[arg-type]
        else:
            b = tuple(int(x) for x in bins)  # type: ignore[union-attr]
            if len(b) != n_dims:
                raise ValueError(f"bins has {len(b)} entries but there are {n_dims} features")
        if any(x < 1 for x in b):
            raise ValueError(f"every bin count must be >= 1, got {b}")
        return cls(b)

    @property
    def n_cells(self) -> int:
        """Cells of the product grid."""
        return int(np.prod(self, dtype=np.int64))


def normalise_bins(bins: int | Sequence[int], n_features: int) -> tuple[int, ...]:
    """Per-feature bin counts as a tuple of length F (an int is broadcast): :meth:`BinGrid.of`."""
    return BinGrid.of(bins, n_features)


def feature_bin_index(values: np.ndarray, n_bins: int, edges: str = "floor") -> np.ndarray:
    """Equal-width bin of each value in [0, 1]: ``floor(v * B)``, with 1.0 in the last bin.

    ``edges="netcal"``: ``searchsorted(linspace(0, 1, B + 1), clip(v, eps, 1 - eps),
    side="right") - 1`` (netcal 1.4.0 / ``np.histogramdd``). Bins are half-open
    ``[a, b)``, the last one closed, under both rules.
    """
    v = np.asarray(values, dtype=np.float64)
    if edges == "floor":
        # truncation equals floor for v >= 0; negatives and values >= 1 are clipped below anyway
        idx = (v * n_bins).astype(np.int64)
        np.clip(idx, 0, n_bins - 1, out=idx)
        return idx
    elif edges == "guo":
        # Guo et al. 2017: bin m holds ((m-1)/B, m/B], i.e. ceil(v B) - 1; v = 0 joins the first bin
        idx = np.ceil(v * n_bins).astype(np.int64) - 1
        np.clip(idx, 0, n_bins - 1, out=idx)
        return idx
    elif edges == "netcal":
        # == searchsorted(grid, v, side="right") - 1, computed from the guess trunc(v B): the
        # linspace edges lie within an ulp of k/B, so the guess is off by at most one; fix it
        # with two gathered comparisons (exact, and ~10x faster than a binary search).
        grid = np.append(np.linspace(0.0, 1.0, n_bins + 1), np.inf)
        vc = np.clip(v, EPS, 1.0 - EPS)
        idx = (vc * n_bins).astype(np.int64)
        np.clip(idx, 0, n_bins, out=idx)
        idx -= grid[idx] > vc
        idx += grid[idx + 1] <= vc
    else:
        raise ValueError(f"edges must be one of {EDGE_RULES}, got {edges!r}")
    return np.clip(idx, 0, n_bins - 1)


def cell_index(features: np.ndarray, bins: int | Sequence[int], edges: str = "floor") -> tuple[np.ndarray, int]:
    """Flat cell index [S] of each sample over features [S,F] in [0, 1], and the cell count.

    Cells are the product grid of equal-width bins per feature, flattened in
    C order (``np.ravel_multi_index``); ``edges`` as :func:`feature_bin_index`.
    """
    x = np.asarray(features, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    b = BinGrid.of(bins, x.shape[1])
    return cell_index_columns([x[:, f] for f in range(x.shape[1])], b, edges), int(np.prod(b))


def cell_index_columns(columns: Sequence[np.ndarray], bins: Sequence[int], edges: str = "floor") -> np.ndarray:
    """:func:`cell_index` over one 1-D array [S] per feature (strided column views welcome: no [S,F] copy).

    ``bins``: one count per column. C-order flattening (as ``np.ravel_multi_index``), accumulated in place.
    """
    flat = feature_bin_index(columns[0], bins[0], edges)
    for f in range(1, len(columns)):
        flat *= bins[f]
        flat += feature_bin_index(columns[f], bins[f], edges)
    return flat


def equal_count_bins(sigma: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-count bin index [S] over ``sigma`` [S] (Levi et al. 2019).

    Sort by sigma (stable), split into ``n_bins`` consecutive groups; the first
    ``S mod B`` groups get one sample more (as ``np.array_split``).
    """
    s = np.asarray(sigma, dtype=np.float64).reshape(-1)
    n = len(s)
    order = np.argsort(s, kind="stable")
    q, r = divmod(n, n_bins)
    sizes = np.full(n_bins, q, dtype=np.int64)
    sizes[:r] += 1
    ranks_bin = np.repeat(np.arange(n_bins, dtype=np.int64), sizes)
    out = np.empty(n, dtype=np.int64)
    out[order] = ranks_bin
    return out


def equal_width_bins(values: np.ndarray, n_bins: int, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    """Equal-width bin index [S] over ``[lo, hi]`` (default: min and max of ``values``).

    Half-open bins ``[a, b)``, the last closed; values outside are clipped
    into the first/last bin. A zero-width range puts everything in bin 0.
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(v) == 0:
        return np.zeros(0, dtype=np.int64)
    lo = float(v.min()) if lo is None else float(lo)
    hi = float(v.max()) if hi is None else float(hi)
    if hi <= lo:
        return np.zeros(len(v), dtype=np.int64)
    idx = np.floor((v - lo) / (hi - lo) * n_bins).astype(np.int64)
    return np.clip(idx, 0, n_bins - 1)


# ---------------------------------------------------------------------------
# Rank segments with shared ties (equal-count bins, retention curves)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RankSegments:
    """Samples split into consecutive rank segments of ascending ``u``, ties shared.

    Segment j holds the ranks ``[cuts[j], cuts[j+1])`` of ``u`` sorted in
    ascending order (``cuts[0] = 0``, ``cuts[J] = S``). Tie rule (one rule for
    every equal-count bin and retention curve in detcal): samples with equal
    ``u`` are exchangeable, so a tie group occupying the ranks ``[lo, hi)`` is
    spread over the segments it overlaps: segment j receives the fraction
    ``|[lo, hi) & [cuts[j], cuts[j+1])| / (hi - lo)`` of every sum over the
    group (its count share is that overlap, an integer). Equivalently, every
    member carries the group mean of any per-sample value. The result does not
    depend on the input order; with no tie group straddling a cut it is the
    plain split of a stable sort.

    Fields: ``cuts [J+1]`` int64; ``index [S]`` int64 segment of each sample,
    ``J`` (one past the last) for members of a straddling tie group;
    ``groups``: one ``(members [m] int64, share [J] float64)`` per straddling
    group (at most J - 1 groups); ``lo_value``/``hi_value [J]`` the smallest
    and largest ``u`` of each segment (NaN when empty).
    """

    cuts: np.ndarray
    index: np.ndarray
    groups: tuple[tuple[np.ndarray, np.ndarray], ...]
    lo_value: np.ndarray
    hi_value: np.ndarray

    @property
    def n_segments(self) -> int:
        return len(self.cuts) - 1

    @property
    def count(self) -> np.ndarray:
        """Samples per segment [J] (int64, exactly ``diff(cuts)``)."""
        return np.diff(self.cuts)

    def sums(self, values: np.ndarray) -> np.ndarray:
        """Per-segment sums [J] of ``values [S]`` under the tie rule.

        Samples outside straddling tie groups are summed by one ``bincount`` in
        input order; each straddling group adds ``share * sum(group)``.
        """
        j = self.n_segments
        out: np.ndarray = np.bincount(self.index, weights=values, minlength=j + 1)[:j]
        for members, share in self.groups:
            out += share * float(np.sum(values[members]))
        return out


def _count_at_most(v: np.ndarray, u: np.ndarray) -> np.ndarray:
    """#{k : v_k <= u_i} [S] for sorted ``v`` (= ``searchsorted(v, u, "right")``).

    For a few tens of cuts a linear scan with a small-integer accumulator is
    about 10x faster than a binary search on unsorted keys.
    """
    if len(v) > 64:
        return np.searchsorted(v, u, side="right")
    acc = np.zeros(len(u), dtype=np.uint8)
    tmp = np.empty(len(u), dtype=bool)
    for x in v:
        np.greater_equal(u, x, out=tmp)
        acc += tmp
    return acc.astype(np.int64)


def rank_segments(u: np.ndarray, cuts: Any) -> RankSegments:
    """Split the samples into rank segments ``[cuts[j], cuts[j+1])`` of ascending ``u`` (see :class:`RankSegments`).

    ``cuts`` are the interior cut ranks, non-decreasing in ``[0, S]`` (repeated
    cuts give empty segments). Cost O(S log J): one selection
    (``np.partition`` at the cut ranks), one pass per cut value (or a
    ``searchsorted`` for many cuts) and bincounts; no sort of the samples.
    """
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    n = len(u)
    inner = np.asarray(cuts, dtype=np.int64).reshape(-1)
    if len(inner) and (inner[0] < 0 or inner[-1] > n or np.any(np.diff(inner) < 0)):
        raise DetcalInputError(f"cuts must be non-decreasing ranks in [0, {n}], got {inner.tolist()}", field="cuts")
    all_cuts = np.concatenate([[0], inner, [n]]).astype(np.int64)
    j = len(all_cuts) - 1
    lo_value = np.full(j, np.nan)
    hi_value = np.full(j, np.nan)
    if n == 0:
        return RankSegments(all_cuts, np.zeros(0, np.int64), (), lo_value, hi_value)
    starts, ends = all_cuts[:-1], all_cuts[1:]
    # one selection at the distinct interior cuts: every chunk between two consecutive
    # boundaries then holds exactly its ranks, so its min/max are the values at its first/last rank
    mid = inner[(inner > 0) & (inner < n)]
    bounds = np.unique(np.concatenate([[0], mid, [n]]))
    part = np.partition(u, bounds[1:-1]) if len(bounds) > 2 else u
    chunk_min = np.minimum.reduceat(part, bounds[:-1])
    chunk_max = np.maximum.reduceat(part, bounds[:-1])
    nonempty = ends > starts
    chunk = np.searchsorted(bounds, starts[nonempty])
    lo_value[nonempty] = chunk_min[chunk]
    hi_value[nonempty] = chunk_max[chunk]
    # interior cut values c in (0, n): v_k = u at rank c_k; a tie group straddles c_k
    # when the ranks c_k - 1 and c_k hold the same value
    v = part[mid]
    straddle = chunk_max[np.searchsorted(bounds, mid) - 1] == v
    # segment of a sample outside straddling groups: number of interior cuts c_k with v_k <= u,
    # plus the empty segments in front (cuts equal to 0)
    n_zero = int(np.sum(inner <= 0))
    pos = _count_at_most(v, u)
    index = pos + n_zero
    if straddle.any():
        on_cut = pos > 0
        prev = np.where(on_cut, pos - 1, 0)
        tied = on_cut & (v[prev] == u) & straddle[prev]
        key = pos[tied] - 1  # last interior cut carrying the group's value
        members_all = np.flatnonzero(tied)
        below = np.cumsum(np.bincount(pos, minlength=len(v) + 1))  # #{u < v_k} = below[first k with that v]
        groups = []
        order = np.argsort(key, kind="stable")
        keys_sorted = key[order]
        uniq, first = np.unique(keys_sorted, return_index=True)
        bounds = np.append(first, len(keys_sorted))
        for g, k_last in enumerate(uniq):
            members = members_all[order[bounds[g] : bounds[g + 1]]]
            k_first = int(np.searchsorted(v, v[k_last], side="left"))
            lo = int(below[k_first])
            hi = lo + len(members)
            share = np.clip(np.minimum(ends, hi) - np.maximum(starts, lo), 0, None) / float(hi - lo)
            groups.append((members, share))
        index[members_all] = j
        return RankSegments(all_cuts, index, tuple(groups), lo_value, hi_value)
    return RankSegments(all_cuts, index, (), lo_value, hi_value)


def equal_count_cuts(n: int, n_bins: int) -> np.ndarray:
    """Interior cut ranks [B-1] of ``n_bins`` equal-count bins of ``n`` samples (the first ``n mod B`` one larger)."""
    q, r = divmod(int(n), int(n_bins))
    sizes = np.full(int(n_bins), q, dtype=np.int64)
    sizes[:r] += 1
    return np.cumsum(sizes)[:-1]


def equal_count_segments(u: np.ndarray, n_bins: int) -> RankSegments:
    """Equal-count bins over ``u`` with the shared tie rule of :class:`RankSegments` (Levi et al. 2019 sizes)."""
    u = np.asarray(u, dtype=np.float64).reshape(-1)
    return rank_segments(u, equal_count_cuts(len(u), n_bins))
