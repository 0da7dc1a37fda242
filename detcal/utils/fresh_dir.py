"""Directories written whole: build the new content beside the old one, then swap.

``with fresh_dir(path) as tmp: ...write into tmp...`` leaves ``path`` holding
exactly what was written (no file of an earlier run survives, e.g. frames of
a larger synthetic set or calibrated files of another split), and leaves
``path`` untouched when the block fails. Leftover temporaries of a killed
run (hidden ``.<name>.*`` siblings) are removed by the next run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fresh_dir", "umask"]


def umask() -> int:
    """The process umask (read without changing it for longer than the call)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _sweep_leftovers(final: Path) -> None:
    for p in final.parent.glob(f".{final.name}.*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


@contextmanager
def fresh_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty temporary directory that replaces ``path`` whole when the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    _sweep_leftovers(final)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    os.chmod(tmp, 0o777 & ~umask())
    try:
        yield tmp
        old = None
        if final.exists() or final.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old.", dir=final.parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
