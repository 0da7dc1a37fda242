"""Allocation-free chunked kernels of the binning (numpy only): a reusable workspace and in-place bin indices.

The per-sample stage of :func:`detcal.binning.cells.cell_stats` and of the
regression metrics runs over cache-sized chunks of the samples. Fresh
temporaries of a few hundred kB per numpy call make glibc grow and trim its
heap on every call (page faults cost more than the arithmetic), so every
kernel here writes into the buffers of one :class:`Workspace`, allocated once
per call of the metric.

:func:`bin_index_into` computes exactly the bins of
:func:`detcal.binning.feature_bin_index` (all three edge rules); netcal's
rule uses a lookup table over a dyadic grid instead of two gathers of the
edges per sample (``_netcal_table``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from detcal.binning.edges import EDGE_RULES, EPS, feature_bin_index

NLL_CLIP: float = 1e-12
"""p is clipped to [NLL_CLIP, 1 - NLL_CLIP] inside the log-loss (docs/metrics.md)."""

FX_BITS: int = 18
"""Bits per fixed-point word of :mod:`detcal.binning.cells` (three words: 54 bits)."""

CHUNK: int = 1 << 15
"""Samples per chunk: a float64 buffer is 256 kB, so the few buffers of a kernel stay in the L2 cache."""


class Workspace:
    """Named buffers of ``size`` elements, allocated on first use and reused by every chunk.

    ``ws.get("name", dtype, m)`` is the first ``m`` elements of the buffer ``name``.
    """

    def __init__(self, size: int) -> None:
        self.size = int(size)
        self._buf: dict[tuple[str, str], np.ndarray] = {}

    def get(self, name: str, dtype: type | np.dtype, m: int) -> np.ndarray:
        key = (name, np.dtype(dtype).str)
        buf = self._buf.get(key)
        if buf is None:
            buf = self._buf[key] = np.empty(self.size, dtype=dtype)
        return buf[:m]


def chunks(n: int, step: int = CHUNK) -> range:
    """Start offsets of the chunks of ``n`` samples."""
    return range(0, int(n), max(int(step), 1))


@lru_cache(maxsize=64)
def _netcal_table(n_bins: int) -> tuple[float, np.ndarray, np.ndarray] | None:
    """Lookup table of netcal's rule over the dyadic grid of ``M`` cells of width 1/M (M a power of two).

    ``lo[u]`` is the bin of ``u / M`` (``searchsorted(linspace(0, 1, B + 1), u / M, "right") - 1``)
    and ``nxt[u]`` the edge that follows it. With ``M >= 2 B`` the edges are more than one cell
    apart, so a cell holds at most one edge in its interior and the bin of any ``v`` in
    ``[u/M, (u+1)/M)`` is ``lo[u] + (v >= nxt[u])``; ``u = trunc(v M)`` is exact (a power of two).
    ``None`` when B is too large for a table of at most 2**20 cells.
    """
    m = 1 << max(12, int(np.ceil(np.log2(2 * n_bins))) + 1)
    if m > 1 << 20:
        return None
    grid = np.linspace(0.0, 1.0, n_bins + 1)
    lo = np.searchsorted(grid, np.arange(m, dtype=np.float64) / m, side="right").astype(np.int64) - 1
    nxt = grid[lo + 1]
    lo.setflags(write=False)
    nxt.setflags(write=False)
    return float(m), lo, nxt


def bin_index_into(v: np.ndarray, n_bins: int, edges: str, out: np.ndarray, ws: Workspace, tag: str = "") -> np.ndarray:
    """Write :func:`detcal.binning.feature_bin_index` ``(v, n_bins, edges)`` into ``out`` (int64 [m]).

    ``v`` is one chunk of a feature (a strided view is fine); under ``"netcal"`` it must
    already be clipped to ``[eps, 1 - eps]`` when ``tag == "clipped"`` (else it is clipped here).
    """
    m = len(v)
    f = ws.get("bin_f", np.float64, m)
    if edges == "netcal":
        if tag != "clipped":
            v = np.clip(v, EPS, 1.0 - EPS, out=ws.get("bin_v", np.float64, m))
        table = _netcal_table(n_bins)
        if table is None:  # very many bins: the guess-and-fix rule of feature_bin_index
            out[...] = feature_bin_index(v, n_bins, "netcal")
            return out
        scale, lo, nxt = table
        u = ws.get("bin_u", np.int64, m)
        np.multiply(v, scale, out=f)
        np.copyto(u, f, casting="unsafe")  # trunc, exact
        np.take(lo, u, out=out, mode="clip")
        np.take(nxt, u, out=f, mode="clip")
        hit = ws.get("bin_b", np.bool_, m)
        np.greater_equal(v, f, out=hit)
        out += hit
        return out
    if edges not in EDGE_RULES:
        raise ValueError(f"edges must be one of {EDGE_RULES}, got {edges!r}")
    np.multiply(v, float(n_bins), out=f)
    if edges == "guo":
        np.ceil(f, out=f)
        np.copyto(out, f, casting="unsafe")
        out -= 1
    else:  # floor: truncation equals floor for v >= 0; the rest is clipped
        np.copyto(out, f, casting="unsafe")
    np.clip(out, 0, n_bins - 1, out=out)
    return out


def cell_index_into(
    p: np.ndarray,
    features: np.ndarray | None,
    bins: tuple[int, ...],
    edges: str,
    out: np.ndarray,
    ws: Workspace,
    p_clipped: bool = False,
) -> np.ndarray:
    """Flat C-order cell [m] over (p, features[:, 0], ...) of one chunk, written into ``out`` (int64)."""
    bin_index_into(p, bins[0], edges, out, ws, "clipped" if p_clipped else "")
    if features is not None:
        col = ws.get("cell_col", np.int64, len(p))
        for j in range(features.shape[1]):
            out *= bins[1 + j]
            out += bin_index_into(features[:, j], bins[1 + j], edges, col, ws)
    return out


def add_words(acc: np.ndarray, key: np.ndarray, words: tuple[np.ndarray, ...]) -> None:
    """``acc [3, K] +=`` the per-key sums of the fixed-point words of one chunk (word ``j`` into row ``j``).

    ``acc`` is float64: every word is a whole number below ``2**18 + 1`` and a call of
    :func:`detcal.binning.cells.cell_stats` sums fewer than ``2**34`` samples, so every partial sum is a whole
    number below ``2**53``, exact in float64 in any order; :func:`words_int64` turns the totals into the int64
    words once, the integers the per-chunk int64 accumulation gave (no rounding or conversion per chunk)."""
    n_keys = acc.shape[1]
    for j, w in enumerate(words):
        acc[j] += np.bincount(key, weights=w, minlength=n_keys)


def words_int64(acc: np.ndarray) -> np.ndarray:
    """The int64 words ``[K, 3]`` (C order) of the exact float word sums ``acc [3, K]`` of :func:`add_words`."""
    out = np.empty((acc.shape[1], acc.shape[0]), dtype=np.int64)
    out[...] = acc.T  # whole numbers below 2**53: converted exactly
    return out


def fx_words_into(x: np.ndarray, log2_max: int, ws: Workspace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact fixed-point words (three float64 arrays [S], high first) of values ``0 <= x <= 2**log2_max``,
    written into workspace buffers.

    With ``r = x * 2**(18 - m)`` (exact: a power-of-two scaling, as with ``ldexp``):
    ``w0 = floor(r)``, ``w1 = floor((r - w0) * 2**18)``,
    ``w2 = rint((r - w0) * 2**18 - w1) * 2**18)``. Every step is exact in
    float64 (subtracting the floor and scaling by powers of two lose no bits),
    so ``w0 2**(m-18) + w1 2**(m-36) + w2 2**(m-54)`` is ``x`` rounded to
    the 54-bit fixed-point grid, each word an integer < 2**18 (w2 may reach
    2**18 after rounding, which the sums absorb). Summing the words with
    ``np.bincount`` is exact below 2**34 samples; merging is integer addition.
    """
    m = len(x)
    w0, w1, r = ws.get("fx0", np.float64, m), ws.get("fx1", np.float64, m), ws.get("fx2", np.float64, m)
    np.multiply(x, float(2.0 ** (FX_BITS - log2_max)), out=r)
    np.floor(r, out=w0)
    r -= w0
    r *= float(1 << FX_BITS)
    np.floor(r, out=w1)
    r -= w1
    r *= float(1 << FX_BITS)
    np.rint(r, out=r)
    return w0, w1, r


