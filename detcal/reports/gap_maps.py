"""D-ECE heat maps: a binned D-ECE cell table marginalised onto two feature axes (numpy only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError

__all__ = ["marginal_gap_map"]


def _vec(a: Any, name: str, n: int | None = None) -> np.ndarray:
    v = np.asarray([np.nan if x is None else x for x in a] if isinstance(a, list) else a, dtype=float).reshape(-1)
    if n is not None and len(v) != n:
        raise DetcalInputError(f"has length {len(v)}, expected {n}", record="plot input", field=name)
    return v


def marginal_gap_map(
    count: Any,
    confidence: Any,
    precision: Any,
    shape: Sequence[int],
    keep_axes: Sequence[int],
    sample_threshold: int = 1,
    kept: Any = None,
) -> dict[str, np.ndarray]:
    """Marginalise a binned D-ECE cell table onto two of its feature axes.

    The cell table has C = prod(shape) cells flattened in C order (as
    :func:`detcal.binning.cell_index`). With kept cells ``N_c >= threshold``
    (the ``drop`` policy), the map value of 2-D cell (i, j) is the local
    D-ECE of that position cell::

        M(i, j) = sum_{c in (i,j), kept} N_c |prec(c) - conf(c)| / sum_{c in (i,j), kept} N_c

    (NaN where no kept cell falls into (i, j)), Kueppers et al. 2020, Fig. 1.
    ``kept [C]`` (e.g. ``MetricResult.table["kept"]`` of a D-ECE result)
    replaces the threshold test when given.

    ``signed_gap`` is the same weighted mean of ``conf(c) - prec(c)``: positive
    where the detector is over-confident on the whole, negative where it is
    under-confident (what the maps are coloured by; ``|signed_gap| <= gap``).

    Returns ``{"gap": [Bi,Bj], "signed_gap": [Bi,Bj], "count": [Bi,Bj] (all
    samples), "kept_count": [Bi,Bj]}``.
    """
    shape = tuple(int(s) for s in shape)
    n_cells = int(np.prod(shape)) if shape else 0
    n = _vec(count, "count", n_cells)
    conf = _vec(confidence, "confidence", n_cells)
    prec = _vec(precision, "precision", n_cells)
    axes = tuple(int(a) for a in keep_axes)
    if len(axes) != 2 or any(a < 0 or a >= len(shape) for a in axes) or axes[0] == axes[1]:
        raise DetcalInputError(f"must name two distinct axes of a {len(shape)}-D grid, got {axes}", field="keep_axes")
    if kept is None:
        kept = n >= max(int(sample_threshold), 1)
    else:
        kept = np.asarray(kept, dtype=bool).reshape(-1)
        if len(kept) != n_cells:
            raise DetcalInputError(f"has length {len(kept)}, expected {n_cells}", record="plot input", field="kept")
        kept = kept & (n > 0)
    gap = np.where(kept, np.abs(np.nan_to_num(prec) - np.nan_to_num(conf)), 0.0)
    other = tuple(a for a in range(len(shape)) if a not in axes)
    n_g = n.reshape(shape)
    wk = np.where(kept, n, 0.0).reshape(shape)
    signed = np.where(kept, np.nan_to_num(conf) - np.nan_to_num(prec), 0.0)
    num = (wk * gap.reshape(shape)).sum(axis=other)
    snum = (wk * signed.reshape(shape)).sum(axis=other)
    den = wk.sum(axis=other)
    tot = n_g.sum(axis=other)
    if axes[0] > axes[1]:  # sum() leaves axes in ascending order
        num, snum, den, tot = num.T, snum.T, den.T, tot.T
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
        sm = np.where(den > 0, snum / np.where(den > 0, den, 1.0), np.nan)
    return {"gap": m, "signed_gap": sm, "count": tot, "kept_count": den}
