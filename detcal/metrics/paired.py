"""Paired bootstrap over images for the difference of a metric between two result sets
(docs/calibration.md#paired-bootstrap), numpy/scipy only.

Two result sets on the same images -- before and after calibration, or two
detectors on the same ground truth -- are compared by resampling *images*
once per replicate and evaluating both sets on the same draw:

    d = m(B) - m(A),      d*_r = m(B*_r) - m(A*_r),

where ``A*_r`` / ``B*_r`` hold every sample of A / B whose image was drawn
in replicate r (as often as it was drawn). Images are the union of both
sets' image ids; an image with detections in only one set still counts
(it contributes nothing to the other). Because both sides share the draws,
the image-to-image variation common to both cancels in ``d*`` and the
interval of the difference is much narrower than the two separate intervals
suggest. The interval is that of :func:`detcal.metrics.bootstrap.interval`
on ``d*`` (BCa by default; the jackknife leaves the same image out of both
sets), and the bootstrap bias ``mean(d*) - d`` is reported.

Fast metrics (:class:`detcal.metrics.confidence.ConfidenceMetric`) use the
per-(image, cell) sums of each side and one sparse product per block of
replicates; any other ``metric_fn(*arrays) -> MetricResult | float`` is
called once per side and replicate.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.core.errors import DetcalInputError
from detcal.metrics.bootstrap import (
    JACKKNIFE_BLOCKS,
    check_method,
    check_n_boot,
    draws,
    interval,
    is_fast,
    jackknife_blocks,
    metric_value,
    resample_rows,
)
from detcal.metrics.confidence_suite import suite
from detcal.metrics.image_cells import image_cells, leave_out_values, replicate_values

__all__ = ["PairedDifference", "paired_bootstrap", "paired_bootstrap_many", "confidence_changes"]


@dataclass
class PairedDifference:
    """The difference ``b - a`` of one metric between result sets A and B, with its paired interval.

    ``a``, ``b``: the metric on the full sets; ``difference = b - a``;
    ``ci``: (low, high) at ``ci_level`` by ``method`` (NaN with a ``note``
    where not defined); ``bias``: ``mean(d*) - difference``; ``z0`` and
    ``acceleration`` of BCa/BC; ``undefined_replicates``: replicates where
    either side was undefined (left out); ``n_images``: images resampled.
    """

    name: str
    a: float
    b: float
    difference: float
    ci: tuple[float, float]
    ci_level: float
    method: str
    bias: float
    n_boot: int
    seed: int
    n_images: int
    undefined_replicates: int = 0
    z0: float | None = None
    acceleration: float | None = None
    note: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of 0 (False when it is undefined)."""
        lo, hi = self.ci
        return bool(np.isfinite(lo) and np.isfinite(hi) and (lo > 0 or hi < 0))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN as None)."""

        def f(x: Any) -> Any:
            return None if x is None or not np.isfinite(x) else float(x)

        return {
            "name": self.name,
            "a": f(self.a),
            "b": f(self.b),
            "difference": f(self.difference),
            "ci": [f(self.ci[0]), f(self.ci[1])],
            "ci_level": self.ci_level,
            "bootstrap_bias": f(self.bias),
            "excludes_zero": self.excludes_zero(),
            "ci_z0": f(self.z0),
            "ci_acceleration": f(self.acceleration),
            "ci_note": self.note,
            "undefined_replicates": int(self.undefined_replicates),
            "bootstrap": {
                "method": self.method,
                "unit": "image",
                "paired": True,
                "n_boot": int(self.n_boot),
                "level": float(self.ci_level),
                "seed": int(self.seed),
                "n_images": int(self.n_images),
            },
            "params": self.params,
        }


def _side(groups: ArrayLike, arrays: Sequence[ArrayLike | None], label: str) -> tuple[np.ndarray, tuple[Any, ...]]:
    g = np.asarray(groups)
    if g.ndim != 1:
        raise DetcalInputError(f"groups must be 1-D [S] (image ids), got shape {g.shape}", field=f"groups_{label}")
    arrays = tuple(arrays)
    for k, a in enumerate(arrays):
        if a is not None and np.shape(a)[0:1] != g.shape:
            raise DetcalInputError(
                f"array {k} of set {label.upper()} has {np.shape(a)[0] if np.ndim(a) else 'no'} "
                f"rows, expected S={len(g)} like its image ids",
                field=f"arrays_{label}[{k}]",
            )
    return g, arrays


def _layout_inv(inv: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order, starts, counts)`` of samples by group index ``inv`` over ``n`` groups (empty groups allowed)."""
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=n).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return order, starts, counts


