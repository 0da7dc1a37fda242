"""Python warnings of a command: one log line each, and kept for metrics.json ``warnings``.

:func:`capture` replaces :func:`warnings.showwarning` for the life of a
command: a warning is logged on the ``detcal`` logger as one line
(``<Category>: <message>``, no source line) and remembered;
:func:`collected` returns what was remembered so the metrics.json writer can
add it to the run's ``warnings`` list.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["capture", "collected", "logged", "note"]

_seen: list[str] = []
_logged: list[str] = []  # the ones already written on the console as they came
_active: list[bool] = []
log = logging.getLogger("detcal")


def note(text: str) -> None:
    """Remember one warning line (once) for metrics.json (only while a command runs: :func:`capture`)."""
    if _active and text not in _seen:
        _seen.append(text)


def _show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
    text = f"{category.__name__}: {str(message).strip().splitlines()[0] if str(message).strip() else ''}"
    if text not in _seen:
        log.warning("%s", text)
        _logged.append(text)
        _seen.append(text)


def logged() -> list[str]:
    """The warnings of this command already logged as they came (the end summary does not repeat them)."""
    return list(_logged) if _active else []


def collected() -> list[str]:
    """The warnings of this command so far, in the order they came (none outside :func:`capture`)."""
    return list(_seen) if _active else []


@contextlib.contextmanager
def capture() -> Iterator[None]:
    """Route Python warnings through logging (one line each) while the block runs; resets the collection."""
    _seen.clear()
    _logged.clear()
    original = warnings.showwarning
    warnings.showwarning = _show
    _active.append(True)
    try:
        yield
    finally:
        _active.pop()
        warnings.showwarning = original
