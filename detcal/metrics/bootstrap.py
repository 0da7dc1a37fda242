"""Bootstrap over images (docs/calibration.md#bootstrap), numpy/scipy only.

The resampling unit is the image (or any group): each replicate draws
``I`` groups with replacement (``np.random.default_rng(seed).integers``), and
all samples of a drawn group enter together, as many times as it was drawn.
Replicates whose value is undefined (NaN) are left out and counted.

Intervals (:func:`interval`; ``method``):

* ``"bca"`` (default): bias-corrected and accelerated (Efron 1987; Efron &
  Tibshirani 1993, ch. 14): the replicate quantiles at
  ``a_lo = Phi(z0 + (z0 + z_lo) / (1 - a (z0 + z_lo)))`` and likewise
  ``a_hi``, with ``z_lo, z_hi = Phi^-1((1 -+ level) / 2)``, the bias
  correction ``z0 = Phi^-1(share of replicates below the estimate, ties
  counted half)`` and the acceleration ``a = sum d^3 / (6 (sum d^2)^1.5)``,
  ``d_i = mean(jack) - jack_i`` over the leave-one-image-out (jackknife)
  values (:func:`jackknife_many`);
* ``"bc"``: bias-corrected percentile, the same with ``a = 0`` (no jackknife);
* ``"percentile"``: ``[q_{(1-level)/2}, q_{(1+level)/2}]`` of the replicates
  (Efron & Tibshirani 1993, ch. 13), numpy's linear quantile.

Every interval reports the bootstrap bias ``mean(replicates) - estimate``.
When fewer than ``MIN_SIDE`` replicates fall on one side of the estimate the
bias dominates the spread and ``z0`` is not estimable: the BCa/BC interval
is then not computed (NaN) and ``ci_note`` says why; the percentile interval
and the bias are still given.

Two paths give the same replicates (the draws are identical):

* generic: any ``metric_fn(*arrays) -> MetricResult | float``; the sample
  index of a replicate is built with ``np.repeat``/``cumsum`` (no loop over
  samples), one call per replicate;
* fast: a metric exposing ``grid_key(*arrays)``, ``pair_sums(group_index,
  *arrays)`` and ``values(sums)`` (e.g.
  :class:`detcal.metrics.confidence.ConfidenceMetric`): per-(image, cell)
  sums are computed once (:mod:`detcal.metrics.image_cells`) and each block
  of replicates is one sparse matrix product ``W [R,I] @ A [I, C*k]`` with
  multinomial weights ``W`` (how often each image was drawn), then
  ``values`` on the replicate sums ``[R, C]``; the jackknife takes the
  totals minus one image's sums, and a metric with ``leave_one_out``
  corrects its value over that image's own cells (linear in the data).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult
from detcal.metrics.image_cells import (
    BLOCK_ELEMS,
    GridCells,
    count_replicates,
    grid_cells,
    grid_members,
    image_cells,
    leave_out_values,
    matrix_from,
    occupied_index,
    replicate_values,
)
from detcal.metrics.normal import ndtr, ndtri
from detcal.utils.scoped import Scoped

_BLOCK_ELEMS = BLOCK_ELEMS
"""Draws per block: replicates are drawn in blocks of ``max(1, 2**21 // I)``."""


METHODS: tuple[str, ...] = ("bca", "bc", "percentile")
"""Interval methods (module docstring); ``"bca"`` is the default."""

MIN_SIDE: int = 2
"""BCa/BC need at least this many finite replicates on each side of the estimate (else ``z0`` is +-inf)."""

JACKKNIFE_BLOCKS: int = 200
"""Generic (black-box) metrics: above this many images, the jackknife deletes blocks of images (module docstring)."""


def ci_params(n_boot: int, level: float, seed: int, method: str = "percentile") -> dict[str, Any]:
    """Provenance of a bootstrap interval, for ``MetricResult.params["bootstrap"]``."""
    return {"method": method, "unit": "image", "n_boot": int(n_boot), "level": float(level), "seed": int(seed)}


def check_method(method: str) -> None:
    """Refuse an interval method outside :data:`METHODS` (one line naming the field)."""
    if method not in METHODS:
        raise DetcalInputError(f"method must be one of {list(METHODS)}, got {method!r}", field="method")


def check_n_boot(n_boot: int, level: float | None = None) -> None:
    """Refuse ``n_boot`` below 1 or not an integer, and a ``level`` outside (0, 1)."""
    if int(n_boot) != n_boot or n_boot < 1:
        raise DetcalInputError(f"n_boot must be an integer >= 1, got {n_boot!r}", field="n_boot")
    if level is not None and not (0.0 < level < 1.0):
        raise DetcalInputError(f"level must be in (0, 1), got {level!r}", field="level")


def _layout(groups: ArrayLike, arrays: tuple[ArrayLike | None, ...]) -> tuple[np.ndarray, int]:
    """``(group_index [S], I)``: the index of each sample's group among the ``I`` distinct groups (sorted)."""
    g = np.asarray(groups)
    if g.ndim != 1:
        raise DetcalInputError(f"groups must be 1-D [S] (image ids), got shape {g.shape}", field="groups")
    for k, a in enumerate(arrays):
        if a is not None and np.shape(a)[0:1] != g.shape:
            raise DetcalInputError(
                f"array {k} has {np.shape(a)[0] if np.ndim(a) else 'no'} rows, expected S={len(g)} like groups",
                field=f"arrays[{k}]",
            )
    if g.dtype.kind in "iu" and len(g) and int(g.min()) >= 0:  # image ids: counted, not sorted (same index)
        inv, n = occupied_index(g.astype(np.int64, copy=False), int(g.max()) + 1)
    else:
        uniq, inv = np.unique(g, return_inverse=True)
        inv, n = inv.reshape(-1).astype(np.int64), len(uniq)
    return (inv.astype(np.int32) if n < 2**31 else inv), n  # an index only: narrow, the same values


def sample_layout(inv: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order [S], starts [I], counts [I])``: the samples of group i are ``order[starts[i]:][:counts[i]]``
    (needed only where a metric is recomputed on resampled rows)."""
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=n_groups).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return order, starts, counts


def draws(n_groups: int, n_boot: int, seed: int, narrow: bool = False) -> Iterator[np.ndarray]:
    """Blocks ``[b, I]`` of drawn group indices; the same stream for both paths.

    ``narrow``: the indices as int32 when ``I < 2**31`` (half the memory). numpy's generator draws a
    bounded integer below ``2**32`` with the same 32-bit routine for either type, so the indices are the
    same numbers (tested against the int64 draws)."""
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, _BLOCK_ELEMS // max(n_groups, 1)))
    dtype = np.int32 if narrow and n_groups < 2**31 else np.int64
    done = 0
    while done < n_boot:
        b = min(block, n_boot - done)
        yield rng.integers(0, n_groups, size=(b, n_groups), dtype=dtype)
        done += b


def draw_counts(n_groups: int, n_boot: int, seed: int) -> list[np.ndarray]:
    """How often each group is drawn in each replicate: blocks ``[b, I]`` of :func:`draws` counted, each in the
    narrowest unsigned integer type that holds its largest count (the same counts as the float matrix of
    :func:`_replicates`, in an eighth of its memory or less).

    Each block is stored group-major (the transpose of a C-ordered ``[I, b]`` array, so ``blk.T`` is C-ordered):
    the replicate product reads a block's columns as float weights ``[I, b']`` (:func:`detcal.metrics.image_cells.
    count_product`), which then copy along rows instead of gathering one byte in every ``b`` (the same integers,
    about a third of the time)."""
    out = []
    wide = np.uint16 if n_groups < 1 << 16 else np.uint32 if n_groups < 1 << 32 else np.uint64  # holds I
    for picks in draws(n_groups, n_boot, seed, narrow=True):
        cnt_t = np.empty(picks.shape[::-1], dtype=wide)  # [I, b]
        for r in range(len(picks)):  # loop over replicates: one count vector [I] at a time
            cnt_t[:, r] = np.bincount(picks[r], minlength=n_groups)
        del picks
        out.append(cnt_t.astype(np.min_scalar_type(int(cnt_t.max())), copy=False).T)
    return out


_DRAWS = Scoped()
"""While :func:`draws_shared` is open, its items: ``[(n_groups, n_boot, seed), counts]`` of the last
:func:`shared_draw_counts`."""


@contextmanager
def draws_shared() -> Iterator[None]:
    """Within the block, :func:`shared_draw_counts` with the same ``(n_groups, n_boot, seed)`` draws and counts
    once and hands the same (read-only) blocks to every caller: the confidence metrics of several IoU thresholds
    over the same images draw the same replicates. Cleared on exit."""
    with _DRAWS.open():
        yield


def shared_draw_counts(n_groups: int, n_boot: int, seed: int) -> list[np.ndarray]:
    """:func:`draw_counts`, reused while :func:`draws_shared` is open for the same arguments (the same
    integers: the draws depend on nothing else)."""
    if not _DRAWS.active:
        return draw_counts(n_groups, n_boot, seed)
    key = (int(n_groups), int(n_boot), int(seed))
    if _DRAWS.items and _DRAWS.items[0] == key:
        return _DRAWS.items[1]  # type: ignore[no-any-return]
    _DRAWS.items[:] = []  # the previous counts released first
    counts = draw_counts(*key)
    for blk in counts:
        blk.setflags(write=False)
    _DRAWS.items[:] = [key, counts]
    return counts


def resample_rows(picks: np.ndarray, order: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sample rows of one replicate: the samples of the drawn groups ``picks [I]``, concatenated.

    ``lens = counts[picks]``, ``ends = cumsum(lens)``; row j of group slot k is
    ``order[starts[picks[k]] + j - (ends[k] - lens[k])]`` (vectorised with
    ``np.repeat``).
    """
    lens = counts[picks]
    ends = np.cumsum(lens)
    total = int(ends[-1]) if len(ends) else 0
    pos = np.repeat(starts[picks] - (ends - lens), lens) + np.arange(total, dtype=np.int64)
    return order[pos]