def _est(fn: Callable[..., Any], arrays: tuple[ArrayLike | None, ...]) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return metric_value(fn(*arrays))


def paired_bootstrap_many(
    metric_fns: Mapping[str, Callable[..., Any]],
    groups_a: ArrayLike,
    arrays_a: Sequence[ArrayLike | None],
    groups_b: ArrayLike | None = None,
    arrays_b: Sequence[ArrayLike | None] | None = None,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    method: str = "bca",
    fast: bool = True,
) -> dict[str, PairedDifference]:
    """Paired differences ``m(B) - m(A)`` of several metrics over shared image draws (module docstring).

    ``groups_a [S_A]`` image ids of set A, ``arrays_a`` its per-sample arrays
    (each metric is called as ``metric_fn(*arrays_a)``); likewise B.
    ``groups_b=None`` reuses ``groups_a`` (the same detections with new
    scores, e.g. after calibration); ``arrays_b`` is required.
    """
    check_n_boot(n_boot, level)
    check_method(method)
    if arrays_b is None:
        raise DetcalInputError("arrays_b (the arrays of result set B) is required", field="arrays_b")
    ga, arrays_a = _side(groups_a, arrays_a, "a")
    gb, arrays_b = _side(groups_a if groups_b is None else groups_b, arrays_b, "b")
    union = np.unique(np.concatenate([ga, gb]))
    n = len(union)
    inv = (np.searchsorted(union, ga).astype(np.int64), np.searchsorted(union, gb).astype(np.int64))
    sides = (arrays_a, arrays_b)
    names = list(metric_fns)
    est = {nm: (_est(metric_fns[nm], arrays_a), _est(metric_fns[nm], arrays_b)) for nm in names}
    reps = [{nm: np.full(int(n_boot), np.nan) for nm in names} for _ in range(2)]
    jack = [{nm: np.zeros(0) for nm in names} for _ in range(2)]
    if n > 0:
        fast_names = [nm for nm in names if fast and is_fast(metric_fns[nm])]
        slow_names = [nm for nm in names if nm not in fast_names]
        mats = [image_cells(metric_fns, fast_names, inv[s], n, sides[s]) for s in range(2)]
        lay = [_layout_inv(inv[s], n) for s in range(2)]
        r0 = 0
        for picks in draws(n, int(n_boot), seed):
            b = picks.shape[0]
            if fast_names:
                flat = (np.arange(b, dtype=np.int64)[:, None] * n + picks).ravel()
                w = np.bincount(flat, minlength=b * n).reshape(b, n).astype(np.float64)
                for s in range(2):
                    replicate_values(metric_fns, mats[s], w, reps[s], r0)
            for j in range(b) if slow_names else ():  # loop over replicates (the index is vectorised)
                for s in range(2):
                    idx = resample_rows(picks[j], *lay[s])
                    sub = tuple(None if a is None else np.asarray(a)[idx] for a in sides[s])
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        for nm in slow_names:
                            reps[s][nm][r0 + j] = metric_value(metric_fns[nm](*sub))
            r0 += b
        if method == "bca":
            _paired_jackknife(metric_fns, fast_names, slow_names, mats, inv, sides, n, seed, jack)
    out: dict[str, PairedDifference] = {}
    for nm in names:
        d = reps[1][nm] - reps[0][nm]
        a, b = est[nm]
        jk = jack[1][nm] - jack[0][nm] if method == "bca" else None
        res = interval(d, b - a, level, method, jk)
        out[nm] = PairedDifference(
            name=nm,
            a=a,
            b=b,
            difference=b - a,
            ci=tuple(res["ci"]),
            ci_level=float(level),
            method=method,
            bias=res["bias"],
            n_boot=int(n_boot),
            seed=int(seed),
            n_images=n,
            undefined_replicates=int(np.sum(~np.isfinite(d))),
            z0=res["z0"],
            acceleration=res["acceleration"],
            note=res["note"],
        )
    return out


