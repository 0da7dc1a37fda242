"""Strict JSON reading for the COCO adapter: parsing, columns, validation masks.

Parsing uses ``orjson`` when it is importable (several times faster than the
standard library on large results files) and :mod:`json` otherwise; both give
the same records. Records are turned into numpy columns in one pass per field
and validated with numpy masks; only the error path walks them one by one, to
name the first bad record.

Strict numbers (docs/formats.md, "Acceptance rules"):

* a JSON ``true``/``false`` is never a number: ``[1, true, 3, 4]`` as a box
  is an error (numpy would silently read it as 1). Booleans are looked for
  only when the file's bytes contain ``true`` or ``false`` at all, so the
  usual file pays nothing;
* integer ids must fit int64 (``-2**63 <= id < 2**63``); an id written as a
  float must be integral and at most ``2**53`` in magnitude (beyond that a
  float does not hold the integer that was written);
* magnitudes are bounded so that every derived quantity (``x + w``, areas,
  relative features, normalised errors, variances, NLL) stays finite:
  coordinates and means ``|v| <= MAX_ABS``, scales (standard deviations,
  proposal and image sizes) in ``[MIN_SCALE, MAX_ABS]``, covariance entries
  ``|c| <= MAX_ABS**2`` with each diagonal entry 0 or ``>= MIN_SCALE**2``.
"""

from __future__ import annotations

import itertools
import json
from operator import itemgetter
from typing import Any

import numpy as np

from detcal.core.errors import DetcalInputError

try:  # optional fast path, same results as json
    import orjson as _orjson
except ImportError:  # pragma: no cover - depends on the environment
    _orjson = None  # type: ignore[assignment]


MAX_ABS: float = 1e30
"""Largest magnitude of a coordinate, size, mean or delta (and of a standard deviation)."""
MIN_SCALE: float = 1e-30
"""Smallest standard deviation, proposal width/height and image width/height."""
INT_LIMIT: int = 2**63
"""Integer ids must satisfy ``-INT_LIMIT <= id < INT_LIMIT`` (int64)."""
FLOAT_INT_LIMIT: float = 2.0**53
"""An id written as a float must have ``|id| <= 2**53`` (exactly representable)."""

_NUMERIC_KINDS = "iuf"
TOP = "(top level)"
_SYM_RTOL = 1e-6
"""Relative tolerance of the symmetry test of a covariance (files round to ~6 digits)."""
_PSD_RTOL = 1e-9
"""A covariance is PSD when its smallest eigenvalue >= -_PSD_RTOL * max |entry|."""


class Parsed:
    """A parsed JSON document and whether its text may hold a JSON boolean."""

    __slots__ = ("doc", "bools")

    def __init__(self, doc: Any, bools: bool) -> None:
        self.doc = doc
        self.bools = bools


def parse_json_bytes(data: bytes, file: str) -> Parsed:
    """Parse JSON bytes (orjson when importable, else json) with located errors.

    A UTF-8 byte-order mark is accepted. When orjson refuses the text (it
    has no ``NaN``/``Infinity`` tokens) the standard parser reads it, so both
    paths accept the same files (non-finite numbers are then refused per
    record and field) and report errors at the same place. Syntax errors, non-UTF-8 text,
    numbers out of the double range and nesting too deep for the parser
    are :class:`DetcalInputError` naming ``file`` and the position.
    """
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    bools = b"true" in data or b"false" in data
    if _orjson is not None:
        try:
            return Parsed(_orjson.loads(data), bools)
        except ValueError:  # NaN/Infinity tokens, or an error: the json module decides and locates it
            pass
    try:
        doc = json.loads(data)
    except UnicodeDecodeError as e:
        raise DetcalInputError("not JSON: the file is not UTF-8 text", file=file, record=f"byte {e.start}") from e
    except RecursionError as e:
        raise DetcalInputError("not JSON that detcal reads: nested too deeply", file=file, record=TOP) from e
    except ValueError as e:  # json.JSONDecodeError and orjson.JSONDecodeError are ValueErrors
        line, col = getattr(e, "lineno", "?"), getattr(e, "colno", "?")
        msg = getattr(e, "msg", str(e))
        raise DetcalInputError(f"not JSON: {msg}", file=file, record=f"line {line}, column {col}") from e
    return Parsed(doc, bools)


# --------------------------------------------------------------------------- helpers
def rec(prefix: str, i: int) -> str | int:
    return f"{prefix}[{i}]" if prefix else i


def first_true(mask: np.ndarray) -> int:
    """Index of the first row of ``mask`` [R,...] holding a True; -1 if none."""
    m = np.asarray(mask, dtype=bool)
    if m.ndim > 1:
        m = np.asarray(m.reshape(m.shape[0], -1).any(axis=1) if m.size else np.zeros(m.shape[0], dtype=bool))
    hits = np.flatnonzero(m)
    return int(hits[0]) if len(hits) else -1


def _flat(value: Any, depth: int) -> list:
    out = [value]
    for _ in range(depth):
        out = list(itertools.chain.from_iterable(out))
    return out


