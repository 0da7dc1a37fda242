"""Per-class aggregation and the confidence suite (every registered measure) from shared cell statistics.

The suite is built from the registry :data:`detcal.metrics.measures.MEASURES`
(:func:`suite`): each entry's grid (confidence alone, the D-ECE grid over
confidence and box features, or the whole sample) takes its bins from a
:class:`SuiteBinning` built once from the configuration, its parameters from
the entry's defaults and the caller's overrides.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.cells import FLOAT_STATS, CellStats, cell_stats, checked_p_features, sample_cells
from detcal.binning.edges import BinGrid
from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.confidence import SPARSE_RATIO, ConfidenceMetric, SparseCellsWarning
from detcal.metrics.confidence_compute import summaries_shared
from detcal.metrics.measures import MEASURES

# Per class
# ---------------------------------------------------------------------------


def _class_aggregate(
    name: str,
    categories: np.ndarray,
    values: np.ndarray,
    counts: np.ndarray,
    average: str,
    inner: MetricResult | None,
    params: dict[str, Any],
) -> MetricResult:
    """Weighted (by class sample count) and unweighted means over classes with a finite value."""
    if average not in ("weighted", "unweighted"):
        raise DetcalInputError(f"average must be 'weighted' or 'unweighted', got {average!r}", field="average")
    ok = np.isfinite(values)
    w = counts[ok].astype(np.float64)
    weighted = float(np.sum(w * values[ok]) / w.sum()) if w.sum() > 0 else float("nan")
    unweighted = float(np.mean(values[ok])) if ok.any() else float("nan")
    extra: dict[str, Any] = {
        "weighted_mean": weighted,
        "unweighted_mean": unweighted,
        "n_classes": int(len(categories)),
        "n_classes_defined": int(ok.sum()),
        "per_class": {int(c): float(v) for c, v in zip(categories, values)},
    }
    if not ok.any():
        extra["note"] = "no class has a defined value"
    return MetricResult(
        name=f"{name}_per_class",
        value=weighted if average == "weighted" else unweighted,
        variant=(inner.variant if inner is not None else ""),
        params={**params, "average": average, "n": int(counts.sum())},
        table={
            "category": categories.astype(np.int64),
            "value": values.astype(np.float64),
            "n": counts.astype(np.int64),
        },
        extra=extra,
    )


def per_class(
    metric_fn: Callable[..., MetricResult | float],
    p: ArrayLike,
    y: ArrayLike,
    category: ArrayLike,
    *,
    features: ArrayLike | None = None,
    average: str = "weighted",
    **kw: Any,
) -> MetricResult:
    """A metric per class and its mean over classes.

    ``metric_fn(p_k, y_k[, features=features_k], **kw)`` for each category k
    present in ``category [S]``; ``value`` is the weighted mean
    ``sum_k n_k v_k / sum_k n_k`` (``average="weighted"``, n_k = samples of
    class k) or the unweighted mean ``(1/K) sum_k v_k`` (``"unweighted"``),
    over classes with a finite value; both means are in ``extra``, the
    per-class values in ``table`` (``category``, ``value``, ``n``). Sparse-cell
    warnings of the classes are collected into one warning.
    """
    p_arr = np.asarray(p, dtype=np.float64)
    y_arr = np.asarray(y)
    cat = np.asarray(category)
    if cat.shape != p_arr.shape or (cat.size and not np.issubdtype(cat.dtype, np.integer)):
        raise DetcalInputError(
            f"category must be an integer array [S] like p, got {cat.dtype} {cat.shape}", field="category"
        )
    if y_arr.shape != p_arr.shape:
        raise DetcalInputError(f"y has shape {y_arr.shape}, expected {p_arr.shape}", field="y")
    f_arr = None if features is None else np.asarray(features, dtype=np.float64)
    order = np.argsort(cat, kind="stable")
    cats, starts = np.unique(cat[order], return_index=True)
    bounds = np.append(starts, len(cat))
    values = np.empty(len(cats))
    counts = np.diff(bounds).astype(np.int64)
    inner: MetricResult | None = None
    warned: list[int] = []
    for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):  # loop over classes only
        rows = order[a:b]
        args = (p_arr[rows], y_arr[rows])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SparseCellsWarning)
            r = metric_fn(*args, features=f_arr[rows], **kw) if f_arr is not None else metric_fn(*args, **kw)
        if any(issubclass(w.category, SparseCellsWarning) for w in caught):
            warned.append(int(cats[k]))
        if isinstance(r, MetricResult):
            inner = r
            values[k] = r.value
        else:
            values[k] = float(r)
    if warned:
        warnings.warn(
            f"sparse cells (cells > samples/{SPARSE_RATIO}) in classes {warned}", SparseCellsWarning, stacklevel=2
        )
    name = inner.name if inner is not None else getattr(metric_fn, "__name__", "metric")
    params = {k: v for k, v in (inner.params.items() if inner is not None else {}.items()) if k != "n"}
    return _class_aggregate(name, cats, values, counts, average, inner, params)


def category_index(cat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(cat, return_inverse=True)`` (sorted categories, index [S] of each sample); for
    non-negative ids below ``4 S + 1024`` by a presence table instead of a sort (the same arrays)."""
    cat = np.asarray(cat)
    if cat.size and np.issubdtype(cat.dtype, np.integer):
        lo, hi = int(cat.min()), int(cat.max())
        if lo >= 0 and hi < 4 * cat.size + 1024:
            present = np.bincount(cat.reshape(-1), minlength=hi + 1) > 0
            cats = np.flatnonzero(present).astype(cat.dtype)
            slot = np.cumsum(present) - 1
            return cats, slot[cat.reshape(-1)].reshape(cat.shape).astype(np.intp, copy=False)  # intp already
    return np.unique(cat, return_inverse=True)


