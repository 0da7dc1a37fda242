"""The one writer of ``metrics.json``: strict JSON, versioned, schema-checked.

* No ``NaN``/``Infinity`` tokens: a number that cannot be computed is written
  as ``null``, and the dict that holds it gets a ``"skipped"`` map naming the
  key and the reason (e.g. ``{"value": null, "skipped": {"value": "not
  computable: empty sample"}}``); a block not computed at all is
  ``{"skipped": "<reason>"}`` (:class:`detcal.core.types.Skipped`, the one way).
* Numpy scalars/arrays, dataclasses (specs) and paths become plain JSON.
* The layout is versioned (``schema_version``) and described by the JSON
  Schema shipped in the package (:func:`schema`, ``detcal/schemas/metrics.schema.json``).
* Written atomically, readable: dicts one key per line, lists of scalars on one line.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson as _orjson

from detcal._version import __version__
from detcal.core.errors import DetcalInputError
from detcal.core.results import SCHEMA_V3, SKIP, Results
from detcal.utils.io import write_text
from detcal.utils.warn import collected

__all__ = [
    "SCHEMA_VERSION",
    "SKIP",
    "strict",
    "dumps",
    "write_metrics",
    "schema",
    "header",
    "loads_strict",
    "read_results",
]

SCHEMA_VERSION = SCHEMA_V3


def _reason(key: str, value: float, holder: dict[str, Any]) -> str:
    if math.isinf(value):
        return "infinite" + (
            " (constant sigma: LENCE diverges)" if key == "value" and holder.get("name") == "lence" else ""
        )
    extra = holder.get("extra") if isinstance(holder.get("extra"), dict) else {}
    why = extra.get("reason") if isinstance(extra, dict) else None
    return f"not computable: {why}" if why else "not computable (empty sample, bin or class)"


def strict(obj: Any) -> Any:
    """Plain, strict-JSON-ready Python from ``obj`` (see the module docstring)."""
    return _strict(obj)[0]


_NAN_LIST = "entries are null where not computable (empty bins or cells)"
_PLAIN = frozenset((int, str, bool, type(None)))
_NUMBERS = frozenset((int, float))
_NULLABLE_NUMBERS = frozenset((int, float, type(None)))
_FLOAT = frozenset((float,))


def _array(a: np.ndarray) -> tuple[Any, bool]:
    """A numpy array as nested lists; non-finite floats become None (second item: any did)."""
    if a.dtype.kind == "f":
        ok = np.isfinite(a)
        if ok.all():
            return a.tolist(), False
        o = a.astype(object)
        o[~ok] = None
        return o.tolist(), True
    if a.dtype.kind in "biu":
        return a.tolist(), False
    return [_strict(v)[0] for v in a.tolist()], False


def _all_finite(values: list | tuple) -> bool:
    """True when the sum of these ints and floats is finite (then so is every entry; an overflow of
    the sum only sends the list down the slow path)."""
    try:
        return math.isfinite(sum(values))
    except OverflowError:
        return False


def _strict(obj: Any) -> tuple[Any, bool]:
    """(plain value, whether a non-finite number inside a list became null)."""
    t = type(obj)
    if t is float:
        return (obj, False) if math.isfinite(obj) else (None, True)
    if t is int or t is str or obj is None or t is bool:
        return obj, False
    if t is list or t is tuple:
        kinds = set(map(type, obj))
        if kinds <= _PLAIN:  # ints, strings, None, bools: already plain
            return list(obj), False
        if kinds <= _NUMBERS and _all_finite(obj):  # finite floats (and ints), kept as they are
            return list(obj), False
        if kinds <= _NULLABLE_NUMBERS and _all_finite([v for v in obj if v is not None]):
            return list(obj), False  # already strict (nulls where a number was not computable): as it is
        if kinds == _FLOAT:  # a row of floats with non-finite entries
            return _array(np.asarray(obj, dtype=float))
        out, nan = [], False
        for v in obj:
            sv, n = _strict(v)
            out.append(sv)
            nan = nan or n or (isinstance(v, (float, np.floating)) and sv is None)
        return out, nan
    if isinstance(obj, dict):
        res: dict[str, Any] = {}
        given = obj.get(SKIP)
        nulls: dict[str, str] = {str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {}
        for k, v in obj.items():
            k = str(k)
            if k == SKIP and isinstance(v, dict):
                continue
            if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
                res[k] = None
                nulls.setdefault(k, _reason(k, float(v), obj))
                continue
            sv, nan = _strict(v)
            if nan and isinstance(sv, list):
                nulls.setdefault(k, _NAN_LIST)
            res[k] = sv
        if nulls:
            res[SKIP] = nulls
        return res, False
    if isinstance(obj, np.ndarray):
        return _array(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _strict(obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj))
    if isinstance(obj, (list, tuple)):
        return _strict(list(obj))
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj), False
    if isinstance(obj, (int, np.integer)):
        return int(obj), False
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return (v, False) if math.isfinite(v) else (None, True)
    if isinstance(obj, str):
        return str(obj), False
    if isinstance(obj, os.PathLike):
        return str(obj), False
    if hasattr(obj, "to_dict"):
        return _strict(obj.to_dict())
    return str(obj), False


_LEAF = frozenset((int, float, str, bool, type(None)))
_NUMERIC_LEAF = frozenset((int, float, bool, type(None)))


def _leaf(v: list) -> str:
    """A list of scalars on one line: orjson for numbers (same values as :mod:`json`, read back
    exactly; ``", "`` separators), :mod:`json` when it holds strings."""
    if set(map(type, v)) <= _NUMERIC_LEAF and _all_finite([x for x in v if x is not None]):
        try:
            return _orjson.dumps(v).decode().replace(",", ", ")
        except _orjson.JSONEncodeError:  # an integer beyond 64 bits
            pass
    return json.dumps(v, allow_nan=False)


_str_token = json.encoder.encode_basestring_ascii  # what json.dumps writes for a str (ensure_ascii)
_CONSTANTS = {True: "true", False: "false", None: "null"}


def _scalar(obj: Any) -> str:
    """``json.dumps(obj, allow_nan=False)`` of a leaf, without building an encoder for the plain types."""
    t = type(obj)
    if t is str:
        return _str_token(obj)
    if t is float and math.isfinite(obj):
        return float.__repr__(obj)
    if t is int:
        return int.__repr__(obj)
    if t is bool or obj is None:
        return _CONSTANTS[obj]
    return json.dumps(obj, allow_nan=False)


def _text(obj: Any, indent: int = 0) -> str:
    pad, inner = " " * indent, " " * (indent + 2)
    t = type(obj)
    if t is dict:
        if not obj:
            return "{}"
        items = [f"{inner}{_scalar(k)}: {_text(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if t is list:
        kinds = set(map(type, obj))
        if kinds <= _LEAF:
            return _leaf(obj)
        if kinds == {list} and all(set(map(type, v)) <= _LEAF for v in obj):
            return "[\n" + ",\n".join(inner + _leaf(v) for v in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(inner + _text(v, indent + 2) for v in obj) + "\n" + pad + "]"
    return _scalar(obj)


def dumps(obj: Any) -> str:
    """Strict, readable JSON text of ``obj``."""
    return _text(strict(obj)) + "\n"


def header(command: str, **fields: Any) -> dict[str, Any]:
    """The provenance every metrics.json opens with."""

    return {
        "schema_version": SCHEMA_VERSION,
        "detcal_version": __version__,
        "command": command,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **fields,
    }


def write_metrics(path: str | os.PathLike, record: dict[str, Any], *, plain: bool = False) -> dict[str, Any]:
    """Atomically write ``record`` as strict JSON; returns the written (plain) content.
    ``plain=True``: ``record`` is already :func:`strict` output."""
    content = record if plain else strict(record)

    caught = [w for w in collected() if w not in (content.get("warnings") or [])]
    if caught and isinstance(content, dict):  # Python warnings of the command (detcal.utils.warn.capture)
        content = {**content, "warnings": [*(content.get("warnings") or []), *caught]}
    write_text(Path(path), _text(content) + "\n")
    return content


def schema() -> dict[str, Any]:
    """The JSON Schema of metrics.json shipped with the package."""
    from importlib import resources  # lazy: only the schema's readers (tests, tools) need it, not a run

    return json.loads(resources.files("detcal").joinpath("schemas/metrics.schema.json").read_text(encoding="utf-8"))


def read_results(source: str | os.PathLike | Mapping[str, Any], *, lenient: bool = False) -> Results:
    """The typed results (:class:`detcal.core.results.Results`) of a metrics.json file or content.

    Reads schema ``detcal.metrics/3`` and ``/2`` (upgraded on reading: every number where it
    was, "not computed" in the one /3 spelling; :func:`detcal.core.results.upgrade_v2`); the
    ``content`` of the results is the /3 content. Another schema (or a NaN token) is refused with
    the file named, unless ``lenient`` (then read as /3 as far as it goes)."""
    where = None if isinstance(source, Mapping) else Path(source)
    if where is not None:
        try:
            text = where.read_text(encoding="utf-8")
            content = json.loads(text) if lenient else loads_strict(text)
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise DetcalInputError(f"cannot be read as metrics.json ({e})", file=where) from e
    else:
        content = source
    if not isinstance(content, Mapping):
        raise DetcalInputError("is not a metrics.json object", file=where)
    try:
        return Results.from_json(content, lenient=lenient)
    except ValueError as e:
        raise DetcalInputError(str(e), file=where) from e


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def loads_strict(text: str) -> Any:
    """Parse JSON text, refusing NaN / Infinity tokens."""
    return json.loads(text, parse_constant=_reject_constant)
