"""Per-image cell statistics: bootstrap replicates and jackknife values of binned metrics from sums.

A binned metric (ECE, D-ECE, MCE, NLL, Brier, ...: every metric with the
interface ``grid_key`` / ``pair_sums`` / ``values``, e.g.
:class:`detcal.metrics.confidence.ConfidenceMetric`) is a function of its
per-cell sums (:class:`detcal.binning.cells.CellSums`), and the sums of a
resample of images are the per-image sums weighted by how often each image
was drawn. So the statistics are computed once per (image, cell) pair,
``A [I, C_occ x k]`` over the occupied cells and the ``k`` fields the metrics
of one grid read (:attr:`value_fields`), and then:

* all bootstrap replicates of a block are one sparse product ``W [R, I] @ A``
  of the replicate-by-image count matrix with ``A``
  (:func:`replicate_values`), then ``values`` on the replicate sums
  ``[R, C_occ]``: the same numbers as recomputing the metric on each
  resample, since the product adds the same per-image sums in image order;
* the leave-one-image-out (jackknife) sums are the totals minus one image's
  row (:func:`leave_out_values`): a metric with a ``leave_one_out`` method
  (the binned confidence metrics, :mod:`detcal.metrics.confidence_loo`)
  corrects its full-sample value over the image's own pairs, linear in the
  number of pairs; any other metric gets ``values`` of the dense
  ``totals - row`` per image, in blocks (images x occupied cells: cheap for
  the one-cell metrics such as NLL and Brier). A delete-a-block jackknife
  first adds the rows of each block.

Measures that are not sums of fixed cells (equal-count bins, whose edges move
with the resample; ENCE, UCE and the quantile measures of the box
uncertainty) have no such interface: :mod:`detcal.metrics.bootstrap` calls
them on each resampled sample (generic path), which is exact by construction.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.cells import CellSums, dense_rank
from detcal.matching.blocks import segment_starts
from detcal.metrics.confidence_compute import summaries_shared
from detcal.metrics.confidence_loo import loo_shared
from detcal.metrics.sparse_product import csc_product

BLOCK_ELEMS = 1 << 21
"""Elements of a dense block (replicates or left-out units x occupied cells x fields)."""


@dataclass(frozen=True)
class GridCells:
    """The per-(image, cell) sums of one grid shared by the metrics ``members``.

    ``rows [P]`` image index and ``cols [P]`` occupied-cell index of each (int32 where they fit)
    pair, sorted by (image, cell); ``sums`` the pair sums ``[P]`` of the
    carried ``fields`` (``None`` for the others); ``at [C_occ * k, I]`` the
    transposed CSR matrix of the columns ``matrix_fields`` (column ``f`` of
    cell ``c`` in row ``c * k + f``), ``k = len(matrix_fields)``. When
    ``pack`` is non-zero, ``count`` and ``sum_y`` (whole numbers) travel as
    one column ``count * pack + sum_y`` (:func:`pack_scale`).
    """

    members: list[str]
    fields: tuple[str, ...]
    rows: np.ndarray
    cols: np.ndarray
    sums: CellSums
    n_occ: int
    n_groups: int
    at: Any
    matrix_fields: tuple[str, ...] = ()
    pack: float = 0.0


def value_fields(metric_fn: Any) -> tuple[str, ...]:
    """The :class:`CellSums` fields ``metric_fn.values`` reads (all of them unless it says)."""
    return tuple(getattr(metric_fn, "value_fields", CellSums._fields))


def _sums(fields: dict[str, Any]) -> CellSums:
    """CellSums of the given fields (``None`` for the others: any use of them fails loudly)."""
    given: dict[str, Any] = {f: fields.get(f) for f in CellSums._fields}
    return CellSums(**given)


def _carried(sums: CellSums, fields: tuple[str, ...]) -> CellSums:
    return _sums({f: getattr(sums, f) for f in fields})


PACKED = "count*pack+sum_y"
"""Name of the packed matrix column (:attr:`GridCells.pack`)."""


def pack_scale(count: np.ndarray, sum_y: np.ndarray, n_groups: int) -> float:
    """The power of two ``s`` with which ``count * s + sum_y`` carries both pair sums exactly, or 0.

    A replicate weights each image by how often it was drawn (the weights
    add up to ``n_groups``), so its sums of a cell are at most
    ``n_groups * max`` of the pair sums. When both fields are whole numbers
    and ``n_groups * max(count) * s + n_groups * max(sum_y) < 2**53``
    (``s`` the power of two above the largest ``sum_y``), every product
    and partial sum of ``W @ (count * s + sum_y)`` is a whole number below
    ``2**53``, exact in any order, and the two replicate sums are read back
    exactly: ``count = floor(v / s)``, ``sum_y = v - count * s``. So one
    matrix column does the work of two, with the same numbers.
    """
    if len(count) == 0:
        return 0.0
    c_max, y_max = float(np.max(count)), float(np.max(sum_y))
    if not (np.all(count == np.floor(count)) and np.all(sum_y == np.floor(sum_y))) or min(c_max, y_max) < 0:
        return 0.0
    scale = 2.0 ** int(np.ceil(np.log2(n_groups * y_max + 1.0)))
    if n_groups * c_max * scale + n_groups * y_max >= 2.0**53 or np.min(count) < 0 or np.min(sum_y) < 0:
        return 0.0
    return scale


def transposed_csr(rows: np.ndarray, col: np.ndarray, data: np.ndarray, n_groups: int, n_occ: int) -> Any:
    """CSR ``[n_occ * k, n_groups]`` with ``data[j, f]`` of pair j at (``col[j] * k + f``, ``rows[j]``), the
    images of each row in increasing order (the order in which the product adds them): scipy's coordinate
    matrix, converted and transposed (for pairs in any order; :func:`product_matrix` builds the same
    product without the conversions when the pairs come by image)."""
    import scipy.sparse as sp  # lazy: scipy kept out of start-up (importing detcal.metrics stays light)

    k = data.shape[1]
    a = sp.csr_matrix(
        (data.ravel(), (np.repeat(rows, k), (col.reshape(-1, 1) * k + np.arange(k)).ravel())),
        shape=(n_groups, n_occ * k),
    )
    return a.T.tocsr()


def product_matrix(rows: np.ndarray, col: np.ndarray, data: np.ndarray, n_groups: int, n_occ: int) -> Any:
    """The matrix ``[n_occ * k, n_groups]`` of :func:`transposed_csr` (``data[j, f]`` of pair j at
    (``col[j] * k + f``, ``rows[j]``)), as the transpose of the image-by-cell CSR matrix when the pairs come
    sorted by image, each (image, cell) once (as :meth:`pair_sums` gives them: :func:`sorted_product_matrix`),
    else as :func:`transposed_csr`."""
    if len(rows) > 1 and bool(np.any(rows[1:] < rows[:-1])):
        return transposed_csr(rows, col, data, n_groups, n_occ)
    return sorted_product_matrix([rows, col], lambda n: data, n_groups, n_occ, data.shape[1])


def sorted_product_matrix(
    pairs: list[np.ndarray], values: Callable[[int], np.ndarray], n_groups: int, n_occ: int, k: int
) -> Any:
    """The product matrix ``[n_occ * k, n_groups]`` of pairs sorted by image: ``pairs`` is ``[rows, col]`` (emptied
    as read: each index array is released once its part of the matrix is made), ``values(P)`` the pairs' values
    ``[P, k]`` (made last; column ``f`` of pair ``j`` goes to row ``col[j] * k + f``, column ``rows[j]``).

    The image-by-cell CSR matrix is the pairs as they are: row ``i`` holds image ``i``'s pairs, column
    ``col * k + f``, value ``data[j, f]`` (no sort or conversion). Its transpose is a CSC matrix, whose product
    with a dense block adds, into each output entry, the images' terms in increasing image order, each image at
    most once per entry: the additions of the CSR product of :func:`transposed_csr`, in the same order, so the
    same numbers bit for bit (tested), with less memory traffic (each image's weights are read once, the output
    stays in cache). The CSC matrix is a :func:`detcal.metrics.sparse_product.csc_product`: scipy's compiled
    product kernels without the import of ``scipy.sparse`` (the same kernel on the same arrays, so the same
    numbers; ``scipy.sparse`` itself when those kernels cannot be loaded).
    """
    col = pairs.pop()
    rows = pairs.pop()
    indptr = csc_indptr(rows, n_groups, n_occ, k)
    del rows
    indices = csc_indices(col, n_groups, n_occ, k)
    del col
    data = np.ascontiguousarray(values(len(indices) // max(k, 1)), dtype=np.float64).reshape(-1)
    return csc_product(indptr, indices, data, (n_occ * k, n_groups))


def _index_type(n_pairs: int, n_groups: int, n_occ: int, k: int) -> type[np.signedinteger[Any]]:
    return np.int32 if max(n_pairs * k, n_occ * k, n_groups) < 2**31 - 1 else np.int64


def csc_indptr(rows: np.ndarray, n_groups: int, n_occ: int, k: int) -> np.ndarray:
    """Column pointers of :func:`product_matrix`'s matrix: image ``i``'s ``k`` x pairs start at ``indptr[i]``."""
    indptr: np.ndarray = np.zeros(n_groups + 1, dtype=_index_type(len(rows), n_groups, n_occ, k))
    np.cumsum(np.bincount(rows, minlength=n_groups) * k, out=indptr[1:])
    return indptr


def csc_indices(col: np.ndarray, n_groups: int, n_occ: int, k: int) -> np.ndarray:
    """Row indices ``[P * k]`` of :func:`product_matrix`'s matrix: ``col * k + f`` for each pair and field."""
    idx = _index_type(len(col), n_groups, n_occ, k)
    indices: np.ndarray = np.empty((len(col), k), dtype=idx)
    if k == 0:
        return indices.reshape(-1)
    np.multiply(col, k, out=indices[:, 0], casting="unsafe")  # column by column: long inner loops, not k at a time
    for f in range(1, k):
        np.add(indices[:, 0], f, out=indices[:, f])
    return indices.reshape(-1)