# ---------------------------------------------------------------------------
# The default suite
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SuiteBinning:
    """The cells of the suite, built once from the configuration (e.g.
    :meth:`detcal.pipeline.spec.DeceBinningSpec.suite_binning`) and passed down.

    ``confidence``: the bins of the confidence-only grid (ECE, ECE_q, MCE; 15,
    Guo 2017; Thetis uses 20); ``position``: the D-ECE grid over (confidence,
    box features...), a :class:`~detcal.binning.BinGrid` with one count per
    dimension or an int for every dimension (5); ``sample_threshold`` of the
    D-ECE grid's kept cells (8); the sparse-cell ``policy``; ``edges``
    (``None``: the policy's rule; ``"guo"``: Guo et al.'s ``((m-1)/M, m/M]``).
    """

    confidence: int | BinGrid = 15
    position: int | BinGrid = 5
    sample_threshold: int = 8
    policy: str = "drop"
    edges: str | None = None


def suite(
    binning: SuiteBinning | None = None, params: Mapping[str, Mapping[str, Any]] | None = None
) -> dict[str, ConfidenceMetric]:
    """Every registered measure (:data:`detcal.metrics.measures.MEASURES`, in its order) on its grid.

    A measure on the ``confidence`` grid takes ``binning.confidence`` bins and
    sample threshold 1, one on the ``position`` grid the D-ECE grid with the
    box features and ``binning.sample_threshold``; then the entry's
    ``defaults`` apply (e.g. ECE_q's ``q=2``, homogeneity's ``policy="drop"``),
    then ``params[name]`` (e.g. ``{"homogeneity": {"spread": "variance"},
    "mce": {"sample_threshold": 4}}``).
    """
    b = binning or SuiteBinning()
    given = dict(params or {})
    unknown = sorted(set(given) - set(MEASURES))
    if unknown:
        raise DetcalInputError(f"parameters of unknown measure(s) {unknown}; known: {tuple(MEASURES)}", field="params")
    out: dict[str, ConfidenceMetric] = {}
    for name, entry in MEASURES.items():
        kw: dict[str, Any] = {"policy": b.policy, "edge_rule": b.edges}
        if entry.grid == "confidence":
            kw.update(bins=b.confidence, sample_threshold=1)
        elif entry.grid == "position":
            kw.update(bins=b.position, sample_threshold=b.sample_threshold, use_features=True)
        else:
            kw = {}
        kw.update(entry.defaults)
        kw.update(given.get(name, {}))
        out[name] = ConfidenceMetric(name, **kw)
    return out


