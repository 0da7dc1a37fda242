"""Atomic output: nothing is ever left half-written.

Every writer in detcal goes through :func:`atomic_write` (or one of the
helpers below): data go to a temporary file in the target directory, are
flushed and fsync'ed, then ``os.replace``d over the target, which is atomic on
POSIX and Windows.
"""

from __future__ import annotations

import contextlib
import io as _io
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from detcal.utils.fresh_dir import umask


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """Open a temporary sibling of ``path``; on clean exit move it over ``path``.

    On an exception the temporary file is removed and ``path`` is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp creates 0600; results honour the umask
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def to_jsonable(obj: Any) -> Any:
    """Convert numpy scalars/arrays (nested in dicts/lists) to plain Python."""
    return json.loads(json.dumps(obj, default=_json_default))


def write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """Atomically write ``obj`` as JSON (numpy arrays and scalars allowed)."""
    with atomic_write(path, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=indent, default=_json_default, allow_nan=True)
        fh.write("\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    """Atomically write a text file."""
    with atomic_write(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def save_figure(fig: Any, path: str | os.PathLike, **kwargs: Any) -> None:
    """A matplotlib figure as PNG at ``path``, written atomically (a symlink at ``path`` is replaced, never
    written through); ``kwargs`` go to ``savefig`` (e.g. ``dpi``)."""
    buf = _io.BytesIO()
    fig.savefig(buf, format="png", **kwargs)
    write_bytes(path, buf.getvalue())


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Atomically write a binary file."""
    with atomic_write(path, "wb") as fh:
        fh.write(data)