def _paired_jackknife(
    metric_fns: Mapping[str, Any],
    fast_names: list[str],
    slow_names: list[str],
    mats: list[Any],
    inv: tuple[np.ndarray, np.ndarray],
    sides: tuple[tuple[Any, ...], ...],
    n: int,
    seed: int,
    jack: list[dict[str, np.ndarray]],
) -> None:
    """Jackknife values of both sides with the same image (block) left out of both."""
    if fast_names:
        block = jackknife_blocks(n, None, seed)
        m = int(block.max()) + 1
        for s in range(2):  # totals minus the left-out image's sums (linear in the (image, cell) pairs)
            jack[s].update(leave_out_values(metric_fns, mats[s], block, m))
    if slow_names:
        block = jackknife_blocks(n, JACKKNIFE_BLOCKS, seed)
        m = int(block.max()) + 1
        for s in range(2):
            sample_block = block[inv[s]]
            res = {nm: np.full(m, np.nan) for nm in slow_names}
            for j in range(m):  # loop over blocks of images
                idx = np.flatnonzero(sample_block != j)
                sub = tuple(None if a is None else np.asarray(a)[idx] for a in sides[s])
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    for nm in slow_names:
                        res[nm][j] = metric_value(metric_fns[nm](*sub))
            jack[s].update(res)


def paired_bootstrap(
    metric_fn: Callable[..., Any],
    groups_a: ArrayLike,
    arrays_a: Sequence[ArrayLike | None],
    groups_b: ArrayLike | None = None,
    arrays_b: Sequence[ArrayLike | None] | None = None,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    method: str = "bca",
    fast: bool = True,
    name: str | None = None,
) -> PairedDifference:
    """The paired difference ``metric_fn(*arrays_b) - metric_fn(*arrays_a)`` (:func:`paired_bootstrap_many`)."""
    label = str(name or getattr(metric_fn, "name", None) or getattr(metric_fn, "__name__", "metric"))
    return paired_bootstrap_many(
        {label: metric_fn},
        groups_a,
        arrays_a,
        groups_b,
        arrays_b,
        n_boot=n_boot,
        level=level,
        seed=seed,
        method=method,
        fast=fast,
    )[label]


def confidence_changes(
    p_a: ArrayLike,
    p_b: ArrayLike,
    y: ArrayLike,
    features: ArrayLike | None = None,
    image_id: ArrayLike | None = None,
    measures: Mapping[str, Any] | None = None,
    *,
    y_b: ArrayLike | None = None,
    features_b: ArrayLike | None = None,
    image_id_b: ArrayLike | None = None,
    names: Sequence[str] | None = None,
    method: str = "bca",
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, PairedDifference]:
    """Paired differences (B - A) of the confidence suite ``measures`` (name -> metric, default
    :func:`detcal.metrics.confidence_suite.suite`: every registered measure), e.g. after minus
    before calibration, over ``n_boot`` resamples (``level``, ``seed``).

    Same detections (calibration): ``p_a``, ``p_b`` scores, ``y``,
    ``features``, ``image_id`` shared. Two detectors: also ``y_b``,
    ``features_b`` and ``image_id_b`` of set B. ``names``: a subset of the
    suite (default all).
    """
    if image_id is None:
        raise DetcalInputError("image_id is required: the paired bootstrap resamples images", field="image_id")
    chosen = dict(suite() if measures is None else measures)
    if names is not None:
        unknown = sorted(set(names) - set(chosen))
        if unknown:
            raise DetcalInputError(f"unknown confidence metric(s) {unknown}; known: {sorted(chosen)}", field="names")
        chosen = {k: chosen[k] for k in names}
    if features is None:
        chosen = {k: m for k, m in chosen.items() if not m.use_features}
    arrays_a = (p_a, y, features)
    arrays_b = (p_b, y if y_b is None else y_b, features if features_b is None else features_b)
    return paired_bootstrap_many(
        chosen,
        image_id,
        arrays_a,
        image_id_b,
        arrays_b,
        n_boot=max(int(n_boot), 1),
        level=level,
        seed=seed,
        method=method,
    )
