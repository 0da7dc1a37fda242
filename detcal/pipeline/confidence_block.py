"""The confidence part of an evaluation: metrics and D-ECE maps per IoU threshold."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from detcal.binning.cells import CellStats, cell_stats, sample_cells, validate_sample
from detcal.binning.edges import BinGrid
from detcal.core.errors import DetcalInputError
from detcal.core.results import ConfidenceBlock
from detcal.core.types import MatchResult, MetricResult, Skipped
from detcal.metrics.confidence import ConfidenceMetric
from detcal.metrics.confidence_suite import confidence_metrics, sub_grid_stats, suite, suite_cells
from detcal.pipeline.parallel import distributed_rank, distributed_world, gather_all, map_in_processes
from detcal.pipeline.progress import Progress
from detcal.pipeline.sources import LoadedData
from detcal.pipeline.spec import FEATURES, EvaluationSpec
from detcal.reports.gap_maps import marginal_gap_map

__all__ = [
    "confidence_blocks",
    "dece_maps",
    "grid_bins",
    "interval_settings",
    "kept_sample_cells",
    "spec_suite",
    "threshold_label",
]


def threshold_label(t: float) -> str:
    """``iou=0.50`` (``iou=kitti`` for the per-class KITTI row, stored as NaN)."""
    if not np.isfinite(t):
        return "iou=kitti"
    return f"iou={t:.2f}" if abs(round(t, 2) - t) < 1e-12 else f"iou={t:g}"


def _feature_cols(names: list[str]) -> list[int]:
    return [FEATURES.index(n) for n in names]


def _map_grid(spec: EvaluationSpec, pair: list[str]) -> BinGrid:
    """Bins of a (confidence, f1, f2) map grid: the D-ECE grid's bins of those dimensions (a feature
    outside the D-ECE grid takes the confidence's count)."""
    b = spec.dece_binning
    grid = b.grid()
    per = {n: grid[1 + i] for i, n in enumerate(b.features)}
    return BinGrid((grid[0], per.get(pair[0], grid[0]), per.get(pair[1], grid[0])))


def _map_metric(spec: EvaluationSpec, pair: list[str]) -> ConfidenceMetric:
    """The D-ECE of a (confidence, f1, f2) map grid."""
    b = spec.dece_binning
    return ConfidenceMetric("dece", _map_grid(spec, pair), b.sample_threshold, b.policy, use_features=True)


def dece_maps(
    spec: EvaluationSpec,
    p: np.ndarray,
    y: np.ndarray,
    feats: np.ndarray,
    cells: dict[str, np.ndarray] | None = None,
    stats: Mapping[str, CellStats] | None = None,
) -> dict[str, Any]:
    """D-ECE heat maps over the configured feature pairs (Kueppers et al. 2020, Fig. 1).

    ``cells``: the cell of each sample on each map grid (keyed ``"f1_f2"``), computed once for
    all IoU thresholds (:func:`_shared_cells`); ``stats``: a map grid's statistics already summed from the
    D-ECE grid's (:func:`detcal.metrics.confidence_suite.sub_grid_stats`). The same numbers as without.
    """
    b = spec.dece_binning
    out: dict[str, Any] = {}
    for pair in spec.confidence.maps:
        a, c = _feature_cols(pair)
        name = f"{pair[0]}_{pair[1]}"
        metric = _map_metric(spec, pair)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if stats is not None and name in stats:
                r = metric.result(stats[name])
            elif cells is not None and name in cells:
                bins = metric.grid_key(None, None, np.empty((0, 2)))[0]
                r = metric.result(
                    cell_stats(p, y, None, bins, edges=metric.edges, stats=metric.required_stats, cells=cells[name])
                )
            else:
                r = metric(p, y, np.take(feats, [a, c], axis=1))
        shape = tuple(int(v) for v in r.params.get("bins", ())) or (1, 1, 1)
        n = int(np.prod(shape))
        m = marginal_gap_map(
            r.table.get("count", np.zeros(n)),
            r.table.get("confidence", np.full(n, np.nan)),
            r.table.get("precision", np.full(n, np.nan)),
            shape,
            keep_axes=(1, 2),
            kept=r.table.get("kept"),
        )
        out[name] = {
            "axes": list(pair),
            "bins": list(shape[1:]),
            "gap": m["gap"],
            "signed_gap": m["signed_gap"],
            "count": m["count"],
            "kept_count": m["kept_count"],
            "sample_threshold": b.sample_threshold,
            "policy": b.policy,
            "dece": float(r.value),
            "definition": "M(i,j) = sum_kept N_c gap(c) / sum_kept N_c over the confidence bins of "
            "position cell (i,j) of a D-ECE grid over (confidence, f1, f2); signed_gap: the same mean of "
            "conf(c) - prec(c) (positive: over-confident)",
        }
    return out


