"""Chunked, allocation-free passes of the regression metrics, bit-identical to the one-shot numpy code.

A user's per-coordinate call passes column slices ``mu[:, k]`` of [S, K]
arrays. The one-shot code first copied each column (three full copies) and
then made a fresh full-size temporary per numpy call. Here every pass runs
over cache-sized chunks: a chunk of a strided column is copied into a reused
contiguous buffer (:class:`detcal.binning.kernels.Workspace`) and every
elementwise step writes into such buffers. The values stay bit-identical:

* elementwise operations give the same numbers whatever the chunking (each
  transcendental runs on a contiguous buffer, as in the one-shot code);
* ``np.mean`` of a contiguous array is numpy's pairwise sum, whose split
  points depend only on the length: :func:`pairwise_sum` walks the same tree
  and reduces each leaf (a chunk) with ``np.add.reduce``;
* ``np.bincount(..., weights=w)`` adds the weights in input order:
  :class:`OrderedBincount` carries each bin's running sum into the next chunk
  as the first weight of that bin, so the additions happen in the same order.
* integer counts (coverage, bin counts) are exact under any chunking.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from detcal.binning.kernels import Workspace
from detcal.core.errors import DetcalInputError

LEAF: int = 1 << 15
"""Samples per chunk of the regression passes (a few 256 kB buffers stay in the L2 cache)."""

_PW_UNROLL = 8  # numpy's pairwise sum splits a block of n > 128 at n/2 rounded down to a multiple of 8
_PW_BLOCK = 128


def float_columns(*arrays: ArrayLike, names: tuple[str, ...] = ("mu", "sigma", "y")) -> tuple[np.ndarray, ...]:
    """float64 1-D views (no copy for float64 input, strided or not) of equal shape; the shape errors of
    :func:`detcal.metrics.regression._common.validate` (values are checked by the caller)."""
    out = []
    for name, a in zip(names, arrays):
        arr = np.asarray(a, dtype=np.float64)
        if arr.ndim != 1:
            raise DetcalInputError(f"expected a 1-D array, got shape {arr.shape}", field=name)
        out.append(arr)
    m, s, t = out
    if not (m.shape == s.shape == t.shape):
        raise DetcalInputError(f"shapes differ: mu {m.shape}, sigma {s.shape}, y {t.shape}", field="sigma")
    return tuple(out)


def contiguous(ws: Workspace, name: str, a: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Chunk ``a[lo:hi]`` as a contiguous array (a view when it already is, else a copy into ``ws``)."""
    c = a[lo:hi]
    if c.flags.c_contiguous:
        return c
    buf = ws.get(name, np.float64, hi - lo)
    np.copyto(buf, c)
    return buf


def pairwise_sum(n: int, leaf_sums: Callable[[int, int], np.ndarray], leaf: int = LEAF) -> np.ndarray:
    """Sums [k] over ``[0, n)`` in numpy's pairwise order: ``leaf_sums(lo, hi)`` returns the
    ``np.add.reduce`` of each of k per-sample arrays over a contiguous leaf ``[lo, hi)``.

    Equal, bit for bit, to ``np.add.reduce`` of the whole contiguous arrays (numpy splits a
    block of n > 128 elements at ``n2 = n // 2 - (n // 2) % 8`` and adds the two halves).
    """
    leaf = max(int(leaf), _PW_BLOCK)  # numpy does not split a block of at most 128 elements

    def rec(lo: int, n_: int) -> np.ndarray:
        if n_ <= leaf:
            return leaf_sums(lo, lo + n_)
        n2 = n_ // 2
        n2 -= n2 % _PW_UNROLL
        return rec(lo, n2) + rec(lo + n2, n_ - n2)

    return rec(0, int(n))


class OrderedBincount:
    """``np.bincount(key, weights=w, minlength=B)`` of full arrays, fed chunk by chunk, same bits.

    Each chunk's bincount starts with one pseudo-sample per bin whose weight is the
    bin's running sum (``0.0 + s == s`` exactly), then adds the chunk's weights in
    order: the additions per bin are those of the one-shot call, in the same order.
    """

    def __init__(self, n_bins: int, n_weights: int, chunk: int):
        self.n_bins = int(n_bins)
        self.sums = np.zeros((n_weights, self.n_bins))
        self.counts = np.zeros(self.n_bins, dtype=np.int64)
        self._key = np.empty(self.n_bins + chunk, dtype=np.int64)
        self._key[: self.n_bins] = np.arange(self.n_bins)
        self._w = np.empty((n_weights, self.n_bins + chunk))

    def key_buffer(self, m: int) -> np.ndarray:
        """Where to write the chunk's bin index [m] (int64)."""
        return self._key[self.n_bins : self.n_bins + m]

    def weight_buffer(self, j: int, m: int) -> np.ndarray:
        """Where to write the chunk's weights [m] of statistic j."""
        return self._w[j, self.n_bins : self.n_bins + m]

    def add(self, m: int) -> None:
        """Accumulate the chunk written into the buffers."""
        b = self.n_bins
        key = self._key[: b + m]
        self.counts += np.bincount(key[b:], minlength=b)
        for j in range(len(self.sums)):
            self._w[j, :b] = self.sums[j]
            self.sums[j] = np.bincount(key, weights=self._w[j, : b + m], minlength=b)


def equal_width_index_into(
    v: np.ndarray, n_bins: int, lo: float, hi: float, out: np.ndarray, ws: Workspace
) -> np.ndarray:
    """:func:`detcal.binning.equal_width_bins` ``(v, n_bins, lo, hi)`` of one chunk, written into ``out`` (int64)."""
    if hi <= lo:
        out[...] = 0
        return out
    f = ws.get("ew_f", np.float64, len(v))
    np.subtract(v, lo, out=f)
    np.divide(f, hi - lo, out=f)
    np.multiply(f, n_bins, out=f)
    np.floor(f, out=f)
    np.copyto(out, f, casting="unsafe")
    return np.clip(out, 0, n_bins - 1, out=out)


def min_max(a: np.ndarray, ws: Workspace) -> tuple[float, float]:
    """``(a.min(), a.max())`` of a non-empty 1-D array, NaN propagating; a strided column is reduced
    chunk by chunk from contiguous copies (numpy's strided reductions are several times slower)."""
    if a.flags.c_contiguous:
        return float(a.min()), float(a.max())
    lows, highs = [], []
    for lo in range(0, len(a), LEAF):
        c = contiguous(ws, "minmax", a, lo, min(len(a), lo + LEAF))
        lows.append(c.min())
        highs.append(c.max())
    return float(np.min(lows)), float(np.max(highs))


def sigma_range(s_min: float, s_max: float, over: str, range_: tuple[float, float] | None) -> tuple[float, float]:
    """``[lo, hi]`` of the equal-width bins over sigma (``over="sigma"``) or sigma^2: ``range_`` or the
    min and max (of sigma^2 from those of sigma: rounding is monotone, so ``fl(min^2) = min fl(s^2)``)."""
    if range_ is not None:
        return float(range_[0]), float(range_[1])
    return (s_min, s_max) if over == "sigma" else (s_min * s_min, s_max * s_max)