def occupied_index(cells: np.ndarray, n_cells: int) -> tuple[np.ndarray, int]:
    """Index of each of ``cells [P]`` (in ``[0, n_cells)``) among the occupied cells in increasing order, and
    their number (``np.unique(cells, return_inverse=True)``; :func:`detcal.binning.cells.dense_rank`)."""
    occ, idx = dense_rank(cells, n_cells)
    return idx.astype(np.int64, copy=False), len(occ)


def grid_members(
    metric_fns: Mapping[str, Any], names: list[str], arrays: tuple[ArrayLike | None, ...]
) -> dict[Hashable, list[str]]:
    """The metrics ``names`` by ``grid_key``, in order of first appearance (one :class:`GridCells` each)."""
    grids: dict[Hashable, list[str]] = {}
    for n in names:
        grids.setdefault(metric_fns[n].grid_key(*arrays), []).append(n)
    return grids


def grid_cells(
    metric_fns: Mapping[str, Any],
    key: Hashable,
    members: list[str],
    inv: np.ndarray,
    n_groups: int,
    arrays: tuple[ArrayLike | None, ...],
    cells: Mapping[Hashable, np.ndarray] | None = None,
    *,
    matrix: bool = True,
) -> GridCells:
    """The :class:`GridCells` of grid ``key`` shared by the metrics ``members`` (``inv [S]`` image index;
    ``cells`` as :func:`image_cells`). ``matrix=False`` leaves the product matrix out (``at`` None: the
    jackknife reads the pairs only; :func:`with_matrix` adds it)."""
    need = {f for n in members for f in value_fields(metric_fns[n])}
    fields = tuple(f for f in CellSums._fields if f in need)
    lead = metric_fns[members[0]]
    if hasattr(lead, "value_fields") and cells is not None and key in cells:
        rows, cols, sums, n_cells = lead.pair_sums(inv, *arrays, fields=fields, cells=cells[key])
    elif hasattr(lead, "value_fields"):
        rows, cols, sums, n_cells = lead.pair_sums(inv, *arrays, fields=fields)
    else:
        rows, cols, sums, n_cells = lead.pair_sums(inv, *arrays)
    col, n_occ = occupied_index(np.asarray(cols), int(n_cells))
    col = col.astype(np.int32 if n_occ * 64 < 2**31 else np.int64)  # indices only: narrow, the same values
    rows = np.asarray(rows).astype(np.int32 if n_groups < 2**31 else np.int64, copy=False)
    pack = pack_scale(sums.count, sums.sum_y, n_groups) if {"count", "sum_y"} <= set(fields) else 0.0
    matrix_fields = ((PACKED,) if pack else ()) + tuple(f for f in fields if not pack or f not in ("count", "sum_y"))
    g = GridCells(members, fields, rows, col, _carried(sums, fields), n_occ, n_groups, None, matrix_fields, pack)
    return with_matrix(g) if matrix else g


