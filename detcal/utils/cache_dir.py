"""Where detcal keeps what it may reuse between runs (the composed configurations, the run records, the
input files' digests): ``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal`` (an absolute path only, as the
XDG rules say), else ``~/.cache/detcal``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "store"]


def cache_dir() -> Path:
    """``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal``, else ``~/.cache/detcal`` (read now, not cached)."""
    explicit = os.environ.get("DETCAL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "detcal"


def store(target: Path, data: bytes) -> bool:
    """Write ``data`` to the cache file ``target`` atomically (its folder made 0700, the file 0600, as
    ``mkstemp`` makes it); ``False``, and nothing written, when it cannot be: a cache is never fatal."""
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except Exception:  # noqa: BLE001 - an unwritable cache is never fatal
        return False
    return True