def _null_position_metrics(block: ConfidenceBlock, reason: str) -> None:
    """Replace the metrics over (confidence, box features) by null with ``reason``."""
    for key, node in block.metrics().items():
        if int(node.params.get("n_features", 1)) > 1:
            block.entries[key] = MetricResult(
                name=node.name,
                value=float("nan"),
                variant=node.variant,
                params=dict(node.params),
                skipped=Skipped(reason),
            )


def confidence_blocks(
    spec: EvaluationSpec,
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray | list[np.ndarray],
    progress: Progress,
    exclude: list[float],
    no_pos: str | None = None,
    keep: dict[Any, np.ndarray] | None = None,
) -> tuple[dict[str, ConfidenceBlock | Skipped], dict[str, Any]]:
    """Confidence metrics and D-ECE maps per IoU threshold (docs/metrics.md). ``no_pos``: images lack
    sizes, so the metrics over box positions are null with that reason. ``spec.parallel`` spreads the
    thresholds over processes or ranks (the same numbers: each threshold is computed whole by one).
    ``keep``: when given, filled with the considered detections' cells on the suite's grids over the box
    features under the ``floor`` edge rule (by grid key, narrow integers: 2 bytes a detection for the default
    D-ECE grid), for :func:`kept_sample_cells`.

    ``feats``: the box features [D, k], or a list holding them alone, which is emptied: the block then holds
    the only reference, and once every grid's cells are made (:func:`_shared_cells`) the thresholds in this
    process read only the features' shape, so the features are let go before the thresholds' samples and
    intervals are made (38 MB at 20,000 images, off the run's peak)."""
    if isinstance(feats, list):
        feats = feats.pop()
    wanted = spec.confidence.iou_thresholds
    todo = []
    for i, t in enumerate(mr.iou_thresholds):
        if wanted is not None and not any(abs(float(t) - w) < 1e-9 for w in wanted):
            continue
        if wanted is None and any(abs(float(t) - w) < 1e-9 for w in exclude):
            continue
        todo.append(i)
    measures = spec_suite(spec)  # the grids normalised once, passed down
    shared = _shared_cells(spec, measures, data, mr, feats, no_pos) if todo else None
    workers, distributed = spec.parallel.workers, spec.parallel.distributed
    if shared is not None and not distributed and (workers <= 1 or len(todo) <= 1):
        feats = unread_features(*feats.shape)  # every grid's cells are made: their values are not read again
    args = (spec, measures, data, mr, feats, no_pos, shared)
    if distributed:
        rank, world = distributed_rank(), distributed_world()
        progress.step(f"confidence at {len(todo)} thresholds over {world} ranks")
        mine = [(i, _one_threshold(i, *args)) for i in todo[rank::world]]
        done = dict(pair for part in gather_all(mine) for pair in part)
        results = [done[i] for i in todo]
    elif workers > 1 and len(todo) > 1:
        progress.step(f"confidence at {len(todo)} thresholds in {workers} processes")
        results = map_in_processes(_one_threshold, todo, args, workers)
    else:
        results = []
        with _draws_shared(spec.bootstrap.n > 0 and len(todo) > 1):  # the thresholds draw the same replicates
            for i in todo:
                progress.step(f"confidence {threshold_label(float(mr.iou_thresholds[i]))}")
                results.append(_one_threshold(i, *args))
    out = {label: block for label, block, _ in results}
    maps = {label: m for label, block, m in results if m is not None}
    if keep is not None and shared is not None and not no_pos:
        # the position grids (without every image's size the cells hold placeholder positions: none kept)
        keep.update({k: v for k, v in shared.cells.items() if k[1] == "floor" and k[2]})
    return out, maps


