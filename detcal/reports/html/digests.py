"""SHA-256 of the input files that report.html names in its provenance, kept from run to run.

The provenance section gives the SHA-256 of every input file (:func:`detcal.reports.html.page.file_digests`).
Hashing reads every byte: about 0.1 s of CPU for the 160 MB of a 20,000-image run's instances and results,
the same for every run on the same files. :func:`sha256_digests` keeps each digest in a small cache file,
keyed on what identifies the file and its state, as git's index does: the resolved path, the device, the
inode, the size and the modification and change times in nanoseconds. A write to the file changes its change
time (which no user call can set back), so an entry is found only while the file holds the bytes that were
hashed. Two guards close the gaps a timestamp leaves:

- a digest is stored only when the file's state is the same after hashing as before (not written meanwhile);
- and only when the file's last change is at least :data:`STABLE_NS` older than the start of the hashing:
  file systems stamp times at a coarse tick, and a write just after the hash could otherwise leave the
  times as they were.

Where: ``digests.json`` in ``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal``, else ``~/.cache/detcal``
(the folder of the configuration cache, made with mode 0700), read only when the current user owns it, written
atomically, at most :data:`MAX_ENTRIES` entries (the oldest written go). Nothing about it is ever fatal: an
unreadable, damaged or unwritable cache means the files are hashed. ``DETCAL_DIGEST_CACHE=0`` switches it off
(every file hashed, nothing stored).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from detcal.utils.cache_dir import cache_dir, store

__all__ = ["sha256_digests", "sha256_file", "cache_file", "enabled", "MAX_ENTRIES", "STABLE_NS", "FORMAT"]

FORMAT = 1
"""Layout of the cache file; a file of another layout is ignored (and replaced at the next store)."""

MAX_ENTRIES = 256
"""Digests kept; storing more drops the oldest written."""

STABLE_NS = 2_000_000_000
"""How much older than the start of the hashing a file's last change must be for its digest to be stored."""

_NAME = "digests.json"


def enabled() -> bool:
    """False when ``DETCAL_DIGEST_CACHE`` is ``0``, ``false``, ``no`` or ``off``."""
    return os.environ.get("DETCAL_DIGEST_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_file() -> Path:
    """``digests.json`` in detcal's cache folder (:func:`detcal.utils.cache_dir.cache_dir`)."""
    return cache_dir() / _NAME


def sha256_file(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of the file's bytes, read now."""
    with open(path, "rb") as fh:
        if hasattr(hashlib, "file_digest"):  # Python 3.11+: one reused buffer, no bytes object per read
            return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()
        h = hashlib.sha256()  # pragma: no cover - Python 3.10
        for chunk in iter(lambda: fh.read(1 << 20), b""):  # pragma: no cover - Python 3.10
            h.update(chunk)
        return "sha256:" + h.hexdigest()  # pragma: no cover - Python 3.10


def _key(path: str | os.PathLike) -> str:
    """The cache key of a file as it is now (raises ``OSError`` when it cannot be stat'ed)."""
    real = os.path.realpath(path)
    st = os.stat(real)
    return "\0".join(map(str, (real, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)))


def _last_change_ns(key: str) -> int:
    *_, mtime, ctime = key.split("\0")
    return max(int(mtime), int(ctime))


def _read(where: Path) -> dict[str, str]:
    """The stored digests (empty: no file, another user's, damaged, another layout)."""
    try:
        with open(where, "rb") as fh:
            if os.fstat(fh.fileno()).st_uid != os.getuid():
                return {}
            data: Any = json.load(fh)
    except Exception:  # noqa: BLE001 - a missing or damaged cache: hash
        return {}
    entries = data.get("entries") if isinstance(data, dict) and data.get("format") == FORMAT else None
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, str)}


def _write(where: Path, entries: dict[str, str]) -> None:
    """Store ``entries`` (the last :data:`MAX_ENTRIES`) atomically; silently nothing when it cannot."""
    kept = dict(list(entries.items())[-MAX_ENTRIES:])
    store(where, json.dumps({"format": FORMAT, "entries": kept}).encode("utf-8"))


def sha256_digests(paths: Sequence[str | os.PathLike]) -> list[str]:
    """``sha256:<hex>`` of each file of ``paths``: from the cache when the file's state is the one stored, else
    read and hashed (and stored when the file was not changed while, nor just before, it was hashed). A file
    that cannot be stat'ed is hashed as it is (its error, if any, is the read's)."""
    if not enabled():
        return [sha256_file(p) for p in paths]
    where = cache_file()
    stored = _read(where)
    added: dict[str, str] = {}
    out = []
    for p in paths:
        try:
            key: str | None = _key(p)
        except OSError:
            key = None
        if key is not None and key in stored:
            out.append(stored[key])
            continue
        started = time.time_ns()
        digest = sha256_file(p)
        out.append(digest)
        with contextlib.suppress(OSError):
            if key is not None and _key(p) == key and started - _last_change_ns(key) >= STABLE_NS:
                added[key] = digest
    if added:
        for k in added:
            stored.pop(k, None)  # re-stored last: the newest written are kept
        _write(where, {**stored, **added})
    return out