def _is_numeric(value: Any, shape: tuple[int, ...]) -> bool:
    try:
        a = np.asarray(value)
    except (ValueError, TypeError, OverflowError):
        return False
    if a.shape != shape or a.dtype.kind not in _NUMERIC_KINDS:
        return False
    return bool not in set(map(type, _flat(value, len(shape))))


def numeric_column(
    values: list,
    shape: tuple[int, ...],
    *,
    file: str,
    field: str,
    prefix: str = "",
    what: str = "a number",
    bools: bool = True,
) -> np.ndarray:
    """One JSON value per record -> float64 ``[R, *shape]``; numbers only (no bool, no str).

    ``bools=False`` skips the boolean search (the caller knows the text holds none).
    """
    n = len(values)
    if n == 0:
        return np.zeros((0,) + shape, dtype=np.float64)
    try:
        raw = np.asarray(values)
        ok = raw.dtype.kind in _NUMERIC_KINDS and raw.shape == (n,) + shape
    except (ValueError, TypeError, OverflowError):
        ok = False
    if ok and bools:
        ok = bool not in set(map(type, _flat(values, len(shape) + 1)))
    if not ok:
        bad = next((i for i, v in enumerate(values) if not _is_numeric(v, shape)), 0)
        raise DetcalInputError(f"expected {what}, got {values[bad]!r}", file=file, record=rec(prefix, bad), field=field)
    if raw.dtype.kind == "u":  # integers >= 2**63 somewhere; float64 keeps the magnitude for the range checks
        return raw.astype(np.float64)
    return raw.astype(np.float64, copy=False)


def integer_column(values: list, *, file: str, field: str, prefix: str = "", bools: bool = True) -> np.ndarray:
    """One JSON value per record -> int64 ``[R]``; floats accepted when integral and ``|v| <= 2**53``."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    arr = numeric_column(values, (), file=file, field=field, prefix=prefix, what="an integer", bools=bools)
    raw = np.asarray(values)
    if raw.dtype.kind == "i":
        return raw.astype(np.int64, copy=False)
    if raw.dtype.kind == "u":
        bad = first_true(raw >= np.uint64(INT_LIMIT))
        raise DetcalInputError(
            f"integer out of range (must be below 2**63 = {INT_LIMIT}), got {values[bad]!r}",
            file=file,
            record=rec(prefix, bad),
            field=field,
        )
    bad = first_true(~np.isfinite(arr) | (arr != np.round(arr)))
    if bad >= 0:
        raise DetcalInputError(
            f"expected an integer, got {values[bad]!r}", file=file, record=rec(prefix, bad), field=field
        )
    bad = first_true(np.abs(arr) > FLOAT_INT_LIMIT)
    if bad >= 0:
        big = [v for v in values if type(v) is int and not -INT_LIMIT <= v < INT_LIMIT]
        msg = (
            f"integer out of range (must be below 2**63 = {INT_LIMIT}), got {big[0]!r}"
            if big
            else f"integer written as a float must be at most 2**53 in magnitude (write it without a fraction), got {values[bad]!r}"
        )
        where = next((i for i, v in enumerate(values) if big and v is big[0]), bad)
        raise DetcalInputError(msg, file=file, record=rec(prefix, where), field=field)
    return arr.astype(np.int64)


def flag_column(values: list, *, file: str, field: str, prefix: str = "") -> np.ndarray:
    """0/1 or true/false per record -> bool ``[R]``."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    try:
        raw = np.asarray(values)
        ok = raw.dtype.kind in "biu" and raw.ndim == 1 and bool(np.isin(raw, (0, 1)).all())
    except (ValueError, TypeError, OverflowError):
        ok = False
    if not ok:
        bad = next((i for i, v in enumerate(values) if not (isinstance(v, (bool, int)) and v in (0, 1))), 0)
        raise DetcalInputError(
            f"expected 0/1 or true/false, got {values[bad]!r}", file=file, record=rec(prefix, bad), field=field
        )
    return raw.astype(bool)


def require(records: list[dict], key: str, *, file: str, prefix: str = "") -> list:
    """The value of ``key`` in every record; error naming the first record lacking it (or null)."""
    try:
        values = list(map(itemgetter(key), records))  # C-level; a missing key falls back to the located error
    except KeyError:
        values = [r.get(key) for r in records]
    if None in values:
        bad = next(i for i, v in enumerate(values) if v is None)
        raise DetcalInputError(
            f"missing required key {key!r} (or it is null)", file=file, record=rec(prefix, bad), field=key
        )
    return values


def check_dicts(records: list, *, file: str, prefix: str = "") -> None:
    if records and set(map(type, records)) != {dict}:
        bad = next(i for i, r in enumerate(records) if type(r) is not dict)
        raise DetcalInputError(
            f"expected a JSON object, got {type(records[bad]).__name__}", file=file, record=rec(prefix, bad)
        )


def check_unique(ids: np.ndarray, *, file: str, field: str, prefix: str = "") -> None:
    """Error naming the first record whose id repeats an earlier one."""
    if len(ids) < 2:
        return
    order = np.argsort(ids, kind="stable")
    s = ids[order]
    dup = order[1:][s[1:] == s[:-1]]
    if len(dup):
        bad = int(dup.min())
        raise DetcalInputError(f"duplicate id {int(ids[bad])}", file=file, record=rec(prefix, bad), field=field)