def with_matrix(g: GridCells) -> GridCells:
    """``g`` with its product matrix ``at`` (:func:`product_matrix` of the columns ``matrix_fields``), its pairs
    kept (:func:`matrix_from` releases them)."""
    if g.at is not None:
        return g
    return dataclasses.replace(matrix_from([g]), rows=g.rows, cols=g.cols, sums=g.sums)


def matrix_columns(g: GridCells, src: dict[str, np.ndarray], n_pairs: int) -> np.ndarray:
    """The values ``[P, k]`` of ``g``'s matrix columns ``matrix_fields`` from the pair sums ``src`` (field ->
    ``[P]``; each taken out of ``src`` once read): the packed column is ``count * pack + sum_y``
    (:attr:`GridCells.pack`), every other column its field."""
    k = len(g.matrix_fields)
    data = np.empty((n_pairs, k), dtype=np.float64)
    for j, f in enumerate(g.matrix_fields):
        if f == PACKED:
            np.multiply(src.pop("count"), g.pack, out=data[:, j])
            np.add(data[:, j], src.pop("sum_y"), out=data[:, j])
        else:
            data[:, j] = src.pop(f)
    return data


def image_cells(
    metric_fns: Mapping[str, Any],
    names: list[str],
    inv: np.ndarray,
    n_groups: int,
    arrays: tuple[ArrayLike | None, ...],
    cells: Mapping[Hashable, np.ndarray] | None = None,
) -> list[GridCells]:
    """One :class:`GridCells` per distinct ``grid_key`` of the metrics ``names`` (``inv [S]`` image index).

    ``cells``: grid key -> the cell of each sample on that grid, already computed
    (:func:`detcal.metrics.confidence_suite.suite_cells`): those grids skip the binning (same numbers)."""
    return [
        grid_cells(metric_fns, key, members, inv, n_groups, arrays, cells)
        for key, members in grid_members(metric_fns, names, arrays).items()
    ]


