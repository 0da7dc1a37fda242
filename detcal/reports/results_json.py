"""The one writer of ``metrics.json``: strict JSON, versioned, schema-checked.

* No ``NaN``/``Infinity`` tokens: a number that cannot be computed is written
  as ``null``, and the dict that holds it gets a ``"_null"`` entry naming the
  key and the reason (e.g. ``{"value": null, "_null": {"value": "not
  computable: empty sample"}}``).
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
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from detcal.utils.io import write_text

__all__ = ["SCHEMA_VERSION", "strict", "dumps", "write_metrics", "schema", "header", "loads_strict"]

SCHEMA_VERSION = "detcal.metrics/1"


def _reason(key: str, value: float, holder: dict[str, Any]) -> str:
    if math.isinf(value):
        return "infinite" + (" (constant sigma: LENCE diverges)" if key == "value" and holder.get("name") == "lence"
                             else "")
    extra = holder.get("extra") if isinstance(holder.get("extra"), dict) else {}
    why = extra.get("reason") if isinstance(extra, dict) else None
    return f"not computable: {why}" if why else "not computable (empty sample, bin or class)"


def strict(obj: Any) -> Any:
    """Plain, strict-JSON-ready Python from ``obj`` (see the module docstring)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_dict"):
            return strict(obj.to_dict())
        return strict(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        nulls: dict[str, str] = dict(obj.get("_null") or {}) if isinstance(obj.get("_null"), dict) else {}
        for k, v in obj.items():
            k = str(k)
            if k == "_null":
                continue
            if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
                out[k] = None
                nulls[k] = _reason(k, float(v), obj)
                continue
            sv = strict(v)
            if isinstance(sv, list) and _has_null_from_nan(v):
                nulls.setdefault(k, "entries are null where not computable (empty bins or cells)")
            out[k] = sv
        if nulls:
            out["_null"] = nulls
        return out
    if isinstance(obj, np.ndarray):
        return strict(obj.tolist())
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        v = float(obj)
        return v if math.isfinite(v) else None
    if isinstance(obj, (str, type(None))):
        return obj
    if isinstance(obj, os.PathLike):
        return str(obj)
    if hasattr(obj, "to_dict"):
        return strict(obj.to_dict())
    return str(obj)


def _has_null_from_nan(v: Any) -> bool:
    if isinstance(v, np.ndarray):
        return v.dtype.kind == "f" and not bool(np.all(np.isfinite(v)))
    if isinstance(v, (list, tuple)):
        return any(_has_null_from_nan(x) if isinstance(x, (list, tuple, np.ndarray))
                   else isinstance(x, (float, np.floating)) and not math.isfinite(float(x)) for x in v)
    return False


def _text(obj: Any, indent: int = 0) -> str:
    pad, inner = " " * indent, " " * (indent + 2)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {_text(v, indent + 2)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        if all(isinstance(v, list) and not any(isinstance(x, (dict, list)) for x in v) for v in obj):
            return "[\n" + ",\n".join(inner + json.dumps(v, allow_nan=False) for v in obj) + "\n" + pad + "]"
        return "[\n" + ",\n".join(inner + _text(v, indent + 2) for v in obj) + "\n" + pad + "]"
    return json.dumps(obj, allow_nan=False)


def dumps(obj: Any) -> str:
    """Strict, readable JSON text of ``obj``."""
    return _text(strict(obj)) + "\n"


def header(command: str, **fields: Any) -> dict[str, Any]:
    """The provenance every metrics.json opens with."""
    import detcal

    return {"schema_version": SCHEMA_VERSION, "detcal_version": detcal.__version__, "command": command,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), **fields}


def write_metrics(path: str | os.PathLike, record: dict[str, Any]) -> dict[str, Any]:
    """Atomically write ``record`` as strict JSON; returns the written (plain) content."""
    plain = strict(record)
    write_text(Path(path), _text(plain) + "\n")
    return plain


def schema() -> dict[str, Any]:
    """The JSON Schema of metrics.json shipped with the package."""
    return json.loads(resources.files("detcal").joinpath("schemas/metrics.schema.json").read_text(encoding="utf-8"))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


def loads_strict(text: str) -> Any:
    """Parse JSON text, refusing NaN / Infinity tokens."""
    return json.loads(text, parse_constant=_reject_constant)