def check_mask(
    bad_mask: np.ndarray, values: np.ndarray, message: str, *, file: str, field: str, prefix: str = ""
) -> None:
    bad = first_true(bad_mask)
    if bad >= 0:
        raise DetcalInputError(
            f"{message}, got {np.asarray(values[bad]).tolist()!r}", file=file, record=rec(prefix, bad), field=field
        )


def _all_within(values: np.ndarray, limit: float, step: int = 1 << 16) -> bool:
    """``(|values| <= limit).all()``, a slice at a time (no temporary the size of ``values``)."""
    flat = values.reshape(-1)
    # -limit <= v <= limit as the slice's two extremes (no |v| temporary); NaN propagates and fails both
    return all(
        bool(flat[i : i + step].max() <= limit and flat[i : i + step].min() >= -limit)
        for i in range(0, flat.size, step)
    )


def check_bounded(values: np.ndarray, what: str, *, file: str, field: str, prefix: str = "") -> None:
    """Finite and ``|v| <= MAX_ABS``."""
    if _all_within(values, MAX_ABS):  # the usual case, in one pass (NaN compares False)
        return
    check_mask(~np.isfinite(values), values, f"non-finite {what}", file=file, field=field, prefix=prefix)
    check_mask(
        np.abs(values) > MAX_ABS,
        values,
        f"{what} out of range (|value| must be at most {MAX_ABS:g})",
        file=file,
        field=field,
        prefix=prefix,
    )


def check_scale(values: np.ndarray, what: str, *, file: str, field: str, prefix: str = "") -> None:
    """Finite and in ``[MIN_SCALE, MAX_ABS]``."""
    ok = np.isfinite(values) & (values >= MIN_SCALE) & (values <= MAX_ABS)
    check_mask(
        ~ok, values, f"{what} must be finite and in [{MIN_SCALE:g}, {MAX_ABS:g}]", file=file, field=field, prefix=prefix
    )


def check_box(xywh: np.ndarray, *, file: str, field: str, prefix: str = "") -> None:
    """Finite ``[x, y, w, h]`` with w, h >= 0 and every entry at most ``MAX_ABS`` in magnitude."""
    check_bounded(xywh, "box coordinate", file=file, field=field, prefix=prefix)
    # per column: a [R, 2] view runs 2 values per inner loop; the same first row
    negative = (xywh[:, 2] < 0) | (xywh[:, 3] < 0) if xywh.ndim == 2 and xywh.shape[1] == 4 else xywh[:, 2:4] < 0
    check_mask(negative, xywh, "negative box width or height", file=file, field=field, prefix=prefix)


def check_covariance(cov: np.ndarray, *, file: str, field: str) -> None:
    """``cov [D, ..., m, m]``: finite, bounded, symmetric (rtol 1e-6) and positive semi-definite.

    Entries ``|c| <= MAX_ABS**2``; each diagonal entry (a variance) 0 or
    ``>= MIN_SCALE**2``. PSD test: smallest eigenvalue of the symmetric part,
    computed on the matrix divided by its largest entry (scale-free, so no
    overflow), >= -1e-9 (numpy ``eigvalsh``, vectorised over records).
    """
    check_mask(~np.isfinite(cov), cov, "non-finite covariance entry", file=file, field=field)
    check_mask(
        np.abs(cov) > MAX_ABS**2,
        cov,
        f"covariance entry out of range (|entry| must be at most {MAX_ABS**2:g})",
        file=file,
        field=field,
    )
    diag = np.diagonal(cov, axis1=-2, axis2=-1)
    check_mask(
        (diag != 0) & (np.abs(diag) < MIN_SCALE**2),
        cov,
        f"variance on the diagonal must be 0 or at least {MIN_SCALE**2:g}",
        file=file,
        field=field,
    )
    scale = np.abs(cov).max(axis=(-1, -2), keepdims=True)
    unit = cov / np.where(scale > 0, scale, 1.0)
    asym = np.abs(unit - np.swapaxes(unit, -1, -2)) > _SYM_RTOL
    check_mask(asym, cov, "covariance is not symmetric", file=file, field=field)
    if unit.size:
        eig_min = np.linalg.eigvalsh(0.5 * (unit + np.swapaxes(unit, -1, -2)))[..., 0]
        check_mask(eig_min < -_PSD_RTOL, cov, "covariance is not positive semi-definite", file=file, field=field)


def column(records: list[dict], key: str) -> list:
    """``record[key]`` of every record (each is known to carry ``key``)."""
    return list(map(itemgetter(key), records))


def top_list(doc: dict, key: str, *, file: str) -> list:
    if key not in doc:
        raise DetcalInputError(f"missing top-level key {key!r}", file=file, record=TOP, field=key)
    value = doc[key]
    if not isinstance(value, list):
        raise DetcalInputError(f"expected a list, got {type(value).__name__}", file=file, record=TOP, field=key)
    return value
