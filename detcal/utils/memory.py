"""How much memory an allocation may take: estimate first, refuse with a sentence instead of a
MemoryError (or the operating system's OOM killer) after minutes."""

from __future__ import annotations

import os

__all__ = ["available_bytes", "gib"]


def available_bytes() -> int:
    """Memory available to a new allocation: ``MemAvailable`` of /proc/meminfo (Linux), else the physical
    memory (``os.sysconf``), else 16 GiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 16 * 2**30


def gib(n: float) -> str:
    """``n`` bytes as GiB with one decimal (``447.0 GiB``)."""
    return f"{n / 2**30:,.1f} GiB"
