"""Percentile bootstrap over images (METRICS.md section 3), numpy/scipy only.

The resampling unit is the image (or any group): each replicate draws
``I`` groups with replacement (``np.random.default_rng(seed).integers``), and
all samples of a drawn group enter together, as many times as it was drawn
(Efron & Tibshirani 1993, ch. 13: percentile interval
``[q_{(1-level)/2}, q_{(1+level)/2}]`` of the replicate values, numpy's
linear quantile; replicates whose value is undefined (NaN) are left out and
counted).

Two paths give the same replicates (the draws are identical):

* generic: any ``metric_fn(*arrays) -> MetricResult | float``; the sample
  index of a replicate is built with ``np.repeat``/``cumsum`` (no loop over
  samples), one call per replicate;
* fast: a metric exposing ``grid_key(*arrays)``, ``pair_sums(group_index,
  *arrays)`` and ``values(sums)`` (e.g.
  :class:`detcal.metrics.confidence.ConfidenceMetric`): per-(image, cell)
  sums are computed once and each block of replicates is one sparse matrix
  product ``W [R,I] @ A [I, C*8]`` with multinomial weights ``W`` (how often
  each image was drawn), then ``values`` on the replicate sums ``[R, C]``.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Hashable, Iterator, Mapping

import numpy as np
import scipy.sparse as sp

from detcal.binning import CellSums
from detcal.errors import DetcalInputError
from detcal.types import MetricResult

_BLOCK_ELEMS = 1 << 21
"""Draws per block: replicates are drawn in blocks of ``max(1, 2**21 // I)``."""


def ci_params(n_boot: int, level: float, seed: int) -> dict[str, Any]:
    """Provenance of a bootstrap interval, for ``MetricResult.params["bootstrap"]``."""
    return {"method": "percentile", "unit": "image", "n_boot": int(n_boot), "level": float(level), "seed": int(seed)}


def _check(n_boot: int, level: float | None = None) -> None:
    if int(n_boot) != n_boot or n_boot < 1:
        raise DetcalInputError(f"n_boot must be an integer >= 1, got {n_boot!r}", field="n_boot")
    if level is not None and not (0.0 < level < 1.0):
        raise DetcalInputError(f"level must be in (0, 1), got {level!r}", field="level")


def _layout(groups: Any, arrays: tuple[Any, ...]) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, np.ndarray]:
    """``(group_index [S], I, order [S], starts [I], counts [I])``; samples of group i are ``order[starts[i]:][:counts[i]]``."""
    g = np.asarray(groups)
    if g.ndim != 1:
        raise DetcalInputError(f"groups must be 1-D [S] (image ids), got shape {g.shape}", field="groups")
    for k, a in enumerate(arrays):
        if a is not None and np.shape(a)[0:1] != g.shape:
            raise DetcalInputError(
                f"array {k} has {np.shape(a)[0] if np.ndim(a) else 'no'} rows, expected S={len(g)} like groups",
                field=f"arrays[{k}]",
            )
    uniq, inv = np.unique(g, return_inverse=True)
    inv = inv.reshape(-1).astype(np.int64)
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=len(uniq)).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return inv, len(uniq), order, starts, counts