def grid_bins(params: Mapping[str, Any], configured: int | Sequence[int], n: int) -> list[int]:
    """The bin counts of an ``n``-dimensional D-ECE grid: those the metric recorded (``params["bins"]``) when
    they have ``n`` entries, else the configured ones (one count for every dimension, or the first ``n``)."""
    recorded = [int(v) for v in (params.get("bins") or [])]
    if len(recorded) == n:
        return recorded
    return [int(configured)] * n if isinstance(configured, int) else [int(v) for v in list(configured)[:n]]


def kept_sample_cells(
    kept: Mapping[Any, np.ndarray] | None, mr: MatchResult, i: int, bins: list[int], edges: str, features: bool
) -> np.ndarray | None:
    """The cells of matching row ``i``'s confidence sample (considered, not ignored) on the grid of ``bins``
    (confidence first), edge rule ``edges`` and, when ``features``, the D-ECE box features, taken from the
    cells :func:`confidence_blocks` left in ``keep`` (the same integers as binning the sample's values again:
    the same values, binned by the same rule); None when that grid's cells were not kept."""
    if not kept or edges != "floor":  # netcal's rule bins a clipped confidence: not reused
        return None
    want = (tuple(int(v) for v in bins), edges, bool(features))
    cell = next((c for k, c in kept.items() if (tuple(k[0]), k[1], bool(k[2])) == want), None)
    if cell is None:
        return None
    cons = mr.considered
    return np.take(cell, np.flatnonzero(~mr.ignored[i][cons] if not cons.all() else ~mr.ignored[i]))


def _draws_shared(wanted: bool) -> contextlib.AbstractContextManager[None]:
    """:func:`detcal.metrics.bootstrap.draws_shared` when ``wanted`` (intervals at several thresholds), else
    nothing."""
    if not wanted:
        return contextlib.nullcontext()
    # lazy: the bootstrap module only when intervals are asked (as in confidence_metrics)
    from detcal.metrics.bootstrap import draws_shared

    return draws_shared()


def spec_suite(spec: EvaluationSpec) -> dict[str, ConfidenceMetric]:
    """Every registered confidence measure on the spec's grids (:meth:`DeceBinningSpec.suite_binning`, built
    once here), with the spec's source variants (``confidence.homogeneity_spread``)."""
    return suite(
        spec.dece_binning.suite_binning(spec.confidence.edges),
        {"homogeneity": {"spread": spec.confidence.homogeneity_spread}},
    )


def interval_settings(spec: EvaluationSpec) -> dict[str, Any]:
    """The bootstrap keyword arguments of :func:`detcal.metrics.confidence_suite.confidence_metrics`."""
    bs = spec.bootstrap
    return {"n_boot": bs.n, "ci_level": bs.level, "seed": bs.seed, "ci_method": bs.method}


def sample_features(spec: EvaluationSpec, fr: np.ndarray, no_pos: str | None) -> np.ndarray | None:
    """The box features of the D-ECE grid for rows ``fr`` of ``feats`` (placeholders without positions)."""
    cols = _feature_cols(spec.dece_binning.features)
    f = (fr if cols == list(range(fr.shape[1])) else np.take(fr, cols, axis=1)) if cols else None
    if no_pos and f is not None:
        f = np.where(np.isfinite(f), f, 0.5)  # placeholder positions; the position metrics are nulled below
    return f


def sample_feature_columns(spec: EvaluationSpec, feats: np.ndarray, rows: np.ndarray) -> list[np.ndarray] | None:
    """The D-ECE grid's box-feature columns at ``rows`` of ``feats`` (the values of
    ``sample_features(spec, np.take(feats, rows, axis=0), None)``, column by column, without the [S,4] copy);
    None when the grid has no features."""
    cols = _feature_cols(spec.dece_binning.features)
    return [np.take(feats[:, k], rows) for k in cols] if cols else None


class SharedCells(NamedTuple):
    """What :func:`_shared_cells` computes once for every IoU threshold: the considered detections ``rows``,
    their cells on the suite's grids (by grid key) and on the map grids that are not sub-grids of the D-ECE
    grid (by map name), and for those that are, the D-ECE grid's key, the map's dimensions on it and the
    statistics its D-ECE reads (summed from the D-ECE grid's: :func:`detcal.metrics.confidence_suite.sub_grid_stats`)."""

    rows: np.ndarray
    cells: dict[Any, np.ndarray]
    map_cells: dict[str, np.ndarray]
    map_dims: dict[str, tuple[Any, list[int], tuple[str, ...]]]


