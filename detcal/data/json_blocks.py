"""Reading a JSON list a block of records at a time, and gathering the blocks' columns.

:class:`ListBlock` holds the bytes of a JSON list not parsed yet in one reused
buffer that starts with ``[``: a run of whole records ending at a comma is
decoded in place (the comma turned into ``]`` while it is decoded), with no
copy of the block. :func:`last_cuts` finds where a block may end: just after a
``}`` followed by a comma. A cut inside a string or a nested value cannot
parse (the string or a bracket is left open), so a cut that parses is a cut
between two top-level records. :class:`ColumnStore` writes the blocks'
columns one after the other into arrays sized once.

Used by the results reader (:mod:`detcal.data.coco_chunks`, a file) and by the
instances decoder (:mod:`detcal.data._fast_results`, the ``annotations`` list
held in memory, read through :class:`MemoryReader`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["ListBlock", "MemoryReader", "ColumnStore", "last_cuts", "BYTES_PER_RECORD_GUESS", "MAX_CUT_TRIES"]

BYTES_PER_RECORD_GUESS: int = 100
"""The first guess of the records in a JSON list: its size in bytes over this (a plain COCO result takes
about 110 bytes, an annotation more); the columns grow if the list holds more, and give back what it
did not fill (pages never written take no memory)."""

MAX_CUT_TRIES: int = 8
"""Cuts tried (the last first) before a block is read further."""

_WS = b" \t\r\n"


class ListBlock:
    """The bytes of the file not parsed yet, in one reused buffer: ``buf[0]`` is ``[`` and
    ``buf[1:fill]`` the file from byte ``base`` on, so a run of records ending at a comma is
    decoded in place (the comma turned into ``]``), with no copy of the block."""

    def __init__(self, fh: Any, first: bytes, base: int, chunk_bytes: int) -> None:
        self.fh, self.chunk, self.base, self.eof = fh, chunk_bytes, base, False
        self.buf = bytearray(max(len(first), chunk_bytes) + chunk_bytes + 1)
        self.buf[0] = 91  # "["
        self.buf[1 : 1 + len(first)] = first
        self.fill = 1 + len(first)

    @classmethod
    def of_list(cls, fh: Any, chunk_bytes: int) -> ListBlock | None:
        """The records of the open file ``fh`` after its opening ``[`` (a byte-order mark and white space
        before it skipped), or None when the file does not start as a JSON list."""
        head = fh.read(min(chunk_bytes, 1 << 16))
        start = 3 if head.startswith(b"\xef\xbb\xbf") else 0
        lead = len(head[start:]) - len(head[start:].lstrip(_WS))
        if head[start + lead : start + lead + 1] != b"[":
            return None
        return cls(fh, head[start + lead + 1 :], start + lead + 1, chunk_bytes)

    def top_up(self) -> None:
        """Read until the buffer holds at least ``chunk`` bytes of records, or the file has ended."""
        while not self.eof and self.fill - 1 < self.chunk:
            self.read()

    def read(self) -> None:
        """Append up to ``chunk`` more bytes of the file (``eof`` once none are left)."""
        need = self.fill + self.chunk
        if need > len(self.buf):
            self.buf.extend(bytes(need - len(self.buf)))
        with memoryview(self.buf) as view:
            got = self.fh.readinto(view[self.fill : need])
        self.eof = not got
        self.fill += got

    def drop(self, used: int) -> None:
        """Forget ``buf[1:used + 2]`` (the records parsed and the comma after them): the rest moves to ``buf[1:]``."""
        rest = self.fill - used - 2
        self.buf[1 : 1 + rest] = self.buf[used + 2 : self.fill]
        self.fill = 1 + rest
        self.base += used + 1


def last_cuts(buf: bytearray, fill: int) -> list[int]:
    """The positions just after the last :data:`MAX_CUT_TRIES` ``}`` followed by a comma (whitespace allowed
    in between), last first, searched backwards from ``fill``."""
    out: list[int] = []
    hi = fill
    while len(out) < MAX_CUT_TRIES:
        k = buf.rfind(b"}", 1, hi)
        if k < 0:
            break
        j = k + 1
        while j < fill and buf[j] in _WS:
            j += 1
        if j < fill and buf[j] == 44:  # ","
            out.append(k + 1)
        hi = k
    return out


class MemoryReader:
    """The ``read``/``readinto`` of a file, over bytes already in memory (a view: nothing is copied
    but the bytes read)."""

    def __init__(self, data: Any) -> None:
        self.view, self.pos = memoryview(data), 0

    def read(self, size: int) -> bytes:
        out = self.view[self.pos : self.pos + size].tobytes()
        self.pos += len(out)
        return out

    def readinto(self, into: memoryview) -> int:
        got = min(len(into), len(self.view) - self.pos)
        into[:got] = self.view[self.pos : self.pos + got]
        self.pos += got
        return got


class ColumnStore:
    """Rows of named columns written one block after the other into arrays sized once for the file
    (grown by a quarter when the guess falls short, cut to length at the end), so a reader holds the
    result and one block, not every block and then their concatenation. A column given as None stays
    None (a :class:`Detections` field the file does not carry); the first block sets the columns and
    their dtypes and trailing shapes."""

    def __init__(self, guess: int) -> None:
        self.guess, self.n = guess, 0
        self.cols: dict[str, np.ndarray | None] = {}

    def __len__(self) -> int:
        return self.n

    def add(self, cols: Mapping[str, np.ndarray | None]) -> None:
        """Append the rows of ``cols`` (the same names, and the same columns None, as the first block's)."""
        k = next((len(a) for a in cols.values() if a is not None), 0)
        if not self.cols:
            size = max(self.guess, k)
            self.cols = {
                name: None if a is None else np.empty((size,) + a.shape[1:], a.dtype) for name, a in cols.items()
            }
        if self.n + k > self._capacity():
            self._resize(max(self.n + k, self._capacity() * 5 // 4))
        for name, a in self.cols.items():
            if a is not None:
                a[self.n : self.n + k] = cols[name]
        self.n += k

    def _capacity(self) -> int:
        return next((len(a) for a in self.cols.values() if a is not None), 0)

    def _resize(self, rows: int) -> None:
        for a in self.cols.values():
            if a is not None:  # in place (realloc): the arrays are this object's own, no view of them exists
                a.resize((rows,) + a.shape[1:], refcheck=False)

    def result(self) -> dict[str, np.ndarray | None]:
        """The columns, cut to the rows written; the store is empty after."""
        if self.n < self._capacity():
            self._resize(self.n)
        cols, self.cols = self.cols, {}
        return cols
