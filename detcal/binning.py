"""Binning (METRICS.md sections 3-4), numpy only.

Two families:

* Equal-width multivariate cells over features in [0, 1] (confidence and the
  relative box features cx, cy, w, h): per-feature bin counts, half-open bins
  ``[a, b)`` with the last one closed, cells = product grid, flattened in C
  order (feature 0 slowest).
* Bins over sigma: ``equal_count`` (Levi et al.: sort by sigma, split into B
  consecutive groups of equal size, the first ``S mod B`` groups one larger)
  and ``equal_width`` over ``[min sigma, max sigma]`` (netcal).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np


def normalise_bins(bins: int | Sequence[int], n_features: int) -> tuple[int, ...]:
    """Per-feature bin counts as a tuple of length F (an int is broadcast)."""
    if np.ndim(bins) == 0:
        b = (int(bins),) * n_features
    else:
        b = tuple(int(x) for x in bins)
        if len(b) != n_features:
            raise ValueError(f"bins has {len(b)} entries but there are {n_features} features")
    if any(x < 1 for x in b):
        raise ValueError(f"every bin count must be >= 1, got {b}")
    return b


def feature_bin_index(values: np.ndarray, n_bins: int) -> np.ndarray:
    """Equal-width bin of each value in [0, 1]: ``floor(v * B)``, with 1.0 in the last bin."""
    v = np.asarray(values, dtype=np.float64)
    idx = np.floor(v * n_bins).astype(np.int64)
    return np.clip(idx, 0, n_bins - 1)


def cell_index(features: np.ndarray, bins: int | Sequence[int]) -> tuple[np.ndarray, int]:
    """Flat cell index [S] of each sample over features [S,F] in [0, 1], and the cell count.

    Cells are the product grid of equal-width bins per feature, flattened in
    C order (``np.ravel_multi_index``).
    """
    x = np.asarray(features, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    b = normalise_bins(bins, x.shape[1])
    per = np.stack([feature_bin_index(x[:, f], b[f]) for f in range(x.shape[1])], axis=0)
    flat = np.ravel_multi_index(tuple(per), b) if len(x) else np.zeros(0, np.int64)
    return np.asarray(flat, dtype=np.int64), int(np.prod(b))


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