def _grid_reads(measures: dict[str, ConfidenceMetric], key: Any, features: Any) -> set[str]:
    """The float statistics the suite computes on grid ``key``: those its measures read."""
    return {
        s for m in measures.values() if m.binned and m.grid_key(None, None, features) == key for s in m.required_stats
    }


def _shared_cells(
    spec: EvaluationSpec,
    measures: dict[str, ConfidenceMetric],
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray,
    no_pos: str | None,
) -> SharedCells | None:
    """The considered detections and their cells on the suite's grids and on the map grids, computed
    once for every IoU threshold (the cells do not depend on the matched flags); None when a value is
    invalid (each threshold then reports it as before). A map grid that is a sub-grid of the D-ECE grid
    (the same edge rule, its features among the grid's) needs no cells: its statistics are the D-ECE grid's
    summed over the other dimensions, exact integers."""
    cons = np.flatnonzero(mr.considered)
    if len(cons) == len(feats):  # every detection considered: the columns themselves, not gathered copies
        p, fr = data.detections.score, feats
    else:
        p, fr = data.detections.score[cons], np.take(feats, cons, axis=0)
    try:
        f = sample_features(spec, fr, no_pos)
        cells = suite_cells(p, f, measures)
        maps, dims = {}, {}
        if spec.confidence.maps and not no_pos:
            # the D-ECE grid over (confidence, features...): keys (bins, edge rule, with features)
            dece_key = next((k for k in cells if isinstance(k, tuple) and k[2]), None)
            names = list(spec.dece_binning.features)
            reads = _grid_reads(measures, dece_key, f) if dece_key is not None else set()
            for pair in spec.confidence.maps:
                metric = _map_metric(spec, pair)
                key = f"{pair[0]}_{pair[1]}"
                if dece_key is not None and dece_key[1] == metric.edges and set(pair) <= set(names):
                    on_grid = [1 + names.index(n) for n in pair]
                    if set(metric.required_stats) <= reads and len(set(pair)) == len(pair):  # summed from the grid's
                        dims[key] = (dece_key, on_grid, metric.required_stats)
                    else:
                        maps[key] = _map_cells_of(cells[dece_key], tuple(dece_key[0]), on_grid)
                    continue
                f2 = np.take(fr, _feature_cols(pair), axis=1)
                validate_sample(p, np.zeros(len(p), dtype=bool), f2)  # checks the two features
                maps[key] = sample_cells(p, f2, metric.grid_key(None, None, f2)[0], metric.edges)[0]
        narrow = {k: narrow_cells(v) for k, v in cells.items()}
        return SharedCells(cons, narrow, {k: narrow_cells(v) for k, v in maps.items()}, dims)
    except DetcalInputError:
        return None


def narrow_cells(cell: np.ndarray) -> np.ndarray:
    """Cell indices ``[S]`` (none negative) in the narrowest unsigned integer type that holds the largest
    (uint8 for the 15 ECE bins and the 125-cell map grids, uint16 for the 3,125 D-ECE cells): the same
    integers in an eighth or a quarter of the memory of int64, held for every IoU threshold."""
    return cell.astype(np.min_scalar_type(int(cell.max())), copy=False) if len(cell) else cell


def unread_features(n: int, k: int) -> np.ndarray:
    """A stand-in ``[n, k]`` for box features that will not be read: every binned grid's cells are given
    (:func:`_shared_cells`), so the suite, its intervals and the maps read only the features' shape. It
    takes no memory (one NaN broadcast), and any read of its values fails loudly (NaN is refused as a
    feature by :func:`detcal.binning.cells.validate_sample`) instead of giving numbers."""
    return np.broadcast_to(np.float64(np.nan), (n, k))