def counts_fit_packing(w: np.ndarray, n_groups: int) -> bool:
    """Whether image weights ``w [b, I]`` keep a packed product exact (:func:`pack_scale`): whole numbers,
    none negative, each row adding up to at most ``n_groups`` (bootstrap draw counts, 0/1 block weights)."""
    if w.size == 0:
        return True
    return bool(w.min() >= 0 and w.sum(axis=1).max() <= n_groups and np.array_equal(w, np.floor(w)))


def _matrix(g: GridCells, packed: bool) -> tuple[Any, tuple[str, ...]]:
    """The grid's product matrix and its columns: the packed one, or one column per field (built here)."""
    if packed or not g.pack:
        return g.at, g.matrix_fields
    data = np.stack([getattr(g.sums, f) for f in g.fields], axis=1)
    return product_matrix(g.rows, g.cols, data, g.n_groups, g.n_occ), g.fields


X_ELEMS = 1 << 20
"""Entries of one dense block of image weights ``[I, b]`` handed to the product by :func:`count_replicates`
(8 MiB of float64: the replicates are multiplied in column blocks of ``b``, each output entry the same
sum of the same terms in the same order whatever ``b`` is)."""


def _store(
    metric_fns: Mapping[str, Any],
    g: GridCells,
    columns: tuple[str, ...],
    product: np.ndarray,
    out: dict[str, np.ndarray],
    r0: int,
) -> None:
    """Values of ``g``'s metrics from one product block ``[C_occ * k, b]`` into ``out[name][r0:r0+b]``."""
    b = product.shape[1]
    rep = product.T.reshape(b, g.n_occ, len(columns))  # [b, C_occ, k]
    got = dict(zip(columns, np.moveaxis(rep, -1, 0)))
    if PACKED in got:
        both = got.pop(PACKED)
        got["count"] = np.floor(both / g.pack)
        got["sum_y"] = both - got["count"] * g.pack
    rep_sums = _sums(got)
    for n in g.members:
        out[n][r0 : r0 + b] = metric_fns[n].values(rep_sums)