def _category_groups(category: ArrayLike | None, p_arr: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """The distinct classes [G] and each sample's class index [S] (None, None without ``category``)."""
    if category is None:
        return None, None
    cat = np.asarray(category)
    if cat.shape != p_arr.shape or (cat.size and not np.issubdtype(cat.dtype, np.integer)):
        raise DetcalInputError(
            f"category must be an integer array [S] like p, got {cat.dtype} {cat.shape}", field="category"
        )
    return category_index(cat)


def _suite_stats(
    suite: dict[str, ConfidenceMetric],
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None,
    cells: dict[Hashable, np.ndarray] | None,
    cat_idx: np.ndarray | None,
    n_groups: int | None,
) -> tuple[dict[Hashable, CellStats], Hashable]:
    """The statistics of every distinct grid of the suite, and the key of the grid the cell-free metrics read.

    One cell_stats pass per distinct grid, computing the statistics its metrics read; the cell-free metrics read
    the exact totals of the first floor grid, which then computes every statistic.
    """
    grids: dict[Any, ConfidenceMetric] = {}  # keys: (bins, edge rule, with features)
    need: dict[Any, set[str]] = {}
    for m in suite.values():
        if m.binned:
            key = m.grid_key(None, None, features)
            grids.setdefault(key, m)
            need.setdefault(key, set()).update(m.required_stats)
    free_key = next((k for k in grids if k[1] == "floor"), None)
    free = next((m for m in suite.values() if not m.binned), None)
    if free_key is None and free is not None:
        free_key = free.grid_key()
        grids[free_key] = free
    if free_key is not None:
        need[free_key] = set(FLOAT_STATS)
    grouped: dict[Hashable, CellStats] = {}
    for key, m in grids.items():
        which = tuple(s for s in FLOAT_STATS if s in need[key])
        if cells is not None and key in cells:
            grouped[key] = cell_stats(
                p,
                m.y_or_zeros(p, y),
                None,
                key[0],
                edges=key[1],
                groups=cat_idx,
                n_groups=n_groups,
                stats=which,
                cells=cells[key],
            )
        else:
            grouped[key] = m.stats(p, y, features if m.binned else None, groups=cat_idx, n_groups=n_groups, which=which)
    return grouped, free_key


def _warn_sparse(out: dict[str, MetricResult], n: int) -> None:
    """One combined :class:`SparseCellsWarning` for the class-agnostic results with more cells than samples/10."""

    sparse = [
        name
        for name, r in out.items()
        if r.extra.get("sparse_warning") and r.params.get("n", 0) > 0 and not name.endswith("_per_class")
    ]
    if sparse:
        warnings.warn(
            f"{sparse}: more cells than samples/{SPARSE_RATIO} ({n} samples); "
            "the estimates are dominated by sparse cells, consider fewer bins",
            SparseCellsWarning,
            stacklevel=3,
        )


def confidence_metrics(
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None = None,
    category: ArrayLike | None = None,
    measures: Mapping[str, ConfidenceMetric] | None = None,
    image_id: ArrayLike | None = None,
    cells: dict[Hashable, np.ndarray] | None = None,
    *,
    grid_stats: dict[Hashable, CellStats] | None = None,
    average: str = "weighted",
    n_boot: int = 1000,
    ci_level: float = 0.95,
    seed: int = 0,
    ci_method: str = "bca",
) -> dict[str, MetricResult]:
    """The confidence suite from shared statistics: name -> :class:`MetricResult`.

    ``measures``: name -> metric, default :func:`suite` (every registered
    measure with its default parameters). One :func:`~detcal.binning.cell_stats`
    pass per distinct grid (the ECE grid, the D-ECE grid; the cell-free
    metrics reuse the exact totals of a ``floor`` grid). With ``category [S]``
    the statistics are computed per class in the same pass and
    ``"<name>_per_class"`` entries are added (``average``: weighted or
    unweighted means, as :func:`per_class`); the class-agnostic numbers are the
    exact sums over classes. With ``image_id [S]`` and ``n_boot > 0``, every
    class-agnostic number gets a bootstrap interval over images (``n_boot``
    replicates, ``ci_level``, ``seed``, ``ci_method``: BCa by default; shared
    draws, :func:`detcal.metrics.bootstrap.suite_intervals`).

    ``cells``: the cell of each sample on the suite's grids, from :func:`suite_cells`
    (computed once for detections shared by several calls, e.g. one per IoU
    threshold, then indexed): those grids skip the binning (same numbers). ``grid_stats``: filled with the
    class-agnostic statistics of each binned grid, by grid key (e.g. for the D-ECE maps of its sub-grids,
    :func:`sub_grid_stats`).
    """
    chosen = dict(suite() if measures is None else measures)
    p_arr = np.asarray(p, dtype=np.float64)
    cats, cat_idx = _category_groups(category, p_arr)
    grouped, free_key = _suite_stats(chosen, p, y, features, cells, cat_idx, None if cats is None else len(cats))
    out: dict[str, MetricResult] = {}
    shared: dict[tuple[Hashable, bool], tuple[CellStats, Any]] = {}  # per grid: agnostic stats and sums
    keys = {name: m.grid_key(None, None, features) if m.binned else free_key for name, m in chosen.items()}

    def _shared(key: Hashable, binned: bool) -> tuple[CellStats, Any]:
        if (key, binned) not in shared:
            st = grouped[key]
            agnostic = st.sum_groups() if cats is not None else st
            shared[key, binned] = (agnostic, (agnostic if binned else agnostic.total()).sums())
        return shared[key, binned]

    with summaries_shared():  # the measures of one grid share its per-cell summary (the same values)
        per_class_values = class_values(chosen, grouped, keys) if cats is not None else {}
        for name, m in chosen.items():
            st = grouped[keys[name]]
            agnostic, agnostic_sums = _shared(keys[name], m.binned)
            if grid_stats is not None and m.binned:
                grid_stats[keys[name]] = agnostic
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SparseCellsWarning)  # one combined warning below
                out[name] = m.result(agnostic, agnostic_sums)
            if cats is not None:
                values = per_class_values[name]
                params = {k: v for k, v in out[name].params.items() if k != "n"}
                out[f"{name}_per_class"] = _class_aggregate(
                    name, cats, values, st.n.astype(np.int64), average, out[name], params
                )
    _warn_sparse(out, int(np.size(p_arr)))
    if image_id is not None and n_boot > 0:
        # lazy: the bootstrap (scipy.sparse, scipy.special at its first use) only when intervals are asked
        from detcal.metrics.bootstrap import suite_intervals

        agnostic_results = {name: out[name] for name in chosen}
        out.update(
            suite_intervals(
                agnostic_results,
                chosen,
                image_id,
                p,
                y,
                features,
                n_boot=n_boot,
                level=ci_level,
                seed=seed,
                method=ci_method,
                cells=cells,
            )
        )
    return out


