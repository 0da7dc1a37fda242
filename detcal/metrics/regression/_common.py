"""Shared validation and constants of the box-uncertainty metrics (numpy only)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from detcal.core.errors import DetcalInputError
from detcal.core.types import MetricResult, Skipped

QUANTILE_LEVELS: np.ndarray = np.linspace(0.05, 0.95, 19)
"""Default quantile levels tau = 0.05, 0.10, ..., 0.95 (L = 19), as netcal's examples."""

RETENTION_REJECT: np.ndarray = np.arange(100) / 100.0
"""Default rejected fractions 0, 0.01, ..., 0.99 for retention curves."""

BINNINGS: tuple[str, ...] = ("equal_count", "equal_width")
POLICIES: tuple[str, ...] = ("drop", "netcal")
LOG_2PI = float(np.log(2.0 * np.pi))


# --------------------------------------------------------------------------- validation


def validate(
    mu: ArrayLike, sigma: ArrayLike, y: ArrayLike, *, ndim: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 arrays of equal shape; mu, y finite; sigma finite and > 0. Errors name sample and field."""
    out = []
    for name, a in (("mu", mu), ("sigma", sigma), ("y", y)):
        # contiguous: a column slice mu[:, k] of an [S, K] array costs 1.5-2.5x in every later pass
        arr = np.ascontiguousarray(a, dtype=np.float64)
        if arr.ndim != ndim:
            raise DetcalInputError(f"expected a {ndim}-D array, got shape {arr.shape}", field=name)
        out.append(arr)
    m, s, t = out
    if not (m.shape == s.shape == t.shape):
        raise DetcalInputError(f"shapes differ: mu {m.shape}, sigma {s.shape}, y {t.shape}", field="sigma")
    for name, arr, positive in (("mu", m, False), ("y", t, False), ("sigma", s, True)):
        if arr.size == 0:
            continue
        # fast path (two reductions, no temporaries): a NaN/inf makes the sum non-finite;
        # a finite overflow only sends us to the exact element-wise check below
        if positive:
            if arr.min() > 0 and np.isfinite(arr.max()):
                continue
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                if np.isfinite(arr.sum()):
                    continue
        ok = np.isfinite(arr)
        if positive:
            ok &= arr > 0
        if not ok.all():
            bad = ~ok if ndim == 1 else ~ok.all(axis=1)
            i = int(np.flatnonzero(bad)[0])
            need = "finite and > 0" if positive else "finite"
            raise DetcalInputError(f"{name} must be {need}, got {arr[i].tolist()}", record=f"sample {i}", field=name)
    return m, s, t


def validate_levels(levels: ArrayLike, name: str = "levels") -> np.ndarray:
    lv = np.asarray(levels, dtype=np.float64).reshape(-1)
    if len(lv) == 0 or not np.all((lv > 0) & (lv < 1)) or np.any(np.diff(lv) <= 0):
        raise DetcalInputError(f"{name} must be strictly increasing values in (0, 1), got {lv.tolist()}", field=name)
    return lv


def check_choice(value: str, choices: Sequence[str], name: str) -> None:
    if value not in choices:
        raise DetcalInputError(f"unknown {name} {value!r}; expected one of {tuple(choices)}", field=name)


def check_bins(bins: int) -> int:
    if int(bins) != bins or bins < 1:
        raise DetcalInputError(f"bins must be a positive integer, got {bins!r}", field="bins")
    return int(bins)


def nan_result(name: str, variant: str, params: dict[str, Any]) -> MetricResult:
    return MetricResult(name=name, value=float("nan"), variant=variant, params=params, skipped=Skipped("empty sample"))
