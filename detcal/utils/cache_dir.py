"""Where detcal keeps what it may reuse between runs (the composed configurations, the run records, the
input files' digests): ``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal`` (an absolute path only, as the
XDG rules say), else ``~/.cache/detcal``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_dir"]


def cache_dir() -> Path:
    """``$DETCAL_CACHE_DIR``, else ``$XDG_CACHE_HOME/detcal``, else ``~/.cache/detcal`` (read now, not cached)."""
    explicit = os.environ.get("DETCAL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "detcal"