def term_into(name: str, p: np.ndarray, yb: np.ndarray, ws: Workspace) -> np.ndarray:
    """:func:`detcal.binning.cells.sample_terms` of one statistic other than sum_p0/sum_p1, in workspace buffers (bit for bit)."""
    m = len(p)
    out = ws.get("term", np.float64, m)
    if name == "sum_p2":
        return np.multiply(p, p, out=out)
    if name == "sum_se":
        np.subtract(p, yb, out=out)
        return np.multiply(out, out, out=out)
    # sum_nll: where(y, -log(max(p, c)), where(1 - p < c, -log(c), -log1p(-where(1 - p < c, 0, p))))
    tmp = ws.get("term_tmp", np.float64, m)
    low1 = np.less(np.subtract(1.0, p, out=tmp), NLL_CLIP, out=ws.get("term_low", np.bool_, m))
    np.copyto(out, p)
    np.copyto(out, 0.0, where=low1)
    np.negative(out, out=out)
    np.log1p(out, out=out)
    np.negative(out, out=out)
    np.copyto(out, -np.log(NLL_CLIP), where=low1)
    np.maximum(p, NLL_CLIP, out=tmp)
    np.log(tmp, out=tmp)
    np.negative(tmp, out=tmp)
    return select_bits(yb, tmp, out, ws)


