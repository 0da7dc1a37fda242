"""A module-level store that lives only while a block is open.

Some measures share work within one block of the pipeline (e.g. the measures of one grid read the same
per-cell summary). Such a module keeps one :class:`Scoped`: its ``items`` are only used while ``active``,
``with store.open():`` blocks may nest (the store is shared by all of them), and the items are dropped when
the outermost block closes, so nothing outlives the block that made it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Scoped"]


class Scoped:
    """A list of shared items, kept while at least one :meth:`open` block is open."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._depth = 0

    @property
    def active(self) -> bool:
        """Whether a block is open (the items may be used)."""
        return self._depth > 0

    @contextmanager
    def open(self) -> Iterator[None]:
        """A block within which the items are kept; they are cleared when the outermost block closes."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth:
                self.items.clear()