CLASS_BLOCK_CELLS = 1 << 18
"""Per-class values are computed for blocks of classes of at most this many (class, cell) entries
(:func:`class_values`)."""


def class_values(
    measures: Mapping[str, ConfidenceMetric], grouped: Mapping[Hashable, CellStats], keys: Mapping[str, Hashable]
) -> dict[str, np.ndarray]:
    """Per-class values ``[G]`` of every measure from its grid's per-class statistics ``grouped[keys[name]]``
    (``[G, C]``; a cell-free measure reads each class's exact totals), grid by grid in blocks of classes of at
    most :data:`CLASS_BLOCK_CELLS` entries.

    A measure's value for one class reads that class's cells only (the sums over the cell axis are taken row
    by row), so a block of classes gives the values the whole array gives, bit for bit (tested), while the
    float sums and per-cell summaries held at once are those of one block (with 365 classes x 3,125 D-ECE
    cells, a few MB instead of over a hundred).
    """
    by_grid: dict[tuple[Hashable, bool], list[str]] = {}
    for name, m in measures.items():
        by_grid.setdefault((keys[name], m.binned), []).append(name)
    out: dict[str, np.ndarray] = {}
    for (key, binned), names in by_grid.items():
        st = grouped[key]
        n_groups = int(st.count.shape[0])
        step = max(1, CLASS_BLOCK_CELLS // max(st.n_cells, 1)) if binned else max(n_groups, 1)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
        fields = {f for name in names for f in measures[name].value_fields}  # the fields the values read
        for g0 in range(0, n_groups, step):
            part = st.group_slice(g0, g0 + step)
            sums = (part if binned else part.total()).sums(tuple(fields))  # cell-free: exact totals
            for name in names:
                parts[name].append(np.asarray(measures[name].values(sums)))
        for name in names:
            out[name] = (
                np.concatenate(parts[name])
                if parts[name]
                else measures[name].values((st if binned else st.total()).sums())
            )
    return out


def sub_grid_stats(stats: CellStats, dims: Sequence[int], which: Sequence[str]) -> CellStats:
    """The statistics ``[C']`` of the (confidence, dimensions ``dims``) sub-grid of ``stats [C]`` (the cells of
    ``stats.bins`` in C order, confidence first), with the float statistics ``which`` only: each sub-grid cell
    sums the cells it covers, over the other dimensions, and the sub-grid's dimensions come in the order
    ``[0, *dims]``.

    The statistics are integers (counts and fixed-point words), so these are the integers :func:`cell_stats`
    gives over the samples' sub-grid cells (the same bins and edge rule per dimension: digit ``d`` of a cell is
    its bin along dimension ``d``), whatever the order of the sums.
    """
    grid = tuple(int(b) for b in stats.bins)
    keep = [0, *(int(d) for d in dims)]
    drop = tuple(d for d in range(len(grid)) if d not in keep)
    perm = [sorted(keep).index(d) for d in keep]  # the summed array's axes (increasing) -> the order of keep

    def reduce(a: np.ndarray, tail: tuple[int, ...]) -> np.ndarray:
        summed = a.reshape(grid + tail).sum(axis=drop)
        moved = np.transpose(summed, perm + list(range(len(keep), len(keep) + len(tail))))
        return np.ascontiguousarray(moved).reshape((-1,) + tail)

    return CellStats(
        bins=BinGrid(tuple(grid[d] for d in keep)),
        edges=stats.edges,
        count=reduce(stats.count, ()),
        sum_y=reduce(stats.sum_y, ()),
        fixed={k: reduce(stats.fixed[k], (3,)) for k in which},
    )


def suite_cells(
    p: ArrayLike, features: ArrayLike | None = None, measures: Mapping[str, ConfidenceMetric] | None = None
) -> dict[Hashable, np.ndarray]:
    """Cell [S] of each sample on every binned grid of the suite (for ``confidence_metrics(cells=...)``).

    The cells do not depend on the matched flags: a caller evaluating the same
    detections at several IoU thresholds computes them once and passes
    ``{key: c[rows]}`` to each call. ``p`` and ``features`` are checked here.
    """
    p_arr, f_arr = checked_p_features(p, features)
    out: dict[Hashable, np.ndarray] = {}
    for m in (suite() if measures is None else measures).values():
        if m.binned:
            key: Any = m.grid_key(None, None, f_arr)  # (bins, edge rule, with features)
            if key not in out:
                out[key] = sample_cells(p_arr, m.grid_inputs(f_arr)[0], key[0], key[1])[0]
    return out


# ---------------------------------------------------------------------------
# D-ECE over classes: the class label as a bin dimension, or the weighted class mean
# ---------------------------------------------------------------------------

DECE_CLASS_MODES: tuple[str, ...] = ("dimension", "weighted_mean")
"""How :func:`dece_by_class` treats the class label."""


def dece_by_class(
    p: ArrayLike,
    y: ArrayLike,
    features: ArrayLike,
    category: ArrayLike,
    bins: int | tuple[int, ...] = 5,
    sample_threshold: int = 8,
    policy: str = "drop",
    *,
    mode: str = "dimension",
    edges: str | None = None,
) -> MetricResult:
    """D-ECE with the class label (``category [S]``, integers) entering the estimate.

    ``dimension`` (Thetis; Kueppers et al.'s position-and-label-dependent
    calibration): the class is one more bin dimension, cells are
    (class, confidence bin, feature bins...), and D-ECE = sum_c N_c / N' gap(c)
    over all of them (sparse-cell ``policy`` over all cells at once).
    ``weighted_mean``: D-ECE within each class, averaged with weights N_g / N
    over the classes with a defined value (detcal's ``dece_per_class``).
    The two agree whenever no cell is dropped (``sample_threshold=1``, or
    the ``netcal`` policy); under ``drop`` with sparse cells the first
    normalises by all kept samples, the second per class.
    Thetis's D-ECE: ``mode="dimension", sample_threshold=1``.

    Definition: :func:`detcal.metrics.reference.dece_by_class`, which this fast path must equal (tests/metrics/test_metrics_reference.py).
    """
    if mode not in DECE_CLASS_MODES:
        raise DetcalInputError(f"mode must be one of {DECE_CLASS_MODES}, got {mode!r}", field="mode")
    p_arr = np.asarray(p, dtype=np.float64)
    cat = np.asarray(category)
    if cat.shape != p_arr.shape or (cat.size and not np.issubdtype(cat.dtype, np.integer)):
        raise DetcalInputError(
            f"category must be an integer array [S] like p, got {cat.dtype} {cat.shape}", field="category"
        )
    metric = ConfidenceMetric("dece", bins, sample_threshold, policy, use_features=True, edge_rule=edges)
    cats, idx = np.unique(cat, return_inverse=True)
    st = metric.stats(p, y, features, groups=idx.reshape(-1), n_groups=len(cats))  # [G, C]
    if mode == "weighted_mean":
        values = metric.values(st.sums())
        params = {**metric.result_params(st.sum_groups()), "mode": mode}
        params.pop("n", None)
        res = _class_aggregate("dece", cats, values, st.n.astype(np.int64), "weighted", None, params)
        return dataclasses.replace(res, name="dece", variant=f"{metric.variant}+class_weighted_mean")
    flat = CellStats(
        bins=(len(cats),) + tuple(st.bins),
        edges=st.edges,
        count=st.count.reshape(-1),
        sum_y=st.sum_y.reshape(-1),
        fixed={k: v.reshape(-1, 3) for k, v in st.fixed.items()},
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseCellsWarning)
        res = metric.result(flat)
    res.params.update(mode=mode, class_dimension=0, categories=[int(c) for c in cats])
    return dataclasses.replace(res, variant=f"{metric.variant}+class_dimension")