def _draws(n_groups: int, n_boot: int, seed: int) -> Iterator[np.ndarray]:
    """Blocks ``[b, I]`` of drawn group indices; the same stream for both paths."""
    rng = np.random.default_rng(seed)
    block = max(1, min(n_boot, _BLOCK_ELEMS // max(n_groups, 1)))
    done = 0
    while done < n_boot:
        b = min(block, n_boot - done)
        yield rng.integers(0, n_groups, size=(b, n_groups))
        done += b


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


def _is_fast(metric_fn: Any) -> bool:
    return all(callable(getattr(metric_fn, a, None)) for a in ("grid_key", "pair_sums", "values"))


def _value(r: Any) -> float:
    return float(r.value) if isinstance(r, MetricResult) else float(r)


def bootstrap_many(
    metric_fns: Mapping[str, Callable[..., Any]],
    groups: Any,
    *arrays: Any,
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
    _check(n_boot)
    inv, n_groups, order, starts, counts = _layout(groups, arrays)
    names = list(metric_fns)
    out = {name: np.full(int(n_boot), np.nan) for name in names}
    if n_groups == 0:
        return out
    fast_names = [n for n in names if fast and _is_fast(metric_fns[n])]
    slow_names = [n for n in names if n not in fast_names]
    grids: dict[Hashable, list[str]] = {}
    for n in fast_names:
        grids.setdefault(metric_fns[n].grid_key(*arrays), []).append(n)  # type: ignore[attr-defined]
    mats: list[tuple[list[str], sp.csc_matrix, int]] = []
    for members in grids.values():
        rows, cols, sums, _ = metric_fns[members[0]].pair_sums(inv, *arrays)  # type: ignore[attr-defined]
        occ, col = np.unique(cols, return_inverse=True)
        k = len(CellSums._fields)
        data = np.stack(list(sums), axis=1).ravel()  # [P*k], pair-major
        a = sp.csr_matrix(
            (data, (np.repeat(rows, k), (col.reshape(-1, 1) * k + np.arange(k)).ravel())),
            shape=(n_groups, len(occ) * k),
        )
        mats.append((members, a.T.tocsr(), len(occ)))
    r0 = 0
    for picks in _draws(n_groups, int(n_boot), seed):
        b = picks.shape[0]
        if mats:
            flat = (np.arange(b, dtype=np.int64)[:, None] * n_groups + picks).ravel()
            w = np.bincount(flat, minlength=b * n_groups).reshape(b, n_groups).astype(np.float64)
            k = len(CellSums._fields)
            for members, at, n_occ in mats:
                sub = max(1, _BLOCK_ELEMS // (n_occ * k))  # bound the dense [sub, C_occ, k] result
                for s0 in range(0, b, sub):
                    ws = w[s0:s0 + sub]
                    rep = np.asarray(at @ ws.T).T.reshape(len(ws), n_occ, k)  # [sub, C_occ, k]
                    rep_sums = CellSums(*np.moveaxis(rep, -1, 0))
                    for n in members:
                        out[n][r0 + s0:r0 + s0 + len(ws)] = metric_fns[n].values(rep_sums)  # type: ignore[attr-defined]
        if slow_names:
            for j in range(b):  # loop over replicates (the index itself is vectorised)
                idx = resample_rows(picks[j], order, starts, counts)
                sub = tuple(None if a is None else np.asarray(a)[idx] for a in arrays)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for n in slow_names:
                        out[n][r0 + j] = _value(metric_fns[n](*sub))
        r0 += b
    return out


def bootstrap_values(
    metric_fn: Callable[..., Any], groups: Any, *arrays: Any, n_boot: int = 1000, seed: int = 0, fast: bool = True
) -> np.ndarray:
    """Replicate values ``[n_boot]`` of one metric (see :func:`bootstrap_many`)."""
    return bootstrap_many({"metric": metric_fn}, groups, *arrays, n_boot=n_boot, seed=seed, fast=fast)["metric"]


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """``(q_{(1-level)/2}, q_{(1+level)/2})`` of the finite replicate values; ``(nan, nan)`` if none."""
    _check(1, level)
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return (float("nan"), float("nan"))
    lo, hi = np.quantile(v, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return (float(lo), float(hi))


def bootstrap_ci(
    metric_fn: Callable[..., Any],
    groups: np.ndarray,
    *arrays: Any,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    fast: bool = True,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``metric_fn(*arrays)`` over ``groups`` (image ids).

    Detections of one image are resampled together; ``n_boot`` replicates
    drawn with ``np.random.default_rng(seed)``; returns ``(low, high)``
    (``(nan, nan)`` for an empty sample). ``fast`` uses the per-(image, cell)
    matrix path when the metric supports it (identical replicates).
    """
    _check(n_boot, level)
    return percentile_interval(bootstrap_values(metric_fn, groups, *arrays, n_boot=n_boot, seed=seed, fast=fast), level)


def with_ci(
    result: MetricResult,
    metric_fn: Callable[..., Any],
    groups: np.ndarray,
    *arrays: Any,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    fast: bool = True,
) -> MetricResult:
    """A copy of ``result`` with ``ci``, ``ci_level``, ``params["bootstrap"]`` and
    ``extra["ci_undefined_replicates"]`` (replicates with a NaN value) from
    :func:`bootstrap_ci` of ``metric_fn(*arrays)``."""
    _check(n_boot, level)
    values = bootstrap_values(metric_fn, groups, *arrays, n_boot=n_boot, seed=seed, fast=fast)
    return dataclasses.replace(
        result,
        ci=percentile_interval(values, level),
        ci_level=float(level),
        params={**result.params, "bootstrap": ci_params(n_boot, level, seed)},
        extra={**result.extra, "ci_undefined_replicates": int(np.sum(~np.isfinite(values)))},
    )
