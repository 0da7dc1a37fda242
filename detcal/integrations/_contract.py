"""The input contract of the streaming evaluator: exact shapes and dtypes, checked before anything is
flattened, and exact integers for image ids and labels.

Every check here names the image (its position in the batch and its id), the field and the shape or
value found, so a prediction dict with boxes [2, 8] or labels [N, 2] is refused instead of being
flattened into rows of other images. Shapes and dtypes are read without copying (numpy arrays, torch
tensors on any device, nested lists); value checks run once on the concatenated columns.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, is_dataclass
from numbers import Integral, Real
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError

Where = Callable[[int, Any], str]

INT64_MAX = 2**63 - 1


def shape_kind(x: Any) -> tuple[tuple[int, ...], str]:
    """(shape, kind) of an array-like without copying a tensor to the host: kind is numpy's dtype kind
    ('f' float, 'i'/'u' integer, 'b' bool, 'c' complex, 'O'/'U'/'S' anything else)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.dtype == torch.bool:
            kind = "b"
        elif x.is_complex():
            kind = "c"
        elif x.is_floating_point():
            kind = "f"
        else:
            kind = "u" if x.dtype == torch.uint8 else "i"
        return tuple(int(s) for s in x.shape), kind
    try:
        a = np.asarray(x)
    except (ValueError, TypeError):  # ragged nested lists
        return (-1,), "O"
    return tuple(int(s) for s in a.shape), a.dtype.kind


def _fmt(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]" if shape != (-1,) else "ragged"


def check_field(
    d: Mapping[str, Any], key: str, tail: tuple[int, ...], n: int | None, where: str, *, kinds: str = "fiu"
) -> int:
    """Rows of ``d[key]``, which must have shape [n, *tail] (an empty [0] passes for [0, *tail]) and a
    dtype kind among ``kinds`` (default real numbers: float or integer; "fiub" also takes bool);
    ``n`` None: any row count. An error naming ``where``, the field and the shape found otherwise."""
    shape, kind = shape_kind(d[key])
    want = "[" + ", ".join(["N" if n is None else str(n)] + [str(t) for t in tail]) + "]"
    empty = shape in ((0,), (0,) + tail)
    if not empty and (len(shape) != 1 + len(tail) or shape[1:] != tail or (n is not None and shape[0] != n)):
        raise DetcalInputError(f"shape {_fmt(shape)}, expected {want}", record=where, field=key)
    if empty and n not in (None, 0):
        raise DetcalInputError(f"shape {_fmt(shape)}, expected {want}", record=where, field=key)
    if kind not in kinds:
        what = {"c": "complex", "b": "bool"}.get(kind, "non-numeric")
        raise DetcalInputError(
            f"{what} values of shape {_fmt(shape)}; expected real numbers",
            record=where,
            field=key,
        )
    return 0 if empty else shape[0]


def exact_int(x: Any, where: str, field: str, lo: int = -INT64_MAX - 1, hi: int = INT64_MAX) -> int:
    """One exact integer in [lo, hi] (a Python/numpy integer, an integral float, or a one-element array or
    tensor of one); 100.9, True, 2**70 and NaN are refused with the value found."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        if x.numel() != 1:
            raise DetcalInputError(f"expected one integer, got shape {_fmt(tuple(x.shape))}", record=where, field=field)
        x = x.detach().cpu().reshape(-1)[0].item()
    elif isinstance(x, np.ndarray):
        if x.size != 1:
            raise DetcalInputError(f"expected one integer, got shape {_fmt(x.shape)}", record=where, field=field)
        x = x.reshape(-1)[0].item()
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (Integral, Real)):
        raise DetcalInputError(
            f"expected an integer, got {type(x).__name__} {str(x)[:40]!r}", record=where, field=field
        )
    if not isinstance(x, Integral):
        xf = float(x)
        if not (np.isfinite(xf) and xf == int(xf)):
            raise DetcalInputError(f"expected an integer, got {xf!r}", record=where, field=field)
        x = int(xf)
    v = int(x)
    if not lo <= v <= hi:
        raise DetcalInputError(f"integer {v} out of range [{lo}, {hi}]", record=where, field=field)
    return v


def int_column(a: np.ndarray, counts: np.ndarray, ids: np.ndarray, where: Where, field: str) -> np.ndarray:
    """int64 labels from a concatenated column: integral, finite and within int64 (1e20 is refused, not
    wrapped to -2**63); the error names the image of the first bad row."""
    if a.dtype.kind in "iu":
        if a.dtype == np.uint64 and len(a) and int(a.max()) > INT64_MAX:
            bad = int(np.argmax(a > INT64_MAX))
            _bad_row(bad, counts, ids, where, field, f"label {int(a[bad])} is out of the int64 range")
        return a.astype(np.int64, copy=False)
    f = a.astype(np.float64, copy=False)
    ok = np.isfinite(f) & (f == np.round(f)) & (np.abs(f) < 2.0**63)
    if not ok.all():
        bad = int(np.flatnonzero(~ok)[0])
        _bad_row(bad, counts, ids, where, field, f"label {float(f[bad])!r} is not an integer in the int64 range")
    return f.astype(np.int64)


def _bad_row(row: int, counts: np.ndarray, ids: np.ndarray, where: Where, field: str, msg: str) -> None:
    img = int(np.searchsorted(np.cumsum(counts), row, side="right"))
    local = row - int(np.sum(counts[:img]))
    raise DetcalInputError(f"row {local}: {msg}", record=where(img, ids[img]), field=field)


def check_categories(categories: Mapping[Any, Any]) -> dict[int, str]:
    """``{id: name}`` with exact integer ids and string names (or an error naming the entry)."""
    if not isinstance(categories, Mapping):
        raise DetcalInputError(f"expected a mapping {{id: name}}, got {type(categories).__name__}", field="categories")
    out: dict[int, str] = {}
    for k, v in categories.items():
        cid = exact_int(k, f"category {str(k)[:40]!r}", "categories")
        if not isinstance(v, str):
            raise DetcalInputError(
                f"category names are strings, got {type(v).__name__}", record=f"category {cid}", field="categories"
            )
        out[cid] = v
    return out


def spec_fingerprint(spec: Any) -> str:
    """A short hash of everything in an EvaluationSpec that determines the numbers (``parallel`` left out)."""
    d = asdict(spec) if is_dataclass(spec) and not isinstance(spec, type) else {"spec": repr(spec)}
    d.pop("parallel", None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=repr).encode()).hexdigest()[:16]
