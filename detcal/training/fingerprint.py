"""Fingerprints of what a reusable stage of the main job was computed from.

A fingerprint is the sha256 of the canonical JSON (sorted keys, no spaces,
floats by ``repr``) of a plain description: the stage's settings and the
fingerprints of its inputs. A stage directory holds ``fingerprint.json``; a
rerun reuses the directory only when the stored fingerprint equals the new
one, otherwise the directory is removed whole and recomputed
(:func:`prepare_stage_dir`). Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from detcal.utils.io import write_json

__all__ = ["canonical_json", "fingerprint", "array_digest", "file_identity", "prepare_stage_dir", "FINGERPRINT_FILE"]

FINGERPRINT_FILE = "fingerprint.json"


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, np.ndarray):
        return array_digest(x)
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return repr(x)
    return x


def canonical_json(obj: Any) -> str:
    """Canonical JSON of ``obj`` (dataclasses and numpy values made plain; sorted keys)."""
    return json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"), allow_nan=False)


def fingerprint(obj: Any) -> str:
    """sha256 (hex) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def array_digest(*arrays: Any) -> str:
    """sha256 of arrays' dtypes, shapes and bytes (object arrays by their string values)."""
    h = hashlib.sha256()
    for a in arrays:
        a = np.asarray(a)
        if a.dtype == object:
            a = np.asarray([str(v) for v in a.ravel()], dtype=str)
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def file_identity(path: str | Path) -> dict[str, Any]:
    """Resolved path, size and modification time (ns) of a file, or of every file under a directory
    (digested, sorted by name); ``{"path": ..., "missing": True}`` when absent."""
    p = Path(path).expanduser().resolve()
    if p.is_file():
        st = p.stat()
        return {"path": str(p), "size": int(st.st_size), "mtime_ns": int(st.st_mtime_ns)}
    if p.is_dir():
        entries = sorted(
            (str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns) for f in p.rglob("*") if f.is_file()
        )
        return {"path": str(p), "files": len(entries), "digest": fingerprint(entries)}
    return {"path": str(p), "missing": True}


def prepare_stage_dir(path: Path, fp: str, description: Any) -> tuple[bool, str]:
    """Make ``path`` hold the stage of fingerprint ``fp``.

    Returns ``(reusable, status)``: ``reusable`` when ``path`` already holds
    this fingerprint (its content may be partial, e.g. a killed training run to
    resume). Otherwise a stale ``path`` (another fingerprint, or none) is
    removed whole, recreated empty and stamped with ``fp`` (and the
    ``description`` it was computed from).
    """
    path = Path(path)
    stamp = path / FINGERPRINT_FILE
    old = None
    if stamp.is_file():
        try:
            old = json.loads(stamp.read_text(encoding="utf-8")).get("fingerprint")
        except (ValueError, AttributeError):
            old = None
    if old == fp:
        return True, "fingerprint unchanged"
    status = (
        "new"
        if not path.exists()
        else ("stale (inputs or settings changed), recomputed" if old else "no fingerprint, recomputed")
    )
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    write_json(stamp, {"fingerprint": fp, "from": _plain(description)})
    return False, status