def select_bits(mask: np.ndarray, a: np.ndarray, b: np.ndarray, ws: Workspace) -> np.ndarray:
    """``b`` overwritten with ``where(mask, a, b)`` (float64 [m], ``mask`` bool; ``a`` is overwritten too) by selecting bits:
    ``b ^ ((a ^ b) & -mask)``, the two values' 64-bit patterns, unchanged. The same array as
    ``np.copyto(b, a, where=mask)``, without the branch per element a masked copy takes (about 4 ns a sample
    with matched flags in random order, against well under 1 ns here)."""
    sel = ws.get("select", np.int8, len(mask))  # one byte a sample (widened per element, sign-extended)
    np.negative(mask.view(np.int8), out=sel)  # 0 or -1 (every bit set)
    ai, bi = a.view(np.int64), b.view(np.int64)
    np.bitwise_xor(ai, bi, out=ai)
    np.bitwise_and(ai, sel, out=ai)
    np.bitwise_xor(bi, ai, out=bi)
    return b


def quick_arrays(p: Any, y: Any, features: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """p, y, features as arrays when their shapes and dtypes allow the per-chunk range checks of
    :func:`chunk_ok` (y bool or integer); ``None`` sends the caller to :func:`detcal.binning.cells.validate_sample`."""
    p_arr = np.asarray(p, dtype=np.float64)
    y_arr = np.asarray(y)
    f_arr = None if features is None else np.asarray(features, dtype=np.float64)
    if f_arr is not None and f_arr.ndim == 1:
        f_arr = f_arr[:, None]
    ok = (
        p_arr.ndim == 1
        and y_arr.shape == p_arr.shape
        and (y_arr.dtype == np.bool_ or np.issubdtype(y_arr.dtype, np.integer))
        and (f_arr is None or (f_arr.ndim == 2 and f_arr.shape[0] == p_arr.shape[0]))
    )
    return (p_arr, y_arr, f_arr) if ok else None


def chunk_ok(p: np.ndarray, y: np.ndarray, f: np.ndarray | None) -> bool:
    """Whether a chunk is valid: p and f in [0, 1] (NaN fails every comparison), integer y in {0, 1}."""
    if len(p) == 0:
        return True
    if not (p.min() >= 0.0 and p.max() <= 1.0):
        return False
    if y.dtype != np.bool_ and not (y.min() >= 0 and y.max() <= 1):
        return False
    return f is None or f.size == 0 or bool(f.min() >= 0.0 and f.max() <= 1.0)