def is_fast(metric_fn: Any) -> bool:
    """Whether ``metric_fn`` has the fast interface (``grid_key``, ``pair_sums``, ``values``: module docstring)."""
    return all(callable(getattr(metric_fn, a, None)) for a in ("grid_key", "pair_sums", "values"))


def metric_value(r: Any) -> float:
    """The float of a metric's return value (a :class:`MetricResult` or a number)."""
    return float(r.value) if isinstance(r, MetricResult) else float(r)


def bootstrap_many(
    metric_fns: Mapping[str, Callable[..., Any]],
    groups: ArrayLike,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    seed: int = 0,
    fast: bool = True,
) -> dict[str, np.ndarray]:
    """Replicate values ``[n_boot]`` of several metrics over the same resamples of ``groups``.

    ``arrays`` are per-sample arrays (first axis S; ``None`` passes through),
    handed to each metric as ``metric_fn(*arrays)``. Metrics with the fast
    interface (module docstring) and ``fast=True`` share per-grid sums.
    Warnings raised inside replicates are silenced (they were raised on the
    full sample).
    """
    check_n_boot(n_boot)
    inv, n_groups = _layout(groups, arrays)
    names = list(metric_fns)
    fast_names = [n for n in names if fast and is_fast(metric_fns[n])]
    grids = image_cells(metric_fns, fast_names, inv, n_groups, arrays) if n_groups else []
    return _replicates(metric_fns, names, grids, (inv, n_groups), arrays, int(n_boot), seed)


