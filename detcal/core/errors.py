"""Error types for detcal.

Every input error names *where* the problem is: the file, the record (index
or id within the file) and the field, so that a user can open the file and
fix it.
"""

from __future__ import annotations

from typing import Any


class DetcalError(Exception):
    """Base class of all detcal errors."""


class DetcalInputError(DetcalError, ValueError):
    """Malformed or inconsistent input data.

    Parameters
    ----------
    message:
        What is wrong, in words.
    file:
        The file that holds the bad data (or ``None`` for in-memory input).
    record:
        The record: an index, an id, or a line number (``"line 12"``).
    field:
        The field name within the record.
    """

    def __init__(self, message: str, *, file: Any = None, record: Any = None, field: str | None = None) -> None:
        self.file = None if file is None else str(file)
        self.record = record
        self.field = field
        parts = []
        if self.file is not None:
            parts.append(f"file {self.file}")
        if record is not None:
            parts.append(f"record {record}")
        if field is not None:
            parts.append(f"field '{field}'")
        where = ", ".join(parts)
        self.message = message
        super().__init__(f"{where}: {message}" if where else message)


class NotFittedError(DetcalError, RuntimeError):
    """A calibrator was used before ``fit``."""


def error_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes and contexts, outermost first (each once)."""
    chain: list[BaseException] = []
    e: BaseException | None = exc
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def detcal_error_message(exc: BaseException) -> str | None:
    """The first detcal error along ``exc``'s chain of causes (:func:`error_chain`), as its one line (what a user
    reads for an error they can fix); ``None``: none in the chain."""
    for e in error_chain(exc):
        if isinstance(e, DetcalError):
            return str(e)
    return None