def replicate_values(
    metric_fns: Mapping[str, Any], grids: list[GridCells], w: np.ndarray, out: dict[str, np.ndarray], r0: int
) -> None:
    """Values of the grids' metrics for image weights ``w [b, I]`` into ``out[name][r0:r0+b]``.

    The packed column of count and matched (:attr:`GridCells.pack`) is used when the weights keep it
    exact (:func:`counts_fit_packing`, true of every bootstrap here); other weights take one column each.
    """
    fits = {n: counts_fit_packing(w, n) for n in {g.n_groups for g in grids if g.pack}}
    for g in grids:
        at, columns = _matrix(g, fits.get(g.n_groups, False))
        k = len(columns)
        sub = max(1, BLOCK_ELEMS // max(g.n_occ * k, 1))  # bound the dense [sub, C_occ, k] result
        for s0 in range(0, len(w), sub):
            ws = w[s0 : s0 + sub]
            _store(metric_fns, g, columns, np.asarray(at @ ws.T), out, r0 + s0)


def count_replicates(
    metric_fns: Mapping[str, Any], g: GridCells, counts: list[np.ndarray], out: dict[str, np.ndarray]
) -> None:
    """Values of ``g``'s metrics for the replicates whose image draw counts are the rows of the blocks
    ``counts`` (each ``[b, I]``, any integer type; replicate ``r`` of the blocks in order goes to
    ``out[name][r]``), with ``g``'s product matrix (:func:`with_matrix`; the pairs may be released).

    Draw counts are whole numbers, none negative, each replicate's adding up to ``I``: the packed column is
    exact (:func:`counts_fit_packing`), so no check is made. The groups of replicates are those of
    :func:`replicate_values` on the float counts of each block; each group is multiplied and evaluated in
    chunks of :func:`value_chunks` (never one replicate cut from a larger group: a single replicate's
    sums over cells run in another order, see there), so the measures' temporaries stay small with the
    same numbers. The product runs in column blocks of at most :data:`X_ELEMS` weights (each output
    entry is the same sum of the same terms in the same order whatever the block).
    """
    k = len(g.matrix_fields)
    sub = max(1, BLOCK_ELEMS // max(g.n_occ * k, 1))  # the groups of replicates of replicate_values
    r0 = 0
    width = max(1, min(X_ELEMS // max(g.n_groups, 1), PRODUCT_ELEMS // max(g.n_occ * k, 1)))
    with summaries_shared():  # the measures of one grid share each chunk's per-cell summary (the same values)
        for blk in counts:
            for s0 in range(0, len(blk), sub):
                for run in product_runs(value_chunks(min(sub, len(blk) - s0), g.n_occ), width):
                    a = run[0][0]
                    product = count_product(g, blk[s0 + a : s0 + run[-1][1]])
                    for c0, c1 in run:  # each chunk as the product of its own replicates (the same layout)
                        part = product if len(run) == 1 else np.ascontiguousarray(product[:, c0 - a : c1 - a])
                        _store(metric_fns, g, g.matrix_fields, part, out, r0 + s0 + c0)
            r0 += len(blk)


PRODUCT_ELEMS = 1 << 18
"""Entries (occupied cells x fields x replicates) of one product block of :func:`count_replicates`: the
replicates of several value chunks are multiplied together (fewer passes over the matrix) up to this size."""


def product_runs(chunks: list[tuple[int, int]], width: int) -> list[list[tuple[int, int]]]:
    """Consecutive ``chunks`` grouped into runs of at most ``width`` replicates (a chunk wider than
    ``width`` alone in its run): one product per run, the measures still evaluated chunk by chunk."""
    runs: list[list[tuple[int, int]]] = []
    for c in chunks:
        if runs and c[1] - runs[-1][0][0] <= width:
            runs[-1].append(c)
        else:
            runs.append([c])
    return runs


VALUE_ELEMS = 1 << 16
"""Occupied cells x replicates of one chunk on which :func:`count_replicates` evaluates the measures
(half a MiB per float64 field: the measures' temporaries stay small, :func:`value_chunks`)."""


def value_chunks(b: int, n_occ: int) -> list[tuple[int, int]]:
    """Chunks ``(start, stop)`` of a group of ``b`` replicates on which the measures are evaluated: about
    :data:`VALUE_ELEMS` // ``n_occ`` replicates each, never one replicate alone unless ``b`` is 1.

    The replicate sums of a product block ``[C_occ * k, b]`` reach the measures as ``[b, C_occ]`` arrays
    laid out replicate-fastest (:func:`_store`), and so do the arrays a measure makes from them, so a sum
    over cells runs over the cells one after the other for all replicates at once: the same additions in
    the same order for any number of replicates from two up. A single replicate's array is one row in
    memory, which numpy sums pairwise (another order: the last bit may change). So chunks of two or more
    replicates give the numbers of the whole group bit for bit, and a group of one stays one (tested).
    """
    if b <= 1:
        return [(0, b)] if b else []
    w = max(2, VALUE_ELEMS // max(n_occ, 1))
    bounds = list(range(0, b, w)) + [b]
    if bounds[-1] - bounds[-2] == 1:  # a last chunk of one replicate joins the one before it
        del bounds[-2]
    return list(zip(bounds[:-1], bounds[1:]))


def count_product(g: GridCells, part: np.ndarray) -> np.ndarray:
    """``g.at @ part.T`` ``[C_occ * k, b]`` for draw counts ``part [b, I]``, in column blocks of at most
    :data:`X_ELEMS` float weights (each output entry the same sum of the same terms in the same order
    whatever the block); the weights are released before the product is returned."""
    width = max(1, X_ELEMS // max(g.n_groups, 1))  # replicates per product
    if len(part) <= width:  # one block: the product is the result (no second [C_occ * k, b] array)
        x = np.empty((g.n_groups, len(part)), dtype=np.float64)
        x[...] = part.T
        return np.asarray(g.at @ x)
    product = np.empty((g.n_occ * len(g.matrix_fields), len(part)), dtype=np.float64)
    for c0 in range(0, len(part), width):
        cols = part[c0 : c0 + width]
        x = np.empty((g.n_groups, len(cols)), dtype=np.float64)
        x[...] = cols.T
        product[:, c0 : c0 + len(cols)] = g.at @ x
        del x
    return product


def matrix_only(g: GridCells) -> GridCells:
    """``g`` with its product matrix (:func:`with_matrix`) and without its pairs (released: what
    :func:`count_replicates` reads is the matrix only)."""
    return matrix_from([g])


def matrix_from(held: list[GridCells]) -> GridCells:
    """The one grid in ``held``, taken out of the list (so the caller keeps no reference to its pairs), with its
    product matrix ``at`` and without its pairs: the matrix is built piece by piece, the column pointers from
    the image of each pair, then the row indices from the cells, then the values from the sums field by field
    (:func:`matrix_columns`), each input released once read (:func:`sorted_product_matrix`; pairs not sorted by
    image: :func:`transposed_csr`)."""
    g = held.pop()
    none = np.zeros(0, dtype=np.int64)
    bare = dataclasses.replace(g, rows=none, cols=none, sums=_sums({}))
    if g.at is not None:
        return bare
    rows, col, n_pairs = g.rows, g.cols, len(g.rows)
    src = {f: getattr(g.sums, f) for f in g.fields}
    del g
    if n_pairs > 1 and bool(np.any(rows[1:] < rows[:-1])):  # pairs not by image: the coordinate matrix
        data = matrix_columns(bare, src, n_pairs)
        return dataclasses.replace(bare, at=transposed_csr(rows, col, data, bare.n_groups, bare.n_occ))
    pairs = [rows, col]
    del rows, col
    k = len(bare.matrix_fields)
    at = sorted_product_matrix(pairs, lambda n: matrix_columns(bare, src, n), bare.n_groups, bare.n_occ, k)
    return dataclasses.replace(bare, at=at)


def _unit_pairs(g: GridCells, block: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, CellSums]:
    """Pairs (unit, cell) with their sums, sorted by unit; one image per unit needs no new sums."""
    if m == g.n_groups and np.array_equal(block, np.arange(m)):
        return g.rows, g.cols, g.sums  # one image per unit: the unit of a pair is its image
    unit = block[g.rows]
    uniq, inv = np.unique(unit * g.n_occ + g.cols, return_inverse=True)
    inv = inv.reshape(-1)
    summed = {f: np.bincount(inv, weights=getattr(g.sums, f), minlength=len(uniq)) for f in g.fields}
    return uniq // g.n_occ, uniq % g.n_occ, _sums(summed)


def _dense_leave_out(
    metric_fns: Mapping[str, Any], names: list[str], g: GridCells, total: CellSums, unit: np.ndarray, col: np.ndarray,
    pair: CellSums, m: int, out: dict[str, np.ndarray],
) -> None:  # fmt: skip
    """``values`` of ``total - unit sums`` per left-out unit, in blocks of units (images x occupied cells)."""
    k = len(g.fields)
    step = max(1, BLOCK_ELEMS // max(g.n_occ * k, 1))
    bounds = np.searchsorted(unit, np.arange(0, m + step, step))
    for j, u0 in enumerate(range(0, m, step)):
        u1 = min(m, u0 + step)
        lo, hi = bounds[j], bounds[j + 1]
        dense = {}
        for f in g.fields:
            d = np.zeros((u1 - u0, g.n_occ))
            d[unit[lo:hi] - u0, col[lo:hi]] = getattr(pair, f)[lo:hi]
            dense[f] = getattr(total, f)[None, :] - d
        sums = _sums(dense)
        for n in names:
            out[n][u0:u1] = metric_fns[n].values(sums)


LOO_PAIRS = 1 << 16
"""(unit, cell) pairs of one chunk of units in :func:`leave_out_values` (the measures' per-pair temporaries
stay small)."""


def unit_chunks(unit: np.ndarray, m: int) -> list[tuple[int, int, int, int]]:
    """Chunks ``(u0, u1, lo, hi)`` of the units ``[0, m)``, each with about :data:`LOO_PAIRS` pairs: units
    ``u0 <= u < u1`` own the pairs ``lo:hi`` (``unit [P]`` sorted); every unit falls in one chunk, with or
    without pairs."""
    cuts = np.concatenate([[0], unit[LOO_PAIRS::LOO_PAIRS], [m]]).astype(np.int64)  # ascending: unit is
    cuts = cuts[segment_starts(cuts)]  # sorted in [0, m); repeats dropped (np.unique's first call imports
    # numpy.ma, ~8 ms, for its masked-array check)
    starts = np.searchsorted(unit, cuts, side="left")
    return [(int(cuts[j]), int(cuts[j + 1]), int(starts[j]), int(starts[j + 1])) for j in range(len(cuts) - 1)]


def _leave_one_out(
    metric_fns: Mapping[str, Any], g: GridCells, total: CellSums, pairs: tuple[np.ndarray, np.ndarray, CellSums],
    m: int, out: dict[str, np.ndarray],
) -> list[str]:  # fmt: skip
    """Values of ``g``'s measures with a ``leave_one_out`` into ``out``, chunk by chunk of units
    (:func:`unit_chunks`); returns the others (the dense path).

    A unit's value reads the cell totals and its own pairs only (each per-unit sum adds its pairs in their
    order), so a chunk of whole units gives each of them the value of the whole call, bit for bit (tested)."""
    unit, col, pair = pairs
    dense: list[str] = []
    for u0, u1, lo, hi in unit_chunks(unit, m):
        uc, cc = unit[lo:hi] - u0, col[lo:hi]
        pc = _sums({f: getattr(pair, f)[lo:hi] for f in g.fields})
        mu = u1 - u0  # one object for the chunk's measures (their shared cells compare their inputs)
        with loo_shared():  # the grid's measures share the chunk's left-out cells (the same values)
            for n in (n for n in g.members if n not in dense):
                loo = getattr(metric_fns[n], "leave_one_out", None)
                v = loo(total, uc, cc, pc, mu) if callable(loo) else None
                if v is None:  # no linear-time path (the same answer for every chunk)
                    dense.append(n)
                else:
                    out.setdefault(n, np.full(m, np.nan))[u0:u1] = v
    for n in g.members:
        if n not in dense:
            out.setdefault(n, np.full(m, np.nan))  # no unit at all (m = 0)
    return dense


def leave_out_values(
    metric_fns: Mapping[str, Any], grids: list[GridCells], block: np.ndarray, m: int
) -> dict[str, np.ndarray]:
    """Values ``[m]`` of the grids' metrics with unit ``j`` left out (``block [I]`` the unit of each image)."""
    out: dict[str, np.ndarray] = {}
    for g in grids:
        unit, col, pair = _unit_pairs(g, block, m)
        total = _sums({f: np.bincount(col, weights=getattr(pair, f), minlength=g.n_occ) for f in g.fields})
        dense = _leave_one_out(metric_fns, g, total, (unit, col, pair), m, out)
        for n in dense:
            out[n] = np.full(m, np.nan)
        if dense:
            _dense_leave_out(metric_fns, dense, g, total, unit, col, pair, m, out)
    return out