def _replicates(
    metric_fns: Mapping[str, Callable[..., Any]],
    names: list[str],
    grids: list[GridCells],
    groups: tuple[np.ndarray, int],
    arrays: tuple[ArrayLike | None, ...],
    n_boot: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """Replicates of ``names``: the metrics of ``grids`` from per-image sums, the others per resample
    (``groups``: :func:`_layout`)."""
    out = {name: np.full(n_boot, np.nan) for name in names}
    inv, n_groups = groups
    if n_groups == 0:
        return out
    on_grid = {n for g in grids for n in g.members}
    slow_names = [n for n in names if n not in on_grid]
    none = np.zeros(0, dtype=np.int64)  # every metric from the cell sums: no resampled rows are cut out
    order, starts, counts = sample_layout(inv, n_groups) if slow_names else (none, none, none)
    r0 = 0
    for picks in draws(n_groups, n_boot, seed):
        b = picks.shape[0]
        if grids:
            flat = (np.arange(b, dtype=np.int64)[:, None] * n_groups + picks).ravel()
            w = np.bincount(flat, minlength=b * n_groups).reshape(b, n_groups).astype(np.float64)
            replicate_values(metric_fns, grids, w, out, r0)
        for j in range(b) if slow_names else ():  # loop over replicates (the index itself is vectorised)
            idx = resample_rows(picks[j], order, starts, counts)
            sub = tuple(None if a is None else np.asarray(a)[idx] for a in arrays)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for n in slow_names:
                    out[n][r0 + j] = metric_value(metric_fns[n](*sub))
        r0 += b
    return out


def jackknife_blocks(n_groups: int, n_blocks: int | None, seed: int = 0) -> np.ndarray:
    """Block ``[I]`` of each group for a delete-a-block jackknife.

    ``n_blocks`` None or ``>= I``: every group is its own block (the
    leave-one-image-out jackknife). Otherwise groups are dealt into
    ``n_blocks`` blocks of near-equal size in the order of
    ``np.random.default_rng(seed).permutation(I)`` (the grouped jackknife of
    Efron & Narasimhan 2020, "The automatic construction of bootstrap
    confidence intervals", used to estimate the acceleration of BCa).
    """
    if n_blocks is None or n_blocks >= n_groups:
        return np.arange(n_groups, dtype=np.int64)
    if int(n_blocks) < 2:
        raise DetcalInputError(f"the jackknife needs >= 2 blocks, got {n_blocks}", field="jackknife_blocks")
    block = np.empty(n_groups, dtype=np.int64)
    block[np.random.default_rng(seed).permutation(n_groups)] = np.arange(n_groups) % int(n_blocks)
    return block


def jackknife_many(
    metric_fns: Mapping[str, Callable[..., Any]],
    groups: ArrayLike,
    *arrays: ArrayLike | None,
    fast: bool = True,
    n_blocks: int | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Delete-a-block jackknife values ``[m]`` of several metrics (block j left out in value j).

    Blocks are from :func:`jackknife_blocks` (``n_blocks=None``: one image
    per block for fast metrics, at most ``JACKKNIFE_BLOCKS`` blocks for
    generic ones, each of which costs one call per block). The fast path
    takes the totals of the per-image cell sums minus each block's sums
    (:func:`detcal.metrics.image_cells.leave_out_values`: linear in the
    (image, cell) pairs, no loop over images); the generic path calls
    ``metric_fn`` on the samples outside each block (a loop over blocks).
    """
    inv, n_groups = _layout(groups, arrays)
    names = list(metric_fns)
    fast_names = [n for n in names if fast and is_fast(metric_fns[n])]
    grids = image_cells(metric_fns, fast_names, inv, n_groups, arrays) if n_groups else []
    return _jackknife(metric_fns, names, grids, inv, n_groups, arrays, n_blocks, seed)


def _jackknife(
    metric_fns: Mapping[str, Callable[..., Any]],
    names: list[str],
    grids: list[GridCells],
    inv: np.ndarray,
    n_groups: int,
    arrays: tuple[ArrayLike | None, ...],
    n_blocks: int | None,
    seed: int,
) -> dict[str, np.ndarray]:
    """Jackknife values of ``names``: the metrics of ``grids`` from totals minus unit sums, the others per block."""
    if n_groups == 0:
        return {name: np.zeros(0) for name in names}
    out: dict[str, np.ndarray] = {}
    if grids:
        block = jackknife_blocks(n_groups, n_blocks, seed)
        out.update(leave_out_values(metric_fns, grids, block, int(block.max()) + 1))
    slow_names = [n for n in names if n not in out]
    if slow_names:
        block = jackknife_blocks(n_groups, JACKKNIFE_BLOCKS if n_blocks is None else n_blocks, seed)
        m = int(block.max()) + 1
        sample_block = block[inv]
        res = {n: np.full(m, np.nan) for n in slow_names}
        for j in range(m):  # loop over blocks of images
            idx = np.flatnonzero(sample_block != j)
            sub = tuple(None if a is None else np.asarray(a)[idx] for a in arrays)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for n in slow_names:
                    res[n][j] = metric_value(metric_fns[n](*sub))
        out.update(res)
    return {n: out[n] for n in names}


def _fast_suite(
    metric_fns: Mapping[str, Callable[..., Any]],
    names: list[str],
    groups: tuple[np.ndarray, int],
    arrays: tuple[ArrayLike | None, ...],
    cells: Mapping[Hashable, np.ndarray] | None,
    n_boot: int,
    seed: int,
    method: str,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Replicates (those of :func:`_replicates`) and, for ``"bca"``, the leave-one-image-out values (those of
    :func:`_jackknife`) of metrics that all have the fast interface, one grid at a time.

    The draw counts of every replicate are made first and kept in narrow integers (:func:`draw_counts`);
    then each grid's per-image sums are computed, its jackknife taken from the pairs, the pairs released
    once its product matrix is built, and its replicates multiplied in column blocks
    (:func:`detcal.metrics.image_cells.count_replicates`). Only one grid's statistics are held at a time:
    the same numbers as holding them all, in less memory (tested bit for bit).
    """
    inv, n_groups = groups
    counts = shared_draw_counts(n_groups, n_boot, seed)
    reps = {name: np.full(n_boot, np.nan) for name in names}
    jack: dict[str, np.ndarray] = {}
    for key, members in grid_members(metric_fns, names, arrays).items():
        held = [grid_cells(metric_fns, key, members, inv, n_groups, arrays, cells, matrix=False)]
        if method == "bca":
            jack.update(leave_out_values(metric_fns, held, jackknife_blocks(n_groups, None), n_groups))
        g = matrix_from(held)  # the pairs released piece by piece as the matrix is built
        count_replicates(metric_fns, g, counts, reps)
        del g
    return reps, ({n: jack[n] for n in names} if method == "bca" else {})


def bootstrap_values(
    metric_fn: Callable[..., Any],
    groups: ArrayLike,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    seed: int = 0,
    fast: bool = True,
) -> np.ndarray:
    """Replicate values ``[n_boot]`` of one metric (see :func:`bootstrap_many`)."""
    return bootstrap_many({"metric": metric_fn}, groups, *arrays, n_boot=n_boot, seed=seed, fast=fast)["metric"]


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """``(q_{(1-level)/2}, q_{(1+level)/2})`` of the finite replicate values; ``(nan, nan)`` if none."""
    check_n_boot(1, level)
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(v, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return (float(lo), float(hi))


def interval(
    values: np.ndarray,
    estimate: float,
    level: float = 0.95,
    method: str = "bca",
    jackknife: np.ndarray | None = None,
) -> dict[str, Any]:
    """A bootstrap interval of ``estimate`` from replicate ``values`` (module docstring).

    Returns ``{"ci": (lo, hi), "method", "bias", "z0", "acceleration",
    "note"}``: ``bias = mean(finite replicates) - estimate``; ``z0`` and
    ``acceleration`` as used (``None`` where the method has none); ``note``
    is empty or says why the interval is NaN. ``jackknife`` (values of
    :func:`jackknife_many`) is required by ``"bca"``.
    """
    check_n_boot(1, level)
    check_method(method)
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    est = float(estimate)
    out: dict[str, Any] = {
        "ci": (float("nan"), float("nan")),
        "method": method,
        "bias": float("nan"),
        "z0": None,
        "acceleration": None,
        "note": "",
    }
    if len(v) == 0 or not np.isfinite(est):
        out["note"] = "no finite replicate" if len(v) == 0 else "the estimate is undefined"
        return out
    out["bias"] = float(np.mean(v) - est)
    if method == "percentile":
        out["ci"] = percentile_interval(v, level)
        return _outside_note(out, v, est)
    below, equal = int(np.sum(v < est)), int(np.sum(v == est))
    above = len(v) - below - equal
    if min(below + equal, above + equal) < MIN_SIDE:
        out["note"] = (
            f"{below} of {len(v)} replicates below and {above} above the estimate: the bootstrap bias "
            f"({out['bias']:.4g}) dominates the spread, z0 is not estimable and no {method} interval "
            "is given"
        )
        return out
    z0 = float(ndtri((below + 0.5 * equal) / len(v)))
    acc = 0.0
    if method == "bca":
        if jackknife is None:
            raise DetcalInputError("a BCa interval needs the jackknife values", field="jackknife")
        jk = np.asarray(jackknife, dtype=np.float64)
        jk = jk[np.isfinite(jk)]
        d = jk.mean() - jk if len(jk) else jk
        ss = float(np.sum(d * d))
        acc = float(np.sum(d**3) / (6.0 * ss**1.5)) if ss > 0 else 0.0
    z = ndtri(np.array([(1.0 - level) / 2.0, (1.0 + level) / 2.0]))
    alphas = ndtr(z0 + (z0 + z) / (1.0 - acc * (z0 + z)))
    lo, hi = np.quantile(v, alphas)
    out.update(ci=(float(lo), float(hi)), z0=z0, acceleration=acc if method == "bca" else None)
    if alphas[0] * len(v) < 1.0 or (1.0 - alphas[1]) * len(v) < 1.0:
        out["note"] = (
            f"the adjusted levels ({alphas[0]:.2g}, {alphas[1]:.2g}) reach the extreme replicates: "
            "the end point is a Monte-Carlo extreme; more replicates (n_boot) give a steadier one"
        )
    return _outside_note(out, v, est)


def _outside_note(out: dict[str, Any], v: np.ndarray, est: float) -> dict[str, Any]:
    """Say why, when the interval leaves out its own estimate (the interval itself is unchanged)."""
    lo, hi = out["ci"]
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo <= est <= hi:
        return out
    below, above = int(np.sum(v < est)), int(np.sum(v > est))
    why = (
        f"the estimate {est:.6g} lies {'above' if hi < est else 'below'} the interval: {below} of {len(v)} "
        f"replicates fall below it and {above} above (bootstrap bias {out['bias']:.3g}); the metric is strongly "
        "biased under resampling of images (for D-ECE, an image drawn twice fills sparse cells) and "
        + (
            "the percentile interval follows the replicates"
            if out["method"] == "percentile"
            else f"the {out['method']} correction for that bias moves the interval away from the estimate"
        )
    )
    out["note"] = f"{out['note']}; {why}" if out["note"] else why
    return out


def _estimate(metric_fn: Callable[..., Any], arrays: tuple[ArrayLike | None, ...]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return metric_value(metric_fn(*arrays))


def bootstrap_interval(
    metric_fn: Callable[..., Any],
    groups: ArrayLike,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    fast: bool = True,
    method: str = "bca",
    estimate: float | None = None,
) -> dict[str, Any]:
    """:func:`interval` of ``metric_fn(*arrays)`` over ``groups``, plus ``"undefined_replicates"``.

    ``estimate``: the metric on the full sample (computed when ``None``).
    """
    check_n_boot(n_boot, level)
    check_method(method)
    values = bootstrap_values(metric_fn, groups, *arrays, n_boot=n_boot, seed=seed, fast=fast)
    est = _estimate(metric_fn, arrays) if estimate is None else float(estimate)
    jk = jackknife_many({"m": metric_fn}, groups, *arrays, fast=fast)["m"] if method == "bca" else None
    res = interval(values, est, level, method, jk)
    res["undefined_replicates"] = int(np.sum(~np.isfinite(values)))
    return res


def bootstrap_ci(
    metric_fn: Callable[..., Any],
    groups: np.ndarray,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    fast: bool = True,
    method: str = "bca",
) -> tuple[float, float]:
    """Bootstrap interval ``(low, high)`` of ``metric_fn(*arrays)`` over ``groups`` (image ids).

    Detections of one image are resampled together; ``n_boot`` replicates
    drawn with ``np.random.default_rng(seed)``; ``method`` ``"bca"``
    (default), ``"bc"`` or ``"percentile"`` (module docstring). ``(nan,
    nan)`` for an empty sample or where the method is not defined. ``fast``
    uses the per-(image, cell) matrix path when the metric supports it
    (identical replicates).
    """
    return bootstrap_interval(
        metric_fn, groups, *arrays, n_boot=n_boot, level=level, seed=seed, fast=fast, method=method
    )["ci"]


def attach_interval(result: MetricResult, res: dict[str, Any], n_boot: int, level: float, seed: int) -> MetricResult:
    """A copy of ``result`` carrying the interval ``res`` of :func:`bootstrap_interval`.

    Sets ``ci``, ``ci_level``, ``params["bootstrap"]`` and, in ``extra``:
    ``ci_undefined_replicates``, ``bootstrap_bias`` (mean replicate minus
    the value), ``bias_corrected`` (value minus bias), ``ci_z0`` and
    ``ci_acceleration`` (BCa/BC), and ``ci_note`` when the interval is not
    given.
    """
    extra = {
        **result.extra,
        "ci_undefined_replicates": int(res.get("undefined_replicates", 0)),
        "bootstrap_bias": res["bias"],
        "bias_corrected": float(result.value) - res["bias"],
    }
    if res["z0"] is not None:
        extra["ci_z0"] = res["z0"]
    if res["acceleration"] is not None:
        extra["ci_acceleration"] = res["acceleration"]
    if res["note"]:
        extra["ci_note"] = res["note"]
    return dataclasses.replace(
        result,
        ci=tuple(res["ci"]),
        ci_level=float(level),
        params={**result.params, "bootstrap": ci_params(n_boot, level, seed, res["method"])},
        extra=extra,
    )


def with_ci(
    result: MetricResult,
    metric_fn: Callable[..., Any],
    groups: np.ndarray,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    fast: bool = True,
    method: str = "bca",
) -> MetricResult:
    """A copy of ``result`` with the bootstrap interval of ``metric_fn(*arrays)`` over ``groups``
    (:func:`bootstrap_interval` with ``estimate = result.value``; fields as :func:`attach_interval`)."""
    res = bootstrap_interval(
        metric_fn,
        groups,
        *arrays,
        n_boot=n_boot,
        level=level,
        seed=seed,
        fast=fast,
        method=method,
        estimate=float(result.value),
    )
    return attach_interval(result, res, n_boot, level, seed)


def suite_intervals(
    results: Mapping[str, MetricResult],
    metric_fns: Mapping[str, Callable[..., Any]],
    groups: ArrayLike,
    *arrays: ArrayLike | None,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    method: str = "bca",
    cells: Mapping[Hashable, np.ndarray] | None = None,
) -> dict[str, MetricResult]:
    """``results`` with intervals for every name in ``metric_fns`` over shared draws and one jackknife.

    The replicates of all metrics come from one :func:`bootstrap_many` call
    (identical to one :func:`with_ci` per metric); the value of each result
    is its estimate. Names of ``results`` not in ``metric_fns`` pass through.
    ``cells``: the samples' cells per grid key, already computed (as for
    :func:`detcal.metrics.image_cells.image_cells`; the same numbers).
    """
    check_n_boot(n_boot, level)
    check_method(method)
    inv, n_groups = _layout(groups, arrays)
    names = list(metric_fns)
    fast_names = [n for n in names if is_fast(metric_fns[n])]
    if n_groups and len(fast_names) == len(names):
        reps, jack = _fast_suite(metric_fns, names, (inv, n_groups), arrays, cells, int(n_boot), seed, method)
    else:
        grids = image_cells(metric_fns, fast_names, inv, n_groups, arrays, cells) if n_groups else []  # shared
        reps = _replicates(metric_fns, names, grids, (inv, n_groups), arrays, int(n_boot), seed)
        jack = _jackknife(metric_fns, names, grids, inv, n_groups, arrays, None, 0) if method == "bca" else {}
    out = dict(results)
    for name, values in reps.items():
        res = interval(values, float(results[name].value), level, method, jack.get(name))
        res["undefined_replicates"] = int(np.sum(~np.isfinite(values)))
        out[name] = attach_interval(results[name], res, n_boot, level, seed)
    return out