def _map_cells_of(cell: np.ndarray, grid: tuple[int, ...], dims: list[int]) -> np.ndarray:
    """The cell on the (confidence, dimensions ``dims``) sub-grid of each sample, from its cell ``[S]`` on the
    whole ``grid`` (C order, confidence first): digit ``d`` of a cell is its bin along dimension ``d``, so with
    the same bins and edge rule per dimension these are the integers binning anew gives (the D-ECE map grids
    are such sub-grids of the D-ECE grid, :func:`_map_grid`)."""
    n_cells = int(np.prod(grid, dtype=np.int64))
    if len(cell) > n_cells:  # a lookup table over the grid's cells: one gather instead of a division per digit
        return np.take(map_cell_digits(np.arange(n_cells, dtype=np.int64), grid, dims), cell)
    return map_cell_digits(np.asarray(cell, np.int64), grid, dims)


def map_cell_digits(cell: np.ndarray, grid: tuple[int, ...], dims: list[int]) -> np.ndarray:
    """:func:`_map_cells_of` digit by digit (integer division and remainder per dimension)."""
    out = np.zeros(len(cell), dtype=np.int64)
    for d in [0, *dims]:
        stride = int(np.prod(grid[d + 1 :], dtype=np.int64))
        out *= grid[d]
        out += (cell // stride) % grid[d]
    return out


def _one_threshold(
    i: int,
    spec: EvaluationSpec,
    measures: dict[str, ConfidenceMetric],
    data: LoadedData,
    mr: MatchResult,
    feats: np.ndarray,
    no_pos: str | None,
    shared: SharedCells | None = None,
) -> tuple[str, ConfidenceBlock | Skipped, dict[str, Any] | None]:
    """(label, metric block, D-ECE maps or None) of matching row ``i``; ``shared``: :func:`_shared_cells`."""
    b, c = spec.dece_binning, spec.confidence
    dets = data.detections
    label = threshold_label(float(mr.iou_thresholds[i]))
    cells = map_cells = None
    grid_stats: dict[Any, CellStats] | None = None
    if shared is not None:
        pos = np.flatnonzero(~mr.ignored[i][shared.rows])  # rows = considered & not ignored, in order
        rows = np.take(shared.rows, pos)
        cells = {key: np.take(cell, pos) for key, cell in shared.cells.items()}
        map_cells = {key: np.take(cell, pos) for key, cell in shared.map_cells.items()}
        del pos  # not held through the metrics and their intervals
        grid_stats = {} if shared.map_dims else None
    else:
        rows = np.flatnonzero(mr.considered & ~mr.ignored[i])
    p, y = np.take(dets.score, rows), np.take(mr.matched[i], rows)  # takes: the values of indexing, faster
    if len(rows) == 0 or not y.any():
        why = "no detection was evaluated" if len(rows) == 0 else f"no detection matched at {label}"
        return label, Skipped(f"{why}: the confidence metrics cannot be computed"), None
    if shared is not None:  # every grid's cells are given: the features' values are not read (their shape is)
        fr = unread_features(len(rows), feats.shape[1])
        n_feat = len(spec.dece_binning.features)
        f = unread_features(len(rows), n_feat) if n_feat else None
    else:
        fr = np.take(feats, rows, axis=0)  # ~4x faster than feats[rows] for [N, 4]
        f = sample_features(spec, fr, no_pos)
    category = np.take(dets.category, rows) if c.per_class else None
    groups = np.take(dets.image_id, rows) if spec.bootstrap.n > 0 else None  # read by the intervals only
    n_rows = len(rows)
    del rows  # its columns are taken: not held through the metrics and their intervals
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = confidence_metrics(
            p,
            y,
            f,
            category,
            measures,
            groups,
            cells=cells,
            grid_stats=grid_stats,
            **interval_settings(spec),
        )
    for r in res.values():
        r.table.pop("bin_index", None)  # cells are in C order over params.bins
    block = ConfidenceBlock(dict(res))
    block.entries["_sample"] = {
        "n": int(n_rows),
        "n_matched": int(y.sum()),
        "features": list(b.features),
        "warnings": sorted({str(w.message) for w in caught}),
    }
    if no_pos:
        _null_position_metrics(block, "images without width/height: box positions cannot be made relative")
    if not c.maps or no_pos:
        return label, block, {}
    map_stats = None
    if shared is not None and grid_stats is not None:
        map_stats = {
            name: sub_grid_stats(grid_stats[k], dims, reads) for name, (k, dims, reads) in shared.map_dims.items()
        }
    return label, block, dece_maps(spec, p, y, fr, map_cells, map_stats)
